"""What the flow heads share: a conditional velocity network, ODE integrators, flow-matching losses.

Convention (rectified flow, as PolicyFlow and the FPO++ paper): t runs from 0 to 1,

    x_t = (1 - t) * x0 + t * x1,   x0 ~ N(0, I) the noise,   x1 the action,   velocity dx/dt = x1 - x0,

and sampling integrates dx/dt = v_theta(x, t, s) from t = 0 to 1. FPO's reference code uses the mirror
image (tau = 1 - t, tau = 1 is noise, target u = noise - action = -v); ``from_fpo_code_convention``
converts.
"""

from __future__ import annotations

from typing import Callable, Sequence

import torch
from torch import nn

from genpol.nets import MLP, sinusoidal_time_embedding

VelocityFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x [B, A], t [B]) -> v [B, A]


def from_fpo_code_convention(tau: torch.Tensor, velocity: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """FPO code's ``(tau, u = noise - action)`` -> genpol's ``(t = 1 - tau, v = action - noise)``."""
    return 1.0 - tau, -velocity


class VelocityNetwork(nn.Module):
    """``v_theta(x_t, t, s)``: an MLP on [observation, x_t, time embedding], output times ``output_scale``.

    Args:
        obs_dim, act_dim: sizes.
        hidden_sizes, activation: the MLP (FPO: 4 x 32 SiLU).
        time_embed_dim: size of the sinusoidal embedding of t.
        output_scale: multiplies the output (FPO uses 0.25, which keeps early updates small).
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int] = (64, 64, 64),
                 activation: str = "silu", time_embed_dim: int = 8, output_scale: float = 1.0):
        super().__init__()
        self.time_embed_dim = time_embed_dim
        self.output_scale = output_scale
        self.net = MLP(obs_dim + act_dim + time_embed_dim, hidden_sizes, act_dim, activation,
                       orthogonal_init=False)

    def forward(self, obs: torch.Tensor, x: torch.Tensor, t: torch.Tensor) -> torch.Tensor:
        """``obs [B, D]``, ``x [B, A]``, ``t [B]`` -> velocity ``[B, A]``."""
        features = torch.cat([obs, x, sinusoidal_time_embedding(t, self.time_embed_dim)], dim=-1)
        return self.output_scale * self.net(features)


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


def flow_matching_loss(velocity_net: VelocityNetwork, obs: torch.Tensor, actions: torch.Tensor,
                       t: torch.Tensor, noise: torch.Tensor, weighting: str = "velocity") -> torch.Tensor:
    """Per-sample conditional flow-matching loss, mean over action dims.

    Args:
        obs: ``[B, D]``; actions: ``[B, A]``; t: ``[B, N]``; noise: ``[B, N, A]`` (N samples per action).
        weighting: ``velocity`` - ||v - (a - noise)||^2; ``eps`` - the same times t^2, which is the
            error of the noise predicted from v (FPO's default ``u_but_supervise_as_eps``; zero at t = 0).

    Returns:
        ``[B, N]``.
    """
    batch, samples = t.shape
    x_t = (1 - t).unsqueeze(-1) * noise + t.unsqueeze(-1) * actions.unsqueeze(1)
    flat_obs = obs.unsqueeze(1).expand(batch, samples, obs.shape[-1]).reshape(batch * samples, -1)
    predicted = velocity_net(flat_obs, x_t.reshape(batch * samples, -1), t.reshape(-1)).view_as(noise)
    loss = (predicted - (actions.unsqueeze(1) - noise)).square().mean(dim=-1)
    if weighting == "eps":
        loss = t.square() * loss
    elif weighting != "velocity":
        raise ValueError(f"unknown flow-matching weighting '{weighting}'; choose velocity or eps")
    return loss
