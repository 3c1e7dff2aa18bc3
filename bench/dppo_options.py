"""What DPPO's speed options cost in return: the same short offline-to-online Hopper-v5 run per option.

Every option runs ``+experiment=dppo_hopper`` (20k BC steps on the medium dataset, then DPPO) with the
same seed and budget; only the option's overrides differ:

* ``ddpm K=20 K'=10``: the experiment as it is (compiled sampling, eager update);
* ``ddpm K=20 K'=10, compiled update``: ``learner.compile=true`` (the same math, float rounding apart);
* ``ddim 5 K'=5, compiled update``: ``policy=diffusion_ddim`` (DDIM in 5 steps, all fine-tuned);
* ``ddpm K=20 K'=5``: DDPM sampling, only the last 5 of 20 steps fine-tuned (half the update's work).

Throughput per option is measured side by side by ``bench/dppo_throughput.py``; this script measures
returns (deterministic evaluations of 10 episodes, every 10 iterations and at the end).
Writes ``bench/results/dppo_options.json``.

    python bench/dppo_options.py --dataset data/hopper_medium-v5.hdf5 [--steps 120000] [--seed 0]
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time

from common import ROOT, RUNS, curve, date_stamp, read_progress, read_results, read_summary, run_python, write_results

DDIM = ["policy=diffusion_ddim", "policy.hidden_sizes=[256,256,256]"]
OPTIONS = {  # name -> (run directory slug, overrides)
    "ddpm K=20 K'=10": ("ddpm20-ft10", []),
    "ddpm K=20 K'=10, compiled update": ("ddpm20-ft10-compiled", ["learner.compile=true"]),
    "ddim 5 K'=5, compiled update": ("ddim5-ft5-compiled", [*DDIM, "learner.compile=true"]),
    "ddpm K=20 K'=5": ("ddpm20-ft5", ["policy.ft_denoising_steps=5"]),
}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--dataset", required=True, help="the Hopper-v5 medium D4RL file (bench/make_hopper_medium.sh)")
    parser.add_argument("--steps", type=int, default=120_000, help="online fine-tuning env steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--options", nargs="*", default=list(OPTIONS))
    args = parser.parse_args()
    results = read_results("dppo_options.json")
    results.update({"benchmark": "dppo_options", "dataset": args.dataset, "online_steps": args.steps,
                    "runs": {**results.get("runs", {})}})  # runs of earlier invocations (other seeds) stay
    for name in args.options:
        slug, overrides = OPTIONS[name]
        run_dir = RUNS / "dppo_options" / f"{slug}-s{args.seed}"
        start, load = time.time(), os.getloadavg()[0]
        # run every time, no skip: wall_time_s and the loads are this call's; genpol.train resumes a run_dir
        run_python(["-m", "genpol.train", "+experiment=dppo_hopper", f"dataset.path={args.dataset}", *overrides,
                    f"seed={args.seed}", f"total_steps={args.steps}", "logger.progress_bar=false",
                    "pipeline.video=false", f"run_dir={run_dir}"], echo=True)
        summary = read_summary(run_dir)
        rows = read_progress(run_dir)
        results["runs"][run_dir.name] = {
            "option": name, "seed": args.seed, "overrides": overrides, "run_dir": str(run_dir.relative_to(ROOT)),
            "wall_time_s": time.time() - start,
            "load_average_1min_at_start": load, "load_average_1min_at_end": os.getloadavg()[0],
            "pretrained_return": summary["pretrained"]["eval_return_mean"],
            "pretrain_wall_time_s": summary["pretrained"]["wall_time_s"],
            "final_return": summary["eval_return_mean"], "env_steps": summary["env_steps"],
            "eval_curve": curve(rows, "eval/episodic_return"),
            # load-dependent (other jobs share the machine): bench/dppo_throughput.py has the side-by-side rates
            "online_sps_median": statistics.median(sps for _, sps in curve(rows, "charts/SPS")),
        }
        print(json.dumps(results["runs"][run_dir.name], indent=2), flush=True)
        results["date"] = date_stamp()
        write_results("dppo_options.json", results)


if __name__ == "__main__":
    main()
