"""Fixed-seed tiny runs whose final weights were stored before the Algorithm-layer move.

``python tests/equivalence.py OUT.pt`` trains each run below and saves its final policy and critic
weights; ``tests/data/equivalence.pt`` was written this way at commit 9aa9572 (the last commit
before learning methods moved into ``genpol/algorithms``). ``test_equivalence.py`` re-runs them
and compares. The runs are chosen so that none of the deliberate fixes of that issue changes them
(no gradient-norm clip, a DPPO clip equal in head and updater, K' = 2), so the reference keeps
holding after the fixes.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import torch

COMMON = ["env.num_envs=2", "pipeline.video=false", "logger.progress_bar=false", "logger.tensorboard=false",
          "pipeline.eval_episodes=1", "env.workers=1"]
RUNS: dict[str, dict[str, Any]] = {
    # two PPO updates of a Gaussian head on Hopper-v5
    "gaussian_ppo": dict(env="hopper", policy="gaussian", learner="ppo", total_steps=256,
                         overrides=["learner.rollout_steps=64", "learner.epochs=2", "learner.minibatch_size=64",
                                    "learner.max_grad_norm=null", *COMMON]),
    # two TRPO steps (conjugate gradient, line search, critic epochs)
    "gaussian_trpo": dict(env="hopper", policy="gaussian", learner="trpo", total_steps=256,
                          overrides=["learner.rollout_steps=64", "learner.critic_epochs=2", *COMMON]),
    # BC pretraining of a small DPPO head on a random-policy dataset, then two PPO updates
    "dppo_offline_to_online": dict(
        env="hopper", policy="diffusion", learner="ppo", total_steps=512,
        overrides=["pipeline=offline_to_online", "policy.denoising_steps=4", "policy.ft_denoising_steps=2",
                   "policy.hidden_sizes=[32,32,32]", "policy.critic_hidden_sizes=[32,32]",
                   "policy.clip_base=0.01", "policy.clip_final=0.01", "learner.clip_range=0.01",
                   "pipeline.pretrain_steps=40", "pipeline.pretrain_log_every=20", "pipeline.ema_start=10",
                   "pipeline.ema_every=1", "learner.rollout_steps=32", "learner.epochs=1",
                   "learner.minibatch_size=64", "learner.max_grad_norm=null", *COMMON]),
}


def make_dataset(path: Path) -> Path:
    """A D4RL file of 400 random-policy Hopper-v5 steps (what the DPPO run pretrains on)."""
    from genpol.data.collect import main as collect_main

    if not path.exists():
        collect_main(["--policy", "random", "--env", "gym:Hopper-v5", "--steps", "400", "--num-envs", "2",
                      "--seed", "0", "--d4rl", str(path)])
    return path


def _find_critic(state: dict[str, Any]) -> dict[str, torch.Tensor]:
    """The value network's weights, wherever the training state keeps them."""
    if "critic" in state:
        return state["critic"]
    return _find_critic(state["algorithm"])


def final_weights(name: str, workdir: Path) -> dict[str, torch.Tensor]:
    """Train run ``name`` in ``workdir`` and return ``{"head.<k>": ..., "critic.<k>": ...}``."""
    from genpol.api import train
    from genpol.checkpoint import load_policy_files, load_training_state, resolve_checkpoint

    spec = RUNS[name]
    overrides = list(spec["overrides"])
    if any(item.startswith("pipeline=offline_to_online") for item in overrides):
        overrides.append(f"dataset.path={make_dataset(workdir / 'hopper_random-v5.hdf5')}")
    run_dir = workdir / name
    train(spec["env"], spec["policy"], spec["learner"], total_steps=spec["total_steps"], seed=0,
          run_dir=run_dir, overrides=overrides)
    checkpoint = resolve_checkpoint(run_dir)
    _, weights = load_policy_files(checkpoint)
    critic = _find_critic(load_training_state(checkpoint))
    return {**{f"head.{k}": v for k, v in weights["head"].items()},
            **{f"critic.{k}": v for k, v in critic.items()}}


if __name__ == "__main__":
    import tempfile

    torch.set_num_threads(1)
    with tempfile.TemporaryDirectory() as tmp:
        reference = {name: final_weights(name, Path(tmp)) for name in RUNS}
    torch.save(reference, sys.argv[1])
    print({name: len(tensors) for name, tensors in reference.items()})
