"""Simulator backends side by side: raw env-steps/s against batch size, and Gaussian PPO training
throughput as a fraction of raw stepping, for gymnasium (HalfCheetah-v5), dm_control (cheetah-run)
and MuJoCo Playground (CheetahRun, MJX).

Raw stepping uses uniform random actions through the full ``genpol.envs.make`` stack (torch tensors in
and out). Training uses genpol's fast configuration (64-64 networks, 64-step rollouts, minibatches
of 512, compiled minibatch steps) at one batch size per backend. Playground's compilation time is
reported separately and excluded from the rates.

    python bench/backends.py                               # CPU, this machine
    python bench/backends.py --device cuda --backends playground --batches 1024 4096 8192 \\
        --train-batch 4096                                  # the GPU check (bench/gpu_check.sh)

Writes ``bench/results/backends_<device>.json``.
"""

from __future__ import annotations

import argparse
import time

import torch

from common import date_stamp, machine, write_results

TASKS = {"gym": "gym:HalfCheetah-v5", "dmc": "dmc:cheetah-run", "playground": "playground:CheetahRun"}
GROUPS = {"gym": ["env=gym", "env.id=HalfCheetah-v5"], "dmc": ["env=dmc", "env.id=cheetah-run"],
          "playground": ["env=playground", "env.id=CheetahRun", "env.workers=1"]}


def raw_rate(env_id: str, num_envs: int, device: str, seconds: float = 3.0) -> tuple[float, float]:
    """(env-steps/s, seconds spent before the first step, i.e. construction and compilation)."""
    from genpol import envs

    start = time.perf_counter()
    env = envs.make(env_id, num_envs=num_envs, device=device, seed=0)
    env.reset()
    env.step(torch.zeros(num_envs, env.act_dim, device=device))
    setup = time.perf_counter() - start
    generator = torch.Generator(device=device).manual_seed(0)
    steps, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            env.step(torch.rand(num_envs, env.act_dim, device=device, generator=generator) * 2 - 1)
        steps += 10
    if device != "cpu":
        torch.cuda.synchronize()
    rate = steps * num_envs / (time.perf_counter() - start)
    env.close()
    return rate, setup


def training_rate(backend: str, num_envs: int, device: str, iterations: int) -> dict:
    from throughput import genpol_run

    overrides = ["+experiment=ppo_fast", *GROUPS[backend], f"env.num_envs={num_envs}", f"device={device}"]
    if device != "cpu":
        overrides += ["learner.rollout_steps=32", f"learner.minibatch_size={num_envs * 8}"]
    sps, detail = genpol_run(overrides, iterations)
    return {"sps": sps, **detail}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--backends", nargs="+", default=list(TASKS), choices=list(TASKS))
    parser.add_argument("--batches", type=int, nargs="+", default=None)
    parser.add_argument("--train-batch", type=int, default=None)
    parser.add_argument("--iterations", type=int, default=4)
    args = parser.parse_args()
    torch.set_num_threads(1)

    batches = {"gym": [1, 8, 32], "dmc": [1, 8, 32], "playground": [8, 64, 256]}
    train_batch = {"gym": 32, "dmc": 32, "playground": 256}
    rows = {}
    for backend in args.backends:
        row = {"env": TASKS[backend], "raw": {}, "setup_s": {}}
        for n in args.batches or batches[backend]:
            rate, setup = raw_rate(TASKS[backend], n, args.device)
            row["raw"][n], row["setup_s"][n] = rate, setup
            print(f"{TASKS[backend]:24s} x{n:<5d} raw {rate:9.0f} env-steps/s   (setup {setup:5.1f} s)", flush=True)
        n = args.train_batch or train_batch[backend]
        if n not in row["raw"]:
            row["raw"][n], row["setup_s"][n] = raw_rate(TASKS[backend], n, args.device)
        training = training_rate(backend, n, args.device, args.iterations)
        training["fraction_of_raw"] = training["sps"] / row["raw"][n]
        row["training"] = {"num_envs": n, **training}
        print(f"{TASKS[backend]:24s} x{n:<5d} Gaussian PPO {training['sps']:9.0f} env-steps/s = "
              f"{training['fraction_of_raw']:.2f} of raw", flush=True)
        rows[backend] = row
    out = {"benchmark": "backends", "device": args.device, "date": date_stamp(),
           "machine": machine()["processor"], "rows": rows}
    write_results(f"backends_{args.device.split(':')[0]}.json", out)


if __name__ == "__main__":
    main()
