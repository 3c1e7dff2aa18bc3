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
* ``updaters_multigoal-<learner>`` (ppo, ppo-adaptive-lr, spo, aspo, trpo): a Gaussian on MultiGoal, 40 960
  steps; deterministic evaluation and training episodes both > 10. CI runs the same at 20 480 steps
  (training episodes > 8; ``tests/test_learning.py::test_every_updater_learns_multigoal_with_a_gaussian``).
* ``fpo_multigoal``, ``fpo++_multigoal``: FPO, and FPO++ under ASPO, 40 960 steps; evaluation > 10. CI runs
  them at 20 480 and 30 720 steps (``test_flow_heads_learn_multigoal``).
* ``policyflow_goals``: PolicyFlow with the Brownian term at 0.05, 61 440 steps; >= 3 goals (each >= 2 % of
  100 stochastic episodes) with mean return > 10. CI: the same at 30 720 steps.
* ``consistency_ppo_goals``: PPO through the stochastic consistency sampler, 40 960 steps; evaluation and
  training episodes > 10 and >= 80 of 100 stochastic episodes at a goal. CI: 20 480 steps, training
  episodes and goals only (``tests/test_consistency_learning.py``).

    python bench/learning_checks.py [--checks ...] [--seeds 0 1 2]

Writes ``bench/results/learning_checks.json``: per check and seed, the measured value and pass/fail.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any, Callable

from common import RUNS, date_stamp, machine, read_progress, train_once, update_results

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


def returns_of(run_dir: Path) -> dict[str, Any]:
    """The summary's deterministic evaluation (``value``) and last training episodes' mean return."""
    summary = json.loads((run_dir / "summary.json").read_text())
    return {"value": summary["eval_return_mean"], "training_return": summary["episodic_return_mean"]}


def returns_and_goals_of(run_dir: Path) -> dict[str, Any]:
    return {**returns_of(run_dir), "reached": int(sum(goal_coverage_of(run_dir)["goal_counts"]))}


MULTIGOAL = ["env=multigoal", "learner.rollout_steps=128", *QUIET, "pipeline.eval_episodes=50"]
UPDATERS = {"ppo": ["learner.minibatch_size=256"],
            "ppo-adaptive-lr": ["learner.minibatch_size=256", "learner.lr_schedule=adaptive"],
            "spo": ["learner=spo", "learner.minibatch_size=256"], "aspo": ["learner=aspo", "learner.minibatch_size=256"],
            "trpo": ["learner=trpo"]}

CHECKS: dict[str, dict[str, Any]] = {
    **{f"updaters_multigoal-{name}": {
        "overrides": [*MULTIGOAL, "total_steps=40960", *extra], "measure": returns_of,
        "passes": lambda m: m["value"] > 10.0 and m["training_return"] > 10.0,
        "threshold": "evaluation and training episodes > 10"} for name, extra in UPDATERS.items()},
    "fpo_multigoal": {
        "overrides": [*MULTIGOAL, "policy=fpo", "total_steps=40960", "learner.minibatch_size=256"],
        "measure": returns_of, "passes": lambda m: m["value"] > 10.0, "threshold": "evaluation > 10"},
    "fpo++_multigoal": {
        "overrides": [*MULTIGOAL, "policy=fpo", "total_steps=40960", "learner.minibatch_size=256",
                      "policy.ratio_mode=per_sample", "learner=aspo"],
        "measure": returns_of, "passes": lambda m: m["value"] > 10.0, "threshold": "evaluation > 10"},
    "policyflow_goals": {
        "overrides": ["env=multigoal", "policy=policyflow", "total_steps=61440", "learner.rollout_steps=128", *QUIET,
                      "pipeline.eval_episodes=10", "+experiment=policyflow", "policy.brownian_coef=0.05"],
        "measure": goal_coverage_of, "passes": lambda m: m["value"] >= 3 and m["mean_return"] > 10.0,
        "threshold": ">= 3 goals (each >= 2 % of 100 episodes), mean return > 10"},
    "consistency_ppo_goals": {
        "overrides": [*MULTIGOAL, "policy=consistency", "total_steps=40960", "learner.minibatch_size=256",
                      "policy.hidden_sizes=[64,64,64]", "policy.critic_hidden_sizes=[64,64]",
                      "policy.critic_activation=tanh"],
        "measure": returns_and_goals_of,
        "passes": lambda m: m["value"] > 10.0 and m["training_return"] > 10.0 and m["reached"] >= 80,
        "threshold": "evaluation and training episodes > 10, >= 80 of 100 episodes at a goal"},
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

    def merge(old: dict[str, Any]) -> dict[str, Any]:  # keep the other checks' and seeds' rows
        measured = {(row["check"], row["seed"]) for row in rows}
        kept = [row for row in old.get("rows", []) if (row["check"], row["seed"]) not in measured]
        return {"date": date_stamp(), "machine": machine(), "rows": kept + rows}

    update_results("learning_checks.json", merge)
    print("| check | seed | value | passed |\n|---|---|---|---|")
    for row in rows:
        print(f"| {row['check']} | {row['seed']} | {row['value']:.2f} | {row['passed']} |")


if __name__ == "__main__":
    main()
