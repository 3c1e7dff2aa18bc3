"""Losses of SAC (stable-baselines3) and RLPD as pure functions: tensors in, a scalar loss out.

No modules, no optimizers, no I/O: the SAC algorithm owns its actor, Q-ensemble (forward ->
``q [E, B]``), target networks and ``log_alpha``, and calls these in SB3's order (ALGORITHMS.md
12a): temperature loss, TD target with the alpha read *before* the temperature step, critic loss,
actor loss with the just-updated critics. The two published variants differ as follows:

================  =========================================  =========================================
term              stable-baselines3 SAC                      RLPD (ikostrikov/rlpd)
================  =========================================  =========================================
TD target         min over 2 target heads, entropy backup    min over a random subset of 2 of 10
                                                             heads; backup optional (``None``)
critic loss       ``0.5 * sum_i mean_b (Q_i - y)^2``         ``mean_{i, b} (Q_i - y)^2``
                  (``reduction="sb3"``)                      (``reduction="mean"``)
actor loss        ``mean(alpha log pi - min_i Q_i)``         ``mean(alpha log pi - mean_i Q_i)``
temperature       ``-mean(log_alpha (log pi + H_target))``   ``alpha (H - H_target)``, H = -mean log pi
                  (``form="log_alpha"``)                     (``form="alpha"``)
================  =========================================  =========================================

For E = 2 heads, ``"sb3"`` is exactly E / 2 = 1 times ``"mean"``; for RLPD's 10 it is 5 times: the same
fixed points, and under Adam, which divides the scale out of its step, the same updates but through Adam's
epsilon (not a learning-rate scale, as it would be under SGD).

Alpha (the entropy coefficient) is detached wherever it multiplies a term of another network's loss,
so a caller cannot leak critic or actor gradients into ``log_alpha`` by passing ``log_alpha.exp()``.
"""

from __future__ import annotations

from typing import Literal

import torch

CriticReduction = Literal["sb3", "mean", "sum"]
QReduction = Literal["min", "mean"]
TemperatureForm = Literal["log_alpha", "alpha"]


def td_target(
    rewards: torch.Tensor,
    dones: torch.Tensor,
    next_q: torch.Tensor,
    next_log_prob: torch.Tensor | None,
    alpha: torch.Tensor,
    gamma: float | torch.Tensor,
) -> torch.Tensor:
    """Soft TD target ``y = r + gamma (1 - done) (next_q - alpha next_log_prob)``, ``[B]``, detached.

    Args:
        rewards: ``[B]``.
        dones: ``[B]``, 1.0 on a true termination only (a time-limit end keeps 0 and bootstraps).
        next_q: ``[B]`` target-critic value of ``(s', a' ~ pi(s'))``, already reduced over heads
            (``q.min(0).values`` for SB3, ``genpol.qensemble.subset_min`` for RLPD).
        next_log_prob: ``[B]`` ``log pi(a' | s')``, or None for no entropy backup (RLPD's
            ``backup_entropy=False``).
        alpha: scalar tensor (shape ``[]`` or ``[1]``), the entropy coefficient; treated as a constant.
        gamma: discount, or ``[B]`` per-sample discounts (n-step returns).
    """
    soft_next_q = next_q if next_log_prob is None else next_q - alpha.detach() * next_log_prob
    # SB3's association: r + ((1 - done) * gamma) * soft_next_q
    return (rewards + (1 - dones) * gamma * soft_next_q).detach()


def critic_loss(q: torch.Tensor, target: torch.Tensor, reduction: CriticReduction = "sb3") -> torch.Tensor:
    """Scalar TD regression loss of an ensemble, ``q [E, B]`` against ``target [B]``.

    ``"sb3"``: ``0.5 * sum_i MSE(Q_i, y)`` (SB3's ``SAC.train``), whose gradient on each head is half
    the per-head MSE's. ``"mean"``: ``mean_{i, b} (Q_i - y)^2`` (RLPD's ``critic_loss``). ``"sum"``:
    ``sum_i MSE(Q_i, y)`` (Diffusion-QL's and the consistency references' ``mse_loss(q1, y) + mse_loss(q2, y)``)."""
    squared_error = (q - target.detach().unsqueeze(0)).square()
    if reduction == "sb3":
        return 0.5 * squared_error.mean(dim=1).sum()
    if reduction == "mean":
        return squared_error.mean()
    if reduction == "sum":
        return squared_error.mean(dim=1).sum()
    raise ValueError(f"critic reduction must be 'sb3', 'mean' or 'sum', got '{reduction}'")


def actor_loss(
    log_prob: torch.Tensor, q_pi: torch.Tensor, alpha: torch.Tensor, q_reduction: QReduction = "min"
) -> torch.Tensor:
    """Scalar ``mean_b(alpha log pi(a_b | s_b) - reduce_i Q_i(s_b, a_b))`` for reparameterized
    ``a ~ pi``: ``log_prob [B]``, ``q_pi [E, B]``, ``alpha`` scalar (detached here).

    ``q_reduction="min"`` is SB3's (clipped double-Q), ``"mean"`` RLPD's (over all E heads; the
    pessimism lives in its subset-min TD target instead)."""
    if q_reduction == "min":
        reduced_q = q_pi.min(dim=0).values
    elif q_reduction == "mean":
        reduced_q = q_pi.mean(dim=0)
    else:
        raise ValueError(f"actor q_reduction must be 'min' or 'mean', got '{q_reduction}'")
    return (alpha.detach() * log_prob - reduced_q).mean()


def temperature_loss(
    log_alpha: torch.Tensor, log_prob: torch.Tensor, target_entropy: float, form: TemperatureForm = "log_alpha"
) -> torch.Tensor:
    """Scalar loss for the entropy temperature: ``log_alpha`` (the learned parameter, ``[]`` or
    ``[1]``), ``log_prob [B]`` of fresh policy samples (detached here), ``target_entropy`` H_target
    (SB3: -|A|, RLPD: -|A| / 2).

    ``"log_alpha"``: ``-mean(log_alpha (log pi + H_target))`` (SB3; the gradient in log_alpha is
    ``H - H_target``). ``"alpha"``: ``alpha (H - H_target)``, ``H = -mean(log pi)`` (RLPD; the
    gradient in log_alpha is ``alpha (H - H_target)``: the same sign, scaled by alpha). Both lower
    alpha when the policy's entropy is above the target."""
    log_prob = log_prob.detach()
    if form == "log_alpha":
        return -(log_alpha * (log_prob + target_entropy)).mean()
    if form == "alpha":
        entropy = -log_prob.mean()
        return (log_alpha.exp() * (entropy - target_entropy)).mean()
    raise ValueError(f"temperature form must be 'log_alpha' or 'alpha', got '{form}'")


def critic_diagnostics(q: torch.Tensor, target: torch.Tensor) -> dict[str, torch.Tensor]:
    """Detached scalars of one critic step: ``q [E, B]`` (critic on buffer actions), ``target [B]``.

    ``q_mean``, ``q_ensemble_std`` (mean over states of the std across heads: ensemble
    disagreement), ``target_mean`` and ``td_error_abs`` (mean |Q_i - y|)."""
    with torch.no_grad():
        ensemble_std = q.std(dim=0, unbiased=False).mean() if q.shape[0] > 1 else torch.zeros((), device=q.device)
        return {
            "q_mean": q.mean(),
            "q_ensemble_std": ensemble_std,
            "target_mean": target.mean(),
            "td_error_abs": (q - target.unsqueeze(0)).abs().mean(),
        }


def sac_diagnostics(
    q: torch.Tensor, target: torch.Tensor, log_prob: torch.Tensor, alpha: torch.Tensor
) -> dict[str, torch.Tensor]:
    """Detached scalars to log for one SAC step: ``critic_diagnostics(q, target)``, ``entropy``
    (-mean log pi over ``log_prob [B]``, the actor's fresh samples: the estimate the temperature
    tracks) and ``alpha`` (scalar)."""
    with torch.no_grad():
        return {**critic_diagnostics(q, target), "entropy": -log_prob.mean(), "alpha": alpha.detach().reshape(())}
