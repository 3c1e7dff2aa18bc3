"""Schemas of the off-policy ``learner`` group: what every off-policy learner has, SAC (and RLPD as a
configuration of it), the Q-gradient actors and EXPO."""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from fractions import Fraction
from typing import Any, List, Mapping, Optional

from omegaconf import MISSING

from genpol.config.base import ACTIVATION_NAMES, require
from genpol.fields import FixedFields

UTD_MAX_DENOMINATOR = 1000  # learner.utd is read as the nearest fraction with a denominator up to this


def utd_fraction(utd: float) -> Fraction:
    """``learner.utd`` as the exact ratio the off-policy learners accrue (1/12 for 0.0833...)."""
    return Fraction(utd).limit_denominator(UTD_MAX_DENOMINATOR)


@dataclass
class OffPolicyConfig(FixedFields):
    """What every off-policy learner's config has (``genpol.algorithms.offpolicy``): replay, critics,
    their targets and optimizer, the update-to-data ratio, logging iterations. A learner's own
    config subclasses it (SAC's below; a learner of your own, ``docs/tutorials/add-a-learner.md``).
    Observations and rewards reach the replay raw: env.normalize_obs / normalize_reward are
    ignored (running statistics would make stored transitions stale).
    """

    name: str = MISSING
    """Learner name; selects the learner (each learner's config sets its own)."""
    gamma: float = 0.99
    """Discount factor."""
    tau: float = 0.005
    """Polyak coefficient of the target critics."""
    lr: float = 3e-4
    """Adam learning rate of actor, critics and temperature (SB3 and RLPD use one rate)."""
    critic_lr: Optional[float] = None
    """Adam learning rate of the critics (None: lr). CleanRL's SAC uses 1e-3 (its q_lr) with an actor at
    3e-4; Ding & Jin's and CPQL's consistency code fix it at 3e-4 whatever their lr (1e-3 and 3e-5 on
    some tasks)."""
    batch_size: int = 256
    """Transitions per gradient step."""
    buffer_size: int = 1_000_000
    """Replay capacity in transitions (preallocated: buffer_size x ((2 obs_dim + act_dim + 1) x 4 + 1) bytes,
    ``ReplayBuffer.bytes_for``; twice that on CPU with save_replay, for each checkpoint's copy)."""
    learning_starts: int = 100
    """Env steps of uniform random actions before learning starts (SB3 100, the zoo 10000, RLPD 5000)."""
    utd: float = 1
    """Critic gradient steps per env transition (update-to-data ratio; N envs: N x utd per vector step). Below 1
    or not whole: a fraction, read as the nearest with a denominator up to 1000 (1/12 = 0.0833...) and accrued
    exactly, each vector step taking the whole steps due (0.25 with 1 env: one step every 4th env step, as
    SB3's train_freq=4 or Ding & Jin's online loop): ``OffPolicyAlgorithm.gradient_steps_due``. A whole value
    is kept an int. The rlpd batching (and EXPO) cut a round into utd minibatches: a whole number there."""
    target_update_interval: int = 1
    """Critic steps between Polyak updates."""
    num_qs: int = 2
    """Critics in the ensemble."""
    num_min_qs: Optional[int] = None
    """Size of the random subset whose minimum forms the target (None: all critics, SB3's min)."""
    critic_layer_norm: bool = False
    """LayerNorm after every hidden layer of each critic (RLPD)."""
    critic_layer_norm_eps: float = 1e-5
    """Epsilon of those LayerNorms: torch's 1e-5; RLPD's and EXPO's code (flax) use 1e-6, which
    +experiment=rlpd and learner=expo set (bench/parity/rlpd.py: at 1e-5 the critic gradients differ
    by 5e-5 relative after one step, at 1e-6 they agree to 1e-15)."""
    critic_hidden_sizes: List[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer widths of each critic."""
    critic_activation: str = "relu"
    """Activation of the critics."""
    critic_init: str = "torch"
    """``torch`` (PyTorch's default, as SB3) or ``xavier`` (RLPD)."""
    critic_reduction: str = "sb3"
    """Critic loss: ``sb3`` = 0.5 sum_i MSE(Q_i, y); ``mean`` = mean_i MSE(Q_i, y) (RLPD); ``sum`` = sum_i MSE(Q_i, y)
    (Diffusion-QL's and the consistency references' code: twice sb3's)."""
    offline_ratio: float = 0.0
    """Share of every batch drawn from the offline dataset (dataset.path; RLPD 0.5)."""
    max_grad_norm: Optional[float] = None
    """Per-network gradient-norm clip (None: none, as SB3 and RLPD)."""
    iteration_steps: int = 1000
    """Env steps per logging iteration (the unit of pipeline.checkpoint_every and eval_every)."""
    bootstrap_truncation: bool = True
    """Where a time limit cut an episode, store the transition as not done, so its target bootstraps from
    Q(final observation) (genpol's default, as stable-baselines3 with handle_timeout_termination); false stores
    it done like a termination (Ding & Jin's online code, whose SB3 buffer runs without that handling)."""
    save_replay: bool = True
    """Save the replay buffer in checkpoints (needed for an exact resume; costs its size on disk)."""
    compile: bool = False
    """Compile the critic and actor steps with torch.compile."""

    def __post_init__(self) -> None:
        require(0.0 < self.gamma <= 1.0, "learner.gamma", "in (0, 1]", self.gamma)
        require(0.0 < self.tau <= 1.0, "learner.tau", "in (0, 1]", self.tau)
        require(self.lr > 0, "learner.lr", "> 0", self.lr)
        if self.critic_lr is not None:
            require(self.critic_lr > 0, "learner.critic_lr", "> 0 or null", self.critic_lr)
        require(self.batch_size >= 1, "learner.batch_size", ">= 1", self.batch_size)
        require(self.buffer_size >= self.batch_size, "learner.buffer_size", f">= batch_size ({self.batch_size})",
                self.buffer_size)
        require(self.learning_starts >= 0, "learner.learning_starts", ">= 0", self.learning_starts)
        require(math.isfinite(self.utd) and self.utd > 0, "learner.utd", "> 0 and finite", self.utd)
        # a LayerNorm of eps <= 0 divides by zero on a constant row: every Q value NaN
        require(self.critic_layer_norm_eps > 0, "learner.critic_layer_norm_eps", "> 0", self.critic_layer_norm_eps)
        require(utd_fraction(self.utd) > 0, "learner.utd", f">= 1/{UTD_MAX_DENOMINATOR} (smaller rounds to no "
                "gradient steps at all)", self.utd)
        if float(self.utd).is_integer():  # a whole ratio stays an int: learners loop over range(num_envs * utd)
            self.utd = int(self.utd)
        require(self.target_update_interval >= 1, "learner.target_update_interval", ">= 1",
                self.target_update_interval)
        require(self.num_qs >= 1, "learner.num_qs", ">= 1", self.num_qs)
        if self.num_min_qs is not None:
            require(1 <= self.num_min_qs <= self.num_qs, "learner.num_min_qs", f"in [1, num_qs={self.num_qs}]",
                    self.num_min_qs)
        require(len(self.critic_hidden_sizes) >= 1 and all(w >= 1 for w in self.critic_hidden_sizes),
                "learner.critic_hidden_sizes", "non-empty positive widths", self.critic_hidden_sizes)
        require(self.critic_activation in ACTIVATION_NAMES, "learner.critic_activation",
                f"one of {ACTIVATION_NAMES}", self.critic_activation)
        require(self.critic_init in ("torch", "xavier"), "learner.critic_init", "torch or xavier", self.critic_init)
        require(self.critic_reduction in ("sb3", "mean", "sum"), "learner.critic_reduction", "sb3, mean or sum",
                self.critic_reduction)
        require(0.0 <= self.offline_ratio <= 1.0, "learner.offline_ratio", "in [0, 1]", self.offline_ratio)
        if self.max_grad_norm is not None:
            require(self.max_grad_norm > 0, "learner.max_grad_norm", "> 0 or null", self.max_grad_norm)
        require(self.iteration_steps >= 1, "learner.iteration_steps", ">= 1", self.iteration_steps)

    @classmethod
    def unread_fields(cls, values: Mapping[str, Any]) -> dict[str, str]:
        """The fields that a run with these field ``values`` (``{"ent_coef": "0.1", ...}``) never reads, each with
        why: validation refuses one moved from its default (the run would train as if it had not been), and a
        resume and ``genpol.report`` ignore them (``scaffold.unread_keys``). A class method on the values, so that
        a saved run's config.yaml is judged by the same rule. Each learner's schema names its own."""
        return {}


@dataclass
class SACConfig(OffPolicyConfig):
    """Soft actor-critic with a Q-ensemble and replay (defaults: stable-baselines3's SAC).

    RLPD (``+experiment=rlpd``) is this learner with 10 LayerNorm critics, subset-min 2, UTD 20
    with RLPD's batching, target entropy -|A|/2, the mean-Q actor loss and ``offline_ratio`` 0.5.
    """

    name: str = "sac"
    """Learner name; selects the learner."""
    batching: str = "sb3"
    """``sb3``: a fresh batch and an actor step for every critic step; ``rlpd``: one batch of batch_size x utd
    cut into utd critic minibatches, then one actor and temperature step on the last; ``cleanrl``: CleanRL's
    ``sac_continuous_action.py``, a fresh batch per critic step and, every actor_update_interval critic
    steps, that many actor steps on it, each followed by a temperature step on a new sample."""
    actor_update_interval: int = 1
    """``cleanrl`` batching: critic steps between actor rounds, each round taking this many actor (and
    temperature) steps, so actor and critic steps stay equal in number (CleanRL's policy_frequency, 2)."""
    temperature_lr: Optional[float] = None
    """Adam learning rate of the temperature (None: lr; CleanRL uses its q_lr, 1e-3)."""
    actor_q_reduction: str = "min"
    """Q in the actor loss: ``min`` over critics (SB3) or ``mean`` (RLPD)."""
    ent_coef: str = "auto"
    """Temperature: ``auto`` (learned, starting at init_temperature) or a fixed number such as ``0.1``."""
    init_temperature: float = 1.0
    """Initial temperature alpha when learned."""
    target_entropy_scale: float = -1.0
    """Target entropy = target_entropy_scale x |A| (SB3 -1, RLPD -0.5)."""
    temperature_loss: str = "log_alpha"
    """``log_alpha``: -log alpha (log pi + H) as SB3; ``alpha``: alpha (H - H_target) as RLPD."""
    backup_entropy: bool = True
    """Subtract alpha log pi(a'|s') in the TD target."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.batching in ("sb3", "rlpd", "cleanrl"), "learner.batching", "sb3, rlpd or cleanrl", self.batching)
        if self.batching == "rlpd":
            require(float(self.utd).is_integer(), "learner.utd", "a whole number with batching=rlpd (utd minibatches "
                    "per round)", self.utd)
        require(self.actor_update_interval >= 1, "learner.actor_update_interval", ">= 1", self.actor_update_interval)
        if self.actor_update_interval > 1:
            require(self.batching == "cleanrl", "learner.batching", "cleanrl with actor_update_interval > 1",
                    self.batching)
        if self.temperature_lr is not None:
            require(self.temperature_lr > 0, "learner.temperature_lr", "> 0 or null", self.temperature_lr)
        require(self.actor_q_reduction in ("min", "mean"), "learner.actor_q_reduction", "min or mean",
                self.actor_q_reduction)
        if self.ent_coef != "auto":
            try:
                fixed = float(self.ent_coef)
            except ValueError:
                fixed = -1.0
            # a string field, which the finite check does not read: alpha = inf made the actor loss NaN
            require(0 <= fixed < math.inf, "learner.ent_coef", "auto or a finite number >= 0", self.ent_coef)
        require(self.init_temperature > 0, "learner.init_temperature", "> 0", self.init_temperature)
        require(self.temperature_loss in ("log_alpha", "alpha"), "learner.temperature_loss", "log_alpha or alpha",
                self.temperature_loss)

    @classmethod
    def unread_fields(cls, values: Mapping[str, Any]) -> dict[str, str]:
        unread = super().unread_fields(values)
        if str(values.get("ent_coef", "auto")) != "auto":  # the learned temperature's settings
            why = f"learner.ent_coef={values['ent_coef']} fixes the temperature (ent_coef=auto learns it)"
            unread.update(dict.fromkeys(TEMPERATURE_FIELDS, why))
        return unread


# SAC's fields that only a learned temperature (ent_coef=auto) reads
TEMPERATURE_FIELDS = ("init_temperature", "temperature_lr", "target_entropy_scale", "temperature_loss")


@dataclass
class QGradientConfig(SACConfig):
    """Consistency-AC (Ding & Jin 2024) / Diffusion-QL: a Q-gradient actor on SAC's replay and twin
    critics, TD targets from an EMA actor, no entropy term (``genpol.algorithms.qgradient``)."""

    name: str = "consistency_ac"
    """Learner name; selects the learner."""
    eta: float = 1.0
    """Weight of the normalized Q-loss (8.3: 1.0 halfcheetah/walker-medium, 0.1 hopper-medium)."""
    bc_coef: float = 1.0
    """Weight of the head's imitation loss on the batch's actions (the CT loss); 0 online from scratch."""
    actor_ema_decay: float = 0.995
    """EMA decay of the actor that draws the TD target's next actions."""
    actor_ema_every: int = 5
    """Actor steps between EMA updates."""
    actor_ema_start: int = 1000
    """Actor step from which the EMA averages (before: see actor_ema_warmup)."""
    actor_ema_warmup: str = "copy"
    """The EMA actor before actor_ema_start: ``copy`` of the actor every actor_ema_every steps (genpol);
    ``hold``, left at the initial actor, with the references' step count (Ding & Jin's and Diffusion-QL's
    ``step_ema``: averages after actor steps 1001, 1006, ...; ``heads.consistency_training.ema_update_due``)."""
    q_norm: bool = False
    """Divide the TD target by its batch std: y / (std(y) + 1e-6), unbiased std (Ding & Jin's code's
    ``q_norm``, on 12 of their 20 offline tasks; their OnlineAgent has none)."""
    max_q_backup_samples: int = 1
    """EMA-actor samples per next state in the TD target; each target critic takes its maximum over them
    before the minimum over critics (1: one sample; Ding & Jin's ``max_q_backup``, on 5 of their 6 antmaze
    tasks, is 10)."""
    act_candidates: int = 50
    """Head samples per state when acting, one drawn with probability softmax(min Q) (1: the head's sample)."""
    explore_initial: float = 1.0
    """Probability of a uniform random action at the start (8.4's epsilon schedule)."""
    explore_final: float = 0.01
    """... decayed linearly to this ..."""
    explore_fraction: float = 0.1
    """... over this fraction of total_steps."""
    ent_coef: str = "0"
    """No entropy term (fixed at 0; the field is SAC's)."""
    critic_hidden_sizes: List[int] = field(default_factory=lambda: [256, 256, 256])
    """Hidden layer widths of each critic (reference: 3 x 256 Mish)."""
    critic_activation: str = "mish"
    """Activation of the critics."""
    max_grad_norm: Optional[float] = 1.0
    """Gradient-norm clip of actor and critics (reference: 1-10 per task)."""
    offline_lr_decay: bool = False
    """Offline phase (pipeline=offline_to_online): actor and critic lr decay from lr to 0 along a cosine over
    pipeline.pretrain_steps (the references' --lr_decay); online fine-tuning then runs at lr (critic_lr)."""
    offline_lr_decay_every: int = 1
    """Offline gradient steps per step of that cosine: the rate changes once every this many steps (1: every
    step; Ding & Jin's code steps its scheduler once per ``train`` call, 50 000 steps in their offline.py)."""
    offline_lr_decay_horizon: Optional[int] = None
    """The cosine's length in its own steps (None: the phase, ceil(pretrain_steps / offline_lr_decay_every)).
    Ding & Jin's: T_max = num_epochs (2000, 1000 on some tasks), which with 40 scheduler steps in a 2M-step
    run leaves the rate at 0.999 lr."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.eta >= 0, "learner.eta", ">= 0", self.eta)
        require(self.bc_coef >= 0, "learner.bc_coef", ">= 0", self.bc_coef)
        require(self.eta > 0 or self.bc_coef > 0, "learner.eta", "> 0 or bc_coef > 0 (the actor needs a loss)", self.eta)
        if self.eta > 0:  # L_Q pairs two critics; one failed at the first actor step, after learning_starts
            require(self.num_qs >= 2, "learner.num_qs", ">= 2 with eta > 0 (L_Q pairs two critics)", self.num_qs)
        require(0.0 < self.actor_ema_decay < 1.0, "learner.actor_ema_decay", "in (0, 1)", self.actor_ema_decay)
        require(self.actor_ema_every >= 1, "learner.actor_ema_every", ">= 1", self.actor_ema_every)
        require(self.actor_ema_warmup in ("copy", "hold"), "learner.actor_ema_warmup", "copy or hold",
                self.actor_ema_warmup)
        require(self.max_q_backup_samples >= 1, "learner.max_q_backup_samples", ">= 1", self.max_q_backup_samples)
        if self.q_norm:  # the std of a single target is undefined
            require(self.batch_size >= 2, "learner.batch_size", ">= 2 with q_norm", self.batch_size)
        require(self.offline_lr_decay_every >= 1, "learner.offline_lr_decay_every", ">= 1",
                self.offline_lr_decay_every)
        if self.offline_lr_decay_horizon is not None:
            require(self.offline_lr_decay_horizon >= 1, "learner.offline_lr_decay_horizon", ">= 1 or null",
                    self.offline_lr_decay_horizon)
        require(self.act_candidates >= 1, "learner.act_candidates", ">= 1", self.act_candidates)
        for key in ("explore_initial", "explore_final"):
            require(0.0 <= getattr(self, key) <= 1.0, f"learner.{key}", "in [0, 1]", getattr(self, key))
        require(0.0 < self.explore_fraction <= 1.0, "learner.explore_fraction", "in (0, 1]", self.explore_fraction)
        require(self.ent_coef in ("0", "0.0"), "learner.ent_coef", "0 (a Q-gradient actor has no entropy term)",
                self.ent_coef)
        require(self.batching == "sb3", "learner.batching", "sb3 (one actor step per critic step)", self.batching)
        require(not self.compile, "learner.compile", "false (not supported by this learner yet)", self.compile)

    @classmethod
    def unread_fields(cls, values: Mapping[str, Any]) -> dict[str, str]:
        unread = super().unread_fields(values)
        unread.update(dict.fromkeys((*TEMPERATURE_FIELDS, "backup_entropy"),
                                    "a Q-gradient actor has no entropy term (ent_coef is 0)"))
        unread["actor_q_reduction"] = ("the Q-loss takes one of two critics drawn at random per step (L_Q), "
                                       "not a reduction over the ensemble")
        return unread

    def total_steps_clock(self, trained: int, saved_total: int, new_total: int) -> tuple[str, str] | None:
        """The epsilon of uniform random actions decays over explore_fraction x total_steps: another budget
        re-times it, unless the decay ended under both budgets by ``trained`` env steps."""
        ended = trained >= self.explore_fraction * max(saved_total, new_total)
        if self.explore_initial == self.explore_final or ended:
            return None
        return (f"decays its exploration epsilon from {self.explore_initial} to {self.explore_final} over "
                f"learner.explore_fraction={self.explore_fraction} of total_steps={saved_total}",
                "the epsilon of every env step left in the decay")


@dataclass
class ExpoConfig(SACConfig):
    """EXPO (ALGORITHMS.md 7): RLPD's critics and batching around an expressive base policy (the
    ``policy`` group: any head with imitation and batched candidates, DDPM diffusion by default),
    trained only by imitation, and a small tanh-Gaussian edit policy; it acts by argmax-Q over base
    samples and their edits. Defaults: EXPO's scripts (10 LayerNorm critics of 256 x 3, subset-min 2,
    no entropy backup, UTD 20, half of every batch offline, 5000 random steps)."""

    name: str = "expo"
    """Learner name; selects the learner."""
    num_samples: int = 8
    """Base-policy samples per state of the on-the-fly policy (EXPO's scripts: 8)."""
    n_edit: int = 8
    """How many of those are also edited (the first n_edit); the argmax runs over num_samples + n_edit."""
    edit_scale: float = 0.05
    """beta: an edit changes each action dimension by at most this (a' = a + beta u)."""
    td_subsets: str = "independent"
    """The TD target's next action: ``independent`` (EXPO's code, ``update_critic``): the candidates are
    ranked by the minimum of one random subset of num_min_qs target critics, and the winner is valued
    by the minimum of a second subset drawn independently; ``shared`` (genpol before 2026-12-02): one
    subset ranks and values, a more optimistic target (the maximum over candidates of that minimum)."""
    clip_edits: bool = False
    """Clip the edited action a + beta u to [-1, 1] where it is ranked, valued and trained on (genpol
    before 2026-12-02). EXPO's code does not (false). The executed action is in the box either way."""
    edit_hidden_sizes: List[int] = field(default_factory=lambda: [256, 256, 256])
    """Hidden layer widths of the edit policy (on s and a)."""
    edit_activation: str = "relu"
    """Activation of the edit policy."""
    base_ema_tau: float = 0.001
    """EMA rate of the acting copy of the base policy (ema <- (1 - tau) ema + tau base, per base step)."""
    base_weight_decay: float = 0.0
    """Decoupled weight decay of the base policy's optimizer: 0 is Adam (genpol's); > 0 is AdamW, which
    decays every parameter by lr x base_weight_decay per step at the scheduled lr, as EXPO's
    ``optax.adamw`` (its default 1e-4, unmasked: biases and LayerNorms decay too)."""
    compile: bool = False
    """Compile each critic step with torch.compile, its TD target included: the base's whole sampling chain,
    the edits and the target critics' ranking of the candidates, as EXPO's jitted update fuses them (the base,
    edit and temperature steps stay eager). The first step compiles: 42 s as shipped, 80 s at EXPO's own base
    network, on one thread of a loaded 2-core CPU (docs/concepts/expo.md)."""
    base_lr_decay_steps: Optional[int] = 3_000_000
    """Policy steps over which the base's and the edit policy's learning rates fall from ``lr`` to 0
    along a cosine, then stay at 0 (EXPO's optax.cosine_decay_schedule over 3e6 steps, one schedule
    for both actors); null keeps ``lr``."""
    learning_starts: int = 5000
    """Env steps of uniform random actions before learning starts."""
    utd: int = 20
    """Critic minibatches per env step; one base and one edit step follow them."""
    batching: str = "rlpd"
    """EXPO uses RLPD's batching only."""
    num_qs: int = 10
    """Critics in the ensemble."""
    num_min_qs: Optional[int] = 2
    """Size of the random subset whose minimum ranks candidates and forms the target."""
    critic_layer_norm: bool = True
    """LayerNorm after every hidden layer of each critic."""
    critic_layer_norm_eps: float = 1e-6
    """Epsilon of those LayerNorms (EXPO's code: flax's 1e-6)."""
    critic_hidden_sizes: List[int] = field(default_factory=lambda: [256, 256, 256])
    """Hidden layer widths of each critic."""
    critic_init: str = "xavier"
    """``torch`` or ``xavier`` (jaxrl's, EXPO's)."""
    critic_reduction: str = "mean"
    """Critic loss: mean over heads and batch of (Q_i - y)^2."""
    actor_q_reduction: str = "mean"
    """Q in the edit loss: the ensemble mean (EXPO)."""
    target_entropy_scale: float = -0.5
    """Target entropy of the edit policy = target_entropy_scale x |A| (EXPO: -|A| / 2), plus
    |A| log edit_scale with adjust_target_entropy."""
    adjust_target_entropy: bool = True
    """Add |A| log edit_scale to the target (the flag of that name in EXPO's code): the temperature
    tracks the entropy of the edited action a + beta u, which is that of u plus |A| log beta and so at
    most |A| (log 2 + log beta) (Hopper at beta 0.05: -6.9, below the target -1.5). Without the
    adjustment (false: EXPO's default, and genpol's before 2026-12-01) the target is out of reach, alpha
    grows without bound (7108 after 25k steps on Hopper) and the edit policy is driven to uniform noise."""
    temperature_loss: str = "alpha"
    """Temperature loss form (jaxrl's alpha (H - H_target))."""
    backup_entropy: bool = False
    """EXPO backs up no entropy."""
    offline_ratio: float = 0.5
    """Share of every batch drawn from dataset.path (set it to 0 to learn from online data only)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.num_samples >= 1, "learner.num_samples", ">= 1", self.num_samples)
        require(0 <= self.n_edit <= self.num_samples, "learner.n_edit", f"in [0, num_samples={self.num_samples}]",
                self.n_edit)
        require(self.edit_scale > 0, "learner.edit_scale", "> 0", self.edit_scale)
        require(self.td_subsets in ("independent", "shared"), "learner.td_subsets", "independent or shared",
                self.td_subsets)
        require(len(self.edit_hidden_sizes) >= 1 and all(w >= 1 for w in self.edit_hidden_sizes),
                "learner.edit_hidden_sizes", "non-empty positive widths", self.edit_hidden_sizes)
        require(self.edit_activation in ACTIVATION_NAMES, "learner.edit_activation", f"one of {ACTIVATION_NAMES}",
                self.edit_activation)
        require(self.base_weight_decay >= 0, "learner.base_weight_decay", ">= 0", self.base_weight_decay)
        require(0.0 < self.base_ema_tau <= 1.0, "learner.base_ema_tau", "in (0, 1]", self.base_ema_tau)
        require(self.base_lr_decay_steps is None or self.base_lr_decay_steps >= 1, "learner.base_lr_decay_steps",
                ">= 1 or null", self.base_lr_decay_steps)
        require(self.batching == "rlpd", "learner.batching", "rlpd for EXPO", self.batching)
        require(self.actor_q_reduction == "mean", "learner.actor_q_reduction", "mean for EXPO's edit loss",
                self.actor_q_reduction)

    @classmethod
    def unread_fields(cls, values: Mapping[str, Any]) -> dict[str, str]:
        unread = super().unread_fields(values)
        # EXPO's code backs up none: the policy that picks a' (argmax-Q over base samples and their edits) has no
        # log-prob to back up. RLPD's bundle sets backup_entropy=true, and users coming from it may set it here
        unread["backup_entropy"] = "EXPO's TD target has no entropy term (its argmax-Q policy has no log-prob)"
        return unread
