"""The Algorithm interface: one object per learning method (rsl_rl's split).

An algorithm **owns** everything learning needs besides the policy head: its critics and their
target networks, its optimizers, its storage (an on-policy rollout or an off-policy replay) and
its update procedure. Runners only loop over env steps and call it, so a runner never holds a
critic, and a new learning method touches ``genpol/algorithms`` and its config, nothing else.

The two loop shapes it serves:

* on-policy (``OnPolicyAlgorithm``): ``act`` -> ``process_env_step`` (x rollout_steps) ->
  ``compute_returns`` -> ``update``;
* off-policy (``OffPolicyAlgorithm``): ``act`` -> ``process_env_step`` -> ``update`` (the number of
  gradient steps the update-to-data ratio asks for) at every env step.

Checkpoints: ``state_dict`` holds all of the algorithm's training state (critics, targets,
optimizers, storage, its generators). The checkpoint's ``policy/`` holds ``acting_head()``'s spec and
weights: a learner that acts through more than its head (EXPO and MaxEntDP through their critics) returns
a head that owns all of it (``genpol.algorithms.acting``), which ``genpol.evaluate`` and ``load_policy``
rebuild from ``policy/`` alone.
"""

from __future__ import annotations

import abc
from typing import Any, ClassVar

import torch

from genpol.heads.base import Capability, PolicyHead, check_capabilities


class Algorithm(abc.ABC):
    """Base class of learning methods. Subclasses set ``name`` and ``needs`` (the head
    capabilities they use) and implement the loop hooks of their family."""

    name: ClassVar[str] = ""
    needs: ClassVar[frozenset[Capability]] = frozenset()
    on_policy: ClassVar[bool] = True

    def __init__(self, head: PolicyHead):
        check_capabilities(head, self.name, self.needs)
        self.head = head

    @abc.abstractmethod
    def act(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs [N, D]`` -> the actions ``[N, A]`` to send to the env (exploring)."""

    @abc.abstractmethod
    def state_dict(self) -> dict[str, Any]:
        """Training state for an exact resume (tensors, numbers, lists and dicts only)."""

    @abc.abstractmethod
    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict``."""

    def set_progress(self, fraction: float) -> None:
        """Training progress in [0, 1] (env steps done / total), for learning-rate schedules."""

    def networks(self) -> dict[str, torch.nn.Module | torch.Tensor]:
        """Every learned module (and loose learned tensor) by name, for the non-finite guard."""
        return {"head": self.head}

    def recent_data(self) -> dict[str, torch.Tensor]:
        """The env data stored since the last call (observations, rewards), for the non-finite guard."""
        return {}

    def acting_head(self) -> PolicyHead:
        """The head evaluation acts with (an EMA copy for learners that keep one; a head that owns the critics
        for a learner that acts through them): the checkpoint's ``policy/`` saves its spec and weights."""
        return self.head
