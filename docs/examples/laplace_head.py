"""A Laplace policy head in one file: the worked example of docs/tutorials/add-a-head.md.

Train with it:  python -m genpol.train policy=custom policy.family=laplace_head:LaplaceHead \
                    +policy.kwargs.hidden=64   (with this file's directory on PYTHONPATH)
"""

from __future__ import annotations

import torch
from torch import nn
from torch.distributions import Laplace

from genpol.heads import PolicyHead, RatioTerms, Record


class LaplaceHead(PolicyHead):
    """``a ~ Laplace(mu_theta(s), exp(log_scale))`` per action dimension, independent.

    Record: the action and its log-prob under the sampling parameters; ``log_ratio`` is the exact
    log-prob difference, one ratio unit per sample (``[B, 1]``), as for a Gaussian.
    """

    family = "laplace"  # the name in error messages; checkpoints record "laplace_head:LaplaceHead"

    def __init__(self, obs_dim: int, act_dim: int, hidden: int = 64, log_scale_init: float = -0.5):
        super().__init__(obs_dim, act_dim)
        self.spec_kwargs = {"hidden": hidden, "log_scale_init": log_scale_init}  # rebuilds it from a checkpoint
        self.mean_net = nn.Sequential(nn.Linear(obs_dim, hidden), nn.Tanh(), nn.Linear(hidden, hidden), nn.Tanh(),
                                      nn.Linear(hidden, act_dim))
        self.log_scale = nn.Parameter(torch.full((act_dim,), log_scale_init))

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
