"""What the flow heads share: a conditional velocity network, ODE integrators, flow-matching losses,
the frozen snapshot of the rollout network and the Brownian regularizer that uses it.

Convention (rectified flow, as PolicyFlow and the FPO++ paper): t runs from 0 to 1,

    x_t = (1 - t) * x0 + t * x1,   x0 ~ N(0, I) the noise,   x1 the action,   velocity dx/dt = x1 - x0,

and sampling integrates dx/dt = v_theta(x, t, s) from t = 0 to 1. FPO's reference code uses the mirror
image (tau = 1 - t, tau = 1 is noise, target u = noise - action = -v); ``from_fpo_code_convention``
converts.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Callable, List, Sequence

import torch
from torch import nn

from genpol.errors import require
from genpol.heads.base import HeadConfig
from genpol.mish import Mish
from genpol.nets import MLP, TIME_EMBEDDINGS
from genpol.onednn import OneDNNLinear

VelocityFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x [B, A], t [B]) -> v [B, A]


def from_fpo_code_convention(tau: torch.Tensor, velocity: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """FPO code's ``(tau, u = noise - action)`` -> genpol's ``(t = 1 - tau, v = action - noise)``."""
    return 1.0 - tau, -velocity


@dataclass
class FlowConfig(HeadConfig):
    """The velocity network and ODE sampler of the flow heads (FPO's and PolicyFlow's configs extend it)."""

    hidden_sizes: List[int] = field(default_factory=lambda: [32, 32, 32, 32])
    """Hidden layer widths of the velocity network."""
    activation: str = "silu"
    """Activation of the velocity network."""
    time_embed_dim: int = 8
    """Size of the sinusoidal time embedding."""
    output_scale: float = 0.25
    """Multiplies the velocity network's output."""
    integration_steps: int = 10
    """ODE steps from noise to action."""
    integrator: str = "euler"
    """``euler`` or ``midpoint``."""
    time_embedding: str = "genpol"
    """``genpol`` (sin and cos of 2^k pi t) or ``fpo`` (FPO's code: cos and sin of 2^k (1 - t)); the
    authors' is needed to load or compare their weights (docs/fidelity.md)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.time_embedding in TIME_EMBEDDINGS, "policy.time_embedding", f"one of {tuple(TIME_EMBEDDINGS)}",
                self.time_embedding)
        require(self.time_embed_dim >= 2 and self.time_embed_dim % 2 == 0, "policy.time_embed_dim",
                 "an even number >= 2", self.time_embed_dim)
        require(self.output_scale > 0, "policy.output_scale", "> 0", self.output_scale)
        require(self.integration_steps >= 1, "policy.integration_steps", ">= 1", self.integration_steps)
        require(self.integrator in ("euler", "midpoint"), "policy.integrator", "euler or midpoint",
                 self.integrator)


class VelocityNetwork(nn.Module):
    """``v_theta(x_t, t, s)``: an MLP on [observation, x_t, time embedding], output times ``output_scale``.

    Args:
        obs_dim, act_dim: sizes.
        hidden_sizes, activation: the MLP (FPO: 4 x 32 SiLU).
        time_embed_dim: size of the sinusoidal embedding of t.
        time_embedding: its kind, ``genpol`` or ``fpo`` (``genpol.nets.TIME_EMBEDDINGS``).
        output_scale: multiplies the output (FPO uses 0.25, which keeps early updates small).
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int] = (64, 64, 64),
                 activation: str = "silu", time_embed_dim: int = 8, output_scale: float = 1.0,
                 time_embedding: str = "genpol"):
        super().__init__()
        self.time_embed_dim = time_embed_dim
        self.embed = TIME_EMBEDDINGS[time_embedding]
        self.output_scale = output_scale
        self.net = MLP(obs_dim + act_dim + time_embed_dim, hidden_sizes, act_dim, activation,
                       orthogonal_init=False)

    def forward(self, obs: torch.Tensor, x: torch.Tensor, t: torch.Tensor,
                t_embed: torch.Tensor | None = None) -> torch.Tensor:
        """``obs [B, D]``, ``x [B, A]``, ``t [B]`` -> velocity ``[B, A]``. ``t_embed [B, E]``, if given, is
        ``time_embedding(t)`` computed by the caller (see ``time_embedding``)."""
        if t_embed is None:
            t_embed = self.time_embedding(t)
        return self.output_scale * self.net(torch.cat([obs, x, t_embed], dim=-1))

    def time_embedding(self, t: torch.Tensor) -> torch.Tensor:
        """``t [...]`` -> ``[..., E]``. A head that evaluates the network at the same t in every minibatch
        step (FPO's recorded pairs) stores this once: in FPO's compiled minibatch step (512 samples x 8
        pairs) that cut the pointwise kernels from 2.46-3.23 to 2.00-2.09 ms (bench/fpo_profile.py, A/B in
        bench/results/fpo_tembed_ab.json)."""
        return self.embed(t, self.time_embed_dim)


class FourierVelocityNetwork(nn.Module):
    """``v_theta(x_t, t, s)`` built as the PolicyFlow port's (SUPERGUPPY0907/rsl_rl) velocity network, the
    PolicyFlow head's ``policy.velocity_network=port``:

        c = W2 mish(W1 [cos(2 pi f t), sin(2 pi f t)] + b1) + b2 + (W_s s + b_s)     (width ``embed_dim``)
        v = output_scale * MLP([x_t, c])

    ``f`` are ``embed_dim // 8`` frequencies drawn once from N(0, fourier_scale^2) at construction and kept
    in the state dict (a buffer, not trained); the observation enters only through the linear map W_s, added
    to the time features. Every layer has torch's default initialization, as the port's.

    Args:
        obs_dim, act_dim: sizes.
        hidden_sizes, activation: the MLP on ``[x_t, c]`` (no activation after its output layer).
        embed_dim: the width of ``c`` (the port's ``flow_embedding_dim``); at least 8.
        output_scale: multiplies the output (1 is the port's).
        fourier_scale: the std of the random frequencies (the port's 16).
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int] = (64, 64, 64),
                 activation: str = "elu", embed_dim: int = 64, output_scale: float = 1.0,
                 fourier_scale: float = 16.0):
        super().__init__()
        if embed_dim < 8:
            raise ValueError(f"the Fourier time features need embed_dim >= 8, got {embed_dim}")
        frequencies = embed_dim // 8
        self.output_scale = output_scale
        self.register_buffer("frequencies", torch.randn(frequencies) * fourier_scale)
        self.time_mlp = nn.Sequential(OneDNNLinear(2 * frequencies, embed_dim), Mish(),
                                      OneDNNLinear(embed_dim, embed_dim))
        self.obs_map = OneDNNLinear(obs_dim, embed_dim)
        self.net = MLP(act_dim + embed_dim, hidden_sizes, act_dim, activation, orthogonal_init=False)

    def forward(self, obs: torch.Tensor, x: torch.Tensor, t: torch.Tensor,
                t_embed: torch.Tensor | None = None) -> torch.Tensor:
        """``obs [B, D]``, ``x [B, A]``, ``t [B]`` -> velocity ``[B, A]``; ``t_embed``, if given, is
        ``time_embedding(t)`` (the weight-free Fourier features, before the time MLP)."""
        if t_embed is None:
            t_embed = self.time_embedding(t)
        condition = self.time_mlp(t_embed) + self.obs_map(obs)
        return self.output_scale * self.net(torch.cat([x, condition], dim=-1))

    def time_embedding(self, t: torch.Tensor) -> torch.Tensor:
        """``t [...]`` -> ``[..., 2 F]``: cos then sin of ``2 pi f t`` for the F fixed frequencies."""
        angles = t.unsqueeze(-1) * (2 * math.pi * self.frequencies)
        return torch.cat([angles.cos(), angles.sin()], dim=-1)


def integrate(velocity: VelocityFn, x0: torch.Tensor, steps: int, method: str = "euler") -> torch.Tensor:
    """Integrate ``dx/dt = velocity(x, t)`` from t = 0 to 1 on a uniform grid: ``x0 [B, A] -> x1 [B, A]``.

    ``euler``: x += dt v(x, t). ``midpoint`` (RK2, PolicyFlow's): x += dt v(x + dt/2 v(x, t), t + dt/2).
    """
    if method not in ("euler", "midpoint"):
        raise ValueError(f"unknown integrator '{method}'; choose euler or midpoint")
    dt = 1.0 / steps
    x = x0
    t = torch.zeros(x0.shape[0], device=x0.device, dtype=x0.dtype)
    for _ in range(steps):
        k1 = velocity(x, t)
        if method == "euler":
            x = x + dt * k1
        else:
            x = x + dt * velocity(x + 0.5 * dt * k1, t + 0.5 * dt)
        t = t + dt
    return x


def solver_grid(steps: int, method: str, device: torch.device | str = "cpu") -> torch.Tensor:
    """The times at which ``integrate`` evaluates the network: ``[steps]`` (euler) or ``[2 steps]``
    (midpoint: grid points and midpoints)."""
    grid = torch.arange(steps, device=device, dtype=torch.float32) / steps
    if method == "midpoint":
        grid = torch.cat([grid, grid + 0.5 / steps]).sort().values
    return grid


def velocity_at_interpolants(velocity_net: VelocityNetwork, obs: torch.Tensor, actions: torch.Tensor,
                             t: torch.Tensor, noise: torch.Tensor,
                             t_embed: torch.Tensor | None = None) -> tuple[torch.Tensor, torch.Tensor]:
    """Evaluate the network on the paths from ``noise`` to ``actions``.

    Args:
        obs: ``[B, D]``; actions: ``[B, A]``; t: ``[B, N]``; noise: ``[B, N, A]`` (N samples per action);
        t_embed: ``velocity_net.time_embedding(t)`` ``[B, N, E]``, or None to compute it here.

    Returns:
        ``x_t [B, N, A]`` = (1 - t) noise + t action, and ``v_theta(x_t, t, s) [B, N, A]``.
    """
    batch, samples = t.shape
    x_t = (1 - t).unsqueeze(-1) * noise + t.unsqueeze(-1) * actions.unsqueeze(1)
    flat_obs = obs.unsqueeze(1).expand(batch, samples, obs.shape[-1]).reshape(batch * samples, -1)
    flat_embed = None if t_embed is None else t_embed.reshape(batch * samples, -1)
    predicted = velocity_net(flat_obs, x_t.reshape(batch * samples, -1), t.reshape(-1), flat_embed).view_as(noise)
    return x_t, predicted


def flow_matching_error(predicted: torch.Tensor, actions: torch.Tensor, t: torch.Tensor, noise: torch.Tensor,
                        weighting: str = "velocity") -> torch.Tensor:
    """Per-sample conditional flow-matching loss of ``predicted [B, N, A]``, mean over action dims: ``[B, N]``.

    ``velocity`` - ||v - (a - noise)||^2; ``eps`` - the same times t^2, which is the error of the noise
    predicted from v (FPO's default ``u_but_supervise_as_eps``; zero at t = 0).
    """
    loss = (predicted - (actions.unsqueeze(1) - noise)).square().mean(dim=-1)
    if weighting == "eps":
        loss = t.square() * loss
    elif weighting != "velocity":
        raise ValueError(f"unknown flow-matching weighting '{weighting}'; choose velocity or eps")
    return loss


def flow_matching_loss(velocity_net: VelocityNetwork, obs: torch.Tensor, actions: torch.Tensor,
                       t: torch.Tensor, noise: torch.Tensor, weighting: str = "velocity",
                       t_embed: torch.Tensor | None = None) -> torch.Tensor:
    """Per-sample conditional flow-matching loss ``[B, N]``; shapes as in ``velocity_at_interpolants``,
    weighting as in ``flow_matching_error``."""
    _, predicted = velocity_at_interpolants(velocity_net, obs, actions, t, noise, t_embed)
    return flow_matching_error(predicted, actions, t, noise, weighting)


def brownian_regularizer(v_new: torch.Tensor, v_old: torch.Tensor, x_t: torch.Tensor, t: torch.Tensor,
                         beta: float = 1.0) -> torch.Tensor:
    """PolicyFlow's Brownian regularizer (ALGORITHMS.md 5.3), a scalar:

        MSE((1 - t) v_theta(x_t), beta (x_t - t v_snapshot(x_t))).

    ``x_t - t v_old`` is the snapshot's one-step estimate of the source x0; the fixed point is the
    expanding field v = beta x / (1 - t + beta t), whose positive divergence raises the entropy of
    the push-forward and so counters mode collapse. ``v_new, v_old, x_t``: ``[..., A]``; ``t``: the
    matching ``[...]``. ``v_old`` must come from the frozen snapshot (no gradient).
    """
    t = t.unsqueeze(-1)
    return ((1 - t) * v_new - beta * (x_t - t * v_old)).square().mean()


class VelocitySnapshot:
    """Mixin for flow heads with a ``velocity`` network: a frozen copy of it, taken by ``begin_update``
    (which the runner calls at the start of every update), so that the copy is the rollout policy's.

    The snapshot is a plain attribute, not a submodule: it is no parameter, is not trained and is not
    saved (loading weights refreshes it). Call ``init_snapshot()`` after creating ``self.velocity``.
    """

    velocity: VelocityNetwork

    def init_snapshot(self) -> None:
        snapshot = copy.deepcopy(self.velocity)
        for parameter in snapshot.parameters():
            parameter.requires_grad_(False)
        self.__dict__["snapshot"] = snapshot
        # loaded weights are the rollout policy's: the snapshot follows them
        self.register_load_state_dict_post_hook(lambda module, _: module.begin_update())

    def begin_update(self) -> None:
        """Copy the current (rollout) velocity network into the frozen snapshot, in place (its buffers too:
        the Fourier network's frequencies, which a loaded state dict replaces)."""
        with torch.no_grad():
            for target, source in zip(self.snapshot.parameters(), self.velocity.parameters()):
                target.copy_(source)
            for target, source in zip(self.snapshot.buffers(), self.velocity.buffers()):
                target.copy_(source)

    def _apply(self, fn, recurse=True):  # keep the unregistered snapshot on the head's device
        super()._apply(fn, recurse)
        self.__dict__["snapshot"] = self.snapshot._apply(fn, recurse)
        return self
