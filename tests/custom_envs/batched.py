"""A tiny batched torch simulator that implements genpol's vector-env protocol, as a user's package would.

``custom:custom_envs.batched:make_env`` builds it; ``make_env_without_state`` builds the same task
without ``state_dict`` (a simulator that cannot save its state), ``make_duck_typed_env`` also without
the ``genpol.envs.VectorEnv`` base; ``make_not_an_env`` is the mistake of returning a single gymnasium env.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from genpol import envs
from custom_envs import sigkill_at_step


class BatchedReach(envs.VectorEnv):
    """``num_envs`` points in [-1, 1]^2 moving by 0.05 * action towards random targets, all in one tensor.

    Observation ``[x, y, target_x, target_y]`` ``[N, 4]``; actions ``[N, 2]`` in [-2, 2]; reward minus
    the distance; terminated within 0.05 of the target, truncated after ``max_episode_steps``.
    Ended envs restart inside ``step`` with positions from the env's own generator.
    """

    def __init__(self, num_envs: int, device: torch.device, seed: int | None = None, max_episode_steps: int = 50,
                 render: bool = False, render_size: tuple[int, int] = (64, 64), speed: float = 0.05):
        self.env_id = "custom:custom_envs.batched:make_env"
        self.num_envs, self.device = num_envs, torch.device(device)
        self.obs_dim, self.act_dim = 4, 2
        self.action_low = torch.full((2,), -2.0, device=self.device)
        self.action_high = torch.full((2,), 2.0, device=self.device)
        self.max_episode_steps = max_episode_steps
        self.speed = speed
        self._generator = torch.Generator(device=self.device)
        self._pending_seed = seed
        self._render, self._render_size = render, render_size
        self.state = torch.zeros(num_envs, 4, device=self.device)  # position, target
        self.steps = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self.step_calls = 0  # for sigkill_at_step

    def _draw(self, count: int) -> torch.Tensor:
        return torch.rand(count, 4, generator=self._generator, device=self.device) * 2 - 1

    def reset(self, seed: int | None = None) -> torch.Tensor:
        seed = self._pending_seed if seed is None else seed
        if seed is not None:
            self._generator.manual_seed(seed)
        self._pending_seed = None
        self.state = self._draw(self.num_envs)
        self.steps.zero_()
        return self.state.clone()

    def step(self, actions: torch.Tensor) -> envs.StepResult:
        self.check_actions(actions)
        self.step_calls += 1
        sigkill_at_step(self.step_calls)
        move = self.speed * actions.to(self.device).clamp(self.action_low, self.action_high)
        self.state[:, :2] = (self.state[:, :2] + move).clamp(-1.0, 1.0)
        distance = (self.state[:, :2] - self.state[:, 2:]).norm(dim=1)
        self.steps += 1
        terminated = distance < 0.05
        truncated = (self.steps >= self.max_episode_steps) & ~terminated
        final_obs = self.state.clone()
        ended = terminated | truncated
        if bool(ended.any()):
            self.state = torch.where(ended[:, None], self._draw(self.num_envs), self.state)
            self.steps.masked_fill_(ended, 0)
        return self.state.clone(), -distance, terminated, truncated, {"final_obs": final_obs}

    def render(self) -> np.ndarray | None:
        if not self._render:
            return None
        width, height = self._render_size
        ys, xs = np.mgrid[0:height, 0:width]
        world_x, world_y = 2 * xs / width - 1, 1 - 2 * ys / height
        frame = np.full((height, width, 3), 255, dtype=np.uint8)
        position, target = self.state[0, :2].cpu().numpy(), self.state[0, 2:].cpu().numpy()
        for (x, y), color in ((target, (60, 170, 60)), (position, (40, 80, 200))):
            frame[(world_x - x) ** 2 + (world_y - y) ** 2 < 0.1**2] = color
        return frame

    def state_dict(self) -> dict[str, Any]:
        return {"state": self.state.clone(), "steps": self.steps.clone(), "generator": self._generator.get_state(),
                "pending_seed": self._pending_seed, "step_calls": self.step_calls}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.state = state["state"].to(self.device).clone()
        self.steps = state["steps"].to(self.device).clone()
        self._generator.set_state(state["generator"])
        self._pending_seed = state["pending_seed"]
        self.step_calls = state["step_calls"]


def make_env(num_envs: int, device: torch.device, seed: int | None = None, max_episode_steps: int | None = None,
             render: bool = False, render_size: tuple[int, int] = (64, 64), **task: Any) -> BatchedReach:
    """The factory genpol calls for ``custom:custom_envs.batched:make_env`` (``task``: ``env.kwargs``)."""
    return BatchedReach(num_envs, device, seed, max_episode_steps or 50, render, render_size, **task)


class GoalReach(BatchedReach):
    """``BatchedReach`` that defines success (``reports_success``: the target reached within ``tolerance``) and
    flags a success at the time limit as gymnasium's TimeLimit does, terminated and truncated both. It sets
    no ``action_chunk`` attribute, as a factory that only takes the argument."""

    reports_success = True

    def __init__(self, *args: Any, tolerance: float = 0.05, **kwargs: Any):
        super().__init__(*args, **kwargs)
        self.tolerance = tolerance

    def step(self, actions: torch.Tensor) -> envs.StepResult:
        self.check_actions(actions)
        move = self.speed * actions.to(self.device).clamp(self.action_low, self.action_high)
        self.state[:, :2] = (self.state[:, :2] + move).clamp(-1.0, 1.0)
        distance = (self.state[:, :2] - self.state[:, 2:]).norm(dim=1)
        self.steps += 1
        terminated = distance < self.tolerance
        truncated = self.steps >= self.max_episode_steps  # terminated too where both: gymnasium's TimeLimit
        final_obs = self.state.clone()
        ended = terminated | truncated
        self.state = torch.where(ended[:, None], self._draw(self.num_envs), self.state)
        self.steps.masked_fill_(ended, 0)
        return self.state.clone(), -distance, terminated, truncated, {"final_obs": final_obs,
                                                                        "success": terminated.clone()}


def make_goal_env(num_envs: int, device: torch.device, seed: int | None = None, max_episode_steps: int | None = None,
                  action_chunk: int = 1, **task: Any) -> GoalReach:
    return GoalReach(num_envs, device, seed, max_episode_steps or 50, **task)


class StatelessReach(envs.VectorEnv):
    """The same task as a ``VectorEnv`` that cannot save its state (no ``state_dict``)."""

    def __init__(self, **kwargs: Any):
        self._sim = BatchedReach(**kwargs)
        for name in ("env_id", "num_envs", "device", "obs_dim", "act_dim", "action_low", "action_high",
                     "max_episode_steps"):
            setattr(self, name, getattr(self._sim, name))

    def reset(self, seed: int | None = None) -> torch.Tensor:
        return self._sim.reset(seed)

    def step(self, actions: torch.Tensor) -> envs.StepResult:
        return self._sim.step(actions)


class DuckTypedReach:
    """The same task behind a plain class: the protocol's attributes and methods, no ``VectorEnv`` base."""

    def __init__(self, **kwargs: Any):
        self._sim = BatchedReach(**kwargs)
        for name in ("num_envs", "device", "obs_dim", "act_dim", "action_low", "action_high", "max_episode_steps"):
            setattr(self, name, getattr(self._sim, name))

    def reset(self, seed: int | None = None) -> torch.Tensor:
        return self._sim.reset(seed)

    def step(self, actions: torch.Tensor) -> envs.StepResult:
        return self._sim.step(actions)


def make_env_without_state(num_envs: int, device: torch.device, seed: int | None = None,
                           max_episode_steps: int | None = None) -> StatelessReach:
    return StatelessReach(num_envs=num_envs, device=device, seed=seed, max_episode_steps=max_episode_steps or 50)


def make_env_without_seed(num_envs: int, device: torch.device) -> StatelessReach:
    """A mistake: the factory lacks the seed genpol passes."""
    return StatelessReach(num_envs=num_envs, device=device, seed=0, max_episode_steps=50)


def make_env_with_required_width(num_envs: int, device: torch.device, seed: int | None, width: float) -> StatelessReach:
    """A factory with a task argument of its own and no default: the user's to set as env.kwargs.width."""
    return StatelessReach(num_envs=num_envs, device=device, seed=seed, max_episode_steps=50)


def make_duck_typed_env(num_envs: int, device: torch.device, seed: int | None = None,
                        max_episode_steps: int | None = None) -> DuckTypedReach:
    return DuckTypedReach(num_envs=num_envs, device=device, seed=seed, max_episode_steps=max_episode_steps or 50)


def make_not_an_env(num_envs: int, device: torch.device, seed: int | None = None, **_: Any) -> Any:
    """A common mistake: a single gymnasium env instead of a batched one."""
    import gymnasium as gym

    return gym.make("Pendulum-v1")


def make_env_with_reversed_bounds(num_envs: int, device: torch.device, seed: int | None = None, **_: Any) -> BatchedReach:
    """A mistake: low and high swapped in one dimension (genpol's rescaling would mirror that action)."""
    env = BatchedReach(num_envs, device, seed, 50, False, (64, 64))
    env.action_low, env.action_high = env.action_low.clone(), env.action_high.clone()
    env.action_low[1], env.action_high[1] = env.action_high[1].item(), env.action_low[1].item()
    return env


def make_env_with_numpy_dims(num_envs: int, device: torch.device, seed: int | None = None,
                             **_: Any) -> BatchedReach:
    """Dimensions read from a numpy array's shape, as numpy integers (legal: genpol stores them as ints)."""
    env = BatchedReach(num_envs, device, seed, 50, False, (64, 64))
    env.obs_dim, env.act_dim = np.int64(env.obs_dim), np.int64(env.act_dim)
    return env
