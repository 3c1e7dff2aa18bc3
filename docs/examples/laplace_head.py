"""A Laplace policy head in one file: the worked example of docs/tutorials/add-a-head.md.

Train with it (this file's directory on PYTHONPATH, its yaml in docs/examples/configs/policy/):
    python -m genpol.train --config-dir docs/examples/configs policy=laplace policy.hidden=32
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn
from torch.distributions import Laplace

from genpol.errors import require
from genpol.heads import PolicyHead, RatioTerms, Record
from genpol.heads.base import HeadConfig


@dataclass
class LaplaceConfig(HeadConfig):
    """The Laplace head's hyperparameters: each field is a command-line key (``policy.hidden=32``), a
    checked value and a constructor argument recorded in checkpoints."""

    family: str = "laplace_head:LaplaceHead"
    """The head class, as ``module:ClassName``."""
    hidden: int = 64
    """Width of the mean network's two hidden layers."""
    log_scale_init: float = -0.5
    """Initial log scale of every action dimension."""

    def __post_init__(self) -> None:
        super().__post_init__()  # the critic's fields
        require(self.hidden >= 1, "policy.hidden", ">= 1", self.hidden)


class LaplaceHead(PolicyHead):
    """``a ~ Laplace(mu_theta(s), exp(log_scale))`` per action dimension, independent.

    Record: the action and its log-prob under the sampling parameters; ``log_ratio`` is the exact
    log-prob difference, one ratio unit per sample (``[B, 1]``), as for a Gaussian.
    """

    family = "laplace"  # the name in error messages; checkpoints record "laplace_head:LaplaceHead"
    Config = LaplaceConfig

    def __init__(self, obs_dim: int, act_dim: int, config: LaplaceConfig | None = None, **hyperparameters: Any):
        # the base checks the arguments with LaplaceConfig, keeps them as self.config and derives
        # spec_kwargs (what rebuilds the head from a checkpoint) from them
        super().__init__(obs_dim, act_dim, config, **hyperparameters)
        hidden = self.config.hidden
        self.mean_net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                      nn.Linear(hidden, act_dim))
        self.log_scale = nn.Parameter(torch.full((act_dim,), self.config.log_scale_init))

    def distribution(self, obs: torch.Tensor) -> Laplace:
        """``obs [B, D]`` -> a Laplace with ``loc, scale [B, A]``."""
        mean = self.mean_net(obs)
        return Laplace(mean, self.log_scale.exp().expand_as(mean))

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, Record]:
        distribution = self.distribution(obs)
        action = distribution.sample()
        return action, {"action": action, "log_prob": distribution.log_prob(action).sum(-1)}

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        return self.mean_net(obs) if deterministic else self.distribution(obs).sample()

    def log_ratio(self, obs: torch.Tensor, record: Record) -> RatioTerms:
        distribution = self.distribution(obs)
        log_prob = distribution.log_prob(record["action"]).sum(-1)
        return RatioTerms(log_ratio=(log_prob - record["log_prob"]).unsqueeze(-1),
                          entropy=distribution.entropy().sum(-1))

    def imitation_loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        return -self.distribution(obs).log_prob(actions).sum(-1).mean()
