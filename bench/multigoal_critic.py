"""Why SAC's flow loses a MultiGoal lobe: its start-state actions beside its own critic's soft-optimal policy
(issue 30; docs/benchmarks.md, "Why SAC's flow loses a goal").

For runs of ``bench/multigoal.py``'s SAC rows (fixed temperature alpha), at the start state s0 = (0, 0):

* the policy: its 2000 start-state actions (``goal_coverage``, as the rows measure them);
* the critic's Boltzmann policy p_Q(a) proportional to exp(min_i Q_i(s0, a) / alpha) on a 161 x 161 grid of
  the [-1, 1]^2 action box: what SAC's policy step fits its head to (a reverse KL, with the actor's minimum
  over the two critics). Evaluating it on the box's grid is exact up to the grid; the head's own squashing
  only changes how it parameterizes that box.

Both as densities over the action's direction, and as each goal's share within 25 degrees. A goal whose
share is ~0 under p_Q is the critic's miss (the policy is faithful to it); a goal p_Q weighs but the policy
drops is the policy step's.

    python bench/multigoal_critic.py            # the runs of the docs' figure (trains any that is missing)
    python bench/multigoal_critic.py --runs "sac normalizing_flow alpha2.5 softlearning:10"

Prints a table, writes ``bench/results/multigoal_critic.json`` and the figure ``docs/images/multigoal_critic.png``.
"""

from __future__ import annotations

import argparse

import numpy as np
import torch

from common import ROOT, date_stamp, machine, write_results
from multigoal import GOAL_DIRECTIONS, HEADS, final_critic, row_run_dir, train_row

FIGURE = ROOT / "docs" / "images" / "multigoal_critic.png"
GRID = 161  # actions per side of the [-1, 1] box
LOBE_DEGREES = 25.0
# (row, seed): a goal lost with the default 1000 warm-up steps; all four kept at 5000 (a fresh seed) with
# lobes below the target; the optimum's temperature 1, where one goal is lost even with the warm-up
DEFAULT_RUNS = [("sac normalizing_flow alpha2.5 softlearning", 10),
                ("sac normalizing_flow alpha2.5 softlearning 5k warm-up", 15),
                ("sac normalizing_flow alpha1 softlearning 5k warm-up", 12)]


def angle_of(actions: np.ndarray) -> np.ndarray:
    """``[N, 2] -> [N]`` directions in degrees, (-180, 180]."""
    return np.degrees(np.arctan2(actions[:, 1], actions[:, 0]))


def goal_shares(angles: np.ndarray, weights: np.ndarray) -> list[float]:
    """Each goal's share of ``weights`` within ``LOBE_DEGREES`` of its direction (goals in the env's order)."""
    shares = []
    for direction in GOAL_DIRECTIONS:
        goal = np.degrees(np.arctan2(direction[1], direction[0]))
        apart = np.abs((angles - goal + 180.0) % 360.0 - 180.0)
        shares.append(float(weights[apart <= LOBE_DEGREES].sum() / weights.sum()))
    return shares


def critic_policy(critic: torch.nn.Module, alpha: float) -> tuple[np.ndarray, np.ndarray]:
    """The grid's actions ``[G, 2]`` and p_Q's probabilities on them ``[G]`` at the start state."""
    axis = torch.linspace(-1.0, 1.0, GRID)
    actions = torch.cartesian_prod(axis, axis)
    with torch.no_grad():
        q = critic(torch.zeros(len(actions), 2), actions).min(dim=0).values
    weights = torch.softmax(q / alpha, dim=0)
    return actions.numpy(), weights.numpy()


def measure(row: str, seed: int) -> dict:
    from genpol.api import load_policy
    from genpol.multigoal_analysis import goal_coverage

    if HEADS[row][2] is None:  # the on-policy rows have no critic of actions
        raise SystemExit(f"{row}: needs a SAC row with a fixed temperature (learner.ent_coef)")
    train_row(row, seed, on_policy_steps=0)  # resumes or finds the finished run; SAC rows have their own steps
    run_dir = row_run_dir(row, seed)
    found = final_critic(run_dir)
    if found is None or found[1] is None:
        raise SystemExit(f"{row}: needs a SAC row with a fixed temperature (learner.ent_coef)")
    critic, alpha = found
    coverage = goal_coverage(load_policy(run_dir), episodes=100, seed=seed)
    grid, probabilities = critic_policy(critic, alpha)
    policy_angles = angle_of(coverage.start_actions)
    return {"row": row, "seed": seed, "alpha": alpha, "episodes_per_goal": coverage.goal_counts.tolist(),
            "policy_share_per_goal": goal_shares(policy_angles, np.ones(len(policy_angles))),
            "critic_policy_share_per_goal": goal_shares(angle_of(grid), probabilities),
            "_policy_angles": policy_angles, "_grid_angles": angle_of(grid), "_probabilities": probabilities,
            "_start_actions": coverage.start_actions}


def draw(results: list[dict]) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    bins = np.linspace(-180, 180, 73)
    fig, axes = plt.subplots(2, len(results), figsize=(4.2 * len(results), 7.6), squeeze=False)
    for column, result in enumerate(results):
        ax = axes[0, column]
        actions = result["_start_actions"]
        ax.scatter(actions[:, 0], actions[:, 1], s=2, alpha=0.3)
        for direction in GOAL_DIRECTIONS:
            ax.plot([0, 1.2 * direction[0]], [0, 1.2 * direction[1]], color="black", lw=0.8)
        ax.add_patch(plt.Rectangle((-1, -1), 2, 2, fill=False, ls="--", color="gray"))
        ax.set_xlim(-1.6, 1.6), ax.set_ylim(-1.6, 1.6), ax.set_aspect("equal")
        name = result["row"].replace("sac normalizing_flow ", "").replace(" softlearning", "")
        ax.set_title(f"{name}, seed {result['seed']}\nepisodes per goal {result['episodes_per_goal']}", fontsize=9)
        ax = axes[1, column]
        ax.hist(result["_policy_angles"], bins=bins, density=True, alpha=0.5, label="policy's start actions")
        ax.hist(result["_grid_angles"], bins=bins, weights=result["_probabilities"], density=True,
                histtype="step", color="black", lw=1.5, label="critic's exp(Q / alpha)")
        for direction in GOAL_DIRECTIONS:
            ax.axvline(np.degrees(np.arctan2(direction[1], direction[0])), color="gray", lw=0.6, ls=":")
        ax.set_xlabel("direction of the start action (degrees; goals dotted)")
        ax.set_xlim(-180, 180)
        shares = ", ".join(f"{share:.2f}" for share in result["critic_policy_share_per_goal"])
        ax.set_title(f"critic's share per goal (25 deg): {shares}", fontsize=9)
        if column == 0:
            ax.legend(fontsize=8, loc="upper left")
    fig.suptitle("MultiGoal (soft Q-learning's task): SAC's flow at the start state "
                 "beside its critic's soft-optimal policy", fontsize=10)
    fig.tight_layout()
    FIGURE.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(FIGURE, dpi=80)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", nargs="+", help='"row:seed" pairs (default: the docs figure\'s three)')
    args = parser.parse_args()
    torch.set_num_threads(1)
    runs = [(item.rsplit(":", 1)[0], int(item.rsplit(":", 1)[1])) for item in args.runs] if args.runs else DEFAULT_RUNS
    results = [measure(row, seed) for row, seed in runs]
    print("| row | seed | episodes per goal | policy's share per goal (25 deg) | critic's exp(Q/alpha) share |")
    print("|---|---|---|---|---|")
    for result in results:
        policy = ", ".join(f"{share:.2f}" for share in result["policy_share_per_goal"])
        critic = ", ".join(f"{share:.2f}" for share in result["critic_policy_share_per_goal"])
        print(f"| {result['row']} | {result['seed']} | {result['episodes_per_goal']} | {policy} | {critic} |")
    draw(results)
    write_results("multigoal_critic.json", {"benchmark": "multigoal_critic", "date": date_stamp(),
                                            "machine": machine(), "grid": GRID, "lobe_degrees": LOBE_DEGREES,
                                            "runs": [{key: value for key, value in result.items()
                                                      if not key.startswith("_")} for result in results]})


if __name__ == "__main__":
    main()
