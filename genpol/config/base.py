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

__all__ = ["ENV_BACKENDS", "ACTIVATION_NAMES", "ConfigError", "require", "claim_new_dir", "release_new_dir",
           "check_run_dir", "flatten_keys"]


def claim_new_dir(path: str) -> str:
    """Create ``path`` (or ``path_1``, ``path_2``, ... if it exists) and return the one created, absolute.

    ``os.mkdir`` either creates a directory or fails, atomically, also on NFS: two processes that
    ask for the same ``path`` at once (two sweeps launched in the same second) get two directories.
    Absolute, because sweep jobs may run elsewhere: a Ray worker starts in the directory of ``ray start``,
    and a relative path would put its job's files there, not in the directory claimed here.
    """
    Path(path).parent.mkdir(parents=True, exist_ok=True)
    candidate, suffix = path, 0
    while True:
        try:
            os.mkdir(candidate)
            _CLAIMED.add(os.path.abspath(candidate))
            return os.path.abspath(candidate)
        except FileExistsError:
            suffix += 1
            candidate = f"{path}_{suffix}"


# the folders claim_new_dir made in this process (absolute): release_new_dir removes no other
_CLAIMED: set[str] = set()


def release_new_dir(path: str | Path, files: tuple[str, ...] = ()) -> None:
    """Remove a folder ``claim_new_dir`` made in this process for a run that never started (refused), if it holds
    nothing but the ``files`` named (the refused command's own: its log, lock, config.yaml), and the date's
    folder above it if that then holds nothing: each refused command left one behind. A folder the user named
    (run_dir, hydra.run.dir) is never this process's claim, and stays."""
    folder = Path(os.path.abspath(path))
    if str(folder) not in _CLAIMED or not folder.is_dir() or any(item.name not in files for item in folder.iterdir()):
        return
    for name in files:
        (folder / name).unlink(missing_ok=True)
    for empty in (folder, folder.parent):
        try:
            empty.rmdir()
        except OSError:  # not empty (the run wrote there, or the day holds other runs), or gone
            return


def check_run_dir(path: str) -> None:
    """``ConfigError`` for a ``run_dir`` that cannot hold a run: empty (the files would land in the working
    directory, among the user's own), an existing file, or a folder inside another run's."""
    require(bool(str(path).strip()), "run_dir", "a directory path", path)
    if Path(path).exists() and not Path(path).is_dir():
        raise ConfigError(f"run_dir={path} is a file, not a directory: pick another run_dir")
    for parent in Path(path).expanduser().absolute().parents:
        # a run's folder: its config.yaml and its lock file (genpol.runners.guards.LOCK_NAME) or checkpoints. A run
        # started in <run>/checkpoints or <run>/tb trained there, among that run's files
        if (parent / "config.yaml").is_file() and ((parent / ".genpol.lock").exists()
                                                   or (parent / "checkpoints").is_dir()):
            raise ConfigError(f"run_dir={path} lies inside the run {parent}, among its files: pick a run_dir "
                              "outside it")


def flatten_keys(tree: Any, prefix: str = "") -> dict[str, Any]:
    """A nested dict (a config as a container) as ``{"learner.lr": 3e-4, ...}``."""
    if isinstance(tree, dict):
        flat: dict[str, Any] = {}
        for key, value in tree.items():
            flat.update(flatten_keys(value, f"{prefix}{key}."))
        return flat
    return {prefix[:-1]: tree}
