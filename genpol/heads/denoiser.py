"""The denoiser of DPPO's diffusion head (``genpol.heads.diffusion``): eps_theta(x_k, k, s).

genpol's network and, as options of the head, the authors' (irom-lab/dppo's ``DiffusionMLP`` with
``residual_style=True``): their embedding of the timestep, no activation before the output layer, and a
time MLP that is always Mish. Each is a ``DiffusionConfig`` field; genpol's choices are the defaults
(docs/fidelity.md's departure rows, bench/parity/dppo.py).

``ExpoDenoiser`` (``policy.denoiser=expo``) is EXPO's base network instead (their ``DDPM`` module, from
IDQL): learned Fourier features of the integer timestep through a two-layer time MLP, then a LayerNorm
ResNet on [x_k, s, time features] (bench/parity/expo.py compares its imitation step with theirs).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from genpol.nets import ResidualMLP, activation_class, dppo_time_embedding, sinusoidal_time_embedding
from genpol.onednn import OneDNNLinear

DENOISERS = ("residual_mlp", "expo")
"""The values of ``policy.denoiser``: genpol's (DPPO's) residual MLP, or EXPO's LayerNorm ResNet."""


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


# ---------------------------------------------------------------------------- EXPO's base network
FOURIER_KERNEL_STD = 0.2
"""Standard deviation of the initial frequencies of ``FourierTimeFeatures`` (EXPO's, from IDQL)."""
LAYER_NORM_EPS = 1e-6
"""Epsilon of ``ExpoResidualBlock``'s LayerNorm: flax's default, which EXPO's network uses."""


def xavier_linear(fan_in: int, fan_out: int) -> nn.Linear:
    """A linear layer at flax's ``xavier_uniform`` kernel and zero bias (EXPO's ``default_init``)."""
    linear = OneDNNLinear(fan_in, fan_out)
    nn.init.xavier_uniform_(linear.weight)
    nn.init.zeros_(linear.bias)
    return linear


def lecun_linear(fan_in: int, fan_out: int) -> nn.Linear:
    """A linear layer at flax's default ``nn.Dense`` init: lecun normal, truncated at 2 std (the std
    divided by 0.8796, the std of a unit normal truncated there, so the kernel's variance is 1 / fan_in),
    zero bias. EXPO's residual blocks leave their Dense layers at this default."""
    linear = OneDNNLinear(fan_in, fan_out)
    std = math.sqrt(1.0 / fan_in) / 0.87962566103423978
    nn.init.trunc_normal_(linear.weight, std=std, a=-2 * std, b=2 * std)
    nn.init.zeros_(linear.bias)
    return linear


class FourierTimeFeatures(nn.Module):
    """Learned Fourier features of the timestep: ``t [B]`` -> ``[B, dim]`` = [cos(2 pi t w), sin(2 pi t w)]
    with ``w [dim / 2]`` trained (initialized N(0, 0.2^2)); t is the integer timestep, not rescaled."""

    def __init__(self, dim: int):
        super().__init__()
        # [dim / 2, 1]: the layout of their flax kernel, so that a weight map is a plain copy
        self.kernel = nn.Parameter(FOURIER_KERNEL_STD * torch.randn(dim // 2, 1))

    def forward(self, timestep: torch.Tensor) -> torch.Tensor:
        phase = 2 * math.pi * timestep.unsqueeze(-1) @ self.kernel.T  # [B, dim / 2]
        return torch.cat([phase.cos(), phase.sin()], dim=-1)


class ExpoResidualBlock(nn.Module):
    """``h + W_2 act(W_1 LayerNorm(h))`` with a 4x wider inner layer: ``[B, width] -> [B, width]``."""

    def __init__(self, width: int, activation: str):
        super().__init__()
        self.norm = nn.LayerNorm(width, eps=LAYER_NORM_EPS)
        self.expand = lecun_linear(width, 4 * width)
        self.act = activation_class(activation)()
        self.project = lecun_linear(4 * width, width)

    def forward(self, hidden: torch.Tensor) -> torch.Tensor:
        return hidden + self.project(self.act(self.expand(self.norm(hidden))))


class ExpoDenoiser(nn.Module):
    """EXPO's eps_theta(x_k, k, s) (``policy.denoiser=expo``).

    ``time_mlp(FourierTimeFeatures(k))`` (Linear to 2 time_dim, act, Linear to 2 time_dim) is concatenated
    after x_k and s; an input layer to ``width``, ``num_blocks`` ``ExpoResidualBlock``s, act, and an output
    layer. EXPO's: time_dim 128, width 256, 3 blocks, swish (``silu``).

    Args:
        obs_dim, chunk_dim: sizes.
        width, num_blocks: the ResNet (``policy.hidden_sizes`` = [width] * num_blocks).
        activation: of the time MLP, the blocks and before the output layer.
        time_dim: Fourier features (time_dim / 2 frequencies); the time MLP outputs 2 time_dim.
    """

    def __init__(self, obs_dim: int, chunk_dim: int, width: int, num_blocks: int, activation: str, time_dim: int):
        super().__init__()
        act = activation_class(activation)
        self.time_features = FourierTimeFeatures(time_dim)
        self.time_mlp = nn.Sequential(xavier_linear(time_dim, 2 * time_dim), act(),
                                      xavier_linear(2 * time_dim, 2 * time_dim))
        self.input = xavier_linear(chunk_dim + obs_dim + 2 * time_dim, width)
        self.blocks = nn.ModuleList(ExpoResidualBlock(width, activation) for _ in range(num_blocks))
        self.act = act()
        self.output = xavier_linear(width, chunk_dim)

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        """``x [B, C]``, ``timestep [B]`` (integer timestep, float), ``obs [B, D]`` -> ``eps [B, C]``."""
        time = self.time_mlp(self.time_features(timestep.to(self.time_features.kernel.dtype)))
        hidden = self.input(torch.cat([x, obs, time], dim=-1))
        for block in self.blocks:
            hidden = block(hidden)
        return self.output(self.act(hidden))
