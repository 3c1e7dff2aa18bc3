"""Soft actor-critic over a Q-ensemble, with replay and optional offline data: SAC (stable-baselines3's
math and defaults, ALGORITHMS.md 12a) and RLPD (12c) as a configuration of the same learner.

One gradient step in ``sb3`` batching, in stable-baselines3's order:

1. sample a batch; draw ``a_pi, log pi(a_pi|s)`` from the head, kept in the graph;
2. temperature step (``alpha`` for steps 3 and 5 is read *before* it);
3. target, without gradients: ``a' ~ pi(s')``, ``y = r + gamma (1 - done) (min Q_target(s', a') - alpha log pi(a'|s'))``;
4. critic step on ``critic_loss(Q(s, a), y)``;
5. actor step on ``mean(alpha log pi(a_pi|s) - reduce_i Q_i(s, a_pi))`` with the critics just updated;
6. Polyak update of the targets every ``target_update_interval`` critic steps.

``cleanrl`` batching follows CleanRL's ``sac_continuous_action.py``: a fresh batch per critic step
(step 3 then 4, with the temperature as it stands); every ``actor_update_interval`` critic steps
(its ``policy_frequency``), that many rounds on the same batch of an actor step on a fresh sample
(step 5) and a temperature step on another fresh sample from the updated actor, each round using the
temperature the previous one left. A step without rounds reports the critic's diagnostics only.

``rlpd`` batching draws one batch of ``batch_size x utd`` (half offline, half online, interleaved),
cuts it into ``utd`` minibatches with one critic step (and one Polyak update) each, then takes one
actor step and one temperature step on the last minibatch, the temperature from the actor step's
entropy.

The replay, the critics and their targets, the actor's and critics' optimizers, the generators and
the critic step are every off-policy learner's (``genpol.algorithms.offpolicy``); SAC adds the
temperature with its optimizer, the soft TD target, the actor step and the two batchings.

``learner.compile`` compiles the three forward computations of a step (the actor's sample, the critic
loss with its TD target, the actor loss) with ``torch.compile``; their backward graphs are compiled
with them, and the optimizers and the Polyak update run as in eager. The actor's noise comes from
torch's generator in the eager order (inductor's ``fallback_random``) and the subset-min heads are
drawn outside, so compiled and eager runs differ by float rounding only.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from genpol.algorithms.offpolicy import LearnedTemperature, OffPolicyAlgorithm, compile_step
from genpol.heads.base import Capability, PolicyHead
from genpol.storage.replay import OfflineReplay, ReplayBatch
from genpol.updaters.sac_losses import actor_loss, critic_diagnostics, sac_diagnostics, td_target, temperature_loss


class SAC(LearnedTemperature, OffPolicyAlgorithm):
    """SAC / RLPD. ``cfg`` is a ``SACConfig`` (the ``learner`` group); see its field docstrings.

    Args:
        head: a head with reparameterized sampling and the log-prob of its samples (tanh-Gaussian).
        cfg: the updater config.
        num_envs, obs_dim, act_dim: the env's sizes.
        capacity: replay capacity in transitions.
        device: where the networks and the replay live.
        seed: seed of the replay's, exploration's and subset-min's generators.
        offline: the offline transitions mixed into each batch (``cfg.offline_ratio`` > 0), or None.
    """

    name = "sac"
    needs = frozenset({Capability.REPARAMETERIZED, Capability.LOG_PROB})

    def __init__(self, head: PolicyHead, cfg: Any, *, num_envs: int, obs_dim: int, act_dim: int, capacity: int,
                 device: torch.device, seed: int = 0, offline: OfflineReplay | None = None):
        super().__init__(head, cfg, num_envs=num_envs, obs_dim=obs_dim, act_dim=act_dim, capacity=capacity,
                         device=device, seed=seed, offline=offline)
        self.target_entropy = cfg.target_entropy_scale * act_dim
        self.learn_temperature = cfg.ent_coef == "auto"
        initial = cfg.init_temperature if self.learn_temperature else float(cfg.ent_coef)
        # log(0) for a fixed ent_coef 0 is -inf: exp gives alpha 0 exactly, as intended
        self.log_alpha = torch.tensor([math.log(initial) if initial > 0 else -math.inf], device=device,
                                      requires_grad=self.learn_temperature)
        fused = device.type in ("cpu", "cuda")
        temperature_lr = cfg.lr if cfg.temperature_lr is None else cfg.temperature_lr
        self.alpha_optimizer = (torch.optim.Adam([self.log_alpha], lr=temperature_lr, fused=fused)
                                if self.learn_temperature else None)
        self._sample, self._actor_loss = head.rsample_log_prob, self._actor_loss_eager
        if cfg.compile:
            self._sample, self._actor_loss = compile_step(head.rsample_log_prob), compile_step(self._actor_loss_eager)

    # ------------------------------------------------------------------ learning
    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    def _td_target(self, batch: ReplayBatch, alpha: torch.Tensor, subset_heads: torch.Tensor | None) -> torch.Tensor:
        """``y [B]``: the target critics' (subset-)minimum at ``a' ~ pi(s')`` with the soft backup.
        The one piece of the critic step a learner with another next-action rule (EXPO) replaces."""
        next_actions, next_log_prob = self.head.rsample_log_prob(batch.next_obs)
        next_q = self.critic_target(batch.next_obs, next_actions, heads=subset_heads)  # only the subset's heads
        return td_target(batch.rewards, batch.dones, next_q.min(dim=0).values,
                         next_log_prob if self.cfg.backup_entropy else None, alpha, self.cfg.gamma)

    def _actor_loss_eager(self, obs: torch.Tensor, actions_pi: torch.Tensor, log_prob: torch.Tensor,
                          alpha: torch.Tensor) -> torch.Tensor:
        return actor_loss(log_prob, self.critic(obs, actions_pi), alpha, self.cfg.actor_q_reduction)

    def actor_step(self, actions_pi: torch.Tensor, log_prob: torch.Tensor, obs: torch.Tensor,
                   alpha: torch.Tensor) -> torch.Tensor:
        """The actor loss on reparameterized ``actions_pi [B, A]`` with the current critics (whose
        parameters get no gradient from it)."""
        self.critic.requires_grad_(False)
        try:
            loss = self._actor_loss(obs, actions_pi, log_prob, alpha)
        finally:
            self.critic.requires_grad_(True)
        self._step(self.actor_optimizer, loss, self.actor_params)
        self.actor_steps += 1
        return loss.detach()

    def temperature_step(self, log_prob: torch.Tensor) -> torch.Tensor:
        if self.alpha_optimizer is None:
            return torch.zeros(())
        loss = temperature_loss(self.log_alpha, log_prob, self.target_entropy, self.cfg.temperature_loss)
        self.alpha_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.alpha_optimizer.step()
        return loss.detach()

    def sb3_gradient_step(self) -> dict[str, torch.Tensor]:
        batch = self.sampler.sample(self.cfg.batch_size)
        actions_pi, log_prob = self._sample(batch.obs)
        alpha = self.alpha  # read before the temperature step, as SB3
        temperature = self.temperature_step(log_prob)
        critic = self.critic_step(batch, alpha)
        policy = self.actor_step(actions_pi, log_prob, batch.obs, alpha)
        return self._named(critic, policy, temperature, log_prob, alpha)

    def cleanrl_gradient_step(self) -> dict[str, torch.Tensor]:
        batch = self.sampler.sample(self.cfg.batch_size)
        alpha = self.alpha
        critic = self.critic_step(batch, alpha)
        if self.critic_steps % self.cfg.actor_update_interval != 0:
            return {"value": critic["value"], **critic_diagnostics(critic["q"], critic["target"])}
        for _ in range(self.cfg.actor_update_interval):
            actions_pi, log_prob = self._sample(batch.obs)
            policy = self.actor_step(actions_pi, log_prob, batch.obs, alpha)
            with torch.no_grad():
                _, fresh_log_prob = self._sample(batch.obs)
            temperature = self.temperature_step(fresh_log_prob)
            alpha = self.alpha
        return self._named(critic, policy, temperature, log_prob, alpha)

    def rlpd_round(self) -> dict[str, torch.Tensor]:
        utd = int(self.cfg.utd)  # whole with this batching (the config refuses a fraction)
        minibatches = self.sampler.sample(self.cfg.batch_size * utd).chunk(utd)
        alpha = self.alpha
        for minibatch in minibatches:
            critic = self.critic_step(minibatch, alpha)
        return self.policy_steps(minibatches[-1], alpha, critic)

    def policy_steps(self, batch: Any, alpha: torch.Tensor, critic: dict[str, torch.Tensor]) -> dict[str, torch.Tensor]:
        """RLPD's once-per-round steps on the round's last minibatch: actor, then temperature (a
        learner with other policy networks, EXPO, overrides this)."""
        actions_pi, log_prob = self._sample(batch.obs)
        policy = self.actor_step(actions_pi, log_prob, batch.obs, alpha)
        temperature = self.temperature_step(log_prob)
        return self._named(critic, policy, temperature, log_prob, alpha)

    def _named(self, critic: dict[str, torch.Tensor], policy: torch.Tensor, temperature: torch.Tensor,
               log_prob: torch.Tensor, alpha: torch.Tensor) -> dict[str, torch.Tensor]:
        named = {"value": critic["value"], "policy": policy, "temperature": temperature}
        named.update(sac_diagnostics(critic["q"], critic["target"], log_prob, alpha))
        return named

    def update(self) -> dict[str, torch.Tensor]:
        """The gradient steps of one vector-env step: ``num_envs x utd`` critic steps (accrued, when utd is a
        fraction), with an actor step after each (``sb3``), after each ``utd`` (``rlpd``) or rounds of them
        every ``actor_update_interval`` (``cleanrl``). Returns the last step's diagnostics (none: ``{}``)."""
        named: dict[str, torch.Tensor] = {}
        if self.cfg.batching == "rlpd":
            for _ in range(self.num_envs):
                named = self.rlpd_round()
        elif self.cfg.batching == "cleanrl":
            for _ in range(self.gradient_steps_due()):
                named = self.cleanrl_gradient_step()
        else:
            for _ in range(self.gradient_steps_due()):
                named = self.sb3_gradient_step()
        return named
