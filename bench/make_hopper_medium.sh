#!/usr/bin/env bash
# The "medium" Hopper-v5 dataset of the rlpd learning suite: a Gaussian PPO policy trained for 400k
# steps (+experiment=ppo_mujoco, std 1 as recommended for Hopper), rolled out stochastically for
# 100k transitions in D4RL HDF5 (D4RL's hopper-medium is 1M transitions of a policy at about a
# third of expert return; this one is smaller, to fit a 2-core machine).
set -euo pipefail
cd "$(dirname "$0")/.."
PY=${PY:-.venv/bin/python}
if [ ! -f runs/hopper_ppo_medium/summary.json ]; then
  $PY -m genpol.train +experiment=ppo_mujoco env=hopper policy.log_std_init=0 env.workers=1 total_steps=400000 \
      pipeline.video=false logger.progress_bar=false run_dir=runs/hopper_ppo_medium
fi
mkdir -p data
[ -f data/hopper_medium-v5.hdf5 ] || $PY -m genpol.data.collect --policy runs/hopper_ppo_medium --env gym:Hopper-v5 --steps 100000 --num-envs 8 \
    --d4rl data/hopper_medium-v5.hdf5
