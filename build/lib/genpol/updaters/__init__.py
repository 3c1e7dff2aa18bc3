"""On-policy updaters: loss objects and the procedures that apply them."""

from genpol.updaters.losses import LossOutput, PPOClipLoss, normalize_advantages, ratio_diagnostics
from genpol.updaters.minibatch import MinibatchUpdater, explained_variance

__all__ = ["LossOutput", "PPOClipLoss", "MinibatchUpdater", "explained_variance", "normalize_advantages",
           "ratio_diagnostics"]
