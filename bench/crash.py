"""Crash anywhere, lose nothing: SIGKILL at uniformly random moments, then the same command until the
run finishes; every resumed run must end bit for bit where the uninterrupted run ends (CPU).

For each configuration: one uninterrupted run (its wall time sets the window), then N trials. A
trial starts the run, sends SIGKILL after a moment drawn uniformly from that window (wherever the
run is: collecting, updating, writing a checkpoint, evaluating, switching phase), and re-runs the
same command until it exits 0. Its final checkpoint's policy weights and whole training state are
then compared with the uninterrupted run's, tensor by tensor.

    python bench/crash.py --configs ppo sac --trials 20 --seed 0

Writes ``bench/results/crash.json``: per configuration N, how many matched, and for each mismatch
the moment of the kill and the first tensor that differs. ``tests/test_crash.py`` runs two kills of
two configurations in CI with the seed printed, so a failure replays with ``--seed``.
"""

from __future__ import annotations

import argparse
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

from common import ROOT, date_stamp, machine, read_results, write_results

COMMON = ["env.num_envs=2", "pipeline.checkpoint_every=1", "pipeline.video=false", "pipeline.eval_episodes=1",
          "logger.progress_bar=false"]
# tiny runs of each pipeline and learner: many checkpoints, so a kill lands between and inside them
CONFIGS: dict[str, list[str]] = {
    "ppo": ["env=hopper", "total_steps=1536", "learner.rollout_steps=128", "learner.epochs=2"],
    "ppo-2workers": ["+experiment=ppo_mujoco", "env=hopper", "env.num_envs=4", "env.workers=2", "total_steps=1536",
                     "learner.rollout_steps=64", "learner.compile=false"],
    "trpo": ["env=hopper", "learner=trpo", "total_steps=1536", "learner.rollout_steps=128"],
    "sac": ["env=hopper", "policy=tanh_gaussian", "learner=sac", "total_steps=1024", "learner.learning_starts=256",
            "learner.iteration_steps=128", "learner.batch_size=64", "policy.hidden_sizes=[64,64]",
            "learner.critic_hidden_sizes=[64,64]"],
    # EXPO online (no dataset): replay, 3 critics, the diffusion base, its EMA and the edit policy
    "expo": ["+experiment=expo", "env=hopper", "learner.offline_ratio=0", "total_steps=512",
             "learner.learning_starts=128", "learner.num_qs=3", "learner.utd=2", "learner.iteration_steps=64",
             "learner.batch_size=16", "learner.num_samples=3", "learner.n_edit=2", "policy.hidden_sizes=[32,32]",
             "policy.denoising_steps=4", "policy.ft_denoising_steps=4", "learner.critic_hidden_sizes=[32,32]",
             "learner.edit_hidden_sizes=[32]"],
    # GoRL across a stage boundary: encoder, collection, decoder fit, the next stage's encoder
    "gorl": ["env=multigoal", "env.normalize_obs=true", "policy=gorl", "pipeline=gorl", "total_steps=2048",
             "pipeline.stage_weights=[1,3]", "learner.rollout_steps=32", "learner.minibatch_size=128",
             "learner.epochs=2", "policy.hidden_sizes=[16,16]", "policy.decoder_hidden_sizes=[32,32]",
             "policy.critic_hidden_sizes=[32,32]", "pipeline.collect_steps=1024", "pipeline.decoder_epochs=4",
             "pipeline.decoder_batch_size=128", "pipeline.eval_every=1", "pipeline.eval_episodes=4"],
}


def train_command(run_dir: Path, overrides: list[str]) -> list[str]:
    return [sys.executable, "-m", "genpol.train", *COMMON, *overrides, f"run_dir={run_dir}"]


def run_until_done(run_dir: Path, overrides: list[str], attempts: int = 4) -> None:
    """The same command until it exits 0 (a resume after the kill finishes the run)."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore"}
    for _ in range(attempts):
        result = subprocess.run(train_command(run_dir, overrides), cwd=ROOT, capture_output=True, text=True, env=env)
        if result.returncode == 0:
            return
    raise RuntimeError(f"{run_dir} did not finish in {attempts} attempts:\n{result.stderr[-3000:]}")


def first_difference(a: Any, b: Any, where: str = "") -> str | None:
    """The path of the first tensor (or value) in which two checkpoint trees differ; None if equal."""
    import torch

    if isinstance(a, torch.Tensor) or isinstance(b, torch.Tensor):
        same = (isinstance(a, torch.Tensor) and isinstance(b, torch.Tensor) and a.shape == b.shape
                and a.dtype == b.dtype and torch.equal(a, b))
        return None if same else where or "."
    if isinstance(a, dict) and isinstance(b, dict):
        if a.keys() != b.keys():
            return f"{where} (keys {sorted(set(a) ^ set(b))})"
        for key in a:
            found = first_difference(a[key], b[key], f"{where}/{key}")
            if found:
                return found
        return None
    if isinstance(a, (list, tuple)) and isinstance(b, (list, tuple)):
        if len(a) != len(b):
            return f"{where} (lengths {len(a)}, {len(b)})"
        for index, (x, y) in enumerate(zip(a, b)):
            found = first_difference(x, y, f"{where}[{index}]")
            if found:
                return found
        return None
    return None if a == b else where or "."


def final_state(run_dir: Path) -> dict[str, Any]:
    """The latest checkpoint's name, policy weights and training state (what an exact resume must match)."""
    from genpol.checkpoint import list_checkpoints, load_policy_files, load_training_state

    path = list_checkpoints(run_dir / "checkpoints")[-1]
    state = load_training_state(path)
    # clocks, not state: the seconds a run has spent (a resumed run counts the killed attempt's too)
    state.pop("wall_time", None)
    state.get("callbacks", {}).get("Summary", {}).pop("elapsed", None)
    return {"name": path.name, "policy": load_policy_files(path)[1], "training_state": state}


def reference_run(name: str, workdir: Path) -> tuple[Path, float, dict[str, Any]]:
    """The uninterrupted run: its directory, wall time and final state."""
    run_dir = workdir / f"{name}-reference"
    start = time.perf_counter()
    run_until_done(run_dir, CONFIGS[name], attempts=1)
    return run_dir, time.perf_counter() - start, final_state(run_dir)


def trial(name: str, workdir: Path, index: int, moment: float, reference: dict[str, Any]) -> dict[str, Any]:
    """One kill at ``moment`` seconds after the start, then runs until done; the comparison."""
    run_dir = workdir / f"{name}-trial{index}"
    shutil.rmtree(run_dir, ignore_errors=True)
    process = subprocess.Popen(train_command(run_dir, CONFIGS[name]), cwd=ROOT, stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    try:
        process.wait(timeout=moment)
        killed = False  # it finished first
    except subprocess.TimeoutExpired:
        process.send_signal(signal.SIGKILL)
        process.wait()
        killed = True
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").glob("step_*")) if killed else []
    run_until_done(run_dir, CONFIGS[name])
    final = final_state(run_dir)
    difference = first_difference({"name": reference["name"], "policy": reference["policy"],
                                   "training_state": reference["training_state"]}, final)
    shutil.rmtree(run_dir, ignore_errors=True)
    return {"moment_s": round(moment, 3), "killed": killed, "checkpoints_at_kill": checkpoints,
            "identical": difference is None, "first_difference": difference}


def crash_test(name: str, trials: int, seed: int, workdir: Path) -> dict[str, Any]:
    """``trials`` random kills of configuration ``name`` (moments from ``random.Random(seed)``)."""
    _, duration, reference = reference_run(name, workdir)
    draws = random.Random(f"{name}-{seed}")
    results = [trial(name, workdir, index, draws.uniform(0.0, duration), reference) for index in range(trials)]
    return {"config": CONFIGS[name], "seed": seed, "reference_wall_s": round(duration, 2), "trials": len(results),
            "killed": sum(r["killed"] for r in results), "identical": sum(r["identical"] for r in results),
            "mismatches": [r for r in results if not r["identical"]], "runs": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    results = {}
    with tempfile.TemporaryDirectory(prefix="genpol-crash-") as directory:
        for name in args.configs:
            results[name] = crash_test(name, args.trials, args.seed, Path(directory))
            row = results[name]
            print(f"{name}: {row['identical']} of {row['trials']} identical ({row['killed']} killed mid-run)", flush=True)
    for row in results.values():
        row.update(date=date_stamp(), machine=machine())
    # configurations measured at other times keep their rows (each with its own date and machine)
    merged = {**read_results("crash.json").get("results", {}), **results}
    write_results("crash.json", {"results": merged})
    print("| configuration | trials | killed mid-run | identical | first mismatch |\n|---|---|---|---|---|")
    for name, row in merged.items():
        mismatch = row["mismatches"][0] if row["mismatches"] else None
        where = f"{mismatch['first_difference']} (kill at {mismatch['moment_s']} s)" if mismatch else "-"
        print(f"| {name} | {row['trials']} | {row['killed']} | {row['identical']} | {where} |")


if __name__ == "__main__":
    main()
