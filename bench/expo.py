"""EXPO against RLPD on this CPU: the cost of an env step, and (given hours) learning curves.

``cost`` (minutes): both learners at the same CPU-sized critic setting (``--num-qs`` LayerNorm critics of
``--critic-hidden``, UTD ``--utd``, batch 256, half of every batch offline, from a random-policy Hopper-v5
file this script writes), built by ``make_algorithm`` from ``+experiment=expo`` / ``+experiment=rlpd`` on
Hopper-v5, filled past ``learning_starts`` with real env steps, then timed per env step (act, env step,
store, update), in alternating rounds. Separately: EXPO's candidate sampling for a minibatch's next
states (``num_samples`` base samples for each of 256 states in one batched call, then the edits and the
argmax-Q, ``on_the_fly_actions``) and the base samples alone; each TD target pays it once per critic
minibatch, UTD times per env step.

``learning --steps N`` (hours): ``+experiment=expo`` and ``+experiment=rlpd`` at the same critic setting,
``--seeds`` seeds, on each ``--task`` (``hopper``: Hopper-v5 with ``--hopper-dataset``, a "medium" file from
``genpol.data.collect``, see bench/make_hopper_medium.sh; ``maze``: ``env=pointmaze_medium``, PointMaze_Medium-v3
on Minari's evaluation map, with ``--maze-dataset`` from bench/make_maze_medium.sh). Evaluates every ``--eval-every``
env steps and reports the evaluation (normalized score where the dataset has references, else the return)
at 10k, 25k, 50k and 100k steps, and at which step EXPO first reaches RLPD's final score. EXPO's claim
(RLPD's 100k-step score in at most half the steps) is tested with ``--steps 50000 --rlpd-steps 100000``.
``--pretrain-steps N`` runs both offline-to-online instead (N BC steps of the base, or of RLPD's actor,
then online; runs named ``o2o-...``). Finished runs are reused and shorter ones extended by resume
(bit-identical to a longer run: the learning rate schedules count their own steps, not ``total_steps``);
runs of other invocations stay in the JSON.

    python bench/expo.py cost [--rounds 3] [--steps 20] [--num-qs 5] [--utd 5]
    python bench/expo.py learning --steps 50000 --rlpd-steps 100000 --task hopper \
        --hopper-dataset data/hopper_medium-v5.hdf5

Writes ``bench/results/expo_cost.json`` / ``bench/results/expo_learning.json`` and prints a table.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path
from typing import Any

import torch

from common import read_progress, read_summary, update_results, write_results

MARKS = (10_000, 25_000, 50_000, 100_000)


def critic_overrides(args: argparse.Namespace) -> list[str]:
    """The critic setting both learners share."""
    return [f"learner.num_qs={args.num_qs}", f"learner.utd={args.utd}",
            f"learner.critic_hidden_sizes=[{','.join(str(w) for w in args.critic_hidden)}]"]


def build(experiment: str, args: argparse.Namespace, offline_path: str) -> tuple[Any, Any]:
    from genpol.algorithms import make_algorithm
    from genpol.api import compose_config
    from genpol.build import make_env, make_head
    from genpol.configure import validate
    from genpol.runners.offpolicy import load_offline_transitions
    from genpol.pipelines.online import off_policy_env_settings

    overrides = [f"+experiment={experiment}", "env=hopper", f"dataset.path={offline_path}", "run_dir=/tmp/unused",
                 "learner.learning_starts=1000", *critic_overrides(args)]
    if experiment == "rlpd":
        overrides.append("learner.compile=false")  # both eager: the comparison is of the algorithms
    cfg = validate(compose_config(overrides))
    torch.manual_seed(0)
    env = make_env(cfg.env, gamma=cfg.learner.gamma, seed=0, stack=off_policy_env_settings(cfg))
    head = make_head(cfg.policy, env.obs_dim, env.act_dim)
    offline, _, _ = load_offline_transitions(cfg, env)
    return make_algorithm(cfg, head, env, offline), env


class Learner:
    """One learner and its env, stepped past ``learning_starts``; ``segment`` times ``steps`` env steps."""

    def __init__(self, experiment: str, args: argparse.Namespace, offline_path: str):
        self.algorithm, self.env = build(experiment, args, offline_path)
        self.obs = self.env.reset(seed=0)
        while not self.algorithm.ready():
            self.step(learn=False)
        self.step()  # warm-up

    def step(self, learn: bool = True) -> None:
        action = self.algorithm.act(self.obs)
        next_obs, reward, terminated, _, info = self.env.step(action)
        self.algorithm.process_env_step(self.obs, action, reward, terminated, info)
        self.obs = next_obs
        if learn:
            self.algorithm.update()

    def segment(self, steps: int) -> tuple[float, float]:
        """(wall ms, process CPU ms) per env step; CPU well below wall means another job held the core."""
        start, cpu = time.perf_counter(), time.process_time()
        for _ in range(steps):
            self.step()
        return (time.perf_counter() - start) / steps * 1000, (time.process_time() - cpu) / steps * 1000


def candidate_cost(expo: Any, repeats: int = 10) -> dict[str, float]:
    """ms for one minibatch's next states: base samples alone, and the whole on-the-fly choice."""
    from genpol.algorithms.edit import on_the_fly_actions

    obs = expo.sampler.sample(256).next_obs
    cfg = expo.cfg
    timings: dict[str, list[float]] = {"base_samples_ms": [], "on_the_fly_ms": [], "base_samples_cpu_ms": [],
                                       "on_the_fly_cpu_ms": []}
    with torch.no_grad():
        for _ in range(repeats):
            start, cpu = time.perf_counter(), time.process_time()
            expo.head.candidates(obs, cfg.num_samples)
            timings["base_samples_ms"].append((time.perf_counter() - start) * 1000)
            timings["base_samples_cpu_ms"].append((time.process_time() - cpu) * 1000)
            start, cpu = time.perf_counter(), time.process_time()
            ranking, valuing = expo.split_subsets(expo._subset_heads())
            on_the_fly_actions(obs, expo.head, expo.edit, expo.critic_target, cfg.num_samples, cfg.n_edit,
                               ranking, value_heads=valuing)
            timings["on_the_fly_ms"].append((time.perf_counter() - start) * 1000)
            timings["on_the_fly_cpu_ms"].append((time.process_time() - cpu) * 1000)
    return {key: statistics.median(values) for key, values in timings.items()}


def cost(args: argparse.Namespace) -> dict[str, Any]:
    from genpol.data.collect import main as collect_main

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as directory:
        offline_path = str(Path(directory) / "hopper_random-v5.hdf5")
        collect_main(["--policy", "random", "--env", "gym:Hopper-v5", "--steps", "2000", "--num-envs", "2",
                      "--d4rl", offline_path])
        learners = {"expo": Learner("expo", args, offline_path), "rlpd": Learner("rlpd", args, offline_path)}
        rows: dict[str, list[tuple[float, float]]] = {name: [] for name in learners}
        for round_index in range(args.rounds):
            order = list(learners) if round_index % 2 == 0 else list(reversed(learners))
            for name in order:
                rows[name].append(learners[name].segment(args.steps))
        candidates = candidate_cost(learners["expo"].algorithm)
    expo_cfg = learners["expo"].algorithm.cfg
    result = {
        "setting": {"env": "gym:Hopper-v5", "num_qs": args.num_qs, "utd": args.utd, "critic_hidden": args.critic_hidden,
                    "batch_size": 256, "offline_ratio": 0.5, "torch_threads": 1, "compile": False,
                    "expo_base": "diffusion DDPM T=10, 256x3", "num_samples": expo_cfg.num_samples,
                    "n_edit": expo_cfg.n_edit, "rounds": args.rounds, "steps_per_round": args.steps},
        "ms_per_env_step": {name: statistics.median(wall for wall, _ in values) for name, values in rows.items()},
        "cpu_ms_per_env_step": {name: statistics.median(cpu for _, cpu in values) for name, values in rows.items()},
        "load_average": list(os.getloadavg()),
        "ms_per_env_step_rounds": rows,
        "candidates_per_minibatch": candidates,
        "candidates_per_env_step_ms": candidates["on_the_fly_ms"] * args.utd,
    }
    result["expo_over_rlpd"] = result["ms_per_env_step"]["expo"] / result["ms_per_env_step"]["rlpd"]
    result["expo_over_rlpd_cpu"] = result["cpu_ms_per_env_step"]["expo"] / result["cpu_ms_per_env_step"]["rlpd"]
    write_results("expo_cost.json", result)
    print(f"| learner | wall ms per env step (median of {args.rounds}) | CPU ms |\n|---|---|---|")
    for name, value in result["ms_per_env_step"].items():
        print(f"| {name} | {value:.1f} | {result['cpu_ms_per_env_step'][name]:.1f} |")
    print(f"EXPO / RLPD: {result['expo_over_rlpd']:.2f}x wall, {result['expo_over_rlpd_cpu']:.2f}x CPU; candidates for 256 next states: base samples "
          f"{candidates['base_samples_ms']:.1f} ms, on-the-fly choice {candidates['on_the_fly_ms']:.1f} ms "
          f"(x UTD {args.utd} = {result['candidates_per_env_step_ms']:.0f} ms per env step)")
    return result


def score_at(run_dir: Path, step: int) -> float | None:
    """The last evaluation at or before ``step`` (normalized score if logged, else the return)."""
    best = None
    for row in read_progress(run_dir):
        value = row.get("eval/normalized_score", row.get("eval/episodic_return"))
        if value is not None and row["global_step"] <= step:
            best = value
    return best


def run_record(run_dir: Path, steps: int) -> dict[str, Any]:
    """A finished run's scores at the marks, its whole evaluation curve (step, score, success rate) and
    the training time and final success rate of its ``summary.json``."""
    rows = read_progress(run_dir)
    summary = read_summary(run_dir)
    return {**{str(mark): score_at(run_dir, mark) for mark in MARKS if mark <= steps},
            "curve": [(row["global_step"], row.get("eval/normalized_score", row["eval/episodic_return"]),
                       row.get("eval/success_rate")) for row in rows if "eval/episodic_return" in row],
            "train_time_s": summary["train_time_s"], "final_success_rate": summary.get("eval_success_rate")}


def first_step_at(run_dir: Path, score: float | None) -> int | None:
    """The first evaluation step at which the run scores ``score`` or more (None: never)."""
    for row in read_progress(run_dir):
        value = row.get("eval/normalized_score", row.get("eval/episodic_return"))
        if value is not None and score is not None and value >= score:
            return int(row["global_step"])
    return None


def learning(args: argparse.Namespace) -> dict[str, Any]:
    from genpol.api import train

    tasks = {"hopper": ("hopper", [], args.hopper_dataset),
             "maze": ("pointmaze_medium", [], args.maze_dataset)}  # Minari's evaluation map, success logged
    rlpd_steps = args.rlpd_steps or args.steps
    setting = {"critic": critic_overrides(args), "batch_size": args.batch_size,
               "learning_starts": args.learning_starts, "expo_samples_and_edits": args.num_samples}
    results: dict[str, Any] = {"steps": args.steps, "rlpd_steps": rlpd_steps, "seeds": args.seeds, **setting,
                               "runs": {}, "claim": {},
                               "command": "python bench/expo.py " + " ".join(sys.argv[1:]),
                               "note": "RLPD runs +experiment=rlpd's compiled critic steps; EXPO refuses compile and runs eager"}
    root = Path(args.run_root)
    # offline-to-online: BC-pretrain the base (EXPO) or the actor (RLPD) first; runs are named o2o-...
    prefix, pipeline = "", []
    if args.pretrain_steps > 0:
        prefix, pipeline = "o2o-", ["pipeline=offline_to_online", f"pipeline.pretrain_steps={args.pretrain_steps}",
                                    f"pipeline.pretrain_batch_size={args.batch_size}"]
    for task in args.task:
        env_group, env_overrides, dataset = tasks[task]
        if dataset is None:
            print(f"skipping {task}: no dataset given (--{task}-dataset)")
            continue
        for experiment in args.learners:
            steps = args.steps if experiment == "expo" else rlpd_steps
            for seed in args.seeds:
                run_dir = root / f"{prefix}{task}-{experiment}-{seed}"
                iteration = 1000
                sizes = [f"learner.batch_size={args.batch_size}", f"learner.learning_starts={args.learning_starts}"]
                if experiment == "expo":
                    sizes += [f"learner.num_samples={args.num_samples}", f"learner.n_edit={args.num_samples}"]
                train(env_group, overrides=[f"+experiment={experiment}", *env_overrides, f"dataset.path={dataset}",
                                           *critic_overrides(args), *sizes, *pipeline,
                                           f"learner.iteration_steps={iteration}",
                                           f"pipeline.eval_every={max(1, args.eval_every // iteration)}",
                                           "pipeline.eval_episodes=10", "pipeline.video=false",
                                           # the claim's 5 seeds evaluated so (+experiment=expo now draws afresh)
                                           "pipeline.eval_deterministic=true",
                                           "logger.progress_bar=false"],
                      policy="diffusion_expo" if experiment == "expo" else "tanh_gaussian",
                      learner="expo" if experiment == "expo" else "sac", total_steps=steps, seed=seed,
                      run_dir=run_dir)
                results["runs"][run_dir.name] = {"steps": steps, **run_record(run_dir, steps),
                                                 "command": results["command"]}
        for seed in args.seeds:  # the step at which EXPO first evaluates at RLPD's final score or above
            if not all((root / f"{prefix}{task}-{learner}-{seed}" / "summary.json").exists()
                       for learner in ("expo", "rlpd")):
                continue  # judged by whichever invocation finishes the pair (--learners split them)
            rlpd_final = score_at(root / f"{prefix}{task}-rlpd-{seed}", rlpd_steps)
            first = first_step_at(root / f"{prefix}{task}-expo-{seed}", rlpd_final)
            expo_run = f"{prefix}{task}-expo-{seed}"
            if expo_run not in results["runs"]:  # EXPO ran in another invocation: take its record from disk
                results["runs"][expo_run] = {"steps": args.steps, **run_record(root / expo_run, args.steps)}
            results["runs"][expo_run]["first_step_at_rlpd_final"] = first
            results["claim"][f"{prefix}{task}-{seed}"] = {
                "rlpd_steps": rlpd_steps, "rlpd_final": rlpd_final, "expo_steps": args.steps,
                "expo_first_step_at_rlpd_final": first,
                # judged only when EXPO ran at least half of RLPD's steps
                "holds": (None if args.steps < rlpd_steps // 2
                          else first is not None and first <= rlpd_steps // 2)}
        save_learning(results, setting)
    print(json.dumps(results, indent=2))
    return results


def save_learning(results: dict[str, Any], setting: dict[str, Any]) -> None:
    """Write ``results`` to expo_learning.json, keeping the runs and claims of other invocations at the
    same setting: read just before writing, under a lock (``update_results``), so two invocations running
    side by side (one per core) keep each other's. A file of another setting is replaced."""
    def same(saved: Any, value: Any) -> bool:  # files written before the updater group became learner
        return json.dumps(saved).replace('"updater.', '"learner.') == json.dumps(value)

    def merge(previous: dict[str, Any]) -> dict[str, Any]:
        merged = dict(results, runs=dict(results["runs"]), claim=dict(results["claim"]))
        if previous and all(same(previous.get(key), value) for key, value in setting.items()):
            merged["runs"] = {**previous.get("runs", {}), **results["runs"]}
            merged["claim"] = {**previous.get("claim", {}), **results["claim"]}
        merged["seeds"] = sorted({int(seed) for seed in (name.rsplit("-", 1)[-1] for name in merged["runs"])
                                  if seed.isdigit()})
        return merged

    update_results("expo_learning.json", merge)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("mode", choices=("cost", "learning"))
    parser.add_argument("--num-qs", type=int, default=5, help="critics of both learners (EXPO and RLPD: 10)")
    parser.add_argument("--utd", type=int, default=5, help="critic steps per env step of both (EXPO and RLPD: 20)")
    parser.add_argument("--critic-hidden", type=int, nargs="+", default=[256, 256])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="cost: env steps per timed segment; learning: env steps")
    parser.add_argument("--seeds", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--task", nargs="+", default=["hopper", "maze"], choices=("hopper", "maze"))
    parser.add_argument("--hopper-dataset", default=None)
    parser.add_argument("--maze-dataset", default=None)
    parser.add_argument("--rlpd-steps", type=int, default=None,
                        help="learning: RLPD's env steps (default --steps)")
    parser.add_argument("--learners", nargs="+", default=["expo", "rlpd"], choices=("expo", "rlpd"),
                        help="learning: which to run (two invocations may split them, one per core)")
    parser.add_argument("--pretrain-steps", type=int, default=0,
                        help="learning: BC steps before going online (pipeline=offline_to_online); 0: online with data")
    parser.add_argument("--eval-every", type=int, default=5000)
    parser.add_argument("--batch-size", type=int, default=256, help="learning: minibatch of both (EXPO, RLPD: 256)")
    parser.add_argument("--learning-starts", type=int, default=5000, help="learning: random steps of both (5000)")
    parser.add_argument("--num-samples", type=int, default=8, help="learning: EXPO's base samples, all edited (8)")
    parser.add_argument("--run-root", default="runs/bench_expo")
    args = parser.parse_args()
    warnings.filterwarnings("ignore")
    cost(args) if args.mode == "cost" else learning(args)


if __name__ == "__main__":
    main()
