"""Offline Consistency-AC against Consistency-BC on Hopper-v5 "medium" (`bench/make_hopper_medium.sh`), at the
same offline budget, then the offline-to-online curve of Consistency-AC.

* ``consistency-bc``: genpol's BC phase (`pipeline=offline_to_online`, the CT loss alone, AdamW 1e-3 with
  cosine decay, EMA), as `bench/bc_heads.py`; its fine-tuning is cut to one PPO iteration.
* ``consistency-ac``: `+experiment=consistency_ac` (eta 0.1, CT + eta normalized Q-loss, twin 3 x 256 Mish
  critics, EMA actor, Adam 3e-4, grad clip 1, softmax-Q over 50 candidates), offline for the same number of
  gradient steps of the same batch size, then online fine-tuning for ``--online-steps`` env steps (half of
  every batch from the dataset, one gradient step per env step), evaluated every 1000 env steps.

Both evaluate D4RL-normalized over ``--episodes`` deterministic episodes (reset seeds 10000, ...). The CT
schedule N(k) spans the offline phase in both (ct_total_steps = pretrain_steps).

    python bench/consistency_ac.py --seeds 0 --steps 10000 --online-steps 5000

Writes ``bench/results/consistency_ac.json`` (``consistency_ac_<steps/1000>k.json`` for other ``--steps``;
runs in ``bench/runs/consistency_ac/<method>-<steps/1000>k-s<seed>``, resumable).
"""

from __future__ import annotations

import argparse
import os

from common import ROOT, RUNS, curve, date_stamp, read_progress, read_summary, train_once, write_results

RUN_ROOT = RUNS / "consistency_ac"
COMMON = ["pipeline.video=false", "logger.progress_bar=false", "pipeline.pretrain_log_every=200"]


def run_bc(seed: int, steps: int, episodes: int, dataset: str) -> dict:
    run_dir = RUN_ROOT / f"consistency-bc-{steps // 1000}k-s{seed}"
    train_once(run_dir, ["env=hopper", "policy=consistency", "pipeline=offline_to_online", "env.normalize_obs=false",
                         f"dataset.path={dataset}", f"seed={seed}", f"pipeline.pretrain_steps={steps}",
                         "pipeline.pretrain_batch_size=128", f"pipeline.eval_episodes={episodes}", "total_steps=1",
                         *COMMON])
    pretrained = read_summary(run_dir, "pretrain")
    return {"method": "consistency-bc", "seed": seed, "offline_normalized_score": pretrained["normalized_score"],
            "offline_return": pretrained["eval_return_mean"], "offline_wall_time_s": pretrained["wall_time_s"],
            "gradient_steps": pretrained["gradient_steps"]}


def run_ac(seed: int, steps: int, online_steps: int, episodes: int, dataset: str) -> dict:
    run_dir = RUN_ROOT / f"consistency-ac-{steps // 1000}k-s{seed}"
    # min-max observations as the BC rows see them, and their deterministic evaluation (as consistency_ac*.json were
    # made, before the bundle took raw observations and fresh draws)
    summary = train_once(run_dir, ["+experiment=consistency_ac", "dataset.observations=min_max",
                                   "pipeline.eval_deterministic=true",
                                   f"dataset.path={dataset}", f"seed={seed}", f"pipeline.pretrain_steps={steps}",
                                   "pipeline.pretrain_batch_size=128",
                                   f"pipeline.pretrain_eval_every={max(steps // 2 // 200, 1)}",
                                   f"pipeline.eval_episodes={episodes}", f"total_steps={online_steps}",
                                   "learner.iteration_steps=1000", "pipeline.eval_every=1", *COMMON])
    pretrained = read_summary(run_dir, "pretrain")
    offline_curve = curve(read_progress(run_dir, "pretrain"), "eval/normalized_score")
    online_rows = read_progress(run_dir)
    online_curve = curve(online_rows, "eval/normalized_score")
    return {"method": "consistency-ac", "seed": seed, "offline_normalized_score": pretrained["normalized_score"],
            "offline_return": pretrained["eval_return_mean"], "offline_wall_time_s": pretrained["wall_time_s"],
            "gradient_steps": pretrained["gradient_steps"], "offline_curve": offline_curve,
            "online_curve": online_curve, "online_normalized_score": summary["eval_normalized_score"],
            "online_return": summary["eval_return_mean"], "online_env_steps": summary["env_steps"],
            "online_wall_time_s": summary["train_time_s"],
            "online_training_return_last": online_rows[-1].get("charts/episodic_return")}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=10000, help="offline gradient steps (batch 128), both methods")
    parser.add_argument("--online-steps", type=int, default=5000, help="online env steps of Consistency-AC")
    parser.add_argument("--episodes", type=int, default=10, help="evaluation episodes")
    parser.add_argument("--dataset", default=str(ROOT / "data" / "hopper_medium-v5.hdf5"))
    args = parser.parse_args()
    runs = []
    for seed in args.seeds:
        runs.append(run_bc(seed, args.steps, args.episodes, args.dataset))
        runs.append(run_ac(seed, args.steps, args.online_steps, args.episodes, args.dataset))
    print(f"{'method':16s} {'seed':>4s} {'offline':>8s} {'wall s':>7s} {'online':>8s}  curve (env step: score)")
    for run in runs:
        online = run.get("online_normalized_score")
        curve = " ".join(f"{step}:{score:.1f}" for step, score in run.get("online_curve", []))
        print(f"{run['method']:16s} {run['seed']:4d} {run['offline_normalized_score']:8.1f} "
              f"{run['offline_wall_time_s']:7.0f} {'' if online is None else f'{online:8.1f}'}  {curve}")
    name = "consistency_ac.json" if args.steps == 10000 else f"consistency_ac_{args.steps // 1000}k.json"
    write_results(name, {
        "benchmark": "consistency_ac", "date": date_stamp(), "dataset": args.dataset,
        "offline_gradient_steps": args.steps, "batch_size": 128, "online_env_steps": args.online_steps,
        "eval_episodes": args.episodes, "load_average": os.getloadavg(), "runs": runs})


if __name__ == "__main__":
    main()
