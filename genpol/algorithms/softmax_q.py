"""The acting rule of Consistency-AC and Diffusion-QL (ALGORITHMS.md 8.3 and 9b) as a head.

Both papers act by drawing N = 50 candidate actions from the actor for the state and choosing one
of them with probability softmax over the candidates of min_i Q_target,i(s, a) (not the argmax).
The reference implementations (Diffusion-QL's ``sample_action``, copied by Consistency-AC) use the
**online** actor (not its EMA copy, which only serves the TD target) and the **target** critics'
minimum, and draw the candidate with ``torch.multinomial`` at evaluation too.

``SoftmaxQPolicy`` owns those parts (the actor head and the critics) so that a checkpoint's
``policy/`` rebuilds it with ``head_from_spec`` and ``python -m genpol.evaluate`` and ``load_policy``
act as the run's evaluation did (``genpol.algorithms.acting``). Deterministic acting keeps the softmax
draw, from a fixed seed for each state: the candidates and the choice are a function of the state
and the caller's RNG is left untouched; the argmax would be a different policy from the papers'.
"""

from __future__ import annotations

from typing import Any

import torch

from genpol.algorithms.acting import CandidatePolicy
from genpol.heads.base import Capability, HeadCapabilityError, PolicyHead
from genpol.qensemble import QEnsemble
from genpol.updaters.qgradient_losses import softmax_q_choice


def softmax_q_actions(obs: torch.Tensor, actor: PolicyHead, critic: QEnsemble, num_candidates: int) -> torch.Tensor:
    """``obs [B, D]`` -> ``actions [B, A]``: ``num_candidates`` actor samples per state from one batched
    ``actor.candidates`` call, all ``B n`` pairs valued by ``critic`` in one call, and candidate k of
    state b drawn with probability softmax_k(min_i Q_i(s_b, a_bk)) from torch's RNG."""
    batch = obs.shape[0]
    candidates = actor.candidates(obs, num_candidates)
    flat_obs = obs.repeat_interleave(num_candidates, dim=0)
    q = critic(flat_obs, candidates.reshape(batch * num_candidates, -1)).min(dim=0).values
    return softmax_q_choice(candidates, q.view(batch, num_candidates))


class SoftmaxQPolicy(CandidatePolicy):
    """Act by softmax-Q over ``num_candidates`` samples of ``actor``, valued by ``critic``'s minimum.

    ``QGradientActor.acting_head()`` builds it from its online head and target critics (shared, not
    copied), and acts with it during training too (``deterministic=False``, before epsilon-random
    exploration). ``deterministic=True`` draws from a fixed seed (``CandidatePolicy.act``).

    Args:
        obs_dim, act_dim: sizes.
        actor: a head with batched candidates, or its spec.
        critic: a ``QEnsemble`` or its kwargs.
        num_candidates: N, the samples per state (the papers: 50).
    """

    family = "softmax_q"
    description = "the Q-gradient learner's softmax-Q policy"
    trained_part = "actor"

    def __init__(self, obs_dim: int, act_dim: int, actor: PolicyHead | dict[str, Any],
                 critic: QEnsemble | dict[str, Any], num_candidates: int = 50):
        super().__init__(obs_dim, act_dim)
        actor = self.sampling_head(actor)
        critic = self.critic_module(critic)
        if Capability.CANDIDATES not in actor.capabilities:
            raise HeadCapabilityError(f"the softmax_q acting head draws batched candidates: the {actor.family} "
                                      "head has none")
        if (actor.obs_dim, actor.act_dim) != (obs_dim, act_dim) or critic.act_dim != act_dim:
            raise ValueError(f"softmax_q of obs_dim {obs_dim}, act_dim {act_dim}: the actor has "
                             f"({actor.obs_dim}, {actor.act_dim}), the critic act_dim {critic.act_dim}")
        if num_candidates < 1:
            raise ValueError(f"num_candidates must be >= 1, got {num_candidates}")
        self.actor, self.critic = actor, critic
        self.num_candidates = num_candidates
        self.spec_kwargs = {"actor": actor.spec(), "critic": self.critic_spec(), "num_candidates": num_candidates}

    def spec(self) -> dict[str, Any]:
        """As ``PolicyHead.spec``, with the actor's spec as it is now (``change_options`` may have changed
        it since this policy was built)."""
        self.spec_kwargs["actor"] = self.actor.spec()
        return super().spec()

    def choose(self, obs: torch.Tensor, deterministic: bool) -> torch.Tensor:
        return softmax_q_actions(obs, self.actor, self.critic, self.num_candidates)
