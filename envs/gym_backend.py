"""gymnasium backend: any Box-action gymnasium id, synchronously vectorized, as torch tensors.

Synchronous, because on two cores ``AsyncVectorEnv`` measured 2.5x slower than ``SyncVectorEnv``
for HalfCheetah-v5 (3.3k vs 8.5k env-steps/s at 8 envs): its per-step pipe round-trips cost more
than the physics. ``SyncVectorEnv`` runs in ``SAME_STEP`` autoreset mode, so the step that ends an
episode already returns the next episode's first observation, and the true last one arrives in
``info["final_obs"]``, which is what the protocol in ``genpol.envs.core`` asks for.
"""

from __future__ import annotations

import logging
import warnings
import weakref
from typing import Any, SupportsFloat

import gymnasium as gym
import numpy as np
import torch

from .chunking import ActionChunking
from .core import DEFAULT_RENDER_FPS, RANDOMIZED_MODEL_FIELDS, EnvError, StepResult, VectorEnv, kwargs_not_taken
from .goal_envs import (FlattenGoalObservation, goal_env_state, inner_mujoco_env, is_goal_space,
                        remove_generated_model_file, restore_goal_env_state, success_flag)
from .gym_ids import newer_version_hint, resolve_gym_id

try:  # MuJoCo is optional for gymnasium itself; genpol installs it.
    import mujoco
except ImportError:  # pragma: no cover - exercised only without mujoco
    mujoco = None

log = logging.getLogger(__name__)
_seen_mujoco_warnings: set[str] = set()


def _route_mujoco_warnings() -> None:
    """Send MuJoCo's C-level warnings to Python's ``warnings`` (once each).

    Without a handler MuJoCo prints them and appends them to ``MUJOCO_LOG.TXT`` in the working
    directory; gymnasium's HalfCheetah triggers one on every construction under mujoco 3.17.
    A handler the user installed is left alone.
    """
    if mujoco is None or mujoco.get_mju_user_warning() is not None:
        return

    def handler(message: str) -> None:
        if message not in _seen_mujoco_warnings:
            _seen_mujoco_warnings.add(message)
            warnings.warn(f"MuJoCo: {message}", RuntimeWarning, stacklevel=2)

    mujoco.set_mju_user_warning(handler)


class GymVectorEnv(VectorEnv):
    """``num_envs`` copies of a gymnasium env in one process, exchanging torch tensors.

    Args:
        env_id: a gymnasium id such as ``"HalfCheetah-v5"`` (no ``gym:`` prefix), or
            ``"<module>:<id>"`` to import the module that registers the id first.
        num_envs: number of copies.
        device: where the returned tensors live.
        seed: seed used by the first ``reset()`` called without one.
        render: create env 0 with ``render_mode="rgb_array"`` so that ``render()`` works.
        render_size: (width, height) of rendered frames.
        max_episode_steps: override the registered time limit (in env steps, not chunks).
        env_kwargs: passed to ``gymnasium.make``.
        action_chunk: actions per agent step (``genpol.envs.chunking``); the action becomes ``[chunk * A]``.
    """

    def __init__(
        self,
        env_id: str,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        render: bool = False,
        render_size: tuple[int, int] = (256, 256),
        max_episode_steps: int | None = None,
        env_kwargs: dict[str, Any] | None = None,
        action_chunk: int = 1,
    ):
        if num_envs < 1:
            raise EnvError(f"num_envs must be >= 1, got {num_envs}")
        _route_mujoco_warnings()
        gym_id, self.imports = resolve_gym_id(env_id)
        self.env_id = f"gym:{env_id}"
        self.num_envs = num_envs
        self.device = torch.device(device)
        self._seed = seed
        self._render_size = render_size
        kwargs = dict(env_kwargs or {})
        if max_episode_steps is not None:
            kwargs["max_episode_steps"] = max_episode_steps

        def factory(index: int):
            def make() -> gym.Env:
                extra: dict[str, Any] = {}
                if render and index == 0:
                    extra = {"render_mode": "rgb_array", "width": render_size[0], "height": render_size[1]}
                try:
                    try:
                        env = gym.make(gym_id, disable_env_checker=True, **kwargs, **extra)
                    except TypeError:  # envs without width/height arguments (classic control)
                        extra.pop("width", None), extra.pop("height", None)
                        env = gym.make(gym_id, disable_env_checker=True, **kwargs, **extra)
                except TypeError as error:  # an argument the env's constructor does not take
                    if not env_kwargs:
                        raise
                    raise kwargs_not_taken(f"gym:{gym_id}", env_kwargs, error) from None
                except (ImportError, gym.error.Error) as error:  # registered, but its package is missing or retired
                    raise EnvError(f"gym:{gym_id} is registered but cannot be built: {error}"
                                   f"{newer_version_hint(gym_id)}") from None
                remove_generated_model_file(env.unwrapped)
                if is_goal_space(env.observation_space):
                    env = FlattenGoalObservation(env)  # [observation, achieved_goal, desired_goal]
                env = DiscardInfo(env)
                env = ActionChunking(env, action_chunk) if action_chunk > 1 else env
                # outermost, so that it sees the chunk's end (an episode may end inside a chunk)
                return FinalFrame(env, weakref.WeakMethod(self.render)) if render and index == 0 else env

            return make

        self._envs = gym.vector.SyncVectorEnv(
            [factory(i) for i in range(num_envs)],
            copy=False,  # we copy into a fresh float32 tensor anyway
            autoreset_mode=gym.vector.AutoresetMode.SAME_STEP,
        )
        single_obs = self._envs.single_observation_space
        single_act = self._envs.single_action_space
        if not isinstance(single_act, gym.spaces.Box) or len(single_act.shape) != 1:
            self._envs.close()
            raise EnvError(f"{self.env_id}: genpol needs a 1-D Box action space, got {single_act}")
        if not isinstance(single_obs, gym.spaces.Box) or len(single_obs.shape) != 1:
            self._envs.close()
            raise EnvError(f"{self.env_id}: genpol needs a 1-D Box observation space (or a goal env's Dict of "
                           f"them), got {single_obs}")
        self.obs_dim = int(single_obs.shape[0])
        # goal envs (gymnasium-robotics) flag success at every step; DiscardInfo keeps that flag
        flatten = _find_wrapper(self._envs.envs[0], FlattenGoalObservation)
        self.reports_success = flatten is not None
        if flatten is not None:
            space = flatten.env.observation_space
            self.observation_layout = [(key, tuple(space.spaces[key].shape)) for key in flatten.keys]
        self.act_dim = int(single_act.shape[0])
        self.action_low = torch.as_tensor(single_act.low, dtype=torch.float32, device=self.device)
        self.action_high = torch.as_tensor(single_act.high, dtype=torch.float32, device=self.device)
        self.max_episode_steps = self._envs.envs[0].spec.max_episode_steps if self._envs.envs[0].spec else None
        self.render_fps = control_fps(self._envs.envs[0])
        self.action_chunk = action_chunk
        self._render = render
        self._renderer_ready = False
        self._floor_renderer: Any = None

    # ------------------------------------------------------------------ stepping
    def _to_torch(self, array: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        # always a copy: SyncVectorEnv (copy=False) overwrites its observation buffer in place at the
        # next step, and a float32 array would otherwise be shared, not converted
        return torch.tensor(np.asarray(array), dtype=dtype, device=self.device)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        seed = self._seed if seed is None else seed
        obs, _ = self._envs.reset(seed=seed)
        self._seed = None  # later resets continue the envs' own RNG streams
        return self._to_torch(obs)

    def step(self, actions: torch.Tensor) -> StepResult:
        self.check_actions(actions)
        actions_np = actions.detach().to("cpu", torch.float64).numpy()
        self.check_finite_actions(actions_np)
        obs_np, reward, terminated, truncated, info_np = self._envs.step(actions_np)
        obs = self._to_torch(obs_np)
        done_mask = info_np.get("_final_obs")
        final_obs = obs
        if done_mask is not None and done_mask.any():
            final_obs = obs.clone()
            for i in np.flatnonzero(done_mask):
                final_obs[i] = self._to_torch(info_np["final_obs"][i])
        info = {"final_obs": final_obs}
        if self.reports_success:
            info["success"] = self._success(info_np)
        if self.action_chunk > 1:
            info["env_steps"] = self._executed_steps(info_np)
        if self._render and (terminated[0] or truncated[0]):
            info["final_frame"] = self._envs.envs[0].take_frame()
        return (
            obs,
            self._to_torch(reward),
            self._to_torch(terminated, torch.bool),
            self._to_torch(truncated, torch.bool),
            info,
        )

    def _success(self, info_np: dict[str, Any]) -> torch.Tensor:
        """``[N]`` bool: the success flag of each env's step (of the ended episode's last step where one
        ended: SAME_STEP autoreset moves that step's info to ``final_info``)."""
        success = np.zeros(self.num_envs, dtype=bool)
        if "success" in info_np:
            success |= np.asarray(info_np["success"], dtype=bool) & info_np["_success"]
        ended = info_np.get("_final_info")
        if ended is not None and ended.any() and "success" in info_np["final_info"]:
            success = np.where(ended, np.asarray(info_np["final_info"]["success"], dtype=bool), success)
        return torch.as_tensor(success, device=self.device)

    def _executed_steps(self, info_np: dict[str, Any]) -> torch.Tensor:
        """Env steps each env executed in this chunk (fewer than the chunk where an episode ended)."""
        steps = np.asarray(info_np.get("env_steps", np.full(self.num_envs, self.action_chunk)), dtype=np.int64)
        ended = info_np.get("_final_info")
        if ended is not None and ended.any():  # SAME_STEP autoreset: the step's info is in final_info
            final = info_np["final_info"]["env_steps"]
            steps = np.where(ended, final, steps)
        return torch.from_numpy(steps).to(self.device)

    def render(self) -> np.ndarray | None:
        if not self._render:
            return None
        env0 = self._envs.envs[0]
        unwrapped = env0.unwrapped
        if not self._renderer_ready:
            self._floor_renderer = self._make_floor_renderer(unwrapped)
            if self._floor_renderer is None:
                self._configure_renderer(unwrapped)
            self._renderer_ready = True
        if self._floor_renderer is not None:
            return self._floor_renderer.render(unwrapped.data)
        frame = env0.render()
        return None if frame is None else np.ascontiguousarray(frame, dtype=np.uint8)

    def _make_floor_renderer(self, unwrapped: Any) -> Any:
        """A ``FloorFollowingRenderer`` on the model's ``track`` camera, or None without one.

        gymnasium 1.4 renders with a free camera by default, which loses HalfCheetah after a few
        seconds; the locomotion models' own ``track`` camera (``mode="trackcom"``) follows the torso,
        and the floor follows it too (``genpol.envs.rendering``). Envs without that camera (Reacher,
        pendulums) keep gymnasium's own view.
        """
        if not _is_mujoco(unwrapped) or mujoco.mj_name2id(unwrapped.model, mujoco.mjtObj.mjOBJ_CAMERA, "track") < 0:
            return None
        from .rendering import FloorFollowingRenderer

        return FloorFollowingRenderer(unwrapped.model, *self._render_size, camera="track")

    @staticmethod
    def _configure_renderer(unwrapped: Any) -> None:
        """No shadows for gymnasium's own MuJoCo renderer: about 3x faster with Mesa's software EGL."""
        unwrapped = inner_mujoco_env(unwrapped) or unwrapped  # PointMaze renders through its point_env
        renderer = getattr(unwrapped, "mujoco_renderer", None)
        if renderer is None or mujoco is None:
            return
        viewer = renderer._get_viewer("rgb_array")
        viewer.scn.flags[mujoco.mjtRndFlag.mjRND_SHADOW] = False
        viewer.scn.flags[mujoco.mjtRndFlag.mjRND_REFLECTION] = False

    def close(self) -> None:
        if self._floor_renderer is not None:
            self._floor_renderer.close()
            self._floor_renderer = None
        self._envs.close()

    # ------------------------------------------------------------------ exact resume
    def state_dict(self) -> dict[str, Any]:
        envs = [_capture_env_state(env) for env in self._envs.envs]
        state: dict[str, Any] = {"envs": envs, "seed": self._seed}
        if any(env.get("inexact") for env in envs):  # a resume resets every env (envs.core.state_is_exact)
            state["exact"] = False
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["envs"]) != self.num_envs:
            raise EnvError(
                f"{self.env_id}: saved state holds {len(state['envs'])} envs, this env has {self.num_envs}"
            )
        self._envs.reset()  # puts gymnasium's order-enforcing wrappers in the stepping state
        for env, env_state in zip(self._envs.envs, state["envs"]):
            _restore_env_state(env, env_state)
        self._seed = state["seed"]


# Derived MjData arrays that envs read before their next mj_step: after mj_step they still describe
# the pre-integration positions (Ant-v5 and Humanoid-v5 take their "before" x position from xpos and
# xipos), so they are part of the state; recomputing them with mj_forward would change the rewards.
DERIVED_FIELDS = ("xpos", "xquat", "xmat", "xipos", "ximat", "subtree_com", "cinert", "cvel", "cacc", "cfrc_ext",
                  "cfrc_int", "qacc", "sensordata")


class FinalFrame(gym.Wrapper):
    """Env 0's wrapper when rendering: draws the last state of each episode before ``SyncVectorEnv`` resets
    the env in the same step, for the backend's ``info["final_frame"]`` (``render()`` after the step would draw
    the next episode's first state). The backend's ``render`` is held weakly: the backend owns this wrapper."""

    def __init__(self, env: gym.Env, render: weakref.WeakMethod):
        super().__init__(env)
        self._render = render
        self._frame: np.ndarray | None = None

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        result = self.env.step(action)
        if result[2] or result[3]:
            render = self._render()
            self._frame = None if render is None else render()
        return result

    def take_frame(self) -> np.ndarray | None:
        """The frame ``[H, W, 3]`` (uint8) of the episode that ended at the last step, once."""
        frame, self._frame = self._frame, None
        return frame


class DiscardInfo(gym.Wrapper):
    """Returns an empty info dict from ``step`` and ``reset``, but for the step's success flag.

    The vector-env protocol never exposes a gymnasium env's own info (HalfCheetah's reward terms,
    positions, ...), but ``SyncVectorEnv`` merges every key of every env into arrays at every step:
    profiled at 8 % of a 32-env HalfCheetah step. (``ActionChunking`` sits above this wrapper, so
    its ``env_steps`` survives; the final observations come from the vector env, not the info.)
    An env that flags success (``success`` or ``is_success``) keeps it, as ``{"success": bool}``.
    """

    def step(self, action: Any) -> tuple[Any, SupportsFloat, bool, bool, dict[str, Any]]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        success = success_flag(info)
        return obs, reward, terminated, truncated, {} if success is None else {"success": success}

    def reset(self, **kwargs: Any) -> tuple[Any, dict[str, Any]]:
        obs, _ = self.env.reset(**kwargs)
        return obs, {}


def control_fps(env: gym.Env) -> float:
    """Steps per second of simulated time of one (unchunked) step of ``env``: ``1 / dt`` where the env, or the MuJoCo
    env inside a goal env, has a ``dt``; else ``metadata["render_fps"]``; else ``DEFAULT_RENDER_FPS``.

    The real ``dt`` first, because ``render_fps`` is only the rate gymnasium's own recorder plays at: MuJoCo's v5
    envs round it to an integer (Humanoid-v5: 67 for a dt of 0.015 s), Pendulum-v1 declares 30 for a dt of 0.05 s,
    and PointMaze declares 50 while its point env steps 0.01 s (a video 2x slow).
    """
    unwrapped = env.unwrapped
    goal_env_simulator = inner_mujoco_env(unwrapped) if mujoco is not None else None
    for simulator in (unwrapped, goal_env_simulator):
        dt = getattr(simulator, "dt", None)
        if isinstance(dt, (int, float, np.floating)) and 0 < float(dt) < float("inf"):
            return 1.0 / float(dt)
    declared = unwrapped.metadata.get("render_fps")
    if isinstance(declared, (int, float, np.number)) and 0 < float(declared) < float("inf"):
        return float(declared)
    return DEFAULT_RENDER_FPS


def _find_wrapper(env: gym.Env, kind: type) -> Any | None:
    while isinstance(env, gym.Wrapper):
        if isinstance(env, kind):
            return env
        env = env.env
    return None


def _time_limit(env: gym.Env) -> gym.wrappers.TimeLimit | None:
    return _find_wrapper(env, gym.wrappers.TimeLimit)


def _is_mujoco(unwrapped: Any) -> bool:
    return mujoco is not None and isinstance(getattr(unwrapped, "data", None), mujoco.MjData)


def _capture_env_state(env: gym.Env) -> dict[str, Any]:
    """The simulator state, time-limit counter and RNG state of one gymnasium env.

    MuJoCo envs save ``mjSTATE_INTEGRATION`` (positions, velocities, activations, warm-start, time,
    controls) and the model fields tasks randomize at reset (``RANDOMIZED_MODEL_FIELDS``), which continues
    bit-identically. Envs with a ``state`` attribute (gymnasium's classic
    control) save their numeric attributes. Others (Box2D) cannot be captured: their state is marked
    inexact, restoring it warns, and the resumed run resets every env (seeded, so a resume repeats).
    """
    unwrapped = env.unwrapped
    state: dict[str, Any] = {}
    inner = inner_mujoco_env(unwrapped) if mujoco is not None else None  # a goal env's simulator
    sim = inner if inner is not None else (unwrapped if _is_mujoco(unwrapped) else None)
    if sim is not None:
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        buffer = np.empty(mujoco.mj_stateSize(sim.model, spec))
        mujoco.mj_getState(sim.model, sim.data, buffer, spec)
        state["mujoco"] = torch.from_numpy(buffer)
        state["derived"] = {name: torch.from_numpy(getattr(sim.data, name).copy()) for name in DERIVED_FIELDS}
        state["model"] = {name: torch.from_numpy(getattr(sim.model, name).copy()) for name in RANDOMIZED_MODEL_FIELDS}
        if sim is not unwrapped:  # a goal env around a MuJoCo env: its goal and the inner env's RNG too
            state["goal_env"] = goal_env_state(unwrapped)
    elif not hasattr(unwrapped, "state"):
        state["inexact"] = True
    else:
        attributes = {}
        for name, value in vars(unwrapped).items():
            if isinstance(value, np.ndarray) and value.dtype.kind in "fiub":
                attributes[name] = torch.from_numpy(value.copy())
            elif isinstance(value, (bool, int, float)) and not name.startswith("__"):
                # numpy scalars (Pendulum's last_u is an np.float64) as Python numbers: weights_only loads
                attributes[name] = value.item() if isinstance(value, np.generic) else value
        state["attributes"] = attributes
    rng = getattr(unwrapped, "_np_random", None)
    state["np_random"] = None if rng is None else rng.bit_generator.state
    limit = _time_limit(env)
    state["elapsed_steps"] = None if limit is None else limit._elapsed_steps
    return state


def _restore_env_state(env: gym.Env, state: dict[str, Any]) -> None:
    unwrapped = env.unwrapped
    if "mujoco" in state:
        sim = inner_mujoco_env(unwrapped) if "goal_env" in state else unwrapped
        if sim is None or not _is_mujoco(sim):
            raise EnvError("saved env state is a MuJoCo state but the env is not a MuJoCo env")
        spec = mujoco.mjtState.mjSTATE_INTEGRATION
        mujoco.mj_setState(sim.model, sim.data, state["mujoco"].numpy(), spec)
        for name, value in state["derived"].items():
            getattr(sim.data, name)[:] = value.numpy()
        for name, value in state.get("model", {}).items():  # checkpoints before these were saved have none
            getattr(sim.model, name)[:] = value.numpy()
        if "goal_env" in state:
            restore_goal_env_state(unwrapped, state["goal_env"])
    elif state.get("inexact"):
        warnings.warn(f"{env.spec.id if env.spec else unwrapped}: this env's state cannot be saved, so the resumed "
                      "run cannot continue its episodes: every env starts a new one", RuntimeWarning, stacklevel=2)
    else:
        for name, value in state["attributes"].items():
            setattr(unwrapped, name, value.numpy().copy() if isinstance(value, torch.Tensor) else value)
    if state["np_random"] is not None:
        rng = np.random.Generator(getattr(np.random, state["np_random"]["bit_generator"])())
        rng.bit_generator.state = state["np_random"]
        unwrapped._np_random = rng
    limit = _time_limit(env)
    if limit is not None:
        limit._elapsed_steps = state["elapsed_steps"]
