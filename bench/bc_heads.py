"""Behaviour cloning, head against head, on the same dataset and budget: consistency (T = 2) against
DPPO's diffusion head (K = 20, chunks of 4, `+experiment=dppo_hopper`'s denoiser) on Hopper-v5
"medium" (`bench/make_hopper_medium.sh`). Both run genpol's BC phase (`pipeline=offline_to_online`,
AdamW with cosine decay, EMA) for the same number of gradient steps and batch size, then a
deterministic evaluation of the EMA policy (D4RL-normalized). Fine-tuning is cut to one iteration.

    python bench/bc_heads.py --seeds 0 1 2 --steps 20000

Writes ``bench/results/bc_heads.json`` (runs in ``bench/runs/bc_heads/``, resumable).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics

from common import ROOT, RUNS, date_stamp, train_once, write_results

RUN_ROOT = RUNS / "bc_heads"
HEADS = {
    "diffusion": ["+experiment=dppo_hopper"],
    # DPPO's denoiser acting one step at a time, as the consistency head does (chunks are a DPPO choice)
    "diffusion-chunk1": ["+experiment=dppo_hopper", "policy.act_steps=1", "policy.horizon_steps=1"],
    "consistency": ["env=hopper", "policy=consistency", "pipeline=offline_to_online", "env.normalize_obs=false"],
    # the short consistency-training schedule that MultiGoal's BC test needs (N up to 21, target decay 0.95)
    "consistency-short-ct": ["env=hopper", "policy=consistency", "pipeline=offline_to_online", "env.normalize_obs=false",
                             "policy.ct_final_scales=20", "policy.target_decay=0.95"],
    # the consistency head acting in DPPO's chunks of 4 (the same interface as "diffusion")
    "consistency-chunk4": ["env=hopper", "policy=consistency", "pipeline=offline_to_online", "env.normalize_obs=false",
                           "policy.act_steps=4", "policy.horizon_steps=4"],
    "consistency-short-ct-chunk4": ["env=hopper", "policy=consistency", "pipeline=offline_to_online",
                                    "env.normalize_obs=false", "policy.ct_final_scales=20", "policy.target_decay=0.95",
                                    "policy.act_steps=4", "policy.horizon_steps=4"],
    # ablations of the reference's CT options (single actions): no 100 / dtau weight, pseudo-Huber distance
    "ct-noscale": ["env=hopper", "policy=consistency", "pipeline=offline_to_online", "env.normalize_obs=false",
                   "policy.ct_loss_scale=false"],
    "ct-huber": ["env=hopper", "policy=consistency", "pipeline=offline_to_online", "env.normalize_obs=false",
                 "policy.ct_distance=pseudo_huber"],
    "ct-huber-noscale": ["env=hopper", "policy=consistency", "pipeline=offline_to_online", "env.normalize_obs=false",
                         "policy.ct_distance=pseudo_huber", "policy.ct_loss_scale=false"],
    "ct-short-noscale": ["env=hopper", "policy=consistency", "pipeline=offline_to_online", "env.normalize_obs=false",
                         "policy.ct_final_scales=20", "policy.target_decay=0.95", "policy.ct_loss_scale=false"],
    # improved CT's recipe (Song & Dhariwal 2023) as far as the head has it: pseudo-Huber, log-normal level
    # pairs, the online network as target, N from 10 to 1280 (genpol's sqrt schedule, not iCT's doubling)
    "consistency-ict": ["env=hopper", "policy=consistency", "pipeline=offline_to_online", "env.normalize_obs=false",
                        "policy.ct_distance=pseudo_huber", "policy.ct_noise_sampling=lognormal",
                        "policy.target_decay=0", "policy.target_every=1", "policy.ct_initial_scales=10",
                        "policy.ct_final_scales=1280"],
}


def run(head: str, seed: int, steps: int, dataset: str) -> dict:
    # done once BC is: the one-iteration fine-tuning after it does not matter here
    summary = train_once(RUN_ROOT / f"{head}-s{seed}",
                         [*HEADS[head], f"dataset.path={dataset}", f"seed={seed}", f"pipeline.pretrain_steps={steps}",
                          "pipeline.pretrain_batch_size=128", "pipeline.eval_episodes=10", "total_steps=1",
                          "pipeline.video=false", "logger.progress_bar=false"],
                         marker="pretrain/summary.json")
    return {"head": head, "seed": seed, "normalized_score": summary.get("normalized_score"),
            "eval_return_mean": summary["eval_return_mean"], "wall_time_s": summary["wall_time_s"],
            "gradient_steps": summary["gradient_steps"], "final_loss": summary["final_loss"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--steps", type=int, default=20000)
    parser.add_argument("--dataset", default=str(ROOT / "data" / "hopper_medium-v5.hdf5"))
    args = parser.parse_args()
    rows = [run(head, seed, args.steps, args.dataset) for seed in args.seeds for head in HEADS]
    print(f"{'head':22s} {'seed':>4s} {'normalized':>10s} {'return':>8s} {'BC wall s':>9s}")
    for row in rows:
        print(f"{row['head']:22s} {row['seed']:4d} {row['normalized_score']:10.1f} {row['eval_return_mean']:8.0f} "
              f"{row['wall_time_s']:9.0f}")
    medians = {head: {key: statistics.median(r[key] for r in rows if r["head"] == head)
                      for key in ("normalized_score", "wall_time_s")} for head in HEADS}
    print("medians:", json.dumps(medians))
    write_results("bc_heads.json", {
        "benchmark": "bc_heads", "date": date_stamp(), "dataset": args.dataset,
        "steps": args.steps, "batch_size": 128, "load_average": os.getloadavg(), "runs": rows,
        "medians": medians})


if __name__ == "__main__":
    main()
