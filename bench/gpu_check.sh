#!/usr/bin/env bash
# The GPU check, for the device machine (one H200): does the Playground backend run on CUDA, how fast
# is raw CheetahRun stepping at 1024 / 4096 envs, and what fraction of it does Gaussian PPO
# training keep at 4096 envs (target >= 0.5)? Also: do env worker processes hand back CUDA tensors?
# And what does RLPD's full recipe (10 LayerNorm critics, UTD 20, batch 256) cost per env step on
# CUDA, against 0.3-0.5 s on the 2-core CPU? And EXPO's (the same critics plus diffusion candidates)?
# And genpol's cost per env step beside the authors' code (authors-cost)?
# All checks together do not fit one 10-minute device call (GoRL's alone trains 6M encoder steps):
# pick with GPU_CHECKS="versions playground-cuda ..." (the names are the `check` lines below) and
# give each call its own budget. Playground's checks take about 5 minutes on a fresh machine, most
# of it JAX compilation (110 s per batch size cold). The torchrun-cuda, gorl-playground and
# expo-cuda checks have not run on a device yet (nor resume-cuda).
# Measured 2026-11-30 on an H200: docs/benchmarks.md, "Playground on a GPU".
#
# That machine has jax (CUDA), torch and CUDA but no internet, and lacks playground, mujoco and
# genpol's other dependencies. Prepare the wheels here once with bench/fetch_gpu_wheels.sh (they go
# to .whl/, which git ignores), then run through the device tool with carry=[".whl", ".gl"]:
#     bash bench/gpu_check.sh
# Results: bench/results/backends_cuda.json (and a copy in $OUT when the device tool sets it).
# Each check runs even when an earlier one failed (device time is scarce); the exit code counts failures.
set -uo pipefail
cd "$(dirname "$0")/.."
if [ -d .whl ] && ls .whl/*.whl >/dev/null 2>&1; then
    python3 -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade --target /tmp/site .whl/*.whl
    export PYTHONPATH=/tmp/site:$PWD
else
    export PYTHONPATH=$PWD
fi
if [ -d .gl ] && ls .gl/*.deb >/dev/null 2>&1; then  # libEGL for MuJoCo (bench/fetch_gpu_wheels.sh)
    for f in .gl/*.deb; do dpkg -x "$f" /; done
    ldconfig
    vendor=/usr/local/nvidia/share/glvnd/egl_vendor.d/10_nvidia.json
    if [ -f $vendor ]; then export __EGL_VENDOR_LIBRARY_FILENAMES=$vendor; fi
fi
export MUJOCO_GL=egl PYTHONUNBUFFERED=1 GENPOL_JAX_CACHE=/tmp/jax-cache
failures=0
check() {  # check NAME COMMAND...: run one check, time it, count it if it fails; GPU_CHECKS="a b" runs only those
    local name=$1 start=$SECONDS; shift
    if [ -n "${GPU_CHECKS:-}" ] && [[ " $GPU_CHECKS " != *" $name "* ]]; then return; fi
    echo "== $name"
    if "$@"; then echo "== $name: ok ($((SECONDS - start)) s)"; else echo "== $name: FAILED ($((SECONDS - start)) s)"; failures=$((failures + 1)); fi
}
check versions python3 -c "import jax, torch; print('jax', jax.__version__, jax.devices()); print('torch', torch.__version__, torch.cuda.get_device_name(0))"
# env worker processes (env.workers) step on the CPU and hand back tensors on the training device
check env-workers python3 -c "
import torch
from genpol import envs
env = envs.make('gym:HalfCheetah-v5', num_envs=4, workers=2, device='cuda', seed=0)
obs = env.reset()
out = env.step(torch.zeros(4, env.act_dim, device='cuda'))
assert obs.device.type == out[0].device.type == out[4]['final_obs'].device.type == 'cuda'
env.close()
print('env workers with cuda tensors: ok')"
# RLPD's full recipe on CUDA: 5000 random steps, then 300 learning steps; the last iterations' SPS
rlpd_cuda() ( set -e
python3 -m genpol.data.collect --policy random --env gym:Hopper-v5 --steps 2000 --num-envs 4 --d4rl /tmp/hopper_random.hdf5 >/dev/null
python3 -m genpol.train +experiment=rlpd env=hopper device=cuda dataset.path=/tmp/hopper_random.hdf5 total_steps=5300 \
    learner.iteration_steps=100 pipeline.video=false pipeline.eval_every=0 pipeline.eval_episodes=1 \
    logger.progress_bar=false run_dir=/tmp/rlpd_cuda >/dev/null
python3 -c "
import json
rows = [json.loads(l) for l in open('/tmp/rlpd_cuda/progress.jsonl')][-3:]
sps = [r['charts/SPS'] for r in rows]
print('RLPD full recipe on CUDA: env-steps/s', [round(v, 1) for v in sps], '-> ms per env step', round(1000 / max(sps), 1))
json.dump({'rlpd_full_recipe_cuda_sps': sps}, open('bench/results/rlpd_cuda.json', 'w'))"
)
check rlpd-cuda rlpd_cuda
if [ -n "${OUT:-}" ]; then cp bench/results/rlpd_cuda.json "$OUT/" 2>/dev/null; fi
# EXPO's full recipe on CUDA (10 LayerNorm critics of 256 x 3, UTD 20, a DDPM T = 10 base with 8 candidates
# and 8 edits for every next state of each minibatch): 5000 random steps, then 300 learning steps
expo_cuda() ( set -e
test -f /tmp/hopper_random.hdf5 || python3 -m genpol.data.collect --policy random --env gym:Hopper-v5 --steps 2000 \
    --num-envs 4 --d4rl /tmp/hopper_random.hdf5 >/dev/null
python3 -m genpol.train +experiment=expo env=hopper device=cuda dataset.path=/tmp/hopper_random.hdf5 total_steps=5300 \
    learner.iteration_steps=100 pipeline.video=false pipeline.eval_every=0 pipeline.eval_episodes=1 \
    logger.progress_bar=false run_dir=/tmp/expo_cuda >/dev/null
python3 -c "
import json
rows = [json.loads(l) for l in open('/tmp/expo_cuda/progress.jsonl')][-3:]
sps = [r['charts/SPS'] for r in rows]
print('EXPO full recipe on CUDA: env-steps/s', [round(v, 1) for v in sps], '-> ms per env step', round(1000 / max(sps), 1))
json.dump({'expo_full_recipe_cuda_sps': sps}, open('bench/results/expo_cuda.json', 'w'))"
)
check expo-cuda expo_cuda
if [ -n "${OUT:-}" ]; then cp bench/results/expo_cuda.json "$OUT/" 2>/dev/null; fi
check playground-cuda python3 bench/backends.py --device cuda --backends playground --batches 1024 4096 \
    --train-batch 4096 --iterations 3
if [ -n "${OUT:-}" ]; then cp bench/results/backends_cuda.json "$OUT/" 2>/dev/null; fi
# torchrun (NOT RUN on a device yet): one PPO run over every GPU with NCCL, each rank writing its
# final parameters (tests/dist_worker.py), which must be equal; with a single GPU (NCCL cannot put
# two ranks on one device) a 1-process torchrun on CUDA, and the 2-process gloo run on the CPU.
torchrun_cuda() ( set -e
ngpu=$(python3 -c "import torch; print(torch.cuda.device_count())")
tiny="env=hopper env.num_envs=8 learner.rollout_steps=64 learner.epochs=2 pipeline.video=false \
    pipeline.eval_episodes=1 logger.progress_bar=false logger.tensorboard=false"
compare() { python3 -c "
import glob, sys, torch
ranks = [torch.load(p, weights_only=True) for p in sorted(glob.glob(sys.argv[1] + '/train_rank*.pt'))]
same = all(torch.equal(r[part][k], ranks[0][part][k]) for r in ranks for part in ('head', 'critic') for k in r[part])
print(len(ranks), 'rank(s) on', sys.argv[2], '- steps', ranks[0]['global_step'], '- identical parameters:', same)
assert same" "$@"; }
rm -rf /tmp/torchrun_cuda /tmp/torchrun_cpu && mkdir -p /tmp/torchrun_cuda /tmp/torchrun_cpu
python3 -m torch.distributed.run --standalone --nproc_per_node="$ngpu" tests/dist_worker.py train /tmp/torchrun_cuda \
    device=cuda total_steps=$((ngpu * 8 * 64 * 3)) $tiny >/dev/null
compare /tmp/torchrun_cuda cuda
if [ "$ngpu" -lt 2 ]; then
    python3 -m torch.distributed.run --standalone --nproc_per_node=2 tests/dist_worker.py train /tmp/torchrun_cpu \
        device=cpu total_steps=$((2 * 8 * 64 * 3)) $tiny >/dev/null
    compare /tmp/torchrun_cpu cpu
fi
)
check torchrun-cuda torchrun_cuda
# Resume on CUDA (NOT RUN on a device yet): a PPO run (its head samples on the GPU's generator) trained to 3
# rollouts, and a copy stopped after the first and resumed: the final weights must be equal (and a CUDA policy's
# make_env steps with its actions). Before the training
# state saved the CUDA generators (2026-12-07), such a resume drew other noise than the uninterrupted run.
resume_cuda() ( set -e
tiny="env=pendulum device=cuda env.num_envs=4 learner.rollout_steps=64 learner.epochs=2 total_steps=768 \
    pipeline.checkpoint_every=1 pipeline.video=false pipeline.eval_episodes=1 logger.progress_bar=false"
rm -rf /tmp/resume_cuda && mkdir -p /tmp/resume_cuda
python3 -m genpol.train $tiny run_dir=/tmp/resume_cuda/whole >/dev/null
cp -r /tmp/resume_cuda/whole /tmp/resume_cuda/resumed && rm /tmp/resume_cuda/resumed/summary.json
rm -r /tmp/resume_cuda/resumed/checkpoints/step_000000000512 /tmp/resume_cuda/resumed/checkpoints/step_000000000768
python3 -m genpol.train $tiny run_dir=/tmp/resume_cuda/resumed >/dev/null
python3 -c "
import torch
from genpol.checkpoint import load_latest
(a, wa, sa), (b, wb, sb) = (load_latest(f'/tmp/resume_cuda/{run}/checkpoints') for run in ('whole', 'resumed'))
same = a.name == b.name and all(torch.equal(wa['head'][k], wb['head'][k]) for k in wa['head'])
print('resumed on cuda at', a.name, '- cuda generators saved:', 'cuda_rng' in sa, '- identical weights:', same)
assert same
from genpol.api import load_policy
policy = load_policy('/tmp/resume_cuda/whole', device='cuda')
env = policy.make_env()  # on the policy's device by default (it made a CPU env, whose rescaling failed on cuda actions)
env.step(policy.act(env.reset(seed=0)))
print('make_env on the policy device:', env.reset(seed=0).device)"
)
check resume-cuda resume_cuda
# GoRL (pipeline=gorl) on Playground HopperStand: 4 stages of encoder PPO at 2048 envs (6M encoder steps in
# all, 2:2:1:1), ~1M collection steps and a decoder fit (batch 8192) after stages 0-2, in one run dir. The
# paper's own schedule is 180M encoder steps (GoRL ~880 vs PPO ~300 at the end); this checks that the
# stages, the hand-offs and the summary work on CUDA and what the wall time per stage is. Not yet run.
gorl_playground() ( set -e
python3 -m genpol.train +experiment=gorl env=playground env.id=HopperStand device=cuda env.num_envs=2048 \
    total_steps=6000000 learner.rollout_steps=32 learner.minibatch_size=8192 pipeline.collect_steps=983040 \
    pipeline.decoder_batch_size=8192 pipeline.eval_every=5 pipeline.eval_episodes=64 pipeline.video=false \
    logger.progress_bar=false run_dir=/tmp/gorl_playground >/dev/null
python3 -c "
import json
s = json.load(open('/tmp/gorl_playground/summary.json'))
keep = ['encoder_env_steps', 'collection_env_steps', 'total_env_steps', 'eval_return_mean', 'wall_time_s']
out = {k: s[k] for k in keep}
out['stages'] = [{k: st.get(k) for k in ('encoder_env_steps', 'best_eval_return', 'decoder_best_val_loss')} for st in s['stages']]
print(json.dumps(out, indent=1))
json.dump(out, open('bench/results/gorl_cuda.json', 'w'), indent=1)"
)
check gorl-playground gorl_playground
if [ -n "${OUT:-}" ]; then cp bench/results/gorl_cuda.json "$OUT/" 2>/dev/null; fi
# genpol beside its authors' code, ms per env step on CUDA (bench/authors_cost.py; the 2-core CPU's numbers:
# bench/results/authors_cost.json). NOT RUN on a device yet. The snapshots travel in .ref/<owner>+<repo> (git
# clone them there; carry=[".whl", ".gl", ".ref"]). RLPD's and EXPO's JAX side runs with this python3 when it
# imports flax, optax, tensorflow_probability and ml_collections (bench/fetch_gpu_wheels.sh fetches them): on CUDA where this jax has it, else on jax's CPU backend, which the output and each
# JAX row's "device" then say; without those packages RLPD and EXPO are skipped, and the check goes on with DPPO.
# Consistency-AC's harness builds its learners on the CPU: not run here.
authors_cost() ( set -e
refs=()
if python3 -c "import flax, optax, tensorflow_probability, ml_collections" 2>/dev/null; then
    backend=$(python3 -c "import jax; print(jax.default_backend())")
    if [ "$backend" = gpu ]; then echo "authors' JAX side on CUDA"; else echo "authors' JAX side on jax's $backend backend (no CUDA in this jax): their rows are CPU-only"; fi
    if [ -d .ref/ikostrikov+rlpd ]; then refs+=(--ref-rlpd .ref/ikostrikov+rlpd); fi
    if [ -d .ref/Servo97+EXPO ]; then refs+=(--ref-expo .ref/Servo97+EXPO); fi
else
    echo "authors' JAX side: flax, optax, tensorflow_probability or ml_collections missing here: RLPD and EXPO skipped"
fi
if [ -d .ref/irom-lab+dppo ]; then refs+=(--ref-dppo .ref/irom-lab+dppo); fi
if [ ${#refs[@]} -eq 0 ]; then echo "no snapshot in .ref/: nothing to compare"; return 1; fi
python3 bench/authors_cost.py "${refs[@]}" --jax-python "$(command -v python3)" --device cuda --repeats 5 \
    --output authors_cost_cuda.json
)
check authors-cost authors_cost
if [ -n "${OUT:-}" ]; then cp bench/results/authors_cost_cuda.json "$OUT/" 2>/dev/null; fi
echo "gpu_check: $failures failed"
exit "$failures"
