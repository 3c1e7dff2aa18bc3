"""Replay storage for off-policy learners (SAC, RLPD, EXPO, Consistency-AC).

* ``ReplayBuffer``: a preallocated ring buffer of online transitions on one device. ``next_obs`` is
  the true next observation (``info["final_obs"]`` where an episode ended) and only real terminations
  are stored as done, so time-limit truncations stay bootstrappable (SB3's handle_timeout_termination).
* ``OfflineReplay`` / ``offline_transitions``: an ``OfflineDataset`` as (s, a, r, s', terminal)
  transitions, in its own store, transformed into the agent's observation and action spaces.
* ``MixedSampler``: RLPD's symmetric sampling, offline and online rows interleaved in fixed positions.

Every store samples uniformly with replacement with its own CPU ``torch.Generator``: draws do not
depend on the device, on global RNG use, or on the other store, and resume bit-identically from
``state_dict``. All states load with ``torch.load(weights_only=True)``.
"""

from __future__ import annotations

import warnings
import zlib
from dataclasses import dataclass
from typing import Any, Callable

import numpy as np
import torch

from genpol.data import OfflineDataset

ArrayTransform = Callable[[np.ndarray], np.ndarray]
TANH_SAFE_BOUND = 1.0 - 1e-5  # a tanh policy's log-prob is infinite at +-1 (RLPD clips offline actions here)


@dataclass
class ReplayBatch:
    """B transitions, each field on the store's device."""

    obs: torch.Tensor  # [B, D] float32
    actions: torch.Tensor  # [B, A] float32
    rewards: torch.Tensor  # [B] float32
    next_obs: torch.Tensor  # [B, D] float32, the true next observation (own obs where done and offline)
    dones: torch.Tensor  # [B] float32, 1.0 = terminal state (no bootstrap); truncations are 0.0

    def __len__(self) -> int:
        return int(self.rewards.shape[0])

    def chunk(self, parts: int) -> list[ReplayBatch]:
        """Cut ``[B]`` into ``parts`` consecutive minibatches of ``B / parts`` rows (RLPD's UTD split)."""
        if parts < 1 or len(self) % parts:
            raise ValueError(f"ReplayBatch.chunk: {len(self)} rows do not split into {parts} equal minibatches")
        fields = [torch.chunk(value, parts) for value in vars(self).values()]
        return [ReplayBatch(*values) for values in zip(*fields)]


class ReplayBuffer:
    """Ring buffer of online transitions; once full, the oldest rows are overwritten.

    While not full, rows ``[0, size)`` are filled and ``position == size``; afterwards every row is
    filled and ``position`` is the oldest row, the next to be overwritten.
    """

    def __init__(self, capacity: int, obs_dim: int, act_dim: int, device: str | torch.device = "cpu",
                 seed: int = 0):
        if capacity < 1:
            raise ValueError(f"ReplayBuffer: capacity must be >= 1, got {capacity}")
        self.capacity, self.obs_dim, self.act_dim = int(capacity), int(obs_dim), int(act_dim)
        # empty, not zeros: on CPU, pages nobody has written take no memory, so a 1M-row buffer costs
        # RSS only as it fills (only rows [0, size) are ever read)
        self.obs = torch.empty(capacity, obs_dim, dtype=torch.float32, device=device)
        self.actions = torch.empty(capacity, act_dim, dtype=torch.float32, device=device)
        self.rewards = torch.empty(capacity, dtype=torch.float32, device=device)
        self.next_obs = torch.empty(capacity, obs_dim, dtype=torch.float32, device=device)
        self.terminated = torch.empty(capacity, dtype=torch.bool, device=device)
        self.device = self.obs.device  # resolved ("cuda" -> "cuda:0"), comparable with other stores' devices
        self.position, self.size = 0, 0
        self.generator = torch.Generator().manual_seed(seed)

    def _columns(self) -> dict[str, torch.Tensor]:
        return {name: getattr(self, name) for name in ("obs", "actions", "rewards", "next_obs", "terminated")}

    def __len__(self) -> int:
        return self.size

    def add(self, obs: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor, next_obs: torch.Tensor,
            terminated: torch.Tensor) -> None:
        """Store one vectorized env step of N transitions.

        Args:
            obs ``[N, D]``, actions ``[N, A]`` (the agent's actions, before any env-side rescaling),
            rewards ``[N]``, next_obs ``[N, D]``: the true next observation, i.e. ``info["final_obs"]``,
            terminated ``[N]`` bool: real terminal states only, never time-limit truncations.
        """
        given = {"obs": obs, "actions": actions, "rewards": rewards, "next_obs": next_obs, "terminated": terminated}
        given = {name: torch.as_tensor(value) for name, value in given.items()}
        n = int(given["obs"].shape[0]) if given["obs"].dim() >= 1 else 0
        expected = {"obs": (n, self.obs_dim), "actions": (n, self.act_dim), "rewards": (n,),
                    "next_obs": (n, self.obs_dim), "terminated": (n,)}
        for name, value in given.items():
            if tuple(value.shape) != expected[name]:
                raise ValueError(f"ReplayBuffer.add: '{name}' has shape {tuple(value.shape)}, expected "
                                 f"{expected[name]} (N={n}, obs_dim={self.obs_dim}, act_dim={self.act_dim})")
        if n == 0:
            return
        # More rows than the capacity: only the newest `capacity` would survive, so write only those.
        skip = max(0, n - self.capacity)
        start = (self.position + skip) % self.capacity
        first = min(n - skip, self.capacity - start)  # rows before the end of the ring; the rest wrap to 0
        for name, store in self._columns().items():
            values = given[name][skip:].to(device=self.device, dtype=store.dtype)
            store[start:start + first] = values[:first]
            store[:len(values) - first] = values[first:]
        self.position = (self.position + n) % self.capacity
        self.size = min(self.size + n, self.capacity)

    def batch_at(self, rows: torch.Tensor) -> ReplayBatch:
        """The transitions at buffer ``rows [B]`` (int64) as a ``ReplayBatch`` of B rows."""
        rows = rows.to(self.device)
        return ReplayBatch(self.obs[rows], self.actions[rows], self.rewards[rows], self.next_obs[rows],
                           self.terminated[rows].to(torch.float32))

    def sample(self, batch_size: int) -> ReplayBatch:
        """``batch_size`` transitions drawn uniformly with replacement from the filled rows."""
        if self.size == 0:
            raise RuntimeError("ReplayBuffer.sample: the buffer is empty; add transitions before sampling")
        return self.batch_at(torch.randint(self.size, (batch_size,), generator=self.generator))

    @staticmethod
    def bytes_for(capacity: int, obs_dim: int, act_dim: int) -> int:
        """Bytes of a full buffer: per transition float32 obs, next obs, action and reward and a bool
        termination, ``(2 obs_dim + act_dim + 1) x 4 + 1``."""
        return capacity * ((2 * obs_dim + act_dim + 1) * 4 + 1)

    def nbytes(self) -> int:
        """Bytes of the tensors ``state_dict()`` holds (the filled rows and the generator state)."""
        row_bytes = sum(store[0].nelement() * store.element_size() for store in self._columns().values())
        return self.size * row_bytes + self.generator.get_state().nelement()

    def state_dict(self) -> dict[str, Any]:
        """The filled rows (on CPU, copied so that the empty capacity is not saved), position, size and
        the generator state."""
        state: dict[str, Any] = {name: store[:self.size].to("cpu", copy=True)
                                 for name, store in self._columns().items()}
        state.update(capacity=self.capacity, obs_dim=self.obs_dim, act_dim=self.act_dim, position=self.position,
                     size=self.size, generator=self.generator.get_state())
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        mine = (self.capacity, self.obs_dim, self.act_dim)
        saved = (int(state["capacity"]), int(state["obs_dim"]), int(state["act_dim"]))
        if saved != mine:
            raise ValueError(f"ReplayBuffer.load_state_dict: saved (capacity, obs_dim, act_dim) = {saved}, "
                             f"this buffer has {mine}")
        size, position = int(state["size"]), int(state["position"])
        if not (0 <= size <= self.capacity and 0 <= position < self.capacity
                and (size == self.capacity or position == size)):
            raise ValueError(f"ReplayBuffer.load_state_dict: inconsistent size {size} / position {position} "
                             f"for capacity {self.capacity}")
        for name, store in self._columns().items():
            if tuple(state[name].shape) != (size, *store.shape[1:]):
                raise ValueError(f"ReplayBuffer.load_state_dict: '{name}' has shape {tuple(state[name].shape)}, "
                                 f"expected {(size, *store.shape[1:])}")
            store[:size] = state[name].to(device=self.device, dtype=store.dtype)
        self.size, self.position = size, position
        self.generator.set_state(state["generator"])


class OfflineReplay:
    """Transitions of an offline dataset, sampled like a ``ReplayBuffer`` (build with ``offline_transitions``).

    Stores the transformed observations once, ``[R, D]`` for the dataset's R rows, plus the actions,
    rewards and terminals of the rows and two int64 index vectors: a transition's s and s' are rows
    ``rows[i]`` and ``next_rows[i]`` of the same observation array, so s' costs no second copy.
    """

    def __init__(self, observations: torch.Tensor, actions: torch.Tensor, rewards: torch.Tensor,
                 terminals: torch.Tensor, rows: torch.Tensor, next_rows: torch.Tensor, checksum: int, seed: int = 0):
        self.observations, self.actions, self.rewards = observations, actions, rewards  # [R, D], [R, A], [R]
        self.dones = terminals.to(torch.float32)  # [R]
        self.rows, self.next_rows = rows, next_rows  # [M] int64 each
        self.checksum = int(checksum)
        self.device = observations.device
        self.obs_dim, self.act_dim = int(observations.shape[1]), int(actions.shape[1])
        self.generator = torch.Generator().manual_seed(seed)

    def __len__(self) -> int:
        return int(self.rows.shape[0])

    def batch_at(self, transitions: torch.Tensor) -> ReplayBatch:
        """Transitions ``[B]`` (indices into ``rows``, in dataset order) as a ``ReplayBatch`` of B rows."""
        transitions = transitions.to(self.device)
        rows, next_rows = self.rows[transitions], self.next_rows[transitions]
        return ReplayBatch(self.observations[rows], self.actions[rows], self.rewards[rows],
                           self.observations[next_rows], self.dones[rows])

    def sample(self, batch_size: int) -> ReplayBatch:
        """``batch_size`` transitions drawn uniformly with replacement."""
        return self.batch_at(torch.randint(len(self), (batch_size,), generator=self.generator))

    def fingerprint(self) -> dict[str, int]:
        return {"transitions": len(self), "dataset_rows": int(self.observations.shape[0]), "checksum": self.checksum}

    def state_dict(self) -> dict[str, Any]:
        """The generator state and a fingerprint of the data; the data are re-read from the dataset."""
        return {"fingerprint": self.fingerprint(), "generator": self.generator.get_state()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        saved = {key: int(value) for key, value in state["fingerprint"].items()}
        if saved != self.fingerprint():
            raise ValueError(f"OfflineReplay.load_state_dict: the checkpoint was made with offline data "
                             f"{saved}, these are {self.fingerprint()} (a different dataset file or transform)")
        self.generator.set_state(state["generator"])


def offline_transitions(dataset: OfflineDataset, obs_transform: ArrayTransform | None = None,
                        action_transform: ArrayTransform | None = None, *,
                        action_clip: float | None = TANH_SAFE_BOUND, truncated_rows: str = "keep",
                        truncation_is_terminal: bool = False, device: str | torch.device = "cpu",
                        seed: int = 0) -> OfflineReplay:
    """(s, a, r, s', terminal) transitions of ``dataset``.

    Inside an episode s' is the next row. An episode's last row is kept when it is terminal (its s' is
    never bootstrapped from, so it is the row's own observation). When a time limit or the end of the
    file cut the episode, ``truncated_rows`` says what happens to its last row:

    * ``keep``: a transition like any other (not terminal), with the next observation the dataset holds
      for it (``dataset.end_rows``: Minari always, D4RL files with ``next_observations``); dropped
      where it holds none. Such a row can carry the episode's only reward (a sparse goal reached at
      the last step).
    * ``drop``: always dropped, as D4RL's ``qlearning_dataset`` does (CORL, RLPD, IQL and most
      offline RL code), for comparisons with that code.

    ``truncation_is_terminal``: a kept truncated row is done, as the online buffer stores a truncation
    under ``learner.bootstrap_truncation=false`` (both halves of a mixed batch then treat time limits alike).

    Args:
        obs_transform: ``[R, D] -> [R, D']`` numpy map applied to all observations (so to s and s'),
            to match what the online env stack hands the agent (e.g. the dataset's min/max scaling).
        action_transform: ``[R, A] -> [R, A]`` numpy map into the agent's [-1, 1] action space (e.g.
            env bounds to [-1, 1]); actions are then clipped to ``+-action_clip`` (None: no clip).
            A warning says when the clip moves actions by more than 1e-3 (a forgotten transform).
        seed: the store's own generator seed; use a different one from the online buffer's.

    On CPU, observations that need no transform, cast or appended next observation are shared with
    ``dataset``, not copied.
    """
    if truncated_rows not in ("keep", "drop"):
        raise ValueError(f"offline_transitions: truncated_rows must be keep or drop, got {truncated_rows!r}")
    observations = _transformed_observations(dataset, obs_transform, truncated_rows == "keep")
    actions = np.asarray(dataset.actions if action_transform is None else action_transform(dataset.actions),
                         dtype=np.float32)
    num_rows = len(dataset.rewards)
    if actions.shape != (num_rows, dataset.act_dim):
        raise ValueError(f"offline_transitions: the transform returned actions {actions.shape} for {num_rows} "
                         f"rows of {dataset.act_dim}-dim actions")
    if action_clip is not None:
        excess = float(np.abs(actions).max()) - action_clip
        if excess > 1e-3:
            warnings.warn(f"offline_transitions: {dataset.source} actions reach {action_clip + excess:.4g}, "
                          f"clipped to +-{action_clip}; pass an action_transform into [-1, 1], or action_clip=None")
        actions = np.clip(actions, -action_clip, action_clip)
    # Same episode ends as OfflineDataset.episode_bounds: terminal or timeout flags, plus the last row.
    terminals = np.asarray(dataset.terminals, dtype=bool)
    episode_end = terminals | np.asarray(dataset.timeouts, dtype=bool)
    episode_end[-1] = True
    all_rows = np.arange(num_rows)
    next_rows = np.where(episode_end, all_rows, all_rows + 1)
    keep = ~episode_end | terminals  # a row both terminal and timed out is a terminal: kept
    if len(observations) > num_rows:  # the known next observations of truncated ends, appended after the rows
        keep[dataset.end_rows] = True
        next_rows[dataset.end_rows] = num_rows + np.arange(len(dataset.end_rows))
        if truncation_is_terminal:
            terminals = terminals.copy()
            terminals[dataset.end_rows] = True
    rows, next_rows = all_rows[keep], next_rows[keep]
    if len(rows) == 0:
        raise ValueError(f"offline_transitions: {dataset.source} has no transition with a next observation")
    checksum = 0
    # next_rows follow from the others unless truncated ends were kept (the checksum of runs saved before is kept)
    hashed = (observations, actions, dataset.rewards.astype(np.float32), terminals, rows)
    for array in (*hashed, next_rows) if len(observations) > num_rows else hashed:
        checksum = zlib.crc32(np.ascontiguousarray(array).view(np.uint8), checksum)
    tensors = [torch.as_tensor(array, dtype=dtype).to(device) for array, dtype in (
        (observations, torch.float32), (actions, torch.float32), (dataset.rewards, torch.float32),
        (terminals, torch.bool), (rows, torch.int64), (next_rows, torch.int64))]
    return OfflineReplay(*tensors, checksum=checksum, seed=seed)


def _transformed_observations(dataset: OfflineDataset, obs_transform: ArrayTransform | None,
                              with_end_next: bool) -> np.ndarray:
    """``[R (+ K), D']`` float32: the dataset's R observations through ``obs_transform``, followed (with
    ``with_end_next`` and K > 0) by its K known next observations of truncated ends, transformed alike."""
    def transformed(array: np.ndarray) -> np.ndarray:
        return np.asarray(array if obs_transform is None else obs_transform(array), dtype=np.float32)

    observations = transformed(dataset.observations)
    if observations.shape[0] != len(dataset.rewards):
        raise ValueError(f"offline_transitions: the transform returned observations {observations.shape} for "
                         f"{len(dataset.rewards)} rows")
    if not with_end_next or dataset.end_rows is None or len(dataset.end_rows) == 0:
        return observations
    return np.concatenate([observations, transformed(dataset.end_next_observations)])


def offline_row_positions(batch_size: int, offline_ratio: float) -> torch.Tensor:
    """``[batch_size]`` bool: which rows of a mixed batch come from the offline store.

    Row i is offline when ``round(i' * ratio)`` steps up between i' = i and i + 1 (half rounds up), so
    every prefix of L rows holds ``round(L * ratio)`` offline rows: ratio 0.5 gives RLPD's even rows
    offline and odd rows online, and any minibatch of m consecutive rows from a multiple of m holds
    exactly ``m * ratio`` offline rows whenever that is an integer (ratio 0.25: rows 1, 5, 9, ...).
    """
    prefix_counts = np.floor(np.arange(batch_size + 1, dtype=np.float64) * offline_ratio + 0.5)
    return torch.as_tensor(np.diff(prefix_counts) > 0)


class MixedSampler:
    """RLPD's symmetric sampling: ``round(batch_size * offline_ratio)`` offline rows (half rounds up)
    and the rest online, at the fixed positions of ``offline_row_positions``.

    ``offline_ratio`` 0 samples the online buffer only (``offline`` may be None), 1 the offline store
    only (``online`` may be None). Each store draws with its own generator, offline first.
    """

    def __init__(self, online: ReplayBuffer | None, offline: OfflineReplay | None, offline_ratio: float):
        if not 0.0 <= offline_ratio <= 1.0:
            raise ValueError(f"MixedSampler: offline_ratio must be in [0, 1], got {offline_ratio}")
        if (offline is None and offline_ratio > 0) or (online is None and offline_ratio < 1):
            raise ValueError(f"MixedSampler: offline_ratio {offline_ratio} needs "
                             f"{'an offline store' if offline is None else 'an online buffer'}")
        if online is not None and offline is not None:
            online_spec = (online.obs_dim, online.act_dim, str(online.device))
            offline_spec = (offline.obs_dim, offline.act_dim, str(offline.device))
            if online_spec != offline_spec:
                raise ValueError(f"MixedSampler: online (obs_dim, act_dim, device) = {online_spec}, "
                                 f"offline = {offline_spec}")
        self.online, self.offline, self.offline_ratio = online, offline, float(offline_ratio)
        self._positions: dict[int, tuple[torch.Tensor, torch.Tensor]] = {}

    def sample(self, batch_size: int) -> ReplayBatch:
        """A mixed ``ReplayBatch`` of ``batch_size`` rows; cut it with ``chunk(utd)`` for UTD minibatches."""
        if self.offline_ratio == 0.0:
            return self.online.sample(batch_size)
        if self.offline_ratio == 1.0:
            return self.offline.sample(batch_size)
        if batch_size not in self._positions:
            is_offline = offline_row_positions(batch_size, self.offline_ratio)
            self._positions[batch_size] = (torch.nonzero(is_offline)[:, 0].to(self.online.device),
                                           torch.nonzero(~is_offline)[:, 0].to(self.online.device))
        offline_rows, online_rows = self._positions[batch_size]
        offline_part = self.offline.sample(len(offline_rows))
        online_part = self.online.sample(len(online_rows))
        fields = {}
        for name, offline_value in vars(offline_part).items():
            mixed = offline_value.new_empty((batch_size, *offline_value.shape[1:]))
            mixed[offline_rows] = offline_value
            mixed[online_rows] = getattr(online_part, name)
            fields[name] = mixed
        return ReplayBatch(**fields)

    def state_dict(self) -> dict[str, Any]:
        """Both stores' states: the online buffer's data and generator, the offline generator and fingerprint."""
        return {"online": None if self.online is None else self.online.state_dict(),
                "offline": None if self.offline is None else self.offline.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for name, store in (("online", self.online), ("offline", self.offline)):
            if (store is None) != (state[name] is None):
                raise ValueError(f"MixedSampler.load_state_dict: the checkpoint {'has' if store is None else 'lacks'} "
                                 f"an {name} store, this sampler {'lacks' if store is None else 'has'} one")
            if store is not None:
                store.load_state_dict(state[name])
