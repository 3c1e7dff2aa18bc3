"""Every job of a ``--multirun`` sweep validated before the first one starts.

Hydra composes a sweep job's config only when the launcher starts that job. A value that ``validate``
refuses in job 7 of 20 (``learner.lr=1e-3,3e-4,abc``, a head the learner cannot train, a dataset for an
on-policy learner) was found after the jobs before it had trained, hours later; with the basic launcher the
refusal (exit 2) also ended the sweep, so the jobs after it never ran. ``check_sweep`` expands the command
line's sweeps as Hydra's basic sweeper does (the cartesian product of every ``key=a,b`` and ``key=range(..)``),
composes and validates each job, and names the first bad one with its overrides, before anything runs.

Only sweeps whose jobs run on this machine are checked (``launcher=local``, Hydra's basic launcher, the default;
``joblib``; ``submitit_local``): validation includes checks of the machine (``device=cuda`` where torch sees
no GPU), which a SLURM or Ray job passes on its own node. There, each job validates when it starts, and a
refused job ends alone. What it cannot see it leaves to the jobs: a sweeper of another kind (``hydra/sweeper=...``: Optuna's intervals
are not a list of jobs), sweep values only Hydra's app can expand (``glob(...)``), a ``${hydra:...}``
interpolation (there is no Hydra app yet), and sweeps larger than ``MAX_JOBS`` (checked up to it).
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import tempfile
from typing import Iterator, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf.errors import InterpolationResolutionError

from genpol.errors import ConfigError

LOCAL_LAUNCHERS = ("local", "joblib", "submitit_local", "basic")  # genpol's launcher groups (and Hydra's basic)
MAX_JOBS = 256  # composing and validating a job takes ~0.1 s; a larger sweep is checked up to here
_CANNOT_EXPAND = (HydraException, ValueError, TypeError, NotImplementedError)


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


def jobs_run_here(overrides: Sequence[str]) -> bool:
    """Whether the command line's launcher (``launcher=`` or ``hydra/launcher=``; ``local`` by default) runs the
    sweep's jobs on this machine."""
    chosen = [item.split("=", 1)[1] for item in overrides if item.lstrip("+").startswith(("launcher=", "hydra/launcher="))]
    return (chosen[-1] if chosen else "local") in LOCAL_LAUNCHERS


def sweep_jobs(overrides: Sequence[str]) -> list[list[str]] | None:
    """The jobs of a basic sweep, each a list of overrides (``hydra.*`` ones left out); None where this
    command line's sweep cannot be expanded outside Hydra's app (see the module docstring)."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
        axes = []
        for override in parsed:
            if override.is_hydra_override():
                if override.get_key_element().startswith("hydra/sweeper"):
                    return None
                continue
            key = override.get_key_element()
            if override.is_sweep_override():
                axes.append([f"{key}={value}" for value in override.sweep_string_iterator()])
            else:
                axes.append([override.input_line])
    except _CANNOT_EXPAND:
        return None
    return [list(job) for job in itertools.islice(itertools.product(*axes), MAX_JOBS)]


def check_sweep(overrides: Sequence[str], config_dirs: Sequence[str] = ()) -> int:
    """Compose and validate every job of the sweep ``overrides`` describes (up to ``MAX_JOBS``); raise
    ``ConfigError`` naming the first job refused, its overrides and the reason. Returns the jobs checked."""
    from genpol.api import compose_config  # the API's composition: renamed keys, users' learners, config_dirs
    from genpol.configure import validate

    jobs = sweep_jobs(overrides) or []
    given_run_dir = any(item.lstrip("+").startswith("run_dir=") for item in overrides)
    # the jobs log validation's warnings themselves when they run: here they would print once more per job
    with tempfile.TemporaryDirectory(prefix="genpol-sweep-check-") as scratch, _quiet_logs():
        for number, job in enumerate(jobs):
            # the default run_dir resolves by claiming a new dated folder: one for each job checked, left empty
            items = job if given_run_dir else [*job, f"run_dir={scratch}/{number}"]
            try:
                validate(compose_config(items, config_dirs=config_dirs))
            except InterpolationResolutionError:  # a ${hydra:...} value: only the job itself can resolve it
                continue
            except ConfigError as error:
                shown = " ".join(item for item in job if item not in overrides) or "its overrides"
                raise ConfigError(f"sweep job {number} of {len(jobs)} ({shown}): {error}. No job was started: "
                                  "mend it (or leave it out of the sweep) and launch again") from None
    return len(jobs)
