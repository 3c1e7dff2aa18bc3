"""Losses and action selection of the Q-gradient actors (Diffusion-QL, Consistency-AC; ALGORITHMS.md
8.3 and 9b) as pure functions: tensors in, a scalar loss or a choice out.

``genpol.algorithms.qgradient.QGradientActor`` (twin critics, an EMA actor for the TD target, the
replay) calls them; each is tested against an independent computation:

* ``normalized_q_loss``: Diffusion-QL's L_Q = -mean_b Q_i(s, a_theta) / mean_b |Q_j(s, a_theta)|.detach(),
  with (i, j) one ordered pair of distinct critics drawn at random (the reference flips a coin
  between (1, 2) and (2, 1));
* ``q_gradient_actor_loss``: L = L_BC + eta L_Q (Consistency-AC: L_BC is the CT loss; online from
  scratch eta alone, with ``bc_loss`` None);
* ``softmax_q_choice``: evaluation's action, one of n candidates drawn with probability softmax(Q)
  (not the argmax).
"""

from __future__ import annotations

import torch


def normalized_q_loss(q: torch.Tensor, generator: torch.Generator | None = None) -> torch.Tensor:
    """``q [E, B]`` (E >= 2 critics at the actor's actions, differentiable) -> scalar L_Q.

    The normalizer mean_b |Q_j| is detached, so the loss scale is independent of the reward scale
    while its gradient is that of -Q_i / const."""
    if q.dim() != 2 or q.shape[0] < 2:
        raise ValueError(f"normalized_q_loss needs q of shape [E >= 2, B], got {list(q.shape)}")
    pair = torch.randperm(q.shape[0], generator=generator)[:2].tolist()
    return -q[pair[0]].mean() / q[pair[1]].abs().mean().detach()


def q_gradient_actor_loss(q: torch.Tensor, eta: float, bc_loss: torch.Tensor | None = None,
                          generator: torch.Generator | None = None) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
    """``L_BC + eta L_Q`` and its named terms; ``bc_loss`` None (online from scratch) is L_Q alone."""
    q_term = normalized_q_loss(q, generator)
    loss = eta * q_term if bc_loss is None else bc_loss + eta * q_term
    named = {"q_loss": q_term.detach(), "actor": loss.detach()}
    if bc_loss is not None:
        named["bc_loss"] = bc_loss.detach()
    return loss, named


def softmax_q_choice(candidates: torch.Tensor, q: torch.Tensor, generator: torch.Generator | None = None
                     ) -> torch.Tensor:
    """``candidates [B, n, A]`` with their values ``q [B, n]`` -> ``actions [B, A]``: candidate k of
    state b with probability softmax_k(q[b])."""
    if q.shape != candidates.shape[:2]:
        raise ValueError(f"q {list(q.shape)} must be [B, n] of candidates {list(candidates.shape)}")
    index = torch.multinomial(torch.softmax(q, dim=-1), 1, generator=generator).squeeze(-1)
    return candidates[torch.arange(candidates.shape[0], device=candidates.device), index]
