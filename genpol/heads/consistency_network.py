"""F_theta of the consistency head (``genpol.heads.consistency``) and its time input.

F_theta is an MLP on [noisy action, time MLP(embedding of the noise level), observation]. What the
noise level tau is turned into before the time MLP is ``policy.time_input``:

* ``genpol`` (default): sin/cos(2^k pi u) (``nets.sinusoidal_time_embedding``) of
  u = log(tau / eps) / log(tau_max / eps), which maps [eps, tau_max] onto [0, 1];
* ``ding_jin``: Ding & Jin's code (``agents/model.py`` ``MLP``): the transformer embedding, sin then cos of
  x 10000^(-k / (dim/2 - 1)), of the raw noise level tau in [0.002, 80] (their ``SinusoidalPosEmb`` is
  Diffuser's, as DPPO's: ``nets.dppo_time_embedding`` is that formula, so it is used here as well);
* ``cpql``: CPQL's code (``KarrasDenoiser.denoise``): the same embedding of 250 log(tau + 1e-44).

All three have the same parameters (the time MLP and the body), so weights move between them; only
the authors' inputs load or compare the authors' weights (docs/fidelity.md, bench/parity/consistency_ac.py).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from genpol.nets import MLP, activation_class, dppo_time_embedding, sinusoidal_time_embedding

TIME_INPUTS = ("genpol", "ding_jin", "cpql")
"""The values of ``policy.time_input``."""


class ConsistencyNetwork(nn.Module):
    """``F_theta(a_tau, tau, s)``: an MLP on [a_tau, time MLP(embedding(tau)), s]; the embedding is
    ``time_input``'s (module docstring)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int], activation: str, time_dim: int,
                 eps: float, tau_max: float, time_input: str = "genpol"):
        super().__init__()
        if time_input not in TIME_INPUTS:
            raise ValueError(f"unknown consistency time input '{time_input}'; choose one of {TIME_INPUTS}")
        self.time_dim, self.eps, self.log_range = time_dim, eps, math.log(tau_max / eps)
        self.time_input = time_input
        act = activation_class(activation)
        self.time_mlp = nn.Sequential(nn.Linear(time_dim, 2 * time_dim), act(), nn.Linear(2 * time_dim, time_dim))
        self.body = MLP(act_dim + time_dim + obs_dim, hidden_sizes, act_dim, activation, orthogonal_init=False)

    def time_embedding(self, tau: torch.Tensor) -> torch.Tensor:
        """``tau [B]`` -> ``[B, time_dim]``, the time MLP's input."""
        if self.time_input == "ding_jin":
            return dppo_time_embedding(tau, self.time_dim)
        if self.time_input == "cpql":  # CPQL's rescaled time 1000 * 0.25 log(sigma + 1e-44)
            return dppo_time_embedding(250.0 * torch.log(tau + 1e-44), self.time_dim)
        return sinusoidal_time_embedding((tau / self.eps).log() / self.log_range, self.time_dim)

    def forward(self, noisy: torch.Tensor, tau: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """``noisy [B, C]``, ``tau [B]``, ``obs [B, D]`` -> ``[B, C]`` (C: the chunk's size, A without chunks)."""
        embedding = self.time_mlp(self.time_embedding(tau))
        return self.body(torch.cat([noisy, embedding, obs], dim=-1))
