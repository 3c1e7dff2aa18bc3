"""Network building blocks shared by heads and critics.

Their layers are ``genpol.onednn.OneDNNLinear``: ``nn.Linear`` itself (parameters, state dict, init),
whose wide layers run oneDNN's GEMM on one CPU thread for minibatches of 64 rows or more, where torch's
MKL takes a slower generic path on this project's CPUs (DPPO's 3 x 256 denoiser, forward and backward on
2560 rows: 21 ms against 32 ms with ``nn.Linear``). Narrow layers, small batches, two threads and other
devices run ``F.linear`` unchanged. Their Mish is ``genpol.mish.Mish`` (torch's CPU Mish is scalar).
"""

from __future__ import annotations

import math
from typing import Sequence

import torch
from torch import nn

from genpol.mish import Mish
from genpol.onednn import OneDNNLinear


ACTIVATIONS: dict[str, type[nn.Module]] = {
    "tanh": nn.Tanh,
    "relu": nn.ReLU,
    "elu": nn.ELU,
    "gelu": nn.GELU,
    "mish": Mish,
    "silu": nn.SiLU,
}


def activation_class(name: str) -> type[nn.Module]:
    if name not in ACTIVATIONS:
        raise ValueError(f"unknown activation '{name}'; choose one of {sorted(ACTIVATIONS)}")
    return ACTIVATIONS[name]


class MLP(nn.Sequential):
    """``in_dim -> hidden_sizes -> out_dim`` with an activation between layers (none after the last).

    With ``orthogonal_init`` the hidden layers get orthogonal weights with gain sqrt(2) and the
    output layer gain ``output_gain``, biases zero: the initialization of stable-baselines3 and of
    most PPO implementations (Andrychowicz et al. 2021 found it matters for on-policy learning).
    """

    def __init__(
        self,
        in_dim: int,
        hidden_sizes: Sequence[int],
        out_dim: int,
        activation: str = "tanh",
        orthogonal_init: bool = True,
        output_gain: float = 1.0,
    ):
        act = activation_class(activation)
        sizes = [in_dim, *hidden_sizes, out_dim]
        layers: list[nn.Module] = []
        for i, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
            linear = OneDNNLinear(fan_in, fan_out)
            is_output = i == len(sizes) - 2
            if orthogonal_init:
                nn.init.orthogonal_(linear.weight, gain=output_gain if is_output else math.sqrt(2))
                nn.init.zeros_(linear.bias)
            layers.append(linear)
            if not is_output:
                layers.append(act())
        super().__init__(*layers)


class ValueNetwork(nn.Module):
    """State-value critic ``V(s)``: ``obs [B, D] -> value [B]``.

    ``residual``: DPPO's critic (their ``CriticObs`` with ``residual_style=True``, every DPPO config): a
    ``ResidualMLP`` without an activation before its output layer, at torch's default initialization as
    theirs (``orthogonal_init`` applies to the plain MLP only). It needs an odd number of equal widths.
    """

    def __init__(
        self,
        obs_dim: int,
        hidden_sizes: Sequence[int] = (64, 64),
        activation: str = "tanh",
        orthogonal_init: bool = True,
        residual: bool = False,
    ):
        super().__init__()
        if residual and len(hidden_sizes) % 2 == 0:  # an input layer, then two-layer blocks: an odd count
            raise ValueError(f"a residual value network needs an odd number of hidden widths, got {list(hidden_sizes)}")
        if residual:
            self.net = ResidualMLP(obs_dim, hidden_sizes, 1, activation, output_activation=False)
        else:
            self.net = MLP(obs_dim, hidden_sizes, 1, activation, orthogonal_init, output_gain=1.0)

    def forward(self, obs: torch.Tensor) -> torch.Tensor:
        return self.net(obs).squeeze(-1)


def sinusoidal_time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """``t [...]`` in [0, 1] -> ``[..., dim]``: sin and cos of ``2^k * pi * t`` for k = 0 .. dim/2 - 1
    (low frequencies, because t only spans [0, 1]). Close to FPO's, not equal: FPO's code embeds
    cos and sin of ``2^k tau`` of tau = 1 - t, without pi (a departure, docs/fidelity.md)."""
    if dim % 2:
        raise ValueError(f"time embedding dimension must be even, got {dim}")
    frequencies = torch.pi * 2.0 ** torch.arange(dim // 2, device=t.device, dtype=t.dtype)
    angles = t.unsqueeze(-1) * frequencies
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


def fpo_time_embedding(t: torch.Tensor, dim: int) -> torch.Tensor:
    """``t [...]`` in [0, 1] -> ``[..., dim]``: FPO's and GoRL's code's embedding, cos and sin of
    ``2^k tau`` for k = 0 .. dim/2 - 1 of their time ``tau = 1 - t`` (bench/parity/fpo.py, gorl.py)."""
    if dim % 2:
        raise ValueError(f"time embedding dimension must be even, got {dim}")
    angles = (1.0 - t).unsqueeze(-1) * 2.0 ** torch.arange(dim // 2, device=t.device, dtype=t.dtype)
    return torch.cat([angles.cos(), angles.sin()], dim=-1)


TIME_EMBEDDINGS = {"genpol": sinusoidal_time_embedding, "fpo": fpo_time_embedding}
"""The flow networks' time embeddings by name (``policy.time_embedding``)."""


def dppo_time_embedding(timestep: torch.Tensor, dim: int) -> torch.Tensor:
    """``timestep [...]`` (the integer diffusion timestep, as a float) -> ``[..., dim]``: DPPO's code's
    embedding (Diffuser's), sin then cos of ``timestep * 10000^(-k / (dim/2 - 1))`` for k = 0 .. dim/2 - 1.
    Geometric frequencies from 1 down to 1e-4 suit an integer timestep; needs ``dim >= 4`` (the exponent
    divides by dim/2 - 1). The diffusion head's ``policy.time_embedding=dppo``."""
    if dim % 2 or dim < 4:
        raise ValueError(f"DPPO's time embedding needs an even dimension >= 4, got {dim}")
    half = dim // 2
    # the exponent as k * (-log(10000) / (half - 1)), then exp: their order of operations, so that the
    # frequencies round as theirs do (the parity harness compares in float64 to 1e-15)
    frequencies = torch.exp(torch.arange(half, device=timestep.device, dtype=timestep.dtype)
                            * -(math.log(10000.0) / (half - 1)))
    angles = timestep.unsqueeze(-1) * frequencies
    return torch.cat([angles.sin(), angles.cos()], dim=-1)


class ResidualMLP(nn.Module):
    """``in_dim -> width -> [residual blocks] -> out_dim``: DPPO's denoiser body.

    Each block is ``h + W2 act(W1 act(h))`` (pre-activation), so ``hidden_sizes=(512, 512, 512)``
    gives an input layer and one two-layer residual block of width 512. All hidden widths must match.
    ``output_activation=False`` drops the activation before the output layer, as DPPO's own
    ``ResidualMLP``; the output linear keeps its state-dict key (``output.1``) either way.
    """

    def __init__(self, in_dim: int, hidden_sizes: Sequence[int], out_dim: int, activation: str = "mish",
                 output_activation: bool = True):
        super().__init__()
        width = hidden_sizes[0]
        if any(size != width for size in hidden_sizes):
            raise ValueError(f"ResidualMLP needs equal hidden widths, got {list(hidden_sizes)}")
        act = activation_class(activation)
        self.input = OneDNNLinear(in_dim, width)
        self.blocks = nn.ModuleList(
            nn.Sequential(act(), OneDNNLinear(width, width), act(), OneDNNLinear(width, width))
            for _ in range(max((len(hidden_sizes) - 1) // 2, 0))
        )
        self.output = nn.Sequential(act() if output_activation else nn.Identity(), OneDNNLinear(width, out_dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        h = self.input(x)
        for block in self.blocks:
            h = h + block(h)
        return self.output(h)
