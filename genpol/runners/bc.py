"""Behaviour-cloning pretraining: minimize a head's ``imitation_loss`` on offline (observation, action
chunk) pairs, with AdamW, a cosine learning-rate decay and an EMA of the weights (DPPO's recipe).

Any head with ``imitation_loss`` works: the DDPM noise-prediction loss of the diffusion head, the
flow-matching loss of the flow heads, the Gaussian negative log-likelihood. When training ends the
head holds the EMA weights, which is what DPPO fine-tunes from. Callbacks do the I/O, as in the
on-policy runner; the runner's ``global_step`` is the gradient step.
"""

from __future__ import annotations

import copy
import time
from typing import Any, Sequence

import torch
from torch.optim.swa_utils import AveragedModel, get_ema_multi_avg_fn

from genpol.callbacks.base import Callback, CallbackList
from genpol.checkpoint import random_states, restore_random_states
from genpol.heads.base import PolicyHead
from genpol.runners.guards import check_finite, module_tensors, stop_if_requested


class BCRunner:
    """Train ``head`` by imitation for ``steps`` gradient steps.

    Args:
        head: the policy head.
        obs: ``[M, D]`` observations (already normalized); actions: ``[M, horizon * A]`` targets.
        steps: gradient steps; batch_size: samples per step (shuffled epochs).
        lr, min_lr: AdamW learning rate, cosine-decayed to ``min_lr`` over ``steps``.
        weight_decay: AdamW weight decay.
        ema_decay: EMA decay; the EMA starts at ``ema_start`` and is updated every ``ema_every`` steps.
        log_every: gradient steps per callback iteration (logging, checkpoints).
        seed: seed of the shuffling.
        observation_state: the observation normalization saved with the policy (dataset min/max).
    """

    def __init__(self, head: PolicyHead, obs: torch.Tensor, actions: torch.Tensor, steps: int,
                 batch_size: int = 128, lr: float = 1e-3, min_lr: float = 1e-4, weight_decay: float = 1e-6,
                 ema_decay: float = 0.995, ema_start: int = 1000, ema_every: int = 5, log_every: int = 100,
                 seed: int = 0, callbacks: Sequence[Callback] = (), observation_state: dict[str, Any] | None = None):
        self.head = head
        self.obs, self.actions = obs, actions
        self.total_steps = steps
        self.batch_size = min(batch_size, len(obs))
        self.ema_start, self.ema_every, self.log_every = ema_start, ema_every, log_every
        self.observation_state = observation_state
        self.callbacks = CallbackList(callbacks)
        params = [p for p in head.parameters() if p.requires_grad]
        self.optimizer = torch.optim.AdamW(params, lr=lr, weight_decay=weight_decay)
        self.scheduler = torch.optim.lr_scheduler.CosineAnnealingLR(self.optimizer, T_max=max(steps, 1),
                                                                    eta_min=min_lr)
        self.ema = AveragedModel(head, multi_avg_fn=get_ema_multi_avg_fn(ema_decay), use_buffers=True)
        self.generator = torch.Generator().manual_seed(seed)
        self.order = torch.randperm(len(obs), generator=self.generator)
        self.cursor = 0
        self.global_step = 0
        self.iteration = 0
        self.wall_time = 0.0
        self.recent_returns: list[float] = []

    def _next_batch(self) -> torch.Tensor:
        if self.cursor + self.batch_size > len(self.order):
            self.order = torch.randperm(len(self.obs), generator=self.generator)
            self.cursor = 0
        index = self.order[self.cursor:self.cursor + self.batch_size]
        self.cursor += self.batch_size
        return index

    def train_step(self) -> torch.Tensor:
        index = self._next_batch()
        loss = self.head.imitation_loss(self.obs[index], self.actions[index])
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        self.global_step += 1
        if self.global_step >= self.ema_start and self.global_step % self.ema_every == 0:
            self.ema.update_parameters(self.head)
        return loss.detach()

    def run(self) -> None:
        self.callbacks.on_train_start(self)
        while self.global_step < self.total_steps:
            start = time.perf_counter()
            losses = [self.train_step() for _ in range(min(self.log_every, self.total_steps - self.global_step))]
            elapsed = time.perf_counter() - start
            self.wall_time += elapsed
            self.iteration += 1
            metrics = {"pretrain/loss": float(torch.stack(losses).mean()),
                       "pretrain/learning_rate": self.scheduler.get_last_lr()[0],
                       "pretrain/steps_per_second": len(losses) / elapsed}
            check_finite(self, [("logged value", metrics), ("parameter", module_tensors({"head": self.head}))])
            self.callbacks.on_iteration_end(self, metrics)
            stop_if_requested(self)
        self.use_ema_weights()
        self.callbacks.on_train_end(self)

    def ema_head_state(self) -> dict[str, torch.Tensor]:
        """The EMA weights (the head's own until the EMA has started)."""
        if int(self.ema.n_averaged) == 0:
            return self.head.state_dict()
        state = self.ema.module.state_dict()
        # a module's extra state holds training counters (the consistency head's CT step), which the
        # EMA copy never advances: keep the head's own, or online training would restart its schedule
        state.update({key: value for key, value in self.head.state_dict().items() if key.endswith("_extra_state")})
        return state

    def use_ema_weights(self) -> None:
        self.head.load_state_dict(self.ema_head_state())

    # ------------------------------------------------------------------ checkpoints (Checkpointer API)
    def policy_weights(self) -> dict[str, Any]:
        """What a checkpoint's ``policy/`` holds: the EMA head as fine-tuning would start from it, i.e. after
        ``start_finetuning`` (a diffusion head's frozen early denoising steps hold the head's own weights,
        not the random initialization they keep in training until then)."""
        acting = copy.deepcopy(self.head)
        acting.load_state_dict(self.ema_head_state())
        acting.start_finetuning()
        return {"head": acting.state_dict(), "obs_normalizer": self.observation_state}

    def training_state(self) -> dict[str, Any]:
        return {"head": self.head.state_dict(), "ema": self.ema.state_dict(),
                "optimizer": self.optimizer.state_dict(), "scheduler": self.scheduler.state_dict(),
                "generator": self.generator.get_state(), "order": self.order, "cursor": self.cursor,
                "global_step": self.global_step, "iteration": self.iteration, "wall_time": self.wall_time,
                **random_states(), "callbacks": self.callbacks.state_dict()}

    def load(self, policy_weights: dict[str, Any], state: dict[str, Any]) -> None:
        self.head.load_state_dict(state["head"])
        self.ema.load_state_dict(state["ema"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.generator.set_state(state["generator"])
        self.order, self.cursor = state["order"], int(state["cursor"])
        self.global_step, self.iteration = int(state["global_step"]), int(state["iteration"])
        self.wall_time = float(state["wall_time"])
        restore_random_states(state)
        self.callbacks.load_state_dict(state["callbacks"])
