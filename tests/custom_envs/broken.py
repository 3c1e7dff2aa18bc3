"""Copies of ``BatchedReach`` that each break one rule of the protocol, for the conformance suite's own test.

Each is built as ``lambda: Broken(num_envs=3, device=torch.device("cpu"), max_episode_steps=8)``.
"""

from __future__ import annotations

from typing import Any

import torch

from genpol import envs
from custom_envs.batched import BatchedReach


class NoFinalObsOnTruncation(BatchedReach):
    """Returns the next episode's first observation as ``final_obs`` where the time limit cut an episode."""

    def step(self, actions: torch.Tensor) -> envs.StepResult:
        obs, reward, terminated, truncated, info = super().step(actions)
        info["final_obs"] = torch.where(truncated[:, None], obs, info["final_obs"])
        return obs, reward, terminated, truncated, info


class ReusesObservationBuffer(BatchedReach):
    """Hands out its internal state tensor, which the next step overwrites in place."""

    def step(self, actions: torch.Tensor) -> envs.StepResult:
        _, reward, terminated, truncated, info = super().step(actions)
        return self.state, reward, terminated, truncated, info


class IgnoresSeed(BatchedReach):
    """Always resets with the same generator seed, whatever seed it is given."""

    def reset(self, seed: int | None = None) -> torch.Tensor:
        return super().reset(0)


class StateMissesGenerator(BatchedReach):
    """Saves positions and counters but not the generator that draws the next episodes."""

    def state_dict(self) -> dict[str, Any]:
        state = super().state_dict()
        state["generator"] = torch.Generator().get_state()  # a fresh generator's state, not its own
        return state


class RewardWithExtraAxis(BatchedReach):
    """Returns rewards ``[N, 1]`` instead of ``[N]``."""

    def step(self, actions: torch.Tensor) -> envs.StepResult:
        obs, reward, terminated, truncated, info = super().step(actions)
        return obs, reward[:, None], terminated, truncated, info


class LateTimeLimit(BatchedReach):
    """Truncates one step after ``max_episode_steps``."""

    def step(self, actions: torch.Tensor) -> envs.StepResult:
        limit = self.max_episode_steps
        self.max_episode_steps = limit + 1
        try:
            return super().step(actions)
        finally:
            self.max_episode_steps = limit
