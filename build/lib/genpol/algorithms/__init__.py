"""Learning methods (see ``genpol.algorithms.base``) and the registry that builds them from the
``updater`` config group: ``ppo``, ``spo``, ``aspo``, ``trpo`` (on-policy), ``sac`` (off-policy;
RLPD is a configuration of it) and ``expo`` (built on it)."""

from __future__ import annotations

from typing import Any

import torch

from genpol.envs import VectorEnv
from genpol.algorithms.base import Algorithm
from genpol.algorithms.onpolicy import OnPolicyAlgorithm
from genpol.heads import PolicyHead
from genpol.nets import ValueNetwork
from genpol.updaters.losses import ASPOLoss, PPOClipLoss, SPOLoss
from genpol.updaters.minibatch import MinibatchUpdater
from genpol.updaters.schedules import AdaptiveLR
from genpol.updaters.trpo import TRPOUpdater

ON_POLICY = ("ppo", "spo", "aspo", "trpo")
OFF_POLICY = ("sac", "consistency_ac", "expo")

__all__ = ["Algorithm", "OnPolicyAlgorithm", "ON_POLICY", "OFF_POLICY", "make_algorithm", "make_critic",
           "make_updater", "is_off_policy", "learner_needs", "check_learner"]


def is_off_policy(updater_name: str) -> bool:
    return updater_name in OFF_POLICY


def make_critic(policy_cfg: Any, obs_dim: int) -> ValueNetwork:
    return ValueNetwork(obs_dim, policy_cfg.critic_hidden_sizes, policy_cfg.critic_activation)


def make_updater(updater_cfg: Any, head: PolicyHead, critic: torch.nn.Module) -> MinibatchUpdater | TRPOUpdater:
    """PPO / SPO / ASPO (minibatch epochs on their loss) or TRPO, from the ``updater`` config group."""
    if updater_cfg.name == "trpo":
        return TRPOUpdater(
            head, critic, target_kl=updater_cfg.target_kl, cg_iterations=updater_cfg.cg_iterations,
            cg_damping=updater_cfg.cg_damping, line_search_shrink=updater_cfg.line_search_shrink,
            line_search_max_iter=updater_cfg.line_search_max_iter, critic_lr=updater_cfg.critic_lr,
            critic_epochs=updater_cfg.critic_epochs, critic_minibatch_size=updater_cfg.critic_minibatch_size,
            normalize_advantage=updater_cfg.normalize_advantage, adam_eps=updater_cfg.adam_eps,
            chunk_size=updater_cfg.chunk_size,
        )
    common = dict(ent_coef=updater_cfg.ent_coef, vf_coef=updater_cfg.vf_coef,
                  clip_range_vf=updater_cfg.clip_range_vf, normalize_advantage=updater_cfg.normalize_advantage)
    losses = {
        "ppo": lambda: PPOClipLoss(clip_range=updater_cfg.clip_range, **common),
        "spo": lambda: SPOLoss(clip_range=updater_cfg.clip_range, **common),
        "aspo": lambda: ASPOLoss(clip_range=updater_cfg.clip_range, spo_clip_range=updater_cfg.spo_clip_range,
                                 **common),
    }
    adaptive = (AdaptiveLR(updater_cfg.lr, updater_cfg.desired_kl)
                if updater_cfg.lr_schedule == "adaptive" else None)
    return MinibatchUpdater(
        head, critic, losses[updater_cfg.name](), lr=updater_cfg.lr, critic_lr=updater_cfg.critic_lr,
        epochs=updater_cfg.epochs, minibatch_size=updater_cfg.minibatch_size,
        max_grad_norm=updater_cfg.max_grad_norm, target_kl=updater_cfg.target_kl, adam_eps=updater_cfg.adam_eps,
        adaptive_lr=adaptive, compile=updater_cfg.compile,
    )


def make_algorithm(cfg: Any, head: PolicyHead, env: VectorEnv, offline: Any = None) -> Algorithm:
    """The learner of ``cfg.updater`` for ``head`` on ``env`` (``cfg`` is a ``TrainConfig``).

    ``offline`` is the offline transition store off-policy learners mix into their batches (None:
    online data only). Raises ``HeadCapabilityError`` when the head lacks what the learner needs.
    """
    device = torch.device(cfg.device)
    name = cfg.updater.name
    if name in ON_POLICY:
        critic = make_critic(cfg.policy, env.obs_dim).to(device)
        updater = make_updater(cfg.updater, head, critic)
        return OnPolicyAlgorithm(
            head, critic, updater, name=name, rollout_steps=cfg.updater.rollout_steps, num_envs=env.num_envs,
            obs_dim=env.obs_dim, gamma=cfg.updater.gamma, gae_lambda=cfg.updater.gae_lambda, seed=cfg.seed,
            lr_schedule=cfg.updater.lr_schedule, compile_sampling=cfg.pipeline.compile_sampling,
        )
    if name == "consistency_ac":
        from genpol.algorithms.qgradient import make_qgradient

        return make_qgradient(cfg, head, env, offline)
    from genpol.algorithms.sac import make_sac

    if name == "expo":
        from genpol.algorithms.expo import EXPO

        return make_sac(cfg, head, env, offline, algorithm_class=EXPO)
    return make_sac(cfg, head, env, offline)


def learner_needs(updater_name: str) -> frozenset:
    """The head capabilities the learner ``updater_name`` uses."""
    if updater_name in ON_POLICY:
        return OnPolicyAlgorithm.needs
    if updater_name == "consistency_ac":
        from genpol.algorithms.qgradient import QGradientActor

        return QGradientActor.needs
    if updater_name == "expo":
        from genpol.algorithms.expo import EXPO

        return EXPO.needs
    from genpol.algorithms.sac import SAC

    return SAC.needs


def check_learner(cfg: Any) -> None:
    """Raise ``ConfigError`` when ``cfg.policy``'s head lacks a capability ``cfg.updater`` needs, or
    pretraining needs (imitation), naming head, learner and the missing capabilities; or when an
    off-policy learner meets a head that acts in chunks."""
    from genpol.config.base import ConfigError
    from genpol.heads import head_class
    from genpol.heads.base import Capability, HeadCapabilityError, check_capabilities

    try:
        head = head_class(cfg.policy.family)
    except ValueError as error:
        raise ConfigError(f"policy.family: {error}") from None
    try:
        check_capabilities(head, f"updater={cfg.updater.name}", learner_needs(cfg.updater.name))
        if cfg.pipeline.name == "offline_to_online":
            check_capabilities(head, "pipeline=offline_to_online (behaviour cloning)", {Capability.IMITATION})
    except HeadCapabilityError as error:
        raise ConfigError(f"policy={cfg.policy.family} with updater={cfg.updater.name}: {error}") from None
    chunk = (getattr(cfg.policy, "act_steps", 1), getattr(cfg.policy, "horizon_steps", 1))
    if chunk != (1, 1) and is_off_policy(cfg.updater.name):
        raise ConfigError(f"updater={cfg.updater.name} learns from one-step transitions (its critics value single "
                          f"actions), but policy={cfg.policy.family} acts in chunks (policy.act_steps={chunk[0]}, "
                          f"policy.horizon_steps={chunk[1]}): set policy.act_steps=1 policy.horizon_steps=1")
