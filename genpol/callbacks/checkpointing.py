"""Periodic and final checkpoints of the runner (see ``genpol.checkpoint`` for the layout)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from genpol.callbacks.base import Callback
from genpol.checkpoint import save_checkpoint


class Checkpointer(Callback):
    """Saves every ``every`` iterations (0: only at the end), keeping the ``keep`` newest.

    Put it after the callbacks whose state it must capture (evaluation history, metrics file).
    At the end of training it saves before every other callback (``end_first``): the final
    evaluation and its video come after the weights are safe.
    """

    end_first = True

    def __init__(self, checkpoints_dir: str | Path, policy_spec: dict[str, Any], every: int, keep: int):
        self.checkpoints_dir = Path(checkpoints_dir)
        self.policy_spec = policy_spec
        self.every = every
        self.keep = keep
        self.last_path: Path | None = None
        self._last_step = -1

    def save(self, runner: Any) -> Path:
        self.last_path = save_checkpoint(
            self.checkpoints_dir, runner.global_step, self.policy_spec, runner.policy_weights(),
            runner.training_state(), keep=self.keep,
        )
        self._last_step = runner.global_step
        return self.last_path

    def on_iteration_end(self, runner: Any, metrics: dict[str, float]) -> None:
        if self.every and runner.iteration % self.every == 0:
            self.save(runner)

    def on_train_end(self, runner: Any) -> None:
        if self._last_step != runner.global_step:
            self.save(runner)
