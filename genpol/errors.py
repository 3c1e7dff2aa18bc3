"""genpol's error types, in one module that imports nothing of genpol.

Every layer raises these, and the entry points turn them into one line and an exit code
(``genpol.train``'s docstring lists the codes). They live at the bottom of the layers so that any
module can raise them without importing the layer that catches them. ``genpol.envs`` keeps its
own ``EnvError``: the simulator layer imports nothing of genpol.
"""

from __future__ import annotations

from typing import Any

# Exit codes of ``python -m genpol.train`` (and genpol-train); 0 means trained to total_steps.
EXIT_BAD_INPUT = 2
"""A bad config, env, dataset or checkpoint, or a run_dir held by another live process."""
EXIT_NON_FINITE = 3
"""NaN or inf in training; the message names the last good checkpoint."""
EXIT_STOPPED = 4
"""Stopped by SIGTERM, SIGINT or SLURM's preemption signal after writing a checkpoint: not finished
(no summary.json), and the same command resumes it."""


class ConfigError(ValueError):
    """A config value out of its range, or two groups that cannot work together; the message names
    the full key."""


class CheckpointError(RuntimeError):
    """A missing, truncated or corrupted checkpoint; the message names the file."""


class DatasetError(ValueError):
    """A missing, malformed or mismatched dataset; the message names the file and the key."""


class HeadCapabilityError(TypeError):
    """A head was asked for something its family does not define (e.g. an exact KL)."""


class RunDirBusyError(RuntimeError):
    """Another live process holds the run directory."""


class TrainingInterrupted(RuntimeError):
    """Training stopped on a signal after writing a checkpoint; the same command resumes it."""


class NonFiniteError(RuntimeError):
    """A NaN or inf appeared; the message says where, when, and which checkpoint is the last good one."""


SEED_LIMIT = 2**31 - 2**20
"""Every seed a user gives is below this. gymnasium seeds with non-negative integers, EnvPool with int32 and
dm_control below 2^32, and env i of a batch is seeded with ``seed + i`` (evaluation and GoRL's stages add their
own offsets): 2^20 leaves them room. A seed of 2^32 failed with a numpy traceback, after the run had started."""


def require_seed(key: str, seed: int) -> None:
    """``require`` for a seed: in ``[0, SEED_LIMIT)``."""
    require(0 <= seed < SEED_LIMIT, key, f"in [0, {SEED_LIMIT}) (EnvPool seeds with int32, and env i with "
            "seed + i)", seed)


def require(condition: bool, key: str, requirement: str, value: Any) -> None:
    """Raise ``ConfigError("<key> must be <requirement>, got <value>")`` unless ``condition``: the range
    check of every schema field, the heads' own configs included."""
    if not condition:
        raise ConfigError(f"{key} must be {requirement}, got {value!r}")
