"""What every off-policy learner is made of, and what the off-policy loop calls.

The loop (``genpol.runners.offpolicy``) needs ``act``, ``process_env_step``, ``ready``, ``update``,
the replay and the gradient-step count, and the checkpoint's ``state_dict``. The learners (SAC and
RLPD, EXPO on SAC, the Q-gradient actors) share more than that interface, so it lives here once:

* a replay buffer with the offline store it mixes into each batch (``MixedSampler``);
* a Q-ensemble, its Polyak-averaged target, and the critic's Adam;
* the actor's Adam over the head's trainable parameters;
* acting with uniform random actions until ``learning_starts``, the head's samples after;
* one TD step of the critics (``critic_step``), whose target ``_td_target`` each learner defines
  (SAC's soft backup, EXPO's on-the-fly choice, the Q-gradient actors' EMA actor);
* the generators of exploration and of the subset-min, and the step counters;
* the checkpoint of all of the above (the replay only with ``save_replay``).

``cfg`` is the learner's config group (a ``SACConfig`` or a subclass of it).
"""

from __future__ import annotations

import abc
import copy
import dataclasses
import math
from fractions import Fraction
from typing import Any, Sequence

import torch
from torch import nn

from genpol.algorithms.base import Algorithm
from genpol.config.offpolicy import utd_fraction
from genpol.config.pipeline import ONLINE_RESETS
from genpol.errors import ConfigError
from genpol.heads.base import Capability, PolicyHead, check_capabilities
from genpol.qensemble import QEnsemble, polyak_update
from genpol.memory import require_memory
from genpol.storage.replay import MixedSampler, OfflineReplay, ReplayBatch, ReplayBuffer
from genpol.updaters.sac_losses import critic_loss
from genpol.updaters.schedules import set_lr


def compile_step(function: Any) -> Any:
    """``torch.compile`` for a step's forward computation (its backward is compiled with it). The
    noise comes from torch's generator in the eager order (inductor's ``fallback_random``), so
    compiled and eager runs differ by float rounding only."""
    return torch.compile(function, fullgraph=True, dynamic=False, options={"fallback_random": True})


class OffPolicyAlgorithm(Algorithm):
    """Base of the off-policy learners (see the module docstring).

    Args:
        head: the policy head (its capabilities are checked against the subclass's ``needs``).
        cfg: the learner's config group.
        num_envs, obs_dim, act_dim: the env's sizes.
        capacity: replay capacity in transitions.
        device: where the networks and the replay live.
        seed: seed of the replay's, exploration's and subset-min's generators.
        offline: the offline transitions mixed into each batch (``cfg.offline_ratio`` > 0), or None.
    """

    on_policy = False
    online_options: frozenset[str] = frozenset()
    """Config fields ``change_options`` can set on the built learner (read at every step, or rates)."""

    def __init__(self, head: PolicyHead, cfg: Any, *, num_envs: int, obs_dim: int, act_dim: int, capacity: int,
                 device: torch.device, seed: int = 0, offline: OfflineReplay | None = None):
        super().__init__(head)
        self.cfg = cfg
        self.num_envs, self.obs_dim, self.act_dim = num_envs, obs_dim, act_dim
        self.device = device
        self.critic = self._new_critic()
        self.critic_target = copy.deepcopy(self.critic).requires_grad_(False)
        self.num_min_qs = cfg.num_min_qs or cfg.num_qs
        self.actor_params = [p for p in head.parameters() if p.requires_grad]
        self.critic_params = list(self.critic.parameters())
        # fused: one kernel per optimizer step instead of ~10 foreach passes over the parameters
        fused = device.type in ("cpu", "cuda")
        self.actor_optimizer = torch.optim.Adam(self.actor_params, lr=cfg.lr, fused=fused)
        self.critic_optimizer = torch.optim.Adam(self.critic_params, lr=self.critic_lr, fused=fused)
        if offline is not None and cfg.offline_ratio == 0:
            offline = None
        self.replay = ReplayBuffer(capacity, obs_dim, act_dim, device=device, seed=seed)
        self.sampler = MixedSampler(self.replay, offline, cfg.offline_ratio)
        self.explore_generator = torch.Generator().manual_seed(seed + 2)
        self.subset_generator = torch.Generator().manual_seed(seed + 3)
        self.critic_steps = 0
        self.actor_steps = 0
        self.env_steps = 0  # transitions stored over the run: the clock of exploration schedules
        # env_steps when the replay last started empty (at 0, or a resume without it): learning_starts counts from here
        self.refill_from = 0
        self._start_update_clock()
        self._critic_loss = compile_step(self._critic_loss_eager) if cfg.compile else self._critic_loss_eager
        self._unchecked_rows = 0  # replay rows written since the last NaN and inf check (recent_data)

    @classmethod
    def build(cls, cfg: Any, head: PolicyHead, env: Any, offline: OfflineReplay | None = None,
              **kwargs: Any) -> OffPolicyAlgorithm:
        """This learner for ``head`` on ``env`` from a ``TrainConfig`` (the builder of its row in the
        learner table); ``kwargs`` go to the constructor. The replay holds ``learner.buffer_size``
        transitions (its memory grows as it fills, up to that bound)."""
        if cfg.learner.offline_ratio > 0 and offline is None:
            raise ConfigError(f"learner.offline_ratio={cfg.learner.offline_ratio} mixes offline data into every "
                              "batch: set dataset.path (a D4RL HDF5 file or a Minari id)")
        cls.check_memory(cfg, head, env)
        return cls(head, cfg.learner, num_envs=env.num_envs, obs_dim=env.obs_dim, act_dim=env.act_dim,
                   capacity=cfg.learner.buffer_size, device=torch.device(cfg.device), seed=cfg.seed, offline=offline,
                   **kwargs)

    @staticmethod
    def check_memory(cfg: Any, head: PolicyHead, env: Any) -> None:
        """``ConfigError`` naming ``learner.buffer_size`` when the replay cannot fit, before anything is allocated:
        once full it must fit in memory, and with save_replay so must the host copy of its rows that each
        checkpoint writes (and a resume loads) beside it. ``head`` is unused (the learner table's signature)."""
        replay_bytes = ReplayBuffer.bytes_for(cfg.learner.buffer_size, env.obs_dim, env.act_dim)
        key, value = "learner.buffer_size", cfg.learner.buffer_size
        copy = "its copy in each checkpoint (or learner.save_replay=false)"
        if cfg.learner.save_replay and torch.device(cfg.device).type == "cpu":
            require_memory(key, value, 2 * replay_bytes, cfg.device, f"the replay buffer and {copy}")
        else:
            require_memory(key, value, replay_bytes, cfg.device, "the replay buffer")
            if cfg.learner.save_replay:
                require_memory(key, value, replay_bytes, "cpu", f"the replay buffer's host copy, {copy}")

    def _new_critic(self) -> QEnsemble:
        """A Q-ensemble as ``cfg`` describes it, freshly initialized from torch's global generator."""
        cfg = self.cfg
        return QEnsemble(self.obs_dim, self.act_dim, num_qs=cfg.num_qs, hidden_sizes=tuple(cfg.critic_hidden_sizes),
                         activation=cfg.critic_activation, layer_norm=cfg.critic_layer_norm,
                         layer_norm_eps=cfg.critic_layer_norm_eps, init=cfg.critic_init).to(self.device)

    @property
    def critic_lr(self) -> float:
        """The critics' Adam learning rate: ``critic_lr``, or ``lr`` when unset."""
        return self.cfg.lr if self.cfg.critic_lr is None else self.cfg.critic_lr

    def option_heads(self) -> tuple[PolicyHead, ...]:
        """The heads whose options ``change_options`` sets: the policy and any copy the learner keeps."""
        return (self.head,)

    def change_options(self, learner_options: dict[str, Any], policy_options: dict[str, Any]) -> None:
        """Go on with other values of the config fields in ``online_options`` (the learning rates set on
        the optimizers, their moments kept) and of the heads' own ``online_options`` (``option_heads``):
        ``pipeline.online_learner`` and ``online_policy`` when the online phase starts. ``ValueError``
        names a field that cannot change."""
        refused = sorted(set(learner_options) - self.online_options)
        if refused:
            can = ", ".join(sorted(self.online_options)) or "none"
            raise ValueError(f"learner={self.name} cannot change {refused} between phases (it can change: {can})")
        self.cfg = dataclasses.replace(self.cfg, **learner_options)
        if getattr(self.cfg, "bc_coef", 0) > 0:
            check_capabilities(self.head, f"{self.name} with bc_coef > 0", {Capability.IMITATION})
        set_lr(self.cfg.lr, self.actor_optimizer)
        set_lr(self.critic_lr, self.critic_optimizer)
        for head in self.option_heads():
            head.change_options(**policy_options)

    def reset_for_online(self, parts: Sequence[str], seed: int) -> None:
        """Start the online phase with what a newly built learner has, for each of ``parts``
        (``pipeline.online_reset``): ``optimizers`` (every Adam's moments and step count), ``targets``
        (fresh random weights of the target critics and any averaged copy of the policy,
        ``reinitialize_targets``, drawn from ``seed``), ``step_counts`` (the critic and actor steps,
        which clock the target and EMA schedules). The trained critics and policy are kept."""
        unknown = sorted(set(parts) - set(ONLINE_RESETS))
        if unknown:
            raise ValueError(f"unknown online reset {unknown}; the parts are {list(ONLINE_RESETS)}")
        if "optimizers" in parts:
            for optimizer in (value for value in vars(self).values() if isinstance(value, torch.optim.Optimizer)):
                optimizer.state.clear()  # Adam builds fresh moments and a zero step count at its next step
        if "targets" in parts:
            with torch.random.fork_rng(devices=[]):
                torch.manual_seed(seed)
                self.reinitialize_targets()
        if "step_counts" in parts:
            self.critic_steps = self.actor_steps = 0

    @torch.no_grad()
    def reinitialize_targets(self) -> None:
        """Fresh random weights for the target critics (from torch's global generator)."""
        self.critic_target.load_state_dict(self._new_critic().state_dict())

    # ------------------------------------------------------------------ acting and storing
    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Uniform random actions in [-1, 1] until ``learning_starts`` env steps, then the head's."""
        if self.warming_up():
            uniform = torch.rand((obs.shape[0], self.act_dim), generator=self.explore_generator)
            return (2 * uniform - 1).to(obs.device)
        return self.head.act(obs, deterministic=False)

    def process_env_step(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
                         terminated: torch.Tensor, info: dict[str, Any]) -> None:
        """Store N transitions; ``info["final_obs"] [N, D]`` is the true next observation (it equals the
        next observation except where an episode ended and the env reset)."""
        self.replay.add(obs, actions, rewards, info["final_obs"], terminated)
        self.env_steps += obs.shape[0]
        self._unchecked_rows += obs.shape[0]

    def warming_up(self) -> bool:
        """Whether the run has taken fewer than ``learning_starts`` env steps (uniform actions). A resume
        without its replay refills it acting with the trained policy, as SB3 does: it acted uniformly at random
        for another ``learning_starts`` steps (10k with the SAC bundle) after every such resume."""
        return self.env_steps < self.cfg.learning_starts

    def ready(self) -> bool:
        """Learning starts once more than ``learning_starts`` transitions are stored since the replay began
        (SB3's rule; again after a resume without the replay) and the buffer holds a row."""
        return self.env_steps - self.refill_from > self.cfg.learning_starts and len(self.replay) >= 1

    @abc.abstractmethod
    def update(self) -> dict[str, torch.Tensor]:
        """The gradient steps of one vector-env step; returns the last step's diagnostics (none: ``{}``)."""

    def _start_update_clock(self) -> None:
        """The update-to-data ratio as an exact fraction, and the gradient steps accrued but not yet taken
        (ten float additions of 0.1 make 0.999..., which would put the step due at the 10th transition off)."""
        self.utd = utd_fraction(self.cfg.utd)
        self.steps_accrued = Fraction(0)

    def _update_clock_state(self) -> dict[str, list[int]]:
        return {"steps_accrued": [self.steps_accrued.numerator, self.steps_accrued.denominator]}

    def _load_update_clock(self, state: dict[str, Any]) -> None:
        self.steps_accrued = Fraction(*state.get("steps_accrued", (0, 1)))  # absent before fractional utd: 0

    def gradient_steps_due(self) -> int:
        """The gradient steps of this vector-env step: ``num_envs x utd`` accrued, the whole ones taken now
        (every call when utd is whole; one in 1 / (num_envs x utd) calls below 1)."""
        self.steps_accrued += self.num_envs * self.utd
        due = math.floor(self.steps_accrued)
        self.steps_accrued -= due
        return due

    # ------------------------------------------------------------------ the critic step
    def _step(self, optimizer: torch.optim.Optimizer, loss: torch.Tensor, params: list[torch.Tensor]) -> None:
        optimizer.zero_grad(set_to_none=True)
        loss.backward()
        if self.cfg.max_grad_norm is not None:
            nn.utils.clip_grad_norm_(params, self.cfg.max_grad_norm)
        optimizer.step()

    def _subset_heads(self) -> torch.Tensor | None:
        """The target heads whose minimum forms the next TD target, drawn as ``subset_min`` draws them
        (None: all heads, no draw). Drawn here, not inside a compiled loss: graphs take no generators."""
        if self.num_min_qs == self.cfg.num_qs:
            return None
        heads = torch.randperm(self.cfg.num_qs, generator=self.subset_generator, device="cpu")[:self.num_min_qs]
        return heads.to(self.device)

    @abc.abstractmethod
    def _td_target(self, batch: ReplayBatch, alpha: torch.Tensor, subset_heads: torch.Tensor | None) -> torch.Tensor:
        """``y [B]``, the TD target of ``batch`` (no gradients are taken through it). ``alpha``: the
        entropy temperature of a soft backup (zero where the learner has none)."""

    def _critic_loss_eager(self, batch: ReplayBatch, alpha: torch.Tensor, subset_heads: torch.Tensor | None
                           ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(loss, q [E, B], target [B])`` of one critic step; the TD target without gradients."""
        with torch.no_grad():
            target = self._td_target(batch, alpha, subset_heads)
        q = self.critic(batch.obs, batch.actions)
        return critic_loss(q, target, self.cfg.critic_reduction), q, target

    def critic_step(self, batch: ReplayBatch, alpha: torch.Tensor) -> dict[str, torch.Tensor]:
        """One TD step of every critic on ``batch``, then the Polyak update when it is due."""
        loss, q, target = self._critic_loss(batch, alpha, self._subset_heads())
        self._step(self.critic_optimizer, loss, self.critic_params)
        self.critic_steps += 1
        if self.critic_steps % self.cfg.target_update_interval == 0:
            polyak_update(self.critic_target, self.critic, self.cfg.tau)
        return {"value": loss.detach(), "q": q.detach(), "target": target}

    # ------------------------------------------------------------------ guards and checkpoints
    def networks(self) -> dict[str, nn.Module | torch.Tensor]:
        return {"head": self.head, "critic": self.critic, "critic_target": self.critic_target}

    def recent_data(self) -> dict[str, torch.Tensor]:
        """The replay rows written since the last call (every row, where more than the buffer holds were). Counted
        by rows written, not from the last write position: a position that had wrapped past the last check (a
        resumed full buffer, an iteration longer than the buffer) made the check skip rows."""
        count = min(self._unchecked_rows, len(self.replay))
        self._unchecked_rows = 0
        rows = torch.arange(self.replay.position - count, self.replay.position) % self.replay.capacity
        # the actions first: non-finite ones mean the policy diverged mid-iteration, whatever the env then returned
        return {"actions": self.replay.actions[rows], "observations": self.replay.obs[rows],
                "next observations": self.replay.next_obs[rows], "rewards": self.replay.rewards[rows]}

    def state_dict(self) -> dict[str, Any]:
        return {
            "critic": self.critic.state_dict(), "critic_target": self.critic_target.state_dict(),
            "actor_optimizer": self.actor_optimizer.state_dict(),
            "critic_optimizer": self.critic_optimizer.state_dict(),
            "explore_rng": self.explore_generator.get_state(), "subset_rng": self.subset_generator.get_state(),
            "critic_steps": self.critic_steps, "actor_steps": self.actor_steps, "env_steps": self.env_steps,
            **self._update_clock_state(), **self._replay_state(),
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state["critic"])
        self.critic_target.load_state_dict(state["critic_target"])
        self.actor_optimizer.load_state_dict(state["actor_optimizer"])
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
        self.explore_generator.set_state(state["explore_rng"])
        self.subset_generator.set_state(state["subset_rng"])
        self.critic_steps, self.actor_steps = int(state["critic_steps"]), int(state["actor_steps"])
        self.env_steps = int(state["env_steps"])
        self._load_update_clock(state)
        self._load_replay_state(state)

    def _replay_state(self) -> dict[str, Any]:
        """The replay's share of a checkpoint: the sampler's whole state, or with ``save_replay=false`` the
        offline store's generator alone (its rows are re-read from the dataset, and its draws go on)."""
        offline = self.sampler.offline
        return {"replay": self.sampler.state_dict() if self.cfg.save_replay else None,
                "offline_replay": None if self.cfg.save_replay or offline is None else offline.state_dict(),
                "refill_from": self.refill_from}

    def _load_replay_state(self, state: dict[str, Any]) -> None:
        self.refill_from = int(state.get("refill_from", 0))
        if state["replay"] is not None:
            self.sampler.load_state_dict(state["replay"])
            return
        # saved without its replay: refill learning_starts transitions before learning again, while the
        # run's clock (env_steps, which exploration schedules read) goes on
        self.refill_from = self.env_steps
        if state.get("offline_replay") is not None and self.sampler.offline is not None:
            self.sampler.offline.load_state_dict(state["offline_replay"])


class LearnedTemperature:
    """The temperature's share of an off-policy learner's checkpoint (SAC and EXPO, MaxEntDP): when the
    temperature is learned, ``log_alpha`` among the networks and, with its optimizer's state, in the
    checkpoint. A fixed one is the config's (``ent_coef`` 0 is ``log_alpha`` -inf, which the guards of
    parameters and checkpoints would refuse). A mixin before ``OffPolicyAlgorithm`` in the bases; the
    learner sets ``log_alpha`` and ``alpha_optimizer`` (None for a fixed temperature) in its constructor."""

    log_alpha: torch.Tensor
    alpha_optimizer: torch.optim.Optimizer | None

    def networks(self) -> dict[str, nn.Module | torch.Tensor]:
        if self.alpha_optimizer is None:
            return super().networks()  # type: ignore[misc]
        return {**super().networks(), "log_alpha": self.log_alpha}  # type: ignore[misc]

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()  # type: ignore[misc]
        if self.alpha_optimizer is not None:
            state.update(log_alpha=self.log_alpha.detach().clone(), alpha_optimizer=self.alpha_optimizer.state_dict())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)  # type: ignore[misc]
        if self.alpha_optimizer is not None:
            with torch.no_grad():
                self.log_alpha.copy_(state["log_alpha"])
            self.alpha_optimizer.load_state_dict(state["alpha_optimizer"])

