"""The authors' offline Consistency-AC (Ding & Jin's ``Consistency_QL``, quantumiracle/
Consistency_Model_For_Reinforcement_Learning cdeae87) trained by their ``offline.py`` ``train_agent``, run from
the snapshot unmodified on a D4RL-format file (genpol's Hopper "medium" data, ``bench/make_hopper_medium.sh``).

Their ``train_agent`` reads ``dataset/{env_name}.pkl`` from the working directory (what their
``download_data.py`` writes: ``d4rl.qlearning_dataset``'s dictionary), builds ``Consistency_QL`` from their
``hyperparameters`` row for the task and alternates ``agent.train(data_sampler, eval_freq x
num_steps_per_epoch iterations, batch 256)`` with their ``eval_policy``. This script writes that pickle from the
hdf5 file as ``d4rl.qlearning_dataset`` builds it (written out below: D4RL is not installed), sets their
arguments as their ``__main__`` block does for ``hopper-medium-v2`` with ``--model consistency --lr_decay`` (their
README's command), and calls their ``train_agent``.

Where it differs from their run, and why:
* the budget: ``--steps`` gradient steps in ONE ``train`` call (their runs: 2000 epochs of 1000 steps in calls of
  50 000). Their consistency-training schedule N(k) runs over each call, so here it grows over the whole budget,
  as genpol's ``policy.ct_schedule_repeats=true policy.ct_total_steps=<steps>`` does. Their ``--lr_decay`` cosine
  (T_max = num_epochs) steps once per call, after it: it never lowers the rate within this budget;
* the env: gymnasium ``Hopper-v5`` (mujoco bindings) for D4RL's ``hopper-medium-v2`` (gym's Hopper-v3 on
  mujoco-py: the same observation, rewards, termination and 1000-step limit). Their module-level ``eval_policy``
  (a D4RL ``gym.make``) is replaced during the run by the same loop on that env (``run_reference_consistency_ac.
  evaluate_episodes``: a fresh env seeded ``seed + 100`` once, ``eval_episodes`` (10) episodes of their
  ``sample_action``, networks in eval mode), returning their 4-tuple with D4RL's normalized score (Hopper's
  reference returns written below);
* their ``SummaryWriter`` is replaced by an object that keeps the last value of each scalar their ``train``
  logs (it logs 7 per gradient step; no tensorboard files), and their checkpoints are not written
  (``--save_best_model`` off) unless ``--save-models`` asks for them: then their ``train_agent`` itself writes
  them as with ``--save_best_model`` (``actor_0.pth`` before training, ``actor_<epoch>.pth`` after each call, then
  its model selection renames the chosen ones; with the one call here both selections pick the model after the
  last step, their renaming table's two keys coincide and ``actor_offline.pth`` / ``critic_offline.pth`` are what
  is left), what their ``scripts/offline2online.slurm`` loads into ``online.py`` (``--load_id offline``; the
  consistency_ac_o2o pair);
* device cpu, one torch thread, seeds as their ``__main__`` (torch, numpy).

Writes, in the working directory: ``evals.jsonl`` (gradient steps, mean return, normalized score),
``reference_run.json`` (wall time of training and of evaluation, gradient steps, ms per gradient step, their
last logged losses, settings, the snapshot's commit), their ``best_score_offline.txt`` and ``final_agent.pt`` (the
state dicts of the last step's actor, critic and target critic).

    OMP_NUM_THREADS=1 .venv/bin/python bench/run_reference_consistency_ac_offline.py \\
        --ref /tmp/ref/quantumiracle+Consistency_Model_For_Reinforcement_Learning \\
        --dataset data/hopper_medium-v5.hdf5 --steps 20000 --seed 1
"""

from __future__ import annotations

import argparse
import json
import pickle
import time
from pathlib import Path
from types import SimpleNamespace

import h5py
import numpy as np
import torch

from run_reference_consistency_ac import ScalarLog, _head, evaluate_episodes, import_their_script

THEIR_TASK = "hopper-medium-v2"
# D4RL's reference returns for Hopper (d4rl/infos.py: REF_MIN_SCORE, REF_MAX_SCORE), for their normalized score
HOPPER_RANDOM, HOPPER_EXPERT = -20.272305, 3234.3


def qlearning_dataset(path: Path) -> dict[str, np.ndarray]:
    """``d4rl.qlearning_dataset`` of a D4RL-format file, written out: transition i pairs observation i with
    observation i + 1 (i < N - 1); a step flagged ``timeouts`` is skipped (its successor starts the next
    episode), a ``terminals`` step is kept with ``terminals`` 1. Their ``Data_Sampler`` reads these five keys."""
    with h5py.File(path, "r") as handle:
        data = {key: np.asarray(handle[key]) for key in ("observations", "actions", "rewards", "terminals", "timeouts")}
    keep = ~data["timeouts"][:-1].astype(bool)
    return {"observations": data["observations"][:-1][keep].astype(np.float32),
            "actions": data["actions"][:-1][keep].astype(np.float32),
            "next_observations": data["observations"][1:][keep].astype(np.float32),
            "rewards": data["rewards"][:-1][keep].astype(np.float32),
            "terminals": data["terminals"][:-1][keep].astype(np.float32)}


def normalized_score(value: float) -> float:
    """D4RL's ``get_normalized_score`` (a fraction: 1 is the expert's return)."""
    return (value - HOPPER_RANDOM) / (HOPPER_EXPERT - HOPPER_RANDOM)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", type=Path, required=True,
                        help="a snapshot of quantumiracle/Consistency_Model_For_Reinforcement_Learning")
    parser.add_argument("--dataset", type=Path, required=True, help="a D4RL-format hdf5 file of Hopper transitions")
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--steps", type=int, default=20_000, help="gradient steps, one train call")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--eval-episodes", type=int, default=10, help="theirs for D4RL v2 tasks")
    parser.add_argument("--save-models", action="store_true",
                        help="their --save_best_model: their train_agent writes actor_offline.pth / critic_offline.pth "
                             "in the working directory, for their online.py --load_id offline")
    args = parser.parse_args()

    torch.set_num_threads(1)
    ref, dataset_path = args.ref.resolve(), args.dataset.resolve()
    offline = import_their_script(ref, "offline.py")
    row = offline.consistency_hyperparameters[THEIR_TASK]
    steps_per_epoch = 1000
    if args.steps % steps_per_epoch:
        raise SystemExit(f"--steps {args.steps}: a multiple of their epoch ({steps_per_epoch} gradient steps)")
    epochs = args.steps // steps_per_epoch
    # their __main__'s arguments for --env_name hopper-medium-v2 --model consistency --lr_decay, the budget as
    # one train call of --steps iterations (eval_freq = num_epochs)
    their_args = SimpleNamespace(
        env_name=THEIR_TASK, seed=args.seed, num_steps_per_epoch=steps_per_epoch, batch_size=256, lr_decay=True,
        early_stop=False, save_best_model=args.save_models, discount=0.99, tau=0.005, T=row["T"], beta_schedule="vp",
        algo="ql", model="consistency", ms="offline", lr=row["lr"], eta=row["eta"], gn=row["gn"],
        scale_consis_loss=row["scale_consis_loss"], num_epochs=epochs, eval_freq=epochs,
        eval_episodes=args.eval_episodes, max_q_backup=row["max_q_backup"], q_norm=row["q_norm"],
        reward_tune=row["reward_tune"], top_k=row["top_k"], device="cpu")

    Path("dataset").mkdir(exist_ok=True)
    data = qlearning_dataset(dataset_path)
    with open(Path("dataset") / f"{THEIR_TASK}.pkl", "wb") as handle:
        pickle.dump(data, handle)

    torch.manual_seed(args.seed)
    np.random.seed(args.seed)
    evals = open("evals.jsonl", "w", buffering=1)
    timing = {"eval_s": 0.0}
    agents: list = []

    def eval_policy(policy, env_name: str, seed: int, eval_episodes: int = 10) -> tuple[float, float, float, float]:
        """Their ``eval_policy``'s contract on gymnasium's Hopper (see the module docstring)."""
        began = time.perf_counter()
        agents[:1] = [policy]
        scores = evaluate_episodes(policy, args.env, seed, eval_episodes)
        timing["eval_s"] += time.perf_counter() - began
        normalized = [normalized_score(value) for value in scores]
        mean = float(np.mean(scores))
        evals.write(json.dumps({"gradient_steps": policy.step, "return": mean,
                                "normalized_score": 100 * normalized_score(mean), "returns": scores}) + "\n")
        print(f"eval after {policy.step} gradient steps: {mean:.1f}", flush=True)
        return mean, float(np.std(scores)), normalized_score(mean), float(np.std(normalized))

    offline.eval_policy = eval_policy  # the env shim: their train_agent looks it up in its module at call time
    writer = ScalarLog()
    start = time.perf_counter()
    offline.train_agent(None, THEIR_TASK, data["observations"].shape[1], data["actions"].shape[1], 1.0, "cpu", ".",
                        writer, their_args)
    wall = time.perf_counter() - start
    train_s = wall - timing["eval_s"]
    agent = agents[0]
    # the final agent, with the target critics their sample_action acts through (their checkpoints keep the online
    # critic only), for bench/consistency_ac_reevaluate.py
    torch.save({"actor": agent.actor.state_dict(), "critic": agent.critic.state_dict(),
                "critic_target": agent.critic_target.state_dict()}, "final_agent.pt")
    Path("reference_run.json").write_text(json.dumps(
        {"wall_time_s": train_s, "eval_time_s": timing["eval_s"], "gradient_steps": agent.step,
         "ms_per_gradient_step": 1000 * train_s / agent.step, "transitions": int(len(data["rewards"])),
         "last_logged": writer.last, "their_task_row": {THEIR_TASK: row},
         "commit": _head(ref) if (ref / ".git").exists() else None,
         "settings": {**{key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()},
                      "their_args": vars(their_args)}}, indent=2))


if __name__ == "__main__":
    main()
