"""Acting-only heads: a generative head's candidates, chosen among by critics.

Some learners act through more than their head: EXPO picks the best of base samples and their edits
by argmax-Q (``genpol.algorithms.edit.OnTheFlyPolicy``), Consistency-AC and Diffusion-QL draw one of 50
samples by softmax-Q (``genpol.algorithms.softmax_q.SoftmaxQPolicy``). A checkpoint's ``policy/`` holds
one head (its spec and weights), so such a learner hands the runner an ``acting_head()`` that owns
the sampling head(s) *and* the critics; registered in ``HEADS``, it is rebuilt by ``head_from_spec``
and ``python -m genpol.evaluate`` and ``load_policy`` act exactly as the run's evaluation did.

``CandidatePolicy`` is what these heads share:

* the critics, a ``QEnsemble`` given as a module (the learner's, shared, not copied) or as its
  kwargs (rebuilding from a spec), with ``critic_spec`` the kwargs that rebuild it;
* ``act``: ``choose(obs, deterministic)`` under torch's RNG, or, when ``deterministic``, inside a
  forked RNG reseeded with 0 for each state, so that a state's action is a function of that state
  alone (as the diffusion head's deterministic action is) and the caller's RNG stream is left
  untouched. One reseeded stream for the whole batch made a state's candidates depend on the batch
  size and its place in it: a softmax-Q policy's Hopper return read 51 at 1 env, 228 at 10 and 115 at
  50 (docs/fidelity.md). The heads draw their candidates from the global RNG, so each state is its own
  call: B calls per step, which only evaluation pays;
* no capabilities: it only acts (the learner trains its parts), and the on-policy and imitation
  methods raise ``HeadCapabilityError`` naming the head.
"""

from __future__ import annotations

import abc
from typing import Any

import torch

from genpol.heads.base import HeadCapabilityError, PolicyHead, RatioTerms, Record
from genpol.qensemble import QEnsemble


class CandidatePolicy(PolicyHead):
    """Base of acting-only heads that choose among candidate actions with ``critic``.

    Subclasses set ``family``, ``description`` (for error messages, e.g. "EXPO's on-the-fly policy")
    and ``trained_part`` (what imitation trains instead, e.g. "base policy"); their constructor sets
    ``self.critic`` (``critic_module`` turns a spec into one) next to their sampling head(s), in the
    order their state dict lists them, fills ``spec_kwargs`` (``critic_spec()`` under ``"critic"``)
    and they implement ``choose``.
    """

    capabilities = frozenset()  # acts only: the learner trains the parts, no learner trains the bundle
    description = "an acting-only policy"
    trained_part = "sampling head"

    critic: QEnsemble

    def critic_module(self, critic: QEnsemble | dict[str, Any]) -> QEnsemble:
        """``critic`` itself (shared with the learner, not copied), or the ensemble its kwargs build."""
        return critic if isinstance(critic, QEnsemble) else QEnsemble(self.obs_dim, self.act_dim, **critic)

    @staticmethod
    def sampling_head(head: PolicyHead | dict[str, Any]) -> PolicyHead:
        """``head`` itself, or the head its spec rebuilds."""
        if isinstance(head, PolicyHead):
            return head
        from genpol.heads import head_from_spec  # the registry imports this module

        return head_from_spec(head)

    def critic_spec(self) -> dict[str, Any]:
        """The ``QEnsemble`` kwargs that rebuild ``self.critic``'s architecture (weights come with the
        state dict; the init scheme does not matter once they are loaded)."""
        critic = self.critic
        return {"num_qs": critic.num_qs, "hidden_sizes": list(critic.hidden_sizes), "activation": critic.activation_name,
                "layer_norm": critic.layer_norm, "layer_norm_eps": critic.layer_norm_eps}

    @abc.abstractmethod
    def choose(self, obs: torch.Tensor, deterministic: bool) -> torch.Tensor:
        """``obs [B, D]`` -> ``actions [B, A]``, drawing from torch's global RNG (``act`` seeds it when
        ``deterministic``); ``deterministic`` may also select deterministic parts (e.g. mean edits)."""

    @torch.no_grad()
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        if not deterministic:
            return self.choose(obs, deterministic=False)
        devices = [obs.device] if obs.device.type == "cuda" else []
        actions = []
        with torch.random.fork_rng(devices=devices):
            for state in obs.split(1):
                torch.manual_seed(0)
                actions.append(self.choose(state, deterministic=True))
        return torch.cat(actions)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, Record]:
        raise HeadCapabilityError(f"the {self.family} head ({self.description}) only acts; it has no on-policy record")

    def log_ratio(self, obs: torch.Tensor, record: Record) -> RatioTerms:
        raise HeadCapabilityError(f"the {self.family} head ({self.description}) has no on-policy log-ratio")

    def imitation_loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        raise HeadCapabilityError(f"the {self.family} head ({self.description}) is not trained by imitation; "
                                  f"its {self.trained_part} is")
