"""Builders: validated config objects -> envs and heads, shared by all pipelines (learners are built by
``genpol.algorithms.make_algorithm``)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

import torch

from genpol import envs
from genpol.envs import ObservationNormalizer, VectorEnv
from genpol.config import EnvConfig
from genpol.heads import PolicyHead, build_head
from genpol.policy import STEPS_WITHOUT_TIME_LIMIT

log = logging.getLogger(__name__)


def make_env(cfg: EnvConfig, *, gamma: float, seed: int | None, device: str | torch.device = "cpu",
             num_envs: int | None = None, training: bool = True, video_dir: Path | None = None,
             video_prefix: str = "rollout", stack: dict[str, Any] | None = None) -> VectorEnv:
    """The env stack of ``cfg``. Training envs scale rewards; evaluation envs return raw rewards.

    ``stack`` adds what the policy or the learner, not the env config, decides: ``action_chunk`` (a
    chunked head's act_steps), an offline dataset's ``obs_bounds`` / ``action_bounds`` (which replace
    running observation normalization), and ``normalize_obs`` / ``normalize_reward`` overrides (off
    by the learner's choice: off-policy learners store raw transitions). Only training envs use ``cfg.workers``
    and ``cfg.step_groups``: evaluation envs live for a
    few episodes, shorter than a worker process takes to start (~2 s)."""
    stack = dict(stack or {})
    num_envs = num_envs or cfg.num_envs
    normalize_obs = stack.pop("normalize_obs", cfg.normalize_obs) and stack.get("obs_bounds") is None
    normalize_reward = stack.pop("normalize_reward", cfg.normalize_reward) and training
    env = envs.make(
        cfg.full_id, num_envs=num_envs, device=device, seed=seed,
        workers=min(cfg.workers, num_envs) if training else 1,
        normalize_obs=normalize_obs, normalize_reward=normalize_reward,
        gamma=gamma, obs_clip=cfg.obs_clip, reward_clip=cfg.reward_clip,
        render_size=(cfg.render_width, cfg.render_height), video_dir=video_dir, video_prefix=video_prefix,
        max_episode_steps=cfg.max_episode_steps, env_kwargs=dict(cfg.kwargs), imports=tuple(cfg.imports),
        step_groups=cfg.step_groups if training else 0, **stack,
    )
    if training and getattr(env, "max_episode_steps", None) is None:
        log.warning("%s declares no time limit (max_episode_steps is None): its episodes end only when it ends "
                    "them, and evaluation cuts an episode at %d steps; set env.max_episode_steps to give it one",
                    cfg.full_id, STEPS_WITHOUT_TIME_LIMIT)
    return env


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
    """The head a validated ``policy`` group describes (its ``head_kwargs()``, checked by the head's Config)."""
    return build_head(policy_cfg.family, obs_dim, act_dim, **policy_cfg.head_kwargs())
