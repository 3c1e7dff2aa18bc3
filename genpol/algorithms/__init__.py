"""Learning methods (see ``genpol.algorithms.base``) and the table that builds them from the
learner config group (``genpol.algorithms.registry``): ``ppo``, ``spo``, ``aspo``, ``trpo``
(on-policy), ``sac`` (off-policy; RLPD is a configuration of it), ``expo`` and ``consistency_ac``."""

from __future__ import annotations

from typing import Any

from genpol.algorithms.base import Algorithm
from genpol.algorithms.onpolicy import OnPolicyAlgorithm
from genpol.algorithms.registry import (LEARNERS, Learner, learner, make_critic, make_updater, on_policy_names,
                                        register_learner)
from genpol.envs import VectorEnv
from genpol.heads import PolicyHead

__all__ = ["Algorithm", "OnPolicyAlgorithm", "LEARNERS", "Learner", "learner", "register_learner", "make_algorithm",
           "make_critic", "make_updater", "is_off_policy", "learner_needs", "on_policy_names"]


def is_off_policy(updater_name: str) -> bool:
    return learner(updater_name).off_policy


def make_algorithm(cfg: Any, head: PolicyHead, env: VectorEnv, offline: Any = None) -> Algorithm:
    """The learner of ``cfg.learner`` for ``head`` on ``env`` (``cfg`` is a ``TrainConfig``).

    ``offline`` is the offline transition store off-policy learners mix into their batches (None:
    online data only). Raises ``HeadCapabilityError`` when the head lacks what the learner needs.
    """
    return learner(cfg.learner.name).build(cfg, head, env, offline)


def learner_needs(updater_name: str) -> frozenset:
    """The head capabilities the learner ``updater_name`` uses."""
    return learner(updater_name).needs
