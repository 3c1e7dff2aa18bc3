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
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "bench" / "results"
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
    out_path = RESULTS / "dppo_options.json"
    results = json.loads(out_path.read_text()) if out_path.exists() else {}
    results.update({"benchmark": "dppo_options", "dataset": args.dataset, "online_steps": args.steps,
                    "runs": {**results.get("runs", {})}})  # runs of earlier invocations (other seeds) stay
    for name in args.options:
        slug, overrides = OPTIONS[name]
        run_dir = ROOT / "bench" / "runs" / "dppo_options" / f"{slug}-s{args.seed}"
        command = [sys.executable, "-m", "genpol.train", "+experiment=dppo_hopper", f"dataset.path={args.dataset}",
                   *overrides, f"seed={args.seed}", f"total_steps={args.steps}", "logger.progress_bar=false",
                   "pipeline.video=false", f"run_dir={run_dir}"]
        print("$", " ".join(command), flush=True)
        start, load = time.time(), os.getloadavg()[0]
        subprocess.run(command, cwd=ROOT, check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
        summary = json.loads((run_dir / "summary.json").read_text())
        curve = [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines() if line.strip()]
        results["runs"][run_dir.name] = {
            "option": name, "seed": args.seed, "overrides": overrides, "run_dir": str(run_dir.relative_to(ROOT)),
            "wall_time_s": time.time() - start,
            "load_average_1min_at_start": load, "load_average_1min_at_end": os.getloadavg()[0],
            "pretrained_return": summary["pretrained"]["eval_return_mean"],
            "pretrain_wall_time_s": summary["pretrained"]["wall_time_s"],
            "final_return": summary["eval_return_mean"], "env_steps": summary["env_steps"],
            "eval_curve": [(row["global_step"], row["eval/episodic_return"]) for row in curve if "eval/episodic_return" in row],
            # load-dependent (other jobs share the machine): bench/dppo_throughput.py has the side-by-side rates
            "online_sps_median": statistics.median(row["charts/SPS"] for row in curve if "charts/SPS" in row),
        }
        print(json.dumps(results["runs"][run_dir.name], indent=2), flush=True)
        results["date"] = time.strftime("%Y-%m-%d %H:%M")
        RESULTS.mkdir(exist_ok=True)
        out_path.write_text(json.dumps(results, indent=2))


if __name__ == "__main__":
    main()
