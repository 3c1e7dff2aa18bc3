"""Action chunks: one agent step executes ``steps`` consecutive env actions.

The agent's action is the chunk flattened, ``[steps * A]``. Rewards of the executed actions are
summed (undiscounted, as DPPO's ``MultiStep``); if the episode ends inside the chunk, the remaining
actions are dropped and the step reports the termination or truncation, so an action chosen for
one episode is never applied to the next. ``info["env_steps"]`` counts the env steps executed.

Chunking has to happen per env, before vectorization: a batched wrapper could not stop one env
in the middle of a chunk while the others go on. ``ActionChunking`` is the gymnasium wrapper the
gym backend applies to each env; ``chunk_bounds`` gives the flattened chunk's action bounds.
"""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np


def chunk_bounds(low: np.ndarray, high: np.ndarray, steps: int) -> tuple[np.ndarray, np.ndarray]:
    """Bounds ``[A]`` of one action -> bounds ``[steps * A]`` of a flattened chunk."""
    return np.tile(low, steps), np.tile(high, steps)


class ActionChunking(gym.Wrapper):
    """Execute a chunk of ``steps`` actions per ``step`` (see the module docstring)."""

    def __init__(self, env: gym.Env, steps: int):
        super().__init__(env)
        if steps < 1:
            raise ValueError(f"action chunk length must be >= 1, got {steps}")
        self.steps = steps
        space = env.action_space
        low, high = chunk_bounds(space.low, space.high, steps)
        self.action_space = gym.spaces.Box(low, high, dtype=space.dtype)

    def step(self, action: np.ndarray) -> tuple[Any, float, bool, bool, dict[str, Any]]:
        chunk = np.asarray(action).reshape(self.steps, -1)
        total = 0.0
        succeeded = False  # a chunk succeeds if any of its env steps did
        for executed, single in enumerate(chunk, start=1):
            obs, reward, terminated, truncated, info = self.env.step(single)
            total += float(reward)
            succeeded = succeeded or bool(info.get("success", False))
            if terminated or truncated:
                break
        info = dict(info)
        info["env_steps"] = executed
        if "success" in info:
            info["success"] = succeeded
        return obs, total, terminated, truncated, info
