"""Periodic and final checkpoints of the runner (see ``genpol.checkpoint`` for the layout)."""

from __future__ import annotations

from pathlib import Path
from typing import Any, Sequence

import torch

from genpol.callbacks.base import Callback
from genpol.checkpoint import list_checkpoints, save_checkpoint
from genpol.errors import NonFiniteError
from genpol.files import fsync_path


def _non_finite_tensor(tree: Any, where: str = "") -> str | None:
    """The path of the first floating-point tensor in ``tree`` holding NaN or inf (the replay
    buffer's contents are skipped: they are data, checked as they arrive), or None."""
    if isinstance(tree, torch.Tensor):
        return where if tree.is_floating_point() and not bool(torch.isfinite(tree).all()) else None
    if isinstance(tree, dict):
        for key, value in tree.items():
            if key != "replay":
                found = _non_finite_tensor(value, f"{where}.{key}" if where else str(key))
                if found:
                    return found
    if isinstance(tree, (list, tuple)):
        for i, value in enumerate(tree):
            found = _non_finite_tensor(value, f"{where}[{i}]")
            if found:
                return found
    return None


class Checkpointer(Callback):
    """Saves every ``every`` iterations (0: only at the end), keeping the ``keep`` newest.

    Put it after the callbacks whose state it must capture (evaluation history, metrics file).
    At the end of training it saves before every other callback (``end_first``): the final
    evaluation and its video come after the weights are safe. ``synced_first`` are files a resume from
    the checkpoint reads back (the metrics file): they are flushed to disk before it is written, so that
    after a power cut no row the checkpoint's step covers is missing.
    """

    end_first = True

    def __init__(self, checkpoints_dir: str | Path, policy_spec: dict[str, Any], every: int, keep: int,
                 synced_first: Sequence[str | Path] = ()):
        self.checkpoints_dir = Path(checkpoints_dir)
        self.policy_spec = policy_spec
        self.every = every
        self.keep = keep
        self.synced_first = [Path(path) for path in synced_first]
        self.last_path: Path | None = None
        self._last_step = -1

    def latest(self) -> Path | None:
        """The newest checkpoint of this phase on disk (written by this process or an earlier one)."""
        found = list_checkpoints(self.checkpoints_dir)
        return found[-1] if found else None

    def save(self, runner: Any) -> Path:
        """Write a checkpoint of ``runner``; refuses one with a NaN or inf in its weights or state,
        so that the rotation never replaces a good checkpoint with a broken one."""
        weights, state = runner.policy_weights(), runner.training_state()
        bad = _non_finite_tensor({"policy": weights, "training_state": state})
        if bad is not None:
            # a NaN is a NonFiniteError (exit 3) wherever it is found: here it is in what the guard after each
            # iteration does not check (the optimizers' moments, a normalizer's statistics)
            raise NonFiniteError(f"refusing to write a checkpoint at step {runner.global_step}: {bad} holds NaN "
                                 f"or inf; training stopped. The last good checkpoint is {self.latest()}")
        for path in self.synced_first:
            if path.exists():
                fsync_path(path)
        self.last_path = save_checkpoint(self.checkpoints_dir, runner.global_step, self.policy_spec, weights, state,
                                         keep=self.keep)
        self._last_step = runner.global_step
        return self.last_path

    def save_unless_saved(self, runner: Any) -> Path | None:
        """The checkpoint of the runner's current step: the one this iteration wrote, else a new one. A stop on a
        signal at a checkpoint iteration wrote the same step twice (the re-save path: twice the stop's time and
        I/O, where torchrun gives 30 s). Decided from the step alone, so every torchrun rank decides alike."""
        if self._last_step == runner.global_step:
            return self.last_path
        return self.save(runner)

    def on_train_start(self, runner: Any) -> None:
        # a runner starts past step 0 only when it resumed from a checkpoint at that step: the end of a run
        # that has nothing left to train (a finished run run again) need not write it again (with its replay).
        # Decided from the runner alone, so every torchrun rank decides alike (their saves are collective)
        if runner.global_step > 0:
            self._last_step = runner.global_step
            self.last_path = self.latest()

    def on_iteration_end(self, runner: Any, metrics: dict[str, float]) -> None:
        if self.every and runner.iteration % self.every == 0:
            self.save(runner)

    def on_train_end(self, runner: Any) -> None:
        if self._last_step != runner.global_step:
            self.save(runner)
