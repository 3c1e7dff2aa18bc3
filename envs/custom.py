"""Your own batched simulator as a backend: ``custom:<module>:<factory>``, e.g. ``custom:my_pkg.sim:make_env``.

A batched simulator (your own torch code, or ManiSkill, Isaac Lab, Genesis behind a thin class)
joins genpol without an edit to genpol: a function in your package builds it, genpol imports the
module and calls the function. What the function must return: an object that speaks the protocol
of ``genpol.envs.core`` (subclassing ``genpol.envs.VectorEnv`` is the easy way, duck typing also works):

* attributes ``num_envs``, ``device`` (``torch.device``), ``obs_dim``, ``act_dim``,
  ``action_low`` / ``action_high`` (``[A]`` float tensors), optionally ``max_episode_steps`` and
  ``render_fps`` (control steps per second of simulated time, ``1 / dt``: videos play at it, divided by the
  action chunk, so that they run in real time; without it they play at 30 steps a second);
* ``reset(seed) -> obs [N, D]`` (float32, on ``device``; the same seed gives the same episodes);
* ``step(actions [N, A]) -> (obs [N, D], reward [N] float32, terminated [N] bool, truncated [N] bool,
  info)``, episodes auto-resetting inside ``step``, with ``info["final_obs"] [N, D]`` holding the true
  last observation where an episode ended (the returned one elsewhere). ``EpisodeStats`` adds the
  episode statistics, unless the env sets ``provides_episode_stats = True`` and fills
  ``info["episode_return"]`` / ``["episode_length"]`` (``[K]``, the K envs that ended, at every step) itself;
  an env that defines success sets ``reports_success = True`` and fills ``info["success"] [N]`` bool;
  an env built with ``action_chunk`` executes that many steps per action and reports them in
  ``info["env_steps"] [N]`` int64 (both checked at every step);
* optionally ``state_dict()`` / ``load_state_dict(state)`` (tensors, numbers, strings, lists and
  dicts only: checkpoints load with ``torch.load(weights_only=True)``) for an exact resume;
  ``render() -> [H, W, 3] uint8`` of env 0 for videos (with, where env 0's episode ended in a step,
  ``info["final_frame"]``: its last state drawn before the auto-reset, else videos end one frame early);
  ``close()``.

The factory is called as ``factory(num_envs=N, device=torch.device, seed=int | None, **env.kwargs)``;
``max_episode_steps``, ``render`` / ``render_size`` and ``action_chunk`` are passed only when the
run uses them, and a factory that does not take one fails naming the parameter and the setting.

Without ``state_dict`` a run still checkpoints and resumes, inexactly: the resumed env resets
every env (the seed derived from the saved step count, so a re-run resumes the same way), the
episode statistics and the reward scaler's running return start again with the new episodes, and
the first action is chosen from the new episodes' first observations. A warning says so at the resume. ``genpol.envs.testing.check_vector_env`` checks an implementation rule by rule.
Env workers (``env.workers``) do not apply: a batched backend steps its envs itself.
"""

from __future__ import annotations

import difflib
import inspect
import warnings
from typing import Any, Callable

import numpy as np
import torch

from .core import DEFAULT_RENDER_FPS, EnvError, StepResult, VectorEnv, kwargs_not_taken, saves_state
from .imports import import_user_module

REQUIRED_ATTRIBUTES = ("num_envs", "device", "obs_dim", "act_dim", "action_low", "action_high", "reset", "step")
RESERVED_KWARGS = ("num_envs", "device", "seed", "max_episode_steps", "render", "render_size", "action_chunk")


def resolve_factory(name: str) -> Callable[..., Any]:
    """``"<module>:<attribute>"`` -> the callable, with the module imported; ``EnvError`` naming
    what is missing (the id's form, the module, the attribute)."""
    env_id = f"custom:{name}"
    module_name, sep, attribute = name.partition(":")
    if not sep or not module_name or not attribute:
        raise EnvError(f"{env_id}: a custom env id is 'custom:<module>:<factory>', e.g. custom:my_pkg.sim:make_env "
                       "(config: env=custom env.id=my_pkg.sim:make_env)")
    module = import_user_module(module_name, env_id)
    target: Any = module
    for part in attribute.split("."):
        if not hasattr(target, part):
            defined = sorted(key for key, value in vars(module).items()  # its own, not what it imported
                             if callable(value) and not key.startswith("_") and getattr(value, "__module__", None) == module_name)
            close = difflib.get_close_matches(attribute, defined, n=1)
            hint = f" Did you mean custom:{module_name}:{close[0]}?" if close else ""
            raise EnvError(f"{env_id}: module '{module_name}' has no '{attribute}'; the callables it defines: "
                           f"{', '.join(defined) or 'none'}.{hint}")
        target = getattr(target, part)
    if not callable(target):
        raise EnvError(f"{env_id}: '{attribute}' in module '{module_name}' is a {type(target).__name__}, not a "
                       "callable that builds a vector env")
    return target


def _accepts(factory: Callable[..., Any], parameter: str) -> bool:
    try:
        parameters = inspect.signature(factory).parameters.values()
    except (TypeError, ValueError):  # builtins without a signature: let the call decide
        return True
    return any(p.name == parameter or p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters)


def _check_call(factory: Callable[..., Any], arguments: dict[str, Any], env_id: str,
                env_kwargs: dict[str, Any]) -> None:
    """``EnvError`` where the factory's signature cannot take ``arguments`` (a misspelt ``env.kwargs`` key, or a
    factory without ``num_envs``, ``device`` or ``seed``): a TypeError from the call itself was a traceback (exit
    1), and one raised inside the factory is its own bug, not ours to reword, so the signature is checked first."""
    try:
        signature = inspect.signature(factory)
    except (TypeError, ValueError):  # builtins without a signature: let the call decide
        return
    try:
        signature.bind(**arguments)
    except TypeError as error:
        parameters = signature.parameters
        takes_any = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters.values())
        unknown = set() if takes_any else set(arguments) - set(parameters)
        if unknown and unknown <= set(env_kwargs):  # only the user's keys are not taken: a misspelt one
            raise kwargs_not_taken(env_id, env_kwargs, error) from None
        missing = [name for name, p in parameters.items() if p.default is inspect.Parameter.empty
                   and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY) and name not in arguments]
        if not unknown and missing:  # a task argument the factory requires: the user's to give
            raise EnvError(f"{env_id}: the factory requires {missing}, which genpol does not pass: set them as "
                           f"env.kwargs ({', '.join(f'+env.kwargs.{name}=...' for name in missing)})") from None
        raise EnvError(f"{env_id}: the factory cannot be called as genpol calls it, with {sorted(arguments)}: {error} "
                       "(it must take num_envs, device and seed as keywords: the protocol is in envs/custom.py)"
                       ) from None


def make_custom(name: str, num_envs: int = 1, device: str | torch.device = "cpu", seed: int | None = None,
                render: bool = False, render_size: tuple[int, int] = (256, 256), max_episode_steps: int | None = None,
                env_kwargs: dict[str, Any] | None = None, action_chunk: int = 1) -> CustomVectorEnv:
    """Import ``<module>``, call ``<factory>`` (see the module docstring) and check what it returns."""
    env_id = f"custom:{name}"
    factory = resolve_factory(name)
    env_kwargs = dict(env_kwargs or {})
    reserved = sorted(set(env_kwargs) & set(RESERVED_KWARGS))
    if reserved:
        raise EnvError(f"{env_id}: env.kwargs may not set {reserved}: genpol passes them from their own settings "
                       "(env.num_envs, device, seed, env.max_episode_steps, ...)")
    arguments: dict[str, Any] = {"num_envs": num_envs, "device": torch.device(device), "seed": seed, **env_kwargs}
    optional = {  # passed only when used: (value, the setting that asks for it)
        "max_episode_steps": (max_episode_steps, "env.max_episode_steps", max_episode_steps is not None),
        "render": (True, "a video (pipeline.video / evaluate video=true)", render),
        "render_size": (tuple(render_size), "a video (env.render_width/render_height)", render),
        "action_chunk": (action_chunk, "a chunked policy head (act_steps)", action_chunk != 1),
    }
    for parameter, (value, setting, used) in optional.items():
        if not used:
            continue
        if not _accepts(factory, parameter):
            raise EnvError(f"{env_id}: the factory takes no '{parameter}' argument, which {setting} needs; add the "
                           f"parameter to {getattr(factory, '__name__', 'the factory')}, or leave the setting off")
        arguments[parameter] = value
    _check_call(factory, arguments, env_id, env_kwargs)
    try:
        env = factory(**arguments)
    except TypeError as error:  # a factory that forwards **env.kwargs to a class that does not take one of them
        if not any(f"'{key}'" in str(error) for key in env_kwargs):
            raise  # the factory's own bug: its traceback, unreworded
        raise kwargs_not_taken(env_id, env_kwargs, error) from error
    return CustomVectorEnv(env, env_id, num_envs, torch.device(device), seed, action_chunk)


def step_problems(result: Any, num_envs: int, obs_dim: int, device: torch.device,
                  episode_stats: bool = False, reports_success: bool = False, chunked: bool = False) -> list[str]:
    """What is wrong with one ``step`` result's structure (types, shapes, dtypes, devices), in words;
    ``episode_stats``: the env provides ``info["episode_return"]`` / ``["episode_length"]`` at every step;
    ``reports_success``: it fills ``info["success"]`` ``[N]`` bool; ``chunked`` (``action_chunk > 1``): it fills
    ``info["env_steps"]`` ``[N]`` int64. Unchecked, a float success flag failed deep in the episode statistics
    and a chunked env without ``env_steps`` counted its episode lengths in chunks, silently.

    Metadata only (no values are read), so a GPU simulator is not synchronized by the check.
    """
    if not isinstance(result, tuple) or len(result) != 5:
        return [f"step() must return a 5-tuple (obs, reward, terminated, truncated, info), got {type(result).__name__}"
                + (f" of length {len(result)}" if isinstance(result, (tuple, list)) else "")]
    obs, reward, terminated, truncated, info = result
    expected = {"obs": (obs, (num_envs, obs_dim), torch.float32), "reward": (reward, (num_envs,), torch.float32),
                "terminated": (terminated, (num_envs,), torch.bool), "truncated": (truncated, (num_envs,), torch.bool)}
    problems = []
    if not isinstance(info, dict):
        problems.append(f"info must be a dict, got {type(info).__name__}")
    elif "final_obs" not in info:
        problems.append("info has no 'final_obs' (the true last observation of episodes that ended, [N, D]); "
                        f"its keys: {sorted(info)}")
    else:
        expected["info['final_obs']"] = (info["final_obs"], (num_envs, obs_dim), torch.float32)
        missing = [key for key in ("episode_return", "episode_length") if key not in info]
        if episode_stats and missing:
            problems.append(f"provides_episode_stats is set, but info has no {' / '.join(missing)} (at every step: "
                            f"[K] for the K envs whose episode ended, [0] when none did); its keys: {sorted(info)}")
        for needed, key, dtype, why in ((reports_success, "success", torch.bool, "reports_success is set"),
                                        (chunked, "env_steps", torch.int64, "the env executes action chunks")):
            if needed and key not in info:
                problems.append(f"{why}, but info has no '{key}' ([N] {dtype} at every step); its keys: "
                                f"{sorted(info)}")
            elif needed:
                expected[f"info['{key}']"] = (info[key], (num_envs,), dtype)
    for name, (value, shape, dtype) in expected.items():
        if not isinstance(value, torch.Tensor):
            problems.append(f"{name} must be a torch.Tensor, got {type(value).__name__}")
        elif tuple(value.shape) != shape or value.dtype != dtype or value.device != device:
            problems.append(f"{name} must be {list(shape)} {dtype} on {device}, got {list(value.shape)} "
                            f"{value.dtype} on {value.device}")
    return problems


def _same_device(requested: torch.device, actual: torch.device) -> bool:
    return requested.type == actual.type and (requested.index is None or requested.index == actual.index)


class CustomVectorEnv(VectorEnv):
    """The checked face of a user's batched env: its metadata checked once, every step's structure
    checked (shapes and dtypes, not values), and ``state_dict`` made optional (module docstring).

    ``self.env`` is the user's object, so ``env.find(MySim)`` still reaches it.
    """

    def __init__(self, env: Any, env_id: str, num_envs: int, device: torch.device, seed: int | None = None,
                 action_chunk: int = 1):
        missing = [name for name in REQUIRED_ATTRIBUTES if not hasattr(env, name)]
        if missing:
            hint = ("; a single gymnasium env goes through env=gym env.id=<module>:<id> instead"
                    if hasattr(env, "observation_space") and not hasattr(env, "num_envs") else "")
            raise EnvError(f"{env_id} returned a {type(env).__module__}.{type(env).__qualname__}, not a vector env: "
                           f"it lacks {', '.join(missing)} (the protocol is in envs/custom.py){hint}")
        self.env = env
        self.env_id = env_id
        self.num_envs = num_envs
        self.device = torch.device(env.device)
        self.obs_dim, self.act_dim = env.obs_dim, env.act_dim
        self.max_episode_steps = getattr(env, "max_episode_steps", None)
        render_fps = getattr(env, "render_fps", DEFAULT_RENDER_FPS)
        self.provides_episode_stats = bool(getattr(env, "provides_episode_stats", False))
        self.reports_success = bool(getattr(env, "reports_success", False))
        # the chunk the factory was asked for: what the saved policy's spec records and its env is built with
        self.action_chunk = getattr(env, "action_chunk", action_chunk)
        problems = []
        if env.num_envs != num_envs:
            problems.append(f"num_envs is {env.num_envs}, {num_envs} were asked for")
        if not _same_device(device, self.device):
            problems.append(f"device is {self.device}, {device} was asked for")
        for name in ("obs_dim", "act_dim"):
            value = getattr(env, name)
            if not isinstance(value, (int, np.integer)) or isinstance(value, bool) or value < 1:
                problems.append(f"{name} must be an int >= 1, got {value!r}")
        # checked here, not where the first video opens its file: a training's is its final evaluation's
        if (not isinstance(render_fps, (int, float, np.number)) or isinstance(render_fps, bool)
                or not 0 < float(render_fps) < float("inf")):
            problems.append(f"render_fps must be a positive number (control steps per second), got {render_fps!r}")
        for name in ("action_low", "action_high"):
            bound = getattr(env, name)
            if not isinstance(bound, torch.Tensor) or tuple(bound.shape) != (env.act_dim,) or not bound.is_floating_point():
                problems.append(f"{name} must be a float tensor [act_dim] = [{env.act_dim}], got "
                                f"{list(bound.shape) if isinstance(bound, torch.Tensor) else type(bound).__name__}")
        if not problems and not bool((env.action_low < env.action_high).all()):  # the rescaling would mirror actions
            bad = int((env.action_low >= env.action_high).nonzero()[0])
            problems.append(f"action_low must be below action_high in every dimension, got "
                            f"{float(env.action_low[bad])} >= {float(env.action_high[bad])} in dimension {bad}")
        if problems:
            raise EnvError(f"{env_id}: {'; '.join(problems)}")
        # a numpy integer passed the check, then failed the checkpoint's policy.json after the whole run
        self.obs_dim, self.act_dim = int(env.obs_dim), int(env.act_dim)
        self.render_fps = float(render_fps)
        self.action_low = env.action_low.to(self.device, torch.float32)
        self.action_high = env.action_high.to(self.device, torch.float32)
        self.exact_resume = saves_state(env)
        self._last_seed = seed  # of the latest seeded reset (the factory's seed until then)
        self._steps_since_reset = 0

    def reset(self, seed: int | None = None) -> torch.Tensor:
        obs = self.env.reset(seed)
        shape = (self.num_envs, self.obs_dim)
        if (not isinstance(obs, torch.Tensor) or tuple(obs.shape) != shape or obs.dtype != torch.float32
                or obs.device != self.device):
            got = (f"{list(obs.shape)} {obs.dtype} on {obs.device}" if isinstance(obs, torch.Tensor)
                   else type(obs).__name__)
            raise EnvError(f"{self.env_id}: reset() must return obs {list(shape)} torch.float32 on {self.device}, "
                           f"got {got}")
        self._last_seed = seed if seed is not None else self._last_seed
        self._steps_since_reset = 0
        return obs

    def step(self, actions: torch.Tensor) -> StepResult:
        self.check_actions(actions)
        if actions.device.type == "cpu":  # on a GPU the check would cost a sync at every step
            self.check_finite_actions(actions.detach().numpy())
        result = self.env.step(actions)
        problems = step_problems(result, self.num_envs, self.obs_dim, self.device, self.provides_episode_stats,
                                 self.reports_success, self.action_chunk > 1)
        if problems:
            raise EnvError(f"{self.env_id}: {'; '.join(problems)}")
        self._steps_since_reset += 1
        return result

    def render(self) -> np.ndarray | None:
        render = getattr(self.env, "render", None)
        return None if render is None else render()

    def close(self) -> None:
        close = getattr(self.env, "close", None)
        if close is not None:
            close()

    def state_dict(self) -> dict[str, Any]:
        if self.exact_resume:
            return {"exact": True, "state": self.env.state_dict()}
        return {"exact": False, "reset_seed": (self._last_seed or 0) + self._steps_since_reset}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if state["exact"]:
            if not self.exact_resume:
                raise EnvError(f"{self.env_id}: the saved env state is exact, but this env has no load_state_dict")
            self.env.load_state_dict(state["state"])
            return
        warnings.warn(f"{self.env_id}: the env has no state_dict(), so the resumed run cannot continue its episodes: "
                      f"every env is reset to a new episode (seed {state['reset_seed']}). Implement "
                      "state_dict()/load_state_dict() for an exact resume.", RuntimeWarning, stacklevel=2)
        self.reset(state["reset_seed"])
