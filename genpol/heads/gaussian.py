"""Diagonal Gaussian policy: an MLP mean and a state-independent log standard deviation.

This is stable-baselines3's ``MlpPolicy`` actor for Box actions: the action is sampled unsquashed
(the env wrapper clips after rescaling), log-probabilities are summed over action dimensions, and
the log-std is a free parameter vector initialised to ``log_std_init``.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, List

import torch
from torch import nn

from genpol.heads.base import HeadConfig, PolicyHead, RatioTerms, Record
from genpol.nets import MLP

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def diagonal_gaussian_log_prob(
    action: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor
) -> torch.Tensor:
    """``log N(action; mean, diag(exp(log_std))^2)`` summed over the last dim: ``[B, A] -> [B]``."""
    z = (action - mean) * torch.exp(-log_std)
    return (-0.5 * z.square() - log_std - _HALF_LOG_2PI).sum(dim=-1)


def diagonal_gaussian_kl(
    mean_p: torch.Tensor, log_std_p: torch.Tensor, mean_q: torch.Tensor, log_std_q: torch.Tensor
) -> torch.Tensor:
    """``KL(N_p || N_q)`` for diagonal Gaussians, summed over the last dim: ``[B, A] -> [B]``."""
    var_ratio = torch.exp(2 * (log_std_p - log_std_q))
    mean_term = (mean_p - mean_q).square() * torch.exp(-2 * log_std_q)
    return 0.5 * (var_ratio + mean_term - 1.0 - 2 * (log_std_p - log_std_q)).sum(dim=-1)


@dataclass
class GaussianConfig(HeadConfig):
    """Diagonal Gaussian head (MLP mean, state-independent log-std) and its critic (``policy=gaussian``)."""

    family: str = "gaussian"
    """Head family; selects the head class."""
    hidden_sizes: List[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer widths of the mean network."""
    activation: str = "tanh"
    """Activation of the mean network."""
    log_std_init: float = 0.0
    """Initial log standard deviation of every action dimension."""
    orthogonal_init: bool = True
    """Orthogonal initialization (gain sqrt(2), output gain 0.01 for the mean: a near-zero initial mean)."""


class GaussianHead(PolicyHead):
    """``a ~ N(mu_theta(s), diag(exp(log_std))^2)``; hyperparameters: ``GaussianConfig``.

    Record: ``action [B, A]``, ``log_prob [B]``, ``mean [B, A]`` and ``log_std [B, A]`` (the old
    distribution, for the exact KL). ``log_ratio`` is the exact log-prob difference, ``[B, 1]``.
    """

    family = "gaussian"
    Config = GaussianConfig
    has_exact_kl = True
    has_entropy = True

    def __init__(self, obs_dim: int, act_dim: int, config: GaussianConfig | None = None, **hyperparameters: Any):
        super().__init__(obs_dim, act_dim, config, **hyperparameters)
        c = self.config
        self.mean_net = MLP(obs_dim, c.hidden_sizes, act_dim, c.activation, c.orthogonal_init, output_gain=0.01)
        self.log_std = nn.Parameter(torch.full((act_dim,), float(c.log_std_init)))

    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs [B, D]`` -> ``(mean [B, A], log_std [B, A])``."""
        mean = self.mean_net(obs)
        return mean, self.log_std.expand_as(mean)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, Record]:
        mean, log_std = self.distribution(obs)
        action = mean + torch.randn_like(mean) * torch.exp(log_std)
        log_prob = diagonal_gaussian_log_prob(action, mean, log_std)
        # clone: log_std is a view of the live parameter, and a record must not change with it
        return action, {"action": action, "log_prob": log_prob, "mean": mean, "log_std": log_std.clone()}

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        if deterministic:
            return self.mean_net(obs)
        return self.sample(obs)[0]

    def entropy(self, batch_size: int) -> torch.Tensor:
        """Differential entropy of the current distribution, ``[batch_size]`` (state-independent)."""
        return (self.log_std + 0.5 + _HALF_LOG_2PI).sum().expand(batch_size)

    def log_ratio(self, obs: torch.Tensor, record: Record) -> RatioTerms:
        mean, log_std = self.distribution(obs)
        log_prob = diagonal_gaussian_log_prob(record["action"], mean, log_std)
        return RatioTerms(
            log_ratio=(log_prob - record["log_prob"]).unsqueeze(-1),
            entropy=self.entropy(obs.shape[0]),
            diagnostics={"std": self.log_std.detach().exp().mean()},
        )

    def kl(self, obs: torch.Tensor, record: Record) -> torch.Tensor:
        mean, log_std = self.distribution(obs)
        return diagonal_gaussian_kl(record["mean"], record["log_std"], mean, log_std)

    def imitation_loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Negative log-likelihood of the expert actions, averaged over the batch."""
        mean, log_std = self.distribution(obs)
        return -diagonal_gaussian_log_prob(actions, mean, log_std).mean()
