"""A grid planner and a PD waypoint controller for gymnasium-robotics' PointMaze (ALGORITHMS.md §13b-c).

The controller is the one D4RL's maze2d and Minari's pointmaze datasets were made with:

* plan a path of cells from the ball's cell to the goal's cell: breadth-first search by default,
  which gives a shortest path (D4RL's Q-iteration does too, up to ties), or Minari's depth-first
  search (``solver="dfs"``), whose paths are longer; Minari's data and reference maxima used DFS
  (§13b);
* waypoints are the centers of the path's cells after the ball's own, each minus
  ``U(0, 1) * jitter`` per axis (jitter 0.2), and the goal itself, exactly, last;
* ``a = p_gain * (w - x) - d_gain * v`` with p 10, d 1, toward the current waypoint ``w``; the
  next waypoint becomes current within ``threshold`` (0.1) of it;
* replan whenever the desired goal changes (by more than 1e-3).

Observations are the gym backend's flattened goal-env vectors (``genpol.envs.goal_envs``):
``[x, y, vx, vy, achieved_x, achieved_y, goal_x, goal_y]``.
"""

from __future__ import annotations

from collections import deque
from typing import Sequence

import numpy as np

# slices of the flattened PointMaze observation (envs.goal_envs.FlattenGoalObservation's order)
POSITION, VELOCITY, ACHIEVED, GOAL = slice(0, 2), slice(2, 4), slice(4, 6), slice(6, 8)
WALL = 1

Cell = tuple[int, int]


def maze_map_of(gym_id: str) -> list[list[int | str]]:
    """The registered ``maze_map`` of a PointMaze id (``PointMaze_Medium-v3`` ...)."""
    import gymnasium as gym

    import gymnasium_robotics  # noqa: F401 - registers the ids

    gym.register_envs(gymnasium_robotics)
    return [list(row) for row in gym.spec(gym_id).kwargs["maze_map"]]


class MazeGrid:
    """Cells of a maze map (``1`` wall; ``0``, ``"g"``, ``"r"``, ``"c"`` free) and their xy centers.

    Cell ``(i, j)`` (row, column) has center ``x = j + 0.5 - W / 2``, ``y = H / 2 - (i + 0.5)``, as
    gymnasium-robotics' ``Maze.cell_rowcol_to_xy`` with ``maze_size_scaling`` 1.
    """

    def __init__(self, maze_map: Sequence[Sequence[int | str]]):
        self.maze_map = [list(row) for row in maze_map]
        self.height, self.width = len(self.maze_map), len(self.maze_map[0])
        self.free = np.array([[cell != WALL for cell in row] for row in self.maze_map])

    def center(self, cell: Cell) -> np.ndarray:
        i, j = cell
        return np.array([j + 0.5 - self.width / 2, self.height / 2 - (i + 0.5)])

    def cell_of(self, xy: np.ndarray) -> Cell:
        """The cell that contains ``xy [2]`` (clamped to the map)."""
        j = int(np.clip(np.floor(xy[0] + self.width / 2), 0, self.width - 1))
        i = int(np.clip(np.floor(self.height / 2 - xy[1]), 0, self.height - 1))
        return i, j

    def free_cells(self) -> list[Cell]:
        return [(int(i), int(j)) for i, j in zip(*np.nonzero(self.free))]

    def path(self, start: Cell, goal: Cell, solver: str = "bfs") -> list[Cell]:
        """Cells from ``start`` to ``goal`` inclusive, 4-connected through free cells.

        ``"bfs"`` gives a shortest path. ``"dfs"`` is the depth-first search of Minari's pointmaze
        datasets (``maze_solver.DFS``): a stack, cells marked as found when pushed, neighbours pushed
        in the order right, left, up, down (``(i, j+1), (i, j-1), (i-1, j), (i+1, j)``), so its paths
        match those datasets'. The two searches differ only in which end of the frontier they take.
        """
        if solver not in ("bfs", "dfs"):
            raise ValueError(f"unknown maze solver '{solver}'; choose bfs or dfs")
        if not (self.free[start] and self.free[goal]):
            raise ValueError(f"no path from {start} to {goal}: {'start' if not self.free[start] else 'goal'} "
                             "is a wall cell")
        parent: dict[Cell, Cell | None] = {start: None}
        frontier = deque([start])
        while frontier:
            cell = frontier.pop() if solver == "dfs" else frontier.popleft()
            if cell == goal:
                break
            i, j = cell
            for step in ((i, j + 1), (i, j - 1), (i - 1, j), (i + 1, j)):
                if 0 <= step[0] < self.height and 0 <= step[1] < self.width and self.free[step] \
                        and step not in parent:
                    parent[step] = cell
                    frontier.append(step)
        if goal not in parent:
            raise ValueError(f"cell {goal} cannot be reached from {start} in this maze")
        path: list[Cell] = []
        cell: Cell | None = goal
        while cell is not None:
            path.append(cell)
            cell = parent[cell]
        return path[::-1]


class WaypointController:
    """The PD waypoint follower of the module docstring, for one env.

    Args:
        grid: the maze.
        rng: draws the waypoint jitter.
        solver: ``"bfs"`` or ``"dfs"`` (``MazeGrid.path``).
        p_gain, d_gain: ``a = p_gain * (w - x) - d_gain * v`` (D4RL/Minari: 10 and 1).
        threshold: distance at which the next waypoint becomes the target (0.1).
        jitter: waypoints are cell centers minus ``U(0, 1) * jitter`` per axis (0.2).
    """

    def __init__(self, grid: MazeGrid, rng: np.random.Generator, solver: str = "bfs", p_gain: float = 10.0,
                 d_gain: float = 1.0, threshold: float = 0.1, jitter: float = 0.2):
        self.grid, self.rng, self.solver = grid, rng, solver
        self.p_gain, self.d_gain, self.threshold, self.jitter = p_gain, d_gain, threshold, jitter
        self.goal: np.ndarray | None = None
        self.waypoints: list[np.ndarray] = []
        self.current = 0

    def plan(self, position: np.ndarray, goal: np.ndarray) -> None:
        path = self.grid.path(self.grid.cell_of(position), self.grid.cell_of(goal), self.solver)
        self.waypoints = [self.grid.center(cell) - self.rng.uniform(size=2) * self.jitter for cell in path[1:-1]]
        self.waypoints.append(np.array(goal, dtype=np.float64))
        self.goal = np.array(goal, dtype=np.float64)
        self.current = 0

    def act(self, obs: np.ndarray) -> np.ndarray:
        """``obs [8]`` (flattened PointMaze observation) -> unclipped, noise-free action ``[2]``."""
        position, velocity, goal = obs[ACHIEVED], obs[VELOCITY], obs[GOAL]
        if self.goal is None or np.linalg.norm(goal - self.goal) > 1e-3:
            self.plan(position, goal)
        if self.current < len(self.waypoints) - 1 and \
                np.linalg.norm(self.waypoints[self.current] - position) <= self.threshold:
            self.current += 1
        return self.p_gain * (self.waypoints[self.current] - position) - self.d_gain * velocity


class BatchController:
    """One ``WaypointController`` per env, with optional Gaussian action noise, clipped to [-1, 1].

    ``act(obs [N, 8]) -> (actions [N, 2], clipped [N])``: ``clipped`` flags actions that the clip changed.
    """

    def __init__(self, grid: MazeGrid, num_envs: int, seed: int, noise_std: float = 0.0, solver: str = "bfs",
                 **gains: float):
        self.rng = np.random.default_rng(seed)
        self.controllers = [WaypointController(grid, self.rng, solver, **gains) for _ in range(num_envs)]
        self.noise_std = noise_std

    def act(self, obs: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
        raw = np.stack([controller.act(row) for controller, row in zip(self.controllers, obs)])
        if self.noise_std > 0:
            raw = raw + self.rng.normal(0.0, self.noise_std, size=raw.shape)
        actions = np.clip(raw, -1.0, 1.0)
        return actions, np.any(actions != raw, axis=1)
