"""Learning-rate schedules: the KL-adaptive rule driven by the policy's own KL divergence, and a cosine
decay computed from a step count (so a resumed run continues it exactly, with no scheduler state)."""

from __future__ import annotations

import math
from typing import Any

import torch

from genpol.config.onpolicy import ADAPTIVE_LR_BOUNDS
from genpol.heads.base import PolicyHead, RatioTerms, Record
from genpol.updaters.losses import estimated_kl


def policy_kl(head: PolicyHead, obs: torch.Tensor, record: Record, terms: RatioTerms) -> torch.Tensor:
    """Mean KL(pi_old || pi_theta) over the batch: the closed form that came with ``terms`` (same
    random draws as the ratio), else the head's closed form, else the sample estimate
    ``mean((r - 1) - log r)`` of ``terms.log_ratio [B, U]``."""
    if terms.kl is not None:
        return terms.kl.mean()
    if head.has_exact_kl:
        return head.kl(obs, record).mean()
    return estimated_kl(terms.log_ratio)


def cosine_lr(lr: float, step: int, total_steps: int, min_lr: float = 0.0) -> float:
    """The learning rate before step ``step`` of a cosine decay from ``lr`` to ``min_lr`` over ``total_steps``
    (then ``min_lr``): ``min_lr + (lr - min_lr) (1 + cos(pi min(step, T) / T)) / 2``, torch's
    ``CosineAnnealingLR`` and optax's ``cosine_decay_schedule`` (``min_lr`` 0) in closed form."""
    progress = min(step, total_steps) / max(total_steps, 1)
    return min_lr + (lr - min_lr) * 0.5 * (1.0 + math.cos(math.pi * progress))


def set_lr(lr: float, *optimizers: torch.optim.Optimizer) -> None:
    """Set every parameter group of ``optimizers`` to ``lr`` (the schedules here are plain functions of
    a step count, so no scheduler object holds state that a checkpoint would have to carry)."""
    for optimizer in optimizers:
        for group in optimizer.param_groups:
            group["lr"] = lr


ADAPTIVE_LR_RULES = tuple(ADAPTIVE_LR_BOUNDS)
"""``learner.adaptive_lr_rule``: when the KL-adaptive rule steps and within what bounds (``adaptive_lr``)."""


class AdaptiveLR:
    """rsl_rl's KL-adaptive rule: divide the learning rate by ``factor`` when the KL exceeds
    ``2 * target_kl``, multiply it when the KL is below ``target_kl / 2``, and keep it within
    ``[min_lr, max_lr]``.

    ``every="minibatch"`` (rsl_rl's PPO, genpol's default): ``step`` after each minibatch with its KL.
    rsl_rl adjusts right before the minibatch's own step; here the new rate applies from the next
    minibatch on, so the compiled and eager update paths follow the same rule. ``every="epoch"``
    (the PolicyFlow port's ``AdaptiveKLScheduler``): the updater calls ``step`` once per epoch with the
    mean of that epoch's minibatch KLs.

    ``raise_at_zero_kl``: rsl_rl raises the rate only for ``0 < KL < target_kl / 2`` (a KL of exactly 0
    means no information, e.g. nothing moved yet); the PolicyFlow port raises it at 0 too.
    """

    def __init__(self, lr: float, target_kl: float = 0.01, factor: float = 1.5, min_lr: float = 1e-5,
                 max_lr: float = 1e-2, every: str = "minibatch", raise_at_zero_kl: bool = False):
        if target_kl <= 0 or factor <= 1:
            raise ValueError(f"AdaptiveLR needs target_kl > 0 and factor > 1, got {target_kl}, {factor}")
        if every not in ("minibatch", "epoch"):
            raise ValueError(f"AdaptiveLR steps every 'minibatch' or 'epoch', got {every!r}")
        self.lr = lr
        self.target_kl = target_kl
        self.factor = factor
        self.min_lr = min_lr
        self.max_lr = max_lr
        self.every = every
        self.raise_at_zero_kl = raise_at_zero_kl

    def step(self, kl: float) -> float:
        """Fold in one minibatch's KL (or one epoch's mean KL); return the learning rate to use next."""
        if kl > 2.0 * self.target_kl:
            self.lr = max(self.min_lr, self.lr / self.factor)
        elif kl < self.target_kl / 2.0 and (kl > 0.0 or self.raise_at_zero_kl):
            self.lr = min(self.max_lr, self.lr * self.factor)
        return self.lr

    def state_dict(self) -> dict[str, Any]:
        return {"lr": self.lr}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.lr = float(state["lr"])


def adaptive_lr(rule: str, lr: float, target_kl: float) -> AdaptiveLR:
    """The KL-adaptive schedule of ``learner.adaptive_lr_rule``:

    * ``per_minibatch``: after every minibatch on its KL, within [1e-5, 1e-2], raised only for a KL
      above 0 (rsl_rl's PPO; genpol's default);
    * ``per_epoch``: once per epoch on the mean of its minibatches' KLs, within [1e-6, 1e-2], raised at
      a KL of 0 too (the PolicyFlow port SUPERGUPPY0907/rsl_rl, ``AdaptiveKLScheduler``).
    """
    if rule not in ADAPTIVE_LR_BOUNDS:
        raise ValueError(f"adaptive_lr_rule must be one of {ADAPTIVE_LR_RULES}, got {rule!r}")
    min_lr, max_lr = ADAPTIVE_LR_BOUNDS[rule]
    if rule == "per_minibatch":
        return AdaptiveLR(lr, target_kl, min_lr=min_lr, max_lr=max_lr)
    return AdaptiveLR(lr, target_kl, min_lr=min_lr, max_lr=max_lr, every="epoch", raise_at_zero_kl=True)
