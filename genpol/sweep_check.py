"""Every job of a ``--multirun`` sweep validated before the first one starts.

Hydra composes a sweep job's config only when the launcher starts that job. A value that ``validate``
refuses in job 7 of 20 (``learner.lr=1e-3,3e-4,abc``, a head the learner cannot train, a dataset for an
on-policy learner) was found after the jobs before it had trained, hours later; with the basic launcher the
refusal (exit 2) also ended the sweep, so the jobs after it never ran. ``check_sweep`` expands the command
line's sweeps as Hydra's basic sweeper does (the cartesian product of every ``key=a,b``, ``range(..)`` and
``choice(..)``; a key given twice keeps its last value, in its first place), composes and validates each job,
and names the first bad one with its overrides, before anything runs. Each job's folder (``<run_dir>/<job number>``)
is checked as the job checks it when it starts: not inside another run's folder, and, where it holds a saved run, with
the config a resume there takes (a sweep re-run with other values into the same run_dir was refused job by job).

Only sweeps whose jobs run on this machine are checked: the launcher the first job composes with (from the
command line, an experiment or a config of the user's) must be Hydra's basic one (``launcher=local``, the
default), ``joblib`` or ``submitit_local``. Validation includes checks of the machine (``device=cuda`` where
torch sees no GPU), which a SLURM or Ray job passes on its own node; there each job validates when it starts,
and a refused job ends alone. The check also leaves to the jobs what it cannot expand the way Hydra would:
another sweeper or ``hydra.sweeper.params``, ``glob(...)``, a primary config of another folder
(``--config-path``, or ``--config-name`` of one in ``--config-dir``: only Hydra's app composes it; so is any
first job genpol's composition cannot compose, which Hydra then reports at once), Hydra's print and help
flags, and ``${hydra:...}`` values (there is no Hydra app yet).
Sweeps larger than ``MAX_JOBS`` are checked up to it.

A single run's command line is composed the same way first (``check_single_run``), so that a key Hydra
cannot place is refused in one line that names it, as genpol's other config errors are.
"""

from __future__ import annotations

import contextlib
import itertools
import logging
import math
import tempfile
from pathlib import Path
from typing import Any, Iterator, Sequence

from hydra.core.override_parser.overrides_parser import OverridesParser
from hydra.errors import HydraException
from omegaconf import DictConfig, OmegaConf, open_dict, read_write
from omegaconf.errors import InterpolationResolutionError

from genpol.errors import ConfigError

LOCAL_LAUNCHERS = ("BasicLauncher", "JoblibLauncher", "ResumingLocalLauncher", "LocalLauncher")  # class names
MAX_JOBS = 256  # composing and validating a job takes 0.1-0.25 s; a larger sweep is checked up to here
_CANNOT_EXPAND = (HydraException, ValueError, TypeError, NotImplementedError)


@contextlib.contextmanager
def _quiet_logs() -> Iterator[None]:
    previous = logging.root.manager.disable
    logging.disable(logging.WARNING)
    try:
        yield
    finally:
        logging.disable(previous)


def sweep_axes(overrides: Sequence[str]) -> tuple[list[list[str]], list[str]] | None:
    """``(axes, hydra_overrides)``: one list of ``key=value`` items per key (a sweep's values, or the one
    value; a key given twice keeps its last, in its first place), and the ``hydra.*`` overrides, which every job
    shares. None where the sweep cannot be expanded outside Hydra's app (see the module docstring)."""
    try:
        parsed = OverridesParser.create().parse_overrides(list(overrides))
        axes: dict[str, list[str]] = {}
        hydra_items = []
        for override in parsed:
            key = override.get_key_element()
            if override.is_hydra_override():  # shared by every job; a sweep of Hydra's own settings is not followed
                if key.startswith(("hydra/sweeper", "hydra.sweeper")) or override.is_sweep_override():
                    return None
                hydra_items.append(override.input_line)
                continue
            # the last occurrence's values in the first's place, as Hydra's BasicSweeper.split_arguments assigns
            # into an OrderedDict: the jobs' order, and so their numbers and folders, are Hydra's
            axes[key] = ([f"{key}={value}" for value in override.sweep_string_iterator()]
                         if override.is_sweep_override() else [override.input_line])
    except _CANNOT_EXPAND:
        return None
    return list(axes.values()), hydra_items


def jobs_run_here(first_job: DictConfig) -> bool:
    """Whether the launcher and sweeper of a job composed with Hydra's node are ones this check follows."""
    hydra = first_job.hydra
    launcher = str(hydra.launcher.get("_target_", "")).rpartition(".")[2]
    sweeper = str(hydra.sweeper.get("_target_", "")).rpartition(".")[2]
    return launcher in LOCAL_LAUNCHERS and sweeper == "BasicSweeper" and not hydra.sweeper.get("params")


def job_folder(job: DictConfig, number: int) -> Path | None:
    """The folder Hydra runs sweep job ``number`` in: ``hydra.sweep.dir`` / ``hydra.sweep.subdir`` of the job's
    config (genpol's: ``${run_dir}/${hydra.job.num}``), with the number the launchers set; None where only Hydra's
    app can resolve it (a ``${hydra:...}`` value)."""
    with read_write(job.hydra), open_dict(job.hydra):
        job.hydra.job.num = number
    try:
        return Path(str(job.hydra.sweep.dir)) / str(job.hydra.sweep.subdir)
    except InterpolationResolutionError:
        return None


def check_job_folder(folder: Path, config: Any) -> None:
    """``ConfigError`` where the job would be refused in ``folder`` when it starts: a folder inside another run's
    (``check_run_dir``), or a saved run there that its config would not resume (the resume check's own
    ``check_saved_run``, which writes nothing)."""
    from genpol.config import check_run_dir
    from genpol.runners.scaffold import check_saved_run

    check_run_dir(str(folder))
    check_saved_run(folder, config, OmegaConf.to_container(OmegaConf.structured(config), resolve=True))


def check_sweep(overrides: Sequence[str], config_dirs: Sequence[str] = (), config_name: str = "config") -> int:
    """Compose and validate every job of the sweep ``overrides`` describes (up to ``MAX_JOBS``); raise
    ``ConfigError`` naming the first job refused, its overrides and the reason. Returns the jobs checked (0
    where the check leaves the sweep to the jobs)."""
    from genpol.api import compose_config  # the API's composition: renamed keys, users' learners, config_dirs
    from genpol.configure import validate

    expanded = sweep_axes(overrides)
    if expanded is None:
        return 0
    axes, hydra_items = expanded
    total = math.prod(len(axis) for axis in axes)
    jobs = [list(job) for job in itertools.islice(itertools.product(*axes), MAX_JOBS)]
    first = None
    # the jobs log validation's warnings themselves when they run: here they would print once more per job
    with tempfile.TemporaryDirectory(prefix="genpol-sweep-check-") as scratch, _quiet_logs():
        for number, job in enumerate(jobs):
            try:
                composed = compose_config([*hydra_items, *job], config_name=config_name, config_dirs=config_dirs,
                                          return_hydra_config=True)
                # the default run_dir resolves by claiming a new dated folder: one for each job checked, left empty.
                # Only that one is replaced: a run_dir from the command line, an experiment or a config of the
                # user's is the folder whose saved runs the jobs would meet
                if str(OmegaConf.to_container(composed, resolve=False).get("run_dir")).startswith("${genpol.new_dir:"):
                    with read_write(composed):
                        composed.run_dir = f"{scratch}/{number}"
                first = composed if number == 0 else first
                if number == 0 and not jobs_run_here(first):
                    return 0
                folder = job_folder(composed, number)
                with open_dict(composed):  # the job's config less Hydra's node, as compose() and Hydra's jobs have it
                    del composed["hydra"]
                config = validate(composed)
                if folder is not None:
                    check_job_folder(folder, config)
            except InterpolationResolutionError:  # a ${hydra:...} value: only the job itself can resolve it
                continue
            except ConfigError as error:
                if number == 0 and first is None:  # Hydra cannot compose the first job: it says so at once itself
                    return 0
                shown = " ".join(item for item in job if item not in overrides) or "its overrides"
                reason = str(error).rstrip(".")  # the resume check's reason is sentences
                raise ConfigError(f"sweep job {number} of {total} ({shown}): {reason}. No job was started: "
                                  "mend it (or leave it out of the sweep) and launch again") from None
    return len(jobs)


HYDRA_INFO_FLAGS = {"--cfg", "-c", "--help", "-h", "--hydra-help", "--info", "-i", "--shell-completion", "-sc",
                    "--config-path", "-cp", "--version", "--experimental-rerun"}


def hydra_overrides(argv: list[str]) -> tuple[list[str], str | None]:
    """The overrides of a Hydra command line (its arguments less the flags: ``-m``, ``--config-dir X``, ...)
    and its ``--config-name``, if given."""
    with_value = {"--config-dir", "-cd", "--config-name", "-cn", "--package", "-p"}
    overrides, config_name, flag = [], None, None
    for item in argv:
        if flag is not None:
            config_name = item if flag in ("--config-name", "-cn") else config_name
            flag = None
        elif item in with_value:
            flag = item
        elif item.startswith("--config-name="):
            config_name = item.split("=", 1)[1]
        elif not item.startswith("-"):
            overrides.append(item)
    return overrides, config_name


def is_multirun(argv: Sequence[str]) -> bool:
    """Whether a Hydra command line launches a sweep: ``-m`` / ``--multirun``, or ``hydra.mode=MULTIRUN``."""
    return any(item in ("-m", "--multirun") or item.lstrip("+").replace('"', "").replace("'", "")
               == "hydra.mode=MULTIRUN" for item in argv)


def check_single_run(argv: Sequence[str], config_name: str) -> None:
    """Compose a single run's command line as the API does before Hydra's app does, so that a config Hydra
    cannot compose is one ``ConfigError`` line naming the key (``learner.lrr=1``: "did you mean learner.lr?";
    a group's typed schema chosen as an option) where Hydra printed several lines. Left to Hydra as
    ``check_sweep`` leaves them: its print and help flags and a primary config of another name or folder."""
    from genpol.api import compose_config
    from genpol.configure import config_dirs_of

    if any(item.split("=", 1)[0] in HYDRA_INFO_FLAGS for item in argv):
        return
    overrides, named = hydra_overrides(list(argv))
    if named is not None:
        return
    with _quiet_logs():
        compose_config(overrides, config_name=config_name, config_dirs=config_dirs_of(list(argv)),
                       return_hydra_config=True)
