#!/usr/bin/env bash
# The PointMaze Medium dataset of the EXPO/RLPD maze benchmark (ALGORITHMS.md §13c): 200k transitions of
# goal-to-goal segments from a BFS grid planner + PD waypoint controller (p 10, d 1, waypoint jitter 0.2,
# action noise N(0, 0.5^2)) in PointMaze_Medium-v3 (continuing_task, reset_target), in D4RL HDF5 and Minari.
# D4RL's maze2d-medium has 2M transitions and Minari's pointmaze/medium-v2 1M; this one is smaller, to fit a
# 2-core machine (about 40 s of CPU). Train on it with env=pointmaze_medium dataset.path=data/pointmaze_medium-v3.hdf5;
# normalized scores use Minari's D4RL/pointmaze/medium-v2 reference returns (17.66 / 361.05).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
mkdir -p data
# the collection refuses to overwrite either output (runs may resume from them): a remake deletes both first
rm -rf data/minari/genpol/pointmaze/medium-v0 data/pointmaze_medium-v3.hdf5
$PY -m genpol.data.maze_dataset --env PointMaze_Medium-v3 --steps 200000 --num-envs 8 --seed 0 \
    --eval-episodes 100 --d4rl data/pointmaze_medium-v3.hdf5 \
    --minari genpol/pointmaze/medium-v0 --minari-root data/minari "$@"
