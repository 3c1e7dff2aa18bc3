"""Frames of EnvPool's MuJoCo locomotion tasks, drawn from a gymnasium twin so that the floor stays in view.

EnvPool renders with its own copy of the task's model and a fixed-size floor rectangle: a HalfCheetah
that runs past gymnasium's 40 m plane runs on in a grey void, and EnvPool exposes no simulator state
that ``genpol.envs.rendering.FloorFollowingRenderer`` could draw. It exposes enough to rebuild the pose,
though: gymnasium's v5 observations are ``qpos`` without its first ``skipped_qpos`` entries (the
torso's x, or x and y), followed by velocities, and EnvPool reports those skipped coordinates in
``info["x_position"]`` / ``info["y_position"]``. Drawing needs positions only (``mj_forward``
computes the kinematics from ``qpos``), so the twin gets ``qpos = [skipped, obs[:nq - skipped]]`` and
the floor-following renderer draws it with the model's ``track`` camera, as the gym backend does.

Tasks without that camera (Reacher, the pendulums) or without the skipped coordinates in EnvPool's info
(HumanoidStandup), and dm_control tasks, keep EnvPool's own renderer.
"""

from __future__ import annotations

from typing import Any

import mujoco
import numpy as np

POSITION_KEYS = ("x_position", "y_position")


class TwinRenderer:
    """Draws env 0 of an EnvPool gymnasium-MuJoCo task through a gymnasium twin of the same task id."""

    def __init__(self, gym_env: Any, width: int, height: int):
        from .rendering import FloorFollowingRenderer

        self._gym_env = gym_env
        unwrapped = gym_env.unwrapped
        self.model, self.data = unwrapped.model, unwrapped.data
        self.skipped = int(unwrapped.observation_structure["skipped_qpos"])
        self.position_keys = POSITION_KEYS[:self.skipped]
        self._renderer = FloorFollowingRenderer(self.model, width, height, camera="track")

    @classmethod
    def for_task(cls, name: str, info_keys: set[str], obs_dim: int, width: int,
                 height: int) -> "TwinRenderer | None":
        """The twin of EnvPool task ``name`` given the keys of its step ``info`` and its observation size;
        None where it cannot rebuild the pose (see the module docstring), or where EnvPool's observation
        is not the twin's (e.g. ``exclude_current_positions_from_observation=False`` among the kwargs:
        a pose read with the default layout would be shifted)."""
        import gymnasium as gym

        try:
            gym_env = gym.make(name)
        except Exception:  # noqa: BLE001 - not a gymnasium task (a dm_control one): EnvPool's renderer
            return None
        unwrapped = gym_env.unwrapped
        structure = getattr(unwrapped, "observation_structure", None)
        model = getattr(unwrapped, "model", None)
        has_track_camera = (isinstance(model, mujoco.MjModel)
                            and mujoco.mj_name2id(model, mujoco.mjtObj.mjOBJ_CAMERA, "track") >= 0)
        skipped = None if structure is None else structure.get("skipped_qpos")
        same_observation = gym_env.observation_space.shape == (obs_dim,)
        if (not has_track_camera or skipped is None or skipped > len(POSITION_KEYS) or not same_observation
                or not set(POSITION_KEYS[:skipped]) <= info_keys):
            gym_env.close()
            return None
        return cls(gym_env, width, height)

    def pose(self, obs: np.ndarray, info: dict[str, Any], index: int) -> np.ndarray:
        """``qpos [nq]`` of env ``index`` from EnvPool's observation rows ``obs [n, obs_dim]`` and its
        ``info`` (arrays in the same row order)."""
        skipped = [float(np.asarray(info[key])[index]) for key in self.position_keys]
        return np.concatenate([skipped, obs[index, :self.model.nq - self.skipped]])

    def render(self, qpos: np.ndarray) -> np.ndarray:
        """The frame ``[height, width, 3]`` (uint8) of pose ``qpos [nq]``, the floor under the robot."""
        self.data.qpos[:] = qpos
        self.data.qvel[:] = 0.0
        mujoco.mj_forward(self.model, self.data)
        return self._renderer.render(self.data)

    def close(self) -> None:
        self._renderer.close()
        self._gym_env.close()
