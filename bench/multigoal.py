"""MultiGoal multimodality: Gaussian vs FPO vs FPO++ vs PolicyFlow with the same budget, and SAC's
maximum-entropy objective with a tanh-Gaussian and with the normalizing-flow head, and MaxEntDP's diffusion
policy (scaled down to this CPU), and MEow's energy-based flow; the max-entropy rows also on soft
Q-learning's MultiGoal at a fixed temperature whose exact optimum meets issue 30's targets; the
consistency head under Consistency-AC; and the consistency, diffusion (DPPO's) and GoRL heads under PPO.

The flow heads run twice: with their papers' settings, and with the Brownian regularizer strong
enough to keep the modes (PolicyFlow ``brownian_coef`` 0.05 instead of 0.01; FPO++ with genpol's
port of it at 0.1; FPO itself has none).

Each head trains for ``--steps`` env steps (16 envs x 128-step rollouts), then 100 stochastic
episodes are rolled out. Reported per head: goals reached (of 4), episodes per goal, the angular
entropy of 2000 actions sampled at the start state (log 16 = 2.77 uniform, log 4 = 1.39 four
modes), mean return, and env-steps/s. Writes ``bench/results/multigoal.json`` and
``bench/results/multigoal.png`` (trajectories, and the action distribution at the origin).

Each row also reports the share of start actions within 25 degrees of a goal direction (clean lobes)
and whether it meets issue 30's per-seed targets (each goal >= 15 %, entropy >= 0.9 log 4, lobes >= 80 %).
Rows not run keep their earlier values in the JSON.

    python bench/multigoal.py [--steps 61440] [--seeds 0 1 2 3] [--heads ...]
"""

from __future__ import annotations

import argparse
from pathlib import Path

import numpy as np
import torch

from common import RESULTS, RUNS, date_stamp, read_results, write_results

COMMON = ["pipeline.video=false", "logger.progress_bar=false", "pipeline.eval_episodes=20"]
ON_POLICY = ["learner.rollout_steps=128"]
# SAC rows: 4 envs, an iteration of 1000 env steps, 64-wide networks (the on-policy rows' scale); with the learned
# temperature (SAC_AUTO) a target entropy of +0.25 |A| nats: SAC's default -|A| let the flow head collapse onto one
# goal (seed 10, 30k steps: [0, 100, 0, 0], start-state entropy 0.84) where +0.25 |A| kept all four ([8, 47, 37, 8]).
# The fixed-temperature rows leave it out: they never read it (validation refuses it since 2026-12-07, and their
# runs saved with it resume and report as before, genpol.runners.scaffold.unread_keys)
SAC = ["learner=sac", "env.num_envs=4", "learner.learning_starts=1000", "learner.iteration_steps=1000",
       "policy.hidden_sizes=[64,64]", "learner.critic_hidden_sizes=[64,64]"]
SAC_AUTO = [*SAC, "learner.target_entropy_scale=0.25"]
# MaxEntDP (issue 30; docs/concepts/maxentdp.md): the paper's sizes cost ~2.9 s per gradient step on this CPU,
# so this row scales them down (K 32 candidates, log pi from 5 levels x 4 draws, 10 DDPM steps, 64-wide
# networks; ~31 ms per step), 1 env, one gradient step per env step, temperature 0.1 (the authors' default)
MAXENTDP = ["learner=maxentdp", "env.num_envs=1", "learner.learning_starts=1000", "learner.iteration_steps=1000",
            "policy.hidden_sizes=[64,64]", "learner.critic_hidden_sizes=[64,64]", "learner.candidates=32",
            "learner.log_prob_draws=4", "learner.log_prob_levels=5", "policy.sampling_steps=10"]
# the max-entropy rows again on soft Q-learning's MultiGoal (env=multigoal_softlearning), the task issue 30's
# targets come from, at a FIXED temperature 1 and gamma 0.9: bench/multigoal_soft_optimum.py solves that
# objective exactly, and its optimum meets the targets (start-state lobes 0.98, entropy 2.22), so a miss
# there is the learner's, not the objective's. SAC's learned temperature has no such reference.
AT_THE_SOFT_OPTIMUM = ["env=multigoal_softlearning", "learner.ent_coef=1.0", "learner.gamma=0.9"]
# Consistency-AC online from scratch (8.4's recipe, tests/test_qgradient.py's multigoal test): Q-loss only,
# epsilon-random exploration, acting by softmax-Q over its candidates; 64-wide networks as the SAC rows
CONSISTENCY_AC = ["learner=consistency_ac", "pipeline=online", "env.num_envs=4", "learner.learning_starts=1000",
                  "learner.iteration_steps=1000", "policy.hidden_sizes=[64,64,64]",
                  "learner.critic_hidden_sizes=[64,64]", "learner.bc_coef=0", "learner.lr=1e-3"]
# name: (policy group, overrides, env steps; None: --steps)
HEADS: dict[str, tuple[str, list[str], int | None]] = {
    "gaussian": ("gaussian", [*ON_POLICY, "learner.minibatch_size=256"], None),
    "fpo": ("fpo", [*ON_POLICY, "learner.minibatch_size=256"], None),
    "fpo++": ("fpo", [*ON_POLICY, "learner.minibatch_size=256", "policy.ratio_mode=per_sample", "learner=aspo"], None),
    "fpo++ +brownian": ("fpo", [*ON_POLICY, "learner.minibatch_size=256", "policy.ratio_mode=per_sample",
                                "learner=aspo", "policy.brownian_coef=0.1"], None),
    "policyflow": ("policyflow", [*ON_POLICY, "+experiment=policyflow"], None),
    "policyflow +brownian": ("policyflow", [*ON_POLICY, "+experiment=policyflow", "policy.brownian_coef=0.05"], None),
    # maximum entropy (issue 30): SAC with a tanh-Gaussian, and with the exact-likelihood flow
    "sac tanh_gaussian": ("tanh_gaussian", SAC_AUTO, 30_000),
    "sac normalizing_flow": ("normalizing_flow", SAC_AUTO, 30_000),
    "maxentdp vp_diffusion": ("vp_diffusion", MAXENTDP, 5_000),
    "sac tanh_gaussian alpha1 softlearning": ("tanh_gaussian", [*SAC, *AT_THE_SOFT_OPTIMUM], 30_000),
    "sac normalizing_flow alpha1 softlearning": ("normalizing_flow", [*SAC, *AT_THE_SOFT_OPTIMUM], 30_000),
    # MEow's temperature on that task (the optimum: lobes 0.871, entropy 2.52)
    "sac normalizing_flow alpha2.5 softlearning": ("normalizing_flow", [*SAC, *AT_THE_SOFT_OPTIMUM,
                                                                        "learner.ent_coef=2.5"], 30_000),
    # ... which reached three goals on every seed at 30k steps, one lobe lost: twice the budget
    "sac normalizing_flow alpha2.5 softlearning 60k": ("normalizing_flow", [*SAC, *AT_THE_SOFT_OPTIMUM,
                                                                            "learner.ent_coef=2.5"], 60_000),
    # ... and twice the coupling layers (a 2-D flow bends its base Gaussian into lobes one coupling at a time)
    "sac normalizing_flow alpha2.5 softlearning 8 couplings": ("normalizing_flow", [
        *SAC, *AT_THE_SOFT_OPTIMUM, "learner.ent_coef=2.5", "policy.coupling_layers=8"], 30_000),
    # ... whose misses are the critic's: at the start state its Q toward the lost goal is 20-26 below the other
    # three on every seed (e^-8 to e^-10 of the weight at alpha 2.5), so the policy is faithful to a critic that never
    # valued that lobe. Two ways to keep a lobe valued until it is visited: a target from one random critic of
    # the two (num_min_qs 1: no clipped double-Q pessimism), and 5000 uniform warm-up steps instead of 1000
    "sac normalizing_flow alpha2.5 softlearning one-critic target": ("normalizing_flow", [
        *SAC, *AT_THE_SOFT_OPTIMUM, "learner.ent_coef=2.5", "learner.num_min_qs=1"], 30_000),
    "sac normalizing_flow alpha2.5 softlearning 5k warm-up": ("normalizing_flow", [
        *SAC, *AT_THE_SOFT_OPTIMUM, "learner.ent_coef=2.5", "learner.learning_starts=5000"], 30_000),
    "sac normalizing_flow alpha2.5 softlearning 10k warm-up": ("normalizing_flow", [
        *SAC, *AT_THE_SOFT_OPTIMUM, "learner.ent_coef=2.5", "learner.learning_starts=10000"], 30_000),
    # ... and the uniform warm-up at the optimum's own temperature 1 (lobes 0.982 there), whose row above lost
    # two goals on most seeds
    "sac normalizing_flow alpha1 softlearning 5k warm-up": ("normalizing_flow", [
        *SAC, *AT_THE_SOFT_OPTIMUM, "learner.learning_starts=5000"], 30_000),
    # ... and between the two: at alpha 2.5 the optimum's own lobes (0.871) leave little margin above the 0.8
    # target, at alpha 1 (0.982) the policy step keeps one or two goals
    "sac normalizing_flow alpha2 softlearning 5k warm-up": ("normalizing_flow", [
        *SAC, *AT_THE_SOFT_OPTIMUM, "learner.ent_coef=2", "learner.learning_starts=5000"], 30_000),
    "sac normalizing_flow alpha2 softlearning 10k warm-up": ("normalizing_flow", [
        *SAC, *AT_THE_SOFT_OPTIMUM, "learner.ent_coef=2", "learner.learning_starts=10000"], 30_000),
    # ... and the two together: at 2.5 with 5000 warm-up steps the critic's own exp(Q / alpha) puts 0.90 of its
    # start-state mass within 25 degrees of a goal where the 4-coupling flow puts 0.76 (bench/multigoal_critic.py),
    # and 8 couplings fitted tighter lobes (0.86-0.88) without the warm-up
    "sac normalizing_flow alpha2.5 softlearning 8 couplings 5k warm-up": ("normalizing_flow", [
        *SAC, *AT_THE_SOFT_OPTIMUM, "learner.ent_coef=2.5", "policy.coupling_layers=8",
        "learner.learning_starts=5000"], 30_000),
    # ... whose lobes still sit at the line (0.78-0.86) where the critic's own exp(Q / alpha) holds 0.90: the
    # flow's fit, so couplings four times as wide (256 x 2 each instead of 64 x 2), at 2.5 and at 2 (whose
    # optimum's lobes leave more margin above 0.8)
    "sac normalizing_flow alpha2.5 softlearning 8 wide couplings 5k warm-up": ("normalizing_flow", [
        *SAC, *AT_THE_SOFT_OPTIMUM, "learner.ent_coef=2.5", "policy.coupling_layers=8",
        "policy.coupling_hidden_sizes=[256,256]", "learner.learning_starts=5000"], 30_000),
    "sac normalizing_flow alpha2 softlearning 8 wide couplings 5k warm-up": ("normalizing_flow", [
        *SAC, *AT_THE_SOFT_OPTIMUM, "learner.ent_coef=2", "policy.coupling_layers=8",
        "policy.coupling_hidden_sizes=[256,256]", "learner.learning_starts=5000"], 30_000),
    # ... and the critic's precision: for every goal to keep >= 15 % of a four-lobe policy whose other three lobes
    # weigh alike, its value may lie at most alpha ln(1 / 0.529) = 0.64 alpha below theirs (1.6 at alpha 2.5, on
    # values near -116). RLPD's critics average the noise of one: 10 of them, targets from a random 2, the policy
    # step on their mean
    "sac normalizing_flow alpha2.5 softlearning 8 couplings 5k warm-up 10 critics": ("normalizing_flow", [
        *SAC, *AT_THE_SOFT_OPTIMUM, "learner.ent_coef=2.5", "policy.coupling_layers=8", "learner.learning_starts=5000",
        "learner.num_qs=10", "learner.num_min_qs=2", "learner.actor_q_reduction=mean"], 30_000),
    # ... and without the clipped double-Q pessimism, which grows with the critics' disagreement where data is thin:
    # a goal visited less is valued lower, so visited less again. The target from one random critic of the two
    # (tried above only with 1000 warm-up steps, when the miss was the critic's coverage)
    "sac normalizing_flow alpha2.5 softlearning 8 couplings 5k warm-up one-critic target": ("normalizing_flow", [
        *SAC, *AT_THE_SOFT_OPTIMUM, "learner.ent_coef=2.5", "policy.coupling_layers=8", "learner.learning_starts=5000",
        "learner.num_min_qs=1"], 30_000),
    # ... which balanced the goals where the wide couplings fitted the lobes (0.83-0.90, but a goal at 2-13 % on
    # two of three seeds): the two together
    "sac normalizing_flow alpha2.5 softlearning 8 wide couplings 5k warm-up one-critic target": ("normalizing_flow", [
        *SAC, *AT_THE_SOFT_OPTIMUM, "learner.ent_coef=2.5", "policy.coupling_layers=8",
        "policy.coupling_hidden_sizes=[256,256]", "learner.learning_starts=5000", "learner.num_min_qs=1"], 30_000),
    # ... which met the targets on 6 of 10 seeds, the misses at the line: lobes 0.794-0.796 on two (the optimum's
    # own at 2.5 are 0.871, little margin for the flow's fit) and a goal at 14 % on one. At alpha 2 the optimum's
    # lobes lie higher, while a goal's share tolerates a critic gap of 0.64 alpha = 1.28 instead of 1.6
    "sac normalizing_flow alpha2 softlearning 8 wide couplings 5k warm-up one-critic target": ("normalizing_flow", [
        *SAC, *AT_THE_SOFT_OPTIMUM, "learner.ent_coef=2", "policy.coupling_layers=8",
        "policy.coupling_hidden_sizes=[256,256]", "learner.learning_starts=5000", "learner.num_min_qs=1"], 30_000),
    "maxentdp vp_diffusion alpha1 softlearning": ("vp_diffusion", [*MAXENTDP, *AT_THE_SOFT_OPTIMUM], 5_000),
    # Q-gradient learning (no entropy term) of the consistency head
    "consistency_ac consistency": ("consistency", CONSISTENCY_AC, 30_000),
    # the other heads under PPO from scratch (issue 30: every head x learner pair that trains here): the
    # consistency head through its stochastic chain (tests/test_consistency_learning.py's sizes), DPPO's
    # diffusion head with every denoising step fine-tuned (nothing is pretrained) and single actions (the start-state
    # analysis steps the env with one action), and GoRL's stages (bench/gorl.py's MultiGoal settings)
    "consistency ppo": ("consistency", [*ON_POLICY, "learner.minibatch_size=256", "policy.hidden_sizes=[64,64,64]",
                                        "policy.critic_hidden_sizes=[64,64]", "policy.critic_activation=tanh"], None),
    "diffusion ppo": ("diffusion", [*ON_POLICY, "learner.minibatch_size=256", "policy.act_steps=1",
                                    "policy.horizon_steps=1", "policy.ft_denoising_steps=20",
                                    "policy.hidden_sizes=[64,64,64]", "policy.critic_hidden_sizes=[64,64]"], None),
    "gorl ppo": ("gorl", ["+experiment=gorl", *ON_POLICY, "learner.minibatch_size=256", "learner.epochs=10",
                          "learner.lr=3e-4", "pipeline.collect_steps=15360", "pipeline.eval_every=5"], None),
    # MEow (issue 30; docs/concepts/meow.md) with its authors' MultiGoal settings (their toy config: 4000 steps,
    # 1000 random, gamma 0.9, tau 0.0005, alpha 2.5, log sigma in [-2, 1]) on their env, soft Q-learning's
    # MultiGoal (env=multigoal_softlearning, the bundle's); and the same on genpol's progress reward, where alpha
    # 2.5 is far above the reward's scale (the bundle's env until 2026-12-05)
    "meow energy_flow": ("energy_flow", ["learner=meow", "+experiment=meow_multigoal", "env=multigoal_softlearning"],
                         4_000),
    "meow energy_flow progress": ("energy_flow", ["learner=meow", "+experiment=meow_multigoal", "env=multigoal"],
                                  4_000),
}
LOG4 = float(np.log(4.0))


def meets_issue_30_targets(counts: list[int], entropy: float, lobes: float) -> dict[str, bool]:
    """Issue 30's per-seed criteria: each goal in >= 15 % of the episodes, start-state angular entropy
    >= 0.9 log 4, and >= 80 % of the start actions within 25 degrees of a goal direction."""
    return {"every_goal_15pct": all(c >= 0.15 * 100 for c in counts),  # of goal_coverage's 100 episodes
            "entropy_0.9_log4": entropy >= 0.9 * LOG4, "lobes_80pct": lobes >= 0.8}


GOAL_DIRECTIONS = np.array([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.0], [0.0, -1.0]])  # the env's goal order
START_ACTION_NORM = 0.7  # the alpha-2.5 optimum's mean start action norm (0.709, multigoal_soft_optimum.json)


def final_critic(run_dir: Path) -> tuple[torch.nn.Module, float | None] | None:
    """A SAC row's final critics (a ``QEnsemble``) and its fixed temperature (None where it adapts); None
    for other learners."""
    from omegaconf import OmegaConf

    from genpol.checkpoint import load_latest
    from genpol.qensemble import QEnsemble

    learner = OmegaConf.load(run_dir / "config.yaml").learner
    if learner.name != "sac":
        return None
    _, _, state = load_latest(run_dir / "checkpoints")
    critic = QEnsemble(2, 2, num_qs=learner.num_qs, hidden_sizes=tuple(learner.critic_hidden_sizes),
                       activation=learner.critic_activation, layer_norm=learner.critic_layer_norm,
                       layer_norm_eps=learner.critic_layer_norm_eps, init=learner.critic_init)
    critic.load_state_dict(state["algorithm"]["critic"])
    return critic, (None if learner.ent_coef == "auto" else float(learner.ent_coef))


def critic_at_start(run_dir: Path) -> list[float] | None:
    """SAC rows: the minimum over the final critics of Q(origin, 0.7 x goal direction), per goal (None for
    other learners). A goal whose value lies a gap below the others' gets exp(-gap / alpha) of their weight
    in the soft-optimal policy of that critic: a lost lobe with a large gap is the critic's miss, not the
    head's."""
    found = final_critic(run_dir)
    if found is None:
        return None
    actions = torch.as_tensor(START_ACTION_NORM * GOAL_DIRECTIONS, dtype=torch.float32)
    with torch.no_grad():
        return found[0](torch.zeros(4, 2), actions).min(dim=0).values.tolist()


def row_run_dir(name: str, seed: int) -> Path:
    return RUNS / "multigoal" / f"{name.replace(' +', '-').replace(' ', '_')}-s{seed}"


def train_row(name: str, seed: int, on_policy_steps: int) -> tuple[Path, dict, int]:
    """Train (or resume, or find finished) one row's run: its run dir, training summary and env steps."""
    from genpol.api import train

    policy, overrides, steps = HEADS[name]
    steps = steps or on_policy_steps
    run_dir = row_run_dir(name, seed)
    # the env group: a row's own env=..., else genpol's MultiGoal (train's env wins over a bundle's)
    env = next((item.split("=", 1)[1] for item in overrides if item.startswith("env=")), "multigoal")
    summary = train(env=env, policy=policy, total_steps=steps, run_dir=run_dir, seed=seed,
                    overrides=[*COMMON, *(item for item in overrides if not item.startswith("env="))])
    return run_dir, summary, steps


def main() -> None:
    from genpol.api import load_policy
    from genpol.multigoal_analysis import goal_coverage

    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=61_440, help="env steps of the on-policy rows")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3])
    parser.add_argument("--heads", nargs="+", default=list(HEADS), choices=list(HEADS))
    parser.add_argument("--table", action="store_true", help="print the rows' table from multigoal.json; train nothing")
    args = parser.parse_args()
    if args.table:
        print(table(read_results("multigoal.json")["runs"], args.heads, args.seeds))
        return
    torch.set_num_threads(1)

    results, coverages = {}, {}
    for name in args.heads:
        for seed in args.seeds:
            run_dir, summary, steps = train_row(name, seed, args.steps)
            coverage = goal_coverage(load_policy(run_dir), episodes=100, seed=seed)
            coverages[(name, seed)] = coverage
            counts, lobes = coverage.goal_counts.tolist(), coverage.lobe_fraction(25.0)
            results[f"{name}-s{seed}"] = {"head": name, "seed": seed, "steps": steps, "date": date_stamp(),
                "goals_reached": int((coverage.goal_counts > 0).sum()),
                "goals_covered_2pct": coverage.goals_covered(0.02),
                "episodes_per_goal": counts,
                "angular_entropy_at_start": coverage.angular_entropy,
                "lobe_fraction_25deg": lobes,
                "issue_30_targets": meets_issue_30_targets(counts, coverage.angular_entropy, lobes),
                "stochastic_return": coverage.mean_return,
                "deterministic_eval_return": summary["eval_return_mean"],
                "sps": summary.get("sps"),
                "critic_q_toward_each_goal_at_start": critic_at_start(run_dir),
            }
            print(f"{name:22s} seed {seed}: goals {counts}, angular entropy {coverage.angular_entropy:.2f}, "
                  f"lobes {lobes:.2f}, return {coverage.mean_return:.1f}, SPS {summary.get('sps') or 0:.0f}",
                  flush=True)
    # rows of heads and seeds not run now keep their earlier values (each row has its steps and date)
    runs = {**read_results("multigoal.json").get("runs", {}), **results}
    write_results("multigoal.json", {"benchmark": "multigoal", "steps_on_policy": args.steps, "runs": runs})
    # the full picture is multigoal.png; a run of some heads draws them beside it, not over it
    picture = "multigoal.png" if set(args.heads) == set(HEADS) else "multigoal_" + "_".join(
        name.replace(" +", "-").replace(" ", "_").replace("+", "p") for name in args.heads) + ".png"
    plot(coverages, args.seeds[0], list(args.heads), RESULTS / picture)
    print(table(runs, args.heads, args.seeds))


def table(runs: dict, heads: list[str], seeds: list[int]) -> str:
    """docs/benchmarks.md's MultiGoal table: per row, the episodes per goal of each seed, the ranges of the
    start-state entropy, lobes and stochastic return, and the seeds that meet issue 30's targets."""
    lines = ["| head and learner | env steps | episodes per goal (seeds " + " / ".join(map(str, seeds)) + ") | "
             "angular entropy | lobes | return | seeds meeting the target |", "|---|---|---|---|---|---|---|"]
    for name in heads:
        # rows measured before the lobes and the targets were recorded (seeds 0-3, 2026-11) are left out
        rows = [runs[f"{name}-s{seed}"] for seed in seeds if "issue_30_targets" in runs.get(f"{name}-s{seed}", {})]
        if not rows:
            continue

        def span(key: str, digits: int = 2) -> str:
            values = [round(row[key], digits) + 0.0 for row in rows]  # + 0.0: an entropy of -1e-9 is 0.00, not -0.00
            low, high = f"{min(values):.{digits}f}", f"{max(values):.{digits}f}"
            return low if low == high else f"{low}-{high}"

        met = sum(all(row["issue_30_targets"].values()) for row in rows)
        # a seed the row lacks is "-", so each group stays under the seed the header names for it
        counts = " / ".join(",".join(map(str, runs[f"{name}-s{seed}"]["episodes_per_goal"]))
                            if "issue_30_targets" in runs.get(f"{name}-s{seed}", {}) else "-" for seed in seeds)
        lines.append(f"| {name} | {rows[0].get('steps') or '-'} | {counts} | {span('angular_entropy_at_start')} | "
                     f"{span('lobe_fraction_25deg')} | {span('stochastic_return', 1)} | {met} of {len(rows)} |")
    return "\n".join(lines)


def plot(coverages: dict, seed: int, heads: list[str], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    colors = np.array(["tab:red", "tab:green", "tab:blue", "tab:purple", "lightgray"])
    fig, axes = plt.subplots(2, len(heads), figsize=(4 * len(heads), 8), squeeze=False)
    for column, name in enumerate(heads):
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
