"""The off-policy loop: act, store, update; repeat. Callbacks do the I/O every ``iteration_steps``
env steps. Read top to bottom it is CleanRL's SAC loop: random actions until ``learning_starts``,
the true final observation stored where an episode ended, the update-to-data ratio's gradient
steps after every env step.
"""

from __future__ import annotations

from functools import partial
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import torch

from genpol import envs
from genpol.envs import VectorEnv
from genpol.algorithms.offpolicy import OffPolicyAlgorithm
from genpol.callbacks.base import Callback
from genpol.config import TrainConfig
from genpol.data import OfflineDataset, load_dataset, normalized_score, reference_returns
from genpol.data.dataset import Normalization
from genpol.runners.base import EnvRunner
from genpol.runners.guards import STOP
from genpol.runners.scaffold import check_same_dataset
from genpol.storage.replay import OfflineReplay, offline_transitions


class OffPolicyRunner(EnvRunner):
    """``EnvRunner`` whose iteration is ``iteration_steps`` env steps (rounded up to whole vector
    steps), each followed by the algorithm's gradient steps once it is ready.

    A stop request (SIGTERM, SIGINT, ``request_stop``) ends the iteration after the current env step and its
    updates, not at its end: an iteration of RLPD's or MaxEntDP's lasts minutes on a CPU, past the grace a
    scheduler gives before SIGKILL (SLURM's KillWait: 30 s), and everything since the last checkpoint was lost.
    The checkpoint then records the vector steps taken (``steps_into_iteration``), the losses and the episodes
    finished so far in it, and the resume completes that iteration: the iterations, and so the evaluations and
    checkpoints, fall where the uninterrupted run's do, with the same logged values.
    """

    algorithm: OffPolicyAlgorithm

    def __init__(self, env: VectorEnv, algorithm: OffPolicyAlgorithm, total_steps: int, seed: int = 0,
                 callbacks: Sequence[Callback] = (), iteration_steps: int = 1000):
        super().__init__(env, algorithm, total_steps, seed, callbacks)
        self.vector_steps = max(1, -(-iteration_steps // env.num_envs))
        self.steps_into_iteration = 0  # vector steps of the current iteration taken before a stop cut it
        self.diagnostics: list[dict[str, torch.Tensor]] = []  # the current iteration's losses, step by step

    def iterate(self) -> dict[str, float] | None:
        env, algorithm = self.env, self.algorithm
        obs = self.obs
        diagnostics = self.diagnostics
        for _ in range(self.vector_steps - self.steps_into_iteration):
            self.acting_on = obs
            action = algorithm.act(obs)
            next_obs, reward, terminated, truncated, info = env.step(action)
            # a truncation stored as done ends the target there (learner.bootstrap_truncation=false)
            dones = terminated if algorithm.cfg.bootstrap_truncation else terminated | truncated
            algorithm.process_env_step(obs, action, reward, dones, info)
            executed = info.get("env_steps")
            self.global_step += int(executed.sum()) if executed is not None else env.num_envs
            self.track_episodes(info)
            self.callbacks.on_env_step(self)
            obs = next_obs
            if algorithm.ready():
                diagnostics.append(algorithm.update())
            self.steps_into_iteration += 1
            if self.global_step >= self.total_steps:
                break
            if STOP.signal_name is not None and self.steps_into_iteration < self.vector_steps:
                self.obs = obs  # off-policy learners run in one process: no rank to agree with
                return None
        self.obs = obs
        self.steps_into_iteration, self.diagnostics = 0, []
        # each key's mean over the steps that report it (a critic-only step reports no actor losses)
        keys = dict.fromkeys(key for named in diagnostics for key in named)
        metrics = {f"losses/{key}": float(torch.stack([named[key] for named in diagnostics if key in named]).mean())
                   for key in keys}
        metrics["losses/gradient_steps"] = float(algorithm.critic_steps)
        metrics["charts/replay_size"] = float(len(algorithm.replay))
        return metrics

    def training_state(self) -> dict[str, Any]:
        # all empty at an iteration's end; filled only when a stop cut the iteration
        waiting = {name: torch.cat(parts) if parts else None
                   for name, parts in (("returns", self._returns), ("lengths", self._lengths),
                                       ("successes", self._successes))}
        return {**super().training_state(), "steps_into_iteration": self.steps_into_iteration,
                "iteration_losses": self.diagnostics, "iteration_episodes": waiting}

    def load(self, policy_weights: dict[str, Any], training_state: dict[str, Any]) -> None:
        super().load(policy_weights, training_state)
        # checkpoints before 2026-12-07 (none of these keys) were written at iterations' ends
        self.steps_into_iteration = int(training_state.get("steps_into_iteration", 0))
        self.diagnostics = list(training_state.get("iteration_losses", []))
        waiting = training_state.get("iteration_episodes", {})
        self._returns, self._lengths, self._successes = (
            [waiting[name]] if waiting.get(name) is not None else [] for name in ("returns", "lengths", "successes"))


def agent_action_transform(env: VectorEnv, act_dim: int) -> Any:
    """Maps a dataset's ``[N, act_dim]`` actions from the env's own bounds into the agent's [-1, 1] (identity
    where the env already uses [-1, 1], as the MuJoCo locomotion tasks do); None for unbounded actions. A
    backend that chunks actions itself repeats its bounds per action of the chunk: the first are taken."""
    inner = envs.innermost(env)
    low, high = (bound.cpu().numpy().reshape(-1, act_dim)[0] for bound in (inner.action_low, inner.action_high))
    if not (np.isfinite(low).all() and np.isfinite(high).all()):
        return None
    return lambda actions: 2 * (actions - low) / (high - low) - 1


def load_offline_transitions(cfg: TrainConfig, env: VectorEnv,
                             run_dir: Path | None = None) -> tuple[OfflineReplay, dict[str, Any], Any]:
    """``dataset.path`` as offline transitions in the online agent's spaces (raw observations,
    actions mapped into [-1, 1] by the env's bounds), its summary fields, and the normalized-score
    function of its task (None when neither the dataset nor D4RL has reference returns for it). A resume
    of ``run_dir`` with other data is refused (``check_same_dataset``; None: no run, as in a benchmark)."""
    dataset = load_dataset(cfg.dataset.path, cfg.dataset.format, cfg.dataset.minari_root,
                           cfg.dataset.max_transitions)
    if run_dir is not None:
        check_same_dataset(run_dir, dataset)
    dataset.check_dims(env.obs_dim, envs.innermost(env).act_dim, cfg.env.full_id)
    offline = offline_transitions(dataset, action_transform=agent_action_transform(env, dataset.act_dim),
                                  **_truncation_settings(cfg), device=cfg.device, seed=cfg.seed + 4)
    references = reference_returns(dataset.metadata, cfg.env.full_id, dataset.source)
    normalized = partial(normalized_score, references) if references else None
    return offline, {"dataset": dataset.source, "dataset_transitions": len(dataset.rewards),
                     "offline_ratio": cfg.learner.offline_ratio}, normalized


def dataset_transitions(dataset: OfflineDataset, cfg: TrainConfig, obs_scale: tuple[np.ndarray, np.ndarray] | None,
                        action_transform: Any) -> OfflineReplay:
    """Offline transitions in the offline-to-online pipeline's spaces: observations scaled with the dataset's
    min and max as its env stack scales online ones (``obs_scale`` None: raw), actions by
    ``action_transform`` into the agent's [-1, 1] (``dataset.actions``)."""
    return offline_transitions(
        dataset, obs_transform=None if obs_scale is None else (lambda obs: Normalization.scale(obs, *obs_scale)),
        action_transform=action_transform, **_truncation_settings(cfg), device=cfg.device, seed=cfg.seed + 4)


def _truncation_settings(cfg: TrainConfig) -> dict[str, Any]:
    """How offline transitions treat a time limit: ``dataset.truncated_rows``, and as terminal when the online
    buffer stores truncations as done (``learner.bootstrap_truncation=false``)."""
    return {"truncated_rows": cfg.dataset.truncated_rows,
            "truncation_is_terminal": not getattr(cfg.learner, "bootstrap_truncation", True)}
