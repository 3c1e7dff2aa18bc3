"""Pipelined on-policy collection: the policy acts for one env group while the other groups simulate.

With an env whose envs form G fixed groups (``env.step_groups``, ``genpol.envs.core``), a rollout runs

    for g in groups:  act on g's obs, send_group(g)                    # step 0 starts
    for t in range(T):
        for g in groups:
            recv_group(g)                                              # g finished step t
            act on g's new obs, send_group(g)                          # g starts step t + 1 ...
        store step t for all envs                                      # ... while g + 1 finishes t

so group g's policy forward pass, wrappers and bookkeeping run while the next group is still
simulating, instead of every env's simulator waiting on them. With one group (``step_groups=1``) the
critic, the storage and the episode bookkeeping of step t run while the whole batch simulates t + 1.
The last step sends nothing, so no step is in flight across the update or a checkpoint.

Reproducibility: every env receives exactly the actions drawn for its group, so a fixed seed gives a
fixed run. It equals the synchronous run (``collect``) transition for transition when nothing couples
the groups within a step: no running normalization (``env.normalize_obs`` / ``normalize_reward``:
a group's step folds its own observations into the statistics, so a later group normalizes with
statistics that already include an earlier group's), and a head whose sampling of the groups one
after another draws the same random numbers as one batch (the Gaussian head on CPU does when each
group's noise ``[n, A]`` has a multiple of 16 elements: torch fills normals in blocks of 16).
``tests/test_pipelined.py`` asserts both the equality and the determinism.
"""

from __future__ import annotations

from typing import Any, Protocol

import torch

from genpol.algorithms.onpolicy import OnPolicyAlgorithm, Pending
from genpol.envs.core import VectorEnv, concat_steps


class Collector(Protocol):
    """What collection needs of its loop (``OnPolicyRunner`` has it): the env, the learner, the
    current observations, and the episode bookkeeping. A Protocol, so that this module, which the
    loop imports, never imports the loop."""

    env: VectorEnv
    algorithm: OnPolicyAlgorithm
    obs: torch.Tensor

    def track_episodes(self, info: dict[str, Any]) -> None: ...


def collect_pipelined(runner: Collector) -> int:
    """Fill ``runner.algorithm``'s rollout group by group (see the module docstring), then compute
    its advantages; returns the env steps taken."""
    env, algorithm = runner.env, runner.algorithm
    groups = [env.group_slice(group) for group in range(env.step_groups)]
    obs = runner.obs

    def act_and_send(group: int, group_obs: torch.Tensor) -> Pending:  # the critic runs after the send
        runner.acting_on = group_obs
        return algorithm.act_pending(group_obs, send=lambda action: env.send_group(group, action))[1]

    pending = [act_and_send(group, obs[envs]) for group, envs in enumerate(groups)]
    env_steps = 0
    for t in range(algorithm.rollout_steps):
        parts, next_pending = [], []
        for group in range(len(groups)):
            part = env.recv_group(group)
            parts.append(part)
            if t + 1 < algorithm.rollout_steps:
                next_pending.append(act_and_send(group, part[0]))
        next_obs, reward, terminated, truncated, info = concat_steps(parts)
        algorithm.process_env_step(obs, reward, terminated, truncated, info,
                                   pending=algorithm.merge_pending(pending))
        executed = info.get("env_steps")
        env_steps = env_steps + (executed.sum() if executed is not None else env.num_envs)
        runner.track_episodes(info)
        obs, pending = next_obs, next_pending
    algorithm.compute_returns(obs)
    runner.obs = obs
    return int(env_steps)
