"""The denoiser of DPPO's diffusion head (``genpol.heads.diffusion``): eps_theta(x_k, k, s).

genpol's network and, as options of the head, the authors' (irom-lab/dppo's ``DiffusionMLP`` with
``residual_style=True``): their embedding of the timestep, no activation before the output layer, and a
time MLP that is always Mish. Each is a ``DiffusionConfig`` field; genpol's choices are the defaults
(docs/fidelity.md's departure rows, bench/parity/dppo.py).
"""

from __future__ import annotations

from typing import Sequence

import torch
from torch import nn

from genpol.nets import ResidualMLP, activation_class, dppo_time_embedding, sinusoidal_time_embedding


def genpol_denoiser_time_embedding(timestep: torch.Tensor, dim: int) -> torch.Tensor:
    """``timestep [...]`` -> ``[..., dim]``: sin and cos of ``2^k pi timestep / 1000``.
    ``sinusoidal_time_embedding`` expects [0, 1] inputs, and 1000 covers every schedule length in use."""
    return sinusoidal_time_embedding(timestep / 1000.0, dim)


DENOISER_TIME_EMBEDDINGS = {"genpol": genpol_denoiser_time_embedding, "dppo": dppo_time_embedding}
"""The denoiser's embeddings of the integer diffusion timestep by name (``policy.time_embedding``)."""


class Denoiser(nn.Module):
    """``eps_theta(x_k, k, s)``: residual MLP on [x_k, time embedding, observation] (DPPO's DiffusionMLP).

    Args:
        obs_dim, chunk_dim: sizes (``chunk_dim`` = horizon_steps x A).
        hidden_sizes, activation: the residual MLP (all widths equal).
        time_dim: size of the time embedding and of the time MLP's output.
        time_embedding: ``genpol`` or ``dppo`` (``DENOISER_TIME_EMBEDDINGS``).
        output_activation: an activation before the output layer (genpol's; DPPO's ``ResidualMLP`` has none).
        time_mlp_activation: the time MLP's activation; None: the denoiser's (genpol's), ``mish``: DPPO's.
    """

    def __init__(self, obs_dim: int, chunk_dim: int, hidden_sizes: Sequence[int], activation: str, time_dim: int,
                 time_embedding: str = "genpol", output_activation: bool = True,
                 time_mlp_activation: str | None = None):
        super().__init__()
        self.time_dim = time_dim
        self.embed = DENOISER_TIME_EMBEDDINGS[time_embedding]
        time_act = activation_class(time_mlp_activation or activation)
        self.time_mlp = nn.Sequential(nn.Linear(time_dim, 2 * time_dim), time_act(), nn.Linear(2 * time_dim, time_dim))
        self.body = ResidualMLP(chunk_dim + time_dim + obs_dim, hidden_sizes, chunk_dim, activation,
                                output_activation=output_activation)

    def time_embedding(self, timestep: torch.Tensor) -> torch.Tensor:
        """``timestep [B]`` (diffusion timestep, float) -> ``[B, time_dim]``, before the time MLP."""
        return self.embed(timestep, self.time_dim)

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """``x [B, C]``, ``timestep [B]`` (diffusion timestep, float), ``obs [B, D]`` -> ``eps [B, C]``."""
        embedding = self.time_mlp(self.time_embedding(timestep))
        return self.body(torch.cat([x, embedding, obs], dim=-1))
