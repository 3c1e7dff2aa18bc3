"""Shared pieces of the config schema: the env backends, the activation names, run-directory claiming
and key flattening. The range check that names the key, ``require``, lives with ``ConfigError`` in
``genpol.errors`` (re-exported here), so that each head's config, beside its head, uses it too."""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from genpol.envs import BACKENDS
from genpol.nets import ACTIVATIONS
from genpol.errors import ConfigError, require

ENV_BACKENDS = tuple(BACKENDS)  # the one list of env backends is genpol.envs.BACKENDS
ACTIVATION_NAMES = tuple(ACTIVATIONS)  # the networks' table, genpol.nets.ACTIVATIONS

__all__ = ["ENV_BACKENDS", "ACTIVATION_NAMES", "ConfigError", "require", "claim_new_dir", "flatten_keys"]


def claim_new_dir(path: str) -> str:
    """Create ``path`` (or ``path_1``, ``path_2``, ... if it exists) and return the one created.

    ``os.mkdir`` either creates a directory or fails, atomically, also on NFS: two processes that
    ask for the same ``path`` at once (two sweeps launched in the same second) get two directories.
    """
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    candidate, suffix = path, 0
    while True:
        try:
            os.mkdir(candidate)
            return candidate
        except FileExistsError:
            suffix += 1
            candidate = f"{path}_{suffix}"


def flatten_keys(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested dict (a config as a container) as ``{"learner.lr": 3e-4, ...}``."""
    if isinstance(tree, dict):
        flat: dict[str, Any] = {}
        for key, value in tree.items():
            flat.update(flatten_keys(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: tree}
