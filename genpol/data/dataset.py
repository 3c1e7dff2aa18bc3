"""One offline dataset object for every on-disk format: transitions, episodes, chunks, normalization."""

from __future__ import annotations

import json
import re
import zlib
from dataclasses import dataclass, field
from typing import Any, Callable

import numpy as np
import torch

from genpol.data.scores import d4rl_env_name
from genpol.errors import DatasetError
from genpol.memory import require_memory


def check_size(source: str, transitions: int, max_transitions: int | None) -> None:
    """Refuse a dataset of more than ``max_transitions`` transitions (None: no limit) before it is read:
    the replay and BC pipelines hold every transition in memory (several float32 copies of it)."""
    if max_transitions is not None and transitions > max_transitions:
        raise DatasetError(f"{source} holds {transitions:,} transitions, more than dataset.max_transitions="
                           f"{max_transitions:,}; genpol keeps every transition in memory, so raise "
                           "dataset.max_transitions if this machine has room for it")


def task_of(env_id: str) -> str | None:
    """The task an env id names, apart from its backend and version: ``gym:Hopper-v5``, ``envpool:Hopper-v5`` and
    ``Hopper-v4`` -> ``hopper``; None for a custom simulator's ``module:factory`` (its name says nothing)."""
    if env_id.startswith("custom:") or env_id.count(":") > 1:
        return None
    return re.sub(r"[^a-z0-9]", "", re.sub(r"-v\d+$", "", env_id.rpartition(":")[2]).lower()) or None


@dataclass
class Normalization:
    """Per-dimension min and max of observations and actions; maps each to [-1, 1] as DPPO does:
    ``2 (x - min) / (max - min + 1e-6) - 1``."""

    obs_min: np.ndarray
    obs_max: np.ndarray
    action_min: np.ndarray
    action_max: np.ndarray

    @staticmethod
    def scale(x: np.ndarray, low: np.ndarray, high: np.ndarray) -> np.ndarray:
        return 2 * (x - low) / (high - low + 1e-6) - 1

    def to_dict(self) -> dict[str, list[float]]:
        return {key: np.asarray(value, dtype=np.float64).tolist() for key, value in vars(self).items()}

    @classmethod
    def from_dict(cls, state: dict[str, Any]) -> Normalization:
        return cls(**{key: np.asarray(state[key], dtype=np.float64) for key in
                      ("obs_min", "obs_max", "action_min", "action_max")})


@dataclass
class OfflineDataset:
    """Transitions stored back to back, episode after episode.

    Attributes:
        observations ``[N, D]``, actions ``[N, A]``, rewards ``[N]`` (float32),
        terminals ``[N]`` (bool): the episode reached a terminal state at this step,
        timeouts ``[N]`` (bool): a time limit, or the end of the file, cut the episode here,
        source: where it was read from; env_name: e.g. ``hopper`` (for D4RL scores), if known;
        metadata: format-specific extras (Minari reference scores, D4RL metadata),
        end_rows ``[K]`` (int64, increasing) and end_next_observations ``[K, D]``: the rows that end a
            truncated episode (not terminal) whose next observation the source holds, and those
            observations (Minari keeps every episode's last one, D4RL files their ``next_observations``);
            None where it holds none. An episode's last row has no next row to take s' from.
    """

    observations: np.ndarray
    actions: np.ndarray
    rewards: np.ndarray
    terminals: np.ndarray
    timeouts: np.ndarray
    source: str = ""
    env_name: str | None = None
    metadata: dict[str, Any] = field(default_factory=dict)
    end_rows: np.ndarray | None = None
    end_next_observations: np.ndarray | None = None

    def __post_init__(self) -> None:
        n = len(self.observations)
        for name in ("rewards", "terminals", "timeouts"):  # [N, 1] rewards broadcast a TD target to [B, B]
            if np.ndim(getattr(self, name)) != 1:
                raise DatasetError(f"{self.source}: '{name}' must be [N], got shape {np.shape(getattr(self, name))}")
        for name in ("actions", "rewards", "terminals", "timeouts"):
            if len(getattr(self, name)) != n:
                raise DatasetError(f"{self.source}: '{name}' has {len(getattr(self, name))} rows, "
                                   f"'observations' has {n}")
        for name in ("observations", "actions", "rewards"):
            values = getattr(self, name)
            if not np.isfinite(values).all():
                bad = int((~np.isfinite(values)).reshape(n, -1).any(axis=1).argmax())
                raise DatasetError(f"{self.source}: '{name}' holds NaN or inf values (first at row {bad})")
        if n == 0:
            raise DatasetError(f"{self.source}: the dataset is empty")
        if (self.end_rows is None) != (self.end_next_observations is None):
            raise DatasetError(f"{self.source}: end_rows and end_next_observations come together")
        if self.end_rows is not None:
            self._check_end_rows()

    def _check_end_rows(self) -> None:
        rows, next_obs = self.end_rows, self.end_next_observations
        if rows.ndim != 1 or next_obs.shape != (len(rows), self.obs_dim):
            raise DatasetError(f"{self.source}: end_next_observations has shape {next_obs.shape}, expected "
                               f"{(len(rows), self.obs_dim)} for {len(rows)} end_rows")
        if len(rows) == 0:
            return
        truncated_end = (self.timeouts | (np.arange(len(self.rewards)) == len(self.rewards) - 1)) & ~self.terminals
        if (np.diff(rows) <= 0).any() or rows[0] < 0 or rows[-1] >= len(self.rewards) or not truncated_end[rows].all():
            raise DatasetError(f"{self.source}: end_rows must be increasing rows that end a truncated episode")
        if not np.isfinite(next_obs).all():
            bad = int(rows[(~np.isfinite(next_obs)).any(axis=1).argmax()])
            raise DatasetError(f"{self.source}: the next observation of row {bad} holds NaN or inf values")

    @property
    def obs_dim(self) -> int:
        return int(self.observations.shape[1])

    @property
    def act_dim(self) -> int:
        return int(self.actions.shape[1])

    def episode_bounds(self) -> list[tuple[int, int]]:
        """``[(start, end)]`` with ``end`` exclusive; an episode ends at ``terminals | timeouts``, and
        a last episode without a flag (cut by the end of the file) ends at the last row."""
        ends = np.flatnonzero(self.terminals | self.timeouts) + 1
        if len(ends) == 0 or ends[-1] != len(self.observations):
            ends = np.append(ends, len(self.observations))
        starts = np.concatenate([[0], ends[:-1]])
        return list(zip(starts.tolist(), ends.tolist()))

    def fingerprint(self) -> dict[str, int]:
        """Rows, episodes and a CRC-32 of every array: what a resumed run checks its data against."""
        checksum = 0
        for array in (self.observations, self.actions, self.rewards, self.terminals, self.timeouts):
            checksum = zlib.crc32(np.ascontiguousarray(array).view(np.uint8), checksum)
        return {"transitions": len(self.rewards), "episodes": len(self.episode_bounds()), "checksum": checksum}

    def episode_returns(self) -> np.ndarray:
        return np.array([self.rewards[start:end].sum() for start, end in self.episode_bounds()])

    def normalization(self) -> Normalization:
        return Normalization(self.observations.min(0), self.observations.max(0), self.actions.min(0),
                             self.actions.max(0))

    def check_dims(self, obs_dim: int, act_dim: int, env_id: str) -> None:
        """Raise a ``DatasetError`` naming both sides when the dataset does not fit the env: other sizes, or data
        that say they were recorded in another task (HalfCheetah and Walker2d share their sizes, 17/6)."""
        if (self.obs_dim, self.act_dim) != (obs_dim, act_dim):
            raise DatasetError(f"{self.source}: observations/actions have {self.obs_dim}/{self.act_dim} dims, "
                               f"but {env_id} has {obs_dim}/{act_dim}")
        recorded, where = self.recorded_env()
        if recorded is not None and None not in (task_of(recorded), task_of(env_id)) \
                and task_of(recorded) != task_of(env_id):
            raise DatasetError(f"{self.source} was recorded in {recorded} ({where}), but the run's env is {env_id}; "
                               "use data of that task (a version or backend apart is the same task)")
        run_d4rl_name = d4rl_env_name(env_id)
        if recorded is None and None not in (self.env_name, run_d4rl_name) and self.env_name != run_d4rl_name:
            raise DatasetError(f"{self.source} is named for {self.env_name}, but the run's env is {env_id}; use data "
                               "of that task, or rename the file if its name is wrong")

    def recorded_env(self) -> tuple[str | None, str]:
        """The env id the data say they were recorded in, and where they say it: ``metadata/env`` of a D4RL file
        and ``genpol_env`` of a Minari dataset (``genpol.data.collect`` writes both), a Minari dataset's
        ``env_spec``; ``(None, "")`` where they do not."""
        for key in ("metadata/env", "genpol_env"):
            value = self.metadata.get(key)
            if value is not None:
                return (value.decode() if isinstance(value, bytes) else str(value)), f"its {key}"
        spec = self.metadata.get("env_spec")
        if isinstance(spec, str):
            try:
                spec_id = json.loads(spec).get("id")
            except (ValueError, AttributeError):
                spec_id = None
            if isinstance(spec_id, str):
                return spec_id, "its env_spec"
        return None, ""

    def chunks(self, horizon: int, normalization: Normalization, scale_observations: bool = True,
               action_transform: Callable[[np.ndarray], np.ndarray] | None = None) -> tuple[torch.Tensor, torch.Tensor]:
        """Every (observation, next ``horizon`` actions) pair that fits inside one episode (no padding,
        as DPPO), both scaled to [-1, 1] (observations left raw with ``scale_observations=False``; actions
        mapped by ``action_transform`` ``[N, A] -> [N, A]`` instead, if given): ``(obs [M, D], actions
        [M, horizon * A])`` float32."""
        obs = (normalization.scale(self.observations, normalization.obs_min, normalization.obs_max)
               if scale_observations else self.observations)
        actions = (normalization.scale(self.actions, normalization.action_min, normalization.action_max)
                   if action_transform is None else action_transform(self.actions))
        starts = [np.arange(start, end - horizon + 1) for start, end in self.episode_bounds() if end - start >= horizon]
        if not starts:
            raise DatasetError(f"{self.source}: no episode has {horizon} steps, the action chunk length")
        index = np.concatenate(starts)
        # the pairs hold every action horizon times over: refused before they are gathered, as the file was
        act_dim = self.actions.shape[1]
        require_memory("dataset.max_transitions", len(self.rewards),
                       len(index) * (4 * self.observations.shape[1] + (4 * act_dim + 8) * horizon)
                       + self.observations.nbytes + self.actions.nbytes, "cpu",
                       f"the (observation, {horizon} actions) pairs imitation trains on")
        windows = index[:, None] + np.arange(horizon)[None, :]
        return (torch.as_tensor(obs[index], dtype=torch.float32),
                torch.as_tensor(actions[windows].reshape(len(index), -1), dtype=torch.float32))
