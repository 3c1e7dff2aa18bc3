"""The authors' online Consistency-AC (Ding & Jin's ``OnlineAgent`` with ``model='consistency'``,
quantumiracle/Consistency_Model_For_Reinforcement_Learning cdeae87) trained by their ``online.py`` loop, written
out here because that script needs gym <= 0.23 (its loop reads ``infos`` as a list of dicts with
``terminal_observation``, gym 0.23's ``SyncVectorEnv``; its requirements' gym 0.24.1 returns a dict there), D4RL
and mujoco-py: a gymnasium v5 task, and their own classes, imported from ``--ref`` unmodified: their
``online.py`` as a module (for ``OnlineAgent``, ``linear_schedule``, the ``hyperparameters`` table and the
``ReplayBuffer`` it imports, stable-baselines3's), their ``OnlineAgent.train`` and ``sample_action``. Nothing of
theirs is copied; torch, numpy and stable-baselines3 only, no genpol.

Their loop (``online.py`` ``train_agent``), step for step, one iteration per vector step ``global_step`` of
``--num-envs`` envs (their launch scripts: 3): epsilon = ``linear_schedule(start_e, end_e, exploration_fraction
x total_timesteps, global_step)``; one ``random.random() < epsilon`` draw for all envs: uniform actions from the
shared ``single_action_space``, else ``agent.sample_action(obs)`` per env (50 candidates of the consistency
sampler, one drawn with probability softmax(min of the target critics)); the envs step and reset inside the
step (gym 0.23's ``SyncVectorEnv``: ``done = terminated or truncated``, the final observation in
``terminal_observation``); ``rb.add(obs, real_next_obs, actions, rewards, dones, infos)`` into SB3's
``ReplayBuffer(buffer_size, n_envs, optimize_memory_usage=True, handle_timeout_termination=False)``, so a
time-limit truncation enters as ``done = 1`` (their ``not_done = 1 - dones``: no bootstrap at the 1000-step
limit, as at a fall); from ``global_step > learning_starts`` (0), every ``train_frequency`` (4) vector steps one
``agent.train(rb, iterations=1, batch_size=256)`` (one critic and one actor step: 1 / (4 x num_envs) gradient
steps per env step), with a writer that keeps their logged scalars; from ``global_step > learning_starts``,
every ``eval_frequency`` (10000) vector steps their ``eval_policy``: a fresh env seeded ``seed + 100`` once,
``eval_episodes`` (10: 'v2' in their env name) episodes of ``sample_action`` (stochastic: their evaluation
acts as training does, without epsilon), under ``model.eval()`` / ``actor.eval()``. Their Hopper settings:
``hyperparameters['hopper-medium-v2']`` (lr 1e-5, gn 9.0, max_q_backup False; ``eval_freq`` 50 is unused
online), checked against the snapshot at start.

Where it differs from their script, and why:
* the env: gymnasium ``Hopper-v5`` (mujoco bindings) for D4RL's ``hopper-medium-v2`` (gym's Hopper-v3 on
  mujoco-py, the same 11-D observation, rewards, termination and 1000-step limit), and the gymnasium
  step/reset API written out as gym 0.23's ``SyncVectorEnv`` + ``RecordEpisodeStatistics`` did it;
* seeding: their vector envs, their action space and Python's ``random`` are never seeded (only torch, numpy
  and a dims-only env are); here env ``i`` resets with ``seed + i`` at the start, the action space with
  ``seed``, ``random`` with ``seed``, torch and numpy as theirs;
* ``--steps`` counts env steps (transitions); their ``total_timesteps`` counts vector steps: it is
  ``steps // num_envs`` here, which also sets their epsilon schedule's length (0.1 of it) as theirs;
* episodes: every finished episode is written (their loop prints the first per vector step); ``step`` is env
  steps so far, ``num_envs x (global_step + 1)``;
* device cpu, one torch thread; no tensorboard, logger, checkpoint or D4RL normalized score (their
  ``SummaryWriter`` is replaced by an object that keeps the scalars their ``train`` writes to it);
* one evaluation after the last step (``"final": true``), which their loop does not make, so that a short
  run ends on an evaluation.
``--load-model DIR --load-id ID`` (off by default) is their ``--load_model`` / ``--load_id``: right after the
agent is built, ``agent.load_model(DIR, ID)``, their ``OnlineAgent.load_model``, which loads ``actor_ID.pth`` and
``critic_ID.pth`` only (their ``scripts/offline2online.slurm``: an offline run's directory, ``--load_id
offline``; the consistency_ac_o2o pair). Their constructor copied the critic target and the EMA actor from the
fresh networks before that, so both keep their initial weights (written to ``reference_run.json``'s ``load``:
their largest distance from the loaded networks); the optimizers and the step count start anew.
Shims: their ``online.py`` imports ``gym`` and ``d4rl`` at the top and uses them only in functions this
script does not call; both are empty stand-in modules during the import.

Writes, in the working directory: ``episodes.jsonl`` (training episodes: env steps at the end, return, length),
``evals.jsonl`` (env step, mean return, their vector step), ``learner.jsonl`` (the first ``train`` call at or
after every 1000 env steps: their returned actor and critic losses and the scalars they log, epsilon) and
``reference_run.json`` (wall time, eval time, env steps, time per env step after the epsilon decay, settings).

    OMP_NUM_THREADS=1 .venv/bin/python bench/run_reference_consistency_ac.py \\
        --ref /tmp/ref/quantumiracle+Consistency_Model_For_Reinforcement_Learning --steps 300000 --seed 1
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import random
import sys
import time
import types
from pathlib import Path
from typing import Sequence

import gymnasium as gym
import numpy as np
import torch

THEIR_TASK = "hopper-medium-v2"  # their online.py's Hopper row (scripts/online.sh runs it with --num_envs 3)


def import_their_script(ref: Path, script: str = "online.py") -> types.ModuleType:
    """Their ``online.py`` (or ``offline.py``) as a module (its ``__main__`` block does not run). Both import
    ``gym`` (0.2x) and ``d4rl`` at the top, missing here and used only inside their ``make_env`` /
    ``eval_policy`` / ``__main__``, which these scripts do not call (``offline.py``'s ``train_agent`` calls its
    ``eval_policy``: the offline script replaces it): empty stand-ins during the import, removed after."""
    sys.path.insert(0, str(ref))  # their ``agents`` and ``utils`` packages, and their tabulate.py for utils.logger
    shims = [name for name in ("gym", "d4rl") if importlib.util.find_spec(name) is None]
    for name in shims:
        sys.modules[name] = types.ModuleType(name)  # shim: missing package, unused by what runs here
    try:
        spec = importlib.util.spec_from_file_location(f"their_{Path(script).stem}", ref / script)
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)
    finally:
        for name in shims:
            del sys.modules[name]
    return module


class ScalarLog:
    """Stands in for their ``SummaryWriter``: keeps the last value of every scalar ``train`` logs."""

    def __init__(self) -> None:
        self.last: dict[str, float] = {}

    def add_scalar(self, tag: str, value: float, step: int) -> None:
        self.last[tag.lower().replace(" ", "_")] = float(value)

    def add_text(self, tag: str, text: str) -> None:
        pass

    def close(self) -> None:
        pass


class TheirVectorEnv:
    """gym 0.23's ``SyncVectorEnv`` of ``RecordEpisodeStatistics(gym.make(env))`` on gymnasium envs: ``step``
    returns ``(next_obs, rewards, dones, infos)``, ``done = terminated or truncated``, the env reset inside the
    step, its final observation in ``infos[i]["terminal_observation"]`` and its episode in ``["episode"]``."""

    def __init__(self, env_id: str, count: int, seed: int):
        self.envs = [gym.make(env_id) for _ in range(count)]
        self.single_observation_space = self.envs[0].observation_space
        self.single_action_space = self.envs[0].action_space
        self.num_envs = count
        self.returns, self.lengths = np.zeros(count), np.zeros(count, dtype=int)
        self.obs = np.stack([env.reset(seed=seed + i)[0] for i, env in enumerate(self.envs)])

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, list[dict]]:
        rewards, dones, infos = np.zeros(self.num_envs), np.zeros(self.num_envs, dtype=bool), []
        for i, (env, action) in enumerate(zip(self.envs, actions)):
            observation, reward, terminated, truncated, info = env.step(action)
            info = dict(info)
            rewards[i], dones[i] = reward, terminated or truncated
            self.returns[i] += reward
            self.lengths[i] += 1
            if truncated and not terminated:
                info["TimeLimit.truncated"] = True  # gym 0.23's TimeLimit; their buffer ignores it
            if dones[i]:
                info["episode"] = {"r": float(self.returns[i]), "l": int(self.lengths[i])}
                self.returns[i], self.lengths[i] = 0.0, 0
                info["terminal_observation"] = observation
                observation, _ = env.reset()
            self.obs[i] = observation
            infos.append(info)
        return self.obs.copy(), rewards, dones, infos


def evaluate(agent, env_id: str, seed: int, episodes: int) -> float:
    """Their ``eval_policy``: a fresh env seeded once (``seed + 100``), ``episodes`` episodes of
    ``sample_action``, the agent's networks in eval mode meanwhile; the mean return."""
    return float(np.mean(evaluate_episodes(agent, env_id, seed, episodes)))


def evaluate_episodes(agent, env_id: str, seed: int, episodes: int,
                      episode_seeds: Sequence[int] | None = None) -> list[float]:
    """``evaluate``'s episode returns, one per episode; ``episode_seeds``: reset episode i with
    ``episode_seeds[i]`` instead (genpol's evaluation convention, for ``bench/consistency_ac_reevaluate.py``)."""
    eval_env = gym.make(env_id)
    agent.model.eval()
    agent.actor.eval()
    scores = []
    for episode in range(episodes):
        if episode_seeds is not None:
            state, _ = eval_env.reset(seed=episode_seeds[episode])
        else:
            state, _ = eval_env.reset(seed=seed + 100) if episode == 0 else eval_env.reset()
        traj_return, done = 0.0, False
        while not done:
            action = agent.sample_action(np.array(state))
            state, reward, terminated, truncated, _ = eval_env.step(action)
            traj_return, done = traj_return + float(reward), terminated or truncated
        scores.append(traj_return)
    agent.model.train()
    agent.actor.train()
    eval_env.close()
    return scores


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", type=Path, required=True,
                        help="a snapshot of quantumiracle/Consistency_Model_For_Reinforcement_Learning")
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--steps", type=int, default=3_000_000,
                        help="env steps; their total_timesteps (1e6 vector steps) x 3 envs by default")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--num-envs", type=int, default=3, help="their scripts' --num_envs (online.py's default: 2)")
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--discount", type=float, default=0.99)
    parser.add_argument("--tau", type=float, default=0.005)
    parser.add_argument("--buffer-size", type=int, default=100_000, help="transitions, all envs together")
    parser.add_argument("--learning-starts", type=int, default=0, help="vector steps")
    parser.add_argument("--train-frequency", type=int, default=4, help="vector steps between train calls")
    parser.add_argument("--eval-frequency", type=int, default=10_000, help="vector steps between evaluations")
    parser.add_argument("--eval-episodes", type=int, default=10)
    parser.add_argument("--start-e", type=float, default=1.0)
    parser.add_argument("--end-e", type=float, default=0.01)
    parser.add_argument("--exploration-fraction", type=float, default=0.10)
    parser.add_argument("--T", type=int, default=5, help="sampling steps of their consistency sampler")
    parser.add_argument("--beta-schedule", default="vp", help="passed as theirs (unused by their Consistency)")
    parser.add_argument("--lr", type=float, default=1e-5, help="actor Adam (their critic's is fixed at 3e-4)")
    parser.add_argument("--gn", type=float, default=9.0, help="gradient-norm clip of actor and critics")
    parser.add_argument("--max-q-backup", action="store_true")
    parser.add_argument("--lr-decay", action="store_true")
    parser.add_argument("--load-model", default="", help="their --load_model: a directory of their saved models")
    parser.add_argument("--load-id", default="", help="their --load_id (offline2online.slurm: offline)")
    args = parser.parse_args()

    torch.set_num_threads(1)
    ref = args.ref.resolve()
    online = import_their_script(ref)
    table = online.hyperparameters[THEIR_TASK]
    theirs = {"lr": table["lr"], "gn": table["gn"], "max_q_backup": table["max_q_backup"]}
    ours = {"lr": args.lr, "gn": args.gn, "max_q_backup": args.max_q_backup}
    if ours != theirs:
        print(f"note: settings {ours} differ from their {THEIR_TASK} row {theirs}", file=sys.stderr)

    random.seed(args.seed)  # their epsilon draw (random.random()); their script leaves it unseeded
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)  # their replay sampling and critic-pair draw use numpy's global stream
    total_timesteps = max(args.steps // args.num_envs, 1)
    envs = TheirVectorEnv(args.env, args.num_envs, args.seed)
    envs.single_action_space.seed(args.seed)
    state_dim = envs.single_observation_space.shape[0]
    action_dim = envs.single_action_space.shape[0]
    max_action = float(envs.single_action_space.high[0])
    assert np.all(envs.single_action_space.high == max_action) and np.all(envs.single_action_space.low == -max_action)
    device = "cpu"

    agent = online.Agent(state_dim=state_dim, action_dim=action_dim, max_action=max_action, model="consistency",
                         device=device, discount=args.discount, tau=args.tau, max_q_backup=args.max_q_backup,
                         beta_schedule=args.beta_schedule, n_timesteps=args.T, lr=args.lr, lr_decay=args.lr_decay,
                         grad_norm=args.gn)
    load = None
    if args.load_model:  # their online.py: right after the constructor
        agent.load_model(args.load_model, args.load_id)
        print(f"Loaded agent from: {args.load_model} with id: {args.load_id}", flush=True)
        load = {"model": str(Path(args.load_model).resolve()), "id": args.load_id,
                "critic_target_max_abs_from_critic": _max_distance(agent.critic_target, agent.critic),
                "ema_actor_max_abs_from_actor": _max_distance(agent.ema_model, agent.actor)}
    rb = online.ReplayBuffer(args.buffer_size, envs.single_observation_space, envs.single_action_space, device,
                             args.num_envs, optimize_memory_usage=True, handle_timeout_termination=False)
    writer = ScalarLog()

    episodes, evals = open("episodes.jsonl", "w", buffering=1), open("evals.jsonl", "w", buffering=1)
    learner_log = open("learner.jsonl", "w", buffering=1)
    start = time.perf_counter()
    eval_time, warm = 0.0, None  # warm: (wall, env steps, eval time) when epsilon reached end_e
    next_log = 1000

    def run_eval(global_step: int, final: bool = False) -> None:
        nonlocal eval_time
        began = time.perf_counter()
        value = evaluate(agent, args.env, args.seed, args.eval_episodes)
        eval_time += time.perf_counter() - began
        row = {"step": args.num_envs * (global_step + 1), "return": value, "global_step": global_step}
        evals.write(json.dumps({**row, "final": True} if final else row) + "\n")
        print(f"eval at {row['step']} env steps: {value:.1f}", flush=True)

    obs = envs.obs.copy()
    global_step = 0
    for global_step in range(total_timesteps):
        epsilon = online.linear_schedule(args.start_e, args.end_e, args.exploration_fraction * total_timesteps,
                                         global_step)
        if warm is None and epsilon <= args.end_e:
            warm = (time.perf_counter() - start, args.num_envs * global_step, eval_time)
        obs = obs.reshape(args.num_envs, -1)
        if random.random() < epsilon:
            actions = np.array([envs.single_action_space.sample() for _ in range(envs.num_envs)])
        else:
            actions = np.array([agent.sample_action(np.array(o)) for o in obs])

        next_obs, rewards, dones, infos = envs.step(actions)
        env_steps = args.num_envs * (global_step + 1)
        for info in infos:
            if "episode" in info:
                episodes.write(json.dumps({"step": env_steps, "return": info["episode"]["r"],
                                           "length": info["episode"]["l"]}) + "\n")

        real_next_obs = next_obs.copy()
        for idx, d in enumerate(dones):
            if d:
                real_next_obs[idx] = infos[idx]["terminal_observation"]
        real_next_obs = real_next_obs.reshape(args.num_envs, -1)

        rb.add(obs.astype(np.float32), real_next_obs.astype(np.float32), actions, rewards, dones, infos)
        obs = next_obs

        if global_step > args.learning_starts and global_step % args.train_frequency == 0:
            metric = agent.train(rb, iterations=1, batch_size=args.batch_size, log_writer=writer)
            if env_steps >= next_log:  # their train's diagnostics, as genpol logs its own
                learner_log.write(json.dumps({"step": env_steps, "global_step": global_step, "epsilon": epsilon,
                                              "actor_loss": float(np.mean(metric["actor_loss"])),
                                              "critic_loss": float(np.mean(metric["critic_loss"])),
                                              **writer.last, "gradient_steps": agent.step,
                                              "wall_s": time.perf_counter() - start}) + "\n")
                next_log = (env_steps // 1000 + 1) * 1000

        if global_step > args.learning_starts and global_step % args.eval_frequency == 0:
            run_eval(global_step)

    wall = time.perf_counter() - start
    env_steps = args.num_envs * total_timesteps
    if not (global_step > args.learning_starts and global_step % args.eval_frequency == 0):
        run_eval(global_step, final=True)
    after = None
    if warm is not None and env_steps > warm[1]:
        after = 1000 * ((wall - warm[0]) - (eval_time - warm[2])) / (env_steps - warm[1])
    Path("reference_run.json").write_text(json.dumps(
        {"wall_time_s": wall, "eval_time_s": eval_time, "env_steps": env_steps, "vector_steps": total_timesteps,
         "gradient_steps": agent.step, "ms_per_env_step": 1000 * wall / env_steps,
         "ms_per_env_step_after_exploration": after, "exploration_end_env_steps": None if warm is None else warm[1],
         "their_task_row": {THEIR_TASK: table}, "commit": _head(ref) if (ref / ".git").exists() else None,
         "load": load,
         "settings": {key: (str(value) if isinstance(value, Path) else value) for key, value in vars(args).items()}},
        indent=2))


def _max_distance(first: torch.nn.Module, second: torch.nn.Module) -> float:
    """The largest absolute difference between two same-shaped networks' parameters."""
    return max(float((a - b).abs().max()) for a, b in zip(first.parameters(), second.parameters()))


def _head(ref: Path) -> str | None:
    """The snapshot's commit (``git rev-parse HEAD``), or None."""
    import subprocess

    result = subprocess.run(["git", "-C", str(ref), "rev-parse", "HEAD"], capture_output=True, text=True)
    return result.stdout.strip() or None


if __name__ == "__main__":
    main()
