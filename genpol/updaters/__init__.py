"""The losses and update steps of every learner: PPO-clip, SPO, ASPO and their minibatch epochs,
TRPO's natural-gradient step, the KL-adaptive learning rate, SAC's and the Q-gradient actors' losses.
Tensors in, a loss and named diagnostics out: no env, no files, no critic ownership (the learners in
``genpol.algorithms`` own those). The config group that selects a learner is ``learner``."""

from genpol.updaters.losses import LossOutput, PPOClipLoss, normalize_advantages, ratio_diagnostics
from genpol.updaters.minibatch import MinibatchUpdater, explained_variance

__all__ = ["LossOutput", "PPOClipLoss", "MinibatchUpdater", "explained_variance", "normalize_advantages",
           "ratio_diagnostics"]
