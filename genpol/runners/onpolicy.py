"""The on-policy loop: collect a rollout, estimate advantages, update; repeat. Callbacks do the I/O.

Read top to bottom it is a single-file PPO: nothing here depends on which head or which learner
is plugged in, because the algorithm owns the critic, the rollout and the update.
"""

from __future__ import annotations

import time
from typing import Any

import torch

from genpol import collectives
from genpol.algorithms.onpolicy import OnPolicyAlgorithm
from genpol.runners.base import EnvRunner
from genpol.runners.pipelined import collect_pipelined


class OnPolicyRunner(EnvRunner):
    """``EnvRunner`` whose iteration is one rollout of ``algorithm.rollout_steps`` steps per env
    and one update."""

    algorithm: OnPolicyAlgorithm

    def __init__(self, *args: Any, update_threads: int = 0, iterations: int | None = None, **kwargs: Any):
        """``update_threads``: torch intra-op threads during ``algorithm.update()`` (0: leave the
        caller's count). The caller's count is restored after every update, so acting never sees it.
        ``iterations``: stop after this many rollouts instead of at ``total_steps`` (chunked actions: an episode
        that ends inside a chunk executes fewer env steps than the rollout's nominal count, and counting the env
        steps executed ran one more rollout and update than the budget, 41 % more on MultiGoal)."""
        super().__init__(*args, **kwargs)
        self.update_threads = update_threads
        self.iterations = iterations

    def finished(self) -> bool:
        return super().finished() if self.iterations is None else self.iteration >= self.iterations

    def collect(self) -> int:
        """Fill the algorithm's rollout, then compute its advantages; returns the env steps taken.
        An env that steps in groups (``env.step_groups >= 1``, EnvPool) is collected pipelined
        (``pipelined.py``): the policy's bookkeeping, or another group's actions, overlap the simulation."""
        if self.env.step_groups:
            return collect_pipelined(self)
        env, algorithm = self.env, self.algorithm
        env_steps = 0  # summed lazily: chunked envs report the env steps each agent step executed
        obs = self.obs
        for _ in range(algorithm.rollout_steps):
            self.acting_on = obs
            action = algorithm.act(obs)
            next_obs, reward, terminated, truncated, info = env.step(action)
            algorithm.process_env_step(obs, reward, terminated, truncated, info)
            executed = info.get("env_steps")
            env_steps = env_steps + (executed.sum() if executed is not None else env.num_envs)
            self.track_episodes(info)
            obs = next_obs
        algorithm.compute_returns(obs)
        self.obs = obs
        return int(env_steps)

    def update(self) -> dict[str, float]:
        """``algorithm.update()`` on ``update_threads`` torch threads; the caller's count is restored."""
        collect_threads = torch.get_num_threads()
        torch.set_num_threads(self.update_threads or collect_threads)
        try:
            return self.algorithm.update()
        finally:
            torch.set_num_threads(collect_threads)

    def iterate(self) -> dict[str, float]:
        start = time.perf_counter()
        self.global_step += collectives.sum_int(self.collect())  # all ranks' env steps under torchrun
        collect_time = time.perf_counter() - start
        self.algorithm.set_progress(self.global_step / self.total_steps)
        stats = self.update()
        metrics = {f"losses/{key}": value for key, value in stats.items() if not key.startswith("head/")}
        metrics.update({key: value for key, value in stats.items() if key.startswith("head/")})
        metrics["charts/collect_fraction"] = collect_time / max(time.perf_counter() - start, 1e-12)
        return metrics
