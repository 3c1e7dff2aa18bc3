"""dm_control suite backend: ``dmc:<domain>-<task>``, e.g. ``dmc:cheetah-run``, as torch tensors.

* Observations: the task's observation dict flattened in the order of ``observation_spec()`` (an
  ordered dict, fixed per task), each entry raveled; ``observation_keys`` lists that order.
* Actions: bounds from the action spec.
* Episode ends: a step with ``discount == 0`` terminates; the suite's time limit (``last()`` with
  discount 1) truncates, so learners bootstrap from ``info["final_obs"]``.
* Vectorization: the envs are stepped one after another in this process (``SyncVectorEnv``'s
  choice, for the same reason: no inter-process traffic on a few cores).
* Rendering: env 0 through its model's camera 0 (a tracking camera in the locomotion domains), with
  the floor following the robot (``genpol.envs.rendering``).
"""

from __future__ import annotations

import difflib
from typing import Any

import numpy as np
import torch

from .chunking import chunk_bounds
from .core import RANDOMIZED_MODEL_FIELDS, EnvError, StepResult, VectorEnv, kwargs_not_taken

import mujoco  # noqa: E402
from dm_control import suite  # noqa: E402

KNOWN_TASKS = [f"{domain}-{task}" for domain, task in suite.ALL_TASKS]


class DMCVectorEnv(VectorEnv):
    """``num_envs`` copies of a dm_control suite task.

    Args:
        name: ``"<domain>-<task>"`` (``dmc:`` prefix stripped), e.g. ``"cheetah-run"``.
        num_envs, device, seed: as for every backend; env i is seeded with ``seed + i``.
        render: allow ``render()`` (env 0); render_size: (width, height).
        max_episode_steps: override the suite's time limit (in control steps).
        env_kwargs: extra ``task_kwargs`` for ``suite.load``.
        action_chunk: actions per agent step (``genpol.envs.chunking``).
    """

    def __init__(self, name: str, num_envs: int = 1, device: str | torch.device = "cpu", seed: int | None = None,
                 render: bool = False, render_size: tuple[int, int] = (256, 256),
                 max_episode_steps: int | None = None, env_kwargs: dict[str, Any] | None = None,
                 action_chunk: int = 1):
        domain, _, task = name.partition("-")
        if (domain, task) not in suite.ALL_TASKS:
            close = difflib.get_close_matches(name, KNOWN_TASKS, n=3, cutoff=0.5)
            hint = f" Did you mean {', '.join('dmc:' + c for c in close)}?" if close else ""
            raise EnvError(f"unknown dm_control task 'dmc:{name}' (ids are dmc:<domain>-<task>).{hint}")
        self.env_id = f"dmc:{name}"
        self.num_envs = num_envs
        self.device = torch.device(device)
        self._domain, self._task = domain, task
        self._task_kwargs = dict(env_kwargs or {})
        if max_episode_steps is not None:  # lift the suite's limit (in seconds) so that ours decides
            self._task_kwargs["time_limit"] = float("inf")
        self._envs = [self._load(None) for _ in range(num_envs)]
        self._load_seeds: list[int | None] = [None] * num_envs  # what each env was built with (lqr's model)
        self._pending_seed = seed
        spec = self._envs[0].observation_spec()
        self.observation_keys = list(spec)
        self.observation_layout = [(key, tuple(array.shape)) for key, array in spec.items()]
        self.obs_dim = int(sum(np.prod(array.shape, dtype=int) for array in spec.values()))
        action_spec = self._envs[0].action_spec()
        self.action_chunk = action_chunk
        self.act_dim = int(action_spec.shape[0]) * action_chunk
        low, high = chunk_bounds(np.array(action_spec.minimum), np.array(action_spec.maximum), action_chunk)
        self.action_low = torch.tensor(low, dtype=torch.float32, device=self.device)
        self.action_high = torch.tensor(high, dtype=torch.float32, device=self.device)
        suite_limit = self._envs[0]._step_limit
        # "is None", not "or": a 0 read as unset left the suite's limit lifted above, and so no time limit at all
        self.max_episode_steps = (max_episode_steps if max_episode_steps is not None
                                  else None if suite_limit == float("inf") else int(suite_limit))
        # a step is one control step (physics substeps included): 0.01 s for cheetah, 0.025 s for walker
        self.render_fps = 1.0 / float(self._envs[0].control_timestep())
        self._steps = np.zeros(num_envs, dtype=np.int64)
        self._render = render
        self._render_size = render_size
        self._renderer: Any = None
        self._renderer_env: Any = None  # the env 0 the renderer was made for

    def _load(self, seed: int | None):
        kwargs = {**self._task_kwargs, "random": seed}
        try:
            return suite.load(self._domain, self._task, task_kwargs=kwargs)
        except TypeError as error:  # a task argument misspelt: a traceback naming the suite's run()
            if not self._task_kwargs:
                raise
            raise kwargs_not_taken(f"dmc:{self._domain}-{self._task}", self._task_kwargs, error) from None

    def _flatten(self, observation: dict[str, Any]) -> np.ndarray:
        return np.concatenate([np.asarray(observation[key], dtype=np.float64).ravel()
                               for key in self.observation_keys])

    def reset(self, seed: int | None = None) -> torch.Tensor:
        seed = self._pending_seed if seed is None else seed
        self._pending_seed = None
        if seed is not None:  # dm_control seeds a task at construction
            for env in self._envs:
                env.close()
            self._envs = [self._load(seed + i) for i in range(self.num_envs)]
            self._load_seeds = [seed + i for i in range(self.num_envs)]
        self._steps[:] = 0
        obs = np.stack([self._flatten(env.reset().observation) for env in self._envs])
        return torch.as_tensor(obs, dtype=torch.float32, device=self.device)

    def step(self, actions: torch.Tensor) -> StepResult:
        self.check_actions(actions)
        actions_np = actions.detach().to("cpu", torch.float64).numpy()
        self.check_finite_actions(actions_np)
        obs = np.empty((self.num_envs, self.obs_dim))
        ended_obs: dict[int, np.ndarray] = {}  # the true last observation of the envs whose episode ended
        reward = np.empty(self.num_envs)
        terminated = np.zeros(self.num_envs, dtype=bool)
        truncated = np.zeros(self.num_envs, dtype=bool)
        executed = np.zeros(self.num_envs, dtype=np.int64)
        final_frame = None  # env 0's last state drawn before its reset, for a video (envs.core)
        for i, env in enumerate(self._envs):
            total = 0.0
            for action in actions_np[i].reshape(self.action_chunk, -1):  # one action unless chunked
                timestep = env.step(action)
                self._steps[i] += 1
                executed[i] += 1
                total += timestep.reward or 0.0
                at_limit = self.max_episode_steps is not None and self._steps[i] >= self.max_episode_steps
                if timestep.last() or at_limit:
                    break
            obs[i] = self._flatten(timestep.observation)
            reward[i] = total
            if timestep.last() or at_limit:
                terminated[i] = timestep.last() and timestep.discount == 0.0
                truncated[i] = not terminated[i]
                ended_obs[i] = obs[i].copy()
                if i == 0 and self._render:
                    final_frame = self.render()
                obs[i] = self._flatten(env.reset().observation)
                self._steps[i] = 0
        # built after the loop: a copy taken when the first env ended held the earlier step's rows of the envs
        # after it (and uninitialized ones), which off-policy learners store as their next observation
        final_obs = obs.copy()
        for i, last in ended_obs.items():
            final_obs[i] = last
        obs_t = torch.as_tensor(obs, dtype=torch.float32, device=self.device)
        final_t = obs_t if not ended_obs else torch.as_tensor(final_obs, dtype=torch.float32, device=self.device)
        info = {"final_obs": final_t}
        if self.action_chunk > 1:
            info["env_steps"] = torch.as_tensor(executed, device=self.device)
        if final_frame is not None:
            info["final_frame"] = final_frame
        return (obs_t, torch.as_tensor(reward, dtype=torch.float32, device=self.device),
                torch.as_tensor(terminated, device=self.device), torch.as_tensor(truncated, device=self.device),
                info)

    def render(self) -> np.ndarray | None:
        if not self._render:
            return None
        env0 = self._envs[0]
        if self._renderer is None or self._renderer_env is not env0:  # a seeded reset rebuilds the envs
            from .rendering import FloorFollowingRenderer

            self._close_renderer()
            model = env0.physics.model.ptr
            self._renderer = FloorFollowingRenderer(model, *self._render_size, camera=0 if model.ncam > 0 else -1)
            self._renderer_env = env0
        return self._renderer.render(env0.physics.data.ptr)

    def _close_renderer(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
        self._renderer = self._renderer_env = None

    def close(self) -> None:
        self._close_renderer()
        for env in self._envs:
            env.close()

    # ------------------------------------------------------------------ exact resume
    def state_dict(self) -> dict[str, Any]:
        states = []
        for env, steps, load_seed in zip(self._envs, self._steps, self._load_seeds):
            model, data = env.physics.model.ptr, env.physics.data.ptr
            spec = mujoco.mjtState.mjSTATE_INTEGRATION
            buffer = np.empty(mujoco.mj_stateSize(model, spec))
            mujoco.mj_getState(model, data, buffer, spec)
            kind, keys, position, has_gauss, cached = env.task.random.get_state()
            states.append({
                "mujoco": torch.from_numpy(buffer), "steps": int(steps), "env_step_count": int(env._step_count),
                "model": {name: torch.from_numpy(getattr(model, name).copy()) for name in RANDOMIZED_MODEL_FIELDS},
                "reset_next_step": bool(env._reset_next_step), "load_seed": load_seed,
                "random": {"kind": kind, "keys": torch.from_numpy(keys.astype(np.int64)), "position": int(position),
                           "has_gauss": int(has_gauss), "cached": float(cached)},
            })
        return {"envs": states, "pending_seed": self._pending_seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["envs"]) != self.num_envs:
            raise EnvError(f"{self.env_id}: saved state holds {len(state['envs'])} envs, this env has {self.num_envs}")
        for i, saved in enumerate(state["envs"]):
            if "load_seed" in saved and saved["load_seed"] != self._load_seeds[i]:
                # a task may build its model from the seed it is loaded with (lqr's random system): rebuilt alike
                self._envs[i].close()
                self._envs[i], self._load_seeds[i] = self._load(saved["load_seed"]), saved["load_seed"]
            env = self._envs[i]
            env.reset()
            for name, value in saved["model"].items():  # targets that tasks draw into the model at reset
                getattr(env.physics.model.ptr, name)[:] = value.numpy()
            spec = mujoco.mjtState.mjSTATE_INTEGRATION
            mujoco.mj_setState(env.physics.model.ptr, env.physics.data.ptr, saved["mujoco"].numpy(), spec)
            # dm_control's (legacy) step runs mj_step2 first and relies on the position-dependent
            # quantities of the previous mj_step1; recompute them for the restored state
            env.physics.forward()
            env._step_count = saved["env_step_count"]
            env._reset_next_step = saved["reset_next_step"]
            random = saved["random"]
            env.task.random.set_state((random["kind"], random["keys"].numpy().astype(np.uint32), random["position"],
                                       random["has_gauss"], random["cached"]))
            self._steps[i] = saved["steps"]
        self._pending_seed = state["pending_seed"]
