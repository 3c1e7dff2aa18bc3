"""The consistency head's formulas (``genpol.heads.consistency``): the parameterization's coefficients,
the Karras noise levels and consistency training's N(k) schedule, the target network's EMA rule, the
log-normal pair weights and the CT distances. Plain functions of tensors and counts, each tested
against its formula (tests/test_consistency.py, tests/test_consistency_options.py)."""

from __future__ import annotations

import math

import torch


def consistency_coefficients(tau: torch.Tensor, sigma_data: float = 0.5, eps: float = 0.002
                             ) -> tuple[torch.Tensor, torch.Tensor]:
    """``tau [...]`` -> ``(c_skip [...], c_out [...])`` of the consistency parameterization."""
    shifted = tau - eps
    c_skip = sigma_data**2 / (shifted.square() + sigma_data**2)
    c_out = sigma_data * shifted / (tau.square() + sigma_data**2).sqrt()
    return c_skip, c_out


def karras_boundaries(num_scales: int, eps: float = 0.002, tau_max: float = 80.0, rho: float = 7.0,
                      dtype: torch.dtype = torch.float32) -> torch.Tensor:
    """The ``num_scales`` noise levels ``[N]`` of Karras et al., ascending from ``eps`` to ``tau_max``,
    computed in float64 and returned in ``dtype``."""
    if num_scales < 2:
        raise ValueError(f"Karras boundaries need at least 2 scales, got {num_scales}")
    ramp = torch.arange(num_scales, dtype=torch.float64) / (num_scales - 1)
    inverse = eps ** (1 / rho) + ramp * (tau_max ** (1 / rho) - eps ** (1 / rho))
    return (inverse**rho).to(dtype)


def ct_num_scales(step: int, total_steps: int, initial: int = 2, final: int = 150) -> int:
    """N(k) of consistency training: ceil(sqrt(k / K ((s1 + 1)^2 - s0^2) + s0^2) - 1) + 1, from s0 at
    k = 0 to s1 + 1 at k = K (Song et al. 2023, appendix C; the step is clamped to K)."""
    fraction = min(step, total_steps) / max(total_steps, 1)
    return math.ceil(math.sqrt(fraction * ((final + 1) ** 2 - initial**2) + initial**2) - 1) + 1


def ema_update_due(steps: int, every: int, start: int, warmup: str) -> str | None:
    """What an EMA copy of a network does once the online one has taken ``steps`` updates:
    ``"copy"``, ``"average"`` (lerp by 1 - decay) or None (nothing).

    ``warmup="copy"`` (genpol): due when steps % every == 0; a copy before ``start``, the average from it.
    ``warmup="hold"`` (Diffusion-QL's and Ding & Jin's ``EMA`` / ``step_ema``): their counter is checked
    before it is incremented, so it is steps - 1 here; due when (steps - 1) % every == 0, and nothing at
    all before ``start``: the copy keeps its initial weights until the update after the start-th."""
    if warmup == "copy":
        if steps % every:
            return None
        return "copy" if steps < start else "average"
    if warmup != "hold":
        raise ValueError(f"EMA warmup must be 'copy' or 'hold', got '{warmup}'")
    their_step = steps - 1
    if their_step < start or their_step % every:
        return None
    return "average"


def lognormal_level_weights(boundaries: torch.Tensor, mean: float = -1.1, std: float = 2.0) -> torch.Tensor:
    """``[N]`` boundaries -> ``[N - 1]`` probabilities of the pairs (tau_n, tau_{n+1}) under improved CT's
    discretized log-normal (Song & Dhariwal 2023, eq. 11): p(n) proportional to
    erf((log tau_{n+1} - mean) / (sqrt(2) std)) - erf((log tau_n - mean) / (sqrt(2) std))."""
    cdf = torch.erf((boundaries.double().log() - mean) / (math.sqrt(2.0) * std))
    weights = cdf[1:] - cdf[:-1]
    return (weights / weights.sum()).float()


def pseudo_huber(difference: torch.Tensor) -> torch.Tensor:
    """``[B, A]`` -> ``[B]``: sqrt(||d||^2 + c^2) - c with c = 0.00054 sqrt(A) (improved CT)."""
    c = 0.00054 * math.sqrt(difference.shape[-1])
    return (difference.square().sum(dim=-1) + c * c).sqrt() - c


def pseudo_huber_per_dim(difference: torch.Tensor) -> torch.Tensor:
    """``[B, A]`` -> ``[B]``: the mean over action dims of sqrt(d_i^2 + c^2) - c, c = 0.00054 sqrt(A)
    (Ding & Jin's code's ``improved_CT`` distance; equal to ``pseudo_huber`` only for A = 1)."""
    c = 0.00054 * math.sqrt(difference.shape[-1])
    return ((difference.square() + c * c).sqrt() - c).mean(dim=-1)


CT_DISTANCES = {"l2": lambda difference: difference.square().mean(dim=-1), "pseudo_huber": pseudo_huber,
                "pseudo_huber_per_dim": pseudo_huber_per_dim}
"""``policy.ct_distance``: ``[B, A]`` differences -> ``[B]`` per-sample distances."""


