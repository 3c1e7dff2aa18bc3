"""The papers' headline claims at this CPU's scale, each at 5 seeds a side (issue 28, part 5).

Each claim pits a method against its paper's baseline at the same budget, the same data and the same
settings apart from the method itself, on genpol:

* ``consistency_bc``: Ding & Jin: a consistency policy (T = 2) behaviour-clones as well as a diffusion
  policy at a fraction of its sampling steps. Consistency-BC (``policy=consistency``) against DPPO's diffusion
  head (``+experiment=dppo_hopper``, K = 20, acting one action per step as the consistency head does), 20k BC
  gradient steps of batch 128 on Hopper "medium"
  (``bench/make_hopper_medium.sh``); metric: D4RL-normalized score of the final deterministic evaluation
  (10 episodes). A "matches" claim: no difference shown when the interval of the difference contains 0.
* ``consistency_ac``: Ding & Jin: offline Consistency-AC (CT loss + eta Q-loss) above Consistency-BC on
  the same data. ``+experiment=consistency_ac`` offline for the same 20k gradient steps; same metric
  (Consistency-AC acts by softmax-Q over its candidates, as it does online).
* ``dppo``: Ren et al.: DPPO fine-tunes a BC-pretrained diffusion policy better than PPO fine-tunes a
  Gaussian one. Both pretrain 20k BC steps on the same data and then run PPO for 500k env steps in
  ``+experiment=dppo_hopper``'s loop (16 envs x 64 steps, critic lr 1e-3, GAE 0.95, reward scaling).
  The Gaussian arm takes DPPO's own Gym Gaussian-PPO recipe where the two differ
  (``cfg/gym/finetune/hopper-v2/ppo_gaussian_mlp.yaml``: actor 512 x 3 ReLU, critic 256 x 3 Mish residual, clip
  0.1, 10 epochs) and acts one step at a time, as theirs does. Metric: the final evaluation's return.
* ``gorl``: GoRL against Gaussian PPO with GoRL's stage-0 encoder for the whole budget on dm_control
  hopper-stand, 150k encoder env steps (``bench/gorl.py``'s ``hopper`` task). Metric: the final
  evaluation's return. The paper's budget is 180M steps; here both stay near a fallen hopper.
* ``expo`` (no runs here: ``bench/expo.py learning`` makes them): EXPO reaches RLPD's 100k-step score in
  at most half the steps. Read from ``bench/results/expo_learning.json``: EXPO's evaluation at 50k against
  RLPD's at 100k, seed by seed (an "at or above" claim, ``expo_claim``).

Verdict: the exact bootstrap 95 % interval of median(method) - median(baseline)
(``learning_parity.median_difference_ci``, genpol.report's resampling). An "above" claim holds when the
interval lies above 0, is contradicted when it lies below, and is not shown otherwise; for a "matches"
claim the verdict is "no difference shown" when the interval contains 0 (not proof of equality at 5
seeds), else which side is above. Runs are
resumable (``bench/runs/claims/<arm>-s<seed>``), one torch thread each.

    python bench/claims.py --claims consistency_bc consistency_ac dppo gorl --seeds 0 1 2 3 4
    python bench/claims.py --table          # the verdicts of the runs so far

Writes ``bench/results/claims.json``.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np

from common import ROOT, RUNS, date_stamp, load_average, read_results, read_summary, train_once, update_results
from gorl import SINGLE_STAGE
from learning_parity import median_difference_ci

RUN_ROOT = RUNS / "claims"
ONE_THREAD = ["torch_threads=1", "update_threads=1", "env.workers=1", "pipeline.video=false",
              "logger.progress_bar=false"]
BC_BUDGET = ["pipeline.pretrain_steps=20000", "pipeline.pretrain_batch_size=128", "pipeline.eval_episodes=10"]
CONSISTENCY_BC = ["env=hopper", "policy=consistency", "pipeline=offline_to_online", "env.normalize_obs=false"]
# DPPO's Gym Gaussian PPO (ppo_gaussian_mlp.yaml) inside dppo_hopper's loop and BC phase
GAUSSIAN_FINE_TUNING = ["+experiment=dppo_hopper", "policy=gaussian", "policy.hidden_sizes=[512,512,512]",
                        "policy.activation=relu", "policy.critic_hidden_sizes=[256,256,256]",
                        "policy.critic_activation=mish", "policy.critic_residual=true", "learner.clip_range=0.1",
                        "learner.epochs=10"]
GORL_HOPPER = ["+experiment=gorl", "env=dmc", "env.id=hopper-stand", "total_steps=150000",
               "pipeline.collect_steps=15000", "pipeline.eval_every=10", "pipeline.eval_episodes=5"]


@dataclass(frozen=True)
class Arm:
    name: str
    overrides: list[str]
    offline: bool = False  # done, and measured, once the offline (BC) phase is
    needs_dataset: bool = True


@dataclass(frozen=True)
class Claim:
    statement: str
    kind: str  # "above": method above baseline; "matches": no difference either way
    metric: str
    method: Arm
    baseline: Arm
    notes: list[str] = field(default_factory=list)


CLAIMS = {
    "consistency_bc": Claim(
        "Consistency-BC (T = 2) clones as well as diffusion BC (K = 20)", "matches",
        "D4RL-normalized score, final deterministic evaluation after 20k BC steps",
        Arm("consistency-bc", [*CONSISTENCY_BC, *BC_BUDGET, "total_steps=1"], offline=True),
        # one action per step, as the consistency head acts (dppo_hopper's chunks of 4 are DPPO's choice, not
        # the diffusion policy's: with them, the "diffusion-bc" runs in claims.json)
        Arm("diffusion-bc-1step", ["+experiment=dppo_hopper", "policy.act_steps=1", "policy.horizon_steps=1",
                                   *BC_BUDGET, "total_steps=1"], offline=True)),
    "consistency_ac": Claim(
        "offline Consistency-AC above Consistency-BC on the same data", "above",
        "D4RL-normalized score, final evaluation after 20k gradient steps",
        # min-max observations, as the BC arm's pipeline sees them, and the deterministic evaluation, as the BC arm
        # evaluates (both as claims.json's runs were made, before the bundle took raw observations and fresh draws)
        Arm("consistency-ac", ["+experiment=consistency_ac", *BC_BUDGET, "total_steps=1",
                               "dataset.observations=min_max", "pipeline.eval_deterministic=true"], offline=True),
        Arm("consistency-bc", [*CONSISTENCY_BC, *BC_BUDGET, "total_steps=1"], offline=True)),
    "dppo": Claim(
        "DPPO fine-tuning above Gaussian PPO fine-tuning from BC of the same data", "above",
        "final evaluation's return after 20k BC steps and 500k env steps of PPO",
        Arm("dppo", ["+experiment=dppo_hopper", "total_steps=500000"]),
        Arm("gaussian-ft", [*GAUSSIAN_FINE_TUNING, "total_steps=500000"])),
    "gorl": Claim(
        "GoRL above Gaussian PPO (GoRL's stage-0 encoder for the whole budget)", "above",
        "final evaluation's return, dm_control hopper-stand, 150k encoder env steps",
        Arm("gorl", GORL_HOPPER, needs_dataset=False),
        Arm("gaussian-ppo", [*GORL_HOPPER, *SINGLE_STAGE], needs_dataset=False)),
}


ARMS = {arm.name: arm for claim in CLAIMS.values() for arm in (claim.method, claim.baseline)}
assert all(arm == ARMS[arm.name] for claim in CLAIMS.values() for arm in (claim.method, claim.baseline)), \
    "two arms of one name must be the same run"


def run_arm(claim: str, arm: Arm, seed: int, dataset: str) -> dict[str, Any]:
    """Train (or reuse) one arm's run of ``seed``; its metric and cost."""
    run_dir = RUN_ROOT / f"{arm.name}-s{seed}"  # an arm in two claims (consistency-bc) trains once
    overrides = [*arm.overrides, *ONE_THREAD, f"seed={seed}"]
    if arm.needs_dataset:
        overrides.append(f"dataset.path={dataset}")
    train_once(run_dir, overrides, marker="pretrain/summary.json" if arm.offline else "summary.json", echo=True)
    if arm.offline:
        pretrained = read_summary(run_dir, "pretrain")
        return {"metric": pretrained["normalized_score"], "return": pretrained["eval_return_mean"],
                "wall_time_s": pretrained["wall_time_s"], "gradient_steps": pretrained["gradient_steps"]}
    summary = read_summary(run_dir)
    return {"metric": summary["eval_return_mean"], "return": summary["eval_return_mean"],
            "wall_time_s": summary.get("train_time_s", summary.get("wall_time_s")),
            "env_steps": summary.get("env_steps", summary.get("total_env_steps"))}


def verdict(claim: Claim, method: Sequence[float], baseline: Sequence[float]) -> dict[str, Any]:
    """Medians, the interval of their difference (method - baseline) and what it says of the claim."""
    from genpol.report import bootstrap_median_ci

    low, high = median_difference_ci(method, baseline)
    if claim.kind == "matches":  # 5 seeds cannot show equality: only no difference, or one
        outcome = "no difference shown" if low <= 0.0 <= high else ("method above" if low > 0 else "method below")
    else:
        outcome = "holds" if low > 0 else ("contradicted" if high < 0 else "not shown")
    return {"seeds": [len(method), len(baseline)],
            "method_median": float(np.median(method)), "method_ci95": bootstrap_median_ci(method),
            "baseline_median": float(np.median(baseline)), "baseline_ci95": bootstrap_median_ci(baseline),
            "difference_of_medians": float(np.median(method) - np.median(baseline)),
            "difference_ci95": [low, high], "verdict": outcome}


EXPO_CLAIM = Claim("EXPO at half of RLPD's env steps above RLPD at its full budget (Hopper-v5 with the medium "
                   "data mixed in; the paper: RLPD's score in half the steps)", "above", "D4RL-normalized evaluation",
                   Arm("expo", [], needs_dataset=True), Arm("rlpd", [], needs_dataset=True))


def expo_claim() -> dict[str, Any] | None:
    """EXPO's claim from ``bench/expo.py learning``'s runs (not re-run here): EXPO's Hopper score at half of
    RLPD's budget against RLPD's at its full budget, seed by seed, through ``verdict`` as an "above" claim
    (an interval containing 0 neither shows nor contradicts "at least as high")."""
    expo = read_results("expo_learning.json")
    if not expo:
        return None
    half, full = str(expo["steps"]), str(expo["rlpd_steps"])
    runs = expo["runs"]
    seeds = sorted(int(key.rsplit("-", 1)[1]) for key in runs if key.startswith("hopper-expo-")
                   and key.rsplit("-", 1)[1].isdigit() and f"hopper-rlpd-{key.rsplit('-', 1)[1]}" in runs
                   and half in runs[key] and full in runs[f"hopper-rlpd-{key.rsplit('-', 1)[1]}"])
    method = [runs[f"hopper-expo-{seed}"][half] for seed in seeds]
    baseline = [runs[f"hopper-rlpd-{seed}"][full] for seed in seeds]
    out: dict[str, Any] = {"statement": EXPO_CLAIM.statement, "kind": EXPO_CLAIM.kind, "metric": EXPO_CLAIM.metric,
                           "method": f"expo@{half}", "baseline": f"rlpd@{full}", "seeds_used": seeds,
                           "critic": expo.get("critic"), "source": "bench/results/expo_learning.json",
                           "method_values": method, "baseline_values": baseline}
    if len(seeds) >= 2:
        out.update(verdict(EXPO_CLAIM, method, baseline))
    return out


def summarize(runs: dict[str, dict[str, Any]]) -> dict[str, Any]:
    """Every claim with at least 2 seeds an arm: its verdict."""
    out: dict[str, Any] = {}
    for name, claim in CLAIMS.items():
        arms = {arm: [row["metric"] for key, row in sorted(runs.items()) if key.startswith(f"{name}/{arm}/")]
                for arm in (claim.method.name, claim.baseline.name)}
        method, baseline = arms[claim.method.name], arms[claim.baseline.name]
        if min(len(method), len(baseline)) >= 2:
            out[name] = {"statement": claim.statement, "kind": claim.kind, "metric": claim.metric,
                         "method": claim.method.name, "baseline": claim.baseline.name,
                         "method_values": method, "baseline_values": baseline, **verdict(claim, method, baseline)}
    return out


def print_table(summary: dict[str, Any]) -> None:
    print("| claim | metric | method: median (95 % CI), seeds | baseline: median (95 % CI), seeds | "
          "difference, 95 % CI | verdict |")
    print("|---|---|---|---|---|---|")
    for row in summary.values():
        (m_low, m_high), (b_low, b_high) = row["method_ci95"], row["baseline_ci95"]
        low, high = row["difference_ci95"]
        print(f"| {row['statement']} | {row['metric']} | {row['method']}: {row['method_median']:.1f} "
              f"({m_low:.1f}-{m_high:.1f}), {row['seeds'][0]} | {row['baseline']}: {row['baseline_median']:.1f} "
              f"({b_low:.1f}-{b_high:.1f}), {row['seeds'][1]} | {row['difference_of_medians']:+.1f} "
              f"({low:+.1f} to {high:+.1f}) | {row['verdict']} |")


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--claims", nargs="+", default=list(CLAIMS), choices=list(CLAIMS))
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2, 3, 4])
    parser.add_argument("--arms", nargs="+", choices=["method", "baseline"], default=["method", "baseline"])
    parser.add_argument("--dataset", default=str(ROOT / "data" / "hopper_medium-v5.hdf5"))
    parser.add_argument("--table", action="store_true", help="print the verdicts of the recorded runs and stop")
    args = parser.parse_args(argv)
    if not args.table and not Path(args.dataset).exists():
        raise SystemExit(f"--dataset {args.dataset} does not exist: make it with bash bench/make_hopper_medium.sh")
    for name in ([] if args.table else args.claims):
        claim = CLAIMS[name]
        for seed in args.seeds:
            for arm in (getattr(claim, side) for side in args.arms):
                row = {**run_arm(name, arm, seed, args.dataset), "load_average": load_average(), "date": date_stamp()}
                print(f"{name} {arm.name} seed {seed}: {row['metric']:.1f} ({row['wall_time_s']:.0f} s)", flush=True)

                def merge(results: dict[str, Any], key=f"{name}/{arm.name}/{seed}", row=row) -> dict[str, Any]:
                    runs = {**results.get("runs", {}), key: row}
                    return {"benchmark": "claims", "runs": runs, "claims": summarize(runs), "expo": expo_claim()}
                update_results("claims.json", merge)
    results = read_results("claims.json")
    expo = expo_claim()
    print_table({**results.get("claims", {}), **({"expo": expo} if expo and "verdict" in expo else {})})


if __name__ == "__main__":
    main()
