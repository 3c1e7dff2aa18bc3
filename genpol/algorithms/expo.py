"""EXPO (Dong, Li, Sadigh, Finn 2025; ALGORITHMS.md 7): stable RL with an expressive base policy.

Built on ``SAC`` (its Q-ensemble, target critics, replay with offline mixing, temperature and RLPD
batching), with three changes:

* the **base policy** (the head: diffusion by default, any head with imitation and candidates) is
  trained *only* by its imitation loss, on the last minibatch of each round (half offline, half
  online), with SAC's actor optimizer (AdamW with ``base_weight_decay``, EXPO's optax.adamw); an
  EMA copy (``base_ema_tau``) does the acting. No Q-gradient reaches it: nothing differentiable in
  its parameters ever meets a critic;
* the **edit policy** (``genpol.algorithms.edit.EditPolicy``) is trained SAC-style on the same minibatch's
  *replay* actions, ``edit_loss`` with the ensemble-mean Q; the temperature tracks the entropy of the
  edited action toward ``-|A| / 2 + |A| log beta`` (``adjust_target_entropy``; EXPO's default target,
  ``-|A| / 2`` alone, lies above the largest entropy an edit of scale beta can have); the base's and
  the edit policy's learning rates follow one cosine decay over ``base_lr_decay_steps`` of their own
  steps (EXPO's ``actor_lr`` schedule serves both);
* the **next action** of every TD target is the on-the-fly policy's at s' (N base samples from the
  *online* base, ``n_edit`` of them edited, argmax of the target critics' subset-min), batched over
  the minibatch's next states, and the target is a subset-min, without an entropy backup. The subset
  that values the winner is drawn apart from the one that ranked the candidates
  (``learner.td_subsets=independent``, EXPO's code), or is that one (``shared``).

One round (one per env step of each env), after ``learning_starts``: ``utd`` critic steps on
consecutive minibatches of one ``batch_size x utd`` batch, then one base step (and the EMA update)
and one edit step and one temperature step on the last minibatch.
"""

from __future__ import annotations

import copy
import math
from typing import Any

import torch
from torch import nn

from genpol.algorithms.sac import SAC
from genpol.heads.base import Capability, PolicyHead
from genpol.heads.chunking import ChunkedActions
from genpol.algorithms.edit import EditPolicy, OnTheFlyPolicy, edit_loss, on_the_fly_actions
from genpol.qensemble import polyak_update
from genpol.storage.replay import OfflineReplay, ReplayBatch
from genpol.updaters.sac_losses import td_target
from genpol.updaters.schedules import cosine_lr, set_lr


class EXPO(SAC):
    """EXPO. ``cfg`` is an ``ExpoConfig`` (the ``learner`` group); the other arguments are ``SAC``'s.
    The head is the base policy; it must act one action per step (no action chunks)."""

    name = "expo"
    needs = frozenset({Capability.IMITATION, Capability.CANDIDATES})

    def __init__(self, head: PolicyHead, cfg: Any, *, num_envs: int, obs_dim: int, act_dim: int, capacity: int,
                 device: torch.device, seed: int = 0, offline: OfflineReplay | None = None):
        if isinstance(head, ChunkedActions) and (head.act_steps != 1 or head.horizon_steps != 1):
            from genpol.errors import ConfigError

            raise ConfigError(f"learner=expo edits and values single actions: the {head.family} base policy must "
                              f"act one step at a time (policy.act_steps=1, policy.horizon_steps=1), got "
                              f"act_steps={head.act_steps}, horizon_steps={head.horizon_steps}")
        super().__init__(head, cfg, num_envs=num_envs, obs_dim=obs_dim, act_dim=act_dim, capacity=capacity,
                         device=device, seed=seed, offline=offline)
        if cfg.adjust_target_entropy:  # the target is for u's entropy; log pi_e(a') carries -|A| log beta
            self.target_entropy += act_dim * math.log(cfg.edit_scale)
        self.ema_base = copy.deepcopy(head).requires_grad_(False)
        self.edit = EditPolicy(obs_dim, act_dim, cfg.edit_hidden_sizes, cfg.edit_activation,
                               edit_scale=cfg.edit_scale, clip=cfg.clip_edits).to(device)
        self.edit_params = list(self.edit.parameters())
        fused = device.type in ("cpu", "cuda")
        self.edit_optimizer = torch.optim.Adam(self.edit_params, lr=cfg.lr, fused=fused)
        if cfg.base_weight_decay > 0:  # EXPO's optax.adamw: decay by lr x weight_decay, then Adam's step
            self.actor_optimizer = torch.optim.AdamW(self.actor_params, lr=cfg.lr, weight_decay=cfg.base_weight_decay,
                                                     fused=fused)
        self.actor = OnTheFlyPolicy(obs_dim, act_dim, self.ema_base, self.edit, self.critic_target,
                                    cfg.num_samples, cfg.n_edit, self.num_min_qs)
        self.base_steps = 0

    # ------------------------------------------------------------------ acting
    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Uniform random actions until ``learning_starts``, then the on-the-fly policy of the EMA base."""
        if self.warming_up():
            return super().act(obs)
        return self.actor.act(obs, deterministic=False)

    def acting_head(self) -> PolicyHead:
        """The on-the-fly policy (EMA base, edit policy, target critics): what evaluation acts with and
        what a checkpoint's ``policy/`` holds."""
        return self.actor

    # ------------------------------------------------------------------ learning
    def _subset_heads(self) -> torch.Tensor | None:
        """``[2, M]``: the subset that ranks the next candidates and, drawn after it, the one that
        values the winner (``learner.td_subsets=independent``, EXPO's code); ``[M]``, one subset for
        both (``shared``); None with every head in the minimum."""
        ranking = super()._subset_heads()
        if ranking is None or self.cfg.td_subsets == "shared":
            return ranking
        return torch.stack([ranking, super()._subset_heads()])

    @staticmethod
    def split_subsets(subset_heads: torch.Tensor | None) -> tuple[torch.Tensor | None, torch.Tensor | None]:
        """``_subset_heads()``'s draw as ``(ranking [M] or None, valuing [M] or None)``."""
        if subset_heads is not None and subset_heads.dim() == 2:
            return subset_heads[0], subset_heads[1]
        return subset_heads, None

    def _td_target(self, batch: ReplayBatch, alpha: torch.Tensor, subset_heads: torch.Tensor | None) -> torch.Tensor:
        """``r + gamma (1 - done) min_value-subset Q_target(s', a*)``, a* the on-the-fly choice of the
        online base by the ranking subset's minimum (``_subset_heads``)."""
        ranking, valuing = self.split_subsets(subset_heads)
        _, next_q = on_the_fly_actions(batch.next_obs, self.head, self.edit, self.critic_target,
                                       self.cfg.num_samples, self.cfg.n_edit, ranking, value_heads=valuing)
        return td_target(batch.rewards, batch.dones, next_q, None, alpha, self.cfg.gamma)

    def policy_lr(self, steps: int) -> float:
        """The base and edit policies' learning rate before their step number ``steps``: optax's
        ``cosine_decay_schedule(lr, base_lr_decay_steps)``, ``lr (1 + cos(pi min(k, K) / K)) / 2``.
        A function of the checkpointed step counts, so a resumed run continues it exactly."""
        if self.cfg.base_lr_decay_steps is None:
            return self.cfg.lr
        return cosine_lr(self.cfg.lr, steps, self.cfg.base_lr_decay_steps)

    def base_step(self, batch: ReplayBatch) -> torch.Tensor:
        """One imitation step of the base policy on the batch's actions, then the EMA update."""
        set_lr(self.policy_lr(self.base_steps), self.actor_optimizer)
        loss = self.head.imitation_loss(batch.obs, batch.actions)
        self._step(self.actor_optimizer, loss, self.actor_params)
        polyak_update(self.ema_base, self.head, self.cfg.base_ema_tau)
        self.base_steps += 1
        return loss.detach()

    def edit_step(self, batch: ReplayBatch, alpha: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """One edit-policy step on the batch's (replay) actions; returns the loss and the edited
        actions' log-probs (for the temperature)."""
        set_lr(self.policy_lr(self.actor_steps), self.edit_optimizer)
        edited, log_prob = self.edit.rsample_edit(batch.obs, batch.actions)
        self.critic.requires_grad_(False)
        try:
            loss = edit_loss(log_prob, self.critic(batch.obs, edited), alpha)
        finally:
            self.critic.requires_grad_(True)
        self._step(self.edit_optimizer, loss, self.edit_params)
        self.actor_steps += 1
        return loss.detach(), log_prob.detach()

    def policy_steps(self, batch: Any, alpha: torch.Tensor, critic: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """After the round's critic steps: one base (imitation), one edit and one temperature step."""
        imitation = self.base_step(batch)
        policy, log_prob = self.edit_step(batch, alpha)
        temperature = self.temperature_step(log_prob)
        return {**self._named(critic, policy, temperature, log_prob, alpha), "imitation": imitation}

    def networks(self) -> dict[str, nn.Module | torch.Tensor]:
        return {**super().networks(), "ema_base": self.ema_base, "edit": self.edit}

    # ------------------------------------------------------------------ checkpoints
    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "ema_base": self.ema_base.state_dict(), "edit": self.edit.state_dict(),
                "edit_optimizer": self.edit_optimizer.state_dict(), "base_steps": self.base_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.ema_base.load_state_dict(state["ema_base"])
        self.edit.load_state_dict(state["edit"])
        self.edit_optimizer.load_state_dict(state["edit_optimizer"])
        self.base_steps = int(state["base_steps"])
