"""Offline datasets: D4RL HDF5 and Minari readers, one dataset object, normalized scores."""

from genpol.data.d4rl import load_d4rl, write_d4rl
from genpol.data.dataset import DatasetError, Normalization, OfflineDataset
from genpol.data.minari_io import load_dataset, load_minari, write_minari
from genpol.data.scores import (D4RL_REFERENCE, d4rl_env_name, d4rl_normalized_score, normalized_score,
                                reference_returns)

__all__ = ["DatasetError", "Normalization", "OfflineDataset", "load_d4rl", "write_d4rl", "load_minari",
           "write_minari", "load_dataset", "D4RL_REFERENCE", "d4rl_env_name", "d4rl_normalized_score",
           "normalized_score", "reference_returns"]
