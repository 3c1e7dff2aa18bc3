"""TD3 (Fujimoto, van Hoof, Meger 2018) as a learner of your own: this file and one yaml.

TD3 is the off-policy baseline of deterministic actors: twin critics whose minimum forms the
target, target-policy smoothing (clipped Gaussian noise on the target actor's action), and an
actor and targets updated every ``policy_delay`` critic steps. Defaults follow CleanRL's
``td3_continuous_action.py``: lr 3e-4, batch 256, tau 0.005, policy noise 0.2 clipped at 0.5,
exploration noise 0.1, delay 2, 256-256 ReLU critics.

What genpol gives it: ``OffPolicyAlgorithm`` owns the replay (with offline data mixed in when
``learner.offline_ratio`` > 0), the twin critics with their Polyak targets and optimizers, uniform
random actions until ``learning_starts``, the critic's TD step and the checkpoint of all that; TD3
defines its target, its acting and its delayed actor step. ``register_learner`` adds its row to the
learner table, which validation, the pipelines and the torchrun check read.

The actor is the head's deterministic action, ``head.act(obs, deterministic=True)``, which must be
differentiable in the head's parameters: ``policy=tanh_gaussian`` gives ``tanh(mean(s))``, TD3's
actor (the head's log-std output is left unused).

Departures from the paper, both CleanRL's and SB3's too: the critic loss is SB3's ``0.5 sum_i
MSE(Q_i, y)`` (the paper sums without the half; Adam is indifferent to the scale), and the targets
move with the actor, every ``policy_delay`` critic steps (``target_update_interval``).
"""

from __future__ import annotations

import copy
from dataclasses import dataclass
from typing import Any

import torch

from genpol.algorithms.offpolicy import OffPolicyAlgorithm
from genpol.algorithms.registry import Learner, register_learner
from genpol.config.base import require
from genpol.config.offpolicy import OffPolicyConfig
from genpol.heads.base import Capability, PolicyHead
from genpol.qensemble import polyak_update
from genpol.storage.replay import ReplayBatch
from genpol.updaters.sac_losses import td_target


@dataclass
class TD3Config(OffPolicyConfig):
    """TD3's learner group: what every off-policy learner has, and TD3's own four settings."""

    name: str = "td3"
    """Learner name; selects the learner."""
    module: str = "td3"
    """The module that registers this learner (this file); genpol imports it before composing."""
    policy_delay: int = 2
    """Critic steps per actor step (and per update of the target actor and critics)."""
    policy_noise: float = 0.2
    """Std of the Gaussian noise on the target actor's action (target-policy smoothing)."""
    noise_clip: float = 0.5
    """That noise is clipped to [-noise_clip, noise_clip]."""
    exploration_noise: float = 0.1
    """Std of the Gaussian noise added to the actor's action when collecting."""
    target_update_interval: int = 2
    """Critic steps between Polyak updates of the target critics: TD3 updates them with the actor."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.policy_delay >= 1, "learner.policy_delay", ">= 1", self.policy_delay)
        require(self.policy_noise >= 0, "learner.policy_noise", ">= 0", self.policy_noise)
        require(self.noise_clip >= 0, "learner.noise_clip", ">= 0", self.noise_clip)
        require(self.exploration_noise >= 0, "learner.exploration_noise", ">= 0", self.exploration_noise)


class TD3(OffPolicyAlgorithm):
    """TD3 on a head whose deterministic action is differentiable (``policy=tanh_gaussian``).

    Args: as ``OffPolicyAlgorithm``; ``cfg`` is a ``TD3Config``.
    """

    name = "td3"
    needs = frozenset({Capability.REPARAMETERIZED})

    def __init__(self, head: PolicyHead, cfg: TD3Config, **kwargs: Any):
        super().__init__(head, cfg, **kwargs)
        probe = head.act(torch.zeros(1, head.obs_dim, device=self.device), deterministic=True)
        if not probe.requires_grad:
            raise TypeError(f"td3 trains the {head.family} head through its deterministic action, which carries "
                            "no gradient; use policy=tanh_gaussian")
        self.actor_target = copy.deepcopy(head).requires_grad_(False)
        # its own stream: the smoothing noise must not shift the exploration noise's draws
        self.smoothing_generator = torch.Generator().manual_seed(kwargs.get("seed", 0) + 7)
        self.last_actor_loss = torch.zeros(())

    @torch.no_grad()
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """Uniform random actions until ``learning_starts``, then ``mu(s) + N(0, exploration_noise)``."""
        if self.env_steps < self.cfg.learning_starts:
            return super().act(obs)
        action = self.head.act(obs, deterministic=True)
        noise = torch.randn(action.shape, generator=self.explore_generator) * self.cfg.exploration_noise
        return (action + noise.to(action.device)).clamp(-1.0, 1.0)

    def _td_target(self, batch: ReplayBatch, alpha: torch.Tensor, subset_heads: torch.Tensor | None) -> torch.Tensor:
        """``r + gamma (1 - done) min_i Q_target,i(s', clip(mu_target(s') + clip(eps, -c, c), -1, 1))``."""
        noise = torch.randn(batch.actions.shape, generator=self.smoothing_generator) * self.cfg.policy_noise
        noise = noise.clamp(-self.cfg.noise_clip, self.cfg.noise_clip).to(batch.actions.device)
        next_actions = (self.actor_target.act(batch.next_obs, deterministic=True) + noise).clamp(-1.0, 1.0)
        next_q = self.critic_target(batch.next_obs, next_actions, heads=subset_heads)  # only the subset's heads
        return td_target(batch.rewards, batch.dones, next_q.min(dim=0).values, None, alpha, self.cfg.gamma)

    def actor_step(self, obs: torch.Tensor) -> torch.Tensor:
        """``-mean Q_1(s, mu(s))`` (the first critic, as the paper), then the target actor's Polyak step."""
        self.critic.requires_grad_(False)
        try:
            loss = -self.critic(obs, self.head.act(obs, deterministic=True))[0].mean()
        finally:
            self.critic.requires_grad_(True)
        self._step(self.actor_optimizer, loss, self.actor_params)
        self.actor_steps += 1
        polyak_update(self.actor_target, self.head, self.cfg.tau)
        return loss.detach()

    def update(self) -> dict[str, torch.Tensor]:
        """The critic steps due (``num_envs x utd`` per vector step, accrued when ``learner.utd`` is a
        fraction), an actor step after every ``policy_delay``-th; no diagnostics when none was due."""
        named: dict[str, torch.Tensor] = {}
        for _ in range(self.gradient_steps_due()):
            batch = self.sampler.sample(self.cfg.batch_size)
            critic = self.critic_step(batch, torch.zeros((), device=self.device))
            if self.critic_steps % self.cfg.policy_delay == 0:
                self.last_actor_loss = self.actor_step(batch.obs)
            named = {"value": critic["value"], "policy": self.last_actor_loss, "q_mean": critic["q"].mean(),
                     "target_mean": critic["target"].mean()}
        return named

    def networks(self) -> dict[str, torch.nn.Module | torch.Tensor]:
        return {**super().networks(), "actor_target": self.actor_target}

    def state_dict(self) -> dict[str, Any]:
        return {**super().state_dict(), "actor_target": self.actor_target.state_dict(),
                "smoothing_rng": self.smoothing_generator.get_state(), "last_actor_loss": self.last_actor_loss}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        super().load_state_dict(state)
        self.actor_target.load_state_dict(state["actor_target"])
        self.smoothing_generator.set_state(state["smoothing_rng"])
        self.last_actor_loss = state["last_actor_loss"]


register_learner(Learner("td3", TD3Config, TD3.build, off_policy=True, offline_phase="behaviour_cloning",
                         torchrun=False, needs=TD3.needs, check_memory=TD3.check_memory))
