"""Callbacks do the I/O of training: logs, progress, checkpoints, evaluation, summaries."""

from genpol.callbacks.base import Callback, CallbackList
from genpol.callbacks.checkpointing import Checkpointer
from genpol.callbacks.evaluation import Evaluation
from genpol.callbacks.logging import MetricsFile, ProgressBar, TensorBoardLogger, read_metrics
from genpol.callbacks.summary import Summary, plot_learning_curve

__all__ = ["Callback", "CallbackList", "Checkpointer", "Evaluation", "MetricsFile", "ProgressBar",
           "TensorBoardLogger", "Summary", "plot_learning_curve", "read_metrics"]
