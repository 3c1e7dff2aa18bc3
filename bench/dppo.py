"""DPPO offline to online on Hopper-v5: collect a medium dataset, pretrain a diffusion policy by BC,
fine-tune it with DPPO; plus DPPO's training throughput against Gaussian PPO and the memory of
the stored denoising chains.

1. Dataset: 100k transitions of a Gaussian PPO checkpoint at "medium" level (default: the Hopper
   run of ``bench/learning.py mujoco``, about 1100-1200 return), written as a D4RL HDF5 file and a
   Minari dataset (``bench/data/``).
2. ``python -m genpol.train +experiment=dppo_hopper dataset.path=<file>``: 20k BC steps, then DPPO.
3. Throughput: env-steps/s of the DPPO fine-tuning loop and of Gaussian PPO with the same envs and
   rollout length, side by side in this process. The Gaussian row keeps its own 64-64 tanh critic
   (DPPO's is Mish 256 x 3) and both run once, one after the other: ``bench/dppo_throughput.py``
   measures DPPO's options against Gaussian PPO with the same critic in interleaved rounds, and
   ``bench/dppo_options.py`` what the options cost in return.

    python bench/dppo.py [--policy bench/runs/learning/hopper-ppo-1000k-s0] [--steps 500000]

Writes ``bench/results/dppo.json``.
"""

from __future__ import annotations

import argparse
import json
import time
from pathlib import Path

import torch

from common import ROOT, RUNS, curve, date_stamp, read_progress, read_summary, run_python, write_results

DATA = ROOT / "bench" / "data"


def chain_memory(dataset: Path) -> dict:
    """Bytes of the stored records per rollout sample and per rollout, DPPO vs Gaussian."""
    from genpol.api import compose_config
    from genpol.build import env_stack, make_env, make_head
    from genpol.configure import validate

    out = {}
    for name, overrides in (("dppo", ["+experiment=dppo_hopper", f"dataset.path={dataset}"]),
                            ("gaussian", ["env=hopper", "env.num_envs=16", "learner.rollout_steps=64"])):
        cfg = validate(compose_config(["run_dir=/tmp/unused", *overrides]))
        env = make_env(cfg.env, gamma=0.99, seed=0, stack=env_stack(cfg.policy), num_envs=2)
        head = make_head(cfg.policy, env.obs_dim, env.act_dim)
        with torch.no_grad():
            _, record = head.sample(env.reset())
        per_sample = sum(value[0].numel() * value.element_size() for value in record.values())
        rollout = cfg.env.num_envs * cfg.learner.rollout_steps
        out[name] = {"record_bytes_per_sample": per_sample, "rollout_samples": rollout,
                     "record_bytes_per_rollout": per_sample * rollout, "record_keys": {k: list(v.shape[1:]) for k, v in record.items()}}
        env.close()
    return out


def throughput(dataset: Path, iterations: int) -> dict:
    from throughput import genpol_run

    dppo_sps, dppo = genpol_run(["+experiment=dppo_hopper", f"dataset.path={dataset}"], iterations)
    gauss_sps, gauss = genpol_run(["env=hopper", "env.num_envs=16", "learner.rollout_steps=64",
                                   "learner.minibatch_size=256", "learner.epochs=5"], iterations * 4)
    return {"dppo": {"sps": dppo_sps, **dppo}, "gaussian_ppo": {"sps": gauss_sps, **gauss},
            "dppo_fraction_of_gaussian": dppo_sps / gauss_sps}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--policy", default=str(RUNS / "learning" / "hopper-ppo-1000k-s0"))
    parser.add_argument("--dataset-steps", type=int, default=100_000)
    parser.add_argument("--steps", type=int, default=500_000, help="online fine-tuning env steps")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--skip-training", action="store_true", help="throughput and memory only")
    args = parser.parse_args()
    torch.set_num_threads(1)

    dataset = DATA / "hopper_medium-v5.hdf5"
    if not dataset.exists():
        run_python(["-m", "genpol.data.collect", "--policy", args.policy, "--env", "gym:Hopper-v5",
                    "--steps", str(args.dataset_steps), "--num-envs", "8", "--seed", "1", "--d4rl", str(dataset),
                    "--minari", "genpol/hopper/medium-v0", "--minari-root", str(DATA / "minari")], echo=True)
    results: dict = {"benchmark": "dppo_hopper", "date": date_stamp(), "dataset": str(dataset),
                     "dataset_policy": args.policy}
    results["memory"] = chain_memory(dataset)
    results["throughput"] = throughput(dataset, iterations=2)
    print(json.dumps(results["throughput"], indent=2), flush=True)
    if not args.skip_training:
        run_dir = RUNS / "dppo" / f"hopper-s{args.seed}"
        start = time.time()
        # run every time, no skip: wall_time_s times this call; genpol.train resumes an existing run_dir
        run_python(["-m", "genpol.train", "+experiment=dppo_hopper", f"dataset.path={dataset}", f"seed={args.seed}",
                    f"total_steps={args.steps}", "logger.progress_bar=false", "pipeline.video=false",
                    f"run_dir={run_dir}"], echo=True)
        summary = read_summary(run_dir)
        results["run"] = {
            "run_dir": str(run_dir), "wall_time_s": time.time() - start,
            "dataset_normalized_score": summary["pretrained"].get("dataset_normalized_score"),
            "pretrained_normalized_score": summary["pretrained"].get("normalized_score"),
            "pretrained_return": summary["pretrained"]["eval_return_mean"],
            "finetuned_normalized_score": summary["eval_normalized_score"],
            "finetuned_return": summary["eval_return_mean"], "env_steps": summary["env_steps"],
            "pretrain_wall_time_s": summary["pretrained"]["wall_time_s"],
            "eval_curve": curve(read_progress(run_dir), "eval/normalized_score"),
        }
        print(json.dumps(results["run"], indent=2))
    write_results("dppo.json", results)


if __name__ == "__main__":
    main()
