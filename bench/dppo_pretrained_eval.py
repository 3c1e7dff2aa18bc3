"""Re-evaluate DPPO runs' pretrained and final policies (10 deterministic episodes from the evaluation
seed, as the pipeline does), with every denoising step at its pretrained weights and, for DDIM heads,
at each deterministic-evaluation eta given.

Why: before commit 7ee7ab7 the offline-to-online pipeline evaluated the pretrained diffusion policy
before ``start_finetuning`` had copied the pretrained weights into the frozen early steps, so with
K' < K a run's ``pretrained`` return came from a chain whose first K - K' steps had random weights (the
pretraining checkpoints written before commit "BC checkpoints store the head after start_finetuning" carry
that random copy too; this script calls ``start_finetuning`` on them, a no-op on newer ones). And a DDIM
head evaluated at eta = 0 (DPPO's) follows another chain than the eta = 1 one that fine-tuning trains
(``policy.ddim_eval_eta``).
Writes ``bench/results/dppo_eval.json``.

    python bench/dppo_pretrained_eval.py bench/runs/dppo_options/ddpm20-ft10-s0 [...] [--ddim-eval-eta 0 1]
"""

from __future__ import annotations

import argparse
import json
import os
from pathlib import Path

import torch

from genpol.callbacks.evaluation import EVAL_SEED
from genpol.checkpoint import list_checkpoints
from genpol.policy import TrainedPolicy, evaluate_episodes

from common import date_stamp, read_results, write_results


def deterministic_return(checkpoint: Path, pretrained: bool, ddim_eval_eta: float | None) -> float:
    policy = TrainedPolicy.load(checkpoint)
    if pretrained:
        policy.head.start_finetuning()
    if ddim_eval_eta is not None:
        policy.head.ddim_eval_eta = ddim_eval_eta
    env = policy.make_env(num_envs=10)
    try:
        with torch.no_grad():
            return float(evaluate_episodes(env, lambda o: policy.act(o, deterministic=True), EVAL_SEED).returns.mean())
    finally:
        env.close()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("runs", nargs="+")
    parser.add_argument("--ddim-eval-eta", type=float, nargs="*", default=[0.0, 1.0])
    args = parser.parse_args()
    torch.set_num_threads(1)
    results = read_results("dppo_eval.json") or {"benchmark": "dppo_eval", "runs": {}}
    for run_dir in args.runs:
        row = {}
        for phase, directory in (("pretrained", Path(run_dir) / "pretrain" / "checkpoints"),
                                 ("final", Path(run_dir) / "checkpoints")):
            checkpoint = list_checkpoints(directory)[-1]
            use_ddim = TrainedPolicy.load(checkpoint).head.use_ddim
            for eta in args.ddim_eval_eta if use_ddim else [None]:
                key = phase if eta is None else f"{phase}, ddim_eval_eta={eta:g}"
                row[key] = deterministic_return(checkpoint, phase == "pretrained", eta)
        results["runs"][Path(run_dir).name] = row
        print(Path(run_dir).name, json.dumps(row), flush=True)
    results.update({"date": date_stamp(), "load_average_1min": os.getloadavg()[0]})
    write_results("dppo_eval.json", results)


if __name__ == "__main__":
    main()
