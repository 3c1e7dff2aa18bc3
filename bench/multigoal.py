"""MultiGoal multimodality: Gaussian vs FPO vs FPO++ vs PolicyFlow with the same budget.

The flow heads run twice: with their papers' settings, and with the Brownian regularizer strong
enough to keep the modes (PolicyFlow ``brownian_coef`` 0.05 instead of 0.01; FPO++ with genpol's
port of it at 0.1; FPO itself has none).

Each head trains for ``--steps`` env steps (16 envs x 128-step rollouts), then 100 stochastic
episodes are rolled out. Reported per head: goals reached (of 4), episodes per goal, the angular
entropy of 2000 actions sampled at the start state (log 16 = 2.77 uniform, log 4 = 1.39 four
modes), mean return, and env-steps/s. Writes ``bench/results/multigoal.json`` and
``bench/results/multigoal.png`` (trajectories, and the action distribution at the origin).

    python bench/multigoal.py [--steps 61440] [--seeds 0 1 2 3]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from common import RESULTS, RUNS, date_stamp, write_results

COMMON = ["learner.rollout_steps=128", "pipeline.video=false", "logger.progress_bar=false", "pipeline.eval_episodes=20"]
HEADS = {
    "gaussian": ("gaussian", ["learner.minibatch_size=256"]),
    "fpo": ("fpo", ["learner.minibatch_size=256"]),
    "fpo++": ("fpo", ["learner.minibatch_size=256", "policy.ratio_mode=per_sample", "learner=aspo"]),
    "fpo++ +brownian": ("fpo", ["learner.minibatch_size=256", "policy.ratio_mode=per_sample", "learner=aspo",
                                "policy.brownian_coef=0.1"]),
    "policyflow": ("policyflow", ["+experiment=policyflow"]),
    "policyflow +brownian": ("policyflow", ["+experiment=policyflow", "policy.brownian_coef=0.05"]),
}


def main() -> None:
    from genpol.api import load_policy, train
    from genpol.multigoal_analysis import goal_coverage

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=61_440)
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    args = parser.parse_args()
    torch.set_num_threads(1)

    results, coverages = {}, {}
    for name, (policy, overrides) in HEADS.items():
        for seed in args.seeds:
            run_dir = RUNS / "multigoal" / f"{name.replace(' +', '-')}-s{seed}"
            summary = train(env="multigoal", policy=policy, total_steps=args.steps, run_dir=run_dir, seed=seed,
                            overrides=[*COMMON, *overrides])
            coverage = goal_coverage(load_policy(run_dir), episodes=100, seed=seed)
            coverages[(name, seed)] = coverage
            results[f"{name}-s{seed}"] = {"head": name, "seed": seed,
                "goals_reached": int((coverage.goal_counts > 0).sum()),
                "goals_covered_2pct": coverage.goals_covered(0.02),
                "episodes_per_goal": coverage.goal_counts.tolist(),
                "angular_entropy_at_start": coverage.angular_entropy,
                "stochastic_return": coverage.mean_return,
                "deterministic_eval_return": summary["eval_return_mean"],
                "sps": summary["sps"],
            }
            print(f"{name:20s} seed {seed}: goals {coverage.goal_counts.tolist()}, angular entropy "
                  f"{coverage.angular_entropy:.2f}, return {coverage.mean_return:.1f}, SPS {summary['sps']:.0f}",
                  flush=True)
    write_results("multigoal.json", {"benchmark": "multigoal", "steps": args.steps, "date": date_stamp(),
                                     "runs": results})
    plot(coverages, args.seeds[0], RESULTS / "multigoal.png")


def plot(coverages: dict, seed: int, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = np.array(["tab:red", "tab:green", "tab:blue", "tab:purple", "lightgray"])
    fig, axes = plt.subplots(2, len(HEADS), figsize=(4 * len(HEADS), 8))
    for column, name in enumerate(HEADS):
        coverage = coverages[(name, seed)]
        ax = axes[0, column]
        trajectories = coverage.trajectories
        for episode in range(trajectories.shape[1]):
            xy = trajectories[:, episode]
            xy = xy[~np.isnan(xy[:, 0])]
            end = np.argmin(np.linalg.norm(np.array([[5, 0], [0, 5], [-5, 0], [0, -5]]) - xy[-1], axis=1))
            reached = np.linalg.norm(np.array([[5, 0], [0, 5], [-5, 0], [0, -5]])[end] - xy[-1]) < 0.5
            ax.plot(xy[:, 0], xy[:, 1], color=colors[end if reached else 4], alpha=0.4, lw=1)
        for goal in ([5, 0], [0, 5], [-5, 0], [0, -5]):
            ax.add_patch(plt.Circle(goal, 0.5, color="black", fill=False))
        ax.set_xlim(-6, 6), ax.set_ylim(-6, 6), ax.set_aspect("equal")
        ax.set_title(f"{name}: goals {coverage.goal_counts.tolist()}")
        ax = axes[1, column]
        actions = coverage.start_actions
        ax.scatter(actions[:, 0], actions[:, 1], s=2, alpha=0.3)
        ax.add_patch(plt.Rectangle((-1, -1), 2, 2, fill=False, ls="--", color="black"))  # what the env executes
        ax.set_xlim(-2.5, 2.5), ax.set_ylim(-2.5, 2.5), ax.set_aspect("equal")  # the env clips to [-1, 1]
        ax.set_title(f"actions at the origin (H_angle = {coverage.angular_entropy:.2f})\n"
                     "dashed: the [-1, 1] box the env clips to", fontsize=9)
    fig.suptitle(f"MultiGoal, 100 stochastic episodes per head, seed {seed}")
    fig.tight_layout()
    fig.savefig(path, dpi=90)
    plt.close(fig)


if __name__ == "__main__":
    main()
