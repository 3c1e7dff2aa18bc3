"""The two steps between GoRL's encoder stages (ALGORITHMS.md 6.2): collect (s, pre-tanh a) with the
best encoder and the current decoder, then train a new decoder from the fixed prior N(0, I) onto those
actions: by conditional flow matching (flow decoder) or DDPM's epsilon loss (ddim decoder), the
head's ``decoder_error``.

Both are short, deterministic given their seed and all-or-nothing: each writes one file atomically
(temporary name, then rename), so a run killed during either simply redoes it on resume, with the
same result. Neither touches the training env or torch's global generator.
"""

from __future__ import annotations

import math
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable

import torch

from genpol.envs import VectorEnv
from genpol.files import replaced_atomically
from genpol.heads.latent import LatentDecoderHead
from genpol.runners.guards import raise_if_stopped


def save_atomic(payload: dict[str, Any], path: Path) -> None:
    """``torch.save`` replacing ``path`` whole (``replaced_atomically``: a failed save leaves no partial file)."""
    with replaced_atomically(path) as tmp:
        torch.save(payload, tmp)


@torch.no_grad()
def collect_pre_tanh_actions(head: LatentDecoderHead, env: VectorEnv, steps: int, seed: int) -> dict[str, Any]:
    """Roll out the combined policy (stochastic encoder, deterministic decoder) for at least ``steps``
    env steps on ``env`` (frozen observation statistics, raw rewards).

    Returns ``obs [M, D]`` (normalized, as the decoder sees them), ``actions [M, A]`` (pre-tanh, as the
    decoder must produce them; z is not kept), ``env_steps`` and the finished episodes' returns.
    """
    rng_state = torch.get_rng_state()
    torch.manual_seed(seed)  # the encoder's noise; restored below, so the caller's stream is untouched
    try:
        obs = env.reset(seed=seed)
        # One row per env and step, written in place on the CPU: a list of per-step tensors and their
        # concatenation held the pairs twice (2.2 GB each for Hopper at GoRL's 20M steps). Every call
        # executes at least one step per env, so rows never outnumber env steps; an env that executes
        # several per call fills fewer rows, cut to size at the end.
        capacity = -(-steps // env.num_envs) * env.num_envs
        store: dict[str, torch.Tensor] = {}
        rows, env_steps, returns = 0, 0, []
        while env_steps < steps:
            raise_if_stopped("the collection for the decoder")
            pre_tanh, _ = head.sample_pre_tanh(obs)
            for name, value in (("obs", obs), ("actions", pre_tanh)):
                if name not in store:
                    store[name] = value.new_empty((capacity, value.shape[1]), device="cpu")
                store[name][rows:rows + len(value)] = value
            rows += len(obs)
            obs, _, _, _, info = env.step(torch.tanh(pre_tanh))
            executed = info.get("env_steps")
            env_steps += int(executed.sum()) if executed is not None else env.num_envs
            if info["episode_return"].numel():
                returns += info["episode_return"].tolist()
    finally:
        torch.set_rng_state(rng_state)
    return {**{name: value if rows == len(value) else value[:rows].clone() for name, value in store.items()},
            "env_steps": env_steps, "episode_returns": returns}


@dataclass
class DecoderTraining:
    """GoRL's decoder fit (``train_decoder_fm.py``): Adam, shuffled minibatches, a held-out split,
    early stopping, and the best-validation weights.

    Attributes:
        epochs, batch_size, lr, pairs: passes over the data, actions per step, Adam's learning rate,
            (t, noise) pairs per action.
        validation: fraction held out; patience: epochs without improvement before stopping.
        max_samples: at most this many actions (a random subset).
    """

    epochs: int = 50
    batch_size: int = 8192
    lr: float = 3e-4
    pairs: int = 8
    validation: float = 0.1
    patience: int = 20
    max_samples: int = 10_000_000

    def fit(self, head: LatentDecoderHead, obs: torch.Tensor, actions: torch.Tensor, seed: int,
            log: Callable[[int, dict[str, float]], None] | None = None) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        """Train a freshly initialized decoder on ``obs [M, D]`` -> pre-tanh ``actions [M, A]``.

        Returns the best-validation decoder weights and a report (losses per epoch, best epoch).
        ``log(epoch, {"train_loss", "val_loss"})`` is called after each epoch. The head is not changed.
        """
        rng_state = torch.get_rng_state()
        torch.manual_seed(seed)  # init, split, shuffling and (t, noise): all from this seed
        try:
            return self._fit(head, obs, actions, log)
        finally:
            torch.set_rng_state(rng_state)

    def _fit(self, head: LatentDecoderHead, obs: torch.Tensor, actions: torch.Tensor,
             log: Callable[[int, dict[str, float]], None] | None) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
        device = next(head.parameters()).device
        if len(obs) > self.max_samples:
            keep = torch.randperm(len(obs))[: self.max_samples]
            obs, actions = obs[keep], actions[keep]
        order = torch.randperm(len(obs))
        held_out = max(1, int(round(len(obs) * self.validation)))
        if held_out >= len(obs):
            raise ValueError(f"GoRL decoder training got {len(obs)} collected actions: too few to hold out "
                             f"{self.validation:.0%} for validation; raise pipeline.collect_steps")
        val_index, train_index = order[:held_out], order[held_out:]
        train_obs, train_actions = obs[train_index].to(device), actions[train_index].to(device)
        val_obs, val_actions = obs[val_index].to(device), actions[val_index].to(device)
        # fixed validation draws: epochs are compared on the same (t, noise), not on fresh noise
        val_t = torch.rand(held_out, self.pairs).to(device)
        val_noise = torch.randn(held_out, self.pairs, head.act_dim).to(device)

        decoder = head.new_decoder().to(device)
        optimizer = torch.optim.Adam(decoder.parameters(), lr=self.lr)
        batch = min(self.batch_size, len(train_obs))
        best = (math.inf, 0, {k: v.clone() for k, v in decoder.state_dict().items()})
        history: list[dict[str, float]] = []
        for epoch in range(1, self.epochs + 1):
            permutation = torch.randperm(len(train_obs)).to(device)
            losses = []
            for start in range(0, len(train_obs) - batch + 1, batch):  # full batches only, as GoRL
                raise_if_stopped("the decoder fit")
                index = permutation[start:start + batch]
                loss = head.decoder_loss(train_obs[index], train_actions[index], self.pairs, decoder).mean()
                optimizer.zero_grad(set_to_none=True)
                loss.backward()
                optimizer.step()
                losses.append(loss.detach())
            with torch.no_grad():
                val_loss = float(head.decoder_error(val_obs, val_actions, val_t, val_noise, decoder).mean())
            row = {"train_loss": float(torch.stack(losses).mean()), "val_loss": val_loss}
            history.append(row)
            if log is not None:
                log(epoch, row)
            if val_loss < best[0]:
                best = (val_loss, epoch, {k: v.clone() for k, v in decoder.state_dict().items()})
            elif epoch - best[1] >= self.patience:
                break
        report = {"best_val_loss": best[0], "best_epoch": best[1], "epochs_run": len(history),
                  "train_samples": len(train_obs), "val_samples": held_out, "history": history}
        return best[2], report
