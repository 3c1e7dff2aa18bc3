"""Brax-style advantage estimation: a rollout cut into whole sub-sequences of each env, shuffled into
minibatches, with GAE recomputed inside every minibatch's loss from the critic being trained
(``learner.advantage_estimation=minibatch``).

This is how Brax's PPO, and with it FPO's and GoRL's code (``flow_policy/rollouts.py``
``compute_gae`` and ``prepare_minibatches``), estimate advantages; genpol's default computes GAE
once per rollout (``genpol.storage.rollout``). Three things differ besides the critic being fresher:

* the recursion runs only inside a sub-sequence of ``L`` steps and bootstraps from V of the
  observation after its last step (a truncated lambda-return), not over the whole rollout;
* a time-limit truncation is masked, not bootstrapped: the truncated step gets advantage 0, value
  target V(s) (so no value error), and the recursion stops there;
* the advantage is ``r_t + gamma (1 - done_t) vs_{t+1} - V(s_t)`` with the value targets ``vs``
  (Brax's, from the V-trace form it shares code with), not ``vs_t - V(s_t)``.

Layout: env ``n``'s steps ``[c L, (c + 1) L)`` form sub-sequence ``s = n (T / L) + c`` (Brax's
``swapaxes(0, 1).reshape(-1, L)``), and its bootstrap observation is the rollout's next
observation of that env: ``obs[(c + 1) L, n]``, or the observation after the rollout for the last.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from genpol.heads.base import Record


def sequence_gae(rewards: torch.Tensor, values: torch.Tensor, bootstrap_value: torch.Tensor, terminated: torch.Tensor,
                 truncated: torch.Tensor, gamma: float, gae_lambda: float) -> tuple[torch.Tensor, torch.Tensor]:
    """Brax's ``compute_gae`` over ``[L, B]`` sub-sequences.

    Args:
        rewards, values: ``[L, B]`` (values: V(s_t) of the critic being trained, without gradient).
        bootstrap_value: ``[B]``, V of the observation after each sub-sequence's last step.
        terminated, truncated: ``[L, B]`` bool; a terminal step zeroes the discount, a truncated one is
            masked (its discount is irrelevant: FPO's rollouts keep it at 1). A step with both flags (a time
            limit reached on the step the episode terminated, which gymnasium flags so) is a termination, as
            Brax defines truncation ("at the limit and not done"): its reward is learned from.
        gamma, gae_lambda: discount and GAE's lambda.

    Returns:
        ``(value_targets [L, B], advantages [L, B])``:

        delta_t = (r_t + gamma (1 - term_t) V(s_{t+1}) - V(s_t)) (1 - trunc_t)
        vs_t    = V(s_t) + delta_t + gamma lambda (1 - term_t)(1 - trunc_t) (vs_{t+1} - V(s_{t+1}))
        A_t     = (r_t + gamma (1 - term_t) vs_{t+1} - V(s_t)) (1 - trunc_t),   vs_L = V(bootstrap)
    """
    discount = gamma * (~terminated).to(rewards.dtype)
    keep = (~(truncated & ~terminated)).to(rewards.dtype)
    next_values = torch.cat([values[1:], bootstrap_value.unsqueeze(0)], dim=0)
    deltas = (rewards + discount * next_values - values) * keep
    carry_scale = discount * gae_lambda * keep
    vs_minus_v = torch.empty_like(rewards)
    running = torch.zeros_like(bootstrap_value)
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = deltas[t] + carry_scale[t] * running
        vs_minus_v[t] = running
    value_targets = vs_minus_v + values
    next_targets = torch.cat([value_targets[1:], bootstrap_value.unsqueeze(0)], dim=0)
    advantages = (rewards + discount * next_targets - values) * keep
    return value_targets, advantages


@dataclass
class SequenceBatch:
    """B sub-sequences of L steps, time first, as Brax's minibatches."""

    obs: torch.Tensor  # [L, B, D]
    record: Record  # each [L, B, ...]
    rewards: torch.Tensor  # [L, B], as stored (the loss applies learner.reward_scale)
    terminated: torch.Tensor  # [L, B] bool
    truncated: torch.Tensor  # [L, B] bool
    values: torch.Tensor  # [L, B], V(s) at collection time (for value clipping)
    bootstrap_obs: torch.Tensor  # [B, D], the observation after each sub-sequence


def sequence_minibatches(obs: torch.Tensor, records: Record, rewards: torch.Tensor, terminated: torch.Tensor,
                         truncated: torch.Tensor, values: torch.Tensor, last_obs: torch.Tensor, length: int,
                         sequences_per_minibatch: int, generator: torch.Generator | None = None
                         ) -> Iterator[SequenceBatch]:
    """One epoch of shuffled minibatches of whole sub-sequences (the last may hold fewer).

    ``obs [T, N, D]``, the records, ``rewards``, ``terminated``, ``truncated``, ``values`` ``[T, N]``:
    a full rollout (``genpol.storage.rollout.RolloutStorage``'s buffers); ``last_obs [N, D]``, the
    observation after it. ``T`` must be a multiple of ``length``.

    Each minibatch is gathered from the rollout by index, one at a time: a copy of the whole rollout cut into
    sub-sequences (Brax's layout, made once per epoch) held every field twice while the minibatches were
    gathered from it. The order and the values are those of that layout.
    """
    steps, envs = rewards.shape
    if steps % length:
        raise ValueError(f"a rollout of {steps} steps does not cut into sub-sequences of {length}")
    chunks = steps // length
    offsets = torch.arange(length, device=obs.device).unsqueeze(1)  # [L, 1]
    order = torch.randperm(envs * chunks, generator=generator, device="cpu").to(obs.device)
    for start in range(0, envs * chunks, sequences_per_minibatch):
        index = order[start:start + sequences_per_minibatch]
        env, chunk = index // chunks, index % chunks  # sub-sequence s = n (T / L) + c
        rows, columns = chunk * length + offsets, env.expand(length, -1)  # [L, B] each: step and env of each

        def time_first(tensor: torch.Tensor) -> torch.Tensor:  # [T, N, ...] -> [L, B, ...]
            return tensor[rows, columns]

        # the observation after each sub-sequence: the next one's first, or the one after the rollout
        following = (chunk + 1) * length
        bootstrap = torch.where((following < steps).unsqueeze(1), obs[following.clamp(max=steps - 1), env],
                                last_obs[env])
        yield SequenceBatch(obs=time_first(obs), record={key: time_first(tensor) for key, tensor in records.items()},
                            rewards=time_first(rewards), terminated=time_first(terminated),
                            truncated=time_first(truncated), values=time_first(values), bootstrap_obs=bootstrap)
