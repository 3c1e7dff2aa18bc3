"""Rollout storage for on-policy learning, and generalized advantage estimation."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Iterator

import torch

from genpol.heads.base import Record


def generalized_advantage_estimate(
    rewards: torch.Tensor,
    values: torch.Tensor,
    next_values: torch.Tensor,
    terminated: torch.Tensor,
    episode_ended: torch.Tensor,
    gamma: float,
    gae_lambda: float,
) -> tuple[torch.Tensor, torch.Tensor]:
    """GAE(gamma, lambda) over a rollout of T steps from N envs.

    Args:
        rewards: ``[T, N]`` reward of step t.
        values: ``[T, N]`` V(s_t).
        next_values: ``[T, N]`` V of the state reached by step t: V(s_{t+1}) inside an episode, the
            value of the true final observation where a time limit truncated the episode (the
            bootstrap), anything where the episode terminated (it is masked out).
        terminated: ``[T, N]`` bool, the episode reached a terminal state at step t: no bootstrap.
        episode_ended: ``[T, N]`` bool, terminated or truncated at step t: the advantage recursion
            stops here, because s_{t+1} in the buffer belongs to the next episode.
        gamma: discount.
        gae_lambda: GAE's lambda.

    Returns:
        ``(advantages [T, N], returns [T, N])`` with ``returns = advantages + values``.

    delta_t = r_t + gamma * (1 - terminated_t) * next_value_t - V(s_t)
    A_t     = delta_t + gamma * lambda * (1 - ended_t) * A_{t+1}
    """
    not_terminated = (~terminated).to(rewards.dtype)
    continues = (~episode_ended).to(rewards.dtype)
    deltas = rewards + gamma * not_terminated * next_values - values
    advantages = torch.empty_like(rewards)
    running = torch.zeros_like(rewards[0])
    for t in range(rewards.shape[0] - 1, -1, -1):
        running = deltas[t] + gamma * gae_lambda * continues[t] * running
        advantages[t] = running
    return advantages, advantages + values


@dataclass
class Batch:
    """One minibatch of B flattened (step, env) samples."""

    obs: torch.Tensor  # [B, D]
    record: Record  # each [B, ...]
    advantages: torch.Tensor  # [B]
    returns: torch.Tensor  # [B]
    values: torch.Tensor  # [B], V(s) at collection time


class RolloutStorage:
    """Preallocated ``[T, N, ...]`` buffers for one rollout of T steps from N envs.

    Head records are arbitrary dicts of tensors; their buffers are allocated from the first record's
    shapes and dtypes, so a head with a new kind of record (a denoising chain, flow noise pairs)
    needs no change here.
    """

    @staticmethod
    def bytes_for(num_steps: int, num_envs: int, obs_dim: int, record: Record) -> int:
        """Bytes of a full rollout: per step and env the float32 observation, five float32 fields
        (rewards, values, truncation values, advantages, returns), two bool flags, and one sample's
        ``record`` (a dict of ``[1, ...]`` tensors, as ``head.sample`` of one observation returns);
        and the observation after it."""
        record_bytes = sum(tensor.numel() * tensor.element_size() for tensor in record.values())
        return num_steps * num_envs * (4 * obs_dim + 5 * 4 + 2 + record_bytes) + num_envs * 4 * obs_dim

    @staticmethod
    def epoch_copy_bytes(num_steps: int, num_envs: int, obs_dim: int, record: Record,
                         sequence_length: int | None = None) -> int:
        """Bytes of what an epoch gathers beside the rollout while the updaters slice its minibatches: the
        shuffled copy of the observations, three float fields (advantages, returns, values) and the record
        (``minibatches``). For sub-sequences of ``sequence_length`` steps (``genpol.storage.sequences``), an
        upper bound: one minibatch at a time (at most the whole rollout) of the observations, values, rewards,
        the two flags and the record, and each sub-sequence's bootstrap observation. At most 16 bytes of
        fields a step either way."""
        record_bytes = sum(tensor.numel() * tensor.element_size() for tensor in record.values())
        bootstrap_bytes = 0 if sequence_length is None else num_envs * (num_steps // sequence_length) * 4 * obs_dim
        return num_steps * num_envs * (4 * obs_dim + 16 + record_bytes) + bootstrap_bytes

    def __init__(self, num_steps: int, num_envs: int, obs_dim: int, device: torch.device | str = "cpu"):
        self.num_steps = num_steps
        self.num_envs = num_envs
        self.device = torch.device(device)
        shape = (num_steps, num_envs)
        self.obs = torch.zeros(*shape, obs_dim, device=self.device)
        self.rewards = torch.zeros(shape, device=self.device)
        self.values = torch.zeros(shape, device=self.device)
        self.truncation_values = torch.zeros(shape, device=self.device)
        self.terminated = torch.zeros(shape, dtype=torch.bool, device=self.device)
        self.truncated = torch.zeros(shape, dtype=torch.bool, device=self.device)
        self.advantages = torch.zeros(shape, device=self.device)
        self.returns = torch.zeros(shape, device=self.device)
        self.last_obs = torch.zeros(num_envs, obs_dim, device=self.device)  # the observation after the rollout
        self.records: Record = {}
        self.step = 0

    def add(
        self,
        obs: torch.Tensor,
        record: Record,
        value: torch.Tensor,
        reward: torch.Tensor,
        terminated: torch.Tensor,
        truncated: torch.Tensor,
        truncation_value: torch.Tensor | None = None,
    ) -> None:
        """Store step ``self.step``: ``obs [N, D]`` the action was taken in, its ``record``, ``value [N]``
        = V(obs), and the env's ``reward``, ``terminated``, ``truncated`` ``[N]``.
        ``truncation_value [N]`` is V(final obs) where truncated (ignored elsewhere)."""
        t = self.step
        if t >= self.num_steps:
            raise IndexError(f"rollout storage is full ({self.num_steps} steps); call reset() first")
        if not self.records:
            self.records = {
                key: torch.zeros((self.num_steps, *tensor.shape), dtype=tensor.dtype, device=self.device)
                for key, tensor in record.items()
            }
        for key, tensor in record.items():
            self.records[key][t] = tensor
        self.obs[t] = obs
        self.values[t] = value
        self.rewards[t] = reward
        self.terminated[t] = terminated
        self.truncated[t] = truncated
        # written at every step, not zeroed by reset(): the runner's finiteness check reads them after the update
        # has reset the write position, and found zeros where a non-finite final observation's value had been
        if truncation_value is not None:
            self.truncation_values[t] = truncation_value
        else:
            self.truncation_values[t] = 0.0
        self.step += 1

    def reset(self) -> None:
        self.step = 0

    def compute_advantages(self, last_value: torch.Tensor, gamma: float, gae_lambda: float, reward_scale: float = 1.0,
                           last_obs: torch.Tensor | None = None, bootstrap_truncation: bool = True) -> None:
        """Fill ``advantages`` and ``returns`` given ``last_value [N]`` = V(obs after the last step), on
        rewards times ``reward_scale``; keep ``last_obs [N, D]``, that observation, where given (the
        sub-sequences of ``genpol.storage.sequences`` bootstrap from it). ``bootstrap_truncation`` false:
        a truncated step ends its return as a terminal one does (no ``truncation_values``)."""
        if last_obs is not None:
            self.last_obs.copy_(last_obs)
        next_values = torch.cat([self.values[1:], last_value.unsqueeze(0)], dim=0)
        next_values = torch.where(self.truncated, self.truncation_values, next_values)
        rewards = self.rewards * reward_scale if reward_scale != 1.0 else self.rewards
        no_bootstrap = self.terminated if bootstrap_truncation else self.terminated | self.truncated
        self.advantages, self.returns = generalized_advantage_estimate(
            rewards, self.values, next_values, no_bootstrap, self.terminated | self.truncated,
            gamma, gae_lambda,
        )

    def flat(self) -> Batch:
        """The whole rollout as one batch of ``T * N`` samples (views, no copy)."""
        n = self.num_steps * self.num_envs
        return Batch(
            obs=self.obs.reshape(n, -1),
            record={key: value.reshape(n, *value.shape[2:]) for key, value in self.records.items()},
            advantages=self.advantages.reshape(n),
            returns=self.returns.reshape(n),
            values=self.values.reshape(n),
        )

    def minibatches(self, batch_size: int, generator: torch.Generator | None = None) -> Iterator[Batch]:
        """One epoch of shuffled minibatches of ``batch_size`` (the last one may be smaller).

        The whole rollout is permuted once per epoch and the minibatches are contiguous slices of
        it: one gather per tensor per epoch instead of one per minibatch, which matters when
        minibatches are small (2560 of them per rollout with stable-baselines3's defaults).
        """
        data = self.flat()
        n = data.obs.shape[0]
        order = torch.randperm(n, generator=generator, device="cpu").to(self.device)
        # split() makes every minibatch's views in one call per tensor (2560 slices per rollout at
        # stable-baselines3's defaults; slicing them one at a time cost ~55 us per minibatch)
        columns = [data.obs[order].split(batch_size), data.advantages[order].split(batch_size),
                   data.returns[order].split(batch_size), data.values[order].split(batch_size)]
        keys = list(data.record)
        columns += [data.record[key][order].split(batch_size) for key in keys]
        for obs, advantages, returns, values, *record in zip(*columns):
            yield Batch(obs=obs, record=dict(zip(keys, record)), advantages=advantages, returns=returns, values=values)
