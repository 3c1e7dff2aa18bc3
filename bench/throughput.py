"""Training throughput of Gaussian PPO on HalfCheetah-v5: genpol vs stable-baselines3, side by side.

Rows, all in this one process, one after another (the machine is noisy, so peers run in the same
script and ratios are what to quote):

* raw simulator: gymnasium ``SyncVectorEnv`` x8 stepping random actions (the ceiling);
* genpol's env stack alone at 32 envs (``genpol.envs.make``: the same SyncVectorEnv without gymnasium's
  passive env checker and the per-env info merge, plus tensor conversion), random actions, in one
  process and split over 2 processes (``env.workers=2``, ``genpol.envs.subproc``);
* SB3 PPO with its default hyperparameters (8 envs, n_steps 2048, batch 64, 10 epochs, 64-64 tanh);
* genpol PPO with the same settings (and, like SB3's defaults, no normalization wrappers);
* the same with ``learner.compile=true`` (the minibatch step as one compiled function), in one
  process and with 2 env workers;
* genpol's fast configuration (``+experiment=ppo_fast``: 32 envs x 64 steps in 2 env processes,
  minibatch 512, 64-64 networks, compiled steps, normalization on), the same in one env process,
  and the recommended learning configuration (``+experiment=ppo_mujoco``: ppo_fast with 256-256
  ReLU networks), as fractions of the raw single-process simulator rate at 32 envs.

Each training row runs ``--iterations`` rollouts (default 2) after one warm-up rollout. The raw
rows report the highest rate measured; each fraction of the raw rate divides by the raw x32 rate
measured right before and after that row (the machine's speed drifts); the env-stack row, like the
raw rows, reports the highest of its measurements.
Writes ``bench/results/throughput.json`` and prints a table.

    python bench/throughput.py [--iterations 2]
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch

from common import date_stamp, machine, write_results


def steps_per_second(step, actions) -> float:
    """Env-steps/s of calling ``step`` on each of ``actions [T, N, A]`` in turn."""
    start = time.perf_counter()
    for action in actions:
        step(action)
    return actions.shape[0] * actions.shape[1] / (time.perf_counter() - start)


def raw_simulator(num_envs: int, steps: int = 2000) -> float:
    envs = gym.vector.SyncVectorEnv([lambda: gym.make("HalfCheetah-v5") for _ in range(num_envs)],
                                    autoreset_mode=gym.vector.AutoresetMode.SAME_STEP)
    envs.reset(seed=0)
    rate = steps_per_second(envs.step, np.random.default_rng(0).uniform(-1, 1, (steps, num_envs, 6)))
    envs.close()
    return rate


def genpol_env_stack(num_envs: int, steps: int = 1000, workers: int = 1) -> float:
    from genpol import envs

    env = envs.make("gym:HalfCheetah-v5", num_envs=num_envs, seed=0, workers=workers)
    env.reset(seed=0)
    actions = torch.rand(steps, num_envs, env.act_dim, generator=torch.Generator().manual_seed(0)) * 2 - 1
    rate = steps_per_second(env.step, actions)
    env.close()
    return rate


def sb3_default(iterations: int) -> float:
    from stable_baselines3 import PPO
    from stable_baselines3.common.env_util import make_vec_env

    env = make_vec_env("HalfCheetah-v5", n_envs=8, seed=0)
    model = PPO("MlpPolicy", env, device="cpu", seed=0, verbose=0)
    model.learn(total_timesteps=2048 * 8)  # warm-up rollout and update
    start = time.perf_counter()
    model.learn(total_timesteps=2048 * 8 * iterations, reset_num_timesteps=False)
    elapsed = time.perf_counter() - start
    env.close()
    return 2048 * 8 * iterations / elapsed


def genpol_run(overrides: list[str], iterations: int) -> tuple[float, dict]:
    from genpol.algorithms import make_algorithm
    from genpol.api import compose_config
    from genpol.build import env_stack, make_env, make_head
    from genpol.configure import validate
    from genpol.runners.onpolicy import OnPolicyRunner

    cfg = validate(compose_config(["run_dir=/tmp/unused", *overrides]))
    torch.manual_seed(0)
    env = make_env(cfg.env, gamma=cfg.learner.gamma, seed=0, device=cfg.device, stack=env_stack(cfg.policy))
    head = make_head(cfg.policy, env.obs_dim, env.act_dim).to(cfg.device)
    algorithm = make_algorithm(cfg, head, env)
    per_iteration = cfg.learner.rollout_steps * cfg.env.num_envs
    runner = OnPolicyRunner(env, algorithm, total_steps=per_iteration, update_threads=cfg.update_threads)
    runner.run()  # warm-up iteration
    collect = update = 0.0
    steps = 0
    for _ in range(iterations):
        start = time.perf_counter()
        iteration_steps = runner.collect()
        middle = time.perf_counter()
        runner.update()  # on the config's update_threads
        collect += middle - start
        update += time.perf_counter() - middle
        steps += iteration_steps
    env.close()
    return steps / (collect + update), {"collect_s": collect, "update_s": update, "steps": steps,
                                        "collect_only_sps": steps / collect}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--iterations", type=int, default=2, help="timed rollouts per training row")
    args = parser.parse_args()
    torch.set_num_threads(1)

    sb3_settings = ["env=halfcheetah", "env.num_envs=8", "env.normalize_obs=false", "env.normalize_reward=false"]
    rows: dict[str, dict] = {}
    rows["raw simulator x8"] = {"sps": raw_simulator(8)}
    rows["raw simulator x32"] = {"sps": raw_simulator(32, 1000)}
    rows["genpol env stack x32, random actions"] = {"sps": genpol_env_stack(32)}
    rows["genpol env stack x32, 2 env workers"] = {"sps": genpol_env_stack(32, workers=2)}
    rows["SB3 PPO, defaults, 8 envs"] = {"sps": sb3_default(args.iterations)}
    sps, detail = genpol_run(sb3_settings, args.iterations)
    rows["genpol PPO, SB3 defaults, 8 envs"] = {"sps": sps, **detail}
    sps, detail = genpol_run([*sb3_settings, "learner.compile=true"], args.iterations)
    rows["genpol PPO, SB3 defaults, compiled"] = {"sps": sps, **detail}
    sps, detail = genpol_run([*sb3_settings, "learner.compile=true", "env.workers=2"], args.iterations)
    rows["genpol PPO, SB3 defaults, compiled, 2 env workers"] = {"sps": sps, **detail}
    # The machine's speed drifts by up to 2x over minutes, so each fraction of the raw rate divides by
    # the raw rate measured right before and right after that row (their mean), not by one from minutes away.
    for name, overrides in (("genpol ppo_fast, 32 envs, 2 env workers", ["+experiment=ppo_fast"]),
                            ("genpol ppo_fast, 32 envs, 1 env process", ["+experiment=ppo_fast", "env.workers=1"]),
                            ("genpol ppo_mujoco, 32 envs, 2 env workers", ["+experiment=ppo_mujoco"])):
        before = raw_simulator(32, 1000)
        sps, detail = genpol_run([*overrides, "env=halfcheetah"], 4 * args.iterations)
        after = raw_simulator(32, 1000)
        rows[name] = {"sps": sps, **detail, "raw_x32_adjacent": (before + after) / 2,
                      "fraction_of_raw_x32": sps / ((before + after) / 2)}
        rows["raw simulator x32"]["sps"] = max(rows["raw simulator x32"]["sps"], before, after)
        for workers, stack in ((1, rows["genpol env stack x32, random actions"]),
                               (2, rows["genpol env stack x32, 2 env workers"])):
            stack["sps"] = max(stack["sps"], genpol_env_stack(32, workers=workers))
    rows["raw simulator x8"]["sps"] = max(rows["raw simulator x8"]["sps"], raw_simulator(8))
    sb3 = rows["SB3 PPO, defaults, 8 envs"]["sps"]
    for name, row in rows.items():
        if name.startswith("genpol") and "env stack" not in name:
            row["ratio_to_sb3"] = row["sps"] / sb3

    print(f"\n{'row':52s} {'env-steps/s':>12s}  notes")
    for name, row in rows.items():
        notes = ", ".join(f"{k}={v:.2f}" for k, v in row.items() if k in ("ratio_to_sb3", "fraction_of_raw_x32"))
        print(f"{name:52s} {row['sps']:12.0f}  {notes}")
    host = machine()
    out = {"benchmark": "throughput", "env": "HalfCheetah-v5", "iterations": args.iterations,
           "date": date_stamp(), "machine": f"{host['processor']}, {host['torch_threads']} torch thread(s)",
           "rows": rows}
    path = write_results("throughput.json", out)
    print(f"\nwrote {path}")


if __name__ == "__main__":
    main()
