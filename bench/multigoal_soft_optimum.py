"""The maximum-entropy optimum of MultiGoal, by soft value iteration: what issue 30's start-state targets ask
of a policy that solves the max-entropy objective exactly, on each of genpol's two MultiGoal rewards.

Soft value iteration on a grid: positions every ``--grid`` (0.1) over the env's square, actions on a
``--actions`` x ``--actions`` grid over [-1, 1]^2. The rewards, terminations and next positions of every
(position, action) pair come from stepping genpol's own ``MultiGoal`` env once, batched (so the oracle has
the env's reward, clip and goal radius, not a copy of them); then, until the largest change is below 1e-6,

    Q(s, a) = r(s, a) + gamma (1 - done(s, a)) V(s'),  V(s') bilinear between grid positions,
    V(s) = alpha log sum_a exp(Q(s, a) / alpha) da,

and at the start state (the origin) pi(a | 0) = exp((Q(0, a) - V(0)) / alpha). From it, as
``bench/multigoal.py`` measures a trained policy (``genpol.multigoal_analysis``): the angular entropy and the
share of 2000 actions within 25 degrees of a goal direction (drawn from the grid distribution, uniform
within a cell). Time limits are ignored (the infinite-horizon optimum, as the learners bootstrap).

    python bench/multigoal_soft_optimum.py --env multigoal_softlearning --alpha 2.5 1.0 --gamma 0.9

Writes ``bench/results/multigoal_soft_optimum.json`` (one row per env, alpha and gamma, each as it is done;
rows not rerun keep their values).
"""

from __future__ import annotations

import argparse
import math
import time

import torch

from common import date_stamp, read_results, write_results

BATCH = 2048  # positions per batched env step and per backup


def transitions(env_kwargs: dict, grid: float, actions_per_axis: int) -> dict[str, torch.Tensor]:
    """Every grid position x every grid action through one batched ``MultiGoal.step``: rewards ``[N, M]``,
    terminations ``[N, M]``, next positions ``[N, M, 2]``; positions ``[N, 2]``, actions ``[M, 2]``."""
    from genpol.envs.multigoal import MultiGoal

    probe = MultiGoal(num_envs=1, **env_kwargs)
    axis = torch.arange(-probe.bound, probe.bound + 1e-9, grid)
    positions = torch.cartesian_prod(axis, axis)
    levels = torch.linspace(-1.0, 1.0, actions_per_axis)
    actions = torch.cartesian_prod(levels, levels)
    rewards, dones, nexts = [], [], []
    for start in range(0, len(positions), BATCH):
        block = positions[start:start + BATCH]
        pairs = len(block) * len(actions)
        env = MultiGoal(num_envs=pairs, max_episode_steps=10**9, **env_kwargs)
        env.reset()
        env.position = block.repeat_interleave(len(actions), dim=0)
        _, reward, terminated, _, info = env.step(actions.repeat(len(block), 1))
        rewards.append(reward.view(len(block), -1))
        dones.append(terminated.view(len(block), -1))
        nexts.append(info["final_obs"].view(len(block), len(actions), 2))
    return {"positions": positions, "actions": actions, "axis": axis, "rewards": torch.cat(rewards).double(),
            "dones": torch.cat(dones), "next": torch.cat(nexts).double(), "bound": probe.bound}


def bilinear(values: torch.Tensor, points: torch.Tensor, axis: torch.Tensor) -> torch.Tensor:
    """``values [n * n]`` on the grid ``axis x axis`` at ``points [..., 2]`` inside it."""
    n = len(axis)
    scaled = ((points - axis[0]) / (axis[1] - axis[0])).clamp(0, n - 1 - 1e-9)
    low = scaled.floor().long()
    t = scaled - low
    grid = values.view(n, n)
    x0, y0, x1, y1 = low[..., 0], low[..., 1], low[..., 0] + 1, low[..., 1] + 1
    return (grid[x0, y0] * (1 - t[..., 0]) * (1 - t[..., 1]) + grid[x1, y0] * t[..., 0] * (1 - t[..., 1])
            + grid[x0, y1] * (1 - t[..., 0]) * t[..., 1] + grid[x1, y1] * t[..., 0] * t[..., 1])


def soft_optimum(model: dict[str, torch.Tensor], alpha: float, gamma: float, tolerance: float = 1e-6,
                 max_iterations: int = 2000) -> tuple[torch.Tensor, int]:
    """Soft value iteration; returns ``Q(origin, a) [M]`` and the iterations it took."""
    cell = (model["actions"][1, 1] - model["actions"][0, 1]).item() ** 2  # da of the action grid
    value = torch.zeros(len(model["positions"]), dtype=torch.float64)

    def q_values(rows: slice) -> torch.Tensor:
        future = bilinear(value, model["next"][rows], model["axis"])
        return model["rewards"][rows] + gamma * (~model["dones"][rows]) * future

    for iteration in range(1, max_iterations + 1):
        new = torch.empty_like(value)
        for start in range(0, len(value), BATCH):
            rows = slice(start, start + BATCH)
            new[rows] = alpha * (torch.logsumexp(q_values(rows) / alpha, dim=1) + math.log(cell))
        change = float((new - value).abs().max())
        value = new
        if change < tolerance:
            break
    origin = int(((model["positions"]) ** 2).sum(1).argmin())
    return q_values(slice(origin, origin + 1))[0], iteration


def start_state_samples(model: dict[str, torch.Tensor], q_origin: torch.Tensor, alpha: float, count: int = 2000,
                        seed: int = 0) -> torch.Tensor:
    """``count`` actions from pi(a | origin) on the grid, each uniform within its cell (clipped to the box)."""
    generator = torch.Generator().manual_seed(seed)
    probabilities = torch.softmax(q_origin / alpha, dim=0)
    index = torch.multinomial(probabilities, count, replacement=True, generator=generator)
    half = (model["actions"][1, 1] - model["actions"][0, 1]).item() / 2
    jitter = (2 * torch.rand(count, 2, generator=generator, dtype=torch.float64) - 1) * half
    return (model["actions"][index] + jitter).clamp(-1, 1).float()


def main() -> None:
    from genpol.multigoal_analysis import angular_entropy, lobe_fraction

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", nargs="+", default=["multigoal_softlearning", "multigoal"],
                        help="configs/env files of genpol's MultiGoal")
    parser.add_argument("--alpha", type=float, nargs="+", default=[2.5, 1.0])
    parser.add_argument("--gamma", type=float, default=0.9, help="MEow's toy setting (SQL's: 0.99)")
    parser.add_argument("--grid", type=float, default=0.1)
    parser.add_argument("--actions", type=int, default=41, help="action grid points per axis")
    args = parser.parse_args()
    torch.set_num_threads(1)
    from genpol.api import compose_config

    rows = dict(read_results("multigoal_soft_optimum.json").get("rows", {}))
    print(f"{'env':24s} {'alpha':>6s} {'gamma':>6s} {'iterations':>10s} {'lobes 25 deg':>12s} {'entropy':>8s} "
          f"{'E|a|':>6s}")
    for env_name in args.env:
        env_kwargs = dict(compose_config(["run_dir=/tmp/unused", f"env={env_name}"]).env.kwargs)
        model = transitions(env_kwargs, args.grid, args.actions)
        for alpha in args.alpha:
            began = time.perf_counter()
            q_origin, iterations = soft_optimum(model, alpha, args.gamma)
            samples = start_state_samples(model, q_origin, alpha)
            row = {"env": env_name, "env_kwargs": env_kwargs, "alpha": alpha, "gamma": args.gamma, "grid": args.grid,
                   "actions_per_axis": args.actions, "iterations": iterations,
                   "lobe_fraction_25deg": lobe_fraction(samples, 25.0), "angular_entropy_at_start": angular_entropy(samples),
                   "mean_action_norm": float(samples.norm(dim=1).mean()), "seconds": time.perf_counter() - began,
                   "date": date_stamp()}
            rows[f"{env_name}/alpha={alpha}/gamma={args.gamma}"] = row
            write_results("multigoal_soft_optimum.json", {"benchmark": "multigoal_soft_optimum", "rows": rows})
            print(f"{env_name:24s} {alpha:6.2f} {args.gamma:6.2f} {iterations:10d} {row['lobe_fraction_25deg']:12.3f} "
                  f"{row['angular_entropy_at_start']:8.2f} {row['mean_action_norm']:6.2f}", flush=True)


if __name__ == "__main__":
    main()
