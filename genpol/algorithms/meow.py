"""MEow (Chao, Feng, Sun, Lee, See, Lee; NeurIPS 2024; ALGORITHMS.md 14b): maximum-entropy RL with an
energy-based normalizing flow that is policy and soft critic at once (``policy=energy_flow``).

With ``Q_j(s, a) = alpha (q(s, a) + b_j(s))`` and ``V_j(s) = alpha (v(s) + b_j(s))`` from the flow's density
split (``genpol.heads.energy_flow``), one gradient step (per env transition, ``utd`` 1), in the order of the
authors' ``train`` loop:

1. target, without gradients, from the target flow without dropout: ``y = r + gamma (1 - term) min_j Vbar_j(s')``.
   No ``- alpha log pi`` term: V is already the soft value, exact, without sampling;
2. loss, through the inverse flow on the *replay* actions, coupling dropout on:
   ``L = mean_j mean_b (Q_j(s_b, a_b) - y_b)^2``;
3. one Adam step over every parameter of the flow (shifts included), the gradient norm clipped to
   ``max_grad_norm`` (30);
4. Polyak update of the whole target flow (``tau``), every ``target_update_interval`` steps.

There is no actor loss and no separate critic: pi ∝ exp(Q / alpha) *is* the flow, so the regression is policy
evaluation and improvement at once. The temperature is fixed. Acting: uniform random actions for
``learning_starts`` env steps, then a flow sample; evaluation acts with ``tanh(f(0; s))``.

Named departures (docs/concepts/meow.md): no NaN-to-zero masking of the loss (the authors zero a NaN loss,
which still lets Adam move every parameter on its momentum; genpol's non-finite guard stops the run
instead); dropout masks from the learner's own generator (the authors': torch's global one).
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from genpol.algorithms.base import Algorithm
from genpol.algorithms.offpolicy import OffPolicyAlgorithm
from genpol.heads.base import Capability, PolicyHead
from genpol.qensemble import polyak_update
from genpol.storage.replay import MixedSampler, OfflineReplay, ReplayBatch, ReplayBuffer


def meow_td_target(rewards: torch.Tensor, dones: torch.Tensor, next_values: torch.Tensor, gamma: float) -> torch.Tensor:
    """``y [B] = r + gamma (1 - done) min_j Vbar_j(s')`` from ``next_values [E, B]`` (``dones``: terminations)."""
    return rewards + gamma * (1 - dones) * next_values.min(dim=0).values


def meow_loss(q: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``mean_j mean_b (Q_j - y_b)^2`` of ``q [E, B]`` against ``target [B]`` (the authors' MSE over the doubled batch)."""
    return (q - target.unsqueeze(0)).square().mean()


class MEow(OffPolicyAlgorithm):
    """MEow. ``cfg`` is a ``MEowConfig``; the arguments are ``OffPolicyAlgorithm``'s.

    It shares the off-policy loop's hooks (``act``, ``process_env_step``, ``ready``, ``recent_data``, ``_step``)
    but not the base's constructor, which builds a Q-ensemble and two optimizers MEow has no use for: the
    flow is the critic. This constructor sets what those hooks read (cfg, sizes, device, replay and sampler,
    the exploration generator, the counters).
    """

    name = "meow"
    needs = frozenset({Capability.SOFT_VALUE})

    def __init__(self, head: PolicyHead, cfg: Any, *, num_envs: int, obs_dim: int, act_dim: int, capacity: int,
                 device: torch.device, seed: int = 0, offline: OfflineReplay | None = None):
        Algorithm.__init__(self, head)
        self.cfg = cfg
        self.num_envs, self.act_dim = num_envs, act_dim
        self.device = device
        self.target_head = copy.deepcopy(head).requires_grad_(False)
        self.params = [p for p in head.parameters() if p.requires_grad]
        self.optimizer = torch.optim.Adam(self.params, lr=cfg.lr, fused=device.type in ("cpu", "cuda"))
        if offline is not None and cfg.offline_ratio == 0:
            offline = None
        self.replay = ReplayBuffer(capacity, obs_dim, act_dim, device=device, seed=seed)
        self.sampler = MixedSampler(self.replay, offline, cfg.offline_ratio)
        self.explore_generator = torch.Generator().manual_seed(seed + 2)
        self.dropout_generator = torch.Generator().manual_seed(seed + 5)
        self.temperature = cfg.temperature
        self.critic_steps = 0  # gradient steps (the runner logs this count)
        self.env_steps, self.refill_from = 0, 0
        self._unchecked_rows = 0
        self._start_update_clock()

    # ------------------------------------------------------------------ one gradient step
    @torch.no_grad()
    def td_target(self, batch: ReplayBatch) -> torch.Tensor:
        """``y [B]`` from the target flow's soft values at the next states."""
        next_values = self.target_head.soft_value(batch.next_obs, self.temperature)
        return meow_td_target(batch.rewards, batch.dones, next_values, self.cfg.gamma)

    def _td_target(self, batch: ReplayBatch, alpha: torch.Tensor, subset_heads: torch.Tensor | None) -> torch.Tensor:
        return self.td_target(batch)

    def loss(self, batch: ReplayBatch, dropout_masks: list[list[torch.Tensor]] | None
             ) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(loss, Q [E, B], y [B])`` on ``batch`` with the given coupling dropout masks."""
        target = self.td_target(batch)
        q, _ = self.head.soft_q_and_v(batch.obs, batch.actions, self.temperature, dropout_masks)
        return meow_loss(q, target), q, target

    def gradient_step(self, batch: ReplayBatch | None = None,
                      dropout_masks: list[list[torch.Tensor]] | None = None) -> dict[str, torch.Tensor]:
        """One step on ``batch`` (a fresh replay batch when None) with ``dropout_masks`` (fresh ones from the
        learner's generator when None and the head has dropout)."""
        if batch is None:
            batch = self.sampler.sample(self.cfg.batch_size)
        if dropout_masks is None:
            dropout_masks = self.head.draw_dropout_masks(len(batch), self.dropout_generator, batch.obs.dtype)
        loss, q, target = self.loss(batch, dropout_masks)
        self._step(self.optimizer, loss, self.params)
        self.critic_steps += 1
        if self.critic_steps % self.cfg.target_update_interval == 0:
            polyak_update(self.target_head, self.head, self.cfg.tau)
        return {"value": loss.detach(), "q_mean": q.detach().mean(), "target_mean": target.mean(),
                "shift_mean": self.head.value_shift(batch.obs).detach().mean()}

    def update(self) -> dict[str, torch.Tensor]:
        """The gradient steps due (``num_envs x utd`` per call, accrued); the last one's diagnostics."""
        named: dict[str, torch.Tensor] = {}
        for _ in range(self.gradient_steps_due()):
            named = self.gradient_step()
        return named

    # ------------------------------------------------------------------ guards and checkpoints
    def networks(self) -> dict[str, nn.Module | torch.Tensor]:
        return {"head": self.head, "target_head": self.target_head}

    def state_dict(self) -> dict[str, Any]:
        return {"target_head": self.target_head.state_dict(), "optimizer": self.optimizer.state_dict(),
                "explore_rng": self.explore_generator.get_state(), "dropout_rng": self.dropout_generator.get_state(),
                "critic_steps": self.critic_steps, "env_steps": self.env_steps, **self._update_clock_state(),
                **self._replay_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.target_head.load_state_dict(state["target_head"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.explore_generator.set_state(state["explore_rng"])
        self.dropout_generator.set_state(state["dropout_rng"])
        self.critic_steps, self.env_steps = int(state["critic_steps"]), int(state["env_steps"])
        self._load_update_clock(state)
        self._load_replay_state(state)

