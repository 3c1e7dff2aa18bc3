"""``MyReach-v0``: a gymnasium env as a user writes one (a point mass reaching a target), registered on import."""

from __future__ import annotations

from typing import Any

import gymnasium as gym
import numpy as np

from custom_envs import sigkill_at_step


class MyReach(gym.Env):
    """A point in [-1, 1]^2 moves by 0.1 * action towards a random target.

    Observation ``[x, y, target_x, target_y]``; reward minus the distance to the target; the episode
    terminates within 0.05 of it. All state sits in ``self.state`` (numeric attributes are what
    genpol's gym backend saves for an exact resume of a non-MuJoCo env).
    """

    metadata = {"render_modes": ["rgb_array"], "render_fps": 30}

    def __init__(self, render_mode: str | None = None, width: int = 64, height: int = 64):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self.render_mode = render_mode
        self.width, self.height = width, height
        self.state = np.zeros(4)
        self.steps_taken = 0  # over all episodes, for sigkill_at_step

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self.state = self.np_random.uniform(-1.0, 1.0, size=4)
        return self.state.astype(np.float32), {}

    def step(self, action: np.ndarray):
        self.steps_taken += 1
        sigkill_at_step(self.steps_taken)
        self.state[:2] = np.clip(self.state[:2] + 0.1 * np.clip(action, -1.0, 1.0), -1.0, 1.0)
        distance = float(np.linalg.norm(self.state[:2] - self.state[2:]))
        return self.state.astype(np.float32), -distance, distance < 0.05, False, {}

    def render(self) -> np.ndarray:
        ys, xs = np.mgrid[0:self.height, 0:self.width]
        world_x, world_y = 2 * xs / self.width - 1, 1 - 2 * ys / self.height
        frame = np.full((self.height, self.width, 3), 255, dtype=np.uint8)
        for (x, y), color in ((self.state[2:], (60, 170, 60)), (self.state[:2], (40, 80, 200))):
            frame[(world_x - x) ** 2 + (world_y - y) ** 2 < 0.1**2] = color
        return frame


class MyReachPrivate(gym.Env):
    """``MyReach``'s task with its state in attributes of its own, not ``self.state`` (as a Box2D env keeps
    it): genpol's gym backend cannot save it, so checkpoints are inexact and a resume starts new episodes."""

    def __init__(self):
        self.observation_space = gym.spaces.Box(-1.0, 1.0, (4,), np.float32)
        self.action_space = gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
        self._position, self._target = np.zeros(2), np.zeros(2)

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        self._position, self._target = self.np_random.uniform(-1.0, 1.0, size=(2, 2))
        return np.concatenate([self._position, self._target]).astype(np.float32), {}

    def step(self, action: np.ndarray):
        self._position = np.clip(self._position + 0.1 * np.clip(action, -1.0, 1.0), -1.0, 1.0)
        distance = float(np.linalg.norm(self._position - self._target))
        return np.concatenate([self._position, self._target]).astype(np.float32), -distance, distance < 0.05, False, {}


gym.register("MyReach-v0", entry_point="custom_envs.reach:MyReach", max_episode_steps=50)
gym.register("MyReachPrivate-v0", entry_point="custom_envs.reach:MyReachPrivate", max_episode_steps=50)
