"""Builders: validated config objects -> envs, heads, critics, updaters. Shared by all pipelines."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Callable

import torch

import envs
from envs import ObservationNormalizer, VectorEnv
from genpol.config import EnvConfig, PPOConfig
from genpol.heads import PolicyHead, build_head
from genpol.nets import ValueNetwork
from genpol.updaters.losses import PPOClipLoss
from genpol.updaters.minibatch import MinibatchUpdater


def make_env(cfg: EnvConfig, *, gamma: float, seed: int | None, device: str | torch.device = "cpu",
             num_envs: int | None = None, training: bool = True, video_dir: Path | None = None,
             video_prefix: str = "rollout") -> VectorEnv:
    """The env stack of ``cfg``. Training envs scale rewards; evaluation envs return raw rewards."""
    return envs.make(
        cfg.full_id, num_envs=num_envs or cfg.num_envs, device=device, seed=seed,
        normalize_obs=cfg.normalize_obs, normalize_reward=cfg.normalize_reward and training,
        gamma=gamma, obs_clip=cfg.obs_clip, reward_clip=cfg.reward_clip,
        render_size=(cfg.render_width, cfg.render_height), video_dir=video_dir, video_prefix=video_prefix,
        max_episode_steps=cfg.max_episode_steps, env_kwargs=dict(cfg.kwargs),
    )


def evaluation_env_factory(cfg: EnvConfig, train_env: VectorEnv, gamma: float,
                           device: str | torch.device) -> Callable[[int, Path | None, str], VectorEnv]:
    """``(num_envs, video_dir, prefix) -> env`` whose observation statistics are a frozen copy of
    ``train_env``'s at call time."""

    def factory(num_envs: int, video_dir: Path | None, prefix: str) -> VectorEnv:
        env = make_env(cfg, gamma=gamma, seed=None, device=device, num_envs=num_envs, training=False,
                       video_dir=video_dir, video_prefix=prefix)
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


def make_updater(updater_cfg: PPOConfig, head: PolicyHead, critic: torch.nn.Module) -> MinibatchUpdater:
    loss = PPOClipLoss(
        clip_range=updater_cfg.clip_range, ent_coef=updater_cfg.ent_coef, vf_coef=updater_cfg.vf_coef,
        clip_range_vf=updater_cfg.clip_range_vf, normalize_advantage=updater_cfg.normalize_advantage,
    )
    return MinibatchUpdater(
        head, critic, loss, lr=updater_cfg.lr, critic_lr=updater_cfg.critic_lr, epochs=updater_cfg.epochs,
        minibatch_size=updater_cfg.minibatch_size, max_grad_norm=updater_cfg.max_grad_norm,
        target_kl=updater_cfg.target_kl, adam_eps=updater_cfg.adam_eps, compile=updater_cfg.compile,
    )
