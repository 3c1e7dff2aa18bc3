"""GoRL against Gaussian PPO with the same encoder settings, on two tasks.

* ``hopper``: dm_control hopper-stand (CPU MuJoCo). GoRL runs its four stages (encoder budgets
  2:2:1:1 of ``--hopper-steps``, ``--collect-steps`` of collection after stages 0-2); the baseline is
  the same head and settings in a single stage, i.e. tanh-Gaussian PPO with GoRL's stage-0 encoder,
  critic and trust region for the whole encoder budget. The paper's headline (GoRL ~880 against
  PPO ~300) is at 180M env steps on a GPU; a CPU budget of a few hundred thousand steps stays far
  below where either method learns to stand, so this run checks the pipeline at scale and records
  the numbers, nothing more (see ``--hopper-steps``).
* ``multigoal``: genpol's MultiGoal (four equally good goals). Reported: goals reached in 100
  stochastic episodes, the angular entropy of 2000 actions at the start state, the return.

Reported per run: the final combined policy's deterministic evaluation (the last stage's best
encoder with its decoder), each stage's best evaluation, encoder / collection / total env steps,
and wall time. Writes ``bench/results/gorl.json``.

    python bench/gorl.py [--tasks hopper multigoal] [--seeds 0 1] [--hopper-steps 150000]
                         [--decoder flow|ddim] [--methods gorl gaussian]
"""

from __future__ import annotations

import argparse
import json
import time

import torch

from common import RUNS, date_stamp, read_results, write_results

SINGLE_STAGE = ["pipeline.stage_weights=[1]"]  # the baseline: stage 0 for the whole budget


def hopper_overrides(args: argparse.Namespace) -> list[str]:
    return ["+experiment=gorl", "env=dmc", "env.id=hopper-stand", f"total_steps={args.hopper_steps}",
            f"pipeline.collect_steps={args.collect_steps}", "pipeline.eval_every=10", "pipeline.eval_episodes=5",
            "pipeline.video=false", "logger.progress_bar=false"]


def multigoal_overrides(args: argparse.Namespace) -> list[str]:
    return ["+experiment=gorl", "env=multigoal", f"total_steps={args.multigoal_steps}", "env.num_envs=16",
            "learner.rollout_steps=128", "learner.minibatch_size=256", "learner.epochs=10", "learner.lr=3e-4",
            f"pipeline.collect_steps={args.multigoal_steps // 4}", "pipeline.eval_every=5",
            "pipeline.eval_episodes=20", "pipeline.video=false", "logger.progress_bar=false"]


def run(name: str, task: str, overrides: list[str], seed: int) -> dict:
    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.train import run_training

    run_dir = RUNS / "gorl" / f"{task}-{name}-s{seed}"
    start = time.perf_counter()
    summary = run_training(validate(compose_config([*overrides, f"seed={seed}", f"run_dir={run_dir}"])), run_dir)
    return {"method": name, "task": task, "seed": seed, "run_dir": str(run_dir),
            "eval_return_mean": summary["eval_return_mean"],
            "stage_best_eval_returns": [stage["best_eval_return"] for stage in summary["stages"]],
            "stage_final_eval_returns": [stage["final_eval_return"] for stage in summary["stages"]],
            "decoder_best_val_losses": [stage.get("decoder_best_val_loss") for stage in summary["stages"][:-1]],
            "encoder_env_steps": summary["encoder_env_steps"], "collection_env_steps": summary["collection_env_steps"],
            "total_env_steps": summary["total_env_steps"], "wall_time_s": time.perf_counter() - start,
            "overrides": overrides}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--tasks", nargs="+", default=["multigoal", "hopper"], choices=["multigoal", "hopper"])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1])
    parser.add_argument("--hopper-steps", type=int, default=150_000, help="encoder env steps (paper: 180M)")
    parser.add_argument("--collect-steps", type=int, default=15_000, help="hopper collection per stage (paper: 20M)")
    parser.add_argument("--multigoal-steps", type=int, default=61_440)
    parser.add_argument("--decoder", default="flow", choices=["flow", "ddim"],
                        help="GoRL's decoder (policy.decoder); ddim runs are recorded as method gorl-ddim")
    parser.add_argument("--methods", nargs="+", default=["gorl", "gaussian"], choices=["gorl", "gaussian"])
    args = parser.parse_args()
    torch.set_num_threads(1)
    from genpol.api import load_policy
    from genpol.multigoal_analysis import goal_coverage

    # runs of earlier invocations stay (a later run of the same task, method and seed replaces its own)
    runs = read_results("gorl.json").get("runs", [])
    for task in args.tasks:
        overrides = hopper_overrides(args) if task == "hopper" else multigoal_overrides(args)
        for seed in args.seeds:
            methods = {"gorl": ("gorl" if args.decoder == "flow" else "gorl-ddim", [f"policy.decoder={args.decoder}"]),
                       "gaussian": ("gaussian", SINGLE_STAGE)}
            for name, extra in (methods[method] for method in args.methods):
                result = run(name, task, [*overrides, *extra], seed)
                if task == "multigoal":
                    coverage = goal_coverage(load_policy(result["run_dir"]), episodes=100, seed=seed)
                    result.update({"goals_reached": int((coverage.goal_counts > 0).sum()),
                                   "episodes_per_goal": coverage.goal_counts.tolist(),
                                   "angular_entropy_at_start": coverage.angular_entropy,
                                   "stochastic_return": coverage.mean_return})
                runs = [r for r in runs if (r["task"], r["method"], r["seed"]) != (task, name, seed)] + [result]
                print(json.dumps({k: v for k, v in result.items() if k != "run_dir"}), flush=True)
                write_results("gorl.json", {"benchmark": "gorl", "date": date_stamp(), "last_args": vars(args),
                                            "machine": "2 shared CPU cores, torch 1 thread", "runs": runs})


if __name__ == "__main__":
    main()
