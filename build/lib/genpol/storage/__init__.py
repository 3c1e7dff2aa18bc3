"""Storage of experience: the on-policy rollout (``rollout``) and the off-policy replay (``replay``)."""

from genpol.storage.rollout import Batch, RolloutStorage, generalized_advantage_estimate

__all__ = ["Batch", "RolloutStorage", "generalized_advantage_estimate"]
