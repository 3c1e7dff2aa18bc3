"""MuJoCo Playground backend (MJX on JAX): ``playground:<EnvName>``, batched on one accelerator.

``reset`` and ``step`` are ``jax.jit(jax.vmap(...))`` of the Playground env, with the time limit,
auto-reset (fresh random initial states, drawn only on steps where an episode ended) and episode
statistics inside the jitted step. State stays on the JAX device; observations, rewards and flags
reach torch through DLPack without a copy, and actions go back the same way. The JAX device is the
one matching the torch device (``cpu`` -> JAX's CPU, ``cuda:k`` -> GPU k).

* Implementation: Playground defaults to ``impl="warp"``, about 10x slower than ``impl="jax"`` on a
  CPU; genpol picks ``jax`` on CPU and ``warp`` on GPU when warp-lang is installed (``jax`` otherwise).
  Override with ``env.kwargs.impl``.
* Compilation of reset and step takes about a minute on a 2-core CPU for CheetahRun. JAX's
  persistent compilation cache is on (``$GENPOL_JAX_CACHE`` or ``~/.cache/genpol/jax``; set
  ``env.kwargs.compilation_cache=null`` to disable) and cut a rerun from 99 s to 30 s; progress
  lines say when compilation is under way. The step is warmed up twice and a retrace (a changed
  input structure) is reported.
* Envs: the 25 dm_control-suite ports load offline. Locomotion and manipulation envs need the
  mujoco_menagerie assets, which Playground fetches with git at load time; without network they
  must already be at ``mujoco_playground/external_deps/mujoco_menagerie`` (see ``MENAGERIE_PATH``).
"""

from __future__ import annotations

import difflib
import importlib.util
import os
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from .core import EnvError, StepResult, VectorEnv

DEFAULT_CACHE = Path(os.environ.get("GENPOL_JAX_CACHE", Path.home() / ".cache" / "genpol" / "jax"))


def _progress(message: str) -> None:
    print(f"[genpol] {message}", file=sys.stderr, flush=True)


def jax_device_for(device: torch.device) -> Any:
    """The JAX device matching a torch device."""
    import jax

    if device.type == "cpu":
        return jax.devices("cpu")[0]
    if device.type == "cuda":
        # XLA's CUDA-graph command buffers failed on an H200 (jax 0.11, "Failed to set memcpy D2D node
        # params") once step outputs were handed to torch by DLPack. The flag only takes effect if it is
        # set before JAX starts its GPU backend.
        flags = os.environ.get("XLA_FLAGS", "")
        if "xla_gpu_enable_command_buffer" not in flags:
            os.environ["XLA_FLAGS"] = f"{flags} --xla_gpu_enable_command_buffer=".strip()
        try:
            gpus = jax.devices("gpu")
        except RuntimeError as error:
            raise EnvError(f"torch device {device} asks for a GPU, but JAX sees none ({error}); install "
                           "the CUDA build of jax (pip install -U 'jax[cuda12]')") from None
        return gpus[device.index or 0]
    raise EnvError(f"the Playground backend supports cpu and cuda devices, not {device}")


def default_impl(device: torch.device) -> str:
    """MJX's implementation for a device: warp is the fast one on GPU, but it is an optional 150 MB
    install, and jax runs on every device."""
    return "warp" if device.type == "cuda" and importlib.util.find_spec("warp") else "jax"


def _to_torch(array: Any) -> torch.Tensor:
    """A JAX array as a torch tensor sharing its buffer (DLPack)."""
    return torch.from_dlpack(array)


class _Compiled:
    """A loaded Playground env and its jitted reset and step (see the module docstring)."""

    def __init__(self, env: Any, num_envs: int, limit: int):
        import jax
        import jax.numpy as jnp

        self.env, self.limit, self.traces, self.warm = env, limit, 0, False
        n = num_envs

        def reset(key):
            key, sub = jax.random.split(key)
            state = jax.vmap(env.reset)(jax.random.split(sub, n))
            # strongly typed, as step returns them: reset leaves weakly typed leaves (CheetahRun's data.time),
            # and a carry whose types differ from step's own output compiled step a second time (40 s on a CPU)
            state = jax.tree.map(lambda leaf: jnp.asarray(leaf, dtype=leaf.dtype), state)
            return {"state": state, "steps": jnp.zeros(n, jnp.int32), "returns": jnp.zeros(n), "key": key}

        def step(carry, action):
            self.traces += 1  # runs only while tracing: counts (re)compilations
            state = jax.vmap(env.step)(carry["state"], action)
            steps = carry["steps"] + 1
            returns = carry["returns"] + state.reward
            terminated = state.done > 0
            truncated = (steps >= limit) & ~terminated
            ended = terminated | truncated
            final_obs, reward = state.obs, state.reward  # before auto-reset replaces the state
            # env 0's pose before the auto-reset, for a video's last frame ([nq], [nv]: a few bytes a step)
            final_pose0 = (state.data.qpos[0], state.data.qvel[0])
            key, sub = jax.random.split(carry["key"])

            def auto_reset(current):
                fresh = jax.vmap(env.reset)(jax.random.split(sub, n))
                pick = lambda a, b: jnp.where(ended.reshape((n,) + (1,) * (a.ndim - 1)), a, b)  # noqa: E731
                return jax.tree.map(pick, fresh, current)

            state = jax.lax.cond(ended.any(), auto_reset, lambda current: current, state)
            out = {"obs": state.obs, "reward": reward, "terminated": terminated, "truncated": truncated,
                   "final_obs": final_obs, "episode_return": returns, "episode_length": steps,
                   "final_pose0": final_pose0}
            new_carry = {"state": state, "steps": jnp.where(ended, 0, steps),
                         "returns": jnp.where(ended, 0.0, returns), "key": key}
            return new_carry, out

        # no device argument: the computation runs where its inputs (the key, the carry) live
        self.reset = jax.jit(reset)
        self.step = jax.jit(step)


_COMPILED: dict[tuple, _Compiled] = {}


class PlaygroundVectorEnv(VectorEnv):
    """``num_envs`` copies of a MuJoCo Playground env stepped in one jitted, vmapped call."""

    provides_episode_stats = True

    def __init__(self, name: str, num_envs: int = 1, device: str | torch.device = "cpu", seed: int | None = None,
                 render: bool = False, render_size: tuple[int, int] = (256, 256),
                 max_episode_steps: int | None = None, env_kwargs: dict[str, Any] | None = None,
                 action_chunk: int = 1):
        import jax

        self.env_id = f"playground:{name}"
        if action_chunk != 1:
            raise EnvError(f"{self.env_id}: action chunks are not supported by the Playground backend yet "
                           "(use policy.act_steps=1, or the gym/dmc backends)")
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.jax_device = jax_device_for(self.device)  # before Playground's import touches the GPU backend
        from mujoco_playground import registry
        from mujoco_playground._src import mjx_env

        overrides = dict(env_kwargs or {})
        cache = overrides.pop("compilation_cache", str(DEFAULT_CACHE))
        if cache:
            Path(cache).mkdir(parents=True, exist_ok=True)
            jax.config.update("jax_compilation_cache_dir", str(cache))
            jax.config.update("jax_persistent_cache_min_compile_time_secs", 1.0)
        overrides.setdefault("impl", default_impl(self.device))
        if name not in registry.ALL_ENVS:
            close = difflib.get_close_matches(name, list(registry.ALL_ENVS), n=3)
            hint = f" Did you mean {', '.join('playground:' + c for c in close)}?" if close else ""
            raise EnvError(f"unknown Playground env 'playground:{name}'.{hint}")
        if name not in registry.dm_control_suite.ALL_ENVS and not mjx_env.MENAGERIE_PATH.exists():
            raise EnvError(
                f"playground:{name} needs the mujoco_menagerie robot assets, which Playground clones with git "
                f"when it loads and which are not at {mjx_env.MENAGERIE_PATH}. Without network, place a clone of "
                f"https://github.com/google-deepmind/mujoco_menagerie (commit {mjx_env.MENAGERIE_COMMIT_SHA}) there."
            )
        self.impl = overrides["impl"]
        key = (name, num_envs, max_episode_steps, str(self.jax_device), tuple(sorted(overrides.items())))
        if key not in _COMPILED:  # share envs and jitted functions between instances (e.g. evaluation envs)
            with jax.default_device(self.jax_device):
                env = registry.load(name, config_overrides=overrides)
            _COMPILED[key] = _Compiled(env, num_envs, max_episode_steps or int(env._config.episode_length))
        self._compiled = _COMPILED[key]
        self._env = self._compiled.env
        obs_size = self._env.observation_size
        if not isinstance(obs_size, int):
            raise EnvError(f"{self.env_id} has dict observations {obs_size}; genpol needs a flat vector")
        self.obs_dim = obs_size
        self.act_dim = self._env.action_size
        self.action_low = -torch.ones(self.act_dim, device=self.device)  # Playground acts in [-1, 1]
        self.action_high = torch.ones(self.act_dim, device=self.device)
        self.max_episode_steps = self._compiled.limit
        self.render_fps = 1.0 / float(self._env.dt)  # MjxEnv.dt is the control step (config.ctrl_dt), substeps included
        self._pending_seed = 0 if seed is None else seed
        self._carry: Any = None
        self._render_size = render_size
        self._renderer: Any = None
        self._render = render

    def _timed(self, what: str, fn: Any, *args: Any) -> Any:
        if self._compiled.warm:
            return fn(*args)
        _progress(f"{self.env_id}: compiling {what} (impl={self.impl}; about a minute on a small CPU the first "
                  "time, cached afterwards)")
        start = time.perf_counter()
        result = fn(*args)
        import jax

        jax.block_until_ready(result)
        _progress(f"{self.env_id}: {what} ready in {time.perf_counter() - start:.1f} s")
        return result

    def reset(self, seed: int | None = None) -> torch.Tensor:
        import jax

        seed = self._pending_seed if seed is None else seed
        self._pending_seed = None
        if seed is None and self._carry is not None:  # unseeded: the stream goes on, as the other backends'
            key = self._carry["key"]  # (PRNGKey(0) again repeated the same episodes at every reset())
        else:
            key = jax.device_put(jax.random.PRNGKey(0 if seed is None else seed), self.jax_device)
        self._carry = self._timed("reset", self._compiled.reset, key)
        if not self._compiled.warm:
            self._warm_up()
            self._carry = self._compiled.reset(key)
        return _to_torch(self._carry["state"].obs)

    def _warm_up(self) -> None:
        """Compile step and check that a second call does not retrace."""
        import jax.numpy as jnp

        zeros = jnp.zeros((self.num_envs, self.act_dim), jnp.float32, device=self.jax_device)
        carry, _ = self._timed("step", self._compiled.step, self._carry, zeros)
        traces = self._compiled.traces
        self._compiled.step(carry, zeros)
        if self._compiled.traces != traces:
            _progress(f"{self.env_id}: warning: step recompiled on its second call (input structure changed)")
        self._compiled.warm = True

    def step(self, actions: torch.Tensor) -> StepResult:
        import jax

        self.check_actions(actions)
        action = jax.dlpack.from_dlpack(actions.detach().to(self.device, torch.float32).contiguous())
        self._carry, out = self._compiled.step(self._carry, action)
        self.last_outputs = out  # the JAX arrays behind the returned tensors (for zero-copy checks)
        ended = _to_torch(out["terminated"]) | _to_torch(out["truncated"])
        info = {
            "final_obs": _to_torch(out["final_obs"]),
            "episode_return": _to_torch(out["episode_return"])[ended],
            "episode_length": _to_torch(out["episode_length"]).long()[ended],
        }
        if self._render and bool(ended[0]):  # env 0's last state: render() now draws the next episode's first
            info["final_frame"] = self._draw(*out["final_pose0"])
        return (_to_torch(out["obs"]), _to_torch(out["reward"]), _to_torch(out["terminated"]),
                _to_torch(out["truncated"]), info)

    @property
    def traces(self) -> int:
        """How many times the step function was traced (1 after warm-up if nothing recompiled)."""
        return self._compiled.traces

    def render(self) -> np.ndarray | None:
        if not self._render:
            return None
        data = self._carry["state"].data
        return self._draw(data.qpos[0], data.qvel[0])

    def _draw(self, qpos: Any, qvel: Any) -> np.ndarray:
        """The frame ``[H, W, 3]`` (uint8) of env 0 at ``qpos [nq]``, ``qvel [nv]`` (JAX or numpy arrays)."""
        import mujoco

        from .rendering import FloorFollowingRenderer

        model = self._env.mj_model
        if self._renderer is None:  # camera 0 tracks the robot in the dm_control-suite ports
            self._renderer = FloorFollowingRenderer(model, *self._render_size, camera=0 if model.ncam > 0 else -1)
            self._render_data = mujoco.MjData(model)
        self._render_data.qpos[:] = np.asarray(qpos)
        self._render_data.qvel[:] = np.asarray(qvel)
        mujoco.mj_forward(model, self._render_data)
        return self._renderer.render(self._render_data)

    def close(self) -> None:
        if self._renderer is not None:
            self._renderer.close()
            self._renderer = None

    # ------------------------------------------------------------------ exact resume
    def state_dict(self) -> dict[str, Any]:
        import jax

        leaves = jax.tree.leaves(self._carry)
        return {"leaves": [torch.from_numpy(np.array(leaf)) for leaf in leaves],
                "pending_seed": self._pending_seed}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        import jax

        if self._carry is None:
            self.reset()
        treedef = jax.tree.structure(self._carry)
        leaves = [jax.device_put(np.asarray(leaf.numpy()), self.jax_device) for leaf in state["leaves"]]
        if len(leaves) != treedef.num_leaves:
            raise EnvError(f"{self.env_id}: saved state has {len(leaves)} arrays, this env {treedef.num_leaves}")
        self._carry = jax.tree.unflatten(treedef, leaves)
        self._pending_seed = state["pending_seed"]
