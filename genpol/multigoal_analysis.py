"""How multimodal is a policy on MultiGoal? Goals reached, trajectories, and the action distribution
at the start state. Used by ``bench/multigoal.py`` and the multimodality test."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import torch

from genpol.envs.multigoal import MultiGoal
from genpol.policy import TrainedPolicy


@dataclass
class GoalCoverage:
    """``goal_counts [4]``: episodes (of ``episodes``) that ended at each goal; ``trajectories``:
    ``[T + 1, episodes, 2]`` positions (NaN after an episode ended); ``start_actions [S, 2]``:
    actions sampled at the origin; ``angular_entropy``: entropy (nats) of their direction over 16
    bins (log 16 = 2.77 is uniform, log 4 = 1.39 four equal modes, 0 one direction)."""

    goal_counts: np.ndarray
    trajectories: np.ndarray
    start_actions: np.ndarray
    angular_entropy: float
    mean_return: float

    def goals_covered(self, min_fraction: float = 0.02) -> int:
        """Goals reached in at least ``min_fraction`` of the episodes."""
        return int((self.goal_counts >= min_fraction * self.trajectories.shape[1]).sum())

    def lobe_fraction(self, degrees: float = 25.0) -> float:
        """Share of the start actions whose direction lies within ``degrees`` of a goal's (the four
        axes): clean lobes score near 1, a uniform spread ``8 * degrees / 360`` (0.56 at 25)."""
        return lobe_fraction(torch.as_tensor(self.start_actions), degrees)


def angular_entropy(actions: torch.Tensor, bins: int = 16) -> float:
    """Entropy of the direction of 2-D ``actions [S, 2]`` over ``bins`` equal angular bins."""
    angles = torch.atan2(actions[:, 1], actions[:, 0])
    p = torch.histc(angles, bins, -math.pi, math.pi) / actions.shape[0]
    p = p[p > 0]
    return float(-(p * p.log()).sum())


def lobe_fraction(actions: torch.Tensor, degrees: float = 25.0) -> float:
    """Share of 2-D ``actions [S, 2]`` pointing within ``degrees`` of one of the four axes."""
    angles = torch.rad2deg(torch.atan2(actions[:, 1], actions[:, 0]))
    off_axis = (angles.remainder(90.0) + 45.0).remainder(90.0) - 45.0  # signed distance to the nearest axis
    return float((off_axis.abs() <= degrees).float().mean())


@torch.no_grad()
def goal_coverage(policy: TrainedPolicy, episodes: int = 100, start_samples: int = 2000, seed: int = 0,
                  deterministic: bool = False) -> GoalCoverage:
    """Roll out ``episodes`` episodes of the (by default stochastic) policy in parallel, one per env."""
    env = MultiGoal(num_envs=episodes, seed=seed, **policy.spec["env"]["kwargs"])
    torch.manual_seed(seed)
    position = env.reset()
    active = torch.ones(episodes, dtype=torch.bool)
    goals = torch.full((episodes,), -1, dtype=torch.int64)
    returns = torch.zeros(episodes)
    path = [position.clone()]
    while active.any():
        _, reward, terminated, truncated, info = env.step(policy.act(position, deterministic))
        final = info["final_obs"]
        reached = terminated & active
        goals[reached] = env.nearest_goal(final[reached])
        returns += reward * active
        path.append(torch.where(active[:, None], final, torch.full_like(final, float("nan"))))
        active &= ~(terminated | truncated)
        position = env.position.clone()
    start = policy.act(torch.zeros(start_samples, 2), deterministic=False)
    counts = np.bincount(goals[goals >= 0].numpy(), minlength=4)
    return GoalCoverage(counts, torch.stack(path).numpy(), start.numpy(), angular_entropy(start),
                        float(returns.mean()))
