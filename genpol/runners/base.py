"""What every env-stepping runner shares: counters, episode statistics, the callback calls and
the checkpoint halves (``policy_weights`` / ``training_state``). The loops themselves live in
``onpolicy.py`` and ``offpolicy.py`` and read top to bottom."""

from __future__ import annotations

import abc
import time
from collections import deque
from typing import Any, Sequence

import numpy as np
import torch

from genpol.envs import NonFiniteActionError, VectorEnv
from genpol.envs.core import inexact_reset_seed, state_is_exact
from genpol import collectives, distributed
from genpol.algorithms.base import Algorithm
from genpol.callbacks.base import Callback, CallbackList
from genpol.checkpoint import random_states, restore_random_states
from genpol.heads.base import PolicyHead
from genpol.policy import observation_state
from genpol.runners.guards import check_finite, module_tensors, stop_if_requested


class EnvRunner(abc.ABC):
    """Trains ``algorithm`` on ``env`` for ``total_steps`` env steps.

    Args:
        env: a vector env (with its wrappers).
        algorithm: the learning method; it owns critics, optimizers and storage.
        total_steps: env steps to train for (an iteration may overshoot it).
        seed: seed of the first env reset (torch's global seed is the caller's business: it also
            decides the networks' initial weights).
        callbacks: called after every iteration and at the start and end of training.
    """

    def __init__(self, env: VectorEnv, algorithm: Algorithm, total_steps: int, seed: int = 0,
                 callbacks: Sequence[Callback] = ()):
        self.env = env
        self.algorithm = algorithm
        self.total_steps = total_steps
        self.seed = seed
        self.callbacks = CallbackList(callbacks)
        self.obs: torch.Tensor | None = None
        # the observations the policy last acted on, set by the collection loops at every step: the culprit named
        # when the env refuses a non-finite action (they are stored only after the step, so recent_data lacks them)
        self.acting_on: torch.Tensor | None = None
        self.global_step = 0
        self.iteration = 0
        self.wall_time = 0.0
        self.episode_returns: list[float] = []  # episodes finished in the latest iteration
        self.episode_lengths: list[int] = []
        self.recent_returns: deque[float] = deque(maxlen=20)  # the last 20 finished episodes
        self.episode_successes: list[bool] = []  # envs that define success only
        self.recent_successes: deque[bool] = deque(maxlen=20)
        self._returns: list[torch.Tensor] = []
        self._lengths: list[torch.Tensor] = []
        self._successes: list[torch.Tensor] = []

    @property
    def head(self) -> PolicyHead:
        """The head evaluation acts with."""
        return self.algorithm.acting_head()

    # ------------------------------------------------------------------ the loop
    @abc.abstractmethod
    def iterate(self) -> dict[str, float] | None:
        """One iteration (collect and learn); returns its metrics and advances ``global_step``. None: a stop
        request cut it short (a runner whose iterations last minutes), to be checkpointed now and completed by the
        resume; that runner saves where in the iteration it stopped."""

    def track_episodes(self, info: dict[str, Any]) -> None:
        """Keep the statistics of episodes that ended at this step (kept as tensors until
        ``close_episodes``: one ``tolist`` per iteration, not per step)."""
        if info["episode_return"].numel():
            self._returns.append(info["episode_return"])
            self._lengths.append(info["episode_length"])
            if "episode_success" in info:
                self._successes.append(info["episode_success"])

    def close_episodes(self) -> None:
        self.episode_returns = torch.cat(self._returns).tolist() if self._returns else []
        self.episode_lengths = torch.cat(self._lengths).tolist() if self._lengths else []
        self.episode_successes = torch.cat(self._successes).tolist() if self._successes else []
        self._returns, self._lengths, self._successes = [], [], []
        if collectives.world_size() > 1:  # the statistics of every rank's episodes, in rank order
            self.episode_returns, self.episode_lengths, self.episode_successes = collectives.all_episodes(
                self.episode_returns, self.episode_lengths, self.episode_successes)
        self.recent_returns.extend(self.episode_returns)
        self.recent_successes.extend(self.episode_successes)

    def finished(self) -> bool:
        """Whether the run has trained its budget: ``total_steps`` env steps."""
        return self.global_step >= self.total_steps

    def run(self) -> None:
        """Iterate until ``total_steps``. After each iteration: stop on NaN or inf (before any
        callback could checkpoint them), call the callbacks, checkpoint and stop if a signal asked."""
        if self.obs is None:
            self.obs = self.env.reset(seed=self.seed)
        self.callbacks.on_train_start(self)
        while not self.finished():
            start = time.perf_counter()
            steps_before = self.global_step
            try:
                metrics = self.iterate()
            except NonFiniteActionError as error:  # the env refused the policy's NaN action mid-iteration: a
                # non-finite stop as the check below makes, naming the observations it acted on and the parameters
                acted_on = {"observations": self.acting_on} if self.acting_on is not None else {}
                check_finite(self, [("env data", {**self.algorithm.recent_data(), **acted_on}),
                                    ("parameter", module_tensors(self.algorithm.networks()))], actions=str(error))
                raise
            elapsed = time.perf_counter() - start
            check_finite(self, [("env data", self.algorithm.recent_data()), ("logged value", metrics or {}),
                                ("parameter", module_tensors(self.algorithm.networks()))])
            self.wall_time += elapsed
            if metrics is None:  # cut short by a stop request: no iteration end (callbacks, count), a checkpoint
                stop_if_requested(self)
            self.iteration += 1
            self.close_episodes()
            metrics["charts/SPS"] = (self.global_step - steps_before) / elapsed
            if self.episode_returns:
                metrics["charts/episodic_return"] = float(np.mean(self.episode_returns))
                metrics["charts/episodic_length"] = float(np.mean(self.episode_lengths))
            if self.episode_successes:
                metrics["charts/success_rate"] = float(np.mean(self.episode_successes))
            self.callbacks.on_iteration_end(self, metrics)
            stop_if_requested(self)
        self.callbacks.on_train_end(self)

    # ------------------------------------------------------------------ checkpoints
    def policy_weights(self) -> dict[str, Any]:
        """What evaluation needs besides the spec: the acting head's weights (all the algorithm acts through,
        ``Algorithm.acting_head``) and the observation normalization."""
        return {"head": self.head.state_dict(), "obs_normalizer": observation_state(self.env)}

    def training_state(self) -> dict[str, Any]:
        """Everything besides the policy that an exact resume needs (under torchrun, with every
        rank's own envs and random streams: a collective call)."""
        state = {
            "head": self.algorithm.head.state_dict(),
            "algorithm": self.algorithm.state_dict(),
            "env": self.env.state_dict(),
            "obs": self.obs,
            "global_step": self.global_step,
            "iteration": self.iteration,
            "wall_time": self.wall_time,
            "recent_returns": list(self.recent_returns),
            "recent_successes": list(self.recent_successes),
            **random_states(),
            "callbacks": self.callbacks.state_dict(),
        }
        return distributed.gather_rank_states(self, state) if collectives.world_size() > 1 else state

    def load(self, policy_weights: dict[str, Any], training_state: dict[str, Any]) -> None:
        """Restore from a checkpoint written by ``policy_weights`` / ``training_state``."""
        # checkpoints before the Algorithm layer kept the learner's state at the top level
        algorithm_state = training_state.get("algorithm") or {
            "critic": training_state["critic"], "updater": training_state["updater"],
            "shuffle_rng": training_state["shuffle_rng"]}
        self.algorithm.head.load_state_dict(training_state.get("head", policy_weights["head"]))
        self.algorithm.load_state_dict(algorithm_state)
        self.env.load_state_dict(training_state["env"])
        self.obs = training_state["obs"].to(self.algorithm_device())
        self.global_step = int(training_state["global_step"])
        self.iteration = int(training_state["iteration"])
        self.wall_time = float(training_state["wall_time"])
        self.recent_returns.extend(training_state["recent_returns"])
        self.recent_successes.extend(training_state.get("recent_successes", []))  # older checkpoints: none
        restore_random_states(training_state)
        self.callbacks.load_state_dict(training_state["callbacks"])
        if collectives.world_size() > 1 or "distributed" in training_state:
            distributed.load_rank_state(self, training_state)
        if not state_is_exact(training_state["env"]):
            # the backend could not continue its episodes: every env starts a new one, and the first action
            # is chosen from that episode's first observation (through the wrappers), not from the saved one
            seed = inexact_reset_seed(self.env.state_dict(), self.seed + self.global_step)
            self.obs = self.env.reset(seed=seed).to(self.algorithm_device())

    def algorithm_device(self) -> torch.device:
        return next(self.algorithm.head.parameters()).device
