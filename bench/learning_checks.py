"""Learning checks that left the CI suite for time, run here with more seeds.

Each check is a test that stood in ``tests/`` until 2026-12-02, at the same budget and threshold, now
over several seeds; CI keeps a faster check of the same learner (named per row). Runs are resumable
(``bench/runs/learning_checks/<check>-s<seed>``), one process at a time.

* ``consistency_ac_online``: ``learner=consistency_ac`` with its CT term (bc_coef 1) from scratch on
  MultiGoal, 3000 env steps, 4 envs; the last iteration's training episodes return > 8 (random: 2.98).
  CI keeps the Q-loss-only run (``tests/test_qgradient.py::test_q_loss_only_from_scratch_learns_multigoal``).
* ``fpo++_brownian_goals``: FPO++ (per-sample ratio, ASPO) with the Brownian regularizer at 0.1, 61 440
  steps; 100 stochastic episodes end at >= 3 distinct goals (each >= 2 %) with mean return > 6. CI keeps
  PolicyFlow's (``tests/test_learning.py::test_flow_heads_reach_at_least_three_goals``);
  ``bench/multigoal.py`` reports every head's goals and entropy.

    python bench/learning_checks.py [--checks ...] [--seeds 0 1 2]

Writes ``bench/results/learning_checks.json``: per check and seed, the measured value and pass/fail.
"""

from __future__ import annotations

import argparse
from pathlib import Path
from typing import Any, Callable

from common import RUNS, date_stamp, machine, read_progress, train_once, write_results

QUIET = ["pipeline.video=false", "logger.progress_bar=false"]


def last_training_return(run_dir: Path) -> dict[str, Any]:
    rows = read_progress(run_dir)
    return {"value": rows[-1]["charts/episodic_return"], "curve": [row.get("charts/episodic_return") for row in rows]}


def goal_coverage_of(run_dir: Path) -> dict[str, Any]:
    from genpol.api import load_policy
    from genpol.multigoal_analysis import goal_coverage

    coverage = goal_coverage(load_policy(run_dir), episodes=100, seed=0)
    return {"value": coverage.goals_covered(0.02), "mean_return": coverage.mean_return,
            "goal_counts": list(map(int, coverage.goal_counts))}


CHECKS: dict[str, dict[str, Any]] = {
    "consistency_ac_online": {
        "overrides": ["env=multigoal", "policy=consistency", "learner=consistency_ac", "total_steps=3000", *QUIET,
                      "pipeline.eval_episodes=4", "policy.hidden_sizes=[64,64,64]", "learner.critic_hidden_sizes=[64,64]",
                      "learner.learning_starts=200", "learner.iteration_steps=500", "learner.batch_size=128",
                      "learner.act_candidates=10", "env.num_envs=4"],
        "measure": last_training_return, "passes": lambda m: m["value"] > 8.0,
        "threshold": "last iteration's training return > 8"},
    "fpo++_brownian_goals": {
        "overrides": ["env=multigoal", "policy=fpo", "total_steps=61440", "learner.rollout_steps=128", *QUIET,
                      "pipeline.eval_episodes=10", "learner.minibatch_size=256", "policy.ratio_mode=per_sample",
                      "learner=aspo", "policy.brownian_coef=0.1"],
        "measure": goal_coverage_of, "passes": lambda m: m["value"] >= 3 and m["mean_return"] > 6.0,
        "threshold": ">= 3 goals (each >= 2 % of 100 episodes), mean return > 6"},
}


def run_check(name: str, seed: int) -> dict[str, Any]:
    check = CHECKS[name]
    run_dir = RUNS / "learning_checks" / f"{name}-s{seed}"
    train_once(run_dir, [*check["overrides"], f"seed={seed}"], echo=True)
    measure: Callable[[Path], dict[str, Any]] = check["measure"]
    measured = measure(run_dir)
    return {"check": name, "seed": seed, "threshold": check["threshold"], "passed": bool(check["passes"](measured)),
            **measured}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--checks", nargs="+", default=list(CHECKS), choices=list(CHECKS))
    parser.add_argument("--seeds", nargs="+", type=int, default=[0, 1, 2])
    args = parser.parse_args()
    rows = [run_check(name, seed) for name in args.checks for seed in args.seeds]
    write_results("learning_checks.json", {"date": date_stamp(), "machine": machine(), "rows": rows})
    print("| check | seed | value | passed |\n|---|---|---|---|")
    for row in rows:
        print(f"| {row['check']} | {row['seed']} | {row['value']:.2f} | {row['passed']} |")


if __name__ == "__main__":
    main()
