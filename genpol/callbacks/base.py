"""Callbacks: everything the training loop hands to the outside world goes through them."""

from __future__ import annotations

from typing import Any, Sequence


class Callback:
    """Hooks the runner calls. ``metrics`` maps TensorBoard names to floats; a callback may add
    entries (evaluation results) for the callbacks after it."""

    def on_train_start(self, runner: Any) -> None:
        """Before the first iteration (also after a resume)."""

    def on_iteration_end(self, runner: Any, metrics: dict[str, float]) -> None:
        """After each collect-and-update iteration."""

    def on_train_end(self, runner: Any) -> None:
        """After the last iteration."""

    def state_dict(self) -> dict[str, Any]:
        """State that must survive a resume (saved in the checkpoint's training state)."""
        return {}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        """Restore ``state_dict``."""


class CallbackList(Callback):
    """Calls each callback in order; their states are saved under their class names."""

    def __init__(self, callbacks: Sequence[Callback]):
        self.callbacks = list(callbacks)

    def on_train_start(self, runner: Any) -> None:
        for callback in self.callbacks:
            callback.on_train_start(runner)

    def on_iteration_end(self, runner: Any, metrics: dict[str, float]) -> None:
        for callback in self.callbacks:
            callback.on_iteration_end(runner, metrics)

    def on_train_end(self, runner: Any) -> None:
        for callback in self.callbacks:
            callback.on_train_end(runner)

    def state_dict(self) -> dict[str, Any]:
        return {type(callback).__name__: callback.state_dict() for callback in self.callbacks}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for callback in self.callbacks:
            if type(callback).__name__ in state:
                callback.load_state_dict(state[type(callback).__name__])
