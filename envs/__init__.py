"""Simulators as batched torch tensors: ``genpol.envs.make("gym:HalfCheetah-v5", num_envs=16, device="cpu")``.

Ids take a backend prefix:

* ``gym:<gymnasium id>`` - any gymnasium env with 1-D Box actions and 1-D Box observations, or a goal
  env's dict of them, flattened as [observation, achieved_goal, desired_goal] (``genpol.envs.goal_envs``;
  gymnasium-robotics' ids such as ``gym:PointMaze_Medium-v3`` import the package on demand);
* ``dmc:<domain>-<task>`` - the dm_control suite, e.g. ``dmc:cheetah-run``;
* ``playground:<Env>`` - MuJoCo Playground (MJX on JAX, CPU or GPU), e.g. ``playground:CheetahRun``;
* ``envpool:<task>`` - EnvPool's C++ MuJoCo and dm_control tasks, e.g. ``envpool:HalfCheetah-v5``;
* ``genpol:<task>`` - genpol's own tasks (``genpol:MultiGoal``);
* ``custom:<module>:<factory>`` - your own batched simulator, built by a function in your package
  (``genpol.envs.custom``; ``genpol.envs.testing.check_vector_env`` checks it against the protocol).

Your own gymnasium env: ``gym:<module>:<id>`` imports the module that registers the id first
(gymnasium's ``module:EnvId`` form), or ``imports=[<module>, ...]`` names modules to import before
any env is built (``genpol.envs.imports``); env workers and evaluation import them too.

This package never imports ``genpol``; the learning layer depends on it, not the reverse.
"""

from __future__ import annotations

import os

# Headless rendering by default (EGL, Mesa's software renderer on a bare machine). Read by MuJoCo,
# gymnasium and dm_control when they first render or import; set MUJOCO_GL=glfw for a window.
os.environ.setdefault("MUJOCO_GL", "egl")
if os.environ["MUJOCO_GL"] in ("egl", "osmesa"):
    os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])

import difflib  # noqa: E402
import numbers
from pathlib import Path
from typing import Any, Callable, Sequence

import torch

from .core import (EnvDimsError, EnvError, NonFiniteActionError, StepResult, VectorEnv, VectorEnvWrapper, innermost,
                   kwargs_not_taken)
from .imports import import_user_modules, merge_imports
from .wrappers import (
    ActionRescale,
    EpisodeStats,
    ObservationNormalizer,
    ObservationScaler,
    RewardScaler,
    RunningMeanStd,
    VideoRecorder,
    action_affine,
    rescale_actions,
)

__all__ = [
    "make", "make_backend", "known_ids", "innermost", "EnvError", "EnvDimsError", "NonFiniteActionError", "StepResult",
    "VectorEnv", "VectorEnvWrapper",
    "ActionRescale", "EpisodeStats", "ObservationNormalizer", "ObservationScaler", "RewardScaler", "RunningMeanStd",
    "VideoRecorder", "action_affine", "rescale_actions",
]


def _make_gym(name: str, **kwargs: Any) -> VectorEnv:
    from .gym_backend import GymVectorEnv

    return GymVectorEnv(name, **kwargs)


def _make_genpol(name: str, *, env_kwargs: dict[str, Any] | None = None, **kwargs: Any) -> VectorEnv:
    from .multigoal import MultiGoal

    tasks: dict[str, Callable[..., VectorEnv]] = {"MultiGoal": MultiGoal}
    if name not in tasks:
        close = difflib.get_close_matches(name, list(tasks), n=1)
        hint = f" Did you mean 'genpol:{close[0]}'?" if close else ""
        raise EnvError(f"unknown genpol task 'genpol:{name}'; known: {sorted(tasks)}.{hint}")
    taken = sorted(set(kwargs) & set(env_kwargs or {}))  # seed, num_envs, ...: genpol's own settings
    if taken:
        raise EnvError(f"genpol:{name}: env.kwargs may not set {taken}; set them through genpol's own keys")
    try:
        return tasks[name](**kwargs, **(env_kwargs or {}))
    except TypeError as error:  # a task argument misspelt
        if not env_kwargs:
            raise
        raise kwargs_not_taken(f"genpol:{name}", env_kwargs, error) from None


def _make_dmc(name: str, **kwargs: Any) -> VectorEnv:
    from .dmc_backend import DMCVectorEnv

    return DMCVectorEnv(name, **kwargs)


def _make_custom(name: str, **kwargs: Any) -> VectorEnv:
    from .custom import make_custom

    return make_custom(name, **kwargs)


def _make_envpool(name: str, **kwargs: Any) -> VectorEnv:
    try:
        from .envpool_backend import EnvPoolVectorEnv
    except ImportError as error:
        raise EnvError(f"envpool:{name} needs EnvPool: pip install -e '.[envpool]' ({error})") from None
    return EnvPoolVectorEnv(name, **kwargs)


def _make_playground(name: str, **kwargs: Any) -> VectorEnv:
    try:
        from .playground_backend import PlaygroundVectorEnv
    except ImportError as error:
        raise EnvError(f"playground:{name} needs MuJoCo Playground: pip install -e '.[playground]' ({error})") from None
    return PlaygroundVectorEnv(name, **kwargs)


BACKENDS: dict[str, Callable[..., VectorEnv]] = {"gym": _make_gym, "dmc": _make_dmc, "playground": _make_playground,
                                                 "envpool": _make_envpool, "genpol": _make_genpol,
                                                 "custom": _make_custom}


def known_ids() -> list[str]:
    """A few example ids (the gym backend accepts every registered gymnasium id)."""
    return ["gym:HalfCheetah-v5", "gym:Hopper-v5", "gym:Walker2d-v5", "gym:Ant-v5", "gym:Pendulum-v1",
            "gym:PointMaze_Medium-v3", "dmc:cheetah-run", "dmc:cartpole-balance", "dmc:walker-walk",
            "playground:CheetahRun", "playground:CartpoleBalance", "envpool:HalfCheetah-v5", "envpool:CheetahRun-v1",
            "genpol:MultiGoal"]


def backend_prefix(env_id: str) -> str:
    """The backend prefix of ``env_id``; an ``EnvError`` with the known prefixes if there is none."""
    prefix, sep, _ = env_id.partition(":")
    if not sep or prefix not in BACKENDS:
        guess = difflib.get_close_matches(env_id, known_ids(), n=1, cutoff=0.5)
        if not guess and not sep:
            guess = difflib.get_close_matches(f"gym:{env_id}", known_ids(), n=1, cutoff=0.5)
        hint = f" Did you mean '{guess[0]}'?" if guess else ""
        raise EnvError(
            f"unknown env id '{env_id}': ids take a backend prefix, one of "
            f"{', '.join(p + ':' for p in BACKENDS)}.{hint}"
        )
    return prefix


def check_counts(env_id: str, num_envs: Any, max_episode_steps: Any) -> None:
    """An ``EnvError`` naming ``num_envs`` unless it is an int >= 1, or ``max_episode_steps`` unless it is None or
    an int >= 1. Checked here, where every backend passes, since the Python API skips the config's validation and
    the backends failed each their own way: dm_control with an IndexError, EnvPool with a bare AssertionError,
    and dm_control read max_episode_steps=0 as unset, after lifting the suite's limit (no time limit at all)."""
    def count(value: Any) -> bool:  # a bool is an int to Python, but True envs is a mistake, not 1
        return isinstance(value, numbers.Integral) and not isinstance(value, bool) and value >= 1

    if not count(num_envs):
        raise EnvError(f"{env_id}: num_envs must be an int >= 1, got {num_envs!r}")
    if max_episode_steps is not None and not count(max_episode_steps):
        raise EnvError(f"{env_id}: max_episode_steps must be None (the task's own limit) or an int >= 1, "
                       f"got {max_episode_steps!r}")


def make_backend(
    env_id: str,
    num_envs: int = 1,
    device: str | torch.device = "cpu",
    seed: int | None = None,
    imports: Sequence[str] = (),
    **kwargs: Any,
) -> VectorEnv:
    """The raw backend for ``"<prefix>:<name>"``, without wrappers, after importing ``imports``.

    The backend's ``imports`` attribute then lists ``imports`` and whatever the backend found it
    needs itself (a gymnasium id registered outside gymnasium), for other processes to import.
    """
    prefix = backend_prefix(env_id)
    check_counts(env_id, num_envs, kwargs.get("max_episode_steps"))
    name = env_id.partition(":")[2]
    import_user_modules(imports, named_by="imports: env.imports, or --import of genpol.data.collect")
    env = BACKENDS[prefix](name, num_envs=num_envs, device=device, seed=seed, **kwargs)
    env.imports = merge_imports(imports, env.imports)
    return env


def make(
    env_id: str,
    num_envs: int = 1,
    device: str | torch.device = "cpu",
    seed: int | None = None,
    *,
    normalize_obs: bool = False,
    normalize_reward: bool = False,
    gamma: float = 0.99,
    obs_clip: float = 10.0,
    reward_clip: float = 10.0,
    rescale_actions: bool = True,
    render: bool = False,
    render_size: tuple[int, int] = (256, 256),
    video_dir: str | Path | None = None,
    video_prefix: str = "rollout",
    max_episode_steps: int | None = None,
    env_kwargs: dict[str, Any] | None = None,
    action_chunk: int = 1,
    action_bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
    obs_bounds: tuple[torch.Tensor, torch.Tensor] | None = None,
    workers: int = 1,
    imports: Sequence[str] = (),
    step_groups: int = 0,
    dims: tuple[int, int] | None = None,
) -> VectorEnv:
    """A vector env with the standard wrapper stack (see ``genpol.envs.wrappers`` for the order).

    Args:
        env_id: ``"<backend>:<name>"``, e.g. ``"gym:HalfCheetah-v5"`` or ``"genpol:MultiGoal"``.
        num_envs: number of parallel copies.
        device: torch device of every tensor the env returns.
        seed: seed of the first ``reset()``; env i gets ``seed + i`` (MultiGoal: one stream, see its class).
        normalize_obs: running observation normalization (``ObservationNormalizer``).
        normalize_reward: scale rewards by the running discounted-return std (``RewardScaler``).
        gamma: discount of the return whose std scales rewards.
        obs_clip, reward_clip: clip ranges after normalization.
        rescale_actions: the agent acts in [-1, 1] (``ActionRescale``).
        render: make env 0 renderable (needed for videos).
        render_size: (width, height) of frames.
        video_dir: when set, record env 0's episodes as mp4 files there (implies ``render``).
        video_prefix: file-name prefix of the videos.
        max_episode_steps: override the task's time limit.
        env_kwargs: passed to the backend's constructor (``gymnasium.make`` for ``gym:``).
        action_chunk: env actions per agent step (``genpol.envs.chunking``): the agent acts with
            ``[chunk * A]`` vectors, rewards are summed, and ``info["env_steps"]`` counts env steps.
        action_bounds: ``(low, high)`` that the agent's [-1, 1] maps to, instead of the env's own
            bounds (e.g. an offline dataset's action range); same shape as the env's bounds.
        obs_bounds: ``(low, high)`` mapped to [-1, 1] by a fixed ``ObservationScaler`` (an offline
            dataset's observation range); exclusive with ``normalize_obs``.
        workers: simulator processes, this one included (``genpol.envs.subproc``); above 1 the
            ``gym:``/``dmc:`` envs are split into that many slices stepped at the same time, which
            pays on machines with spare cores. The wrappers stay in this process. Scripts must
            then create envs under ``if __name__ == "__main__":`` (workers start with ``spawn``).
        imports: modules to import before the env is built, here and in every env worker (your
            package, when importing it registers the gymnasium id or defines the backend).
        step_groups: 1 or more: fixed groups of envs that step separately (``send_group`` /
            ``recv_group``, see ``genpol.envs.core``), for collection that computes while envs simulate;
            the ``envpool:`` backend only, with ``workers=1``. 0: ``step`` only.
        dims: the ``(obs_dim, act_dim)`` the caller needs (a saved policy's): a simulator that now has others
            is closed and refused with ``EnvDimsError`` before the wrappers, whose saved bounds and statistics
            would fail on it with a shape error that names neither.
    """
    if obs_bounds is not None and normalize_obs:
        raise ValueError("obs_bounds (fixed scaling) and normalize_obs (running statistics) exclude each other")
    # make_backend checks them too; here as well for workers > 1, whose worker-count check read num_envs first
    check_counts(env_id, num_envs, max_episode_steps)
    backend_kwargs: dict[str, Any] = dict(
        num_envs=num_envs, device=device, seed=seed, render=render or video_dir is not None,
        render_size=render_size, max_episode_steps=max_episode_steps, env_kwargs=env_kwargs,
        **({"action_chunk": action_chunk} if action_chunk != 1 else {}),
        **({"step_groups": step_groups} if step_groups else {}),
    )
    if step_groups and (workers != 1 or backend_prefix(env_id) != "envpool"):
        raise EnvError(f"{env_id}: step_groups={step_groups} needs the envpool: backend and workers=1")
    if workers == 1:
        env = make_backend(env_id, imports=imports, **backend_kwargs)
    else:
        from .subproc import SubprocVectorEnv

        env = SubprocVectorEnv(env_id, workers=workers, imports=imports, **backend_kwargs)
    if dims is not None and (env.obs_dim, env.act_dim) != tuple(dims):
        found = (env.obs_dim, env.act_dim)
        env.close()
        raise EnvDimsError(f"{env_id} now has obs/act dims {found[0]}/{found[1]}, {dims[0]}/{dims[1]} were asked for")
    backend = env
    try:  # a wrapper that refuses its arguments (bounds of another shape) closes the simulator it was given
        if rescale_actions:
            env = ActionRescale(env, bounds=action_bounds)
        env = EpisodeStats(env)
        if video_dir is not None:
            # fps left to the recorder: real time, the backend's render_fps over its action chunk (a frame per agent
            # step, which runs action_chunk control steps)
            env = VideoRecorder(env, video_dir, prefix=video_prefix)
        if normalize_obs:
            env = ObservationNormalizer(env, clip=obs_clip)
        if obs_bounds is not None:
            env = ObservationScaler(env, *obs_bounds)
        if normalize_reward:
            env = RewardScaler(env, gamma=gamma, clip=reward_clip)
    except BaseException:
        backend.close()
        raise
    return env
