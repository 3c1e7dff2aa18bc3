"""MaxEntDP's Q-weighted noise estimation (QNE; ALGORITHMS.md 14c) as pure functions: tensors in, tensors
out, the random draws passed in so that a test can recompute every step.

For a replay action a, a time t and its ``alpha_bar``, the noisy action is
``a_t = sqrt(alpha_bar) a + sqrt(1 - alpha_bar) xi``. As a function of the clean action a0 the forward
kernel ``N(a_t; sqrt(alpha_bar) a0, (1 - alpha_bar) I)`` is proportional to
``N(a0; a_t / sqrt(alpha_bar), (1 - alpha_bar) / alpha_bar I)``, so K candidates
``a0_k = a_t / sqrt(alpha_bar) + sqrt((1 - alpha_bar) / alpha_bar) e_k`` with ``e_k`` a standard normal
truncated to keep ``a0_k`` in the box ``[-1, 1]^A`` are draws of the posterior under a uniform prior on
the box. Weighting them by ``softmax_k(Q(s, a0_k) / alpha)`` importance-samples the posterior under the
prior ``exp(Q / alpha)``, and the noise that maps ``a0_k`` to ``a_t`` is ``-e_k``, so the target of the
noise network is ``eps* = -sum_k w_k e_k`` (self-normalized importance sampling of E[eps | a_t]).

PyTorch has no per-element truncated normal; ``truncated_standard_normal`` inverts the CDF in float64,
in the lower tail of whichever side of 0 the interval lies, where the CDF keeps its precision. The CDF is
``erfc(-x / sqrt 2) / 2``, not ``torch.special.ndtr``: on the CPU (torch 2.13), ``ndtr`` rounds 1 + erf even
in float64, so it is 2 % off at -8 and 0 below -8.3, where ``erfc`` stays exact to ~-37 (``Phi(-9)`` =
1.1e-19, scipy's value); the inverse is ``torch.special.ndtri``, exact that deep.
"""

from __future__ import annotations

import math

import torch


def standard_normal_cdf(x: torch.Tensor) -> torch.Tensor:
    """``Phi(x)`` with its lower tail exact (see the module docstring)."""
    return 0.5 * torch.special.erfc(-x / math.sqrt(2.0))


def truncated_standard_normal(lower: torch.Tensor, upper: torch.Tensor, uniform: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF draws of N(0, 1) truncated to ``[lower, upper]`` (elementwise, broadcast), in float64:
    ``Phi^-1(Phi(l) + u (Phi(h) - Phi(l)))`` for ``uniform`` u in [0, 1).

    An interval above 0 is drawn as the negative of its mirror image below 0, so that ``Phi`` is never
    evaluated where it rounds to 1. An interval beyond ``Phi``'s float64 range (more than ~37 std into a
    tail; MaxEntDP's bounds never get there, since the bound nearer 0 lies within |xi| of it) takes its
    bound nearer 0, which is where a clipped normal, the authors' fallback for JAX's NaNs, puts it."""
    lower, upper, uniform = (value.to(torch.float64) for value in (lower, upper, uniform))
    mirrored = lower > 0
    low = torch.where(mirrored, -upper, lower)
    high = torch.where(mirrored, -lower, upper)
    cdf_low, cdf_high = standard_normal_cdf(low), standard_normal_cdf(high)
    draw = torch.special.ndtri(cdf_low + uniform * (cdf_high - cdf_low))
    draw = torch.where(mirrored, -draw, draw)
    # u = 0 gives ndtri(0) = -inf where Phi(l) rounds to 0, and rounding can put a draw a hair outside
    # its interval: both are the interval's edge, which the clamp returns
    draw = torch.minimum(torch.maximum(draw, lower), upper)
    nearest = torch.clamp(torch.zeros_like(draw), lower, upper)
    return torch.where(~torch.isnan(draw) & (cdf_high > cdf_low), draw, nearest)


def qne_candidates(noisy: torch.Tensor, alpha_bar: torch.Tensor, uniform: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(clean [B, K, A], noise [B, K, A])``: the K candidates ``a0_k`` in the box and their truncated
    normals ``e_k`` (see the module docstring), in ``noisy``'s dtype, computed in float64.

    Args:
        noisy: ``a_t [B, A]``.
        alpha_bar: ``[B, 1]``.
        uniform: ``[B, K, A]`` uniforms in [0, 1) that the inverse CDF turns into ``e_k``.
    """
    a_t = noisy.to(torch.float64).unsqueeze(1)
    abar = alpha_bar.to(torch.float64).unsqueeze(1)
    scale = ((1 - abar) / abar).sqrt()  # std of the posterior of a0, per unit of e
    center = a_t / abar.sqrt()
    lower, upper = (-1 - center) / scale, (1 - center) / scale
    noise = truncated_standard_normal(lower, upper, uniform)
    clean = (center + scale * noise).clamp(-1.0, 1.0)
    return clean.to(noisy.dtype), noise.to(noisy.dtype)


def qne_noise_target(noise: torch.Tensor, q: torch.Tensor, alpha: torch.Tensor | float
                     ) -> tuple[torch.Tensor, torch.Tensor]:
    """``(eps* [B, A], weights [B, K])``: ``weights = softmax_k(q / alpha)`` and ``eps* = -sum_k w_k e_k``
    for ``noise`` e ``[B, K, A]`` and the candidates' values ``q [B, K]``."""
    weights = torch.softmax(q / alpha, dim=1)
    return -(weights.unsqueeze(-1) * noise).sum(dim=1), weights


def effective_sample_size(weights: torch.Tensor) -> torch.Tensor:
    """``1 / sum_k w_k^2`` per row of normalized ``weights [B, K]``: K for uniform weights, 1 when one
    candidate takes all the weight (a small temperature's degenerate softmax)."""
    return 1.0 / weights.square().sum(dim=1)


def noise_matching_loss(predicted: torch.Tensor, target: torch.Tensor) -> torch.Tensor:
    """``mean_{b, a} (eps_theta - eps*)^2`` with the target detached."""
    return (predicted - target.detach()).square().mean()
