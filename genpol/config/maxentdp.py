"""Schema of MaxEntDP's ``learner`` group (``genpol.algorithms.maxentdp``; ALGORITHMS.md 14c)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, Dict, List, Mapping, Optional

from genpol.config.base import require
from genpol.config.offpolicy import OffPolicyConfig
from genpol.errors import ConfigError
from genpol.heads.vp_schedule import log_prob_ceiling

# MaxEntDP's README / run.sh: --config.temp per MuJoCo task (v3 there; matched here by the name before "-v")
AUTHORS_TEMPERATURES: Dict[str, float] = {"HalfCheetah": 0.2, "Humanoid": 0.02, "Ant": 0.05, "Walker2d": 0.01,
                                          "Hopper": 0.05, "Swimmer": 0.01}


@dataclass
class MaxEntDPConfig(OffPolicyConfig):
    """MaxEntDP (Dong, Cheng, Zhang, ICML 2025): a diffusion policy trained by Q-weighted noise estimation
    toward exp(Q / alpha), twin critics with the soft backup through an estimate of log pi. Defaults: the
    authors' code (``max_entropy_learner_config.py``, ``train_score_matching_online.py``)."""

    name: str = "maxentdp"
    """Learner name; selects the learner."""
    ent_coef: str = "per_env"
    """Temperature alpha: ``per_env`` (the authors' fixed value for the env, ``per_env_temperatures``, else
    ``default_temperature``), a fixed number such as ``0.05``, or ``auto`` (learned as SAC's, on -log pi_hat,
    toward target_entropy_scale x |A|: genpol's extension, the authors fix alpha)."""
    per_env_temperatures: Dict[str, float] = field(default_factory=lambda: dict(AUTHORS_TEMPERATURES))
    """The fixed temperature of ``ent_coef=per_env`` by task name (env.id before ``-v``); the authors' run.sh values."""
    default_temperature: float = 0.1
    """Temperature of ``ent_coef=per_env`` for a task not in per_env_temperatures (the authors' config default)."""
    target_entropy_scale: float = 0.5
    """``ent_coef=auto`` only: target entropy = target_entropy_scale x |A|, in nats of the estimate -log pi_hat.
    It must lie above the estimate's floor, ``-log_prob_ceiling(log_prob_levels)`` per dimension (-0.93 at 20
    levels, +0.14 at 5): SAC's -|A| lies below it up to 21 levels, the default 20 included. 0.5 is not tuned
    (the authors fix alpha); their fixed temperatures settle at 0.65-0.72 nats per dimension of the 5-level
    estimate on Hopper and HalfCheetah (the CPU-sized runs of docs/benchmarks.md). Read only with ``auto``: a
    run saved with the old default, -1, resumes under another ``ent_coef``."""
    temperature_loss: str = "log_alpha"
    """``ent_coef=auto`` only: ``log_alpha`` (SB3's -log alpha (log pi + H)) or ``alpha`` (RLPD's)."""
    backup_entropy: bool = True
    """Subtract alpha log pi_hat(a'|s') in the TD target (the authors' backup_entropy; false: a cheap ablation
    that skips the log-prob estimate)."""
    candidates: int = 500
    """K: truncated-normal candidates of the clean action per batch row in the QNE target (score_samples_num)."""
    log_prob_levels: int = 20
    """T_lp: noise levels of the log-prob estimate's Riemann sum (T_log_prob)."""
    log_prob_draws: int = 50
    """N: noise draws per level of the log-prob estimate (samples_num)."""
    chunk_rows: int = 4096
    """Largest number of rows in one network call of the QNE critic pass (B K rows) and of the log-prob
    estimate (B N T_lp rows): bounds their memory (a row of a 256-wide network is ~1 KB per layer). On this
    CPU small chunks are also faster (paper sizes, Hopper: 2.9 s per step at 4096, 4.0 s at 65536); on a GPU
    raise it."""
    eval_candidates: int = 10
    """Evaluation acts with the argmax of the target critics' minimum over this many policy samples
    (eval_candidate_num; 1: the policy's own sample, the authors' eval_action_selection=False)."""
    actor_lr_decay_steps: Optional[int] = 2_000_000
    """Actor steps over which the actor's learning rate falls from lr to 0 along a cosine (optax's
    cosine_decay_schedule; the authors' decay_steps); null keeps lr."""
    learning_starts: int = 10_000
    """Env steps of uniform random actions before learning starts (the authors' start_training)."""
    critic_init: str = "xavier"
    """Critic init: xavier-uniform weights, zero biases (jaxrl5's StateActionValue)."""
    critic_reduction: str = "sum"
    """Critic loss: sum_i MSE(Q_i, y), each critic's own MSE (the authors take one gradient per critic)."""
    critic_hidden_sizes: List[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer widths of each critic (ReLU)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.ent_coef not in ("per_env", "auto"):
            try:
                fixed = float(self.ent_coef)
            except ValueError:
                fixed = -1.0
            require(0 < fixed < math.inf, "learner.ent_coef", "per_env, auto or a finite number > 0", self.ent_coef)
        require(all(0 < value < math.inf for value in self.per_env_temperatures.values()),
                "learner.per_env_temperatures", "positive finite values", dict(self.per_env_temperatures))
        require(self.default_temperature > 0, "learner.default_temperature", "> 0", self.default_temperature)
        require(self.ent_coef != "auto" or self.backup_entropy, "learner.backup_entropy",
                "true with ent_coef=auto (the temperature learns from the backup's log pi estimate)", self.backup_entropy)
        require(self.temperature_loss in ("log_alpha", "alpha"), "learner.temperature_loss", "log_alpha or alpha",
                self.temperature_loss)
        for key in ("candidates", "log_prob_levels", "log_prob_draws", "chunk_rows", "eval_candidates"):
            require(getattr(self, key) >= 1, f"learner.{key}", ">= 1", getattr(self, key))
        if self.ent_coef == "auto":  # a target below the estimate's floor: alpha falls every step, to NaN losses
            floor = -log_prob_ceiling(self.log_prob_levels)
            require(self.target_entropy_scale > floor, "learner.target_entropy_scale",
                    f"above {floor:.3f}, the smallest entropy per dimension the {self.log_prob_levels}-level log pi "
                    "estimate can report (ent_coef=auto)", self.target_entropy_scale)
        if self.actor_lr_decay_steps is not None:
            require(self.actor_lr_decay_steps >= 1, "learner.actor_lr_decay_steps", ">= 1 or null",
                    self.actor_lr_decay_steps)
        require(self.num_min_qs in (None, self.num_qs), "learner.num_min_qs",
                "null (the minimum over every critic, as the authors')", self.num_min_qs)
        require(not self.compile, "learner.compile", "false (MaxEntDP's steps run eager)", self.compile)

    @classmethod
    def unread_fields(cls, values: Mapping[str, Any]) -> dict[str, str]:
        unread = super().unread_fields(values)
        ent_coef = str(values.get("ent_coef", "per_env"))
        if ent_coef != "auto":  # target_entropy_scale's default moved from -1 to 0.5 on 2026-12-07: runs saved
            # before resume under a fixed temperature, which never read it
            unread.update(dict.fromkeys(("target_entropy_scale", "temperature_loss"),
                                        f"learner.ent_coef={ent_coef} fixes the temperature (ent_coef=auto learns it)"))
        if ent_coef not in ("per_env", "auto"):
            unread.update(dict.fromkeys(("per_env_temperatures", "default_temperature"),
                                        f"learner.ent_coef={ent_coef} is the temperature (per_env and auto read them)"))
        return unread

    def temperature(self, env_id: str) -> float:
        """The fixed temperature of ``env_id`` (``per_env``), or the number ``ent_coef`` names; for ``auto``,
        the learned temperature's initial value, chosen the same way as ``per_env``."""
        if self.ent_coef not in ("per_env", "auto"):
            return float(self.ent_coef)
        task = env_id.split("-v")[0]
        # keys match case: +learner.per_env_temperatures.hopper=0.3 (Hydra's own hint for a new key) sat beside the
        # authors' Hopper and trained at Hopper's 0.05, and on Pendulum-v1 a key pendulum matched nothing
        other_case = [key for key in self.per_env_temperatures  # the user's keys: the authors' stay whatever the env
                      if key != task and key.lower() == task.lower() and key not in AUTHORS_TEMPERATURES]
        if other_case:
            raise ConfigError(f"learner.per_env_temperatures.{other_case[0]} is not env.id={env_id}'s task {task} "
                              f"(keys match case): set learner.per_env_temperatures.{task} instead")
        return float(self.per_env_temperatures.get(task, self.default_temperature))
