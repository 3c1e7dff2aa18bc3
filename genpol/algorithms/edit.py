"""EXPO's edit policy and on-the-fly policy (Dong, Li, Sadigh, Finn 2025; ALGORITHMS.md 7.1).

EXPO never takes a Q-gradient through its expressive base policy. It acts through two small pieces:

* the **edit policy** ``EditPolicy``: a tanh-Gaussian on ``s ⊕ a`` whose sample ``u ∈ (-1, 1)^d``
  nudges a given action, ``a' = clip(a + beta u, -1, 1)`` with ``beta = 0.05``. It is trained SAC-style
  on *replay* actions (``edit_loss``), with ``log pi_e(a' | s, a) = log pi(u | s, a) - d log beta``
  (the density of ``a + beta u`` before the clip; the clip only binds at the action bounds);
* the **on-the-fly policy** ``on_the_fly_actions``: N base samples per state, the first ``n_edit`` of
  them also edited, and the candidate with the highest subset-minimum of the (target) critics wins,
  for every state of a batch in one call (no Python loop per state).

``OnTheFlyPolicy`` bundles a base head, an edit policy and a Q-ensemble into the head that EXPO acts
and is evaluated with (a ``genpol.algorithms.acting.CandidatePolicy``, as Consistency-AC's softmax-Q head). It is registered as the ``expo`` family so that a checkpoint's ``policy/``
(its spec and weights: base, edit policy *and* critics) rebuilds it with ``head_from_spec``, and
``python -m genpol.evaluate`` and ``load_policy`` act with argmax-Q like the training run did. It
only acts: it has no capabilities, so no learner can be asked to train it.
"""

from __future__ import annotations

import math
from typing import Any, Sequence

import torch
from torch import nn

from genpol.algorithms.acting import CandidatePolicy
from genpol.heads.base import PolicyHead
from genpol.heads.tanh_gaussian import TanhGaussianHead
from genpol.qensemble import QEnsemble
from genpol.updaters.sac_losses import actor_loss

EDIT_SCALE = 0.05  # EXPO's edit_action_scale beta


class EditPolicy(nn.Module):
    """``u ~ pi_e(. | s, a)``: a tanh-Gaussian (``TanhGaussianHead``) on ``concat(s, a)``.

    Args:
        obs_dim, act_dim: sizes of s and a (the edit has ``act_dim`` dims too).
        hidden_sizes, activation: the MLP (EXPO's scripts: 256 x 3, ReLU).
        edit_scale: beta, the largest change an edit makes per action dimension (EXPO: 0.05).
        init, log_prob_epsilon: as ``TanhGaussianHead`` (jaxrl / EXPO: xavier and the exact log-det).
        clip: clip ``a + beta u`` to [-1, 1] (genpol before 2026-12-02, and a spec saved then); EXPO's
            code leaves it unclipped where it is ranked, valued and trained on (``learner.clip_edits``).
    """

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int] = (256, 256, 256),
                 activation: str = "relu", edit_scale: float = EDIT_SCALE, init: str = "xavier_uniform",
                 log_prob_epsilon: float = 0.0, clip: bool = True):
        super().__init__()
        if not edit_scale > 0:
            raise ValueError(f"edit_scale must be > 0, got {edit_scale}")
        self.obs_dim, self.act_dim, self.edit_scale, self.clip = obs_dim, act_dim, edit_scale, clip
        self.spec_kwargs = {"hidden_sizes": list(hidden_sizes), "activation": activation,
                            "edit_scale": edit_scale, "init": init, "log_prob_epsilon": log_prob_epsilon,
                            "clip": clip}
        self.gaussian = TanhGaussianHead(obs_dim + act_dim, act_dim, hidden_sizes=hidden_sizes, activation=activation,
                                         log_prob_epsilon=log_prob_epsilon, init=init)

    def edit(self, obs: torch.Tensor, actions: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
        """``a' = a + beta u``, clipped to [-1, 1] when ``clip``; shapes ``[..., A]`` (``obs`` unused, kept
        for symmetry)."""
        edited = actions + self.edit_scale * u
        return edited.clamp(-1.0, 1.0) if self.clip else edited

    def rsample_edit(self, obs: torch.Tensor, actions: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs [B, D]``, ``actions [B, A]`` -> ``(edited [B, A], log pi_e(edited) [B])``, both
        differentiable in the edit policy's parameters: ``log pi(u) - d log beta``."""
        u, log_prob_u = self.gaussian.rsample_log_prob(torch.cat([obs, actions], dim=-1))
        return self.edit(obs, actions, u), log_prob_u - self.act_dim * math.log(self.edit_scale)

    def edit_candidates(self, obs: torch.Tensor, actions: torch.Tensor, deterministic: bool = False) -> torch.Tensor:
        """``obs [B, D]``, ``actions [B, n, A]`` -> edited ``[B, n, A]`` (one sample each; the mean edit
        ``tanh(mu)`` when ``deterministic``)."""
        batch, n, act_dim = actions.shape
        flat_obs = obs.unsqueeze(1).expand(batch, n, obs.shape[-1]).reshape(batch * n, -1)
        flat_actions = actions.reshape(batch * n, act_dim)
        u = self.gaussian.act(torch.cat([flat_obs, flat_actions], dim=-1), deterministic=deterministic)
        return self.edit(flat_obs, flat_actions, u).view(batch, n, act_dim)


def edit_loss(edit_log_prob: torch.Tensor, q_edited: torch.Tensor, alpha: torch.Tensor) -> torch.Tensor:
    """EXPO's edit loss ``mean_b(alpha log pi_e(a'_b) - mean_i Q_i(s_b, a'_b))``: ``edit_log_prob [B]``
    (with the ``- d log beta`` term), ``q_edited [E, B]`` from the current critics, ``alpha`` scalar
    (detached). SAC's actor loss with the ensemble mean (RLPD's reduction)."""
    return actor_loss(edit_log_prob, q_edited, alpha, q_reduction="mean")


def select_by_q(obs: torch.Tensor, candidates: torch.Tensor, critic: QEnsemble,
                subset_heads: torch.Tensor | None, value_heads: torch.Tensor | None = None
                ) -> tuple[torch.Tensor, torch.Tensor]:
    """The argmax over candidates of the subset-minimum of ``critic``, and the winner's value.

    Only the heads a minimum needs are evaluated (EXPO's code, ``subsample_ensemble`` before
    ``compute_q``): the ranking subset on all ``B K`` (state, candidate) pairs, the valuing subset on
    the ``B`` winners. With 2 of 10 critics that is a fifth of the ranking's GEMMs.

    Args:
        obs: ``[B, D]``; candidates: ``[B, K, A]``.
        critic: the ensemble.
        subset_heads: ``[M]`` head indices whose minimum ranks the candidates (None: all heads).
        value_heads: ``[M]`` head indices whose minimum values the winner (None: the ranking subset's,
            so the value is the maximum of the very minimum that ranked). EXPO's TD target draws a
            second subset independently of the first.
    Returns:
        ``(best [B, A], q_best [B])``: the winning candidate of each state and its value.
    """
    batch, num, act_dim = candidates.shape
    flat_obs = obs.unsqueeze(1).expand(batch, num, obs.shape[-1]).reshape(batch * num, -1)
    ranking = critic(flat_obs, candidates.reshape(batch * num, act_dim), heads=subset_heads).view(-1, batch, num)
    q_best, index = ranking.min(dim=0).values.max(dim=1)
    best = candidates.gather(1, index.view(batch, 1, 1).expand(batch, 1, act_dim)).squeeze(1)
    if value_heads is not None:
        q_best = critic(obs, best, heads=value_heads).min(dim=0).values
    return best, q_best


def on_the_fly_actions(obs: torch.Tensor, base: PolicyHead, edit: EditPolicy, critic: QEnsemble,
                       num_samples: int, n_edit: int, subset_heads: torch.Tensor | None,
                       deterministic_edit: bool = False, value_heads: torch.Tensor | None = None
                       ) -> tuple[torch.Tensor, torch.Tensor]:
    """EXPO's on-the-fly policy for a batch of states ``obs [B, D]``: ``num_samples`` base candidates
    per state (one batched ``base.candidates`` call), the first ``n_edit`` of them edited, and the
    argmax of the subset-min Q over all ``num_samples + n_edit``. Returns ``(actions [B, A], q [B])``,
    ``q`` the winner's value by ``value_heads`` (see ``select_by_q``).
    Base samples are clipped to [-1, 1] first (a Gaussian base's are unbounded): the critics value, and
    the env executes, actions in the box."""
    base_actions = base.candidates(obs, num_samples).clamp(-1.0, 1.0)
    candidates = base_actions
    if n_edit > 0:
        edited = edit.edit_candidates(obs, base_actions[:, :n_edit], deterministic_edit)
        candidates = torch.cat([base_actions, edited], dim=1)
    return select_by_q(obs, candidates, critic, subset_heads, value_heads)


class OnTheFlyPolicy(CandidatePolicy):
    """The acting half of EXPO as one head: ``act(s)`` is ``on_the_fly_actions`` with ``base`` (the EMA
    base policy during training), the edit policy and ``critic`` (the target critics).

    ``deterministic=True`` edits with the mean edit and draws the base candidates and the subset of
    heads from a fixed seed, reseeded for each state (the caller's RNG untouched; ``CandidatePolicy.act``),
    so the action is a function of the state, as the diffusion head's deterministic action is; otherwise
    the draws use torch's RNG (``+experiment=expo`` evaluates so, as the authors' ``eval_actions``).

    Args:
        obs_dim, act_dim: sizes.
        base, edit, critic: modules, or (rebuilding from a spec) their specs: ``base`` a head spec,
            ``edit`` ``EditPolicy`` kwargs, ``critic`` ``QEnsemble`` kwargs.
        num_samples, n_edit, num_min_qs: candidates drawn, of them edited, heads in the subset-min.
    """

    family = "expo"
    description = "EXPO's on-the-fly policy"
    trained_part = "base policy"

    def __init__(self, obs_dim: int, act_dim: int, base: PolicyHead | dict[str, Any],
                 edit: EditPolicy | dict[str, Any], critic: QEnsemble | dict[str, Any], num_samples: int = 8,
                 n_edit: int = 8, num_min_qs: int = 2):
        super().__init__(obs_dim, act_dim)
        base = self.sampling_head(base)
        if isinstance(edit, dict):
            edit = EditPolicy(obs_dim, act_dim, **edit)
        critic = self.critic_module(critic)
        if num_samples < 1 or not 0 <= n_edit <= num_samples:
            raise ValueError(f"need num_samples >= 1 and n_edit in [0, num_samples], got {num_samples}, {n_edit}")
        if not 1 <= num_min_qs <= critic.num_qs:
            raise ValueError(f"num_min_qs must be in [1, {critic.num_qs}], got {num_min_qs}")
        self.base, self.edit, self.critic = base, edit, critic
        self.num_samples, self.n_edit, self.num_min_qs = num_samples, n_edit, num_min_qs
        self.spec_kwargs = {"base": base.spec(), "edit": dict(edit.spec_kwargs), "critic": self.critic_spec(),
                            "num_samples": num_samples, "n_edit": n_edit, "num_min_qs": num_min_qs}

    def subset_heads(self) -> torch.Tensor | None:
        """A fresh subset of ``num_min_qs`` heads from torch's RNG (None: all heads)."""
        if self.num_min_qs == self.critic.num_qs:
            return None
        heads = torch.randperm(self.critic.num_qs)[:self.num_min_qs]
        return heads.to(self.critic.weights[0].device)

    def choose(self, obs: torch.Tensor, deterministic: bool) -> torch.Tensor:
        """The subset of heads is drawn before the candidates (the RNG order of every EXPO release)."""
        subset_heads = self.subset_heads()
        chosen = on_the_fly_actions(obs, self.base, self.edit, self.critic, self.num_samples, self.n_edit,
                                    subset_heads, deterministic_edit=deterministic)[0]
        return chosen.clamp(-1.0, 1.0)  # unclipped edits (EXPO's code) are ranked as they are, executed in the box
