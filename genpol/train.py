"""``python -m genpol.train env=<group> policy=<group> learner=<group> seed=<int> total_steps=<int> run_dir=<path>``

Any gymnasium Box env: ``env=gym env.id=Pendulum-v1``. Sweeps: ``--multirun seed=0,1,2``.
Re-running with the same ``run_dir`` resumes from its latest checkpoint.

Under ``torchrun --nproc_per_node=N -m genpol.train ...`` one run trains on N processes (detected
from torchrun's variables; see ``genpol/distributed.py``); rank 0 writes the files.

Exit codes (``genpol.errors``): 0 trained to ``total_steps``; 2 a bad config, env, dataset or
checkpoint, or a run_dir held by another live process; 3 NaN or inf in training (the message names
the last good checkpoint); 4 stopped by SIGTERM, SIGINT or SLURM's preemption signal after writing
a checkpoint: not finished, so ``genpol-train ... && genpol-evaluate ...`` stops there, and the same
command resumes the run.
"""

from __future__ import annotations

import contextlib
import io
import json
import logging
import os
import re
import sys
from pathlib import Path
from typing import Any

import hydra
from hydra.core.hydra_config import HydraConfig
from hydra.types import RunMode
from omegaconf import DictConfig, OmegaConf

from genpol import collectives, distributed
from genpol.config import TrainConfig, check_run_dir
from genpol.config.base import release_new_dir
from genpol.config.aliases import quoted, rename_overrides
from genpol.configure import config_dirs_of, import_learner_modules, register_configs, validate
from genpol.envs import EnvError
from genpol.errors import (EXIT_BAD_INPUT, EXIT_NON_FINITE, EXIT_STOPPED, CheckpointError, ConfigError,
                           DatasetError, NonFiniteError, RunDirBusyError, TrainingInterrupted)
from genpol.runners.guards import LOCK_NAME
from genpol.sweep_check import HYDRA_INFO_FLAGS, check_single_run, hydra_overrides, is_multirun

register_configs()
log = logging.getLogger(__name__)


def run_training(cfg: TrainConfig, run_dir: str | Path) -> dict[str, Any]:
    """Dispatch to the configured pipeline; returns its summary.

    The run holds ``run_dir``'s lock throughout (a second writer fails at once), and SIGTERM or
    SIGINT make it checkpoint at the end of the current iteration and raise ``TrainingInterrupted``.
    Started by torchrun with several processes, it joins their process group for the run (each
    rank with its own seed, see ``genpol.distributed``) and leaves it at the end.
    """
    from genpol.pipelines import PIPELINES
    from genpol.runners.guards import hold_run_dir, stop_on_signals

    joined = distributed.launched_by_torchrun() and collectives.world_size() == 1
    if joined:
        cfg = distributed.init_from_torchrun(cfg)
        run_dir = collectives.broadcast_object(str(run_dir))  # a ${now:...} default differs between ranks
    finished = False
    try:
        with contextlib.ExitStack() as held:
            # under torchrun rank 0 alone holds the directory (the others write nothing there), and tells the
            # others whether it got it: refused, they went on, and cleared the live run's checkpoint in the making
            refused = None
            if collectives.is_main():
                try:
                    held.enter_context(hold_run_dir(run_dir))
                except RunDirBusyError as error:
                    refused = str(error)
            refused = collectives.broadcast_object(refused)
            if refused is not None:
                raise RunDirBusyError(refused)
            held.enter_context(stop_on_signals())
            summary = PIPELINES[cfg.pipeline.name](cfg, run_dir)
        finished = True
        return summary
    except TrainingInterrupted:  # a signal stops every rank at the same iteration
        finished = True
        raise
    finally:
        if joined:  # after an error the other ranks may never arrive: leave without waiting
            distributed.shutdown(wait_for_others=finished)


_composed = {"runs": 0}  # how many configs Hydra handed to train_from_config in this process


@hydra.main(version_base="1.3", config_path="pkg://genpol.configs", config_name="config")
def train_from_config(cfg: DictConfig) -> None:
    _composed["runs"] += 1
    hydra_config = HydraConfig.get()
    launcher = hydra_config.runtime.choices.get("launcher") or "local"  # genpol's group, as the user wrote it
    if hydra_config.mode == RunMode.RUN and launcher != "local":  # Hydra launches only sweeps
        log.warning("launcher=%s sends --multirun sweeps; without --multirun this run trains here, in this process",
                    launcher)
    if OmegaConf.is_interpolation(cfg, "run_dir"):
        # run_dir left to its default, the folder given as hydra.run.dir (hydra.sweep.dir) instead: the default was
        # never resolved for Hydra's folder, and resolving it here claimed a second, empty one (one per sweep job),
        # which config.yaml then named. (Otherwise both are the value Hydra resolved, cached: nothing changes.)
        cfg.run_dir = (hydra_config.runtime.output_dir if hydra_config.mode == RunMode.RUN
                       else str(Path(hydra_config.sweep.dir).absolute()))
    try:
        if hydra_config.mode == RunMode.MULTIRUN:  # a job's own folder, <run_dir>/<number>: in no other run's files
            check_run_dir(hydra_config.runtime.output_dir)  # (main checks a single run's run_dir before Hydra makes it)
        config = validate(cfg)
        summary = run_training(config, hydra_config.runtime.output_dir)
    except (ConfigError, EnvError, CheckpointError, DatasetError, RunDirBusyError) as error:
        # the default folder claimed for this refused command (runs/<date>/<time>) was left per refusal, with
        # Hydra's log (the console had its lines), and the config and lock of a run that never trained
        release_new_dir(hydra_config.runtime.output_dir, files=("train.log", LOCK_NAME, "config.yaml"))
        print(f"genpol: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    except NonFiniteError as error:
        print(f"genpol: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(EXIT_NON_FINITE)
    except TrainingInterrupted as error:  # checkpointed, not finished: the same command resumes
        print(f"genpol: {error}", file=sys.stderr)
        sys.exit(EXIT_STOPPED)
    if not distributed.launched_by_torchrun() or os.environ["RANK"] == "0":  # one summary per run
        print(json.dumps(summary, indent=2))


def register_launchers() -> None:
    """Register genpol's launcher plugins (``launcher=slurm``, ``launcher=submitit_local``) with Hydra by hand.

    Hydra finds plugins by walking the ``hydra_plugins`` namespace's folders (pkgutil), which an editable
    install (``pip install -e``, the Makefile's setup) maps through an import hook that walk does not see:
    outside the checkout those launchers failed as "Unknown plugin class". A wheel's scan finds them anyway.
    Without hydra-submitit-launcher the module defines no launcher, and Hydra names the missing plugin."""
    from hydra.core.plugins import Plugins

    try:
        from hydra_plugins.genpol_launchers import resuming_submitit
    except ImportError:  # a genpol installed without the plugin folder: Hydra names it if a launcher asks
        return
    for name in ("ResumingSlurmLauncher", "ResumingLocalLauncher"):
        launcher = getattr(resuming_submitit, name, None)
        if launcher is not None:
            Plugins.instance().register(launcher)


def check_local_sweep(argv: list[str]) -> None:
    """Validate every job of a ``--multirun`` sweep that runs on this machine before the first starts
    (``genpol.sweep_check``): a refused job used to surface only when its turn came, hours in. Left to Hydra:
    its print and help flags, and a primary config from another folder (``--config-path``)."""
    from genpol.sweep_check import check_sweep

    if any(item.split("=", 1)[0] in HYDRA_INFO_FLAGS for item in argv):
        return
    overrides, config_name = hydra_overrides(argv)
    check_sweep(overrides, config_dirs_of(argv), config_name or "config")


def print_help() -> None:
    """Hydra's ``--help``, without the groups' typed schemas (``schema_ppo``, ...): they sit beside the options in
    Hydra's store, so its list of each group's options named them, and choosing one is refused."""
    text = io.StringIO()
    try:
        with contextlib.redirect_stdout(text):
            train_from_config()
    finally:
        shown = re.sub(r", schema_\w+$", "", re.sub(r"\bschema_\w+, ", "", text.getvalue()), flags=re.M)
        print(shown, end="")


def expand_home(item: str) -> str:
    """``run_dir=~/runs/x`` (quoted or not) with the home folder written out, as the API and evaluate take it:
    Hydra makes the folder as written, so a run trained in ``./~/runs/x``, where nothing looks for it."""
    key, sep, value = item.partition("=")
    path = value.strip("'\"")
    if not sep or key.lstrip("+") != "run_dir" or not path.startswith("~") or "," in path or "${" in path:
        return item
    return f"{key}={quoted(os.path.expanduser(path))}"


def main() -> None:
    """The command line (``python -m genpol.train``, ``genpol-train``): renamed keys in the
    arguments (``updater=`` is now ``learner=``) are rewritten, with a warning, before Hydra reads them."""
    sys.argv[1:] = [expand_home(item) for item in rename_overrides(sys.argv[1:])]
    register_launchers()
    try:  # a learner of the user's own registers its schema before Hydra composes
        for item in sys.argv[1:]:  # Hydra makes run_dir its output folder before genpol sees the config
            if item.lstrip("+").startswith("run_dir="):
                check_run_dir(item.split("=", 1)[1].strip("'\""))  # run_dir='' is Hydra's empty string
        import_learner_modules(sys.argv[1:], config_dirs_of(sys.argv[1:]))
        if is_multirun(sys.argv[1:]):
            check_local_sweep(sys.argv[1:])
        else:  # Hydra's own refusal of a misspelt key is six lines suggesting a '+' that adds a key nothing reads
            check_single_run(sys.argv[1:], "config")
    except ConfigError as error:
        print(f"genpol: {type(error).__name__}: {error}", file=sys.stderr)
        sys.exit(EXIT_BAD_INPUT)
    register_configs()
    if any(item in ("--help", "-h") for item in sys.argv[1:]):
        print_help()
        return
    try:
        train_from_config()
    except SystemExit as stop:
        # Hydra reports a config it cannot compose (an unknown group option, a value of the wrong type, a
        # misspelt key) itself, naming the key, and exits 1; a single run that never reached train_from_config
        # had bad input, so its exit code is the other config errors' 2. (A sweep's jobs may run elsewhere.)
        multirun = is_multirun(sys.argv[1:])
        if stop.code == 1 and _composed["runs"] == 0 and not multirun:
            sys.exit(EXIT_BAD_INPUT)
        raise


if __name__ == "__main__":
    main()
