"""Nothing lost when something fails: one writer per run directory, a checkpoint on SIGTERM or
SIGINT, and a stop (never a checkpoint) when values turn non-finite.

* ``hold_run_dir``: an OS lock (``flock``) on ``<run_dir>/.genpol.lock`` for the whole run. A
  second process (or a second run in this one) that tries to use the directory fails at once,
  naming the holder's PID and host. The kernel drops the lock when its holder dies, so a lock
  left by a SIGKILLed run never blocks the resume.
* ``stop_on_signals``: SIGTERM (SLURM before preemption, ``timeout``, container stops) and SIGINT
  (Ctrl-C) set a flag; the runner checkpoints at the end of its current iteration and raises
  ``TrainingInterrupted``. Re-running the same command resumes, bit-identically on CPU.
* ``NonFiniteError``: NaN or inf in observations, rewards, losses or parameters stops training
  with where it appeared, the iteration and env step, and the last good checkpoint. Checkpoints
  refuse non-finite weights, so the rotation only ever deletes older good ones.
"""

from __future__ import annotations

import contextlib
import fcntl
import math
import os
import signal
import socket
import threading
from pathlib import Path
from typing import Any, Iterator

import torch

from genpol import collectives
from genpol.errors import NonFiniteError, RunDirBusyError, TrainingInterrupted

LOCK_NAME = ".genpol.lock"


@contextlib.contextmanager
def hold_run_dir(run_dir: str | Path) -> Iterator[None]:
    """Hold ``run_dir``'s lock while the body runs (see the module docstring)."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    path = run_dir / LOCK_NAME
    handle = open(path, "a+")
    try:
        fcntl.flock(handle, fcntl.LOCK_EX | fcntl.LOCK_NB)
    except BlockingIOError:
        handle.seek(0)
        holder = handle.read().strip() or "unknown process"
        handle.close()
        raise RunDirBusyError(f"{run_dir} is in use by {holder}; wait for it to finish or stop it, "
                              "or use another run_dir") from None
    try:
        handle.seek(0)
        handle.truncate()
        handle.write(f"pid {os.getpid()} on host {socket.gethostname()}\n")
        handle.flush()
        yield
    finally:
        fcntl.flock(handle, fcntl.LOCK_UN)
        handle.close()


class StopFlag:
    """Set by the signal handlers of ``stop_on_signals``; runners poll it between iterations."""

    signal_name: str | None = None


STOP = StopFlag()


@contextlib.contextmanager
def stop_on_signals() -> Iterator[None]:
    """Turn SIGTERM and SIGINT into ``STOP.signal_name`` for the body (main thread only; elsewhere
    the default handling stays)."""
    if threading.current_thread() is not threading.main_thread():
        yield
        return
    previous = {}

    def request_stop(number: int, frame: Any) -> None:
        STOP.signal_name = signal.Signals(number).name

    # a stop requested before the body (a launcher's preemption signal during start-up) stays set
    for number in (signal.SIGTERM, signal.SIGINT):
        previous[number] = signal.signal(number, request_stop)
    try:
        yield
    finally:
        for number, handler in previous.items():
            signal.signal(number, handler)
        STOP.signal_name = None


def request_stop(signal_name: str) -> None:
    """Ask the running training to checkpoint and stop after its current iteration, as SIGTERM
    does (for a launcher's own signal handler, e.g. SLURM preemption through submitit)."""
    STOP.signal_name = signal_name


def raise_if_stopped(work: str) -> None:
    """Between the steps of work that writes no checkpoint until it is done (GoRL's collection and decoder fit):
    if a signal asked to stop, raise ``TrainingInterrupted`` now. (Acted on only after an iteration, such work
    ran to its end first, minutes at GoRL's sizes, past a scheduler's grace period (SLURM's KillWait: 30 s), and
    was redone after the SIGKILL anyway.)"""
    if STOP.signal_name is not None:
        raise TrainingInterrupted(f"{STOP.signal_name} received during {work}: stopped, keeping what finished "
                                  f"before it; re-run the same command to resume ({work} starts over)")


def stop_if_requested(runner: Any) -> None:
    """After an iteration: if a signal asked to stop, checkpoint now and raise ``TrainingInterrupted``."""
    # under torchrun every rank stops at the same iteration, whichever of them the signal reached
    if not collectives.any_rank(STOP.signal_name is not None):
        return
    path = runner.callbacks.save_checkpoint(runner)
    received = STOP.signal_name or "a signal to another rank"
    raise TrainingInterrupted(f"{received} received: stopped at step {runner.global_step} after writing "
                              f"{path}; re-run the same command to resume")


def _first_non_finite(named: dict[str, Any]) -> str | None:
    for name, value in named.items():
        if isinstance(value, torch.Tensor):
            if value.is_floating_point() and not bool(torch.isfinite(value).all()):
                return name
        elif isinstance(value, float) and not math.isfinite(value):
            return name
    return None


def check_finite(runner: Any, groups: list[tuple[str, dict[str, Any]]], actions: str | None = None) -> None:
    """Raise ``NonFiniteError`` if any tensor or float of the ``(what, named)`` groups is NaN or inf, naming the
    first culprit of every group that has one: a diverged policy shows in its parameters, its losses and the
    data it then collected at once, and naming only one of them blamed the env for the policy's NaN actions.
    ``actions``: the env's refusal of a non-finite action in the iteration, a culprit in any case."""
    culprits = [f"{what} '{culprit}'" for what, named in groups if (culprit := _first_non_finite(named)) is not None]
    culprits += [f"actions ({actions})"] if actions is not None else []
    if not culprits:
        return
    last = runner.callbacks.last_checkpoint()
    where = ", ".join(culprits)
    raise NonFiniteError(
        f"non-finite values in {where} at iteration {runner.iteration + 1} (step {runner.global_step}); "
        f"training stopped. The last good checkpoint is {last or 'none (none was written yet)'}"
        f"{'; re-run the same command to resume from it' if last else ''}"
    )


def module_tensors(modules: dict[str, torch.nn.Module | torch.Tensor]) -> dict[str, torch.Tensor]:
    """``{"<module>.<parameter>": tensor}`` of every parameter (and loose tensor) in ``modules``."""
    tensors: dict[str, torch.Tensor] = {}
    for prefix, module in modules.items():
        if isinstance(module, torch.Tensor):
            tensors[prefix] = module
        else:
            tensors.update({f"{prefix}.{name}": p for name, p in module.named_parameters()})
    return tensors
