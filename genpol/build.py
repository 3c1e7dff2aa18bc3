"""Builders: validated config objects -> envs, heads, critics, updaters. Shared by all pipelines."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

import envs
from envs import ObservationNormalizer, VectorEnv
from genpol.config import EnvConfig
from genpol.heads import PolicyHead, build_head
from genpol.nets import ValueNetwork
from genpol.updaters.losses import ASPOLoss, PPOClipLoss, SPOLoss
from genpol.updaters.minibatch import MinibatchUpdater
from genpol.updaters.schedules import AdaptiveLR
from genpol.updaters.trpo import TRPOUpdater


def make_env(cfg: EnvConfig, *, gamma: float, seed: int | None, device: str | torch.device = "cpu",
             num_envs: int | None = None, training: bool = True, video_dir: Path | None = None,
             video_prefix: str = "rollout", stack: dict[str, Any] | None = None) -> VectorEnv:
    """The env stack of ``cfg``. Training envs scale rewards; evaluation envs return raw rewards.

    ``stack`` adds what the policy, not the env config, decides: ``action_chunk`` (a chunked head's
    act_steps), and an offline dataset's ``obs_bounds`` / ``action_bounds`` (which replace running
    observation normalization). Only training envs use ``cfg.workers``: evaluation envs live for a
    few episodes, shorter than a worker process takes to start (~2 s)."""
    stack = dict(stack or {})
    num_envs = num_envs or cfg.num_envs
    return envs.make(
        cfg.full_id, num_envs=num_envs, device=device, seed=seed,
        workers=min(cfg.workers, num_envs) if training else 1,
        normalize_obs=cfg.normalize_obs and stack.get("obs_bounds") is None,
        normalize_reward=cfg.normalize_reward and training,
        gamma=gamma, obs_clip=cfg.obs_clip, reward_clip=cfg.reward_clip,
        render_size=(cfg.render_width, cfg.render_height), video_dir=video_dir, video_prefix=video_prefix,
        max_episode_steps=cfg.max_episode_steps, env_kwargs=dict(cfg.kwargs), **stack,
    )


def env_stack(policy_cfg: Any) -> dict[str, Any]:
    """The env-stack settings a policy config implies (action chunks for chunked heads)."""
    return {"action_chunk": getattr(policy_cfg, "act_steps", 1)}


def evaluation_env_factory(cfg: EnvConfig, train_env: VectorEnv, gamma: float, device: str | torch.device,
                           stack: dict[str, Any] | None = None) -> Callable[[int, Path | None, str], VectorEnv]:
    """``(num_envs, video_dir, prefix) -> env`` whose observation statistics are a frozen copy of
    ``train_env``'s at call time."""

    def factory(num_envs: int, video_dir: Path | None, prefix: str) -> VectorEnv:
        env = make_env(cfg, gamma=gamma, seed=None, device=device, num_envs=num_envs, training=False,
                       video_dir=video_dir, video_prefix=prefix, stack=stack)
        source, target = train_env.find(ObservationNormalizer), env.find(ObservationNormalizer)
        if target is not None:
            target.load_own_state(source.own_state())
            target.frozen = True
        recorder = env.find(envs.VideoRecorder)
        if recorder is not None:
            recorder.max_episodes = 1
        return env

    return factory


def make_head(policy_cfg: Any, obs_dim: int, act_dim: int) -> PolicyHead:
    return build_head(policy_cfg.family, obs_dim, act_dim, **policy_cfg.head_kwargs())


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
