"""Offline RL: an off-policy learner's gradient steps on dataset transitions only, no env steps.

The offline phase of ``pipeline=offline_to_online`` when the updater is a Q-gradient actor
(``learner=consistency_ac``: Consistency-AC, Diffusion-QL; ALGORITHMS.md 8.3). Each gradient step
is the learner's own (``QGradientActor.gradient_step``) on a batch drawn uniformly from the
dataset: a TD step of the twin critics with next actions from the EMA actor, an actor step on
``bc_coef`` CT loss + ``eta`` normalized Q-loss, the Polyak and EMA updates. The learner object
(critics, targets, EMA actor, optimizers) then goes on into online fine-tuning unchanged.

With ``learner.offline_lr_decay`` the actor's and critics' learning rates follow a cosine from
``learner.lr`` (the critics': ``learner.critic_lr``) to 0 over the phase (the references' ``--lr_decay``:
Diffusion-QL's ``CosineAnnealingLR``, stepped there once per ``train`` call, an epoch of 1000 steps; Ding
& Jin's consistency code calls it once per 50 000 steps with T_max 2000, so its rate only falls to 0.999
lr). By default the cosine moves every step over the phase; ``learner.offline_lr_decay_every`` and
``offline_lr_decay_horizon`` reproduce a scheduler stepped once per block of steps with its own T_max.
The rate is computed from the learner's checkpointed ``offline_steps`` so a resumed phase continues it
exactly; online fine-tuning starts back at ``learner.lr`` and ``critic_lr``.

As the BC runner, callbacks do the I/O every ``log_every`` gradient steps, and ``global_step`` is the
gradient step. Evaluation (``runner.head``) acts as the online phase will: softmax-Q over the
online head's candidates, valued by the target critics.
"""

from __future__ import annotations

import time
from typing import Any, Sequence

import torch

from genpol.algorithms.qgradient import QGradientActor
from genpol.callbacks.base import Callback, CallbackList
from genpol.checkpoint import random_states, restore_random_states
from genpol.heads.base import PolicyHead
from genpol.runners.guards import check_finite, module_tensors, stop_if_requested
from genpol.storage.replay import OfflineReplay
from genpol.updaters.schedules import cosine_lr, set_lr


class OfflineRLRunner:
    """Train ``algorithm`` on ``offline`` for ``steps`` gradient steps of ``batch_size`` transitions.

    Args:
        algorithm: the off-policy learner (it owns critics, targets and optimizers).
        offline: the dataset's transitions, in the agent's (scaled) observation and action spaces.
        steps: gradient steps; batch_size: transitions per step (drawn uniformly with replacement).
        log_every: gradient steps per callback iteration (logging, evaluation, checkpoints).
        callbacks: called after every iteration and at the start and end of training.
        observation_state: the observation scaling saved with the policy (the dataset's min and max).
    """

    def __init__(self, algorithm: QGradientActor, offline: OfflineReplay, steps: int, batch_size: int,
                 log_every: int = 200, callbacks: Sequence[Callback] = (),
                 observation_state: dict[str, Any] | None = None):
        self.algorithm, self.offline = algorithm, offline
        self.total_steps, self.batch_size, self.log_every = steps, batch_size, log_every
        self.callbacks = CallbackList(callbacks)
        self.observation_state = observation_state
        self.global_step = 0
        self.iteration = 0
        self.wall_time = 0.0
        self.recent_returns: list[float] = []  # no env episodes here (the progress bar reads it)

    @property
    def head(self) -> PolicyHead:
        """The head evaluation acts with."""
        return self.algorithm.acting_head()

    def train_step(self) -> dict[str, torch.Tensor]:
        cfg = self.algorithm.cfg
        if cfg.offline_lr_decay:
            set_lr(self.decayed_lr(cfg.lr), self.algorithm.actor_optimizer)
            set_lr(self.decayed_lr(self.algorithm.critic_lr), self.algorithm.critic_optimizer)
        named = self.algorithm.gradient_step(self.offline.sample(self.batch_size))
        self.algorithm.offline_steps += 1
        self.global_step += 1
        return named

    def decayed_lr(self, lr: float) -> float:
        """``lr`` on the offline cosine before the learner's next offline step: its position is the number
        of blocks of ``offline_lr_decay_every`` steps completed, its length ``offline_lr_decay_horizon``
        blocks (None: the phase's). Every-step decay over the phase by default."""
        cfg = self.algorithm.cfg
        every = cfg.offline_lr_decay_every
        horizon = cfg.offline_lr_decay_horizon or -(-self.total_steps // every)
        return cosine_lr(lr, self.algorithm.offline_steps // every, horizon)

    def run(self) -> None:
        self.callbacks.on_train_start(self)
        while self.global_step < self.total_steps:
            start = time.perf_counter()
            steps = [self.train_step() for _ in range(min(self.log_every, self.total_steps - self.global_step))]
            elapsed = time.perf_counter() - start
            self.wall_time += elapsed
            self.iteration += 1
            metrics = {f"pretrain/{key}": float(torch.stack([named[key] for named in steps]).mean())
                       for key in steps[0]}
            metrics["pretrain/steps_per_second"] = len(steps) / elapsed
            check_finite(self, [("logged value", metrics), ("parameter", module_tensors(self.algorithm.networks()))])
            if self.algorithm.cfg.offline_lr_decay:
                metrics["pretrain/learning_rate"] = self.algorithm.actor_optimizer.param_groups[0]["lr"]
            self.callbacks.on_iteration_end(self, metrics)
            stop_if_requested(self)
        # online fine-tuning's rate (the optimizers carry on)
        set_lr(self.algorithm.cfg.lr, self.algorithm.actor_optimizer)
        set_lr(self.algorithm.critic_lr, self.algorithm.critic_optimizer)
        self.callbacks.on_train_end(self)

    # ------------------------------------------------------------------ checkpoints (Checkpointer API)
    def policy_weights(self) -> dict[str, Any]:
        return {"head": self.head.state_dict(), "obs_normalizer": self.observation_state}

    def training_state(self) -> dict[str, Any]:
        return {"head": self.algorithm.head.state_dict(), "algorithm": self.algorithm.state_dict(),
                "offline": self.offline.state_dict(), "global_step": self.global_step, "iteration": self.iteration,
                "wall_time": self.wall_time, **random_states(),
                "callbacks": self.callbacks.state_dict()}

    def load(self, policy_weights: dict[str, Any], state: dict[str, Any]) -> None:
        self.algorithm.head.load_state_dict(state["head"])
        self.algorithm.load_state_dict(state["algorithm"])
        self.offline.load_state_dict(state["offline"])
        self.global_step, self.iteration = int(state["global_step"]), int(state["iteration"])
        self.wall_time = float(state["wall_time"])
        restore_random_states(state)
        self.callbacks.load_state_dict(state["callbacks"])
