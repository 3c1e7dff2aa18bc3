"""Pipeline ``offline_to_online``: pretrain a head on an offline dataset, evaluate it, then fine-tune
it online with the configured learner; both phases in one run, each on the shared run scaffold.
An off-policy learner also mixes the dataset's transitions into its batches online when
``learner.offline_ratio`` > 0 (RLPD's symmetric sampling).

The offline phase is behaviour cloning (``BCRunner``: the head's imitation loss, AdamW, EMA) for
every learner but the Q-gradient actors. With ``learner=consistency_ac`` it is offline RL
(``OfflineRLRunner``): the learner's own gradient steps on dataset transitions only, i.e. offline
Consistency-AC (CT loss + eta normalized Q-loss, twin critics, EMA actor) or Diffusion-QL, and the
learner, critics included, goes on into online fine-tuning. It uses the updater's optimizers and
learning rate and ``pipeline.pretrain_batch_size``; the BC-only keys (``pretrain_lr``,
``pretrain_min_lr``, ``pretrain_weight_decay``, ``ema_*``) do not apply to it.

Observations and actions are scaled to [-1, 1] with the dataset's min and max (DPPO's
normalization): the env stack gets a fixed ``ObservationScaler`` and maps the agent's [-1, 1]
actions back to the dataset's action range, and both travel with the policy in its checkpoints.
With ``dataset.observations=raw`` (Diffusion-QL's and Ding & Jin's inputs) observations stay as the
dataset and the env give them, in both phases. With ``dataset.actions=env`` (the default for off-policy
learners, as RLPD's, EXPO's and Ding & Jin's code) the agent's [-1, 1] is the env's own box, and the
dataset's actions are mapped into it. Either way running
observation normalization (``env.normalize_obs``) is off: the offline data carries no running statistics.
Normalized scores (before and after fine-tuning) use a Minari dataset's own reference returns, or
D4RL's for the D4RL locomotion tasks.

``pipeline.online_learner`` and ``pipeline.online_policy`` give fields other values from the online phase
on, where both phases share one object: the learner that trains offline by its own loss (Consistency-AC:
eta, bc_coef, lr, critic_lr) and the head (the consistency head's sampling_steps). Ding & Jin's online
phase, for instance, drops the CT loss (eta 1, bc_coef 0), lowers the actor's rate to 1e-5 and samples in
5 steps instead of 2. ``pipeline.online_reset`` starts parts of that learner afresh (its optimizers, its
target critics and EMA actor, its step counts), as their reload of the offline model into a new agent does.

Run directory: ``pretrain/`` (checkpoints, progress, summary of phase 1), ``tb/pretrain`` and
``tb`` (TensorBoard of each phase), and the online phase's usual files. Re-running resumes
whichever phase was interrupted.
"""

from __future__ import annotations

import json
import logging
from functools import partial
from pathlib import Path
from typing import Any

import numpy as np
import torch

from genpol import envs
from genpol.envs import VectorEnv
from genpol.algorithms import is_off_policy, learner, make_algorithm
from genpol.build import env_stack, evaluation_env_factory, make_env, make_head
from genpol.callbacks import Evaluation
from genpol.callbacks.logging import read_metrics
from genpol.checkpoint import list_checkpoints
from genpol.config import ConfigError, TrainConfig
from genpol.files import write_text_atomic
from genpol.data import Normalization, OfflineDataset, load_dataset, normalized_score, reference_returns
from genpol.heads.base import Capability, PolicyHead, check_capabilities
from genpol.heads.chunking import imitation_horizon
from genpol.policy import evaluate_episodes, make_policy_spec
from genpol.runners.bc import BCRunner
from genpol.runners.offline_rl import OfflineRLRunner
from genpol.runners.offpolicy import agent_action_transform, dataset_transitions
from genpol.pipelines.online import off_policy_env_settings, run_online
from genpol.runners.scaffold import Phase, check_same_dataset, phase_callbacks, prepare_run, run_phase
from genpol.storage.replay import OfflineReplay

log = logging.getLogger(__name__)
EVAL_SEED = 10_000
ONLINE_RESET_SEED = 7_919  # pipeline.online_reset draws fresh target weights from seed + this, apart from the run's generators


def _inner_dims(env: VectorEnv, chunk: int) -> tuple[int, int]:
    inner = envs.innermost(env)
    return inner.obs_dim, inner.act_dim // chunk


def train_offline_to_online(cfg: TrainConfig, run_dir: str | Path) -> dict[str, Any]:
    run_dir = prepare_run(cfg, run_dir)
    dataset = load_dataset(cfg.dataset.path, cfg.dataset.format, cfg.dataset.minari_root,
                           cfg.dataset.max_transitions)
    check_same_dataset(run_dir, dataset)
    norm = dataset.normalization()
    stack = {**env_stack(cfg.policy), **off_policy_env_settings(cfg)}
    chunk = stack["action_chunk"]
    raw_observations = cfg.dataset.observations == "raw"
    if cfg.env.normalize_obs:
        log.info("env.normalize_obs is off in pipeline=offline_to_online: observations are %s",
                 "raw (dataset.observations=raw)" if raw_observations else "scaled by the dataset's min and max")
    if raw_observations:  # the offline data is not normalized, so neither are the env's observations
        stack["normalize_obs"] = False
    else:
        stack["obs_bounds"] = (torch.tensor(norm.obs_min), torch.tensor(norm.obs_max))
    probe = make_env(cfg.env, gamma=cfg.learner.gamma, seed=None, num_envs=1, training=False,
                     stack={"action_chunk": chunk})
    try:
        dataset.check_dims(*_inner_dims(probe, chunk), cfg.env.full_id)
        action_transform = _action_transform(cfg, dataset, norm, probe)
    finally:
        probe.close()
    if cfg.dataset.actions == "min_max":  # the agent's [-1, 1] is the dataset's range; else the env's box
        stack["action_bounds"] = (torch.tensor(np.tile(norm.action_min, chunk)),
                                  torch.tensor(np.tile(norm.action_max, chunk)))
    env = make_env(cfg.env, gamma=cfg.learner.gamma, seed=cfg.seed, device=cfg.device, stack=stack)
    head = make_head(cfg.policy, env.obs_dim, env.act_dim).to(cfg.device)
    check_capabilities(head, "behaviour-cloning pretraining", {Capability.IMITATION})
    references = reference_returns(dataset.metadata, cfg.env.full_id, dataset.source)
    normalized = partial(normalized_score, references) if references else None

    offline_rl = learner(cfg.learner.name).offline_phase == "own_loss"
    offline, algorithm = None, None
    if offline_rl or (is_off_policy(cfg.learner.name) and cfg.learner.offline_ratio > 0):
        obs_scale = None if raw_observations else (norm.obs_min, norm.obs_max)
        offline = dataset_transitions(dataset, cfg, obs_scale=obs_scale, action_transform=action_transform)
    if offline_rl:  # one learner for both phases: the offline critics and EMA actor go on online
        algorithm = make_algorithm(cfg, head, env, offline)
    if list_checkpoints(run_dir / "checkpoints"):  # fine-tuning had started: it resumes on its own
        pretrained = json.loads((run_dir / "pretrain" / "summary.json").read_text())
    else:
        memory_check = learner(cfg.learner.name).check_memory
        if not offline_rl and memory_check is not None:
            # the online learner is built after pretraining; refused only then, its key could not change (a
            # rerun resumes the run, whose config is fixed): the pretraining's hours were lost
            memory_check(cfg, head, env)
        if offline_rl:
            pretrained = pretrain_offline_rl(cfg, run_dir, algorithm, offline, dataset, env, stack, normalized)
            head.start_finetuning()
            # here only: once the online phase has a checkpoint, resuming loads the state after the reset
            algorithm.reset_for_online(cfg.pipeline.online_reset, seed=cfg.seed + ONLINE_RESET_SEED)
        else:
            pretrained = pretrain(cfg, run_dir, head, dataset, env, stack, normalized,  # ends in start_finetuning
                                  action_transform)
    start_online_phase(cfg, head, algorithm)
    extra = {"pipeline": "offline_to_online", "dataset": dataset.source, "dataset_transitions": len(dataset.rewards),
             "pretrained": pretrained}
    return run_online(cfg, run_dir, env, head, stack, normalized, extra, offline=offline, algorithm=algorithm)


def _action_transform(cfg: TrainConfig, dataset: OfflineDataset, norm: Normalization, probe: VectorEnv) -> Any:
    """``[N, A] -> [N, A]``: the dataset's actions into the agent's [-1, 1], by the dataset's range
    (``dataset.actions=min_max``) or by the env's box (``env``), as the env stack will map them back."""
    if cfg.dataset.actions == "min_max":
        return lambda actions: Normalization.scale(actions, norm.action_min, norm.action_max)
    transform = agent_action_transform(probe, dataset.act_dim)
    if transform is None:
        raise ConfigError(f"dataset.actions=env: {cfg.env.full_id} has unbounded actions, so the env's box cannot "
                          "be the agent's [-1, 1]; use dataset.actions=min_max")
    return transform


def start_online_phase(cfg: TrainConfig, head: PolicyHead, algorithm: Any | None) -> None:
    """``pipeline.online_learner`` and ``online_policy``: the learner that runs both phases (``algorithm``)
    and the head take their online values, before the online phase starts or resumes (its checkpoints
    then hold the head as changed, and the optimizers' rates, which loading restores)."""
    learner_options, policy_options = dict(cfg.pipeline.online_learner), dict(cfg.pipeline.online_policy)
    if not (learner_options or policy_options):
        return
    if algorithm is not None:
        algorithm.change_options(learner_options, policy_options)
    else:  # the learner is built for the online phase from learner.*; validation refused online_learner
        head.change_options(**policy_options)
    log.info("online phase: learner %s, policy %s", learner_options, policy_options)


def _observation_state(stack: dict[str, Any]) -> dict[str, torch.Tensor] | None:
    """The observation scaling a saved policy carries: the dataset's min and max, or None (raw)."""
    if "obs_bounds" not in stack:
        return None
    return {"low": stack["obs_bounds"][0].float(), "high": stack["obs_bounds"][1].float()}


def _pretrain_phase(cfg: TrainConfig, run_dir: Path, head: PolicyHead, env: VectorEnv, label: str,
                    evaluation: Evaluation | None = None) -> Phase:
    """The offline phase's files: ``pretrain/`` and ``tb/pretrain``; its unit is the gradient step."""
    spec = make_policy_spec(head, env, cfg.env.full_id, dict(cfg.env.kwargs), cfg.env.max_episode_steps,
                            (cfg.env.render_width, cfg.env.render_height))
    pipeline = cfg.pipeline
    return Phase(directory=run_dir / "pretrain",
                 tensorboard_dir=run_dir / "tb" / "pretrain" if cfg.logger.tensorboard else None,
                 total=pipeline.pretrain_steps if cfg.logger.progress_bar else None, label=label, unit="grad step",
                 checkpoint_every=pipeline.pretrain_checkpoint_every, keep_checkpoints=pipeline.keep_checkpoints,
                 policy_spec=spec, evaluation=evaluation)


def _complete_episode_returns(dataset: OfflineDataset) -> tuple[np.ndarray, bool]:
    """Returns of the episodes a flag ends (not the file's unflagged last one), and whether they are the task's
    episodes, which reference returns score: truncated at one length (the time limit) if at all, not
    segments cut at different lengths (genpol's maze datasets end one at each goal reached)."""
    returns, truncated_lengths = [], set()
    for start, end in dataset.episode_bounds():
        if dataset.terminals[end - 1] or dataset.timeouts[end - 1]:
            returns.append(float(dataset.rewards[start:end].sum()))
            if not dataset.terminals[end - 1]:
                truncated_lengths.add(end - start)
    return np.asarray(returns), len(truncated_lengths) <= 1


def _write_summary(cfg: TrainConfig, run_dir: Path, summary: dict[str, Any], dataset: OfflineDataset,
                   normalized: Any, gradient_steps: int) -> dict[str, Any]:
    """Add the dataset's return and the normalized scores to the offline phase's ``summary``, log
    them to TensorBoard and write ``pretrain/summary.json``."""
    returns, task_episodes = _complete_episode_returns(dataset)
    summary["dataset_return_mean"] = float(returns.mean()) if len(returns) else None
    if normalized is not None:
        summary["normalized_score"] = float(normalized(summary["eval_return_mean"]))
        if task_episodes and len(returns):
            summary["dataset_normalized_score"] = float(normalized(summary["dataset_return_mean"]))
    # a run stopped between here and its first online checkpoint repeats this on its re-run: logged once (a purge
    # at this step would drop the loss and learning rate logged at it too)
    if cfg.logger.tensorboard and not (run_dir / "pretrain" / "summary.json").exists():
        from torch.utils.tensorboard import SummaryWriter

        with SummaryWriter(str(run_dir / "tb" / "pretrain")) as writer:
            writer.add_scalar("pretrain/eval_return", summary["eval_return_mean"], gradient_steps)
            if "normalized_score" in summary:
                writer.add_scalar("pretrain/normalized_score", summary["normalized_score"], gradient_steps)
    write_text_atomic(run_dir / "pretrain" / "summary.json", json.dumps(summary, indent=2))
    log.info("pretrained policy: %s", summary)
    return summary


def pretrain_offline_rl(cfg: TrainConfig, run_dir: Path, algorithm: Any, offline: OfflineReplay,
                        dataset: OfflineDataset, env: VectorEnv, stack: dict[str, Any], normalized: Any
                        ) -> dict[str, Any]:
    """Phase 1 for a Q-gradient learner: ``pipeline.pretrain_steps`` of its gradient steps on the
    dataset (resumable), evaluated every ``pipeline.pretrain_eval_every`` logs and at the end."""
    pipeline = cfg.pipeline
    make_eval_env = evaluation_env_factory(cfg.env, env, cfg.learner.gamma, cfg.device, stack)
    evaluation = Evaluation(make_eval_env, pipeline.eval_episodes, pipeline.pretrain_eval_every, None, normalized,
                            deterministic=pipeline.eval_deterministic)
    phase = _pretrain_phase(cfg, run_dir, algorithm.acting_head(), env, f"pretrain (offline {cfg.learner.name})",
                            evaluation)
    runner = OfflineRLRunner(algorithm, offline, pipeline.pretrain_steps, pipeline.pretrain_batch_size,
                             log_every=pipeline.pretrain_log_every, callbacks=phase_callbacks(phase).callbacks,
                             observation_state=_observation_state(stack))
    run_phase(runner, phase, cfg.device)
    rows = read_metrics(phase.metrics_path)  # none where pipeline.pretrain_steps=0 logged no step
    summary = {"learner": f"offline {cfg.learner.name}", "gradient_steps": runner.global_step,
               "transitions": len(offline), "final_loss": rows[-1]["pretrain/policy"] if rows else None,
               "final_q_loss": rows[-1]["pretrain/q_loss"] if rows else None,
               "final_critic_loss": rows[-1]["pretrain/value"] if rows else None,
               "wall_time_s": runner.wall_time, "eval_return_mean": evaluation.final_return,
               "eval_episodes": pipeline.eval_episodes, "eval_deterministic": pipeline.eval_deterministic,
               "eval_history": [[step, value] for step, value in evaluation.history]}
    if evaluation.final_success_rate is not None:
        summary["eval_success_rate"] = evaluation.final_success_rate
    return _write_summary(cfg, run_dir, summary, dataset, normalized, runner.global_step)


def pretrain(cfg: TrainConfig, run_dir: Path, head: PolicyHead, dataset: OfflineDataset, env: VectorEnv,
             stack: dict[str, Any], normalized: Any, action_transform: Any) -> dict[str, Any]:
    """Phase 1: behaviour cloning with EMA (resumable), ``head.start_finetuning()``, then an
    evaluation of the pretrained policy (``pipeline.eval_deterministic``)."""
    pipeline = cfg.pipeline
    obs, actions = dataset.chunks(imitation_horizon(head), dataset.normalization(),
                                  scale_observations=cfg.dataset.observations == "min_max",
                                  action_transform=action_transform)
    phase = _pretrain_phase(cfg, run_dir, head, env, "pretrain (BC)")
    runner = BCRunner(
        head, obs.to(cfg.device), actions.to(cfg.device), pipeline.pretrain_steps,
        batch_size=pipeline.pretrain_batch_size, lr=pipeline.pretrain_lr, min_lr=pipeline.pretrain_min_lr,
        weight_decay=pipeline.pretrain_weight_decay, ema_decay=pipeline.ema_decay, ema_start=pipeline.ema_start,
        ema_every=pipeline.ema_every, log_every=pipeline.pretrain_log_every, seed=cfg.seed,
        callbacks=phase_callbacks(phase).callbacks,
        observation_state=_observation_state(stack),
    )
    run_phase(runner, phase, cfg.device)
    # before the evaluation: a diffusion head's early, frozen denoising steps hold the random
    # initialization until this copies the pretrained weights into them
    head.start_finetuning()

    make_eval_env = evaluation_env_factory(cfg.env, env, cfg.learner.gamma, cfg.device, stack)
    eval_env = make_eval_env(pipeline.eval_episodes, None, "pretrained")
    try:
        with torch.no_grad():
            returns, _, success = evaluate_episodes(
                eval_env, lambda o: head.act(o, deterministic=pipeline.eval_deterministic), EVAL_SEED)
    finally:
        eval_env.close()
    rows = read_metrics(phase.metrics_path)  # none where pipeline.pretrain_steps=0 logged no step
    summary = {"gradient_steps": runner.global_step, "transitions": len(dataset.rewards), "chunks": len(obs),
               "final_loss": rows[-1]["pretrain/loss"] if rows else None, "wall_time_s": runner.wall_time,
               "eval_return_mean": float(returns.mean()), "eval_episodes": int(len(returns)),
               "eval_deterministic": pipeline.eval_deterministic}
    if success is not None:
        summary["eval_success_rate"] = float(success.mean())
    return _write_summary(cfg, run_dir, summary, dataset, normalized, runner.global_step)
