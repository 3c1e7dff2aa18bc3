"""The vector-environment protocol every backend and wrapper speaks.

A vector env holds ``num_envs`` copies of one task and exchanges batched torch tensors on one
``device``. Episodes auto-reset inside ``step``: the observation returned for an env whose episode
just ended is the first observation of its next episode, and the true last observation is in
``info["final_obs"]`` so that a learner can bootstrap a truncated episode from it.

``step`` returns ``(obs [N, D], reward [N], terminated [N], truncated [N], info)`` where

* ``terminated`` means the task reached a terminal state (no bootstrapping),
* ``truncated`` means a time limit cut the episode (bootstrap from ``info["final_obs"]``),
* ``info["final_obs"]`` is ``[N, D]``: the true last observation where ``terminated | truncated``,
  and the returned observation elsewhere,
* ``info["episode_return"]`` / ``info["episode_length"]`` (added by ``EpisodeStats``) are ``[K]``
  tensors for the K episodes that ended at this step, in env order.

An env that defines success (``reports_success``: goal envs such as PointMaze) also returns

* ``info["success"]``: ``[N]`` bool, the env's success flag for the step just taken (for an env whose
  episode ended, the flag of that episode's last step),
* ``info["episode_success"]`` (added by ``EpisodeStats``): ``[K]`` bool, whether each ended episode
  was successful at any of its steps (a continuing maze pays on every step inside the goal radius
  and may drift out again; an episodic one terminates at the successful step).

An env made with rendering on also returns, at a step where env 0's episode ended,

* ``info["final_frame"]``: ``[H, W, 3]`` uint8 numpy array, ``render()`` of env 0's last state, drawn
  before its auto-reset (``render()`` after the step shows the next episode): ``VideoRecorder`` ends the
  episode's video with it. Absent otherwise, and optional for a custom env (its videos then lack it).

Grouped stepping (optional, ``step_groups >= 1``; 0 means ``step`` only): the envs form
``step_groups`` fixed, contiguous groups of equal size (``group_slice``).
``send_group(g, actions [n, A])`` starts group g's step and returns at once; ``recv_group(g)`` waits
for it and returns the step tuple above for group g's envs only (``[n, ...]``, episode statistics of
g's envs in env order). Between the two, the caller may
compute the next actions of another group: the policy's time then hides behind simulation
(genpol's pipelined on-policy collection). Each env still receives exactly the actions it is sent,
so a grouped run of a fixed action sequence equals a plain one env by env. ``step`` stays available
and steps every group; ``concat_steps`` joins the groups' tuples in env order.
"""

from __future__ import annotations

import abc
from typing import Any

import numpy as np
import torch

StepResult = tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor, dict[str, Any]]


# MuJoCo model fields that tasks randomize at reset (dm_control: reacher's and finger's targets, fish's goal,
# point_mass-hard's actuator gains, quadruped-escape's terrain; gymnasium-robotics: the Adroit tasks' object, door,
# board and pen-target poses): part of an episode's state, although they live in the model rather than in the data.
# Both MuJoCo backends save them; without them those tasks resumed on other dynamics, terrain or goals, marked exact.
RANDOMIZED_MODEL_FIELDS = ("body_pos", "body_quat", "geom_pos", "geom_quat", "geom_size", "site_pos", "site_quat",
                           "wrap_prm", "hfield_data")


# The frame rate of an env that gives no control rate (``VectorEnv.render_fps``): the rate every video had before
# the backends gave theirs.
DEFAULT_RENDER_FPS = 30.0


class EnvError(ValueError):
    """A bad environment id, a bad action, or an env that genpol cannot drive."""


class NonFiniteActionError(EnvError):
    """A NaN or inf in the actions given to ``step`` (``VectorEnv.check_finite_actions``): a diverged policy, or
    one acting on non-finite observations. Training turns it into its own non-finite stop."""


class EnvDimsError(EnvError):
    """The env's obs/act dims are not those asked for (``make(dims=...)``: a saved policy's)."""


def kwargs_not_taken(env_id: str, env_kwargs: dict[str, Any], error: TypeError) -> EnvError:
    """The error for ``env.kwargs`` an env's constructor does not take (a misspelt key), worded alike for every
    backend: a bare TypeError named the backend's internals, not the key."""
    return EnvError(f"{env_id} does not take the arguments env.kwargs={dict(env_kwargs)}: {error}")


class VectorEnv(abc.ABC):
    """Base class of backends and wrappers: batched torch tensors on one device.

    Subclasses set ``num_envs``, ``device``, ``obs_dim``, ``act_dim``, ``action_low`` and
    ``action_high`` (``[A]`` tensors), ``max_episode_steps`` (or None) and, when the simulator has a control
    rate, ``render_fps`` (see the attribute), and implement
    ``reset``, ``step``, and for an exact resume ``state_dict`` and ``load_state_dict`` (every
    backend genpol ships does; a custom backend without them resumes inexactly, see
    ``genpol.envs.custom``). ``genpol.envs.testing.check_vector_env`` checks an implementation rule by rule.
    """

    num_envs: int
    device: torch.device
    obs_dim: int
    act_dim: int
    action_low: torch.Tensor
    action_high: torch.Tensor
    max_episode_steps: int | None = None
    # Control steps per second of simulated time (one step of the underlying simulator, not of an action chunk):
    # VideoRecorder plays its frames at this rate, divided by the chunk, so that a video runs in real time. 30 is
    # only the fallback of an env that has no physical rate (MultiGoal) or declares none (a custom simulator).
    render_fps: float = DEFAULT_RENDER_FPS
    env_id: str = "?"
    provides_episode_stats: bool = False  # the backend fills info["episode_return"/"episode_length"] itself
    reports_success: bool = False  # every step's info holds "success" [N] (see the module docstring)
    # Modules another process must import before it can build this env again (``genpol.envs.imports``):
    # env workers import them, and policy checkpoints record them for evaluation.
    imports: tuple[str, ...] = ()
    step_groups: int = 0  # the groups send_group / recv_group step; 0: the env implements step only
    # A simulator whose observations are dicts (goal envs, dm_control, some EnvPool tasks): each key and its
    # one-env shape, in the order the backend flattens them into obs [N, D]; None: flat observations. Policy
    # checkpoints record it, so that TrainedPolicy.predict flattens a raw dict as training did.
    observation_layout: list[tuple[str, tuple[int, ...]]] | None = None

    @abc.abstractmethod
    def reset(self, seed: int | None = None) -> torch.Tensor:
        """Reset every env; env i is seeded with ``seed + i``. Returns obs ``[N, D]``."""

    @abc.abstractmethod
    def step(self, actions: torch.Tensor) -> StepResult:
        """Advance every env by one step; see the module docstring for the returned tuple."""

    def group_slice(self, group: int) -> slice:
        """The envs of group ``group``: ``step_groups`` contiguous slices of equal size, in env order."""
        if not self.step_groups:
            raise EnvError(f"{self.env_id} ({type(self).__qualname__}) cannot step env groups (step_groups=0): "
                           "only the EnvPool backend implements send_group / recv_group (env.step_groups >= 1), "
                           "under wrappers that do not override step()")
        size = self.num_envs // self.step_groups
        if not 0 <= group < self.step_groups:
            raise EnvError(f"{self.env_id}: group {group} out of range (step_groups={self.step_groups})")
        return slice(group * size, (group + 1) * size)

    def send_group(self, group: int, actions: torch.Tensor) -> None:
        """Start the step of group ``group``'s envs with ``actions [n, A]`` and return without waiting."""
        raise EnvError(f"{self.env_id} ({type(self).__qualname__}) cannot step env groups: only the EnvPool "
                       "backend implements send_group / recv_group")

    def recv_group(self, group: int) -> StepResult:
        """Wait for the step ``send_group(group, ...)`` started; the step tuple of that group's envs."""
        raise EnvError(f"{self.env_id} ({type(self).__qualname__}) cannot step env groups: only the EnvPool "
                       "backend implements send_group / recv_group")

    def render(self) -> np.ndarray | None:
        """An RGB frame ``[H, W, 3]`` (uint8) of env 0, or None if the env was made without rendering."""
        return None

    def state_dict(self) -> dict[str, Any]:
        """Everything needed to continue the current episodes exactly (simulator and RNG state).

        Optional for a backend: one that keeps this default cannot be checkpointed exactly, and
        ``saves_state`` says so (``genpol.envs.custom`` then resumes by reseeding, with a warning)."""
        raise EnvError(f"{self.env_id} ({type(self).__qualname__}) cannot save its state: implement state_dict() "
                       "and load_state_dict() for exact resume")

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore what ``state_dict`` returned (optional, as ``state_dict``)."""
        raise EnvError(f"{self.env_id} ({type(self).__qualname__}) cannot restore a state: implement state_dict() "
                       "and load_state_dict() for exact resume")

    def close(self) -> None:
        pass

    def find(self, wrapper_type: type) -> Any:
        """The outermost layer of type ``wrapper_type`` in this wrapper stack, or None."""
        env: Any = self
        while env is not None:
            if isinstance(env, wrapper_type):
                return env
            env = getattr(env, "env", None)
        return None

    def check_actions(self, actions: torch.Tensor, num_envs: int | None = None) -> None:
        """Raise an ``EnvError`` naming the expected shape when ``actions`` is not ``[N, A]`` (``[n, A]``
        for a group of ``num_envs`` envs)."""
        expected = self.num_envs if num_envs is None else num_envs
        if actions.shape != (expected, self.act_dim):
            raise EnvError(
                f"{self.env_id}: {'step()' if num_envs is None else 'send_group()'} expects actions of shape "
                f"[{'num_envs' if num_envs is None else 'group size'}, act_dim] = [{expected}, {self.act_dim}], "
                f"got {list(actions.shape)}"
            )

    def check_finite_actions(self, actions: np.ndarray, first_env: int = 0) -> None:
        """Raise an ``EnvError`` naming the envs (``first_env`` is row 0's) and action dimensions of a NaN or inf
        in ``actions [n, A]``. The simulators took them silently: MuJoCo warns once and steps on, the NaN
        rewards then poisoned a reward normalizer's statistics for every later step of every env, and dm_control's
        PhysicsError named neither env nor action. Called by the CPU backends on the numpy copy they send, so a
        GPU env pays no device sync for it."""
        bad = ~np.isfinite(actions.reshape(len(actions), -1))
        if bad.any():
            envs, dims = np.nonzero(bad)
            raise NonFiniteActionError(f"{self.env_id}: a non-finite action (NaN or inf) for env(s) "
                           f"{sorted(set((envs + first_env).tolist()))} in action dimension(s) "
                           f"{sorted(set(dims.tolist()))}: check the policy that gave it (its losses and learning "
                           "rate) and the observations it acted on")

    def __enter__(self) -> VectorEnv:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()


class VectorEnvWrapper(VectorEnv):
    """Passes everything to the wrapped env; subclasses override what they change.

    A wrapper that changes steps overrides ``transform_actions`` (the actions it sends inward) and
    ``transform_step`` (the step tuple it returns outward, for the envs ``genpol.envs`` of the batch), not
    ``step``: the same two then serve ``step`` and the grouped ``send_group`` / ``recv_group``. A
    wrapper that overrides ``step`` itself works for plain steps and refuses grouped ones.

    ``state_dict`` nests the inner env's state under ``"inner"`` so a stack of wrappers saves and
    restores as one dict.
    """

    def __init__(self, env: VectorEnv):
        self.env = env
        self.num_envs = env.num_envs
        self.device = env.device
        self.obs_dim = env.obs_dim
        self.act_dim = env.act_dim
        self.action_low = env.action_low
        self.action_high = env.action_high
        self.max_episode_steps = env.max_episode_steps
        self.render_fps = env.render_fps
        self.env_id = env.env_id
        self.provides_episode_stats = env.provides_episode_stats
        self.reports_success = env.reports_success
        self.imports = env.imports
        # a wrapper with its own step() cannot take part in grouped steps (send_group says why)
        self.step_groups = env.step_groups if type(self).step is VectorEnvWrapper.step else 0

    def reset(self, seed: int | None = None) -> torch.Tensor:
        return self.env.reset(seed)

    def transform_actions(self, actions: torch.Tensor) -> torch.Tensor:
        """The actions ``[n, A]`` to send to the inner env for the agent's ``actions [n, A]``."""
        return actions

    def transform_step(self, result: StepResult, envs: slice) -> StepResult:
        """The inner env's step tuple of the envs ``genpol.envs`` (all, or one group) -> this wrapper's."""
        return result

    def step(self, actions: torch.Tensor) -> StepResult:
        self.check_actions(actions)
        return self.transform_step(self.env.step(self.transform_actions(actions)), slice(0, self.num_envs))

    def send_group(self, group: int, actions: torch.Tensor) -> None:
        if type(self).step is not VectorEnvWrapper.step:  # its own step: transform_* may not say it all
            raise EnvError(f"{type(self).__qualname__} overrides step(), so it cannot step env groups; "
                           "implement transform_actions / transform_step instead")
        envs = self.group_slice(group)
        self.check_actions(actions, envs.stop - envs.start)
        self.env.send_group(group, self.transform_actions(actions))

    def recv_group(self, group: int) -> StepResult:
        return self.transform_step(self.env.recv_group(group), self.group_slice(group))

    def render(self) -> np.ndarray | None:
        return self.env.render()

    def own_state(self) -> dict[str, Any]:
        """This wrapper's own state (running statistics, accumulators)."""
        return {}

    def load_own_state(self, state: dict[str, Any]) -> None:
        pass

    def episodes_restarted(self) -> None:
        """Called after a restore that reset every env instead of continuing its episode (``state_is_exact``
        false): per-episode accumulators start again, as at ``reset``."""

    def state_dict(self) -> dict[str, Any]:
        return {"own": self.own_state(), "inner": self.env.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        # the inner env first: the backend names a state of another env count, where a wrapper's copy_ failed with
        # a shape error after its statistics were already overwritten
        self.env.load_state_dict(state["inner"])
        self.load_own_state(state["own"])
        if not state_is_exact(state["inner"]):
            self.episodes_restarted()

    def close(self) -> None:
        self.env.close()


def state_is_exact(state: Any) -> bool:
    """Whether restoring a ``state_dict`` continues the episodes in progress. Backends that expose no simulator
    state (EnvPool, a custom env without ``state_dict``) save ``{"exact": False, ...}`` and reset every env
    on load; wrappers nest their backend's state under ``"inner"``."""
    state = _backend_state(state)
    return not (isinstance(state, dict) and state.get("exact") is False)


def inexact_reset_seed(state: Any, fallback: int) -> int:
    """The seed an inexactly restored env resets with: the backend's own ``reset_seed`` (EnvPool, a custom env
    without ``state_dict``), else ``fallback`` (a gymnasium env whose state cannot be captured)."""
    state = _backend_state(state)
    seed = state.get("reset_seed") if isinstance(state, dict) else None
    return int(fallback if seed is None else seed)


def _backend_state(state: Any) -> Any:
    """The backend's part of a wrapped env's ``state_dict`` (wrappers nest it under ``"inner"``)."""
    while isinstance(state, dict) and "own" in state and "inner" in state:
        state = state["inner"]
    return state


def concat_steps(parts: list[StepResult]) -> StepResult:
    """The step tuples of consecutive env groups -> one tuple for all of them (tensors and every
    ``info`` entry concatenated along the env axis, so ``[K]`` episode statistics stay in env order)."""
    info = {key: torch.cat([part[4][key] for part in parts]) for key in parts[0][4] if key != "final_frame"}
    if "final_frame" in parts[0][4]:  # env 0's frame, no env axis: only the first group holds env 0
        info["final_frame"] = parts[0][4]["final_frame"]
    obs, reward, terminated, truncated = (torch.cat([part[k] for part in parts]) for k in range(4))
    return obs, reward, terminated, truncated, info


def innermost(env: VectorEnv) -> VectorEnv:
    """The backend under a stack of ``VectorEnvWrapper`` layers."""
    while isinstance(env, VectorEnvWrapper):
        env = env.env
    return env


def saves_state(env: Any) -> bool:
    """Whether ``env`` (a ``VectorEnv`` or a duck-typed one) has its own ``state_dict`` and
    ``load_state_dict``, rather than none or ``VectorEnv``'s defaults that raise."""
    for name in ("state_dict", "load_state_dict"):
        if not callable(getattr(env, name, None)) or getattr(type(env), name, None) is getattr(VectorEnv, name):
            return False
    return True
