"""Hydra's submitit launchers (``launcher=slurm``, ``launcher=submitit_local``) with a requeue that
loses no training.

How submitit requeues a job: SLURM sends the job ``SIGUSR2`` when it is preempted (with
``SlurmctldParameters=preempt_send_user_signal``) and ``signal_delay_s`` seconds before its time
limit. submitit's handler calls the job callable's ``checkpoint`` hook, which for Hydra's launcher
returns the same job again (``DelayedSubmission(launcher, same overrides, same job number)``),
pickles it, runs ``scontrol requeue`` and exits. The requeued job composes the same config into the
same run directory (``<sweep dir>/<job number>``; the sweep directory's value travels in the pickled
config), and ``genpol.train`` resumes any run directory that holds a checkpoint.

On its own that handler would stop training wherever the signal lands, and the requeued job would
resume from the last periodic checkpoint, redoing the iterations since. Here the job defers the
signal: it asks the training to stop (``guards.request_stop``, as SIGTERM does), the runner writes a
checkpoint at the end of its current iteration and stops, and only then does submitit's own handler
run the ``checkpoint`` hook and requeue. The requeued job resumes from that fresh checkpoint,
bit-identically on CPU. One iteration must therefore fit in ``signal_delay_s``.

Hydra instantiates launchers only from the ``hydra_plugins`` namespace, hence this file's place; the
configs name these classes in ``hydra.launcher._target_``. Without the ``cluster`` extra
(hydra-submitit-launcher) the module defines nothing, so Hydra's plugin scan stays quiet.

SIGTERM (``scancel``; SLURM's last warning before SIGKILL) still checkpoints and stops without a
requeue: a cancelled job stays cancelled, and a job SLURM preempts with its own requeue resumes.
"""

from __future__ import annotations

import logging
import signal
from typing import Any

log = logging.getLogger(__name__)


class _CheckpointBeforeRequeue:
    """Mixed into a submitit launcher: its jobs defer submitit's preemption handler until the
    training has checkpointed (see the module docstring)."""

    def __call__(self, *args: Any, **kwargs: Any) -> Any:
        import submitit

        from genpol.errors import EXIT_STOPPED
        from genpol.runners.guards import request_stop

        preemption_signal = submitit.JobEnvironment._usr_sig()  # SIGUSR2 unless SUBMITIT_PREEMPT_SIGNAL says otherwise
        submitit_handler = signal.getsignal(preemption_signal)
        received: list[int] = []

        def defer(number: int, frame: Any) -> None:
            received.append(number)
            request_stop(signal.Signals(number).name)

        signal.signal(preemption_signal, defer)
        try:
            return super().__call__(*args, **kwargs)  # type: ignore[misc]
        except SystemExit as exit_:
            # genpol.train exits EXIT_STOPPED after checkpointing on a stop request; anything else fails
            if not received or exit_.code != EXIT_STOPPED or not callable(submitit_handler):
                raise
            stopped = exit_
        finally:
            signal.signal(preemption_signal, submitit_handler)
        log.warning("%s: the run checkpointed and stopped; submitit requeues the job, which resumes it",
                    signal.Signals(received[0]).name)
        submitit_handler(received[0], None)  # calls self.checkpoint (the same job again), requeues, exits
        raise stopped  # only reached on a task other than the first, which submitit never requeues


try:
    from hydra_plugins.hydra_submitit_launcher.submitit_launcher import LocalLauncher, SlurmLauncher
except ImportError:
    pass
else:

    class ResumingSlurmLauncher(_CheckpointBeforeRequeue, SlurmLauncher):
        """``launcher=slurm``: Hydra's submitit SLURM launcher whose requeued jobs resume their runs."""

    class ResumingLocalLauncher(_CheckpointBeforeRequeue, LocalLauncher):
        """``launcher=submitit_local``: the same on this machine (submitit's local executor requeues a
        job that exits with its requeue code, up to 6 times)."""
