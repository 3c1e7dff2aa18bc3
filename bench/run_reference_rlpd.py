"""The authors' RLPD learner (ikostrikov/rlpd's ``SACLearner``) trained by their ``train_finetuning.py``'s
loop, written out here because that script needs D4RL's servers, mujoco-py and gym 0.2x: a gymnasium v5
task, genpol's locally made D4RL-format dataset, and their agent's own ``sample_actions``, ``update`` and
``eval_actions`` (built by ``bench/parity/rlpd.py``'s ``their_learner``). Run with a JAX venv's python
(jax, flax, optax, tensorflow-probability, ml_collections, plus gymnasium[mujoco] and h5py); it imports
neither torch nor genpol.

Their loop, step for step: ``start_training`` uniform random actions, then ``agent.sample_actions``; each
transition stored with ``mask = 0`` only on a true terminal (a time limit keeps 1); from step
``start_training`` on, every env step draws ``batch_size x utd x (1 - offline_ratio)`` online and
``batch_size x utd x offline_ratio`` offline transitions, interleaves them (their ``combine``: offline at
even rows) and calls ``agent.update(batch, utd)``. Their ``D4RLDataset``'s preprocessing: actions
clipped to +-(1 - 1e-5), ``masks = 1 - terminals``. Evaluation every ``--eval-interval`` steps on
``--eval-episodes`` episodes of ``agent.eval_actions`` (the mode), as their ``evaluate``.

Writes, in the working directory: ``episodes.jsonl`` (training episodes: env step at the end, return,
length), ``evals.jsonl`` (step, mean return), ``learner.jsonl`` (their update's diagnostics every 1000
steps: temperature, entropy, q, losses) and ``reference_run.json`` (wall time, env steps, settings).

    /tmp/jaxvenv/bin/python bench/run_reference_rlpd.py --ref /tmp/ref/rlpd --dataset data/hopper_medium-v5.hdf5 \\
        --steps 50000 --seed 1 --utd 2 --batch-size 128
"""

from __future__ import annotations

import argparse
import json
import os
import time
from pathlib import Path

import numpy as np

from authors_cost import harness  # bench/parity/rlpd.py under a name that is not their package's


def load_d4rl(path: Path) -> dict[str, np.ndarray]:
    """A D4RL HDF5 file as their ``D4RLDataset`` leaves it: ``d4rl.qlearning_dataset``'s transitions (rows
    0 .. N - 2 not flagged ``timeouts``, s' from the file's ``next_observations``), actions clipped."""
    import h5py

    with h5py.File(path, "r") as file:
        data = {key: np.asarray(file[key]) for key in ("observations", "actions", "rewards", "terminals",
                                                       "next_observations", "timeouts")}
    keep = ~data.pop("timeouts")[:-1].astype(bool)
    data = {key: value[:-1][keep] for key, value in data.items()}
    data["actions"] = np.clip(data["actions"], -(1 - 1e-5), 1 - 1e-5)
    data["masks"] = 1.0 - data.pop("terminals")
    return {key: value.astype(np.float32) for key, value in data.items()}


def sample(buffer: dict[str, np.ndarray], size: int, count: int, rng: np.random.Generator) -> dict[str, np.ndarray]:
    """``count`` transitions drawn uniformly from the first ``size`` rows of ``buffer``: one index array
    for every key, as their ``ReplayBuffer.sample`` and ``Dataset.sample`` draw (an index per key would
    pair observations with other transitions' rewards and next observations)."""
    rows = rng.integers(size, size=count)
    return {key: value[rows] for key, value in buffer.items()}


def combine(offline: dict[str, np.ndarray], online: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Their ``combine``: offline rows at even, online rows at odd indices."""
    out = {}
    for key, value in offline.items():
        merged = np.empty((value.shape[0] + online[key].shape[0], *value.shape[1:]), dtype=value.dtype)
        merged[0::2], merged[1::2] = value, online[key]
        out[key] = merged
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", type=Path, required=True, help="a snapshot of ikostrikov/rlpd")
    parser.add_argument("--dataset", type=Path, required=True, help="a D4RL-format HDF5 file")
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--steps", type=int, default=50_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--utd", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--offline-ratio", type=float, default=0.5)
    parser.add_argument("--start-training", type=int, default=5000)
    parser.add_argument("--eval-interval", type=int, default=5000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--config", default="{}", help="JSON overrides of their rlpd_config (e.g. num_qs, hidden_dims)")
    args = parser.parse_args()

    import gymnasium as gym
    import jax

    dataset = load_d4rl(args.dataset)
    env, eval_env = gym.make(args.env), gym.make(args.env)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    assert np.all(env.action_space.low == -1) and np.all(env.action_space.high == 1), "their RescaleAction is not written out"
    agent, config = harness("rlpd").their_learner(args.ref.resolve(), obs_dim, act_dim, x64=False,
                                                  overrides=json.loads(args.config), seed=args.seed)
    rng = np.random.default_rng(args.seed)  # their replay buffer's and dataset's np_random
    env.action_space.seed(args.seed)
    capacity = args.steps + 1
    replay = {"observations": np.zeros((capacity, obs_dim), np.float32), "actions": np.zeros((capacity, act_dim), np.float32),
              "rewards": np.zeros(capacity, np.float32), "masks": np.zeros(capacity, np.float32),
              "next_observations": np.zeros((capacity, obs_dim), np.float32)}
    size = 0
    online_size = int(args.batch_size * args.utd * (1 - args.offline_ratio))
    offline_size = int(args.batch_size * args.utd * args.offline_ratio)
    episodes, evals = open("episodes.jsonl", "w", buffering=1), open("evals.jsonl", "w", buffering=1)
    learner_log = open("learner.jsonl", "w", buffering=1)

    def evaluate(step: int) -> None:
        returns = []
        for episode in range(args.eval_episodes):
            observation, _ = eval_env.reset(seed=args.seed + 42 + 1000 * episode)
            total, done = 0.0, False
            while not done:
                observation, reward, terminated, truncated, _ = eval_env.step(agent.eval_actions(observation.astype(np.float32)))
                total, done = total + float(reward), terminated or truncated
            returns.append(total)
        evals.write(json.dumps({"step": step, "return": float(np.mean(returns))}) + "\n")

    start = time.perf_counter()
    observation, _ = env.reset(seed=args.seed)
    episode_return, episode_length = 0.0, 0
    for step in range(1, args.steps + 1):
        if step <= args.start_training:
            action = env.action_space.sample()
        else:
            action, agent = agent.sample_actions(observation.astype(np.float32))
        next_observation, reward, terminated, truncated, _ = env.step(action)
        for key, value in (("observations", observation), ("actions", action), ("rewards", reward),
                           ("masks", 0.0 if terminated else 1.0), ("next_observations", next_observation)):
            replay[key][size] = value
        size += 1
        episode_return, episode_length = episode_return + float(reward), episode_length + 1
        observation = next_observation
        if terminated or truncated:
            episodes.write(json.dumps({"step": step, "return": episode_return, "length": episode_length}) + "\n")
            observation, _ = env.reset()
            episode_return, episode_length = 0.0, 0
        if step > args.start_training:
            online = sample(replay, size, online_size, rng) if online_size else None
            offline = sample(dataset, len(dataset["rewards"]), offline_size, rng)
            batch = combine(offline, online) if online is not None else offline
            agent, info = agent.update(batch, args.utd)
            if step % 1000 == 0:  # their update's diagnostics (temperature, entropy, q, losses), as genpol logs its own
                learner_log.write(json.dumps({"step": step, **{key: float(value) for key, value in info.items()}}) + "\n")
        if step % args.eval_interval == 0:
            jax.block_until_ready(agent)
            evaluate(step)
    jax.block_until_ready(agent)
    wall = time.perf_counter() - start
    Path("reference_run.json").write_text(json.dumps({"wall_time_s": wall, "env_steps": args.steps, "pid": os.getpid(),
                                                      "config": {k: (list(v) if isinstance(v, tuple) else v)
                                                                 for k, v in config.items()},
                                                      "args": {k: str(v) for k, v in vars(args).items()}}))


if __name__ == "__main__":
    main()
