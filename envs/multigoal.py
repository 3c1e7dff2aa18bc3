"""MultiGoal: a 2-D point mass with four equally good goals, the standard multimodal control task.

The agent starts at the origin; goals sit at distance ``goal_distance`` on the four axes. The
action is a velocity in ``[-1, 1]^2`` (scaled by ``max_speed``). Two rewards, each with ``goal_bonus`` on
arrival (which terminates the episode), so every goal yields the same optimal return:

* ``reward="progress"`` (genpol's default): the progress towards the *nearest* goal minus a small control
  cost. Dense and well scaled for policy gradients, but nearly indifferent to direction at the start: from
  the origin a box corner (1, 1) makes 0.88 of progress against (1, 0)'s 1.0, for 0.10 of cost against 0.05.
* ``reward="softlearning"``: soft Q-learning's definition (Haarnoja et al. 2017; ``MultiGoalEnv`` of
  haarnoja/softqlearning, copied by softlearning and by MEow's toy code), ``-actuation_cost |a|^2 -
  distance_cost min_g |s' - g|^2``; with its other settings (``configs/env/multigoal_softlearning.yaml``:
  goal radius 1, start noise 0.1, positions clipped to +-7) it is that task. Its quadratic costs make the
  direction of the first action matter (at the origin, (1, 1) costs 31 more than (1, 0)), which is what
  draws the four lobes of its action distribution.

A unimodal Gaussian policy has to commit to one goal; a generative policy can put mass on all four.

Pure torch and fully batched, so it runs on any device at a few hundred thousand steps per second.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from .core import StepResult, VectorEnv


REWARDS = ("progress", "softlearning")


class MultiGoal(VectorEnv):
    """Batched MultiGoal task. See the module docstring for the dynamics and reward.

    Its start positions (``init_noise`` > 0) come from one generator seeded with ``seed`` for all envs, not one
    stream of ``seed + i`` per env as the other backends: env i's starts depend on num_envs. Kept, because the
    MultiGoal rows of issue 30 (``bench/results/multigoal*.json``) were measured with these streams and a new
    stream would leave them unreproducible until rerun."""

    def __init__(
        self,
        num_envs: int = 1,
        device: str | torch.device = "cpu",
        seed: int | None = None,
        render: bool = False,
        render_size: tuple[int, int] = (256, 256),
        max_episode_steps: int | None = 30,
        goal_distance: float = 5.0,
        goal_radius: float = 0.5,
        max_speed: float = 1.0,
        control_cost: float = 0.05,
        goal_bonus: float = 10.0,
        init_noise: float = 0.0,
        action_chunk: int = 1,
        reward: str = "progress",
        actuation_cost: float = 30.0,
        distance_cost: float = 1.0,
        bound: float | None = None,
    ):
        """``reward``: ``progress`` or ``softlearning`` (module docstring); ``control_cost`` weighs the progress
        reward's control cost, ``actuation_cost`` and ``distance_cost`` the softlearning reward's terms;
        ``bound``: positions are clipped to +-bound (default goal_distance + 1)."""
        if reward not in REWARDS:
            raise ValueError(f"MultiGoal reward must be one of {REWARDS}, got {reward!r}")
        self.env_id = "genpol:MultiGoal"
        self.num_envs = num_envs
        self.device = torch.device(device)
        self.obs_dim = 2
        self.action_chunk = action_chunk
        self.act_dim = 2 * action_chunk
        self.action_low = -torch.ones(self.act_dim, device=self.device)
        self.action_high = torch.ones(self.act_dim, device=self.device)
        self.max_episode_steps = 30 if max_episode_steps is None else max_episode_steps  # 0 is not unset
        # render_fps stays VectorEnv's fallback of 30: a point that moves max_speed per step has no physical time step
        d = goal_distance
        self.goals = torch.tensor([[d, 0.0], [0.0, d], [-d, 0.0], [0.0, -d]], device=self.device)
        self.goal_radius = goal_radius
        self.max_speed = max_speed
        self.control_cost = control_cost
        self.goal_bonus = goal_bonus
        self.init_noise = init_noise
        self.reward = reward
        self.actuation_cost, self.distance_cost = actuation_cost, distance_cost
        self.bound = goal_distance + 1.0 if bound is None else bound
        self._generator = torch.Generator(device=self.device)
        self._generator.manual_seed(0 if seed is None else seed)
        self._pending_seed = seed
        self.position = torch.zeros(num_envs, 2, device=self.device)
        self.steps = torch.zeros(num_envs, dtype=torch.int64, device=self.device)
        self._render = render
        self._render_size = render_size
        self._trail: list[np.ndarray] = []

    def nearest_goal_distance(self, position: torch.Tensor) -> torch.Tensor:
        """``position [N, 2]`` -> distance to the nearest goal ``[N]``."""
        return torch.cdist(position, self.goals).min(dim=1).values

    def nearest_goal(self, position: torch.Tensor) -> torch.Tensor:
        """``position [N, 2]`` -> index of the nearest goal ``[N]`` (int64)."""
        return torch.cdist(position, self.goals).argmin(dim=1)

    def _initial_positions(self, count: int) -> torch.Tensor:
        noise = torch.randn(count, 2, generator=self._generator, device=self.device)
        return noise * self.init_noise

    def reset(self, seed: int | None = None) -> torch.Tensor:
        seed = self._pending_seed if seed is None else seed
        if seed is not None:
            self._generator.manual_seed(seed)
        self._pending_seed = None
        self.position = self._initial_positions(self.num_envs)
        self.steps.zero_()
        self._trail = [self.position[0].cpu().numpy().copy()]
        return self.position.clone()

    def step(self, actions: torch.Tensor) -> StepResult:
        self.check_actions(actions)
        if actions.device.type == "cpu":  # the clamp below turned a NaN into a NaN position
            self.check_finite_actions(actions.detach().numpy())
        chunk = actions.detach().to(self.device, torch.float32).clamp(-1.0, 1.0).view(self.num_envs, -1, 2)
        reward = torch.zeros(self.num_envs, device=self.device)
        terminated = torch.zeros(self.num_envs, dtype=torch.bool, device=self.device)
        truncated = torch.zeros_like(terminated)
        executed = torch.zeros(self.num_envs, dtype=torch.int64, device=self.device)
        for j in range(chunk.shape[1]):  # one action unless chunked; ended envs sit out the rest
            active = ~(terminated | truncated)
            action = chunk[:, j] * active[:, None]
            distance_before = self.nearest_goal_distance(self.position)
            position = (self.position + self.max_speed * action).clamp(-self.bound, self.bound)
            distance_after = self.nearest_goal_distance(position)
            arrived = (distance_after < self.goal_radius) & active
            if self.reward == "progress":
                step_reward = distance_before - distance_after - self.control_cost * action.square().sum(dim=1)
            else:  # softlearning: costs of the action and of the next state's squared distance to the nearest goal
                step_reward = (-self.actuation_cost * action.square().sum(dim=1)
                               - self.distance_cost * distance_after.square())
            reward += active * (step_reward + self.goal_bonus * arrived.float())
            self.steps += active.long()
            executed += active.long()
            terminated |= arrived
            truncated |= (self.steps >= self.max_episode_steps) & active & ~arrived
            self.position = position
            if self._render and bool(active[0]):
                self._trail.append(position[0].cpu().numpy().copy())
        ended = terminated | truncated
        final_obs = self.position.clone()
        info: dict[str, Any] = {"final_obs": final_obs}
        if self._render and bool(ended[0]):  # env 0's last state, before the reset below restarts its trail
            info["final_frame"] = self.render()
        if ended.any():
            self.position = torch.where(ended[:, None], self._initial_positions(self.num_envs), self.position)
            self.steps.masked_fill_(ended, 0)
            if self._render and bool(ended[0]):
                self._trail = [self.position[0].cpu().numpy().copy()]
        if self.action_chunk > 1:
            info["env_steps"] = executed
        return self.position.clone(), reward, terminated, truncated, info

    def render(self) -> np.ndarray | None:
        """Top-down view of env 0: goals in green, the path so far in grey, the agent in blue."""
        if not self._render:
            return None
        width, height = self._render_size
        scale = min(width, height) / (2 * self.bound)
        ys, xs = np.mgrid[0:height, 0:width]
        world_x = (xs - width / 2) / scale
        world_y = (height / 2 - ys) / scale
        frame = np.full((height, width, 3), 255, dtype=np.uint8)
        for goal in self.goals.cpu().numpy():
            mask = (world_x - goal[0]) ** 2 + (world_y - goal[1]) ** 2 < self.goal_radius**2
            frame[mask] = (60, 170, 60)
        for point in self._trail[:-1]:
            mask = (world_x - point[0]) ** 2 + (world_y - point[1]) ** 2 < (0.08) ** 2
            frame[mask] = (150, 150, 150)
        agent = self._trail[-1] if self._trail else np.zeros(2)
        mask = (world_x - agent[0]) ** 2 + (world_y - agent[1]) ** 2 < (0.2) ** 2
        frame[mask] = (40, 80, 200)
        return frame

    def state_dict(self) -> dict[str, Any]:
        return {
            "position": self.position.clone(),
            "steps": self.steps.clone(),
            "generator": self._generator.get_state(),
            "pending_seed": self._pending_seed,
        }

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.position = state["position"].to(self.device).clone()
        self.steps = state["steps"].to(self.device).clone()
        self._generator.set_state(state["generator"])
        self._pending_seed = state["pending_seed"]
