"""Q-gradient actors: Consistency-AC (Ding & Jin 2024, ALGORITHMS.md 8.3-8.4) and, with the same
learner, Diffusion-QL (9b) for any head with reparameterized sampling and batched candidates.

One gradient step, on the off-policy learners' replay, critics and Polyak targets
(``genpol.algorithms.offpolicy``):

1. critic: y = r + gamma (1 - done) min_i Q_target,i(s', a'), a' drawn by the **EMA actor** (the
   references' options: ``max_q_backup_samples`` draws n a' per s' and takes each critic's maximum
   over them, ``q_norm`` divides y by its batch std; ``critic_lr`` is the critics' own rate);
2. actor: L = bc_coef L_BC(s, a_data) + eta L_Q, L_Q = -Q_i(s, a_theta) / mean|Q_j|.detach() for a
   random critic pair, a_theta = ``head.rsample(s)`` (through the whole sampling chain); L_BC is the
   head's ``imitation_loss`` (the CT loss of the consistency head) on the batch's actions; online
   from scratch ``bc_coef`` = 0 (Q-loss only);
3. the EMA actor follows the head (decay 0.995, every 5 actor steps from step 1000, a copy before;
   ``actor_ema_warmup=hold``: the references' EMA, which stays at the initial actor until step 1000).

Offline (``pipeline=offline_to_online``, ``genpol.runners.offline_rl``): the same gradient step on
batches of dataset transitions only (``gradient_step(batch)``), no env steps; the critics, their
targets, the EMA actor and the optimizers then carry on into online fine-tuning. ``offline_steps``
counts those steps; after them the online phase acts with the policy from its first env step
(``learning_starts`` then only delays the gradient steps, until the replay holds online data).

Acting: uniform random actions until ``learning_starts`` (from scratch); then, with probability epsilon (linear
from ``explore_initial`` to ``explore_final`` over ``explore_fraction`` of the run; 8.4's schedule),
a uniform random action, else one of ``act_candidates`` samples of the online head drawn with
probability softmax(min_i Q_target,i) (8.3's evaluation rule, as the references' ``sample_action``;
1 candidate = the head's own sample).

Evaluation (in the run, ``genpol.evaluate``, ``load_policy``) acts with ``acting_head()``: the
``SoftmaxQPolicy`` of the online head and the target critics, which a checkpoint's ``policy/``
holds and rebuilds; its deterministic action is the softmax draw from a fixed seed.
"""

from __future__ import annotations

import copy
from typing import Any

import torch
from torch import nn

from genpol.algorithms.offpolicy import OffPolicyAlgorithm
from genpol.algorithms.softmax_q import SoftmaxQPolicy
from genpol.envs import VectorEnv
from genpol.heads import head_from_spec
from genpol.heads.base import Capability, PolicyHead, check_capabilities
from genpol.heads.consistency_training import ema_update_due
from genpol.storage.replay import OfflineReplay, ReplayBatch
from genpol.updaters.qgradient_losses import q_gradient_actor_loss
from genpol.updaters.sac_losses import td_target


class QGradientActor(OffPolicyAlgorithm):
    """Consistency-AC / Diffusion-QL. ``cfg`` is a ``QGradientConfig``; see its field docstrings.

    Args: as ``OffPolicyAlgorithm``, plus ``total_steps`` (env steps of the run, the clock of the epsilon schedule).
    """

    name = "consistency_ac"
    needs = frozenset({Capability.REPARAMETERIZED, Capability.CANDIDATES})
    # what pipeline.online_learner may change between the phases: the fields read at every step, and the
    # rates (set on the optimizers). Ding & Jin's online phase: eta 1, no BC, actor lr 1e-5.
    online_options = frozenset({"eta", "bc_coef", "lr", "critic_lr"})

    def __init__(self, head: PolicyHead, cfg: Any, *, total_steps: int, num_envs: int, obs_dim: int, act_dim: int,
                 capacity: int, device: torch.device, seed: int = 0, offline: OfflineReplay | None = None):
        super().__init__(head, cfg, num_envs=num_envs, obs_dim=obs_dim, act_dim=act_dim, capacity=capacity,
                         device=device, seed=seed, offline=offline)
        if cfg.bc_coef > 0:
            check_capabilities(head, f"{self.name} with bc_coef > 0", {Capability.IMITATION})
        self.total_steps = total_steps
        self.ema_head = copy.deepcopy(head).requires_grad_(False)
        self.pair_generator = torch.Generator().manual_seed(seed + 5)
        self.softmax_q = SoftmaxQPolicy(obs_dim, act_dim, head, self.critic_target, cfg.act_candidates)
        self.offline_steps = 0  # gradient steps on dataset batches only (the offline phase)

    # ------------------------------------------------------------------ acting
    def epsilon(self) -> float:
        """Probability of a uniform random action at the current env step."""
        horizon = max(self.cfg.explore_fraction * self.total_steps, 1.0)
        fraction = min(self.env_steps / horizon, 1.0)
        return self.cfg.explore_initial + fraction * (self.cfg.explore_final - self.cfg.explore_initial)

    def acting_head(self) -> PolicyHead:
        """What acts after ``learning_starts`` and what evaluation and a checkpoint's ``policy/`` use: the
        softmax-Q policy (online head, target critics), or the head itself with one candidate."""
        return self.head if self.cfg.act_candidates == 1 else self.softmax_q

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        if self.warming_up() and self.offline_steps == 0:
            return super().act(obs)
        actions = self.acting_head().act(obs, deterministic=False)
        explore = torch.rand(obs.shape[0], generator=self.explore_generator) < self.epsilon()
        if explore.any():
            uniform = 2 * torch.rand((obs.shape[0], self.act_dim), generator=self.explore_generator) - 1
            actions = torch.where(explore.to(obs.device)[:, None], uniform.to(obs.device), actions)
        return actions

    def option_heads(self) -> tuple[PolicyHead, ...]:
        """The head and the EMA actor: ``pipeline.online_policy`` changes both."""
        return self.head, self.ema_head

    @torch.no_grad()
    def reinitialize_targets(self) -> None:
        """Fresh random weights for the target critics and the EMA actor (their ``load_model`` into a new
        ``OnlineAgent``, whose constructor copied both from its freshly initialized networks)."""
        super().reinitialize_targets()
        self.ema_head.load_state_dict(head_from_spec(self.head.spec()).state_dict())

    # ------------------------------------------------------------------ learning
    def _td_target(self, batch: ReplayBatch, alpha: torch.Tensor, subset_heads: torch.Tensor | None) -> torch.Tensor:
        """``y [B]`` from the EMA actor's next actions and the target critics' (subset-)minimum, no entropy.

        With ``max_q_backup_samples`` n > 1: n next actions per state (states repeated in place, s'_0 n
        times first, as the references' ``repeat_interleave``), each critic's maximum over them, then the
        minimum over critics. With ``q_norm``: y / (std(y) + 1e-6) over the batch (unbiased std)."""
        samples = self.cfg.max_q_backup_samples
        next_obs = batch.next_obs if samples == 1 else batch.next_obs.repeat_interleave(samples, dim=0)
        next_q = self.critic_target(next_obs, self.ema_head.rsample(next_obs), heads=subset_heads)  # [E, B n]
        if samples > 1:
            next_q = next_q.view(next_q.shape[0], -1, samples).max(dim=-1).values  # [E, B]
        target = td_target(batch.rewards, batch.dones, next_q.min(dim=0).values, None, alpha, self.cfg.gamma)
        if self.cfg.q_norm:  # Ding & Jin's scale normalization of the regression target
            target = target / (target.std() + 1e-6)
        return target

    def actor_loss(self, batch: ReplayBatch) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """bc_coef L_BC + eta L_Q on ``batch`` with the current critics (which get no gradient)."""
        self.critic.requires_grad_(False)
        try:
            q = self.critic(batch.obs, self.head.rsample(batch.obs))
        finally:
            self.critic.requires_grad_(True)
        bc = self.cfg.bc_coef * self.head.imitation_loss(batch.obs, batch.actions) if self.cfg.bc_coef > 0 else None
        return q_gradient_actor_loss(q, self.cfg.eta, bc, self.pair_generator)

    @torch.no_grad()
    def update_ema_head(self, copy_online: bool | None = None) -> None:
        """Copy the head into the EMA actor (``copy_online``; None: before ``actor_ema_start`` actor steps),
        else average."""
        online, ema = list(self.head.parameters()), list(self.ema_head.parameters())
        if copy_online if copy_online is not None else self.actor_steps < self.cfg.actor_ema_start:
            torch._foreach_copy_(ema, online)
        else:
            torch._foreach_lerp_(ema, online, 1.0 - self.cfg.actor_ema_decay)

    def gradient_step(self, batch: ReplayBatch | None = None) -> dict[str, torch.Tensor]:
        """One critic step, one actor step and the EMA actor's update on ``batch`` (None: a batch of
        ``batch_size`` from the replay, mixed with offline data by ``offline_ratio``)."""
        if batch is None:
            batch = self.sampler.sample(self.cfg.batch_size)
        critic = self.critic_step(batch, torch.zeros((), device=self.device))
        loss, named = self.actor_loss(batch)
        self._step(self.actor_optimizer, loss, self.actor_params)
        self.actor_steps += 1
        due = ema_update_due(self.actor_steps, self.cfg.actor_ema_every, self.cfg.actor_ema_start,
                             self.cfg.actor_ema_warmup)
        if due is not None:
            self.update_ema_head(copy_online=due == "copy")
        return {"value": critic["value"], "policy": named.pop("actor"), **named,
                "q_mean": critic["q"].mean(), "target_mean": critic["target"].mean()}

    def update(self) -> dict[str, torch.Tensor]:
        """The gradient steps due (``num_envs x utd`` per call, accrued), one critic and one actor step each;
        the last one's diagnostics."""
        named: dict[str, torch.Tensor] = {}
        for _ in range(self.gradient_steps_due()):
            named = self.gradient_step()
        return named

    def networks(self) -> dict[str, nn.Module | torch.Tensor]:
        return {**super().networks(), "ema_head": self.ema_head}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "ema_head": self.ema_head.state_dict(),
                "pair_rng": self.pair_generator.get_state(), "offline_steps": self.offline_steps}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.ema_head.load_state_dict(state["ema_head"])
        self.pair_generator.set_state(state["pair_rng"])
        self.offline_steps = int(state.get("offline_steps", 0))  # saved before the offline phase existed: none


def make_qgradient(cfg: Any, head: PolicyHead, env: VectorEnv, offline: OfflineReplay | None) -> QGradientActor:
    """Consistency-AC from a ``TrainConfig`` (the run's ``total_steps`` clock the epsilon schedule)."""
    return QGradientActor.build(cfg, head, env, offline, total_steps=cfg.total_steps)
