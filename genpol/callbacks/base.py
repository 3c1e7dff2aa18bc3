"""Callbacks: everything the training loop hands to the outside world goes through them."""

from __future__ import annotations

import logging
from typing import Any, ClassVar, Sequence

log = logging.getLogger("genpol")


def failure_hint(error: BaseException) -> str:
    """One line: the error and, where the cause is known, how to fix it."""
    text = f"{type(error).__name__}: {error}".splitlines()[0]
    lowered = text.lower()
    if "pygame" in lowered:
        return f"{text} (fix: pip install \"gymnasium[classic_control]\")"
    if any(word in lowered for word in ("egl", "osmesa", "glfw", "mujoco_gl", "opengl", "gladloadgl")):
        return (f"{text} (fix: set MUJOCO_GL=egl or osmesa and install libegl1 libegl-mesa0 libgl1-mesa-dri "
                "or libosmesa6, as make setup does)")
    if "ffmpeg" in lowered:
        return f"{text} (fix: pip install imageio-ffmpeg)"
    return text


class Callback:
    """Hooks the runner calls. ``metrics`` maps TensorBoard names to floats; a callback may add
    entries (evaluation results) for the callbacks after it.

    At the end of training, callbacks with ``end_first`` (the checkpointer) run before the others
    and their errors propagate; an error in any other callback's ``on_train_end`` (an evaluation
    that cannot render, a plot, the summary) costs that callback's artifact alone: it is logged as
    a one-line warning and listed in ``CallbackList.failures``.
    """

    end_first: ClassVar[bool] = False

    def on_train_start(self, runner: Any) -> None:
        """Before the first iteration (also after a resume)."""

    def on_iteration_end(self, runner: Any, metrics: dict[str, float]) -> None:
        """After each collect-and-update iteration."""

    def on_env_step(self, runner: Any) -> None:
        """After each vector env step of an off-policy iteration (one lasts minutes on a CPU at RLPD's or
        MaxEntDP's sizes); keep it cheap."""

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
        # those that act on every env step: the loop over the others would run thousands of times an iteration
        self.stepping = [callback for callback in self.callbacks
                         if type(callback).on_env_step is not Callback.on_env_step]
        self.failures: dict[str, str] = {}  # callback class name -> one-line cause, at the end of training

    def on_train_start(self, runner: Any) -> None:
        for callback in self.callbacks:
            callback.on_train_start(runner)

    def on_iteration_end(self, runner: Any, metrics: dict[str, float]) -> None:
        for callback in self.callbacks:
            callback.on_iteration_end(runner, metrics)

    def on_env_step(self, runner: Any) -> None:
        for callback in self.stepping:
            callback.on_env_step(runner)

    def on_train_end(self, runner: Any) -> None:
        for callback in self.callbacks:
            if callback.end_first:
                callback.on_train_end(runner)
        for callback in self.callbacks:
            if callback.end_first:
                continue
            try:
                callback.on_train_end(runner)
            except Exception as error:  # noqa: BLE001 - the weights are saved; lose this artifact only
                cause = failure_hint(error)
                self.failures[type(callback).__name__] = cause
                log.warning("%s failed at the end of training, the checkpoint is saved: %s",
                            type(callback).__name__, cause)

    def _checkpointer(self) -> Any:
        return next((callback for callback in self.callbacks if hasattr(callback, "save")), None)

    def save_checkpoint(self, runner: Any) -> Any:
        """Write a checkpoint now (a stop on a signal), unless this step's is written; returns its path, or None
        without a checkpointer."""
        checkpointer = self._checkpointer()
        return None if checkpointer is None else checkpointer.save_unless_saved(runner)

    def last_checkpoint(self) -> Any:
        """The newest checkpoint on disk, or None."""
        checkpointer = self._checkpointer()
        return None if checkpointer is None else checkpointer.latest()

    def state_dict(self) -> dict[str, Any]:
        return {type(callback).__name__: callback.state_dict() for callback in self.callbacks}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        for callback in self.callbacks:
            if type(callback).__name__ in state:
                callback.load_state_dict(state[type(callback).__name__])
