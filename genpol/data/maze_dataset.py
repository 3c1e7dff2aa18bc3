"""Make a D4RL-maze2d-style PointMaze dataset with a grid planner and a PD waypoint controller.

    python -m genpol.data.maze_dataset --env PointMaze_Medium-v3 --steps 200000 --seed 0 \\
        --d4rl data/pointmaze_medium-v3.hdf5 --minari genpol/pointmaze/medium-v0 --minari-root data/minari

The recipe of ALGORITHMS.md §13c (Minari's ``D4RL/pointmaze/*-v2`` datasets, D4RL's maze2d):

* the env runs as ``continuing_task=True, reset_target=True``, through genpol's gym backend, so
  observations are ``[x, y, vx, vy, achieved_x, achieved_y, goal_x, goal_y]``; it never resets: on
  reaching its goal (distance <= 0.45) it draws a new one;
* actions = ``clip(controller + N(0, 0.5^2), -1, 1)`` (``genpol.data.maze_planner``);
* the stream is split into goal-to-goal episodes at ``info["success"]``: the success step ends its
  episode as a truncation (no terminal: the point mass goes on); a segment that has not reached its
  goal after ``--max-segment-steps`` is cut there too and counts as a controller failure;
* rewards are the env's own, against the goal in the observation (sparse 1 at the success step;
  ``PointMaze_MediumDense-v3`` for exp(-distance)); the success step's observation still carries
  the old goal, and the next episode starts from it with the new goal (the goal the next step shows).

Both files hold the same complete segments (the unfinished ones at the end are dropped).
Normalized scores use Minari's reference returns for ``D4RL/pointmaze/<maze>-v2`` (``MAZE_REFERENCE``):
mean return over the registered horizon on the single-goal evaluation map (``eval_maze_map``), of
uniform random actions (min) and of the noise-free DFS controller (max). The script measures both
policies on that map too: with ``--solver dfs`` (Minari's search) its controller lands near that
max; the default BFS takes shorter paths and scores above 100.
"""

from __future__ import annotations

import argparse
import json
import re
import time
from typing import Any

import gymnasium as gym
import numpy as np
import torch

from genpol import envs
from genpol.data.d4rl import write_d4rl
from genpol.data.maze_planner import GOAL, POSITION, VELOCITY, BatchController, MazeGrid, maze_map_of
from genpol.data.collect import checked_outputs
from genpol.data.minari_io import write_minari
from genpol.data.scores import normalized_score
from genpol.errors import require_seed
from genpol.policy import evaluate_episodes

# Minari D4RL/pointmaze/<maze>-v2 metadata (minari/utils.py _generate_dataset_metadata, values as
# quoted in ALGORITHMS.md §13b): (ref_min_score, ref_max_score) per (maze, reward type).
MAZE_REFERENCE = {
    ("UMaze", "sparse"): (13.49, 218.70), ("UMaze", "dense"): (59.25, 223.97),
    ("Medium", "sparse"): (17.66, 361.05), ("Medium", "dense"): (49.24, 368.81),
    ("Large", "sparse"): (3.55, 462.26), ("Large", "dense"): (27.17, 481.53),
}
EVAL_GOAL_CELL = {"UMaze": (1, 1), "Medium": (6, 6), "Large": (7, 9)}  # Minari's single 'g' cell


def maze_name(gym_id: str) -> tuple[str, str]:
    """``"PointMaze_MediumDense-v3"`` -> ``("Medium", "dense")``."""
    match = re.fullmatch(r"PointMaze_(UMaze|Open|Medium|Large)(_Diverse_GR?)?(Dense)?-v3", gym_id)
    if match is None:
        raise ValueError(f"'{gym_id}' is not a PointMaze id (PointMaze_<UMaze|Open|Medium|Large>[Dense]-v3)")
    return match.group(1), "dense" if match.group(3) else "sparse"


def eval_maze_map(gym_id: str) -> list[list[int | str]]:
    """The id's map with Minari's single goal cell marked ``"g"``: goals there, resets anywhere else."""
    maze, _ = maze_name(gym_id)
    if maze not in EVAL_GOAL_CELL:
        raise ValueError(f"{gym_id}: no evaluation goal cell known for {maze}; known: {sorted(EVAL_GOAL_CELL)}")
    grid = maze_map_of(f"PointMaze_{maze}-v3")  # a fresh copy of the plain maze (a Diverse id's holds goal cells)
    i, j = EVAL_GOAL_CELL[maze]
    grid[i][j] = "g"
    return grid


def collect_segments(gym_id: str, steps: int, num_envs: int = 8, seed: int = 0, noise_std: float = 0.5,
                     max_segment_steps: int = 1000, solver: str = "bfs"
                     ) -> tuple[list[dict[str, np.ndarray]], dict[str, Any]]:
    """Run the noisy controller until ``steps`` transitions are in complete segments.

    Returns ``(segments, stats)``; each segment has ``observations [T + 1, 8]``, ``actions [T, 2]``,
    ``rewards [T]``, ``terminations [T]`` (all False), ``truncations [T]`` (True at the end) and
    ``success`` (bool: it ended at its goal, not at the cap).
    """
    env = envs.make(f"gym:{gym_id}", num_envs=num_envs, seed=seed, rescale_actions=False,
                    env_kwargs={"continuing_task": True, "reset_target": True}, max_episode_steps=10**9)
    controller = BatchController(MazeGrid(maze_map_of(gym_id)), num_envs, seed, noise_std=noise_std, solver=solver)
    obs = env.reset(seed=seed).double().numpy()

    def fresh(first_obs: np.ndarray) -> dict[str, list]:
        return {"observations": [first_obs.copy()], "actions": [], "rewards": [], "clipped": 0}

    current = [fresh(row) for row in obs]
    segments: list[dict[str, np.ndarray]] = []
    stored, clipped, start, cpu_start = 0, 0, time.perf_counter(), time.process_time()
    while stored < steps:
        actions, was_clipped = controller.act(obs)
        next_obs, reward, terminated, truncated, info = env.step(torch.as_tensor(actions, dtype=torch.float32))
        next_obs, final_obs = next_obs.double().numpy(), info["final_obs"].double().numpy()
        reward, success = reward.numpy(), info["success"].numpy()
        ended = (terminated | truncated).numpy()
        for i in range(num_envs):
            segment = current[i]
            if len(segment["actions"]) == 0:  # its first obs came from a success step: show the new goal
                segment["observations"][0][GOAL] = next_obs[i, GOAL] if not ended[i] else final_obs[i, GOAL]
            segment["actions"].append(actions[i])
            segment["rewards"].append(float(reward[i]))
            segment["clipped"] += int(was_clipped[i])  # counted when the segment is stored, as its actions are
            segment["observations"].append(final_obs[i] if ended[i] else next_obs[i])
            if success[i] or ended[i] or len(segment["actions"]) >= max_segment_steps:
                length = len(segment["actions"])
                segments.append({"observations": np.asarray(segment["observations"]),
                                 "actions": np.asarray(segment["actions"], dtype=np.float32),
                                 "rewards": np.asarray(segment["rewards"]),
                                 "terminations": np.zeros(length, dtype=bool),
                                 "truncations": np.arange(length) == length - 1, "success": bool(success[i])})
                stored += length
                clipped += segment["clipped"]
                current[i] = fresh(next_obs[i])
        obs = next_obs
    env.close()
    seconds, cpu_seconds = time.perf_counter() - start, time.process_time() - cpu_start
    lengths = np.array([len(s["actions"]) for s in segments])
    reached = np.array([s["success"] for s in segments])
    stats = {"segments": len(segments), "transitions": int(lengths.sum()), "success_rate": float(reached.mean()),
             "segment_length_mean": float(lengths[reached].mean()) if reached.any() else None,
             "segment_length_p95": float(np.percentile(lengths[reached], 95)) if reached.any() else None,
             "clipped_action_fraction": clipped / max(int(lengths.sum()), 1), "seconds": seconds,
             "cpu_seconds": cpu_seconds, "env_steps_per_s": int(lengths.sum()) / seconds}
    return segments, stats


def evaluate_controller(gym_id: str, episodes: int, seed: int = 10_000, solver: str = "bfs") -> dict[str, float]:
    """Noise-free controller and uniform random actions on the single-goal evaluation map, for the
    registered horizon (continuing_task=True, reset_target=False, as Minari's reference scores)."""
    env = envs.make(f"gym:{gym_id}", num_envs=episodes, rescale_actions=False,
                    env_kwargs={"maze_map": eval_maze_map(gym_id), "continuing_task": True, "reset_target": False})
    grid = MazeGrid(maze_map_of(gym_id))
    try:
        controller = BatchController(grid, episodes, seed, solver=solver)
        planned = evaluate_episodes(env, lambda obs: torch.as_tensor(controller.act(obs.double().numpy())[0],
                                                                      dtype=torch.float32), seed)
        generator = torch.Generator().manual_seed(seed)
        uniform = evaluate_episodes(env, lambda obs: torch.rand(obs.shape[0], 2, generator=generator) * 2 - 1, seed)
    finally:
        env.close()
    return {"controller_return_mean": float(planned.returns.mean()),
            "controller_success_rate": float(planned.success.mean()),
            "random_return_mean": float(uniform.returns.mean()), "random_success_rate": float(uniform.success.mean())}


def to_d4rl_arrays(segments: list[dict[str, np.ndarray]]) -> dict[str, Any]:
    """D4RL maze2d's flat arrays (plus ``next_observations``) and ``infos/{goal,qpos,qvel}``."""
    observations = np.concatenate([s["observations"][:-1] for s in segments])
    return {"observations": observations,
            "next_observations": np.concatenate([s["observations"][1:] for s in segments]),
            "actions": np.concatenate([s["actions"] for s in segments]),
            "rewards": np.concatenate([s["rewards"] for s in segments]),
            "terminals": np.concatenate([s["terminations"] for s in segments]),
            "timeouts": np.concatenate([s["truncations"] for s in segments]),
            "infos": {"goal": observations[:, GOAL], "qpos": observations[:, POSITION],
                      "qvel": observations[:, VELOCITY]}}


def main(argv: list[str] | None = None) -> dict[str, Any]:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--env", default="PointMaze_Medium-v3", help="a PointMaze gymnasium id")
    parser.add_argument("--steps", type=int, default=200_000, help="transitions in complete segments")
    parser.add_argument("--num-envs", type=int, default=8)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--solver", choices=("bfs", "dfs"), default="bfs",
                        help="grid planner: shortest paths (bfs) or Minari's depth-first search (dfs)")
    parser.add_argument("--noise", type=float, default=0.5, help="std of the Gaussian action noise")
    parser.add_argument("--max-segment-steps", type=int, default=1000,
                        help="cut a segment that has not reached its goal after this many steps (a failure)")
    parser.add_argument("--eval-episodes", type=int, default=20,
                        help="episodes of the noise-free controller and of random actions on the evaluation map "
                             "(0: skip)")
    parser.add_argument("--d4rl", help="write a D4RL HDF5 file here")
    parser.add_argument("--minari", help="write a Minari dataset with this id (e.g. genpol/pointmaze/medium-v0)")
    parser.add_argument("--minari-root", help="Minari datasets root (default: $MINARI_DATASETS_PATH)")
    args = parser.parse_args(argv)
    if not (args.d4rl or args.minari):
        parser.error("give --d4rl and/or --minari")
    try:  # ConfigError is a ValueError: a seed numpy or gymnasium refuses fails here, not in the collection
        maze, reward_type = maze_name(args.env)
        require_seed("--seed", args.seed)
    except ValueError as error:
        parser.error(str(error))
    # refused before the collection, not after it: nothing collected is lost to a setting
    if args.eval_episodes and maze not in EVAL_GOAL_CELL:
        parser.error(f"{args.env}: no single-goal evaluation map for the {maze} maze (known: "
                     f"{', '.join(EVAL_GOAL_CELL)}); pass --eval-episodes 0")
    # collect's checks: an existing --d4rl file was silently replaced here, stranding the runs resuming from it
    with checked_outputs(parser, args.d4rl, args.minari, args.minari_root):
        return collect_and_write(args, maze, reward_type)


def collect_and_write(args: argparse.Namespace, maze: str, reward_type: str) -> dict[str, Any]:
    """Collect ``args.steps`` transitions in the maze and write the D4RL file and/or Minari dataset ``args`` names."""
    # Minari's reference returns were measured on the single-goal map: a Diverse id's task is another one
    reference = None if "_Diverse_" in args.env else MAZE_REFERENCE.get((maze, reward_type))

    segments, stats = collect_segments(args.env, args.steps, args.num_envs, args.seed, args.noise,
                                       args.max_segment_steps, args.solver)
    minari_id = f"D4RL/pointmaze/{maze.lower()}{'-dense' if reward_type == 'dense' else ''}-v2"
    report: dict[str, Any] = {"env": args.env, "seed": args.seed, "solver": args.solver, "noise_std": args.noise,
                              **stats,
                              "reference_scores": None if reference is None else
                              {"source": f"Minari {minari_id} metadata", "ref_min_score": reference[0],
                               "ref_max_score": reference[1]}}
    print(f"controller success rate {stats['success_rate']:.3f} over {stats['segments']} goal-to-goal segments "
          f"(mean length {stats['segment_length_mean']}, {stats['env_steps_per_s']:.0f} env steps/s)")
    if args.eval_episodes:
        evaluation = evaluate_controller(args.env, args.eval_episodes, solver=args.solver)
        if reference is not None:
            evaluation["controller_normalized_score"] = float(normalized_score(
                reference, evaluation["controller_return_mean"]))
            evaluation["random_normalized_score"] = float(normalized_score(reference, evaluation["random_return_mean"]))
        report["evaluation_map"] = evaluation
        print(f"noise-free controller on the evaluation map: success rate {evaluation['controller_success_rate']:.3f}, "
              f"return {evaluation['controller_return_mean']:.1f}; random actions: return "
              f"{evaluation['random_return_mean']:.1f}")
    description = (f"{args.env} goal-to-goal segments: {args.solver.upper()} planner + PD waypoint controller (p 10, d 1, jitter 0.2), "
                   f"action noise N(0, {args.noise}^2), genpol.data.maze_dataset seed {args.seed}")
    if args.d4rl:
        arrays = to_d4rl_arrays(segments)
        metadata: dict[str, Any] = {"env": f"gym:{args.env}", "algorithm": description,
                                    "observation_layout": "x, y, vx, vy, achieved_x, achieved_y, goal_x, goal_y"}
        if reference is not None:
            metadata.update(ref_min_score=reference[0], ref_max_score=reference[1])
        write_d4rl(args.d4rl, **arrays, metadata=metadata)
        report["d4rl_file"] = args.d4rl
    if args.minari:
        obs_space = gym.spaces.Box(-np.inf, np.inf, (segments[0]["observations"].shape[1],), np.float64)
        act_space = gym.spaces.Box(-1.0, 1.0, (2,), dtype=np.float32)
        path = write_minari(args.minari, [{k: v for k, v in s.items() if k != "success"} for s in segments],
                            obs_space, act_space, root=args.minari_root,
                            ref_min_score=None if reference is None else reference[0],
                            ref_max_score=None if reference is None else reference[1],
                            algorithm_name="genpol.data.maze_dataset", description=description,
                            env_id=f"gym:{args.env}")
        report["minari_dataset"] = str(path)
    print(json.dumps(report, indent=2))
    return report


if __name__ == "__main__":
    main()
