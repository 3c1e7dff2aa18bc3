"""Re-evaluate a DPPO run's pretrained policy with every denoising step at its pretrained weights.

Before commit 7ee7ab7 the offline-to-online pipeline evaluated the pretrained diffusion policy before
``start_finetuning`` had copied the pretrained weights into the frozen early steps, so with K' < K the
``pretrained`` return of a run's summary came from a chain whose first K - K' steps had random weights.
The checkpoint's policy weights carry the same random frozen copy, so this script loads the last
pretraining checkpoint, calls ``start_finetuning`` and evaluates like the pipeline (10 deterministic
episodes from the evaluation seed).

    python bench/dppo_pretrained_eval.py bench/runs/dppo_options/ddpm20-ft10-s0 [...]
"""

from __future__ import annotations

import json
import sys

import torch

from genpol.checkpoint import list_checkpoints
from genpol.policy import TrainedPolicy, evaluate_episodes
from genpol.callbacks.evaluation import EVAL_SEED


def main() -> None:
    torch.set_num_threads(1)
    for run_dir in sys.argv[1:]:
        checkpoint = list_checkpoints(f"{run_dir}/pretrain/checkpoints")[-1]
        policy = TrainedPolicy.load(checkpoint)
        policy.head.start_finetuning()
        env = policy.make_env(num_envs=10)
        try:
            with torch.no_grad():
                returns = evaluate_episodes(env, lambda o: policy.act(o, deterministic=True), EVAL_SEED).returns
        finally:
            env.close()
        print(json.dumps({"run_dir": run_dir, "checkpoint": str(checkpoint), "pretrained_return": float(returns.mean()),
                          "episodes": len(returns)}))


if __name__ == "__main__":
    main()
