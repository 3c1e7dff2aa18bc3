"""Pipeline ``online``: build everything from a config, resume if the run directory has a checkpoint,
train with the configured learner (on-policy or off-policy), and leave checkpoints, logs, a video,
a curve and ``summary.json``.

With ``dataset.path`` set, an off-policy learner mixes the offline transitions into every batch
(RLPD's symmetric sampling, ``learner.offline_ratio``); on-policy learners have no use for them.
"""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any, Callable

import torch

from genpol import collectives
from genpol.envs import VectorEnv
from genpol.algorithms import is_off_policy, make_algorithm
from genpol.build import env_stack, evaluation_env_factory, make_env, make_head
from genpol.callbacks import Evaluation
from genpol.config import TrainConfig
from genpol.heads.base import PolicyHead
from genpol.policy import make_policy_spec
from genpol.runners.onpolicy import OnPolicyRunner
from genpol.runners.scaffold import Phase, phase_callbacks, prepare_run, run_phase, video_folder

log = logging.getLogger(__name__)


def train_online(cfg: TrainConfig, run_dir: str | Path) -> dict[str, Any]:
    """Train (or resume) the run in ``run_dir`` from scratch; return the summary."""
    run_dir = prepare_run(cfg, run_dir)
    offline = None  # dataset.path against the learner: checked by configure.check_groups
    stack = {**env_stack(cfg.policy), **off_policy_env_settings(cfg)}
    env = make_env(cfg.env, gamma=cfg.learner.gamma, seed=cfg.seed, device=cfg.device, stack=stack)
    head = make_head(cfg.policy, env.obs_dim, env.act_dim).to(cfg.device)
    extra: dict[str, Any] = {}
    normalized = None
    if cfg.dataset.path is not None:
        from genpol.runners.offpolicy import load_offline_transitions

        offline, extra, normalized = load_offline_transitions(cfg, env, run_dir)
    return run_online(cfg, run_dir, env, head, stack, normalized, extra_summary=extra, offline=offline)


def off_policy_env_settings(cfg: TrainConfig) -> dict[str, Any]:
    """Off-policy learners store observations and rewards in a replay buffer, where running
    normalization statistics would go stale: their envs hand over raw observations and rewards."""
    if not is_off_policy(cfg.learner.name):
        return {}
    if cfg.env.normalize_obs or cfg.env.normalize_reward:
        log.info("learner=%s: observations and rewards are not normalized (a replay buffer would keep "
                 "stale statistics)", cfg.learner.name)
    return {"normalize_obs": False, "normalize_reward": False}


def env_steps_per_rollout(cfg: TrainConfig, env: VectorEnv, action_chunk: int = 1) -> int:
    """An on-policy rollout's nominal env steps: ``rollout_steps`` agent steps of ``action_chunk`` env steps, times
    ``num_envs``, summed over torchrun's ranks."""
    return cfg.learner.rollout_steps * action_chunk * env.num_envs * collectives.world_size()


def steps_trained(cfg: TrainConfig, env: VectorEnv, on_policy: bool, action_chunk: int = 1) -> int:
    """The env steps the run will take, with a warning where they are not ``total_steps``: an on-policy
    run collects whole rollouts (``env_steps_per_rollout``), so it rounds ``total_steps`` up to a multiple of
    one (a chunk cut short by an episode's end makes a rollout shorter: then the count is approximate, and the
    run stops after that many rollouts). An off-policy run steps all its envs at once, so it rounds up to a
    multiple of ``num_envs``; and an online run that ends inside its uniform warm-up
    (``learner.learning_starts``) takes no gradient step: warned too."""
    if on_policy:
        ranks = collectives.world_size()
        per_rollout = env_steps_per_rollout(cfg, env, action_chunk)
        trained = -(-cfg.total_steps // per_rollout) * per_rollout
        if trained != cfg.total_steps:
            factors = [f"learner.rollout_steps={cfg.learner.rollout_steps}",
                       *([f"policy.act_steps={action_chunk}"] if action_chunk > 1 else []),
                       f"env.num_envs={env.num_envs}", *([f"{ranks} ranks"] if ranks > 1 else [])]
            log.warning("total_steps=%d is not a whole number of rollouts of %d env steps (%s): training %s%d env "
                        "steps", cfg.total_steps, per_rollout, " x ".join(factors),
                        "about " if action_chunk > 1 else "", trained)
        return trained
    executed = env.num_envs * action_chunk
    trained = -(-cfg.total_steps // executed) * executed
    if trained != cfg.total_steps:
        log.warning("total_steps=%d is not a multiple of the %d envs stepped at once (env.num_envs=%d): training "
                    "%d env steps", cfg.total_steps, executed, env.num_envs, trained)
    starts = getattr(cfg.learner, "learning_starts", 0)
    if cfg.pipeline.name == "online" and starts >= cfg.total_steps:
        log.warning("learner.learning_starts=%d >= total_steps=%d: the run acts at random throughout and takes "
                    "no gradient step", starts, cfg.total_steps)
    return trained


def run_online(cfg: TrainConfig, run_dir: Path, env: VectorEnv, head: PolicyHead, stack: dict[str, Any],
               normalized_score: Callable[[float], float] | None = None,
               extra_summary: dict[str, Any] | None = None, offline: Any = None,
               algorithm: Any = None) -> dict[str, Any]:
    """Train ``head`` on ``env`` with the configured learner (``algorithm``, or a new one built from
    the config), resuming from ``run_dir/checkpoints`` if it holds any; callbacks, checkpoints,
    evaluation and the summary."""
    device = torch.device(cfg.device)
    if algorithm is None:
        algorithm = make_algorithm(cfg, head, env, offline)
    # the head evaluation acts with (EXPO's on-the-fly policy carries its critics): what policy/ rebuilds
    policy_spec = make_policy_spec(algorithm.acting_head(), env, cfg.env.full_id, dict(cfg.env.kwargs), cfg.env.max_episode_steps,
                                   (cfg.env.render_width, cfg.env.render_height))
    pipeline = cfg.pipeline
    trained_steps = steps_trained(cfg, env, algorithm.on_policy, stack.get("action_chunk", 1))
    video_dir = video_folder(pipeline.video_dir, run_dir) if pipeline.video else None
    evaluation = Evaluation(evaluation_env_factory(cfg.env, env, cfg.learner.gamma, device, stack),
                            pipeline.eval_episodes, pipeline.eval_every, video_dir, normalized_score,
                            deterministic=pipeline.eval_deterministic)
    phase = Phase(
        directory=run_dir, tensorboard_dir=run_dir / "tb" if cfg.logger.tensorboard else None,
        total=trained_steps if cfg.logger.progress_bar else None, label=env.env_id,
        checkpoint_every=pipeline.checkpoint_every, keep_checkpoints=pipeline.keep_checkpoints,
        policy_spec=policy_spec, evaluation=evaluation,
        summary_extra={"env": cfg.env.full_id, "policy": cfg.policy.family, "learner": cfg.learner.name,
                       "seed": cfg.seed, "run_dir": str(run_dir), **(extra_summary or {})},
    )
    callbacks = phase_callbacks(phase)
    if algorithm.on_policy:
        chunk = stack.get("action_chunk", 1)
        rollouts = trained_steps // env_steps_per_rollout(cfg, env, chunk) if chunk > 1 else None
        runner = OnPolicyRunner(env, algorithm, cfg.total_steps, seed=cfg.seed, callbacks=callbacks.callbacks,
                                update_threads=cfg.update_threads, iterations=rollouts)
    else:
        from genpol.runners.offpolicy import OffPolicyRunner

        runner = OffPolicyRunner(env, algorithm, cfg.total_steps, seed=cfg.seed, callbacks=callbacks.callbacks,
                                 iteration_steps=cfg.learner.iteration_steps)
    run_phase(runner, phase, device, close=env.close)
    return callbacks.summary.summary if callbacks.summary is not None else {}  # None: a rank > 0
