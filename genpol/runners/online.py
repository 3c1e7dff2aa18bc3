"""Pipeline ``online``: build everything from a config, resume if the run directory has a checkpoint,
train with the on-policy runner, and leave checkpoints, logs, a video, a curve and ``summary.json``."""

from __future__ import annotations

import dataclasses
import logging
from pathlib import Path
from typing import Any, Callable

import torch
from omegaconf import OmegaConf

from envs import VectorEnv
from genpol.build import env_stack, evaluation_env_factory, make_critic, make_env, make_head, make_updater
from genpol.callbacks import (Checkpointer, Evaluation, MetricsFile, ProgressBar, Summary,
                              TensorBoardLogger)
from genpol.checkpoint import load_latest, remove_temporary
from genpol.config import ConfigError, TrainConfig
from genpol.heads.base import PolicyHead
from genpol.policy import make_policy_spec
from genpol.runners.onpolicy import OnPolicyRunner

log = logging.getLogger(__name__)

# Keys that may change when a run is resumed: they do not alter what the run computes.
RESUMABLE_CHANGES = ("total_steps", "run_dir", "logger.", "pipeline.video", "pipeline.eval_",
                     "pipeline.checkpoint_every", "pipeline.keep_checkpoints")


_NO_DEFAULT = object()


def run_name(run_dir: Path) -> str:
    """The name videos are filed under: the run directory's name (with its parent's for sweep jobs,
    whose directories are numbered 0, 1, ...)."""
    run_dir = run_dir.resolve()
    return f"{run_dir.parent.name}_{run_dir.name}" if run_dir.name.isdigit() else run_dir.name


def _flatten(tree: Any, prefix: str = "") -> dict[str, Any]:
    if isinstance(tree, dict):
        flat: dict[str, Any] = {}
        for key, value in tree.items():
            flat.update(_flatten(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: tree}


def _schema_default(cfg: Any, key: str) -> Any:
    """The dataclass default of a dotted config key (``dataset.format``), or a sentinel if it has none.

    A key missing from a saved config but at its default is a field added to genpol after the run
    started: the run computed exactly what the default computes, so it may resume."""
    *parents, name = key.split(".")
    node = cfg
    for parent in parents:
        node = getattr(node, parent, None)
    if not dataclasses.is_dataclass(node):
        return _NO_DEFAULT
    for schema_field in dataclasses.fields(node):
        if schema_field.name == name:
            if schema_field.default is not dataclasses.MISSING:
                return schema_field.default
            if schema_field.default_factory is not dataclasses.MISSING:
                return schema_field.default_factory()
    return _NO_DEFAULT


def check_resume_config(run_dir: Path, cfg: TrainConfig) -> None:
    """Write ``config.yaml`` on a first start; on a resume, refuse a config that changes the run."""
    path = run_dir / "config.yaml"
    current = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    if not path.exists():
        path.write_text(OmegaConf.to_yaml(current))
        return
    saved = _flatten(OmegaConf.to_container(OmegaConf.load(path), resolve=True))
    now = _flatten(current)
    changed = sorted(key for key in set(saved) | set(now)
                     if saved.get(key) != now.get(key) and not key.startswith(RESUMABLE_CHANGES)
                     and not (key not in saved and now[key] == _schema_default(cfg, key)))
    if changed:
        details = ", ".join(f"{key}: {saved.get(key)!r} -> {now.get(key)!r}" for key in changed)
        raise ConfigError(
            f"{run_dir} holds a run with a different config ({details}); resuming it would not "
            "continue the same run. Use another run_dir, or the saved config."
        )


def prepare_run(cfg: TrainConfig, run_dir: str | Path) -> Path:
    """Create the run directory, check a resumed config, set threads and the seed."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    check_resume_config(run_dir, cfg)
    torch.set_num_threads(cfg.torch_threads)
    torch.manual_seed(cfg.seed)
    return run_dir


def train_online(cfg: TrainConfig, run_dir: str | Path) -> dict[str, Any]:
    """Train (or resume) the run in ``run_dir`` from scratch; return the summary."""
    run_dir = prepare_run(cfg, run_dir)
    stack = env_stack(cfg.policy)
    env = make_env(cfg.env, gamma=cfg.updater.gamma, seed=cfg.seed, device=cfg.device, stack=stack)
    head = make_head(cfg.policy, env.obs_dim, env.act_dim).to(cfg.device)
    return run_online(cfg, run_dir, env, head, stack)


def run_online(cfg: TrainConfig, run_dir: Path, env: VectorEnv, head: PolicyHead, stack: dict[str, Any],
               normalized_score: Callable[[float], float] | None = None,
               extra_summary: dict[str, Any] | None = None) -> dict[str, Any]:
    """On-policy training of ``head`` on ``env`` with the configured updater, resuming from
    ``run_dir/checkpoints`` if it holds any; callbacks, checkpoints, evaluation and the summary."""
    device = torch.device(cfg.device)
    gamma = cfg.updater.gamma
    critic = make_critic(cfg.policy, env.obs_dim).to(device)
    updater = make_updater(cfg.updater, head, critic)
    policy_spec = make_policy_spec(head, env, cfg.env.full_id, dict(cfg.env.kwargs), cfg.env.max_episode_steps,
                                   (cfg.env.render_width, cfg.env.render_height))
    pipeline = cfg.pipeline
    video_dir = Path(pipeline.video_dir) / run_name(run_dir) if pipeline.video else None
    evaluation = Evaluation(evaluation_env_factory(cfg.env, env, gamma, device, stack), pipeline.eval_episodes,
                            pipeline.eval_every, video_dir, normalized_score)
    checkpointer = Checkpointer(run_dir / "checkpoints", policy_spec, pipeline.checkpoint_every,
                                pipeline.keep_checkpoints)
    metrics_path = run_dir / "progress.jsonl"
    callbacks = [evaluation, MetricsFile(metrics_path)]
    if cfg.logger.tensorboard:
        callbacks.append(TensorBoardLogger(run_dir / "tb"))
    if cfg.logger.progress_bar:
        callbacks.append(ProgressBar(cfg.total_steps, env.env_id))
    summary = Summary(run_dir, metrics_path, evaluation, checkpointer,
                      {"env": cfg.env.full_id, "policy": cfg.policy.family, "updater": cfg.updater.name,
                       "seed": cfg.seed, "run_dir": str(run_dir), **(extra_summary or {})})
    callbacks += [checkpointer, summary]

    runner = OnPolicyRunner(
        env, head, critic, updater, rollout_steps=cfg.updater.rollout_steps, gamma=gamma,
        gae_lambda=cfg.updater.gae_lambda, total_steps=cfg.total_steps, seed=cfg.seed,
        lr_schedule=cfg.updater.lr_schedule, callbacks=callbacks, compile_sampling=pipeline.compile_sampling,
    )
    remove_temporary(run_dir / "checkpoints")
    latest = load_latest(run_dir / "checkpoints", map_location=device)
    if latest is not None:
        log.info("resuming from %s", latest[0])
        runner.load(latest[1], latest[2])
    try:
        runner.run()
    finally:
        env.close()
    return summary.summary
