"""The continuous-time VP cosine noise schedule of MaxEntDP's diffusion policy, its DDPM grid, and the
log-likelihood estimate of a noise-prediction network (ALGORITHMS.md 14c).

Schedule. ``alpha_bar(t) = (cos((t + s) / (1 + s) pi / 2) / cos(s / (1 + s) pi / 2))^2`` with
``s = 0.008`` for continuous ``t`` in ``[t_min, t_max]`` = ``[1e-3, 0.9946]`` (DPM-Solver's
``NoiseScheduleVP('cosine')``, which ends at 0.9946 rather than 1 because ``alpha_bar(1) = 0``). The
network sees the log-SNR ``lambda = log(alpha_bar / (1 - alpha_bar))``, not ``t``. Written here rather
than taken from diffusers: its schedulers are discrete (``DDPMScheduler``'s ``squaredcos_cap_v2`` is
this curve sampled at integer steps and capped at beta 0.999), and none evaluates ``alpha_bar`` at the
continuous times that MaxEntDP's training draws. Every schedule value is computed in float64 (at
``t = 1e-3``, ``1 - alpha_bar`` is 4e-5, which float32 keeps to only three digits) and cast after.

DDPM grid. ``T`` steps on ``t_k = linspace(t_min, t_max, T + 1)``: step ``k`` (``T - 1`` the noisiest,
0 the last) goes from ``alpha_bar_k = alpha_bar(t_{k+1})`` to ``alpha_bar_prev_k = alpha_bar(t_k)``,
``beta_k = 1 - alpha_bar_k / alpha_bar_prev_k``.

Log-likelihood (``estimate_log_prob``). The I-MMSE identity (Kong et al. 2023, "Information-theoretic
diffusion") written in ``alpha_bar``:

    log p(a) = -(d / 2) log(2 pi e) + int_0^1 (d alpha_bar - E ||eps_hat(a_t) - xi||^2) / (2 alpha_bar (1 - alpha_bar)) d alpha_bar

with ``a_t = sqrt(alpha_bar) a + sqrt(1 - alpha_bar) xi``; for the exact denoiser of a density it
holds pointwise. MaxEntDP approximates the integral by a Riemann sum (right endpoints in t, left in
``alpha_bar``) on ``levels`` points spaced as a sampler of that many steps spaces them, and the
expectation by ``draws`` noise samples per level, with ``eps_hat`` re-derived from the clipped ``x0``
prediction, as its sampler does. The truncated, 20-point sum is biased for narrow densities (an
N(0.2, 0.1^2) action: -0.64 nats per dimension at 20 levels, ``tests/test_maxentdp.py``; averaged over
the density's own samples -0.41, and -1.09 at 5 levels). For N(0, I) the expected integrand is
``(d - ||a||^2) / 2``, constant in ``alpha_bar``, so any grid is exact up to the truncation
(``(d - ||a||^2) / 2 x 1.1e-4``), and its mean over actions, the entropy's integrand, vanishes.
"""

from __future__ import annotations

import math
from typing import Callable

import torch

COSINE_S = 0.008
"""The cosine schedule's offset s (improved DDPM's, DPM-Solver's)."""
T_MIN = 1e-3
"""Smallest diffusion time of training draws and of the sampling grid."""
T_MAX = 0.9946
"""Largest diffusion time: DPM-Solver's end of the cosine schedule (alpha_bar(1) = 0 diverges)."""

# eps_theta(obs [R, D], noisy actions [R, A], log-SNR [R, 1]) -> [R, A]
NoisePredictor = Callable[[torch.Tensor, torch.Tensor, torch.Tensor], torch.Tensor]


def alpha_bar(t: torch.Tensor, s: float = COSINE_S) -> torch.Tensor:
    """``alpha_bar(t)`` in float64 (whatever ``t``'s dtype), for ``t`` in [0, 1)."""
    t = t.to(torch.float64)
    log_alpha = torch.log(torch.cos((t + s) / (1 + s) * math.pi / 2)) - math.log(math.cos(s / (1 + s) * math.pi / 2))
    return torch.exp(2 * log_alpha)


def log_snr(alpha_bar_value: torch.Tensor) -> torch.Tensor:
    """``lambda = log(alpha_bar) - log(1 - alpha_bar)`` (``log1p`` keeps the low-noise end exact)."""
    return torch.log(alpha_bar_value) - torch.log1p(-alpha_bar_value)


def grid_alpha_bars(levels: int, t_min: float = T_MIN, t_max: float = T_MAX) -> tuple[torch.Tensor, torch.Tensor]:
    """``(alpha_bar [L], alpha_bar_prev [L])`` in float64 on ``t = linspace(t_min, t_max, L + 1)``:
    level ``k`` is ``alpha_bar(t_{k+1})`` and the one before it ``alpha_bar(t_k)``."""
    on_grid = alpha_bar(torch.linspace(t_min, t_max, levels + 1, dtype=torch.float64))
    return on_grid[1:], on_grid[:-1]


def predicted_noise_after_clip(noisy: torch.Tensor, eps: torch.Tensor, alpha_bar_value: torch.Tensor,
                               clip: bool) -> tuple[torch.Tensor, torch.Tensor]:
    """``(x0 [R, A], eps [R, A])``: the clean action predicted from ``eps`` at ``noisy``, clipped to the
    box when ``clip``, and the noise consistent with that x0 (``eps`` itself without clipping).
    ``alpha_bar_value``: ``[R, 1]`` or a scalar, in the dtype of ``noisy``."""
    root, root_rest = alpha_bar_value.sqrt(), (1 - alpha_bar_value).sqrt()
    x0 = (noisy - root_rest * eps) / root
    if not clip:
        return x0, eps
    x0 = x0.clamp(-1.0, 1.0)
    return x0, (noisy - root * x0) / root_rest


def estimate_log_prob(predict_noise: NoisePredictor, obs: torch.Tensor, actions: torch.Tensor, levels: int,
                      draws: int, clip: bool = True, chunk_rows: int = 65536, noise: torch.Tensor | None = None,
                      t_min: float = T_MIN, t_max: float = T_MAX) -> torch.Tensor:
    """MaxEntDP's estimate of ``log pi(a | s)``: ``obs [B, D]``, ``actions [B, A]`` -> ``[B]`` (see the
    module docstring).

    Args:
        predict_noise: the noise-prediction network (called without gradients by the caller's choice).
        levels: T_lp, the Riemann points on ``linspace(t_min, t_max, levels + 1)`` (MaxEntDP: 20).
        draws: N, the noise draws per level and action (MaxEntDP: 50).
        clip: re-derive the predicted noise from the x0 prediction clipped to [-1, 1] (MaxEntDP's sampler does).
        chunk_rows: the largest number of (action, draw, level) rows given to ``predict_noise`` at once;
            B N L rows are evaluated in chunks of at most this many, which bounds the network's activations
            (the noise ``[B, N, L, A]`` and the squared errors ``[B N L]`` are whole; under autograd every
            chunk's graph is kept: MaxEntDP calls it without gradients, for its backup).
        noise: ``[B, N, L, A]`` draws xi (None: from torch's global generator).
    """
    batch, act_dim = actions.shape
    device, dtype = actions.device, actions.dtype
    grid, grid_prev = grid_alpha_bars(levels, t_min, t_max)
    if noise is None:
        noise = torch.randn(batch, draws, levels, act_dim, device=device, dtype=dtype)
    if noise.shape != (batch, draws, levels, act_dim):
        raise ValueError(f"noise must be [{batch}, {draws}, {levels}, {act_dim}], got {list(noise.shape)}")
    level_alpha_bar = grid.to(device=device, dtype=dtype)
    level_log_snr = log_snr(grid).to(device=device, dtype=dtype)
    flat_noise = noise.reshape(-1, act_dim)
    squared_error = torch.empty(flat_noise.shape[0], device=device, dtype=dtype)
    rows_per_action = draws * levels
    for start in range(0, flat_noise.shape[0], max(int(chunk_rows), 1)):
        rows = torch.arange(start, min(start + int(chunk_rows), flat_noise.shape[0]), device=device)
        action_index, level_index = rows // rows_per_action, rows % levels
        xi = flat_noise[rows]
        abar = level_alpha_bar[level_index].unsqueeze(-1)
        noisy = abar.sqrt() * actions[action_index] + (1 - abar).sqrt() * xi
        eps = predict_noise(obs[action_index], noisy, level_log_snr[level_index].unsqueeze(-1))
        _, eps = predicted_noise_after_clip(noisy, eps, abar, clip)
        squared_error[rows] = (eps - xi).square().sum(dim=-1)
    mean_error = squared_error.view(batch, draws, levels).mean(dim=1)  # [B, L]
    weight = ((grid_prev - grid) / (2 * grid * (1 - grid))).to(device=device, dtype=dtype)  # d alpha_bar / (2 ab (1 - ab))
    integral = ((level_alpha_bar * act_dim - mean_error) * weight).sum(dim=-1)
    return integral - 0.5 * act_dim * math.log(2 * math.pi * math.e)


def log_prob_ceiling(levels: int, t_min: float = T_MIN, t_max: float = T_MAX) -> float:
    """The largest value ``estimate_log_prob`` can return per action dimension at ``levels`` points:
    ``sum_k w_k alpha_bar_k - log(2 pi e) / 2``, reached only where every squared error is 0 (a perfect
    denoiser of a point mass), since every weight ``w_k`` is positive. So ``-ceiling x |A|`` is the
    smallest entropy the estimate can report: -0.93 nats per dimension at 20 levels, +0.14 at 5, +0.92
    at 1. A temperature learned toward a target entropy below it can never reach it (MaxEntDP's
    ``ent_coef=auto``: alpha then falls every step until ``q / alpha`` overflows)."""
    grid, grid_prev = grid_alpha_bars(levels, t_min, t_max)
    weight = (grid_prev - grid) / (2 * grid * (1 - grid))
    return float((weight * grid).sum()) - 0.5 * math.log(2 * math.pi * math.e)
