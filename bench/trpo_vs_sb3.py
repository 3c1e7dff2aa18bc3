"""TRPO on Hopper-v5: genpol vs sb3-contrib with the same settings, side by side, at a scaled budget.

sb3-contrib at 1M steps takes hours on this machine and ANCHORS.md has no TRPO figure, so both
run ``--steps`` (default 200k) with one seed: 2 envs x 1024 steps, CG 25 iterations, damping 0.1,
delta 0.01, critic 20 epochs of minibatch 128 at lr 1e-3, 64-64 tanh networks, observation and
reward normalization (VecNormalize for sb3-contrib). Both are evaluated the same way: 5
deterministic episodes with reset seeds 10000-10004 and frozen observation statistics.

    python bench/trpo_vs_sb3.py [--steps 200000] [--seed 0]

Writes ``bench/results/trpo_vs_sb3.json``.
"""

from __future__ import annotations

import argparse
import time

import gymnasium as gym
import numpy as np
import torch

from common import RUNS, date_stamp, write_results


def sb3_trpo(steps: int, seed: int) -> dict:
    from sb3_contrib import TRPO
    from stable_baselines3.common.env_util import make_vec_env
    from stable_baselines3.common.vec_env import VecNormalize

    env = VecNormalize(make_vec_env("Hopper-v5", n_envs=2, seed=seed), gamma=0.99)
    model = TRPO("MlpPolicy", env, n_steps=1024, batch_size=128, gamma=0.99, gae_lambda=0.95, cg_max_steps=25,
                 cg_damping=0.1, n_critic_updates=20, learning_rate=1e-3, target_kl=0.01, seed=seed, device="cpu")
    start = time.perf_counter()
    model.learn(total_timesteps=steps)
    elapsed = time.perf_counter() - start
    returns = []
    for episode in range(5):
        single = gym.make("Hopper-v5")
        obs, _ = single.reset(seed=10_000 + episode)
        total, done = 0.0, False
        while not done:
            normalized = env.normalize_obs(obs[None])  # frozen statistics: normalize_obs does not update
            action, _ = model.predict(normalized, deterministic=True)
            obs, reward, terminated, truncated, _ = single.step(action[0])
            total += float(reward)
            done = terminated or truncated
        returns.append(total)
    return {"final_return": float(np.mean(returns)), "sps": steps / elapsed, "wall_time_s": elapsed}


def genpol_trpo(steps: int, seed: int) -> dict:
    from genpol.api import train

    summary = train(env="hopper", learner="trpo", total_steps=steps, seed=seed,
                    run_dir=RUNS / "trpo_vs_sb3" / f"genpol-s{seed}",
                    overrides=["env.num_envs=2", "learner.rollout_steps=1024", "learner.cg_iterations=25",
                               "learner.critic_epochs=20", "learner.critic_minibatch_size=128",
                               "pipeline.video=false", "logger.progress_bar=false", "pipeline.eval_episodes=5"])
    return {"final_return": summary["eval_return_mean"], "sps": summary["sps"], "wall_time_s": summary["train_time_s"]}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--steps", type=int, default=200_000)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    rows = {"sb3-contrib TRPO": sb3_trpo(args.steps, args.seed), "genpol TRPO": genpol_trpo(args.steps, args.seed)}
    rows["genpol TRPO"]["sps_ratio_to_sb3"] = rows["genpol TRPO"]["sps"] / rows["sb3-contrib TRPO"]["sps"]
    for name, row in rows.items():
        print(f"{name:18s} final return {row['final_return']:8.1f}   {row['sps']:7.0f} env-steps/s")
    write_results("trpo_vs_sb3.json", {"benchmark": "trpo_vs_sb3", "env": "Hopper-v5", "steps": args.steps,
                                       "seed": args.seed, "date": date_stamp(), "rows": rows})


if __name__ == "__main__":
    main()
