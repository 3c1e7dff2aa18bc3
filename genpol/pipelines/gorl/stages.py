"""Pipeline ``gorl``: GoRL's stages in one run directory (ALGORITHMS.md 6.2), on the run scaffold.

Stage k (k = 0 .. K-1):

1. **Encoder.** A freshly initialized encoder (and critic, optimizer) learns with the on-policy
   updater for ``total_steps * w_k / sum(w)`` env steps, rounded up to whole rollouts as an online run's
   ``total_steps`` is (warned; the summary counts the steps taken); the decoder is frozen. Stage 0's decoder is
   the zero-initialized identity, so stage 0 is Gaussian PPO with tanh. Stage 0 uses the ``*_first``
   clip range, grad-norm limit and latent L2 penalty, later stages the ``*_later`` ones. The
   best-evaluation encoder is kept (``stage_k/best``, a loadable policy checkpoint).
2. **Collection** (not after the last stage). The best encoder with the current decoder collects
   ``collect_steps`` env steps of (s, pre-tanh a), on a separate env with raw rewards.
3. **Decoder.** A new decoder, from a fresh initialization, learns by flow matching (or, with
   ``policy.decoder=ddim``, DDPM's epsilon loss) from N(0, I) onto the collected actions; stage k+1
   starts with it (``load_decoder``, which also ends the ddim decoder's stage-0 bypass).

Observation statistics. The decoder is conditioned on normalized observations, so the statistics it
was trained under must not move under it: they run during stage 0 and are frozen from the first
collection on, at the values the best stage-0 encoder was evaluated with. (GoRL's decoder keeps its
own fixed statistics from the collected data; this is the same idea in genpol's env stack.)

Run directory: ``stage_k/`` (the encoder phase's checkpoints, progress, summary; ``best/``;
``collection.pt``; ``decoder.pt``; ``stage.json`` once the stage is complete), ``tb/`` (one
TensorBoard run over all stages, at cumulative encoder env steps, with ``gorl/stage`` marking the
boundaries and ``decoder/stage_k/*`` the decoder fits), ``checkpoints/`` (the final combined policy:
the last stage's best encoder with its decoder, what ``evaluate`` and ``load_policy`` read) and
``summary.json`` (encoder, collection and total env steps under their own names). Re-running the
command resumes: finished stages are skipped, an interrupted encoder phase resumes from its latest
checkpoint, and an interrupted collection or decoder fit is redone (deterministic from its seed).
"""

from __future__ import annotations

import dataclasses
import json
import logging
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from genpol.envs import ObservationNormalizer, VectorEnv, VideoRecorder
from genpol.algorithms import make_algorithm
from genpol.build import env_stack, evaluation_env_factory, make_env, make_head
from genpol.callbacks import Evaluation
from genpol.callbacks.base import failure_hint
from genpol.checkpoint import CheckpointError, list_checkpoints, load_latest, load_policy_files, save_checkpoint
from genpol.config import ConfigError, TrainConfig
from genpol.errors import SEED_LIMIT
from genpol.files import write_text_atomic
from genpol.memory import require_memory
from genpol.heads.latent import LatentDecoderHead
from genpol.policy import TrainedPolicy, make_policy_spec, run_episodes
from genpol.pipelines.gorl.callbacks import BestEvaluation, StageTensorBoard
from genpol.pipelines.gorl.distill import DecoderTraining, collect_pre_tanh_actions, save_atomic
from genpol.pipelines.online import env_steps_per_rollout
from genpol.runners.guards import raise_if_stopped
from genpol.runners.onpolicy import OnPolicyRunner
from genpol.runners.scaffold import Phase, holds_progress, phase_callbacks, prepare_run, run_phase, video_folder

log = logging.getLogger(__name__)
EVAL_SEED = 10_000
INIT, COLLECT, DECODER = 0, 1, 2  # what a stage seed is for


def stage_budgets(total_steps: int, weights: list[float]) -> list[int]:
    """Encoder env steps per stage: ``total_steps`` split in proportion to ``weights``, rounded so
    that they sum to ``total_steps`` exactly (the remainder goes to the last stage)."""
    budgets = [int(total_steps * w / sum(weights)) for w in weights]
    budgets[-1] += total_steps - sum(budgets)
    if min(budgets) < 1:
        raise ConfigError(f"total_steps={total_steps} split by pipeline.stage_weights={weights} leaves a stage "
                          f"with no env steps ({budgets}); raise total_steps")
    return budgets


# Stage seeds stay below SEED_LIMIT (2^31 - 2^20), so that the collection env's resets (env i at seed + i) take
# them: EnvPool takes int32 seeds and dm_control seeds below 2^32, and seed 12345 made 12345 x 1000003, which failed
# there after stage 0 had trained, and again at every resume. Seeds up to 2146 (all that ran before) keep their values.
STAGE_SEED_MODULUS = SEED_LIMIT


def stage_seed(seed: int, stage: int, purpose: int) -> int:
    """A distinct, reproducible seed for each stage's initialization, collection and decoder fit."""
    return (seed * 1_000_003 + stage * 1_009 + purpose) % STAGE_SEED_MODULUS


def stage_updater(cfg: TrainConfig, stage: int) -> TrainConfig:
    """``cfg`` with stage ``stage``'s clip range and grad-norm limit (PPO, SPO and ASPO have them;
    TRPO's trust region is its KL radius, so it keeps its config)."""
    pipeline, updater = cfg.pipeline, cfg.learner
    later = stage > 0
    changes = {}
    if hasattr(updater, "clip_range"):
        changes["clip_range"] = pipeline.clip_range_later if later else pipeline.clip_range_first
    if hasattr(updater, "max_grad_norm"):
        changes["max_grad_norm"] = pipeline.max_grad_norm_later if later else pipeline.max_grad_norm_first
    return dataclasses.replace(cfg, learner=dataclasses.replace(updater, **changes))


def check_budgets(run_dir: Path, budgets: list[int]) -> None:
    """Record the stage budgets on a first start; refuse a resume that would change them. (The
    scaffold lets ``total_steps`` change on a resume, which extends an online run; here it would
    re-split the stages that already ran.)"""
    path = run_dir / "stage_budgets.json"
    if not path.exists() or not holds_progress(run_dir):  # nothing ran yet: an earlier start failed early
        write_json_atomic({"encoder_env_steps": budgets}, path)
        return
    saved = json.loads(path.read_text())["encoder_env_steps"]
    if saved != budgets:
        raise ConfigError(f"{run_dir} holds a GoRL run with stage budgets {saved}; total_steps and "
                          f"pipeline.stage_weights now give {budgets}. Use another run_dir, or the saved config.")


def write_json_atomic(payload: dict[str, Any], path: Path) -> None:
    write_text_atomic(path, json.dumps(payload, indent=2))


def freeze_observations(env: VectorEnv, state: dict[str, Any] | None) -> None:
    """Set the env's observation statistics to ``state`` and stop them from updating."""
    normalizer = env.find(ObservationNormalizer)
    if normalizer is not None and state is not None:
        normalizer.load_own_state(state)
        normalizer.frozen = True


def train_gorl(cfg: TrainConfig, run_dir: str | Path) -> dict[str, Any]:
    """Run (or resume) every GoRL stage in ``run_dir``; return the summary."""
    run_dir = prepare_run(cfg, run_dir)
    pipeline, device = cfg.pipeline, torch.device(cfg.device)
    budgets = stage_budgets(cfg.total_steps, list(pipeline.stage_weights))
    check_budgets(run_dir, budgets)
    stack = env_stack(cfg.policy)
    env = make_env(cfg.env, gamma=cfg.learner.gamma, seed=cfg.seed, device=device, stack=stack)
    if len(budgets) > 1:
        check_collection_memory(cfg, env.obs_dim, env.act_dim)
    head = make_head(cfg.policy, env.obs_dim, env.act_dim).to(device)
    spec = make_policy_spec(head, env, cfg.env.full_id, dict(cfg.env.kwargs), cfg.env.max_episode_steps,
                            (cfg.env.render_width, cfg.env.render_height))
    make_eval_env = evaluation_env_factory(cfg.env, env, cfg.learner.gamma, device, stack)
    warn_rollout_rounding(cfg, env, budgets)
    stages: list[dict[str, Any]] = []
    offset = 0  # encoder env steps of the finished stages: the x-axis of TensorBoard
    best_weights: dict[str, Any] = {}
    try:
        for stage, budget in enumerate(budgets):
            stage_dir = run_dir / f"stage_{stage}"
            if stage > 0:
                previous = run_dir / f"stage_{stage - 1}"
                # as the previous encoder phase left it (the rest of that checkpoint is not kept through the stage)
                with warnings.catch_warnings(record=True) as caught:
                    warnings.simplefilter("always", RuntimeWarning)
                    env.load_state_dict(load_latest(previous / "checkpoints", map_location=device)[2]["env"])
                for warning in caught:  # an inexact backend's "the resumed run ..." misled in a run never stopped
                    if "cannot continue its episodes" in str(warning.message):
                        log.info("stage %d starts on new episodes: %s", stage, warning.message)
                    else:
                        warnings.warn_explicit(warning.message, warning.category, warning.filename, warning.lineno)
                freeze_observations(env, best_weights.get("obs_normalizer"))
                decoder = torch.load(previous / "decoder.pt", map_location=device, weights_only=True)
                head.load_decoder(decoder["decoder"])
            torch.manual_seed(stage_seed(cfg.seed, stage, INIT))
            head.reset_encoder()
            head.latent_l2_coef = pipeline.latent_l2_later if stage else pipeline.latent_l2_first
            record = encoder_stage(cfg, run_dir, stage_dir, stage, budget, offset, env, head, spec, make_eval_env)
            best_weights = load_policy_files(list_checkpoints(stage_dir / "best")[-1], device)[1]
            offset += record["encoder_env_steps"]
            if stage < len(budgets) - 1:
                record.update(distill(cfg, run_dir, stage_dir, stage, env, head, best_weights, make_eval_env))
                raise_if_stopped(f"stage {stage + 1}'s start")  # stage k's files are all written: it starts afresh
            stages.append(record)
    finally:
        env.close()
    return finish(cfg, run_dir, spec, head, best_weights, stages)


def warn_rollout_rounding(cfg: TrainConfig, env: VectorEnv, budgets: list[int]) -> None:
    """A warning where a stage's budget is not a whole number of rollouts: each encoder phase finishes its last
    rollout, as an online run does, so the stages train more env steps than ``total_steps`` (it was silent)."""
    per_rollout = env_steps_per_rollout(cfg, env)
    trained = [-(-budget // per_rollout) * per_rollout for budget in budgets]
    if trained != budgets:
        log.warning("pipeline=gorl: the stage budgets %s (total_steps=%d) are not whole rollouts of %d env steps "
                    "(learner.rollout_steps=%d x env.num_envs=%d): the stages train %s, %d encoder env steps in all",
                    budgets, cfg.total_steps, per_rollout, cfg.learner.rollout_steps, env.num_envs, trained,
                    sum(trained))


def check_collection_memory(cfg: TrainConfig, obs_dim: int, act_dim: int) -> None:
    """Refuse, before stage 0's hours of training, a ``pipeline.collect_steps`` whose (state, pre-tanh action)
    pairs the machine cannot hold through a distillation: ``R`` float32 rows of ``obs_dim + act_dim``, once
    while they are collected (in place, on the CPU) and later beside twice the decoder's
    ``decoder_max_samples`` subset (the subset and its train/validation split); the split alone moves to the
    device."""
    pipeline = cfg.pipeline
    rows = pipeline.collect_steps + cfg.env.num_envs  # whole batches of num_envs: at most this many
    row_bytes = 4 * (obs_dim + act_dim)
    subset = min(rows, pipeline.decoder_max_samples)
    what = "GoRL's collected (state, action) pairs through a distillation"
    require_memory("pipeline.collect_steps", pipeline.collect_steps, row_bytes * (rows + 2 * subset), "cpu", what)
    if torch.device(cfg.device).type != "cpu":
        require_memory("pipeline.collect_steps", pipeline.collect_steps, row_bytes * subset, cfg.device, what)


def encoder_stage(cfg: TrainConfig, run_dir: Path, stage_dir: Path, stage: int, budget: int, offset: int,
                  env: VectorEnv, head: LatentDecoderHead, spec: dict[str, Any], make_eval_env: Any) -> dict[str, Any]:
    """Stage ``stage``'s encoder phase (resumed from its latest checkpoint, skipped once finished);
    returns its record (``stage.json``)."""
    marker = stage_dir / "stage.json"
    if marker.exists():
        return json.loads(marker.read_text())
    pipeline = cfg.pipeline
    stage_cfg = stage_updater(cfg, stage)
    algorithm = make_algorithm(stage_cfg, head, env)
    evaluation = Evaluation(make_eval_env, pipeline.eval_episodes, pipeline.eval_every,
                            deterministic=pipeline.eval_deterministic)
    best = BestEvaluation(evaluation, stage_dir / "best", spec)
    extra: list[Any] = [best]
    if cfg.logger.tensorboard:
        extra.append(StageTensorBoard(run_dir / "tb", stage, offset))
    phase = Phase(
        directory=stage_dir, tensorboard_dir=None, total=budget if cfg.logger.progress_bar else None,
        label=f"GoRL stage {stage}", checkpoint_every=pipeline.checkpoint_every,
        keep_checkpoints=pipeline.keep_checkpoints, policy_spec=spec, evaluation=evaluation,
        summary_extra={"env": cfg.env.full_id, "policy": cfg.policy.family, "learner": cfg.learner.name,
                       "seed": cfg.seed, "stage": stage, "stage_budget": budget, "encoder_step_offset": offset},
        extra_callbacks=extra,
    )
    callbacks = phase_callbacks(phase)
    runner = OnPolicyRunner(env, algorithm, budget, seed=cfg.seed, callbacks=callbacks.callbacks,
                            update_threads=cfg.update_threads)
    run_phase(runner, phase, cfg.device)
    if not list_checkpoints(stage_dir / "best"):
        raise CheckpointError(f"GoRL stage {stage} ended without its best-encoder checkpoint in {stage_dir / 'best'}: "
                              f"{runner.callbacks.failures}")
    record = {"stage": stage, "encoder_env_steps": runner.global_step, "budget": budget,
              "clip_range": getattr(stage_cfg.learner, "clip_range", None),
              "max_grad_norm": getattr(stage_cfg.learner, "max_grad_norm", None),
              "latent_l2_coef": head.latent_l2_coef, "best_eval_return": best.best_return,
              "best_eval_step": best.best_step, "final_eval_return": evaluation.final_return,
              "best_checkpoint": str(list_checkpoints(stage_dir / "best")[-1]),
              # the phase's own summary counts every session of it (resumes included)
              "encoder_wall_time_s": json.loads((stage_dir / "summary.json").read_text())["wall_time_s"]}
    write_json_atomic(record, marker)
    return record


def distill(cfg: TrainConfig, run_dir: Path, stage_dir: Path, stage: int, env: VectorEnv, head: LatentDecoderHead,
            best_weights: dict[str, Any], make_eval_env: Any) -> dict[str, Any]:
    """Collection with the best encoder and the current decoder, then a new decoder (each skipped when
    its file exists). Returns the record's collection and decoder fields."""
    pipeline = cfg.pipeline
    collection_path, decoder_path = stage_dir / "collection.pt", stage_dir / "decoder.pt"
    if not collection_path.exists():
        acting = LatentDecoderHead(head.obs_dim, head.act_dim, **head.spec_kwargs).to(next(head.parameters()).device)
        acting.load_state_dict(best_weights["head"])
        collect_env = make_eval_env(cfg.env.num_envs, None, "collect")
        freeze_observations(collect_env, best_weights.get("obs_normalizer"))
        start = time.perf_counter()
        try:
            data = collect_pre_tanh_actions(acting, collect_env, pipeline.collect_steps,
                                            stage_seed(cfg.seed, stage, COLLECT))
        finally:
            collect_env.close()
        data["wall_time_s"] = time.perf_counter() - start
        save_atomic(data, collection_path)
        del data  # freed before the file is read back: one copy at a time
    data = torch.load(collection_path, weights_only=True)
    if not decoder_path.exists():
        training = DecoderTraining(epochs=pipeline.decoder_epochs, batch_size=pipeline.decoder_batch_size,
                                   lr=pipeline.decoder_lr, pairs=pipeline.decoder_pairs,
                                   validation=pipeline.decoder_validation, patience=pipeline.decoder_patience,
                                   max_samples=pipeline.decoder_max_samples)
        # the epochs go to TensorBoard once the fit is done: a fit killed midway is redone from its first epoch,
        # and its events, logged as they came, showed every redone epoch twice (a purge would drop every tag's
        # events from that step on, the encoder's curves too)
        epochs: list[tuple[int, dict[str, float]]] = []
        start = time.perf_counter()
        weights, report = training.fit(head, data["obs"], data["actions"], stage_seed(cfg.seed, stage, DECODER),
                                       lambda epoch, row: epochs.append((epoch, dict(row))))
        report["wall_time_s"] = time.perf_counter() - start
        if cfg.logger.tensorboard:
            from torch.utils.tensorboard import SummaryWriter

            with SummaryWriter(str(run_dir / "tb")) as writer:
                for epoch, row in epochs:
                    for name, value in row.items():
                        writer.add_scalar(f"decoder/stage_{stage}/{name}", value, epoch)
        save_atomic({"decoder": weights, "report": report}, decoder_path)
    report = torch.load(decoder_path, weights_only=True)["report"]
    returns = data["episode_returns"]
    return {"collection_env_steps": int(data["env_steps"]), "collected_actions": int(len(data["actions"])),
            "collection_return_mean": sum(returns) / len(returns) if returns else None,
            "decoder_best_val_loss": report["best_val_loss"], "decoder_best_epoch": report["best_epoch"],
            "decoder_epochs_run": report["epochs_run"],
            # files of runs before these were timed have none: 0
            "collection_wall_time_s": float(data.get("wall_time_s", 0.0)),
            "decoder_wall_time_s": float(report.get("wall_time_s", 0.0))}


def evaluate_policy(policy: TrainedPolicy, cfg: TrainConfig, video_dir: Path | None) -> tuple[Any, str | None]:
    """Episodes of the combined policy (one per env; ``pipeline.eval_deterministic``); ``(returns [N], video or
    None)``."""
    env = policy.make_env(num_envs=cfg.pipeline.eval_episodes, device=cfg.device, video_dir=video_dir,
                          video_prefix="final")
    try:
        returns, _ = run_episodes(env, lambda obs: policy.act(obs, deterministic=cfg.pipeline.eval_deterministic),
                                  EVAL_SEED)
        recorder = env.find(VideoRecorder)
        video = str(recorder.paths[0]) if recorder is not None and recorder.paths else None
    finally:
        env.close()
    return returns, video


def finish(cfg: TrainConfig, run_dir: Path, spec: dict[str, Any], head: LatentDecoderHead,
           best_weights: dict[str, Any], stages: list[dict[str, Any]]) -> dict[str, Any]:
    """The final combined policy (the last stage's best encoder with its decoder) as the run's own
    checkpoint, its evaluation (and video), and ``summary.json``. Its ``wall_time_s`` adds up the stages' encoder
    phases, collections and decoder fits, each over every session that ran it, and the final evaluation: the
    time of this process alone counted nothing of a stage that an earlier, stopped session had run."""
    start = time.perf_counter()
    encoder_steps = sum(record["encoder_env_steps"] for record in stages)
    collection_steps = sum(record.get("collection_env_steps", 0) for record in stages)
    if not list_checkpoints(run_dir / "checkpoints"):
        save_checkpoint(run_dir / "checkpoints", encoder_steps, spec, best_weights,
                        {"stages": [record["stage"] for record in stages]}, keep=1)
    policy = TrainedPolicy.load(run_dir, device=cfg.device)
    video_dir = video_folder(cfg.pipeline.video_dir, run_dir) if cfg.pipeline.video else None
    missing: dict[str, str] = {}
    try:
        returns, video = evaluate_policy(policy, cfg, video_dir)
    except Exception as error:  # noqa: BLE001 - rendering is optional: keep the return without it
        if video_dir is None:
            raise
        missing["video"] = failure_hint(error)
        log.warning("the final video failed, evaluating without it: %s", missing["video"])
        returns, video = evaluate_policy(policy, cfg, None)
    summary = {
        "pipeline": "gorl", "env": cfg.env.full_id, "policy": cfg.policy.family, "learner": cfg.learner.name,
        "seed": cfg.seed, "run_dir": str(run_dir),
        "encoder_env_steps": encoder_steps, "collection_env_steps": collection_steps,
        "total_env_steps": encoder_steps + collection_steps,
        "eval_return_mean": float(returns.mean()), "eval_episodes": int(len(returns)),
        "eval_deterministic": cfg.pipeline.eval_deterministic,
        "checkpoint": str(policy.source), "video": video, "tensorboard": str(run_dir / "tb"),
        "wall_time_s": time.perf_counter() - start + sum(
            record.get(key, 0.0) for record in stages
            for key in ("encoder_wall_time_s", "collection_wall_time_s", "decoder_wall_time_s")),
        "stages": stages, "missing": missing,
    }
    # env steps of both kinds per second of the whole run, as the other pipelines' summaries report
    summary["sps"] = summary["total_env_steps"] / summary["wall_time_s"] if summary["wall_time_s"] > 0 else None
    write_json_atomic(summary, run_dir / "summary.json")
    log.info("GoRL finished: %s", {k: summary[k] for k in ("encoder_env_steps", "collection_env_steps",
                                                            "eval_return_mean")})
    return summary
