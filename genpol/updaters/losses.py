"""Surrogate losses of on-policy updaters, as pure loss objects: tensors in, a loss and diagnostics out.

They see only a head's ``RatioTerms`` (log-ratio ``[B, U]``, optional per-unit advantage weights and
clip ranges, entropy, auxiliary loss), the advantages, and the critic's predictions; never an env,
a file, or a head's internals. That is why every head works with every updater.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import torch

from genpol.heads.base import RatioTerms


@dataclass
class LossOutput:
    """``total`` is what the optimizer minimizes; the rest are detached parts and diagnostics."""

    total: torch.Tensor
    policy: torch.Tensor
    value: torch.Tensor
    entropy: torch.Tensor
    diagnostics: dict[str, torch.Tensor] = field(default_factory=dict)


ADVANTAGE_STDS = {"unbiased": 1, "population": 0}
"""``learner.advantage_std`` -> the std's degrees-of-freedom correction: ``unbiased`` divides the squared
deviations by n - 1 (torch's ``std()``, stable-baselines3: genpol's default), ``population`` by n
(``jnp.std``, FPO's and GoRL's code). At n = 512 the two differ by a factor sqrt(512 / 511)."""


def normalize_advantages(advantages: torch.Tensor, std: str = "unbiased") -> torch.Tensor:
    """``(A - mean) / (std + 1e-8)`` over ``advantages [B]``, with the ``unbiased`` (stable-baselines3)
    or ``population`` (``jnp.std``) std (``ADVANTAGE_STDS``). One unbiased sample has no std (n - 1 = 0):
    it is returned as it is; the population std of one sample is 0, so it normalizes to 0 as in jnp."""
    correction = ADVANTAGE_STDS[std]
    if advantages.numel() <= correction:
        return advantages
    return (advantages - advantages.mean()) / (advantages.std(correction=correction) + 1e-8)


def estimated_kl(log_ratio: torch.Tensor) -> torch.Tensor:
    """``mean((r - 1) - log r)``: an unbiased, non-negative estimate of KL(pi_old || pi_theta) from
    samples of pi_old (Schulman's k3). Its Hessian at r = 1 is the empirical Fisher of ``log r``."""
    return ((log_ratio.exp() - 1) - log_ratio).mean()


def ratio_diagnostics(log_ratio: torch.Tensor, clip: torch.Tensor | float) -> dict[str, torch.Tensor]:
    """Detached ``approx_kl`` (the k3 estimator mean((r - 1) - log r)), ``clipfrac`` (fraction of
    ratios outside [1 - clip, 1 + clip]) and ``ratio_deviation`` (mean |r - 1|) of ``log_ratio [B, U]``."""
    with torch.no_grad():
        ratio = log_ratio.exp()
        return {
            "approx_kl": estimated_kl(log_ratio),
            "clipfrac": ((ratio - 1).abs() > clip).float().mean(),
            "ratio_deviation": (ratio - 1).abs().mean(),
        }


class PPOClipLoss:
    """PPO's clipped surrogate with value and entropy terms (Schulman et al. 2017).

    ``L = -mean(min(r A, clip(r, 1 - eps, 1 + eps) A)) + vf_coef * L_V - ent_coef * mean(H) + aux``

    over all B x U ratio units. Advantages are normalized per minibatch (before the per-unit
    weights are applied), as in stable-baselines3, by the unbiased std unless ``advantage_std`` is
    ``population`` (FPO's and GoRL's code, ``jnp.std``). The value loss is ``mean((R - V)^2)``; with
    ``clip_range_vf`` it is the elementwise max of the unclipped and the clipped error, with the
    clipped prediction ``V_old + clip(V - V_old, +-clip_range_vf)`` (OpenAI baselines, CleanRL).

    ``vf_coef`` multiplies that plain mean, as in SB3 (0.5), rsl_rl and PolicyFlow (1.0). DPPO, SPO
    and CleanRL halve the mean first (``c' * 0.5 * MSE``, c' = 0.5): their loss is vf_coef = 0.25 here.

    A head's per-unit clip (``RatioTerms.unit_clip``, DPPO's schedule over denoising steps) replaces
    ``clip_range`` unit by unit; built from a config, its last unit is ``clip_range`` itself
    (``TrainConfig.__post_init__``), so the updater's value stays the one source of the final clip.

    Subclasses (SPO, ASPO) override ``policy_loss`` only.
    """

    def __init__(
        self,
        clip_range: float = 0.2,
        ent_coef: float = 0.0,
        vf_coef: float = 0.5,
        clip_range_vf: float | None = None,
        normalize_advantage: bool = True,
        advantage_std: str = "unbiased",
    ):
        if advantage_std not in ADVANTAGE_STDS:
            raise ValueError(f"advantage_std must be one of {tuple(ADVANTAGE_STDS)}, got {advantage_std!r}")
        self.clip_range = clip_range
        self.ent_coef = ent_coef
        self.vf_coef = vf_coef
        self.clip_range_vf = clip_range_vf
        self.normalize_advantage = normalize_advantage
        self.advantage_std = advantage_std

    def clip_for(self, unit_clip: torch.Tensor | None) -> torch.Tensor | float:
        """The trust-region epsilon: the head's per-unit ``unit_clip [U]`` if given, else ``clip_range``."""
        return self.clip_range if unit_clip is None else unit_clip

    def policy_loss(
        self, log_ratio: torch.Tensor, advantages: torch.Tensor, unit_clip: torch.Tensor | None
    ) -> torch.Tensor:
        """Per-unit policy loss ``[B, U]`` from ``log_ratio [B, U]`` and unit ``advantages [B, U]``."""
        clip = self.clip_for(unit_clip)
        ratio = log_ratio.exp()
        clipped = torch.clamp(ratio, 1 - clip, 1 + clip)
        return -torch.min(ratio * advantages, clipped * advantages)

    def value_loss(self, values: torch.Tensor, returns: torch.Tensor, old_values: torch.Tensor) -> torch.Tensor:
        """Scalar critic loss from ``values``, ``returns``, ``old_values`` (all ``[B]``)."""
        error = (returns - values).square()
        if self.clip_range_vf is None:
            return error.mean()
        clipped = old_values + (values - old_values).clamp(-self.clip_range_vf, self.clip_range_vf)
        return torch.max(error, (returns - clipped).square()).mean()

    def __call__(
        self,
        terms: RatioTerms,
        advantages: torch.Tensor,
        values: torch.Tensor,
        returns: torch.Tensor,
        old_values: torch.Tensor,
    ) -> LossOutput:
        """``terms.log_ratio [B, U]``, ``advantages [B]``, ``values [B]`` (current critic),
        ``returns [B]``, ``old_values [B]`` (critic at collection) -> ``LossOutput``."""
        log_ratio = terms.log_ratio
        if self.normalize_advantage:
            advantages = normalize_advantages(advantages, self.advantage_std)
        unit_advantages = advantages.unsqueeze(-1).expand_as(log_ratio)
        if terms.unit_weights is not None:
            unit_advantages = unit_advantages * terms.unit_weights
        policy = self.policy_loss(log_ratio, unit_advantages, terms.unit_clip).mean()
        value = self.value_loss(values, returns, old_values)
        if terms.entropy is not None:
            entropy = terms.entropy.mean()
        elif self.ent_coef != 0.0:
            raise ValueError("ent_coef > 0 but the policy head provides no entropy; set ent_coef=0")
        else:
            entropy = torch.zeros((), device=log_ratio.device)
        total = policy + self.vf_coef * value - self.ent_coef * entropy
        if terms.aux_loss is not None:
            total = total + terms.aux_loss
        return LossOutput(
            total=total,
            policy=policy.detach(),
            value=value.detach(),
            entropy=entropy.detach(),
            diagnostics=ratio_diagnostics(log_ratio, self.trust_region(unit_advantages, terms.unit_clip)),
        )

    def trust_region(self, unit_advantages: torch.Tensor, unit_clip: torch.Tensor | None) -> torch.Tensor | float:
        """The epsilon each ratio unit is trained under (what ``clipfrac`` counts against)."""
        return self.clip_for(unit_clip)


def spo_objective(log_ratio: torch.Tensor, advantages: torch.Tensor, clip: torch.Tensor | float) -> torch.Tensor:
    """SPO's per-unit loss ``-(A r - |A| / (2 eps) (r - 1)^2)``, ``[B, U]``."""
    ratio = log_ratio.exp()
    return -(advantages * ratio - advantages.abs() / (2 * clip) * (ratio - 1).square())


class SPOLoss(PPOClipLoss):
    """Simple Policy Optimization (Xie et al., ICML 2025): a quadratic penalty instead of the clip.

    Per unit, ``-(A r - |A| / (2 eps) (r - 1)^2)``: concave in r with its optimum at
    ``r = 1 + sign(A) eps``, the PPO clip boundary, but with a gradient that never vanishes, so a
    ratio that overshoots is pulled back (PPO's clipped samples get no gradient at all).
    ``clipfrac`` still reports the fraction of ratios outside ``[1 - eps, 1 + eps]``.
    """

    def policy_loss(self, log_ratio: torch.Tensor, advantages: torch.Tensor,
                    unit_clip: torch.Tensor | None) -> torch.Tensor:
        return spo_objective(log_ratio, advantages, self.clip_for(unit_clip))


class ASPOLoss(PPOClipLoss):
    """FPO++'s asymmetric trust region: PPO-clip where A > 0, SPO's penalty where A <= 0.

    ``clip_range`` is the PPO epsilon of positive advantages, ``spo_clip_range`` the SPO epsilon of
    the others (both 0.01 in FPO++'s manipulation fine-tuning config). Under a head's per-unit clip
    schedule (whose last unit is ``clip_range``) the PPO half takes the schedule and the SPO half the
    same schedule scaled by ``spo_clip_range / clip_range``, so ``spo_clip_range`` still sets the SPO
    epsilon of the last unit rather than being replaced by the PPO one.
    """

    def __init__(self, clip_range: float = 0.2, spo_clip_range: float = 0.2, **kwargs: Any):
        super().__init__(clip_range=clip_range, **kwargs)
        self.spo_clip_range = spo_clip_range

    def spo_clip_for(self, unit_clip: torch.Tensor | None) -> torch.Tensor | float:
        return self.spo_clip_range if unit_clip is None else unit_clip * (self.spo_clip_range / self.clip_range)

    def policy_loss(self, log_ratio: torch.Tensor, advantages: torch.Tensor,
                    unit_clip: torch.Tensor | None) -> torch.Tensor:
        ppo = PPOClipLoss.policy_loss(self, log_ratio, advantages, unit_clip)
        return torch.where(advantages > 0, ppo, spo_objective(log_ratio, advantages, self.spo_clip_for(unit_clip)))

    def trust_region(self, unit_advantages: torch.Tensor, unit_clip: torch.Tensor | None) -> torch.Tensor:
        """PPO's epsilon where A > 0, SPO's elsewhere: each unit's ``clipfrac`` against its own region."""
        ppo, spo = self.clip_for(unit_clip), self.spo_clip_for(unit_clip)
        return torch.where(unit_advantages > 0, torch.as_tensor(ppo, dtype=unit_advantages.dtype),
                           torch.as_tensor(spo, dtype=unit_advantages.dtype))
