"""The authors' EXPO learner (Servo97/EXPO's ``EXPOLearner``, ``expo/agents/sac/expo_learner.py``) trained by
their ``train_finetuning.py``'s loop, written out here because that script needs D4RL's servers, mujoco-py,
gym 0.2x, dmcgym and wandb: a gymnasium v5 task, genpol's locally made D4RL-format dataset, and their
agent's own ``sample_actions``, ``update``, ``update_offline`` and ``eval_actions``. The agent is built by
``bench/parity/expo.py``'s ``their_learner`` (``configs/expo_config.py`` with their D4RL scripts' flags:
no entropy backup, edit scale 0.05, horizon 1), then rebuilt by their own ``EXPOLearner.create`` with this
run's seed and ``--config``'s overrides (``their_learner`` creates with seed 0 and their scripts' sizes).
Run with a JAX venv's python (jax, flax, optax, tensorflow-probability, ml_collections, plus
gymnasium[mujoco] and h5py); it imports neither torch nor genpol.

Their loop, step by step (their ``i`` counts env steps from 0; here the same, one env step per ``i``):

1. (``--pretrain-steps``, their flag ``pretrain_steps``) offline updates first: each draws
   ``batch_size x utd`` dataset transitions and calls ``agent.update_offline(batch, utd, pretrain_q,
   pretrain_edit)`` (their flags' defaults: the base policy's imitation step only, on the last
   minibatch), evaluating every ``--offline-eval-interval`` updates.
2. ``i < start_training``: a uniform random action (``env.action_space.sample()``); after it,
   ``agent.sample_actions(observation)`` (N samples of the EMA base, the first ``n_edit_samples`` of them
   edited, argmax of a random subset-min of the target critics; it returns the agent with its key
   advanced). Their env's ``ClipAction`` clips the action the env executes; the transition stores the
   action as the agent gave it (an edit of a base sample at the bound can leave [-1, 1] by up to
   ``edit_action_scale``).
3. ``mask = 0`` wherever the episode ended (``done``), a time limit included: their script stores
   ``mask = 1 - done`` without RLPD's ``TimeLimit.truncated`` exception, so a time limit ends the TD
   target as a termination does.
4. Transitions collect in a trajectory buffer and enter the replay buffer only when their episode ends
   (the running episode's transitions are not sampled until then).
5. From ``i >= start_training`` on, each env step: skipped (their ``continue``, which also skips that
   step's evaluation) while the replay holds fewer than ``batch_size x utd x (1 - offline_ratio)``
   transitions; else that many online and ``batch_size x utd x offline_ratio`` offline transitions
   (online drawn first), interleaved by their ``combine`` (offline at even rows) and passed to
   ``agent.update(batch, utd)``: ``utd`` critic minibatches, then one base, one edit-policy and one
   temperature step on the last.
6. Every ``--eval-interval`` steps (at ``i % eval_interval == 0``, ``i = 0`` included), their
   ``evaluate_diffusion``: ``--eval-episodes`` episodes of ``agent.eval_actions`` (the same on-the-fly
   sampling as acting, not a mode), each returning the agent with its key advanced, and training goes
   on with that agent (their evaluation consumes the training key).

Their ``D4RLDataset``'s preprocessing (``run_reference_rlpd.load_d4rl``): actions clipped to
+-(1 - 1e-5), ``masks = 1 - terminals`` (its ``dones`` key, which ``update`` does not read, is left out).

Where this differs from their script, and why:

* gymnasium's Hopper-v5 (mujoco bindings) in place of D4RL's ``hopper-*-v2`` (gym 0.2x, mujoco-py),
  and ``--dataset`` (genpol's D4RL-format file, ``bench/make_hopper_medium.sh``) in place of
  ``d4rl.qlearning_dataset``'s download: neither D4RL's servers nor mujoco-py are usable here.
  Their wrappers: ``SinglePrecision`` (float32 observations) is done by casting; ``RescaleAction(-1, 1)``
  is the identity on Hopper's [-1, 1] box (asserted); ``ClipAction`` clips the executed action, as theirs.
* Seeding: their env (``env.seed``), eval env (``seed + 42``) and replay buffer (``seed``) are seeded,
  their dataset's sampler and their outer action space are not (fresh entropy each run); here
  gymnasium's ``reset(seed=seed)`` / ``reset(seed=seed + 42)`` once, the action space by ``seed``, the
  replay sampler by ``seed`` and the dataset sampler by ``seed + 1``, so a run repeats.
* Budget: their ``range(0, max_steps + 1)`` takes ``max_steps + 1`` env steps; here exactly ``--steps``,
  with one more evaluation after the last (as their last iteration's ``i = max_steps`` evaluation).
* Their offline phase's ``clip_bc`` stop (at an evaluation success of 0.45 or more) is left out: Hopper
  reports no success, so it never stops there. Logging (wandb, tqdm), checkpoints and the success-buffer
  branch (commented out in their script) are left out; ``horizon > 1`` (action chunks) is not written out.
* ``--pretrain-steps`` defaults to 0 (their flag: 20000): the ``expo`` pair of ``bench/learning_parity.py``
  runs genpol's ``+experiment=expo`` online with offline data, no offline phase on either side.
* ``--eval-episodes`` defaults to 10 (theirs: 100), ``--eval-interval`` to 5000 (theirs: 10000).
* ``--adjust-target-entropy`` is their ``create``'s flag (target ``-|A|/2 + |A| log edit_action_scale``),
  which their scripts leave False; genpol's ``learner.adjust_target_entropy=true`` default is its equal
  (``bench/parity/expo.py``), and the ``expo`` pair sets both.
* Both time limits are 1000 steps (D4RL's v2 Hopper and gymnasium's v5).

Writes, in the working directory: ``episodes.jsonl`` (training episodes: env step at the end, counting
from 1, return, length), ``evals.jsonl`` (step, mean return; ``"phase": "offline"`` in the offline
phase), ``learner.jsonl`` (their update's diagnostics every 1000 steps: losses, q, entropy) and
``reference_run.json`` (wall time, env steps, settings, and under ``timing_without_evaluations`` the wall
and process CPU time per env step from ``start_training`` on, ``learning``, and from ``WARMUP_STEPS`` later,
``steady``, once their jit compilations are done; evaluations excluded from both).

    /tmp/jaxvenv/bin/python bench/run_reference_expo.py --ref /tmp/ref/Servo97+EXPO \\
        --dataset data/hopper_medium-v5.hdf5 --steps 20000 --seed 1 --utd 1 --batch-size 128 \\
        --start-training 2000 --eval-interval 20000 --adjust-target-entropy \\
        --config '{"num_qs": 2, "num_min_qs": 2, "hidden_dims": [256, 256], "N": 4, "n_edit_samples": 4}'
"""

from __future__ import annotations

import argparse
import inspect
import json
import os
import time
from pathlib import Path
from typing import Any

import numpy as np

from authors_cost import harness  # bench/parity/expo.py under a name that is not their package's
from run_reference_rlpd import combine, load_d4rl, sample

TUPLE_KEYS = ("hidden_dims",)  # their config's tuples, given as JSON lists in --config
WARMUP_STEPS = 100  # learning steps after which the "steady" clock starts (their jit compilations are over)


def build_agent(ref: Path, obs_dim: int, act_dim: int, seed: int, adjust_target_entropy: bool,
                overrides: dict[str, Any]) -> tuple[Any, dict[str, Any]]:
    """Their ``EXPOLearner.create(seed, ...)`` with ``their_learner``'s keyword arguments (their config and
    scripts' flags) updated by ``overrides``; float32, as their script runs."""
    expo = harness("expo")
    first, kwargs = expo.their_learner(ref, obs_dim, act_dim, adjust_target_entropy=adjust_target_entropy, x64=False)
    unknown = set(overrides) - set(inspect.signature(type(first).create).parameters)
    if unknown:
        raise SystemExit(f"--config: not among their create's arguments here: {sorted(unknown)}")
    kwargs.update({key: tuple(value) if key in TUPLE_KEYS else value for key, value in overrides.items()})
    return type(first).create(seed, expo.GymBox(obs_dim), expo.GymBox(act_dim), **kwargs), kwargs


class EpisodeReplay:
    """Their replay buffer as their loop fills it: a transition waits in the running episode's trajectory
    and enters the buffer (``capacity`` rows) when its episode ends; its mask is 0 wherever the episode
    ended, a time limit included (their ``mask = 1 - done``)."""

    KEYS = ("observations", "actions", "rewards", "masks", "next_observations")

    def __init__(self, capacity: int, obs_dim: int, act_dim: int):
        self.data = {"observations": np.zeros((capacity, obs_dim), np.float32),
                     "actions": np.zeros((capacity, act_dim), np.float32), "rewards": np.zeros(capacity, np.float32),
                     "masks": np.zeros(capacity, np.float32),
                     "next_observations": np.zeros((capacity, obs_dim), np.float32)}
        self.size = 0
        self.trajectory: list[tuple[Any, ...]] = []

    def add(self, observation: Any, action: Any, reward: float, next_observation: Any, done: bool) -> None:
        self.trajectory.append((observation, action, reward, 0.0 if done else 1.0, next_observation))
        if done:
            for transition in self.trajectory:
                for key, value in zip(self.KEYS, transition):
                    self.data[key][self.size] = value
                self.size += 1
            self.trajectory = []


def mix(offline: dict[str, np.ndarray], online: dict[str, np.ndarray]) -> dict[str, np.ndarray]:
    """Their ``combine`` with its edge cases: where one side is empty, the other one as it is."""
    if len(online["rewards"]) == 0:
        return offline
    if len(offline["rewards"]) == 0:
        return online
    return combine(offline, online)


def batch_sizes(batch_size: int, utd: int, offline_ratio: float) -> tuple[int, int]:
    """(online, offline) transitions per update, as their script rounds them (each ``int()`` on its own)."""
    return int(batch_size * utd * (1 - offline_ratio)), int(batch_size * utd * offline_ratio)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", type=Path, required=True, help="a snapshot of Servo97/EXPO")
    parser.add_argument("--dataset", type=Path, required=True, help="a D4RL-format HDF5 file")
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--steps", type=int, default=20_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--utd", type=int, default=20)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--offline-ratio", type=float, default=0.5)
    parser.add_argument("--start-training", type=int, default=5000)
    parser.add_argument("--pretrain-steps", type=int, default=0, help="their offline phase (their default 20000)")
    parser.add_argument("--pretrain-q", action="store_true", help="their pretrain_q flag")
    parser.add_argument("--pretrain-edit", action="store_true", help="their pretrain_edit flag")
    parser.add_argument("--offline-eval-interval", type=int, default=10_000)
    parser.add_argument("--eval-interval", type=int, default=5000)
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--log-interval", type=int, default=1000)
    parser.add_argument("--adjust-target-entropy", action="store_true",
                        help="their create's flag (their scripts leave it False; genpol's default is its equal)")
    parser.add_argument("--config", default="{}",
                        help="JSON overrides of their create's arguments (e.g. num_qs, hidden_dims, N, n_edit_samples)")
    args = parser.parse_args()

    import gymnasium as gym
    import jax

    dataset = load_d4rl(args.dataset)
    env, eval_env = gym.make(args.env), gym.make(args.env)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    low, high = env.action_space.low, env.action_space.high
    assert np.all(low == -1) and np.all(high == 1), "their RescaleAction is not written out"
    agent, config = build_agent(args.ref.resolve(), obs_dim, act_dim, args.seed, args.adjust_target_entropy,
                                json.loads(args.config))
    replay_rng = np.random.default_rng(args.seed)  # their replay_buffer.seed(seed)
    dataset_rng = np.random.default_rng(args.seed + 1)  # their D4RLDataset is not seeded
    env.action_space.seed(args.seed)
    replay = EpisodeReplay(args.steps, obs_dim, act_dim)
    online_size, offline_size = batch_sizes(args.batch_size, args.utd, args.offline_ratio)
    episodes, evals = open("episodes.jsonl", "w", buffering=1), open("evals.jsonl", "w", buffering=1)
    learner_log = open("learner.jsonl", "w", buffering=1)
    eval_resets = {"first": True}

    def evaluate(step: int, phase: str = "online") -> tuple[float, float]:
        """Their ``evaluate_diffusion``: the agent's key advances with every action, and the caller goes on
        with the agent returned. Returns the wall and process CPU seconds it took."""
        nonlocal agent
        began, began_cpu = time.perf_counter(), time.process_time()
        returns = []
        for _ in range(args.eval_episodes):
            observation, _ = eval_env.reset(seed=args.seed + 42 if eval_resets["first"] else None)
            eval_resets["first"] = False
            total, done = 0.0, False
            while not done:
                action, agent = agent.eval_actions(observation.astype(np.float32))
                observation, reward, terminated, truncated, _ = eval_env.step(np.clip(action, low, high))
                total, done = total + float(reward), terminated or truncated
            returns.append(total)
        evals.write(json.dumps({"step": step, "return": float(np.mean(returns)),
                                **({"phase": phase} if phase != "online" else {})}) + "\n")
        return time.perf_counter() - began, time.process_time() - began_cpu

    start = time.perf_counter()
    for i in range(args.pretrain_steps):  # their offline phase
        batch = sample(dataset, len(dataset["rewards"]), args.batch_size * args.utd, dataset_rng)
        agent, info = agent.update_offline(batch, args.utd, args.pretrain_q, args.pretrain_edit)
        if i % args.offline_eval_interval == 0:
            jax.block_until_ready(agent)
            evaluate(i, "offline")

    observation = env.reset(seed=args.seed)[0].astype(np.float32)
    episode_return, episode_length = 0.0, 0
    # clocks of the steps from start_training on, and from WARMUP_STEPS later (jit compilation done)
    marks: dict[int, tuple[float, float, float, float]] = {}  # first step -> (wall, cpu, eval wall, eval cpu)
    spent_evaluating = [0.0, 0.0]
    for i in range(args.steps):
        if i in (args.start_training, args.start_training + WARMUP_STEPS):
            jax.block_until_ready(agent)
            marks[i] = (time.perf_counter(), time.process_time(), *spent_evaluating)
        if i < args.start_training:
            action = env.action_space.sample()
        else:
            action, agent = agent.sample_actions(observation)
        next_observation, reward, terminated, truncated, _ = env.step(np.clip(action, low, high))  # their ClipAction
        next_observation = next_observation.astype(np.float32)
        done = terminated or truncated
        replay.add(observation, action, float(reward), next_observation, done)
        episode_return, episode_length = episode_return + float(reward), episode_length + 1
        observation = next_observation
        if done:
            episodes.write(json.dumps({"step": i + 1, "return": episode_return, "length": episode_length}) + "\n")
            episode_return, episode_length = 0.0, 0
            observation = env.reset()[0].astype(np.float32)
        if i >= args.start_training:
            if replay.size < online_size:
                continue  # their script skips the update and that step's evaluation
            online = sample(replay.data, replay.size, online_size, replay_rng)
            offline = sample(dataset, len(dataset["rewards"]), offline_size, dataset_rng)
            agent, info = agent.update(mix(offline, online), args.utd)
            if i % args.log_interval == 0:  # their update's diagnostics, as genpol logs its own
                learner_log.write(json.dumps({"step": i + 1, **{k: float(v) for k, v in info.items()}}) + "\n")
        if i % args.eval_interval == 0:
            jax.block_until_ready(agent)
            spent = evaluate(i + 1)
            spent_evaluating[0] += spent[0]
            spent_evaluating[1] += spent[1]
    jax.block_until_ready(agent)
    end_wall, end_cpu = time.perf_counter(), time.process_time()
    evaluate(args.steps)  # their last iteration's evaluation
    wall = time.perf_counter() - start
    timing = {}
    for first, (wall_0, cpu_0, eval_wall_0, eval_cpu_0) in marks.items():
        name = "learning" if first == args.start_training else "steady"
        count = args.steps - first
        learning_wall = end_wall - wall_0 - (spent_evaluating[0] - eval_wall_0)
        learning_cpu = end_cpu - cpu_0 - (spent_evaluating[1] - eval_cpu_0)
        timing[name] = {"from_step": first + 1, "env_steps": count, "wall_s": learning_wall, "cpu_s": learning_cpu,
                        "ms_per_env_step": 1000 * learning_wall / count,
                        "cpu_ms_per_env_step": 1000 * learning_cpu / count}
    Path("reference_run.json").write_text(json.dumps({
        "wall_time_s": wall, "env_steps": args.steps, "pid": os.getpid(), "timing_without_evaluations": timing,
        "config": {k: (list(v) if isinstance(v, tuple) else v) for k, v in config.items()},
        "args": {k: str(v) for k, v in vars(args).items()}}))


if __name__ == "__main__":
    main()
