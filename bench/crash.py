"""Crash anywhere, lose nothing: SIGKILL (or SIGTERM) at uniformly random moments, then the same command
until the run finishes; every resumed run must end bit for bit where the uninterrupted run ends (CPU).

For each configuration: one uninterrupted run (its wall time sets the window), then N trials. A
trial starts the run, sends the signal after a moment drawn uniformly from that window (wherever the
run is: collecting, updating, writing a checkpoint, evaluating, switching phase), and re-runs the
same command until it exits 0. Its final checkpoint's policy weights, whole training state and
metrics rows are then compared with the uninterrupted run's, tensor by tensor.

With ``--signal term`` the run must stop as documented: exit 4 (``EXIT_STOPPED``) with no
``summary.json`` once its handler is installed (a SIGTERM in the first second of interpreter start,
before that, ends it as signal 15 and is reported as such), or 0 if it had already finished.

Configurations whose resume is inexact by design (``INEXACT``: EnvPool exposes no simulator state,
and resets every env on resume) are checked for the documented behaviour instead: the resumed run
finishes, warns, and is repeatable: two resumes from the same killed state end identically.
Configurations with ``DATASET`` train on a random-policy Hopper-v5 file in D4RL's format, made once.

    python bench/crash.py --configs ppo sac --trials 20 --seed 0 [--signal term]

Writes ``bench/results/crash.json``: per configuration N, how many matched, and for each mismatch
the moment of the kill and the first tensor that differs. ``tests/test_crash.py`` runs two kills of
two configurations in CI with the seed printed, so a failure replays with ``--seed``.
"""

from __future__ import annotations

import argparse
import json
import os
import random
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

from common import ROOT, date_stamp, machine, read_results, update_results

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
    # RLPD: half of every batch from the offline dataset, 3 critics, utd 2
    "rlpd": ["+experiment=rlpd", "env=hopper", "DATASET", "total_steps=512", "learner.learning_starts=128",
             "learner.num_qs=3", "learner.utd=2", "learner.iteration_steps=64", "learner.batch_size=32",
             "policy.hidden_sizes=[32,32]", "learner.critic_hidden_sizes=[32,32]", "learner.compile=false"],
    # offline-to-online, both phases: consistency BC + Q offline, then Consistency-AC online
    "consistency_ac": ["+experiment=consistency_ac", "env=hopper", "DATASET", "total_steps=384",
                       "pipeline.pretrain_steps=300", "pipeline.pretrain_log_every=50", "policy.hidden_sizes=[32,32,32]",
                       "learner.critic_hidden_sizes=[32,32]", "learner.learning_starts=64", "learner.batch_size=32",
                       "learner.iteration_steps=64", "learner.act_candidates=4"],
    # DPPO offline-to-online: diffusion BC, then PPO fine-tuning of the last denoising steps
    "dppo": ["+experiment=dppo_hopper", "DATASET", "env.num_envs=2", "total_steps=512", "pipeline.pretrain_steps=200",
             "pipeline.pretrain_log_every=50", "policy.denoising_steps=4", "policy.ft_denoising_steps=2",
             "policy.hidden_sizes=[32,32,32]", "policy.critic_hidden_sizes=[32,32]", "learner.rollout_steps=32",
             "learner.minibatch_size=64", "learner.epochs=1", "pipeline.compile_sampling=false", "update_threads=1"],
    # the maximum-entropy learners (issue 30): MaxEntDP's diffusion policy with its Q-weighted noise estimation and
    # its importance-sampled log-likelihood, and MEow's energy-based flow with its target flow
    "maxentdp": ["+experiment=maxentdp", "env=hopper", "total_steps=512", "learner.learning_starts=128",
                 "learner.iteration_steps=64", "learner.batch_size=32", "learner.candidates=8",
                 "learner.log_prob_levels=3", "learner.log_prob_draws=2", "learner.eval_candidates=3",
                 "policy.sampling_steps=3", "policy.hidden_sizes=[32,32]", "learner.critic_hidden_sizes=[32,32]",
                 "pipeline.eval_every=2", "pipeline.eval_episodes=1"],
    "meow": ["+experiment=meow", "env=hopper", "total_steps=512", "learner.learning_starts=128",
             "learner.iteration_steps=64", "learner.batch_size=32", "policy.base_hidden_sizes=[32]",
             "policy.coupling_hidden_sizes=[32,32]", "policy.shift_hidden_sizes=[32]", "pipeline.eval_every=2",
             "pipeline.eval_episodes=1"],
    # a batched simulator of the user's own (tests/custom_envs/batched.py, with its state_dict)
    "custom_env": ["env=custom", "env.id=custom_envs.batched:make_env", "total_steps=1536", "learner.rollout_steps=128",
                   "learner.epochs=2"],
    # EnvPool: inexact by design (INEXACT)
    # (3072 steps: its start is slow, and a longer run puts more kills between checkpoints)
    "envpool": ["env=envpool", "env.id=Hopper-v5", "total_steps=3072", "learner.rollout_steps=128", "learner.epochs=2"],
    # GoRL across a stage boundary: encoder, collection, decoder fit, the next stage's encoder
    "gorl": ["env=multigoal", "env.normalize_obs=true", "policy=gorl", "pipeline=gorl", "total_steps=2048",
             "pipeline.stage_weights=[1,3]", "learner.rollout_steps=32", "learner.minibatch_size=128",
             "learner.epochs=2", "policy.hidden_sizes=[16,16]", "policy.decoder_hidden_sizes=[32,32]",
             "policy.critic_hidden_sizes=[32,32]", "pipeline.collect_steps=1024", "pipeline.decoder_epochs=4",
             "pipeline.decoder_batch_size=128", "pipeline.eval_every=1", "pipeline.eval_episodes=4"],
}


INEXACT = {"envpool"}  # resume is documented as inexact: checked for repeatability instead
SIGNALS = {"kill": signal.SIGKILL, "term": signal.SIGTERM}
_DATASETS: dict[Path, str] = {}


def dataset_path(workdir: Path) -> str:
    """A random-policy Hopper-v5 dataset in D4RL's format under ``workdir``, made on first use."""
    if workdir not in _DATASETS:
        path = workdir / "hopper_random-v5.hdf5"
        if not path.exists():
            subprocess.run([sys.executable, "-m", "genpol.data.collect", "--policy", "random", "--env", "gym:Hopper-v5",
                            "--steps", "1000", "--num-envs", "2", "--d4rl", str(path)], cwd=ROOT, check=True,
                           capture_output=True)
        _DATASETS[workdir] = str(path)
    return _DATASETS[workdir]


def overrides_of(name: str, workdir: Path) -> list[str]:
    """``CONFIGS[name]`` with ``DATASET`` replaced by the path of the random Hopper dataset."""
    return [f"dataset.path={dataset_path(workdir)}" if item == "DATASET" else item for item in CONFIGS[name]]


def train_arguments(run_dir: Path, overrides: list[str]) -> list[str]:
    return [*COMMON, *overrides, f"run_dir={run_dir}"]


def cold_start(module: str, arguments: list[str], env: dict[str, str]) -> subprocess.Popen:
    """``python -m module *arguments`` from the repository root, stdout discarded, stderr kept. The
    harness's process factory: the test suite passes one that forks a warm interpreter instead
    (``tests/warm_start.py``), with the same signals, exit codes and stderr."""
    return subprocess.Popen([sys.executable, "-m", module, *arguments], cwd=ROOT, stdout=subprocess.DEVNULL,
                            stderr=subprocess.PIPE, text=True, env=env)


def child_env() -> dict[str, str]:
    """The children's environment: tests/ on the path for the custom env's module."""
    path = os.pathsep.join(filter(None, [str(ROOT / "tests"), os.environ.get("PYTHONPATH")]))
    # warnings off but RuntimeWarning, which carries EnvPool's "resume is inexact" the harness checks
    return {**os.environ, "PYTHONWARNINGS": "ignore,default::RuntimeWarning", "PYTHONPATH": path}


def run_until_done(run_dir: Path, overrides: list[str], attempts: int = 4, start: Callable = cold_start) -> str:
    """The same command until it exits 0 (a resume after the kill finishes the run); its stderr."""
    for _ in range(attempts):
        process = start("genpol.train", train_arguments(run_dir, overrides), child_env())
        _, stderr = process.communicate()
        if process.returncode == 0:
            return stderr
    raise RuntimeError(f"{run_dir} did not finish in {attempts} attempts:\n{stderr[-3000:]}")


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
    """The latest checkpoint's name, policy weights and training state, and the global steps of the
    metrics file's rows: what an exact resume must match."""
    from genpol.checkpoint import list_checkpoints, load_policy_files, load_training_state

    path = list_checkpoints(run_dir / "checkpoints")[-1]
    state = load_training_state(path)
    # clocks, not state: the seconds a run has spent (a resumed run counts the killed attempt's too)
    state.pop("wall_time", None)
    state.get("callbacks", {}).get("Summary", {}).pop("elapsed", None)
    # the metrics files too (one per phase or stage): a resume appends no duplicated or missing iteration
    rows = {str(metrics.relative_to(run_dir)): [json.loads(line)["global_step"]
                                                for line in metrics.read_text().splitlines()]
            for metrics in sorted(run_dir.rglob("progress.jsonl"))}
    return {"name": path.name, "policy": load_policy_files(path)[1], "training_state": state, "progress_steps": rows}


def reference_run(name: str, workdir: Path, start: Callable = cold_start) -> tuple[Path, float, dict[str, Any]]:
    """The uninterrupted run: its directory, wall time and final state."""
    run_dir = workdir / f"{name}-reference"
    overrides = overrides_of(name, workdir)  # the dataset is made before the clock starts
    clock = time.perf_counter()
    run_until_done(run_dir, overrides, attempts=1, start=start)
    return run_dir, time.perf_counter() - clock, final_state(run_dir)


def stop_at(run_dir: Path, overrides: list[str], moment: float, stop: str,
            start: Callable = cold_start) -> dict[str, Any]:
    """Start the run and send ``stop``'s signal ``moment`` seconds later: how it ended. A stopped run
    (SIGTERM after its handler is installed) must exit 4 and leave no summary.json."""
    process = start("genpol.train", train_arguments(run_dir, overrides), child_env())
    try:
        process.communicate(timeout=moment)
        return {"killed": False, "exit": process.returncode, "as_documented": process.returncode == 0}
    except subprocess.TimeoutExpired:
        process.send_signal(SIGNALS[stop])
        process.communicate()
    code = process.returncode
    if code == 0:  # it finished between the moment and the signal (a run's last milliseconds): not stopped
        return {"killed": False, "exit": code, "as_documented": True}
    if stop == "kill":
        documented = code == -signal.SIGKILL
    else:  # 4: stopped after a checkpoint; -15: before the handler existed
        documented = (code == 4 and not (run_dir / "summary.json").exists()) or code == -signal.SIGTERM
    return {"killed": True, "exit": code, "as_documented": documented}


def trial(name: str, workdir: Path, index: int, moment: float, reference: dict[str, Any],
          stop: str = "kill", start: Callable = cold_start) -> dict[str, Any]:
    """One signal at ``moment`` seconds after the start, then runs until done; the comparison. For an
    ``INEXACT`` configuration the stopped run is resumed twice, from two copies, and the two compared."""
    run_dir = workdir / f"{name}-trial{index}"
    shutil.rmtree(run_dir, ignore_errors=True)
    overrides = overrides_of(name, workdir)
    stopped = stop_at(run_dir, overrides, moment, stop, start)
    checkpoints = sorted(p.name for p in (run_dir / "checkpoints").glob("step_*")) if stopped["killed"] else []
    twin = run_dir.with_name(run_dir.name + "-twin")
    if name in INEXACT:
        shutil.rmtree(twin, ignore_errors=True)
        if run_dir.exists():  # a stop before the run created its directory leaves nothing to copy
            shutil.copytree(run_dir, twin)
    stderr = run_until_done(run_dir, overrides, start=start)
    final = final_state(run_dir)
    if name in INEXACT:  # repeatable, finished, and warned when it resumed from a checkpoint
        run_until_done(twin, overrides, start=start)
        difference = first_difference(final_state(twin), final)
        # the warning is due where training resumed; a kill after the final checkpoint redoes only the
        # final evaluation, which loads no env state
        total = next(int(item.split("=")[1]) for item in overrides if item.startswith("total_steps="))
        resumed_training = checkpoints and checkpoints[-1] != f"step_{total:012d}"
        if resumed_training and "cannot continue its episodes" not in stderr:
            difference = difference or "no warning that the resume is inexact"
        shutil.rmtree(twin, ignore_errors=True)
    else:
        difference = first_difference(reference, final)
    if not stopped["as_documented"]:
        difference = difference or f"stopped with exit {stopped['exit']}, not as documented"
    shutil.rmtree(run_dir, ignore_errors=True)
    return {"moment_s": round(moment, 3), "signal": stop, **stopped, "checkpoints_at_kill": checkpoints,
            "identical": difference is None, "first_difference": difference}


def crash_test(name: str, trials: int, seed: int, workdir: Path, stop: str = "kill",
               start: Callable = cold_start) -> dict[str, Any]:
    """``trials`` random stops of configuration ``name`` by ``stop`` (``kill`` or ``term``; moments from
    ``random.Random``, seeded by the configuration, the seed and, for SIGTERM, the signal), every process
    made by ``start`` (``cold_start``'s signature)."""
    _, duration, reference = reference_run(name, workdir, start)
    draws = random.Random(f"{name}-{seed}" if stop == "kill" else f"{name}-{stop}-{seed}")
    results = [trial(name, workdir, index, draws.uniform(0.0, duration), reference, stop, start)
               for index in range(trials)]
    return {"config": CONFIGS[name], "signal": stop, "exact": name not in INEXACT, "seed": seed,
            "reference_wall_s": round(duration, 2), "trials": len(results),
            "killed": sum(r["killed"] for r in results), "identical": sum(r["identical"] for r in results),
            "mismatches": [r for r in results if not r["identical"]], "runs": results}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--configs", nargs="+", default=list(CONFIGS), choices=list(CONFIGS))
    parser.add_argument("--trials", type=int, default=20)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--signal", choices=list(SIGNALS), default="kill",
                        help="kill: SIGKILL; term: SIGTERM, which must stop the run with exit 4")
    args = parser.parse_args()
    with tempfile.TemporaryDirectory(prefix="genpol-crash-") as directory:
        for name in args.configs:
            key = name if args.signal == "kill" else f"{name} (SIGTERM)"
            row = crash_test(name, args.trials, args.seed, Path(directory), args.signal)
            row.update(date=date_stamp(), machine=machine())
            print(f"{key}: {row['identical']} of {row['trials']} identical ({row['killed']} stopped mid-run)", flush=True)
            # written after each configuration (a long run that fails later keeps what it measured);
            # configurations measured at other times keep their rows, each with its own date and machine
            update_results("crash.json", lambda old, key=key, row=row: {"results": {**old.get("results", {}), key: row}})
    merged = read_results("crash.json")["results"]
    print("| configuration | trials | stopped mid-run | identical | first mismatch |\n|---|---|---|---|---|")
    for name, row in merged.items():
        mismatch = row["mismatches"][0] if row["mismatches"] else None
        where = f"{mismatch['first_difference']} (kill at {mismatch['moment_s']} s)" if mismatch else "-"
        print(f"| {name} | {row['trials']} | {row['killed']} | {row['identical']} | {where} |")


if __name__ == "__main__":
    main()
