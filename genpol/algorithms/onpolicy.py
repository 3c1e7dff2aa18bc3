"""On-policy learning: the PPO family (PPO, SPO, ASPO on minibatch epochs) and TRPO.

``OnPolicyAlgorithm`` owns the value critic, the updater (its loss, optimizer and learning-rate
rule), the rollout storage and the minibatch-shuffling generator. The runner drives it:

    action = algorithm.act(obs)                       # samples and remembers the head's record
    algorithm.process_env_step(obs, reward, ...)      # stores the step (x rollout_steps)
    algorithm.compute_returns(last_obs)               # GAE
    stats = algorithm.update()

Pipelined collection (``genpol.runners.pipelined``) acts group by group with ``act_pending``, which
hands back what ``act`` would remember, and passes the groups' parts, merged in env order by
``merge_pending``, to ``process_env_step(..., pending=)``.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn

from genpol.algorithms.base import Algorithm
from genpol.heads.base import Capability, PolicyHead, Record
from genpol.memory import require_memory
from genpol.storage import RolloutStorage

Pending = tuple[Record, torch.Tensor]  # (the head's record, V(obs)) of an act, until its step is stored


def rollout_bytes(head: PolicyHead, rollout_steps: int, num_envs: int, obs_dim: int, device: torch.device,
                  sequence_length: int | None = None) -> int:
    """Bytes of ``head``'s rollout of ``rollout_steps x num_envs`` steps (``RolloutStorage.bytes_for``) and of
    the shuffled copy each epoch gathers from it (``RolloutStorage.epoch_copy_bytes``: the check counted the
    rollout once, and the first minibatch doubled it; ``sequence_length``: the updater's sub-sequences, or
    None), its record measured on one sample drawn with the random state forked (the run's draws are not
    disturbed)."""
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []), torch.no_grad():
        _, record = head.sample(torch.zeros(1, obs_dim, device=device))
    return (RolloutStorage.bytes_for(rollout_steps, num_envs, obs_dim, record)
            + RolloutStorage.epoch_copy_bytes(rollout_steps, num_envs, obs_dim, record, sequence_length))


def model_bytes(*modules: nn.Module) -> int:
    """Parameters, their gradients and Adam's two moments: four copies of every parameter."""
    return 4 * sum(p.numel() * p.element_size() for module in modules for p in module.parameters())


class OnPolicyAlgorithm(Algorithm):
    """A policy-gradient learner over head records and log-ratios.

    Args:
        head: the policy head.
        critic: ``V(s)``, ``obs [B, D] -> [B]``.
        updater: ``MinibatchUpdater`` or ``TRPOUpdater`` (``update(storage, generator) -> dict``,
            ``set_lr_scale``, ``state_dict``).
        rollout_steps, num_envs, obs_dim: the rollout's shape.
        gamma, gae_lambda: advantage estimation.
        reward_scale: rewards are multiplied by it before GAE (FPO's and GoRL's code: 10).
        bootstrap_truncation: bootstrap a time-limit truncation from V(final observation) (true), or end
            the return there as at a termination (CleanRL's and SPO's code).
        seed: seed of minibatch shuffling (the generator is ``seed + 1``).
        lr_schedule: ``"constant"``, ``"linear"`` (decay to 0 over training) or ``"adaptive"``
            (handled inside the updater).
        compile_sampling: run ``head.sample`` through ``torch.compile``. Flow heads call their
            network 10-20 times per action; compiled, FPO's sampling for 32 envs measured 3.1 -> 1.4 ms
            per step on a 2-core CPU. A Gaussian head gets slower (one small MLP), so it is off by default.
    """

    needs = frozenset({Capability.ON_POLICY_RATIO})

    def __init__(self, head: PolicyHead, critic: nn.Module, updater: Any, *, name: str, rollout_steps: int,
                 num_envs: int, obs_dim: int, gamma: float, gae_lambda: float, seed: int = 0,
                 lr_schedule: str = "constant", compile_sampling: bool = False, reward_scale: float = 1.0,
                 bootstrap_truncation: bool = True):
        self.name = name  # type: ignore[misc]  # per instance: "ppo", "spo", "aspo" or "trpo"
        super().__init__(head)
        self.critic = critic
        self.updater = updater
        self.gamma, self.gae_lambda, self.reward_scale = gamma, gae_lambda, reward_scale
        self.bootstrap_truncation = bootstrap_truncation
        self.lr_schedule = lr_schedule
        self.device = next(critic.parameters()).device
        sequences = getattr(updater, "sequences", None)  # MinibatchUpdater's sub-sequences; TRPO has none
        self.check_memory(head, critic, rollout_steps, num_envs, obs_dim, self.device,
                          None if sequences is None else sequences.length)
        self.storage = RolloutStorage(rollout_steps, num_envs, obs_dim, self.device)
        self.shuffle_generator = torch.Generator().manual_seed(seed + 1)
        self.sample = torch.compile(head.sample, dynamic=False) if compile_sampling else head.sample
        head.act_as_sampled()  # stochastic evaluation and the saved policy act with the policy the ratio is of
        self._pending: Pending | None = None  # (record, V(obs)) of the last act

    @staticmethod
    def check_memory(head: PolicyHead, critic: nn.Module, rollout_steps: int, num_envs: int, obs_dim: int,
                     device: torch.device, sequence_length: int | None = None) -> None:
        """``ConfigError`` naming ``learner.rollout_steps`` when the rollout and the model cannot fit, before the
        rollout is allocated (``critic`` may live on the meta device: only its parameter sizes are read)."""
        require_memory("learner.rollout_steps", rollout_steps,
                       rollout_bytes(head, rollout_steps, num_envs, obs_dim, device, sequence_length)
                       + model_bytes(head, critic),
                       device, f"the rollout storage of env.num_envs={num_envs} envs and the model")

    @property
    def rollout_steps(self) -> int:
        return self.storage.num_steps

    def act(self, obs: torch.Tensor) -> torch.Tensor:
        action, self._pending = self.act_pending(obs)
        return action

    @torch.no_grad()
    def act_pending(self, obs: torch.Tensor, send: Callable[[torch.Tensor], None] | None = None
                    ) -> tuple[torch.Tensor, Pending]:
        """``obs [n, D]`` -> actions ``[n, A]`` and their (record, ``V(obs) [n]``), handed back
        rather than remembered: pipelined collection acts for one env group at a time. ``send``,
        if given, gets the actions before the critic runs, so that the step it starts overlaps it."""
        action, record = self.sample(obs)
        if send is not None:
            send(action)
        return action, (record, self.critic(obs))

    @staticmethod
    def merge_pending(parts: list[Pending]) -> Pending:
        """The pendings of consecutive env groups -> one for all envs, in env order."""
        if len(parts) == 1:
            return parts[0]
        records = {key: torch.cat([record[key] for record, _ in parts]) for key in parts[0][0]}
        return records, torch.cat([value for _, value in parts])

    @torch.no_grad()
    def process_env_step(self, obs: torch.Tensor, reward: torch.Tensor, terminated: torch.Tensor,
                         truncated: torch.Tensor, info: dict[str, Any], pending: Pending | None = None) -> None:
        """Store the step taken from ``obs [N, D]`` by the last ``act`` (or by ``pending``, from
        ``act_pending``). Where a time limit cut an episode, the critic's value of the true final
        observation is its bootstrap."""
        if pending is None:
            if self._pending is None:
                raise RuntimeError("process_env_step() without a preceding act()")
            pending, self._pending = self._pending, None
        record, value = pending
        truncation_value = (self.critic(info["final_obs"]) if self.bootstrap_truncation and truncated.any()
                            else None)
        self.storage.add(obs, record, value, reward, terminated, truncated, truncation_value)

    @torch.no_grad()
    def compute_returns(self, last_obs: torch.Tensor) -> None:
        """GAE over the filled rollout, bootstrapping from ``V(last_obs [N, D])``."""
        self.storage.compute_advantages(self.critic(last_obs), self.gamma, self.gae_lambda, self.reward_scale,
                                        last_obs=last_obs, bootstrap_truncation=self.bootstrap_truncation)

    def set_progress(self, fraction: float) -> None:
        if self.lr_schedule == "linear":
            self.updater.set_lr_scale(max(1.0 - fraction, 0.0))

    def update(self) -> dict[str, float]:
        """Update on the rollout; the storage starts over at the next ``act``."""
        self.head.begin_update()
        stats = self.updater.update(self.storage, self.shuffle_generator)
        self.storage.reset()
        return stats

    def networks(self) -> dict[str, nn.Module | torch.Tensor]:
        return {"head": self.head, "critic": self.critic}

    def recent_data(self) -> dict[str, torch.Tensor]:
        """The rollout (complete after ``update``, which resets only its write position), and the values of the
        final observations it bootstraps truncated episodes from (a non-finite final observation shows there)."""
        storage = self.storage
        return {"observations": storage.obs, "rewards": storage.rewards,
                "final observations' values": storage.truncation_values.where(storage.truncated, 0.0)}

    def state_dict(self) -> dict[str, Any]:
        return {"critic": self.critic.state_dict(), "updater": self.updater.state_dict(),
                "shuffle_rng": self.shuffle_generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic.load_state_dict(state["critic"])
        self.updater.load_state_dict(state["updater"])
        self.shuffle_generator.set_state(state["shuffle_rng"])
