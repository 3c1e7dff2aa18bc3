"""Minari datasets (``minari`` package, HDF5 storage), read from and written to a local root.

Datasets are found under ``$MINARI_DATASETS_PATH`` (default ``~/.minari/datasets``), or under the
``root`` given here, which is set as that variable for the call. Nothing is downloaded.
Minari keeps each episode's true final observation (``observations [T + 1]``): a truncated episode's is
kept as its last row's next observation (``end_rows``); terminations and truncations map to ``terminals``
and ``timeouts``.
"""

from __future__ import annotations

import contextlib
import difflib
import os
import shutil
import uuid
from pathlib import Path
from typing import Any, Iterator, Sequence

import numpy as np

from genpol.memory import require_memory
from genpol.data.dataset import DatasetError, OfflineDataset, check_size
from genpol.data.scores import d4rl_env_name


@contextlib.contextmanager
def _datasets_root(root: str | Path | None) -> Iterator[None]:
    if root is None:
        yield
        return
    previous = os.environ.get("MINARI_DATASETS_PATH")
    # absolute: minari 0.5.4 joins a relative root onto itself when it sizes a new dataset
    os.environ["MINARI_DATASETS_PATH"] = str(Path(root).expanduser().resolve())
    try:
        yield
    finally:
        if previous is None:
            os.environ.pop("MINARI_DATASETS_PATH", None)
        else:
            os.environ["MINARI_DATASETS_PATH"] = previous


def load_minari(dataset_id: str, root: str | Path | None = None, max_transitions: int | None = None
                ) -> OfflineDataset:
    """Read a local Minari dataset (e.g. ``mujoco/hopper/medium-v0``) into an ``OfflineDataset``; one of
    more than ``max_transitions`` steps is refused before its episodes are read (None: no limit)."""
    import minari

    check_minari_id(dataset_id)
    with _datasets_root(root):
        where = root or os.environ.get("MINARI_DATASETS_PATH", "~/.minari/datasets")
        try:
            dataset = minari.load_dataset(dataset_id)
        except FileNotFoundError:
            raise DatasetError(f"no Minari dataset '{dataset_id}' under {where} (nothing is downloaded; "
                               "make one with python -m genpol.data.collect)") from None
        except Exception as error:  # minari raises several types for malformed ids and files
            raise DatasetError(f"Minari dataset '{dataset_id}' under {where} could not be read: {error}") from None
        check_size(f"Minari dataset '{dataset_id}'", int(dataset.total_steps), max_transitions)
        # as the D4RL reader: the episodes' arrays, their concatenation, and the float32 copies in the replay
        spaces = (dataset.spec.observation_space, dataset.spec.action_space)
        row_bytes = 8 * (2 + sum(int(np.prod(space.shape or (1,))) for space in spaces))
        require_memory("dataset.path", dataset_id, 3 * row_bytes * int(dataset.total_steps), "cpu",
                       "its arrays and their copies in memory")
        parts: dict[str, list[np.ndarray]] = {k: [] for k in ("obs", "act", "rew", "term", "trunc")}
        end_rows, end_next_observations, rows = [], [], 0
        try:  # h5py's errors on a damaged file, and numpy's on episodes of other shapes, were tracebacks
            for episode in dataset.iterate_episodes():
                observations = np.asarray(episode.observations)
                steps = episode_steps(dataset_id, episode, observations, parts["obs"][0].shape[1]
                                      if parts["obs"] else None, parts["act"][0].shape[1] if parts["act"] else None)
                parts["obs"].append(observations[:-1])
                parts["act"].append(np.asarray(episode.actions).reshape(steps, -1))
                parts["rew"].append(np.asarray(episode.rewards).reshape(steps))
                parts["term"].append(np.asarray(episode.terminations, dtype=bool).reshape(steps))
                truncations = np.asarray(episode.truncations, dtype=bool).reshape(steps).copy()
                if not (truncations[-1] or parts["term"][-1][-1]):
                    truncations[-1] = True  # an episode that stops without a flag was cut: truncated
                parts["trunc"].append(truncations)
                rows += len(truncations)
                if max_transitions is not None and rows > max_transitions:
                    # total_steps, checked above, is metadata.json's word: a stale or edited one let a dataset of
                    # any size be read whole
                    raise DatasetError(f"Minari dataset '{dataset_id}' holds more than dataset.max_transitions="
                                       f"{max_transitions:,} transitions ({rows:,} in its first episodes), though "
                                       f"its metadata says {int(dataset.total_steps):,}: raise dataset.max_"
                                       "transitions if this machine has room for it, and rewrite the metadata")
                if not parts["term"][-1][-1]:  # a truncated end: its true next observation is the episode's last
                    end_rows.append(rows - 1)
                    end_next_observations.append(observations[-1])
            actions = np.concatenate(parts["act"]) if parts["act"] else None
        except DatasetError:
            raise
        except (OSError, KeyError, RuntimeError, ValueError) as error:
            raise DatasetError(f"Minari dataset '{dataset_id}' under {where} could not be read: "
                               f"{type(error).__name__}: {error}") from None
        if not parts["obs"]:  # minari writes a dataset's metadata first: a killed write leaves it empty
            raise DatasetError(f"Minari dataset '{dataset_id}' under {where} holds no episodes (a write that was "
                               "interrupted?); delete it and make it again with python -m genpol.data.collect")
        metadata = dict(dataset.storage.metadata)
    name, obs_dim = dataset_id.split("/"), parts["obs"][0].shape[1]
    return OfflineDataset(
        observations=np.concatenate(parts["obs"]).astype(np.float32),
        actions=actions.astype(np.float32),
        rewards=np.concatenate(parts["rew"]).astype(np.float32), terminals=np.concatenate(parts["term"]),
        timeouts=np.concatenate(parts["trunc"]), source=f"minari:{dataset_id}",
        env_name=d4rl_env_name(name[-2]) if len(name) >= 2 else None, metadata=metadata,
        end_rows=np.asarray(end_rows, dtype=np.int64),
        end_next_observations=np.asarray(end_next_observations, np.float32).reshape(len(end_rows), obs_dim),
    )


def episode_steps(dataset_id: str, episode: Any, observations: np.ndarray, obs_dim: int | None,
                  act_dim: int | None = None) -> int:
    """The episode's step count T, after checking that its arrays are numeric and fit one another: observations
    ``[T + 1, D]`` (D as the earlier episodes'), and T >= 1 actions (A values a row, as the earlier episodes'),
    rewards and flags (``[T]`` or ``[T, 1]``)."""
    where = f"Minari dataset '{dataset_id}', episode {episode.id}"
    if observations.ndim != 2:
        raise DatasetError(f"{where}: genpol needs flat Box observations, got shape {observations.shape}")
    steps = len(observations) - 1
    if steps < 1 or (obs_dim is not None and observations.shape[1] != obs_dim):
        raise DatasetError(f"{where}: observations of shape {observations.shape}, expected [T + 1, "
                           f"{obs_dim or 'D'}] with T >= 1")
    for name in ("observations", "actions", "rewards", "terminations", "truncations"):
        values = observations if name == "observations" else np.asarray(getattr(episode, name))
        if values.dtype.kind not in "biuf":  # a string entry reached numpy's float32 cast as a traceback
            raise DatasetError(f"{where}: '{name}' must be numeric, got dtype {values.dtype}")
        if name == "observations":
            continue
        shape = values.shape
        if not shape or shape[0] != steps or (name != "actions" and int(np.prod(shape)) != steps):
            raise DatasetError(f"{where}: '{name}' has shape {shape}, expected {steps} rows"
                               f"{'' if name == 'actions' else ' of one value'} (T = {steps})")
        if name == "actions" and act_dim is not None and int(np.prod(shape[1:])) != act_dim:
            # the concatenation's numpy error named neither the array nor the episode
            raise DatasetError(f"{where}: 'actions' has shape {shape}, expected {act_dim} values a row, as the "
                               "episodes before it")
    return steps


def check_minari_id(dataset_id: str) -> None:
    """``DatasetError`` for an id Minari cannot parse: ``(namespace/)name-v<N>``. minari raises an int()
    TypeError for a missing version, and only once it writes (after the collection) or reads."""
    from minari.dataset.minari_dataset import parse_dataset_id

    try:
        parse_dataset_id(dataset_id)
    except (TypeError, ValueError):
        raise DatasetError(f"'{dataset_id}' is not a Minari dataset id: it must read (namespace/)name-v<N>, "
                           "e.g. genpol/hopper/medium-v0") from None


def minari_dataset_path(dataset_id: str, root: str | Path | None = None) -> Path:
    """Where the Minari dataset ``dataset_id`` lives (whether or not it exists); ``DatasetError`` for an id
    that is not one."""
    import minari

    check_minari_id(dataset_id)
    with _datasets_root(root):
        return Path(minari.storage.get_dataset_path(dataset_id))


def write_minari(dataset_id: str, episodes: Sequence[dict[str, np.ndarray]], observation_space: Any,
                 action_space: Any, root: str | Path | None = None, ref_min_score: float | None = None,
                 ref_max_score: float | None = None, algorithm_name: str = "genpol", description: str = "",
                 env_id: str | None = None) -> Path:
    """Create a local Minari dataset from episodes with keys ``observations [T + 1, D]``,
    ``actions [T, A]``, ``rewards [T]``, ``terminations [T]``, ``truncations [T]``; ``env_id`` (genpol's, e.g.
    ``gym:Hopper-v5``) is stored as the ``genpol_env`` metadata, which the reader checks the run's env against."""
    import minari
    from minari.data_collector import EpisodeBuffer

    buffers = [EpisodeBuffer(observations=np.asarray(ep["observations"]), actions=np.asarray(ep["actions"]),
                             rewards=np.asarray(ep["rewards"]), terminations=np.asarray(ep["terminations"]),
                             truncations=np.asarray(ep["truncations"])) for ep in episodes]
    final = minari_dataset_path(dataset_id, root)
    # minari writes in place: a write killed midway left a dataset without episodes under the id, which then
    # counts as taken. Written under a staging root beside it, then renamed into place (atomic on one filesystem).
    staging = final.parents[len(dataset_id.split("/")) - 1] / f".staging-{os.getpid()}-{uuid.uuid4().hex[:8]}"
    try:
        with _datasets_root(staging):
            dataset = minari.create_dataset_from_buffers(
                dataset_id, buffers, observation_space=observation_space, action_space=action_space,
                algorithm_name=algorithm_name, description=description or None)
            # reference scores are dropped without an eval env spec; store them explicitly
            if ref_min_score is not None and ref_max_score is not None:
                dataset.storage.update_metadata({"ref_min_score": ref_min_score, "ref_max_score": ref_max_score})
            # no env spec either (the data come from genpol's stack): without the id, another task's data of the
            # same sizes trained, and were scored with the references stored above
            if env_id is not None:
                dataset.storage.update_metadata({"genpol_env": env_id})
            staged = Path(minari.storage.get_dataset_path(dataset_id))
        final.parent.mkdir(parents=True, exist_ok=True)
        os.rename(staged, final)
    finally:
        shutil.rmtree(staging, ignore_errors=True)
    return final


def load_dataset(path_or_id: str, format: str = "auto", minari_root: str | Path | None = None,
                 max_transitions: int | None = None) -> OfflineDataset:
    """A D4RL file (``.hdf5``/``.h5`` path) or a Minari dataset id, per ``format`` (auto/d4rl/minari),
    refused when it holds more than ``max_transitions`` transitions (None: no limit). A leading ``~`` is the
    user's home, as in ``dataset.minari_root`` and ``run_dir`` (a Minari id never starts with one)."""
    from genpol.data.d4rl import load_d4rl

    if path_or_id.startswith("~"):
        path_or_id = os.path.expanduser(path_or_id)

    if format == "d4rl" or (format == "auto" and Path(path_or_id).suffix in (".hdf5", ".h5")):
        return load_d4rl(path_or_id, max_transitions)
    if format == "auto" and Path(path_or_id).is_file():  # a Minari id names no file: this is one of another kind
        raise DatasetError(f"dataset.path={path_or_id} is a file but not a D4RL file (.hdf5 or .h5); genpol reads "
                           "D4RL files and Minari dataset ids "
                           "(dataset.format=d4rl reads an HDF5 file of another suffix)")
    if format == "auto" and Path(path_or_id).suffix.lower().startswith(".h"):  # a mistyped file name, not an id
        path = Path(path_or_id)
        siblings = [entry.name for entry in path.parent.iterdir()] if path.parent.is_dir() else []
        close = difflib.get_close_matches(path.name, siblings, n=1, cutoff=0.8)
        raise DatasetError(f"dataset.path={path_or_id}: no such file" + (
            f"; did you mean {path.parent / close[0]}?" if close else
            " (genpol reads D4RL files ending .hdf5 or .h5, and Minari dataset ids)"))
    if format in ("minari", "auto"):
        return load_minari(path_or_id, minari_root, max_transitions)
    raise DatasetError(f"unknown dataset format '{format}'; choose auto, d4rl or minari")
