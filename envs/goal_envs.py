"""Goal-conditioned gymnasium envs (gymnasium-robotics' PointMaze, AntMaze, Fetch, ...) for the gym backend.

Their observations are dicts; genpol's protocol takes flat ``[D]`` vectors. ``FlattenGoalObservation``
concatenates the entries in the fixed order ``GOAL_KEYS`` = (observation, achieved_goal,
desired_goal), then any other entries by sorted key. gymnasium's own ``FlattenObservation`` would
follow ``spaces.Dict``'s order, which sorts plain-dict keys alphabetically (achieved_goal first),
so the robot state would move whenever an env added a key. For PointMaze that gives

    [x, y, vx, vy, achieved_x, achieved_y, goal_x, goal_y]          (8 floats; achieved = x, y)

These envs report ``info["success"]`` (maze envs) or ``info["is_success"]`` (Fetch, Shadow hand) at
every step; ``success_flag`` reads either. ``goal_env_state`` / ``restore_goal_env_state`` carry the
goal and the inner MuJoCo env (PointMaze simulates a ``PointEnv`` it holds as ``point_env``), which
the gym backend's generic MuJoCo capture cannot see through.
"""

from __future__ import annotations

import os
import tempfile
from typing import Any

import gymnasium as gym
import numpy as np
import torch

GOAL_KEYS = ("observation", "achieved_goal", "desired_goal")
SUCCESS_KEYS = ("success", "is_success")

# gymnasium ids that live in optional packages: importing the package registers them. The gym
# backend imports the package when it meets an unknown id with one of these prefixes.
OPTIONAL_PROVIDERS: dict[str, tuple[str, ...]] = {
    "gymnasium_robotics": ("PointMaze_", "AntMaze_", "Fetch", "HandManipulate", "HandReach", "AdroitHand",
                           "FrankaKitchen"),
}


def is_goal_space(space: gym.Space) -> bool:
    """A ``Dict`` of 1-D ``Box`` entries (the goal-env observation layout)."""
    return isinstance(space, gym.spaces.Dict) and all(
        isinstance(sub, gym.spaces.Box) and len(sub.shape) == 1 for sub in space.spaces.values())


def flat_key_order(space: gym.spaces.Dict) -> list[str]:
    """The order in which ``FlattenGoalObservation`` concatenates the entries of ``space``."""
    keys = list(space.spaces)
    return [key for key in GOAL_KEYS if key in keys] + sorted(key for key in keys if key not in GOAL_KEYS)


class FlattenGoalObservation(gym.ObservationWrapper):
    """Dict observation -> float64 ``[D]`` in ``flat_key_order`` (see the module docstring).

    ``slices`` maps each key to its slice of the flat vector, e.g. ``slices["desired_goal"]``.
    """

    def __init__(self, env: gym.Env):
        super().__init__(env)
        space = env.observation_space
        if not is_goal_space(space):
            raise ValueError(f"FlattenGoalObservation needs a Dict of 1-D Box entries, got {space}")
        self.keys = flat_key_order(space)
        self.slices: dict[str, slice] = {}
        start = 0
        for key in self.keys:
            size = space.spaces[key].shape[0]
            self.slices[key] = slice(start, start + size)
            start += size
        low = np.concatenate([np.asarray(space.spaces[key].low, dtype=np.float64) for key in self.keys])
        high = np.concatenate([np.asarray(space.spaces[key].high, dtype=np.float64) for key in self.keys])
        self.observation_space = gym.spaces.Box(low, high, dtype=np.float64)

    def observation(self, observation: dict[str, np.ndarray]) -> np.ndarray:
        return np.concatenate([np.asarray(observation[key], dtype=np.float64).reshape(-1) for key in self.keys])


def success_flag(info: dict[str, Any]) -> bool | None:
    """The env's success flag in a step's ``info`` (``success`` or ``is_success``), or None."""
    for key in SUCCESS_KEYS:
        if key in info:
            return bool(info[key])
    return None


def provider_of(gym_id: str) -> str | None:
    """The optional package that registers ``gym_id`` (by its prefix), or None."""
    for module, prefixes in OPTIONAL_PROVIDERS.items():
        if gym_id.startswith(prefixes):
            return module
    return None


def remove_generated_model_file(unwrapped: Any) -> None:
    """Delete the MJCF file a gymnasium-robotics maze wrote for itself (``tmp_xml_file_path``).

    Their ``Maze.make_maze`` writes each env's generated model into the temp directory and never removes
    it: one file per env built (an evaluation env per checkpoint, a worker per env), 1260 of them in this
    machine's ``/tmp`` after a few days of tests. MuJoCo has parsed it by the time ``gym.make`` returns
    and never reads it again, so it goes. Only a file directly in the temp directory is removed.
    """
    path = getattr(unwrapped, "tmp_xml_file_path", None)
    if not isinstance(path, str) or os.path.dirname(os.path.abspath(path)) != os.path.abspath(tempfile.gettempdir()):
        return
    try:
        os.remove(path)
    except FileNotFoundError:
        pass


# ------------------------------------------------------------------ exact resume
def inner_mujoco_env(unwrapped: Any) -> Any | None:
    """The MuJoCo env a goal env simulates with (``point_env``, ``ant_env``), or None."""
    import mujoco

    for value in vars(unwrapped).values():
        if isinstance(value, gym.Env) and isinstance(getattr(value, "data", None), mujoco.MjData):
            return value
    return None


def goal_env_state(unwrapped: Any) -> dict[str, Any]:
    """The outer env's numeric arrays (goal, reset position), its inner env's ``init_qpos`` and RNG,
    and the model's site positions (the goal marker that renders)."""
    inner = inner_mujoco_env(unwrapped)
    arrays = {name: torch.from_numpy(value.copy()) for name, value in vars(unwrapped).items()
              if isinstance(value, np.ndarray) and value.dtype.kind in "fiub"}
    rng = getattr(inner, "_np_random", None)
    return {"arrays": arrays, "init_qpos": torch.from_numpy(inner.init_qpos.copy()),
            "site_pos": torch.from_numpy(inner.model.site_pos.copy()),
            "inner_np_random": None if rng is None else rng.bit_generator.state}


def restore_goal_env_state(unwrapped: Any, state: dict[str, Any]) -> None:
    inner = inner_mujoco_env(unwrapped)
    for name, value in state["arrays"].items():
        setattr(unwrapped, name, value.numpy().copy())
    inner.init_qpos[:] = state["init_qpos"].numpy()
    inner.model.site_pos[:] = state["site_pos"].numpy()
    if state["inner_np_random"] is not None:
        rng = np.random.Generator(getattr(np.random, state["inner_np_random"]["bit_generator"])())
        rng.bit_generator.state = state["inner_np_random"]
        inner._np_random = rng
