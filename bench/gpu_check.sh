#!/usr/bin/env bash
# The GPU check, for the device machine (one H200): does the Playground backend run on CUDA, how fast
# is raw CheetahRun stepping at 1024 / 4096 / 8192 envs, and what fraction of it does Gaussian PPO
# training keep at 4096 envs (target >= 0.5)? Also: do env worker processes hand back CUDA tensors?
# About 5 minutes, most of it JAX compilation.
#
# That machine has jax (CUDA), torch and CUDA but no internet, and lacks playground, mujoco and
# genpol's other dependencies. Prepare the wheels here once with bench/fetch_gpu_wheels.sh (they go
# to .whl/, which git ignores), then run through the device tool with carry=[".whl"]:
#     bash bench/gpu_check.sh
# Results: bench/results/backends_cuda.json (and a copy in $OUT when the device tool sets it).
set -euo pipefail
cd "$(dirname "$0")/.."
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
export MUJOCO_GL=egl PYTHONUNBUFFERED=1 GENPOL_JAX_CACHE=/tmp/jax-cache
python3 -c "import jax, torch; print('jax', jax.__version__, jax.devices()); print('torch', torch.__version__, torch.cuda.get_device_name(0))"
# env worker processes (env.workers) step on the CPU and hand back tensors on the training device
python3 -c "
import torch, envs
env = envs.make('gym:HalfCheetah-v5', num_envs=4, workers=2, device='cuda', seed=0)
obs = env.reset()
out = env.step(torch.zeros(4, env.act_dim, device='cuda'))
assert obs.device.type == out[0].device.type == out[4]['final_obs'].device.type == 'cuda'
env.close()
print('env workers with cuda tensors: ok')"
python3 bench/backends.py --device cuda --backends playground --batches 1024 4096 8192 --train-batch 4096 --iterations 3
if [ -n "${OUT:-}" ]; then cp bench/results/backends_cuda.json "$OUT/"; fi
