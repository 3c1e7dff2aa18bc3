"""Wall-clock to a deterministic return of 5000 on HalfCheetah-v5, against rl-baselines3-zoo's PPO.

The zoo's PPO first evaluates at 5000 after 250k steps, about 660 s of training at its ~378 env-steps/s
(``../shared/notes/ANCHORS.md``, one machine on one day). Machines of that kind differ by up to ~1.5x
between sessions, so the script also runs the peer side by side: stable-baselines3's PPO at the zoo's
HalfCheetah settings for ``--zoo-steps`` steps before and after genpol's runs (one torch thread, as
ANCHORS.md measured it), and quotes each run against 250k steps at that rate on this machine as well as
against the fixed 660 s. genpol's runs train ``--steps`` with a
checkpoint every ``--every`` iterations and no evaluation inside the run, so that the timed training
is training only; afterwards every checkpoint is evaluated as the zoo's curve was (5 deterministic
episodes, reset seeds 10000-10004), and the run's time to the target is the training wall time
(``progress.jsonl``) at the first checkpoint whose evaluation reaches it.

Configurations: ``+experiment=default`` as ``make train`` runs it (gymnasium, 2 env processes), the
same on EnvPool's C++ HalfCheetah-v5 (2 threads, one process), and ``+experiment=default_fast`` (the
default with 128-128 networks). ``--configs`` names them by the middle part of their row names.

    python bench/time_to_return.py [--seeds 0] [--steps 600000] [--every 10] [--target 5000]
        [--configs gymnasium EnvPool "gymnasium 128-128"]

Writes ``bench/results/time_to_return.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import time
from pathlib import Path

from common import RUNS, date_stamp, read_progress, read_results, train_once, write_results

ZOO_SECONDS, ZOO_STEPS = 660.0, 250_000
CONFIGS = {
    "default, gymnasium, 2 env processes": ["+experiment=default"],
    "default, EnvPool, 2 threads": ["+experiment=default", "env=envpool", "env.id=HalfCheetah-v5", "env.workers=1",
                                    "+env.kwargs.num_threads=2"],
    # the same loop with 128-128 networks: ~1.4x the rate at about the same steps to 5000
    "default_fast, gymnasium 128-128, 2 env processes": ["+experiment=default_fast"],
}


def train(run_dir: Path, overrides: list[str], seed: int, steps: int, every: int) -> dict:
    """The run's summary, training it first unless it has one (no evaluation inside the run: the module
    docstring says why)."""
    return train_once(run_dir, [*overrides, f"seed={seed}", f"total_steps={steps}", "pipeline.eval_every=0",
                                "pipeline.video=false", "pipeline.eval_episodes=1",
                                f"pipeline.checkpoint_every={every}", "pipeline.keep_checkpoints=1000",
                                "logger.progress_bar=false"], echo=True)


def zoo_rate(steps: int) -> float:
    """env-steps/s of stable-baselines3's PPO with rl-baselines3-zoo's HalfCheetah hyperparameters (ANCHORS.md's
    peer), after one warm-up rollout and update."""
    import torch
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    env = VecNormalize(make_vec_env("HalfCheetah-v5", n_envs=1, seed=0))
    model = PPO("MlpPolicy", env, n_steps=512, batch_size=64, gamma=0.98, gae_lambda=0.92, n_epochs=20,
                ent_coef=0.000401762, learning_rate=2.0633e-05, clip_range=0.1, max_grad_norm=0.8, vf_coef=0.58096,
                policy_kwargs=dict(log_std_init=-2, ortho_init=False, activation_fn=torch.nn.ReLU,
                                   net_arch=dict(pi=[256, 256], vf=[256, 256])), seed=0, device="cpu")
    model.learn(total_timesteps=512)
    start = time.perf_counter()
    model.learn(total_timesteps=steps, reset_num_timesteps=False)
    rate = steps / (time.perf_counter() - start)
    env.close()
    torch.set_num_threads(threads)
    return rate


def first_reach(run_dir: Path, target: float) -> dict:
    """Evaluate the checkpoints in step order until one reaches ``target``. Evaluations are deterministic, so
    they are kept in ``<run_dir>/checkpoint_returns.json`` and a re-run of the script reads them back."""
    from genpol.api import evaluate

    progress = read_progress(run_dir)
    wall = {row["global_step"]: row["wall_time"] for row in progress}
    # the first iteration's wall time is mostly torch.compile's: ~12-14 s on a cold inductor cache, ~4 s
    # when an earlier run of the same networks left its kernels in the cache
    first_iteration = progress[0]["wall_time"]
    cache_path = run_dir / "checkpoint_returns.json"
    cache = json.loads(cache_path.read_text()) if cache_path.exists() else {}
    curve = []
    for checkpoint in sorted((run_dir / "checkpoints").iterdir()):
        step = int(checkpoint.name.split("_")[-1])
        if checkpoint.name not in cache:
            cache[checkpoint.name] = evaluate(run_dir, episodes=5, checkpoint=str(checkpoint))["deterministic_return_mean"]
            cache_path.write_text(json.dumps(cache, indent=1))
        curve.append((step, cache[checkpoint.name]))
        print(f"  {step:>8d} steps  {curve[-1][1]:8.0f}  at {wall.get(step, float('nan')):6.1f} s", flush=True)
        if curve[-1][1] >= target:
            return {"steps": step, "train_seconds": wall[step], "first_iteration_s": first_iteration, "curve": curve}
    return {"steps": None, "train_seconds": None, "first_iteration_s": first_iteration, "curve": curve}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, nargs="+", default=[0])
    parser.add_argument("--steps", type=int, default=600_000)
    parser.add_argument("--every", type=int, default=10, help="iterations (2048 env steps) between checkpoints")
    parser.add_argument("--target", type=float, default=5000.0)
    parser.add_argument("--configs", nargs="+", default=[name.split(",")[1].strip() for name in CONFIGS],
                        help='configs to run ("gymnasium", "EnvPool", "gymnasium 128-128"); rows of the others are '
                             'kept from the results file')
    parser.add_argument("--zoo-steps", type=int, default=10_240,
                        help="steps of the zoo's PPO timed before and after genpol's runs (multiple of 512)")
    args = parser.parse_args()
    load_before = os.getloadavg()[0]
    zoo_rates = [zoo_rate(args.zoo_steps)]
    print(f"zoo PPO here: {zoo_rates[0]:.0f} env-steps/s", flush=True)
    previous = read_results("time_to_return.json")
    rows = {name: row for name, row in previous.get("rows", {}).items()
            if previous.get("target") == args.target and name.split(",")[1].strip() not in args.configs}
    for name, overrides in CONFIGS.items():
        if name.split(",")[1].strip() not in args.configs:
            continue
        for seed in args.seeds:
            run_dir = RUNS / "time_to_return" / f"{name.split(',')[1].strip()}-s{seed}"
            summary = train(run_dir, overrides, seed, args.steps, args.every)
            reached = first_reach(run_dir, args.target)
            seconds = reached["train_seconds"]
            rows[f"{name}, seed {seed}"] = {
                **reached, "overrides": overrides, "sps": summary["sps"],
                "trained": date_stamp((run_dir / "summary.json").stat().st_mtime),
                "speedup_over_zoo": None if seconds is None else ZOO_SECONDS / seconds}
    zoo_rates.append(zoo_rate(args.zoo_steps))
    zoo_here = ZOO_STEPS / statistics.mean(zoo_rates)  # the zoo's 250k steps at its rate on this machine
    for name, row in rows.items():
        if name.split(",")[1].strip() in args.configs:
            seconds = row["train_seconds"]
            row["zoo_seconds_here"] = zoo_here
            row["speedup_over_zoo_here"] = None if seconds is None else zoo_here / seconds
    out = {"benchmark": "time_to_return", "target": args.target, "zoo": {"seconds": ZOO_SECONDS, "steps": ZOO_STEPS},
           "zoo_here": {"env_steps_per_s": zoo_rates, "steps_timed": args.zoo_steps, "seconds_to_target": zoo_here},
           "date": date_stamp(), "load_average": [load_before, os.getloadavg()[0]], "rows": rows}
    path = write_results("time_to_return.json", out)
    print(f"\nzoo PPO here: {', '.join(f'{rate:.0f}' for rate in zoo_rates)} env-steps/s, so 250k steps take "
          f"{zoo_here:.0f} s")
    print(f"\n| run | steps to {args.target:.0f} | training s | of it, the first iteration | env-steps/s | "
          "vs the zoo's 660 s | vs the zoo here |\n|---|---|---|---|---|---|---|")
    def ratio(value: float | None) -> str:
        return "not reached" if value is None else f"{value:.1f}x"

    for name, row in rows.items():
        print(f"| {name} | {row['steps']} | {row['train_seconds']} | {row.get('first_iteration_s')} | {row['sps']:.0f} | "
              f"{ratio(row['speedup_over_zoo'])} | {ratio(row.get('speedup_over_zoo_here'))} |")
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
