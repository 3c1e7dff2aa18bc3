"""Action chunking, for the heads that predict several actions at once (DPPO's diffusion head).

A chunked head predicts ``horizon_steps`` actions per observation and the env executes the first
``act_steps`` of them (``genpol.envs.chunking``), so the head's ``act_dim`` is ``act_steps * A`` and its
``imitation_loss`` takes targets of ``horizon_steps * A``. Heads without chunks are not
``ChunkedActions``: one action per step, imitation targets of one action.
"""

from __future__ import annotations

from genpol.heads.base import PolicyHead


class ChunkedActions:
    """Mixin of heads that act in chunks; they set both attributes in ``__init__``."""

    horizon_steps: int  # actions per imitation target: imitation_loss takes [B, horizon_steps * A]
    act_steps: int  # actions per env step: act_dim = act_steps * A


def imitation_horizon(head: PolicyHead) -> int:
    """Actions per imitation target of ``head`` (1 unless it acts in chunks)."""
    return head.horizon_steps if isinstance(head, ChunkedActions) else 1
