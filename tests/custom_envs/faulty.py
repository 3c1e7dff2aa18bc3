"""Gymnasium envs that fail inside an env worker process (``env.workers`` > 1), for ``tests/test_subproc.py``.

Each env counts its steps since reset in its observation. Worker processes are named ``genpol-env-<w>``, so
an env knows which worker steps it; this process (slice 0) never fails.
"""

from __future__ import annotations

import multiprocessing
import threading
import time

import gymnasium as gym
import numpy as np


class JointDiverged(Exception):
    """An exception whose ``__init__`` takes other arguments than its message: it pickles, but unpickling
    calls ``JointDiverged(message)`` and fails."""

    def __init__(self, joint: str, value: float):
        super().__init__(f"joint {joint} diverged to {value}")
        self.joint, self.value = joint, value


def _worker() -> str:
    return multiprocessing.current_process().name


class Counter(gym.Env):
    """Observation: the steps since reset. Raises ``fail_with()`` at step 3 in worker 1; worker 2 is slow."""

    observation_space = gym.spaces.Box(-1e9, 1e9, (1,))
    action_space = gym.spaces.Box(-1.0, 1.0, (1,))

    def reset(self, seed=None, options=None):
        super().reset(seed=seed)
        self.t = 0
        return np.zeros(1, np.float32), {}

    def step(self, action):
        if _worker() == "genpol-env-2":
            time.sleep(0.05)  # answers after worker 1 has failed
        self.t += 1
        if self.t == 3 and _worker() == "genpol-env-1":
            raise self.fail_with()
        return np.array([self.t], np.float32), 0.0, False, False, {}

    def fail_with(self) -> Exception:
        return RuntimeError("worker 1 blew up at step 3")


class UnpicklableError(Counter):
    def fail_with(self) -> Exception:
        return JointDiverged("knee", float("nan"))


class LockedError(Counter):
    def fail_with(self) -> Exception:
        error = RuntimeError("solver diverged at step 3")
        error.lock = threading.Lock()  # pickle cannot take it
        return error


gym.register("Counter-v0", entry_point="custom_envs.faulty:Counter", max_episode_steps=1000)
gym.register("UnpicklableError-v0", entry_point="custom_envs.faulty:UnpicklableError", max_episode_steps=1000)
gym.register("LockedError-v0", entry_point="custom_envs.faulty:LockedError", max_episode_steps=1000)
