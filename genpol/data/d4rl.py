"""D4RL's HDF5 format: read with h5py (the ``d4rl`` package needs MuJoCo 2.1 binaries), and write.

Flat datasets at the root (``observations [N, D]``, ``actions [N, A]``, ``rewards [N]`` or ``[N, 1]``,
``terminals [N]``, ``timeouts [N]``, optional ``next_observations``) plus nested groups
(``infos/qpos``, ``metadata/...``). float32, or float64 in the replay datasets. Episodes end at
``terminals | timeouts``; a last episode without a flag was cut by the end of the file and counts
as truncated. ``next_observations`` is read at the truncated ends only (``OfflineDataset.end_rows``).
"""

from __future__ import annotations

import re
import warnings
from pathlib import Path
from typing import Any

import h5py
import numpy as np

from genpol.data.dataset import DatasetError, OfflineDataset, check_size
from genpol.files import replaced_atomically
from genpol.memory import require_memory
from genpol.data.scores import d4rl_env_name

REQUIRED_KEYS = ("observations", "actions", "rewards", "terminals")


# what genpol reads whole: the flat arrays it trains on and the metadata; D4RL's ``infos/*`` (qpos, qvel,
# the behaviour policy's log-probs) would only take memory, and of ``next_observations`` only the rows
# that end a truncated episode are read (``_end_next_observations``): elsewhere s' is the next row
READ_KEYS = (*REQUIRED_KEYS, "timeouts")
# metadata holds names and a few numbers (the env id, reference returns, the collecting policy's weights, ~0.3 MB
# in D4RL's MuJoCo files): it is read outside the memory check, so an entry above the first bound is skipped (a
# 200 KB gzip file once asked for 200 MB), and so is any entry past the second, over all of them (200 entries
# of 1 MB each, in a 1 MB file, were read whole)
METADATA_MAX_BYTES = 1 << 20
METADATA_TOTAL_MAX_BYTES = 8 << 20


def _numeric(node: h5py.Dataset, path: Path, key: str) -> h5py.Dataset:
    """``node``, after checking that it is a numeric array (a string, compound or scalar entry reached numpy's
    casts as a traceback)."""
    if node.dtype.kind not in "biuf" or node.ndim == 0:
        raise DatasetError(f"{path}: '{key}' must be a numeric array with a row per transition, got dtype "
                           f"{node.dtype} and shape {node.shape}")
    return node


def _read(handle: h5py.File, path: Path, max_transitions: int | None) -> dict[str, Any]:
    """The arrays of ``READ_KEYS`` and the ``metadata/*`` entries, after checking the file's size against
    ``max_transitions`` (before anything large is read)."""
    arrays = {key: handle[key] for key in READ_KEYS if isinstance(handle.get(key), h5py.Dataset)}
    missing = [key for key in REQUIRED_KEYS if key not in arrays]
    if missing:
        present = sorted(key for key in handle.keys() if isinstance(handle[key], h5py.Dataset))
        raise DatasetError(f"{path} lacks the D4RL key(s) {missing}; it has {present}")
    for key, node in arrays.items():
        _numeric(node, path, key)
    shape = arrays["observations"].shape
    check_size(str(path), shape[0] if shape else 0, max_transitions)
    # the arrays as read, then float32 copies of them in the dataset and the replay: three times the file's
    require_memory("dataset.path", str(path), 3 * sum(node.size * node.dtype.itemsize for node in arrays.values()),
                   "cpu", "its arrays and their copies in memory")
    data: dict[str, Any] = {key: node[()] for key, node in arrays.items()}
    metadata = handle.get("metadata")
    if isinstance(metadata, h5py.Group):
        read_bytes, skipped = 0, []

        def visit(name: str, node: Any) -> None:
            nonlocal read_bytes
            if isinstance(node, h5py.Dataset):
                size = node.size * node.dtype.itemsize
                if size > METADATA_MAX_BYTES or read_bytes + size > METADATA_TOTAL_MAX_BYTES:
                    skipped.append(f"metadata/{name} ({size} bytes)")
                    return
                read_bytes += size
                data[f"metadata/{name}"] = node[()]

        metadata.visititems(visit)
        if skipped:
            warnings.warn(f"{path}: skipped {len(skipped)} metadata entries, e.g. {skipped[0]}: an entry above "
                          f"{METADATA_MAX_BYTES} bytes, or past {METADATA_TOTAL_MAX_BYTES} bytes of them all, "
                          "is not read", stacklevel=4)
    return data


def _unflagged_ends(handle: h5py.File, path: Path, observations: np.ndarray, terminals: np.ndarray) -> np.ndarray:
    """``timeouts [N]`` for a file without them: the rows whose ``next_observations`` is not the next row's
    observation (an episode cut there; RLPD's D4RLDataset finds its episode ends so), read in blocks of rows.
    Without ``next_observations`` nothing tells where a time limit cut an episode: a warning, and none."""
    timeouts = np.zeros(len(observations), dtype=bool)
    node = handle.get("next_observations")
    if isinstance(node, h5py.Dataset):
        _numeric(node, path, "next_observations")
    if not isinstance(node, h5py.Dataset) or node.shape != observations.shape:
        warnings.warn(f"{path} has neither 'timeouts' nor 'next_observations': episodes end at its terminals only, so "
                      "an episode cut by a time limit runs on into the next one (its last row gets the next "
                      "episode's first observation as s'); write timeouts into the file", stacklevel=3)
        return timeouts
    block = 1 << 16
    for start in range(0, len(observations) - 1, block):
        stop = min(start + block, len(observations) - 1)
        # D4RL stores float32 or float64: compare in float32, what genpol trains on
        following = np.asarray(node[start:stop], dtype=np.float32)
        timeouts[start:stop] = (following != observations[start + 1:stop + 1].astype(np.float32)).any(axis=1)
    return timeouts & ~terminals


def _end_next_observations(handle: h5py.File, path: Path, terminals: np.ndarray, timeouts: np.ndarray
                           ) -> tuple[np.ndarray, np.ndarray] | tuple[None, None]:
    """``(end_rows [K], next_observations [K, D])`` of the rows that end a truncated episode (a timeout, or
    the file's last row, that is not terminal), from the file's ``next_observations``; (None, None) without it."""
    node = handle.get("next_observations")
    if not isinstance(node, h5py.Dataset):
        return None, None
    _numeric(node, path, "next_observations")
    if node.shape != handle["observations"].shape:
        raise DatasetError(f"{path}: 'next_observations' has shape {node.shape}, 'observations' "
                           f"{handle['observations'].shape}")
    truncated_end = timeouts.copy()
    truncated_end[-1] = True
    end_rows = np.flatnonzero(truncated_end & ~terminals)
    # h5py reads a sorted index list row by row through its chunk cache: K rows, not the whole array
    next_observations = node[end_rows] if len(end_rows) else np.zeros((0, node.shape[1]), node.dtype)
    return end_rows.astype(np.int64), np.asarray(next_observations, dtype=np.float32)


def load_d4rl(path: str | Path, max_transitions: int | None = None) -> OfflineDataset:
    """Read a D4RL HDF5 file into an ``OfflineDataset``; errors name the file and the key. A file of more
    than ``max_transitions`` transitions is refused before its arrays are read (None: no limit)."""
    path = Path(path)
    if not path.is_file():
        raise DatasetError(f"no D4RL dataset file at {path}")
    try:
        with h5py.File(path, "r") as handle:
            data = _read(handle, path, max_transitions)
            observations = np.asarray(data["observations"])
            actions = np.asarray(data["actions"])
            if observations.ndim != 2 or actions.ndim != 2:
                raise DatasetError(f"{path}: 'observations' and 'actions' must be 2-D, got shapes "
                                   f"{observations.shape} and {actions.shape}")
            if len(observations) == 0:
                raise DatasetError(f"{path} holds no transitions ('observations' has shape {observations.shape})")
            n = len(observations)
            terminals = np.asarray(data["terminals"]).reshape(-1).astype(bool)
            if "timeouts" in data:
                timeouts = np.asarray(data["timeouts"]).reshape(-1).astype(bool)
            elif len(terminals) != n:  # no ends to infer against it: OfflineDataset names 'terminals' below
                timeouts = np.zeros(n, dtype=bool)
            else:
                timeouts = _unflagged_ends(handle, path, observations, terminals)
            if len(terminals) == n and len(timeouts) == n:  # else OfflineDataset names the culprit
                end_rows, end_next_observations = _end_next_observations(handle, path, terminals, timeouts)
            else:
                end_rows = end_next_observations = None
    except (OSError, KeyError, RuntimeError) as error:  # h5py reports a damaged object header as the latter two
        raise DatasetError(f"{path} is not a readable HDF5 file ({type(error).__name__}: {error})") from None
    rewards = np.asarray(data["rewards"])
    if rewards.ndim == 2 and rewards.shape[1] == 1:
        rewards = rewards[:, 0]
    if rewards.ndim != 1:  # an empty [0] is 1-D: OfflineDataset names its row count against the observations'
        raise DatasetError(f"{path}: 'rewards' must be [N] or [N, 1], got {np.asarray(data['rewards']).shape}")
    metadata = {key: value for key, value in data.items() if key.startswith("metadata/")}
    return OfflineDataset(
        observations=observations.astype(np.float32), actions=actions.astype(np.float32),
        rewards=rewards.astype(np.float32), terminals=terminals, timeouts=timeouts,
        source=str(path), env_name=d4rl_env_name(re.split(r"[_/]", path.stem)[0]), metadata=metadata,
        end_rows=end_rows, end_next_observations=end_next_observations,
    )


def write_d4rl(path: str | Path, observations: np.ndarray, actions: np.ndarray, rewards: np.ndarray,
               terminals: np.ndarray, timeouts: np.ndarray, next_observations: np.ndarray | None = None,
               infos: dict[str, np.ndarray] | None = None, metadata: dict[str, Any] | None = None,
               dtype: type = np.float32) -> Path:
    """Write a D4RL-format file (``replaced_atomically``: a temporary file renamed into place, none left
    behind by a failed write)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    with replaced_atomically(path) as tmp, h5py.File(tmp, "w") as handle:
        handle.create_dataset("observations", data=np.asarray(observations, dtype=dtype), compression="gzip")
        handle.create_dataset("actions", data=np.asarray(actions, dtype=dtype), compression="gzip")
        handle.create_dataset("rewards", data=np.asarray(rewards, dtype=dtype))
        handle.create_dataset("terminals", data=np.asarray(terminals, dtype=bool))
        handle.create_dataset("timeouts", data=np.asarray(timeouts, dtype=bool))
        if next_observations is not None:
            handle.create_dataset("next_observations", data=np.asarray(next_observations, dtype=dtype),
                                  compression="gzip")
        for key, value in (infos or {}).items():
            handle.create_dataset(f"infos/{key}", data=np.asarray(value, dtype=dtype))
        for key, value in (metadata or {}).items():
            handle[f"metadata/{key}"] = np.bytes_(value) if isinstance(value, str) else value
    return path
