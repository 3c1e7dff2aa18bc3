"""The authors' DPPO fine-tuning (irom-lab/dppo's ``PPODiffusion``) trained by their
``TrainPPODiffusionAgent.run`` loop, written out here because their script needs Hydra, D4RL's
``hopper-medium-v2`` (mujoco-py, gym 0.2x) and their async vector env: a gymnasium v5 task, and
their model's own sampler (``forward``), ``get_logprobs``, ``loss``, ``RunningRewardScaler`` and
``CosineAnnealingWarmupRestarts``, imported from the snapshot (``bench/parity/dppo.py``'s ``load_theirs``;
its ``copy_linears`` maps the weights).

It starts from a genpol pretraining checkpoint (``--pretrained``: the EMA denoiser that genpol's
fine-tuning starts from, copied into their ``actor`` and ``actor_ft``; genpol's head must be built with
their network's options, ``bench/learning_parity.py``'s dppo pair), so both sides fine-tune the same
pretrained policy. Their critic starts from its own initialization (genpol's critic is not part of
pretraining either).

Their loop, step for step (``train_ppo_diffusion_agent.py``, with ``reset_at_iteration`` False and no
evaluation iterations, which neither train nor count env steps there): each iteration samples
``n_steps`` chunks in every env (the chains kept), steps the envs, then computes values and the old
log-probs with the current model, scales rewards by their running scaler, computes GAE with
``nonterminal = 1 - terminated`` (a time-limit truncation bootstraps from the value of the next
episode's first observation, as theirs: ``reset_within_step`` replaces the final observation), and
runs ``update_epochs`` passes of ``batch_size`` minibatches (the remainder dropped) of
``pg + vf_coef * v`` with one AdamW per network (no gradient clip: their Gym configs set none).

Their env stack, written out with gymnasium: ``MujocoLocomotionLowdimWrapper`` (observations scaled by
the dataset's min and max to [-1, 1], actions unscaled from [-1, 1] to the dataset's range, unclipped:
MuJoCo clamps the control, the control cost sees the raw action) and ``MultiStep`` (a chunk's rewards
summed, the chunk cut at a termination or truncation, the env reset inside the step). Env steps are
counted as executed (genpol's count); their ``cnt_train_step`` (``n_envs x act_steps`` per step) is
recorded beside it.

Writes, in the working directory: ``episodes.jsonl`` (training episodes: executed env steps at the end,
return, length), ``evals.jsonl`` (the pretrained and the final policy, ``deterministic=True``, as their
evaluation iterations), ``learner.jsonl`` (per iteration: losses, clipfrac, approx-KL, explained
variance) and ``reference_run.json`` (wall time, env steps, settings).

    .venv/bin/python bench/run_reference_dppo.py --ref /tmp/ref/dppo --pretrained RUN/pretrain/checkpoints/step_... \\
        --dataset data/hopper_medium-v5.hdf5 --steps 500000 --seed 1
"""

from __future__ import annotations

import argparse
import json
import math
import sys
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import torch

from authors_cost import harness  # bench/parity/dppo.py, not under bench/dppo.py's name

from genpol.data.d4rl import load_d4rl
from genpol.data.dataset import Normalization
from genpol.policy import TrainedPolicy


class TheirChunkedEnvs:
    """``n`` Hopper envs behind their ``MujocoLocomotionLowdimWrapper`` and ``MultiStep(reset_within_step=True)``.

    ``step(actions [n, act_steps, A])`` -> ``(obs [n, 1, D], reward [n], terminated [n], truncated [n])``;
    finished training episodes go to ``on_episode(executed env steps, return, length)``."""

    def __init__(self, env_id: str, count: int, seed: int, norm: Normalization, on_episode=None):
        self.envs = [gym.make(env_id) for _ in range(count)]
        self.norm, self.on_episode = norm, on_episode
        self.env_steps = 0
        self.returns, self.lengths = np.zeros(count), np.zeros(count, dtype=int)
        self.obs = np.stack([self.scale(env.reset(seed=seed * 1000 + i)[0]) for i, env in enumerate(self.envs)])

    def scale(self, raw: np.ndarray) -> np.ndarray:
        return Normalization.scale(raw, self.norm.obs_min, self.norm.obs_max)[None]  # [1, D]: their cond_steps 1

    def unscale(self, action: np.ndarray) -> np.ndarray:
        return (action + 1) / 2 * (self.norm.action_max - self.norm.action_min) + self.norm.action_min

    def step(self, actions: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray, np.ndarray]:
        count = len(self.envs)
        reward, terminated, truncated = np.zeros(count), np.zeros(count, bool), np.zeros(count, bool)
        for i, env in enumerate(self.envs):
            for action in actions[i]:
                raw, r, term, trunc, _ = env.step(self.unscale(action))
                reward[i] += r
                self.env_steps += 1
                self.returns[i] += r
                self.lengths[i] += 1
                if term or trunc:
                    break
            terminated[i], truncated[i] = term, trunc
            if term or trunc:
                if self.on_episode is not None:
                    self.on_episode(self.env_steps, float(self.returns[i]), int(self.lengths[i]))
                self.returns[i], self.lengths[i] = 0.0, 0
                raw, _ = env.reset()
            self.obs[i] = self.scale(raw)
        return self.obs.copy(), reward, terminated, truncated


def evaluate(model: torch.nn.Module, args: argparse.Namespace, norm: Normalization, act_steps: int) -> float:
    """Mean return of ``--eval-episodes`` episodes of ``model(deterministic=True)``, their evaluation mode: the
    first episode of each of that many envs (a second, short one of a quick env must not replace a slow one)."""
    envs = TheirChunkedEnvs(args.env, args.eval_episodes, seed=10_000 + args.seed, norm=norm)
    first = np.full(args.eval_episodes, np.nan)
    model.eval()
    while np.isnan(first).any():
        before = envs.returns.copy()  # each env's return so far; step resets it where an episode ends
        with torch.no_grad():
            samples = model(cond={"state": torch.from_numpy(envs.obs).float()}, deterministic=True, return_chain=False)
        _, reward, terminated, truncated = envs.step(samples.trajectories[:, :act_steps].numpy())
        ended = (terminated | truncated) & np.isnan(first)
        first[ended] = before[ended] + reward[ended]
    model.train()
    return float(first.mean())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--ref", type=Path, required=True, help="a snapshot of irom-lab/dppo")
    parser.add_argument("--pretrained", type=Path, required=True, help="genpol's pretraining checkpoint")
    parser.add_argument("--dataset", type=Path, required=True, help="the D4RL-format file it was pretrained on")
    parser.add_argument("--env", default="Hopper-v5")
    parser.add_argument("--steps", type=int, default=500_000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--envs", type=int, default=16)
    parser.add_argument("--n-steps", type=int, default=64, help="chunks per env per iteration")
    parser.add_argument("--epochs", type=int, default=5)
    parser.add_argument("--batch-size", type=int, default=256)
    parser.add_argument("--actor-lr", type=float, default=1e-4)
    parser.add_argument("--critic-lr", type=float, default=1e-3)
    parser.add_argument("--vf-coef", type=float, default=0.5, help="theirs, on 0.5 MSE (genpol's 0.25 on MSE)")
    parser.add_argument("--clip", type=float, default=0.01, help="clip_ploss_coef and _base (Gym's constant)")
    parser.add_argument("--gamma", type=float, default=0.99)
    parser.add_argument("--gae-lambda", type=float, default=0.95)
    parser.add_argument("--width", type=int, default=256, help="the denoiser's and the critic's 3 hidden layers")
    parser.add_argument("--eval-episodes", type=int, default=10)
    args = parser.parse_args()

    torch.set_num_threads(1)
    torch.manual_seed(args.seed)
    np.random.seed(args.seed)  # their minibatch shuffle draws from numpy's global stream
    parity = harness("dppo")
    theirs = parity.load_theirs(args.ref.resolve())
    sys.path.insert(0, str(args.ref.resolve()))
    from util.reward_scaling import RunningRewardScaler  # noqa: E402  (their snapshot)
    from util.scheduler import CosineAnnealingWarmupRestarts  # noqa: E402

    pretrained = TrainedPolicy.load(args.pretrained).head
    # (the critic is not in a policy checkpoint: its policy.critic_residual=true is the pair's to set)
    their_network = {"time_embedding": "dppo", "output_activation": False, "time_mlp_activation": "mish",
                     "final_clamp": False, "activation": "mish", "use_ddim": False,
                     "hidden_sizes": [args.width] * 3}
    mismatched = {key: getattr(pretrained.config, key) for key, value in their_network.items()
                  if getattr(pretrained.config, key) != value}
    if mismatched:
        raise SystemExit(f"{args.pretrained}: the head was not built as their network: {mismatched} "
                         f"(expected {their_network})")
    act_steps, horizon = pretrained.act_steps, pretrained.horizon_steps
    obs_dim, action_dim = pretrained.obs_dim, pretrained.single_act_dim
    actor = theirs.mlp_diffusion.DiffusionMLP(action_dim=action_dim, horizon_steps=horizon, cond_dim=obs_dim, time_dim=16,
                                              mlp_dims=[args.width] * 3, activation_type="Mish", residual_style=True)
    critic = theirs.critic.CriticObs(cond_dim=obs_dim, mlp_dims=[args.width] * 3, activation_type="Mish",
                                     residual_style=True)
    model = theirs.ppo.PPODiffusion(
        actor=actor, critic=critic, ft_denoising_steps=pretrained.ft_steps, gamma_denoising=0.99,
        clip_ploss_coef=args.clip, clip_ploss_coef_base=args.clip, clip_ploss_coef_rate=3, randn_clip_value=3,
        min_sampling_denoising_std=0.1, min_logprob_denoising_std=0.1, denoised_clip_value=1.0,
        horizon_steps=horizon, obs_dim=obs_dim, action_dim=action_dim,
        denoising_steps=pretrained.num_steps, device="cpu")
    parity.copy_linears(pretrained.denoiser, model.actor)
    parity.copy_linears(pretrained.denoiser, model.actor_ft)

    norm = load_d4rl(args.dataset).normalization()
    actor_optimizer = torch.optim.AdamW(model.actor_ft.parameters(), lr=args.actor_lr, weight_decay=0)
    critic_optimizer = torch.optim.AdamW(model.critic.parameters(), lr=args.critic_lr, weight_decay=0)
    # their Gym config: 1000-iteration cycle, 10 warm-up iterations, min_lr = lr (a constant rate)
    actor_scheduler = CosineAnnealingWarmupRestarts(actor_optimizer, first_cycle_steps=1000, cycle_mult=1.0,
                                                    max_lr=args.actor_lr, min_lr=args.actor_lr, warmup_steps=10, gamma=1.0)
    critic_scheduler = CosineAnnealingWarmupRestarts(critic_optimizer, first_cycle_steps=1000, cycle_mult=1.0,
                                                     max_lr=args.critic_lr, min_lr=args.critic_lr, warmup_steps=10,
                                                     gamma=1.0)
    reward_scaler = RunningRewardScaler(args.envs)

    episodes, evals = open("episodes.jsonl", "w", buffering=1), open("evals.jsonl", "w", buffering=1)
    learner_log = open("learner.jsonl", "w", buffering=1)
    evals.write(json.dumps({"step": 0, "return": evaluate(model, args, norm, act_steps), "policy": "pretrained"}) + "\n")

    def on_episode(step: int, value: float, length: int) -> None:
        episodes.write(json.dumps({"step": step, "return": value, "length": length}) + "\n")

    start = time.perf_counter()
    venv = TheirChunkedEnvs(args.env, args.envs, seed=args.seed, norm=norm, on_episode=on_episode)
    prev_obs, done_venv = venv.obs.copy(), np.ones(args.envs)
    n, k_ft = args.n_steps, model.ft_denoising_steps
    their_count, iteration = 0, 0
    while venv.env_steps < args.steps:
        firsts = np.zeros((n + 1, args.envs))
        firsts[0] = done_venv
        obs_trajs = np.zeros((n, args.envs, 1, obs_dim))
        chains_trajs = np.zeros((n, args.envs, k_ft + 1, horizon, action_dim))
        terminated_trajs, reward_trajs = np.zeros((n, args.envs)), np.zeros((n, args.envs))
        for step in range(n):
            with torch.no_grad():
                samples = model(cond={"state": torch.from_numpy(prev_obs).float()}, deterministic=False,
                                return_chain=True)
            obs_venv, reward_venv, terminated_venv, truncated_venv = venv.step(
                samples.trajectories.numpy()[:, :act_steps])
            done_venv = terminated_venv | truncated_venv
            obs_trajs[step], chains_trajs[step] = prev_obs, samples.chains.numpy()
            reward_trajs[step], terminated_trajs[step], firsts[step + 1] = reward_venv, terminated_venv, done_venv
            prev_obs = obs_venv
            their_count += args.envs * act_steps

        with torch.no_grad():  # their logprob_batch_size (10000) holds a whole iteration here: one batch
            obs_k = {"state": torch.from_numpy(obs_trajs).float().reshape(n * args.envs, 1, obs_dim)}
            values_trajs = model.critic(obs_k).numpy().reshape(n, args.envs)
            chains_k = torch.from_numpy(chains_trajs).float().reshape(n * args.envs, k_ft + 1, horizon, action_dim)
            logprobs_k = model.get_logprobs(obs_k, chains_k).reshape(n * args.envs, k_ft, horizon, action_dim)
            reward_trajs = reward_scaler(reward=reward_trajs.T, first=firsts[:-1].T).T
            next_values = model.critic({"state": torch.from_numpy(obs_venv).float()}).numpy().reshape(-1)
            advantages_trajs, last = np.zeros_like(reward_trajs), 0.0
            for t in reversed(range(n)):
                nextvalues = next_values if t == n - 1 else values_trajs[t + 1]
                nonterminal = 1.0 - terminated_trajs[t]
                delta = reward_trajs[t] + args.gamma * nextvalues * nonterminal - values_trajs[t]
                advantages_trajs[t] = last = delta + args.gamma * args.gae_lambda * nonterminal * last
            returns_trajs = advantages_trajs + values_trajs
        returns_k = torch.tensor(returns_trajs).float().reshape(-1)
        values_k = torch.tensor(values_trajs).float().reshape(-1)
        advantages_k = torch.tensor(advantages_trajs).float().reshape(-1)

        total = n * args.envs
        indices, clipfracs, rows = np.arange(total), [], []
        for _epoch in range(args.epochs):
            np.random.shuffle(indices)
            for batch in range(max(1, total // args.batch_size)):  # the remainder dropped, as theirs
                rows_b = indices[batch * args.batch_size:(batch + 1) * args.batch_size]
                pg_loss, _entropy, v_loss, clipfrac, approx_kl, ratio, _bc, _eta = model.loss(
                    {"state": obs_k["state"][rows_b]}, chains_k[rows_b], returns_k[rows_b], values_k[rows_b],
                    advantages_k[rows_b], logprobs_k[rows_b], use_bc_loss=False, reward_horizon=act_steps)
                loss = pg_loss + v_loss * args.vf_coef
                clipfracs.append(clipfrac)
                actor_optimizer.zero_grad()
                critic_optimizer.zero_grad()
                loss.backward()
                actor_optimizer.step()
                critic_optimizer.step()
                rows.append([float(value.detach()) if torch.is_tensor(value) else float(value)
                             for value in (pg_loss, v_loss, approx_kl, ratio)])
        actor_scheduler.step()
        critic_scheduler.step()
        model.step()
        y_pred, y_true = values_k.numpy(), returns_k.numpy()
        explained = float(1 - np.var(y_true - y_pred) / np.var(y_true)) if np.var(y_true) > 0 else math.nan
        pg, v, kl, ratio_mean = np.mean(rows, axis=0)
        learner_log.write(json.dumps({"iteration": iteration, "env_steps": venv.env_steps, "their_step_count": their_count,
                                      "pg_loss": pg, "v_loss": v, "approx_kl": kl, "ratio": ratio_mean,
                                      "clipfrac": float(np.mean(clipfracs)), "explained_variance": explained}) + "\n")
        iteration += 1
    wall = time.perf_counter() - start
    evals.write(json.dumps({"step": venv.env_steps, "return": evaluate(model, args, norm, act_steps),
                            "policy": "final"}) + "\n")
    Path("reference_run.json").write_text(json.dumps(
        {"wall_time_s": wall, "env_steps": venv.env_steps, "their_step_count": their_count, "iterations": iteration,
         "settings": vars(args) | {"ref": str(args.ref), "pretrained": str(args.pretrained),
                                    "dataset": str(args.dataset)}}, indent=2))


if __name__ == "__main__":
    main()
