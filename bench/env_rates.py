"""Raw stepping rates side by side (random actions, env-steps/s): gymnasium's SyncVectorEnv, genpol's
env stack with 1 and 2 worker processes, raw EnvPool with 1 and 2 threads (synchronous, and
asynchronous with twice the envs of a batch), and genpol's EnvPool backend; for HalfCheetah-v5 and
dm_control cheetah-run (genpol's dmc backend vs EnvPool's CheetahRun-v1).

    python bench/env_rates.py                 # x8 and x32, 3 s per row, 2 interleaved rounds

Writes ``bench/results/env_rates.json``. Rows interleave in rounds and the table reports each row's
median, since rates on a shared machine drift between rows.
"""

from __future__ import annotations

import argparse
import statistics
import time
from typing import Callable

import numpy as np
import torch

from common import date_stamp, machine, write_results


def timed(step: Callable[[], None], batch: int, seconds: float) -> float:
    """Env-steps/s of calling ``step`` (which advances ``batch`` envs) for about ``seconds``."""
    for _ in range(5):
        step()
    calls, start = 0, time.perf_counter()
    while time.perf_counter() - start < seconds:
        for _ in range(10):
            step()
        calls += 10
    return calls * batch / (time.perf_counter() - start)


def gymnasium_sync(task: str, n: int, seconds: float) -> float:
    import gymnasium as gym

    env = gym.vector.SyncVectorEnv([lambda: gym.make(task) for _ in range(n)])
    env.reset(seed=0)
    rng = np.random.default_rng(0)
    rate = timed(lambda: env.step(rng.uniform(-1, 1, env.action_space.shape)), n, seconds)
    env.close()
    return rate


def genpol_stack(env_id: str, n: int, seconds: float, workers: int = 1) -> float:
    from genpol import envs

    env = envs.make(env_id, num_envs=n, seed=0, workers=workers)
    env.reset()
    generator = torch.Generator().manual_seed(0)
    rate = timed(lambda: env.step(torch.rand(n, env.act_dim, generator=generator) * 2 - 1), n, seconds)
    env.close()
    return rate


def envpool_raw(task: str, n: int, seconds: float, threads: int, asynchronous: bool = False) -> float:
    """EnvPool directly. Asynchronous: 2n envs, batches of n; each ``recv`` returns the n envs that
    finished first while the others keep stepping (the mode that overlaps policy and simulation)."""
    import envpool

    num_envs = 2 * n if asynchronous else n
    env = envpool.make(task, env_type="gymnasium", num_envs=num_envs, batch_size=n, num_threads=threads, seed=0)
    act_dim = env.action_space.shape[0]
    rng = np.random.default_rng(0)
    if not asynchronous:
        env.reset()
        rate = timed(lambda: env.step(rng.uniform(-1, 1, (n, act_dim))), n, seconds)
    else:
        env.async_reset()

        def step() -> None:
            info = env.recv()[-1]
            env.send(rng.uniform(-1, 1, (n, act_dim)), info["env_id"])

        rate = timed(step, n, seconds)
    env.close()
    return rate


def rows(n: int, seconds: float) -> dict[str, Callable[[], float]]:
    return {
        "HalfCheetah-v5 | gymnasium SyncVectorEnv": lambda: gymnasium_sync("HalfCheetah-v5", n, seconds),
        "HalfCheetah-v5 | genpol gym, 1 process": lambda: genpol_stack("gym:HalfCheetah-v5", n, seconds),
        "HalfCheetah-v5 | genpol gym, env.workers=2": lambda: genpol_stack("gym:HalfCheetah-v5", n, seconds, 2),
        "HalfCheetah-v5 | EnvPool sync, 1 thread": lambda: envpool_raw("HalfCheetah-v5", n, seconds, 1),
        "HalfCheetah-v5 | EnvPool sync, 2 threads": lambda: envpool_raw("HalfCheetah-v5", n, seconds, 2),
        "HalfCheetah-v5 | EnvPool async, 2 threads": lambda: envpool_raw("HalfCheetah-v5", n, seconds, 2, True),
        "HalfCheetah-v5 | genpol envpool (default threads)": lambda: genpol_stack("envpool:HalfCheetah-v5", n, seconds),
        "cheetah-run | genpol dmc, 1 process": lambda: genpol_stack("dmc:cheetah-run", n, seconds),
        "cheetah-run | genpol dmc, env.workers=2": lambda: genpol_stack("dmc:cheetah-run", n, seconds, 2),
        "cheetah-run | EnvPool sync, 2 threads": lambda: envpool_raw("CheetahRun-v1", n, seconds, 2),
        "cheetah-run | genpol envpool (default threads)": lambda: genpol_stack("envpool:CheetahRun-v1", n, seconds),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[8, 32])
    parser.add_argument("--seconds", type=float, default=3.0)
    parser.add_argument("--rounds", type=int, default=2)
    args = parser.parse_args()
    torch.set_num_threads(1)
    samples: dict[str, dict[int, list[float]]] = {}
    for _ in range(args.rounds):
        for n in args.batches:
            for name, run in rows(n, args.seconds).items():
                samples.setdefault(name, {}).setdefault(n, []).append(run())
    medians = {name: {n: statistics.median(values) for n, values in by_n.items()} for name, by_n in samples.items()}
    print(f"{'stepper':52s}" + "".join(f"{'x' + str(n):>10s}" for n in args.batches))
    for name, by_n in medians.items():
        print(f"{name:52s}" + "".join(f"{by_n[n]:10.0f}" for n in args.batches))
    path = write_results("env_rates.json", {
        "benchmark": "env_rates", "date": date_stamp(), "machine": machine()["arch"], "seconds": args.seconds,
        "rounds": args.rounds, "median_env_steps_per_s": medians, "samples": samples})
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
