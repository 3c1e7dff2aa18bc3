"""Pipelined collection on EnvPool against EnvPool's raw rate, side by side (HalfCheetah-v5, x32).

Rows, interleaved in rounds in this one process (the machine is shared: quote ratios within a round):

* raw EnvPool, random actions: synchronous with 2 threads (the reference of every fraction) and with
  1 thread, and asynchronous (2 x 32 envs, batches of 32, 2 threads) (``bench/env_rates.py``'s stepper);
* genpol ``+experiment=ppo_fast_envpool`` collection (rollouts of 64 steps, no update in the timed
  part; ``ROWS``) in three loops: ``plain`` (the synchronous loop, ``step`` on every env),
  ``groups=1`` (pipelined: the critic and the storage overlap the simulation of the whole batch) and
  ``groups=2`` (pipelined: the policy acts for one group while the other simulates; the threads are
  shared out between the two pools), with EnvPool's 2 threads, and with 1 (a core left to the policy).

Per collection row: env-steps/s, its fraction of the raw synchronous rate measured in the same
round, the full training rate with one PPO update per rollout (and its fraction), and the overlap:
per env step of the batch, the time this thread waits inside EnvPool (``recv``), the main-thread
work ``W`` (the rest), of which the policy ``P`` (``act``: head sampling and critic), and
``hidden = 1 - (T - E) / W``: the part of the main thread's work that did not lengthen the step,
where ``T`` is the row's step time and ``E`` the simulator wait of the synchronous loop with the same
threads in the same round (0 for the synchronous loop by construction, 1 if the work cost nothing).
On a machine whose cores are all busy, ``W`` includes time this thread spent descheduled.
Peak RSS of the process (``ru_maxrss``) and each row's RSS growth when built are recorded.

    python bench/pipeline.py [--rounds 30] [--rollouts 1]     # about a minute

Rounds are short (a rollout is ~0.1 s) so that the rows of one round see the same machine; the
table gives medians over rounds of each round's own ratios.

Writes ``bench/results/pipeline.json``.
"""

from __future__ import annotations

import argparse
import os
import resource
import statistics
import time
from pathlib import Path
from typing import Any

import torch

from common import date_stamp, machine, write_results
from env_rates import envpool_raw

NUM_ENVS = 32


def rss_mib() -> float:
    """The process's current resident set size in MiB."""
    return int(Path("/proc/self/statm").read_text().split()[1]) * os.sysconf("SC_PAGE_SIZE") / 2**20


class Timers:
    """Seconds spent in EnvPool's ``recv``/``step`` (waiting for the simulator), its ``send``, and
    ``act`` (whose pipelined form sends the actions from inside: ``send`` is subtracted)."""

    def __init__(self) -> None:
        self.wait = self.send = self.act = 0.0

    def wrap(self, obj: Any, name: str, field: str) -> None:
        inner = getattr(obj, name)

        def timed(*args: Any, **kwargs: Any) -> Any:
            start = time.perf_counter()
            try:
                return inner(*args, **kwargs)
            finally:
                setattr(self, field, getattr(self, field) + time.perf_counter() - start)

        setattr(obj, name, timed)


ROWS = {  # name: (env.step_groups, EnvPool threads in all); step_groups=0 is the synchronous loop
    "plain, 2 threads": (0, 2),
    "groups=1, 2 threads": (1, 2),
    "groups=2, 2 threads": (2, 2),
    "plain, 1 thread": (0, 1),
    "groups=1, 1 thread": (1, 1),
}


def build(groups: int, threads: int) -> tuple[Any, Timers]:
    from genpol.envs.core import innermost
    from genpol.algorithms import make_algorithm
    from genpol.api import compose_config
    from genpol.build import env_stack, make_env, make_head
    from genpol.configure import validate
    from genpol.runners.onpolicy import OnPolicyRunner

    cfg = validate(compose_config(["run_dir=/tmp/unused", "+experiment=ppo_fast_envpool", f"env.step_groups={groups}",
                                   f"env.kwargs.num_threads={threads}"]))
    torch.manual_seed(0)
    env = make_env(cfg.env, gamma=cfg.learner.gamma, seed=0, device="cpu", stack=env_stack(cfg.policy))
    algorithm = make_algorithm(cfg, make_head(cfg.policy, env.obs_dim, env.act_dim), env)
    runner = OnPolicyRunner(env, algorithm, total_steps=cfg.learner.rollout_steps * NUM_ENVS)
    runner.run()  # one rollout and update: compilation and warm-up
    timers = Timers()
    for pool in innermost(env)._pools:
        timers.wrap(pool, "recv", "wait")
        timers.wrap(pool, "step", "wait")  # the one-env reset steps after episode ends
        timers.wrap(pool, "send", "send")
    timers.wrap(algorithm, "act_pending", "act")
    return runner, timers


def measure(runner: Any, timers: Timers, rollouts: int) -> dict[str, float]:
    timers.wait = timers.send = timers.act = 0.0
    steps, start = 0, time.perf_counter()
    for _ in range(rollouts):
        steps += runner.collect()
        runner.algorithm.storage.reset()
    collect = time.perf_counter() - start
    start = time.perf_counter()
    runner.algorithm.update()
    update = time.perf_counter() - start
    batches = steps / NUM_ENVS
    policy = timers.act - timers.send if runner.env.step_groups else timers.act  # pipelined act sends inside
    return {"sps": steps / collect, "train_sps": steps / (collect + rollouts * update),
            "step_ms": 1e3 * collect / batches, "wait_ms": 1e3 * timers.wait / batches,
            "work_ms": 1e3 * (collect - timers.wait) / batches, "policy_ms": 1e3 * policy / batches,
            "update_ms": 1e3 * update}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=30)
    parser.add_argument("--rollouts", type=int, default=1, help="timed rollouts (64 x 32 steps) per row per round")
    parser.add_argument("--seconds", type=float, default=0.2, help="per raw row per round")
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows: dict[str, Any] = {}
    for name, (groups, threads) in ROWS.items():
        before = rss_mib()
        rows[name] = build(groups, threads)
        rows[name] += (rss_mib() - before,)
    samples: dict[str, list[dict[str, float]]] = {"raw sync, 2 threads": [], "raw sync, 1 thread": [],
                                                  "raw async, 2 threads": [], **{name: [] for name in rows}}
    loads = []
    for round_index in range(args.rounds):
        load_before = os.getloadavg()[0]
        raw = envpool_raw("HalfCheetah-v5", NUM_ENVS, args.seconds, 2)
        samples["raw sync, 2 threads"].append({"sps": raw, "step_ms": 1e3 * NUM_ENVS / raw})
        samples["raw sync, 1 thread"].append({"sps": envpool_raw("HalfCheetah-v5", NUM_ENVS, args.seconds, 1)})
        samples["raw async, 2 threads"].append({"sps": envpool_raw("HalfCheetah-v5", NUM_ENVS, args.seconds, 2, True)})
        names = list(rows)
        for name in names[round_index % len(names):] + names[:round_index % len(names)]:  # rotate the order
            runner, timers, _ = rows[name]
            sample = measure(runner, timers, args.rollouts)
            sample["fraction_of_raw"] = sample["sps"] / raw
            sample["train_fraction_of_raw"] = sample["train_sps"] / raw
            samples[name].append(sample)
        for name, (_, threads) in ROWS.items():  # against the synchronous loop's simulator wait, this round
            sample, synchronous = samples[name][-1], samples[f"plain, {threads} thread{'s' * (threads > 1)}"][-1]
            sample["hidden"] = 1 - (sample["step_ms"] - synchronous["wait_ms"]) / sample["work_ms"]
        loads.append((load_before, os.getloadavg()[0]))
    medians = {name: {key: statistics.median(s[key] for s in runs) for key in runs[0]}
               for name, runs in samples.items()}
    for name, (_, _, rss_growth) in rows.items():
        medians[name]["rss_growth_mib"] = rss_growth
    print(f"load average (1 min) per round: {[f'{a:.1f}-{b:.1f}' for a, b in loads]}")
    print(f"{'row':22s} {'env-steps/s':>11s} {'of raw':>7s} {'train':>7s} {'step':>6s} {'wait':>6s} {'work':>6s} "
          f"{'policy':>6s} {'hidden':>6s}  (medians; ms per step of 32 envs)")
    for name, m in medians.items():
        if "work_ms" not in m:
            print(f"{name:22s} {m['sps']:11.0f}")
            continue
        print(f"{name:22s} {m['sps']:11.0f} {m['fraction_of_raw']:7.2f} {m['train_fraction_of_raw']:7.2f} "
              f"{m['step_ms']:6.3f} {m['wait_ms']:6.3f} {m['work_ms']:6.3f} {m['policy_ms']:6.3f} "
              f"{m['hidden']:6.2f}")
    peak = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    print(f"peak RSS {peak:.0f} MiB")
    host = machine()
    path = write_results("pipeline.json", {
        "benchmark": "pipeline", "env": "HalfCheetah-v5", "num_envs": NUM_ENVS,
        "rows": {name: dict(zip(("step_groups", "threads"), spec)) for name, spec in ROWS.items()},
        "rounds": args.rounds, "rollouts": args.rollouts, "date": date_stamp(),
        "machine": f"{host['arch']}, {host['cores']} cores", "load_average_per_round": loads,
        "peak_rss_mib": peak, "medians": medians,
        "per_round": {name: {key: [round(s[key], 4) for s in runs] for key in ("sps", "fraction_of_raw")
                             if key in runs[0]} for name, runs in samples.items()}}, indent=1)
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
