"""A user's own package of tasks, as genpol's tests see one: not part of genpol, imported by name.

``reach`` registers the gymnasium env ``MyReach-v0`` on import; ``batched`` is a small batched torch
simulator with a ``make_env`` factory (``custom:custom_envs.batched:make_env``); ``broken`` holds
copies of it that each break one rule of the protocol; ``raises_on_import`` fails to import.

``sigkill_at_step`` lets a test SIGKILL a training process at an exact env step (in the middle of
an iteration), instead of racing a kill against a fast run.
"""

import multiprocessing
import os
import signal

SIGKILL_ENV = "CUSTOM_ENVS_SIGKILL_AT_STEP"


def sigkill_at_step(step_count: int) -> None:
    """SIGKILL this process when ``step_count`` equals ``$CUSTOM_ENVS_SIGKILL_AT_STEP`` (main process
    only: an env worker that killed itself would make the parent fail with an error instead)."""
    target = os.environ.get(SIGKILL_ENV)
    if target is not None and step_count == int(target) and multiprocessing.parent_process() is None:
        os.kill(os.getpid(), signal.SIGKILL)
