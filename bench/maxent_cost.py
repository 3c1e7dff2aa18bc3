"""Issue 30's cost target: the maximum-entropy learners' time per env step against SAC's, side by side.

The rows are ``bench/learning.py maxent``'s jobs, as those 300k-step runs train: SAC (``+experiment=sac``,
compiled as configured), SAC with the normalizing-flow head, MEow (``+experiment=meow`` at the authors'
per-task settings) and MaxEntDP at its CPU-sized setting (``MAXENTDP_CPU``), on HalfCheetah-v5 and Hopper-v5.
Each is built as ``genpol.train`` builds it and trained through ``OffPolicyRunner.iterate``
(``bench/sac_throughput.GenpolLearner``): one env, acting, env stepping, replay and one gradient step per env
step. Every row is warmed up first (its random-action phase, then 50 learning steps: compilation happens
there), then ``--rounds`` rounds time ``--steps`` env steps of every row in alternating order. Reported per
row: the median ms per env step (wall and CPU) and the median over rounds of its ratio to SAC's in the same
round. One torch thread; pin the process to a core (``taskset -c 0``) and keep the other quiet or busy
with one job, and say which.

    taskset -c 0 python bench/maxent_cost.py [--envs halfcheetah hopper] [--rounds 5] [--steps 50]

Writes ``bench/results/maxent_cost.json`` and prints a Markdown table.
"""

from __future__ import annotations

import argparse
import os
import statistics
from typing import Any

from common import date_stamp, load_average, machine, write_results
from learning import SUITES
from sac_throughput import GenpolLearner

ROWS = {"SAC": "sac", "SAC, normalizing-flow head": "flow-sac", "MEow": "meow", "MaxEntDP (CPU-sized)": "maxentdp-cpu"}


def job_overrides(env: str, job: str) -> list[str]:
    """``bench/learning.py``'s ``maxent`` job ``<env>-<job>`` without its ``env=`` (passed separately)."""
    return [item for item in SUITES["maxent"][f"{env}-{job}"] if not item.startswith("env=")]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--envs", nargs="+", default=["halfcheetah", "hopper"], choices=["halfcheetah", "hopper"])
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=50, help="env steps per row per round")
    args = parser.parse_args()

    results: dict[str, Any] = {"benchmark": "maxent_cost", "date": date_stamp(), "machine": machine(),
                               "load_average_before": load_average(), "cores": sorted(os.sched_getaffinity(0)),
                               "rounds": args.rounds, "steps": args.steps,
                               "rows": {}}
    for env in args.envs:
        learners = {}
        for label, job in ROWS.items():
            learners[label] = GenpolLearner(job_overrides(env, job), threads=1, steps=args.steps, env_group=env)
            print(f"[{env}] {label}: warmed up in {learners[label].warmup_s:.1f} s", flush=True)
        segments: dict[str, list[dict[str, float]]] = {label: [] for label in learners}
        for round_index in range(args.rounds):
            order = list(learners) if round_index % 2 == 0 else list(learners)[::-1]
            for label in order:
                segments[label].append(learners[label].segment())
            print(f"[{env}] round {round_index + 1}: " + ", ".join(
                f"{label} {segments[label][-1]['wall_s'] / segments[label][-1]['env_steps'] * 1e3:.1f}"
                for label in learners) + " ms per env step", flush=True)
        for label, runs in segments.items():
            ms = [run["wall_s"] / run["env_steps"] * 1e3 for run in runs]
            cpu_ms = [run["cpu_s"] / run["env_steps"] * 1e3 for run in runs]
            sac_ms = [run["wall_s"] / run["env_steps"] * 1e3 for run in segments["SAC"]]
            results["rows"][f"{env}/{label}"] = {
                "job": f"{env}-{ROWS[label]}", "overrides": job_overrides(env, ROWS[label]),
                "ms_per_env_step": statistics.median(ms), "cpu_ms_per_env_step": statistics.median(cpu_ms),
                "over_sac": statistics.median(a / b for a, b in zip(ms, sac_ms)), "rounds_ms": ms,
                "warmup_s": learners[label].warmup_s, "compile": learners[label].settings["compile"]}
    results["load_average_after"] = load_average()
    write_results("maxent_cost.json", results)
    print("| env | learner | ms per env step (wall) | CPU ms | / SAC (same round) |")
    print("|---|---|---|---|---|")
    for key, row in results["rows"].items():
        env, label = key.split("/")
        print(f"| {env} | {label} | {row['ms_per_env_step']:.1f} | {row['cpu_ms_per_env_step']:.1f} "
              f"| {row['over_sac']:.2f} |")


if __name__ == "__main__":
    main()
