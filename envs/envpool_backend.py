"""EnvPool backend: ``envpool:<task>``, e.g. ``envpool:HalfCheetah-v5`` or ``envpool:CheetahRun-v1``.

EnvPool steps a batch of C++ MuJoCo (gymnasium v5 and dm_control) tasks on its own thread pool, with
no Python loop per env and no worker processes.

* Episode ends, the true final observation and auto-reset: EnvPool resets an env on the step
  *after* its episode ended (that step ignores the action and returns the first observation with
  reward 0). genpol's protocol resets in the same step and hands the last observation back in
  ``info["final_obs"]``, so after a step in which some envs ended this backend steps just those envs
  once more (``step(actions, env_id)``, EnvPool's partial step) to collect their first observation.
  The extra call happens once per finished episode; termination and truncation keep the task's
  own meaning (``max_episode_steps`` truncates), with one exception: an episode that terminates on
  its time limit's step (Hopper falling at step 1000) comes back truncated only, as EnvPool's
  gymnasium API reports it (``terminated = done & ~truncated``), where gymnasium's TimeLimit flags
  both. EnvPool cannot tell the two apart: its raw state (``done``, ``trunc``, ``discount`` 0,
  ``step_type`` LAST) and its dm API are the same for a fall on the limit's step and for a plain
  time-out (measured with envpool 1.2.5, Hopper-v5). Off-policy learners then bootstrap that one
  transition from the fallen state; ``env=gym`` flags it terminated.
* Observations: float64 in EnvPool, float32 here; dm_control's dict observations are flattened in
  the order of the observation space's keys (``observation_keys``).
* Seeding: env i of ``reset(seed)`` is seeded with ``seed + i`` (EnvPool's own rule). EnvPool has
  no re-seeding reset, so a ``reset`` with a seed rebuilds the pool.
* Threads: ``env.kwargs.num_threads`` (EnvPool's default 0 uses one thread per env up to the cores).
* Grouped stepping (``step_groups >= 1``, ``env.step_groups``; the default 0 has ``step`` only):
  one EnvPool per group of ``num_envs / step_groups`` envs, pool g seeded with ``seed + g * size`` so
  that env i still gets ``seed + i``; ``send_group`` / ``recv_group`` are EnvPool's own ``send`` /
  ``recv`` on that pool, so one group simulates on its pool's threads while this thread computes
  another group's actions.
  A positive ``num_threads`` is the total, shared out evenly (at least 1 per pool); with EnvPool's
  default (0) every pool sizes itself to the cores, so G pools start G times as many threads: set
  ``+env.kwargs.num_threads`` with groups (``ppo_fast_envpool`` sets 2). Not EnvPool's
  asynchronous mode (``batch_size < num_envs``, ``recv`` returns whichever envs finished first):
  fixed groups keep every env's trajectory a function of its seed and actions alone, never of timing.
* Resume: EnvPool exposes no simulator state, so a run resumes with fresh episodes (a warning says
  so), not bit-identically; everything else in the checkpoint (policy, optimizer, RNG, counters,
  normalizers) restores exactly.
* Rendering (env 0): gymnasium's MuJoCo locomotion tasks are drawn from a gymnasium twin that takes
  env 0's pose, with the floor following the robot (``genpol.envs.envpool_render``: EnvPool's own frames lose
  HalfCheetah's floor after ~2 s). Other tasks use EnvPool's own renderer, which needs an OpenGL
  context made current in this thread first; genpol makes one with MuJoCo's EGL or OSMesa binding
  (``MUJOCO_GL``).
"""

from __future__ import annotations

import atexit
import difflib
import os
import warnings
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .core import DEFAULT_RENDER_FPS, EnvError, StepResult, VectorEnv, concat_steps
from .envpool_render import TwinRenderer

_GL_CONTEXTS: list[Any] = []  # kept alive for the process: EnvPool renders into the current context


def _make_gl_context_current(width: int, height: int) -> None:
    """Make genpol's EnvPool context current in this thread, creating it once. Every render call
    needs this: MuJoCo's own renderers (videos of other envs in the same process) make their
    contexts current, and EnvPool would otherwise draw into one of those, or a freed one."""
    if _GL_CONTEXTS:
        _GL_CONTEXTS[0].make_current()
        return
    backend = os.environ.get("MUJOCO_GL", "egl")
    if backend == "egl":
        from mujoco.egl import GLContext
    elif backend == "osmesa":
        from mujoco.osmesa import GLContext
    else:
        from mujoco.glfw import GLContext
    context = GLContext(width, height)
    context.make_current()
    _GL_CONTEXTS.append(context)
    atexit.register(context.free)  # before interpreter teardown, where its __del__ would fail noisily


def control_fps(name: str, config: dict[str, Any]) -> float:
    """Control steps per second of EnvPool task ``name`` made with ``config`` (its pool's): ``1 / (timestep *
    frame_skip)``. EnvPool reports no ``dt`` or ``render_fps``, but its config holds ``frame_skip`` (dm_control's
    substeps too: 10 for WalkerWalk, the suite's 0.025 s control step over 0.0025 s) and where its models are. A
    gymnasium task's model is ``mujoco/assets_gym/<xml_file>``, read from its ``<stem>_envpool.xml`` copy where
    there is one (EnvPool 1.2.5 loads that; ``pusher_v5.xml`` exists only as it);
    a dm_control task's is ``mujoco/assets_dmc/<domain>.xml``, its id the domain in CamelCase followed by the task.
    Other families (robotics, myosuite, metaworld, classic control) fall back to ``DEFAULT_RENDER_FPS``."""
    from envpool.registration import registry

    family = registry.specs[name][0] if name in registry.specs else None
    assets = Path(config.get("base_path", "")) / "mujoco"
    candidates: list[Path] = []
    if family == "envpool.mujoco.gym" and "xml_file" in config:
        model_file = assets / "assets_gym" / config["xml_file"]  # an absolute xml_file stays itself
        candidates = [model_file.with_name(f"{model_file.stem}_envpool.xml"), model_file]
    elif family == "envpool.mujoco.dmc":
        # the longest domain that starts the id: HumanoidCMURun-v1 is humanoid_CMU's, not humanoid's
        domains = sorted((path.stem for path in (assets / "assets_dmc").glob("*.xml")), key=len, reverse=True)
        domain = next((stem for stem in domains if name.lower().startswith(stem.replace("_", "").lower())), None)
        candidates = [] if domain is None else [assets / "assets_dmc" / f"{domain}.xml"]
    model_file = next((path for path in candidates if path.is_file()), None)
    frame_skip = config.get("frame_skip")
    timestep = None if model_file is None else _model_timestep(model_file)
    if timestep is None or not isinstance(frame_skip, int) or frame_skip < 1:
        return DEFAULT_RENDER_FPS
    return 1.0 / (timestep * frame_skip)


def _model_timestep(model_file: Path) -> float | None:
    """The ``<option timestep>`` of a MuJoCo model file, MuJoCo's default 0.002 s where it sets none; None where the
    file does not parse. Read from the text, not compiled: EnvPool's models are for the MuJoCo it bundles, and the
    one genpol installs refuses some (Hopper's global coordinates, Swimmer's ``option collision``)."""
    import xml.etree.ElementTree as ElementTree

    try:
        root = ElementTree.parse(model_file).getroot()
    except (ElementTree.ParseError, OSError):
        return None
    stated = [float(option.get("timestep")) for option in root.iter("option") if option.get("timestep")]
    return stated[-1] if stated else 0.002


class EnvPoolVectorEnv(VectorEnv):
    """``num_envs`` copies of an EnvPool task, stepped by EnvPool's thread pool.

    Args:
        name: the EnvPool task id (``envpool:`` prefix stripped), e.g. ``"Hopper-v5"``.
        num_envs, device, seed: as for every backend; env i is seeded with ``seed + i``.
        render: allow ``render()`` (env 0); render_size: (width, height).
        max_episode_steps: override the task's time limit.
        env_kwargs: extra keyword arguments of ``envpool.make`` (e.g. ``num_threads``).
        action_chunk: must be 1 (chunks are not supported by this backend yet).
        step_groups: groups of envs that step separately (``send_group`` / ``recv_group``), one
            EnvPool each; must divide ``num_envs``. 0: one pool, ``step`` only.
    """

    exact_resume = False  # state_dict() holds a reset seed, not the simulator state (envs.testing reads this)

    def __init__(self, name: str, num_envs: int = 1, device: str | torch.device = "cpu", seed: int | None = None,
                 render: bool = False, render_size: tuple[int, int] = (256, 256),
                 max_episode_steps: int | None = None, env_kwargs: dict[str, Any] | None = None,
                 action_chunk: int = 1, step_groups: int = 0):
        import envpool

        self.env_id = f"envpool:{name}"
        known = envpool.list_all_envs()
        if name not in known:
            close = difflib.get_close_matches(name, known, n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join('envpool:' + c for c in close)}?" if close else ""
            raise EnvError(f"unknown EnvPool task '{self.env_id}'.{hint}")
        if action_chunk != 1:
            raise EnvError(f"{self.env_id}: action chunks are not supported by the EnvPool backend yet "
                           "(use policy.act_steps=1, or the gym/dmc backends)")
        if step_groups < 0 or (step_groups and num_envs % step_groups):
            raise EnvError(f"{self.env_id}: step_groups={step_groups} must be 0 or a divisor of num_envs={num_envs}")
        self.num_envs = num_envs
        self.step_groups = step_groups
        self._num_pools = max(step_groups, 1)
        self._group_size = num_envs // self._num_pools
        self._in_flight = [False] * self._num_pools
        self.device = torch.device(device)
        self._make_kwargs: dict[str, Any] = dict(env_kwargs or {})
        if step_groups > 1 and self._make_kwargs.get("num_threads", 0) > 0:  # the total, shared by the pools
            self._make_kwargs["num_threads"] = max(1, self._make_kwargs["num_threads"] // step_groups)
        if max_episode_steps is not None:
            self._make_kwargs["max_episode_steps"] = max_episode_steps
        self._render_size = render_size
        self._render = render
        self._pending_seed = 0 if seed is None else seed
        self._last_seed, self._steps_since_reset = self._pending_seed, 0
        self._pools = self._build(self._pending_seed)
        self._pool = self._pools[0]  # the one pool of an ungrouped env; group 0's (env 0, rendering) otherwise
        self._twin: TwinRenderer | None = None
        self._pose0: np.ndarray | None = None  # env 0's qpos for the twin, kept current by reset and step
        if render:
            info_keys = {key.partition(":")[2] for key in self._pool.spec._state_keys if key.startswith("info:")}
            obs_dim = int(np.prod(self._pool.observation_space.shape or (0,)))
            self._twin = TwinRenderer.for_task(name, info_keys, obs_dim, *render_size)
            if self._twin is None:  # EnvPool draws the frames itself
                self._make_kwargs.update(render_mode="rgb_array", render_width=render_size[0],
                                         render_height=render_size[1])
                for pool in self._pools:
                    pool.close()
                self._pools = self._build(self._pending_seed)
                self._pool = self._pools[0]
        space = self._pool.observation_space
        self.observation_keys: list[str] | None = list(space.spaces) if hasattr(space, "spaces") else None
        shapes = [space[key].shape for key in self.observation_keys] if self.observation_keys else [space.shape]
        if self.observation_keys:
            self.observation_layout = [(key, tuple(shape)) for key, shape in zip(self.observation_keys, shapes)]
        self.obs_dim = int(sum(np.prod(shape) for shape in shapes))
        self.act_dim = int(self._pool.action_space.shape[0])
        self.action_low = torch.as_tensor(self._pool.action_space.low, dtype=torch.float32, device=self.device)
        self.action_high = torch.as_tensor(self._pool.action_space.high, dtype=torch.float32, device=self.device)
        self.max_episode_steps = int(self._pool.config["max_episode_steps"])
        self.render_fps = control_fps(name, self._pool.config)

    def _build(self, seed: int) -> list[Any]:
        """One pool per group; pool g's env j is env ``g * size + j``, seeded ``seed + g * size + j``."""
        import envpool

        try:
            return [envpool.make(self.env_id.partition(":")[2], env_type="gymnasium", num_envs=self._group_size,
                                 seed=seed + group * self._group_size, **self._make_kwargs)
                    for group in range(self._num_pools)]
        except (TypeError, ValueError, RuntimeError) as error:
            raise EnvError(f"{self.env_id}: envpool.make rejected {self._make_kwargs} ({error})") from None

    def _flat(self, obs: Any) -> np.ndarray:
        """EnvPool's observation (an array, or a dict of ``[n, ...]`` arrays) -> ``[n, obs_dim]``."""
        if self.observation_keys is None:
            return np.asarray(obs).reshape(len(obs), -1)
        return np.concatenate([np.asarray(obs[key]).reshape(len(obs[key]), -1) for key in self.observation_keys],
                              axis=1)

    def _tensor(self, array: np.ndarray, dtype: torch.dtype = torch.float32) -> torch.Tensor:
        return torch.as_tensor(array, device=self.device).to(dtype)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        seed = self._pending_seed if seed is None else seed
        if seed is None and any(self._in_flight):  # an unanswered send would hand its step to the next recv
            raise EnvError(f"{self.env_id}: reset() while groups {np.flatnonzero(self._in_flight).tolist()} are "
                           "still stepping; recv_group them first, or reset with a seed (which rebuilds the pools)")
        self._pending_seed = None
        if seed is not None:
            for pool in self._pools:
                pool.close()
            self._pools = self._build(seed)
            self._pool = self._pools[0]
            self._last_seed = seed
        self._steps_since_reset = 0
        self._in_flight = [False] * self._num_pools
        groups_obs = []
        for group, pool in enumerate(self._pools):
            obs, info = pool.reset()
            order = np.argsort(info["env_id"])
            groups_obs.append(self._flat(obs)[order])
            if group == 0:
                self._track_pose0(groups_obs[0], info, order)
        return self._tensor(np.concatenate(groups_obs))

    def step(self, actions: torch.Tensor) -> StepResult:
        self.check_actions(actions)
        if any(self._in_flight):
            raise EnvError(f"{self.env_id}: step() while groups {np.flatnonzero(self._in_flight).tolist()} are still "
                           "stepping; recv_group them first")
        if self._num_pools == 1:
            self._send(0, actions)
            return self._receive(0)
        # every group's actions before any is sent: a group refused after others were sent left them in flight
        self.check_finite_actions(actions.detach().cpu().numpy())
        for group in range(self.step_groups):
            self.send_group(group, actions[self.group_slice(group)])
        return concat_steps([self.recv_group(group) for group in range(self.step_groups)])

    def send_group(self, group: int, actions: torch.Tensor) -> None:
        self.group_slice(group)  # checks the range
        if self._in_flight[group]:
            raise EnvError(f"{self.env_id}: send_group({group}) while its previous step is still running; "
                           "recv_group first")
        self.check_actions(actions, self._group_size)
        self._send(group, actions)

    def recv_group(self, group: int) -> StepResult:
        self.group_slice(group)
        if not self._in_flight[group]:
            raise EnvError(f"{self.env_id}: recv_group({group}) without a send_group({group}) before it")
        return self._receive(group)

    def _send(self, group: int, actions: torch.Tensor) -> None:
        action = actions.detach().to("cpu", torch.float64).numpy()
        self.check_finite_actions(action, group * self._group_size)
        self._pools[group].send(action, np.arange(self._group_size, dtype=np.int32))
        self._in_flight[group] = True

    def _receive(self, group: int) -> StepResult:
        """Wait for the pool of ``group``; its envs' step tuple with the same-step auto-reset."""
        pool = self._pools[group]
        obs, reward, terminated, truncated, info = pool.recv()
        self._in_flight[group] = False
        order = np.argsort(info["env_id"])  # results come back by env id; put them in env order
        obs = self._flat(obs)[order]
        reward, terminated, truncated = reward[order], terminated[order], truncated[order]
        if group == self._num_pools - 1:
            self._steps_since_reset += 1
        ended = terminated | truncated
        final_obs = obs.copy()
        step_info = {"final_obs": self._tensor(final_obs)}
        if group == 0:  # env 0, the one videos show, is group 0's first
            self._track_pose0(obs, info, order)
            if self._render and ended[0]:  # its last state, drawn before the reset step below (envs.core)
                step_info["final_frame"] = self.render()
        if ended.any():  # EnvPool resets these on their next step: take that step now, for just them
            ids = np.flatnonzero(ended).astype(np.int32)
            first, _, _, _, reset_info = pool.step(np.zeros((len(ids), self.act_dim)), ids)
            obs[reset_info["env_id"]] = self._flat(first)
            if group == 0 and ended[0]:
                reset_order = np.argsort(reset_info["env_id"])
                self._track_pose0(self._flat(first)[reset_order], reset_info, reset_order)
        return (self._tensor(obs), self._tensor(reward), self._tensor(terminated, torch.bool),
                self._tensor(truncated, torch.bool), step_info)

    def _track_pose0(self, obs: np.ndarray, info: dict[str, Any], order: np.ndarray) -> None:
        """Keep env 0's pose for the twin renderer: ``obs`` rows are in env order, ``info``'s in
        EnvPool's (``order`` sorts them); env 0 is the first of ``order``."""
        if self._twin is not None:
            positions = {key: np.asarray(info[key])[order] for key in self._twin.position_keys}
            self._pose0 = self._twin.pose(obs, positions, 0)

    def render(self) -> np.ndarray | None:
        if not self._render:
            return None
        if self._twin is not None:
            if self._pose0 is None:
                raise EnvError(f"{self.env_id}: render() before reset(): there is no pose to draw yet")
            return self._twin.render(self._pose0)
        _make_gl_context_current(*self._render_size)
        return np.asarray(self._pool.render(env_ids=[0]))[0]

    def state_dict(self) -> dict[str, Any]:
        """No simulator state (EnvPool exposes none): the seed a resumed run resets with, distinct
        from the run's first seed and a function of the step count, so that resuming is repeatable."""
        return {"exact": False, "reset_seed": self._last_seed + self._steps_since_reset}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        warnings.warn(f"{self.env_id}: EnvPool exposes no simulator state, so the resumed run cannot continue its "
                      f"episodes: every env is reset (seed {state['reset_seed']}); use env=gym for an exact resume.",
                      RuntimeWarning, stacklevel=2)
        self.reset(state["reset_seed"])

    def close(self) -> None:
        if self._twin is not None:
            self._twin.close()
            self._twin = None
        for pool in self._pools:
            pool.close()
