"""``python -m genpol.evaluate run_dir=<path> episodes=<int> video=true`` (or ``python -m genpol.evaluate <path> ...``)

Reports the deterministic and stochastic mean return (and success rate, where the env defines
success) of a run's latest checkpoint (or of ``checkpoint=<dir>``) and writes
``videos/<run name>/{deterministic,stochastic}-<checkpoint>-episode0.mp4`` (the run's own folder there:
``genpol.runners.scaffold.video_folder``; the checkpoint's name, e.g. ``step_000010240``, keeps each checkpoint's
videos).
"""

from __future__ import annotations

import json
import re
import sys
from pathlib import Path
from typing import Any

import hydra
import torch
from omegaconf import DictConfig

from genpol.allocator import retain_freed_memory
from genpol.callbacks.base import failure_hint
from genpol.checkpoint import list_checkpoints, resolve_checkpoint
from genpol.config import EvaluateConfig
from genpol.config.aliases import quoted
from genpol.configure import register_configs, validate
from genpol.envs import EnvError, VideoRecorder
from genpol.errors import CheckpointError, ConfigError
from genpol.files import write_text_atomic
from genpol.policy import TrainedPolicy, evaluate_episodes
from genpol.runners.scaffold import video_folder
from genpol.sweep_check import check_single_run, is_multirun

register_configs()


def evaluate_run(cfg: EvaluateConfig) -> dict[str, Any]:
    """Evaluate a checkpoint; write ``evaluation.json`` next to its run's summary (``evaluation-<checkpoint>.json``
    for one other than the latest: ``evaluation_file``); return the results."""
    threads = torch.get_num_threads()  # the caller's (the Python API), restored at the end
    torch.set_num_threads(cfg.torch_threads)
    retain_freed_memory()
    try:
        checkpoint = cfg.checkpoint
        if checkpoint and not Path(checkpoint).exists() and (Path(cfg.run_dir) / checkpoint).exists():
            checkpoint = str(Path(cfg.run_dir) / checkpoint)  # checkpoints/step_... of the run, as it lists them
        if checkpoint and not Path(checkpoint).exists():  # a mistyped step was called "not a checkpoint of run_dir"
            steps = [str(path.relative_to(cfg.run_dir)) for path in list_checkpoints(Path(cfg.run_dir) / "checkpoints")]
            held = ", ".join(steps[-5:]) + (" (the last 5)" if len(steps) > 5 else "") if steps else "no checkpoint"
            raise CheckpointError(f"checkpoint={cfg.checkpoint} does not exist (looked at {Path(cfg.checkpoint)} and "
                                  f"{Path(cfg.run_dir) / cfg.checkpoint}); run_dir={cfg.run_dir} holds {held}")
        if checkpoint and not Path(checkpoint).resolve().is_relative_to(Path(cfg.run_dir).resolve()):
            # the run_dir was ignored: another run's checkpoint was evaluated and its evaluation.json written
            raise ConfigError(f"checkpoint={cfg.checkpoint} is not a checkpoint of run_dir={cfg.run_dir}: give one "
                              "of that run's checkpoints, or the other checkpoint as run_dir alone")
        policy = TrainedPolicy.load(checkpoint or cfg.run_dir, device=cfg.device)
        run_dir = run_of(policy.source)  # run_dir may name one of its checkpoints
        results: dict[str, Any] = {"checkpoint": str(policy.source.resolve()), "env": policy.env_id,
                                   "episodes": cfg.episodes,
                                   "videos": []}
        for mode in ("deterministic", "stochastic"):
            video_dir = video_folder(cfg.video_dir, run_dir) if cfg.video else None
            try:
                returns, lengths, success = _evaluate_mode(policy, cfg, mode, video_dir, results["videos"])
            except Exception as error:  # noqa: BLE001 - rendering is optional, as in training: the returns without it
                if video_dir is None or isinstance(error, (CheckpointError, ConfigError)):
                    raise  # a policy that cannot run here: not a video's failure
                print(f"genpol: the {mode} evaluation's video failed ({failure_hint(error)}); evaluating without "
                      "video", file=sys.stderr)
                returns, lengths, success = _evaluate_mode(policy, cfg, mode, None, results["videos"])
            results[f"{mode}_return_mean"] = float(returns.mean())
            results[f"{mode}_return_std"] = float(returns.std())
            results[f"{mode}_length_mean"] = float(lengths.mean())
            if success is not None:  # envs that define success (goal envs such as PointMaze)
                results[f"{mode}_success_rate"] = float(success.mean())
        if (run_dir / "config.yaml").is_file() or (run_dir / "summary.json").is_file():
            write_text_atomic(run_dir / evaluation_file(run_dir, policy.source), json.dumps(results, indent=2))
        return results
    finally:
        torch.set_num_threads(threads)


def evaluation_file(run_dir: Path, checkpoint: Path) -> str:
    """Where an evaluation of ``checkpoint`` goes in ``run_dir``: ``evaluation.json`` for the run's own policy (its
    latest checkpoint, what ``genpol-evaluate <run>`` evaluates), ``evaluation-<its path, / as ->.json`` for any
    other (``evaluation-checkpoints-step_000000001024.json``, ``evaluation-pretrain-checkpoints-step_...``), so
    that evaluating an earlier checkpoint keeps the final one's results, as its videos are kept."""
    try:
        latest = resolve_checkpoint(run_dir).resolve()
    except CheckpointError:  # a run whose checkpoints are only a phase's (pretraining, a GoRL stage's best)
        latest = None
    if checkpoint.resolve() == latest or not checkpoint.resolve().is_relative_to(run_dir.resolve()):
        return "evaluation.json"
    return "evaluation-" + "-".join(checkpoint.resolve().relative_to(run_dir.resolve()).parts) + ".json"


def run_of(checkpoint: Path) -> Path:
    """The run directory a checkpoint belongs to: ``<run>/checkpoints/step_*``, a phase's
    ``<run>/pretrain/checkpoints/step_*``, GoRL's ``<run>/stage_k/best/step_*``: the folder holding
    ``config.yaml`` one or two levels above the checkpoint's ``checkpoints/`` or ``best/``. Anything else (a
    checkpoint copied out of its run, say into a project whose own ``config.yaml`` lies above it) is its own
    folder: ``evaluation.json`` and the videos' folder name are never another directory's."""
    if checkpoint.parent.name in ("checkpoints", "best"):
        for folder in checkpoint.parents[1:3]:
            if (folder / "config.yaml").is_file():
                return folder
    return checkpoint


def _evaluate_mode(policy: TrainedPolicy, cfg: EvaluateConfig, mode: str, video_dir: Path | None,
                   videos: list[str]) -> tuple[Any, Any, Any]:
    # the checkpoint's name in the video's: evaluating another checkpoint of the run keeps this one's videos
    env = policy.make_env(num_envs=cfg.episodes, device=cfg.device, video_dir=video_dir,
                          video_prefix=f"{mode}-{policy.source.name}")
    try:
        results = evaluate_episodes(env, lambda obs: policy.act(obs, deterministic=mode == "deterministic"),
                                    cfg.seed)
        recorder = env.find(VideoRecorder)
        if recorder is not None:
            videos += [str(path) for path in recorder.paths]
    finally:
        env.close()
    return results


def positional_run_dir(argv: list[str]) -> list[str]:
    """``argv`` with a bare first argument (``genpol-evaluate runs/hopper``, as ``genpol-report`` takes its
    folder) written as Hydra's ``run_dir=<it>``; one that does not exist is then named as such."""
    if argv and not argv[0].startswith("-") and (Path(argv[0]).is_dir()  # a folder named lr=0.1 is a folder
                                                 or not re.match(r"^[+~]{0,2}[A-Za-z_][\w.@-]*=", argv[0])):
        return [f"run_dir={quoted(argv[0])}", *argv[1:]]  # a path, '=' in it or not (a sweep's folder names)
    return argv


_reached = {"config": False}  # whether Hydra composed a config and handed it over


@hydra.main(version_base="1.3", config_path="pkg://genpol.configs", config_name="evaluate")
def evaluate_from_config(cfg: DictConfig) -> None:
    _reached["config"] = True
    try:
        results = evaluate_run(validate(cfg))
    except (ConfigError, CheckpointError, EnvError) as error:
        print(f"genpol: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(2)
    print(json.dumps(results, indent=2))


def main() -> None:
    """The command line (``python -m genpol.evaluate``, ``genpol-evaluate``)."""
    sys.argv[1:] = positional_run_dir(sys.argv[1:])
    _reached["config"] = False
    if not is_multirun(sys.argv[1:]):
        try:  # one line naming a misspelt key (episode=2: did you mean episodes?), not Hydra's several
            check_single_run(sys.argv[1:], "evaluate")
        except ConfigError as error:
            print(f"genpol: {type(error).__name__}: {error}", file=sys.stderr)
            sys.exit(2)
    try:
        evaluate_from_config()
    except SystemExit as stop:
        # Hydra reports a config it cannot compose (a misspelt key, a value of the wrong type) itself and exits
        # 1; that is bad input, exit 2 as genpol's own config errors (and genpol-train's), for a single run
        multirun = is_multirun(sys.argv[1:])
        if stop.code == 1 and not _reached["config"] and not multirun:
            sys.exit(2)
        raise


if __name__ == "__main__":
    main()
