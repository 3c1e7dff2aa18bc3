"""The authors' MEow on MultiGoal (ChienFeng-hub/meow ``toy/``): their ``MEOW`` agent trained by their
``train_loop`` at their ``conf/base.yaml`` settings, run from a snapshot, then measured by the same analysis
as genpol's rows (``genpol.multigoal_analysis.goal_coverage``: 100 stochastic episodes on genpol's
``env=multigoal_softlearning``, 2000 start-state actions).

Issue 30's MultiGoal target (four goals, each in >= 15 % of episodes, on 4 of 5 unseen seeds; start
entropy >= 0.9 log 4; >= 80 % of start actions within 25 degrees of a goal) was missed by genpol's MEow on
every seed (``bench/multigoal.py``: start actions near uniform, lobe fraction 0.54-0.58). Update-level parity
holds (``bench/parity/meow.py``), so this asks whether the authors' code at their own toy settings and
budget makes the lobes, or whether the miss is the method at that budget.

Where it differs from their ``python train.py config=multigoal/meow.yaml``, and why:
* device cpu (their default ``cuda``), one torch thread; torch and numpy seeded with ``--seed`` (their
  ``train.py`` seeds only the train env's first reset; the env's start noise draws from numpy);
* their plots (``plot_traj_multigoal``, ``plot_value``: hard-coded CUDA tensors and their env's renderer)
  are replaced by no-ops, and their tensorboard logs and checkpoints go to ``--out``;
* their vector envs: gymnasium 0.29's ``SyncVectorEnv`` contract on gymnasium 1.x
  (``run_reference.make_gym029_vector_env``: their loop reads ``final_observation`` and expects the reset in
  the step that ends an episode). Their ``RescaleAction`` to [-1, 1] is left out: the env's bounds are
  already [-1, 1], so it is the identity;
* the analysis runs their policy on genpol's MultiGoal (30-step episodes, soft Q-learning's; their toy env
  cuts at 1000) through a small adapter (``act``: their ``FlowPolicy.sample``), on their final policy
  (``last.pt``) and on the one their figure draws (``best.pt``: kept at their best deterministic evaluation,
  but their loop also writes it at every plot step, 4000 included, so it ends as the final policy too).

    .venv/bin/python bench/run_reference_meow_multigoal.py --ref /tmp/ref/ChienFeng-hub+meow --seeds 10 11 12 13 14

Adds rows ``meow authors' code-s<seed>`` to ``bench/results/multigoal.json`` (beside genpol's ``meow
energy_flow-s<seed>``).
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np
import torch

from common import RUNS, date_stamp, update_results
from run_reference import EpisodeLog, make_gym029_vector_env

LABEL = "meow authors' code"
# the analysis env: genpol's env=multigoal_softlearning (configs/env/multigoal_softlearning.yaml)
SOFTLEARNING = {"reward": "softlearning", "actuation_cost": 30.0, "distance_cost": 1.0, "goal_radius": 1.0,
                "init_noise": 0.1, "bound": 7.0}


class TheirPolicy:
    """What ``goal_coverage`` asks of a policy: ``spec`` (the env's kwargs) and ``act(obs [N, 2], deterministic)``."""

    spec = {"env": {"kwargs": SOFTLEARNING}}

    def __init__(self, flow_policy: Any):
        self.flow_policy = flow_policy

    def act(self, obs: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        action, _ = self.flow_policy.sample(num_samples=obs.shape[0], obs=obs, deterministic=deterministic)
        return action.detach().float()


def train_theirs(ref: Path, seed: int, steps: int | None, out: Path) -> tuple[Any, dict[str, Any]]:
    """Their agent after their training loop, and the run's settings and wall time."""
    from omegaconf import OmegaConf

    toy = ref / "toy"
    sys.path.insert(0, str(toy))
    import gymnasium as gym
    import toy_envs  # noqa: F401  (registers MultiGoal-v0)
    import modules.train_loop as their_loop
    from agents.meow import MEOW

    their_loop.plot_traj_multigoal = lambda *args, **kwargs: (None, None)
    their_loop.plot_value = lambda *args, **kwargs: None
    settings = {key: value for key, value in OmegaConf.to_container(OmegaConf.load(toy / "conf" / "base.yaml")).items()
                if key not in ("defaults", "hydra")}
    settings.update(seed=seed, device="cpu", save_path=str(out), state_sizes=2, action_sizes=2)
    if steps is not None:
        settings["steps"] = steps
    out.mkdir(parents=True, exist_ok=True)
    torch.manual_seed(seed)
    np.random.seed(seed)
    vector_env = make_gym029_vector_env(gym, EpisodeLog(out / "episodes.jsonl"))
    train_envs = vector_env([lambda: gym.make("MultiGoal-v0")])
    test_envs = vector_env([lambda: gym.make("MultiGoal-v0") for _ in range(settings["test_num"])])
    agent = MEOW(argparse.Namespace(**settings))
    start = time.perf_counter()
    agent.train(train_envs, test_envs)
    settings["train_wall_time_s"] = time.perf_counter() - start
    return agent, settings


def measure(policy: Any, seed: int, episodes: int) -> dict[str, Any]:
    """genpol's MultiGoal measurement of one of their policies (a ``FlowPolicy``)."""
    from genpol.multigoal_analysis import goal_coverage

    policy.eval()
    coverage = goal_coverage(TheirPolicy(policy), episodes=episodes, seed=seed)
    return {"goals_reached": int((coverage.goal_counts > 0).sum()),
            "goals_covered_2pct": coverage.goals_covered(0.02),
            "goals_at_15pct": coverage.goals_covered(0.15),
            "episodes_per_goal": coverage.goal_counts.tolist(),
            "angular_entropy_at_start": coverage.angular_entropy,
            "lobe_fraction_25deg": coverage.lobe_fraction(25.0),
            "stochastic_return": coverage.mean_return}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", type=Path, required=True, help="ChienFeng-hub/meow snapshot")
    parser.add_argument("--seeds", type=int, nargs="+", default=[10, 11, 12, 13, 14])
    parser.add_argument("--steps", type=int, default=None, help="their env steps (default: base.yaml's 4000)")
    parser.add_argument("--episodes", type=int, default=100)
    args = parser.parse_args()
    torch.set_num_threads(1)

    commit = subprocess.run(["git", "-C", str(args.ref), "log", "-1", "--format=%H %cs"], capture_output=True,
                            text=True).stdout.strip()
    for seed in args.seeds:
        out = RUNS / "multigoal" / f"meow_authors-s{seed}"
        agent, settings = train_theirs(args.ref, seed, args.steps, out)
        # their own files: last.pt (the final policy, which genpol's rows measure) and best.pt (their figure's
        # policy, kept at the best deterministic evaluation); pickled modules of their classes
        row = {"head": "energy_flow (authors' FlowPolicy)", "learner": "MEOW (authors')", "seed": seed,
               "env": "multigoal_softlearning", "steps": settings["steps"],
               **measure(torch.load(out / "last.pt", weights_only=False), seed, args.episodes),
               "best_checkpoint": measure(torch.load(out / "best.pt", weights_only=False), seed, args.episodes),
               "wall_time_s": settings["train_wall_time_s"],
               "reference": {"repository": "ChienFeng-hub/meow", "commit": commit, "config": "toy/conf/base.yaml",
                             "settings": {k: settings[k] for k in ("steps", "warmup_steps", "batch_size", "lr",
                                                                  "grad_clip", "gamma", "tau", "alpha", "sigma_max",
                                                                  "sigma_min")}},
               "date": date_stamp()}
        print({k: row[k] for k in ("seed", "episodes_per_goal", "goals_at_15pct", "angular_entropy_at_start",
                                   "lobe_fraction_25deg", "wall_time_s")}, "best:", row["best_checkpoint"], flush=True)
        update_results("multigoal.json", lambda results, row=row, seed=seed: {
            **results, "runs": {**results.get("runs", {}), f"{LABEL}-s{seed}": row}})


if __name__ == "__main__":
    main()
