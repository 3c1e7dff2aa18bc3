"""The plumbing every script in bench/ shares: where things are, the machine and the date that results
record, reading and writing ``bench/results/*.json``, training a run once, and reading a run's files.

Scripts run as ``python bench/<name>.py``. Python puts the script's own folder first on ``sys.path``,
so ``from common import ...`` and imports of sibling scripts (``from throughput import genpol_run``)
work without editing ``sys.path``; genpol comes from the installed (editable) package, or from a
bare checkout on ``PYTHONPATH`` (``genpol/__init__.py`` maps ``envs/`` and ``configs/`` there too).

This module imports only the standard library at load time: scripts that only launch
``python -m genpol.train`` children stay quick to start, and torch or genpol load when a function
needs them.
"""

from __future__ import annotations

import fcntl
import json
import os
import platform
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Callable, Sequence

ROOT = Path(__file__).resolve().parent.parent  # the repository
RESULTS = ROOT / "bench" / "results"  # every script's JSON (and a few PNGs)
RUNS = ROOT / "bench" / "runs"  # training runs, one folder per script (git-ignored, resumable)
# stable-baselines3 (the peer in several scripts) makes a new SB3-<date> folder in the temp directory at every
# learn() unless SB3_LOGDIR names one, and never removes it (sac_throughput's chunked learn() left 289 here)
os.environ.setdefault("SB3_LOGDIR", str(RUNS / "sb3_logs"))


# --------------------------------------------------------------------------- the machine and the date
def date_stamp(seconds: float | None = None) -> str:
    """``"YYYY-MM-DD HH:MM"`` in local time, of now or of ``seconds`` since the epoch: the ``date``
    field of the results files."""
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(seconds))


def cpu_name() -> str:
    """``"<model name> x<logical CPUs>"`` from /proc/cpuinfo (e.g. ``"AMD EPYC x2"``); the architecture
    where that file is missing."""
    cpuinfo = Path("/proc/cpuinfo")
    names = [line.split(":", 1)[1].strip() for line in cpuinfo.read_text().splitlines()
             if line.startswith("model name")] if cpuinfo.exists() else []
    return f"{names[0]} x{len(names)}" if names else platform.machine()


def cpu_model() -> dict[str, Any]:
    """The CPU as /proc/cpuinfo identifies it beyond its marketing name, which is often only ``"AMD
    EPYC"`` (``genpol.onednn.cpu_identity``: vendor, family, model, widest vector extension; AMD family
    25 model 17 is Zen 4). Per-CPU figures (the GEMM libraries' relative speed) follow these, not the name."""
    from genpol.onednn import cpu_identity  # here, not at the top: it imports torch (module docstring)

    return cpu_identity()


def usable_cores() -> int:
    """The cores this process may run on (its affinity: ``taskset``, a SLURM allocation, a container's cpuset);
    ``os.cpu_count()`` counts the machine's, which overstated a run pinned to one core."""
    return len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)


def machine() -> dict[str, Any]:
    """This machine as the results files describe it, one field per fact:

    ``cpu`` (``cpu_name()``), ``processor`` (``platform.processor()``, or the architecture where that
    is empty, as on most Linux), ``arch`` (``platform.machine()``, e.g. ``"x86_64"``), ``cores``
    (``usable_cores()``), ``torch`` (its version), ``torch_threads`` (``torch.get_num_threads()``
    now: call it after the script has set its threads) and ``cpu_model`` (``cpu_model()``: "AMD EPYC"
    alone named both a Zen 4 and a Zen 5 here).

    Each results file keeps the fields (and the strings built from them) it has always had, so that
    old and new files compare; new scripts can store the whole dict.
    """
    import torch  # here, not at the top: see the module docstring

    return {"cpu": cpu_name(), "processor": platform.processor() or platform.machine(), "arch": platform.machine(),
            "cores": usable_cores(), "torch": torch.__version__, "torch_threads": torch.get_num_threads(),
            "cpu_model": cpu_model()}


def load_average() -> float | None:
    """The 1-minute load average as /proc/loadavg prints it (two decimals); None where the file is missing.
    (``os.getloadavg()``, which other scripts record, returns the kernel's value in finer binary fractions.)"""
    path = Path("/proc/loadavg")
    return float(path.read_text().split()[0]) if path.exists() else None


# --------------------------------------------------------------------------- results files
def read_results(name: str) -> dict[str, Any]:
    """The JSON object of ``bench/results/<name>``, or ``{}`` if there is none yet: scripts that keep the
    runs of earlier invocations merge into it."""
    path = RESULTS / name
    return json.loads(path.read_text()) if path.exists() else {}


def write_results(name: str, payload: Any, indent: int = 2) -> Path:
    """Write ``payload`` as JSON to ``bench/results/<name>`` and return the path.

    The text goes to a temporary file in the same folder that then replaces the old one, so an
    interrupted write or a concurrent reader never sees half a file.
    """
    path = RESULTS / name
    RESULTS.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.tmp")
    partial.write_text(json.dumps(payload, indent=indent))
    os.replace(partial, path)
    return path


def update_results(name: str, merge: Callable[[dict[str, Any]], Any], indent: int = 2) -> Path:
    """Write ``merge(<the file's current contents, {} if none>)`` to ``bench/results/<name>``, with the read
    and the write under an exclusive lock on ``<name minus .json>.lock`` (git-ignored): two invocations
    running side by side (one per core) then keep each other's entries instead of the last writer's alone."""
    path = RESULTS / name
    RESULTS.mkdir(parents=True, exist_ok=True)
    with open(path.with_suffix(".lock"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return write_results(name, merge(read_results(name)), indent)


# --------------------------------------------------------------------------- training runs
def run_python(args: Sequence[str], *, quiet: bool = False, echo: bool = False) -> None:
    """Run ``python <args>`` with this interpreter from the repository root and wait for it; raise
    ``subprocess.CalledProcessError`` if it fails.

    ``quiet`` sends the child's stdout (progress, the summary) to /dev/null; its stderr stays, so errors
    show. ``echo`` prints ``$ <args>`` first. The child runs with ``PYTHONWARNINGS=ignore``: library
    deprecation warnings repeated by every run would bury the benchmark's own output.
    """
    if echo:
        print("$", " ".join(args), flush=True)
    subprocess.run([sys.executable, *args], cwd=ROOT, check=True, env={**os.environ, "PYTHONWARNINGS": "ignore"},
                   stdout=subprocess.DEVNULL if quiet else None)


def train_once(run_dir: Path, overrides: Sequence[str], *, steps: int | None = None,
               marker: str = "summary.json", echo: bool = False) -> dict[str, Any]:
    """Train ``python -m genpol.train <overrides> run_dir=<run_dir>`` unless that run is done; return the
    marker's JSON (a summary).

    Done: ``run_dir/marker`` exists and, when ``steps`` is given, records ``env_steps >= steps``. Anything
    else runs the command, and genpol.train resumes a run_dir from its latest checkpoint: an interrupted
    run continues, and a finished one with fewer steps is extended to the ``total_steps`` in ``overrides``.
    ``marker`` ``"pretrain/summary.json"`` counts a run as done once its offline phase is. The child's
    stdout is discarded; ``echo`` prints the command and, once it ends, its wall time.
    """
    path = Path(run_dir) / marker
    if path.exists() and (steps is None or json.loads(path.read_text())["env_steps"] >= steps):
        check_saved_config(Path(run_dir), overrides)
        return json.loads(path.read_text())
    start = time.time()
    run_python(["-m", "genpol.train", *overrides, f"run_dir={run_dir}"], quiet=True, echo=echo)
    if echo:
        print(f"  done in {time.time() - start:.0f} s", flush=True)
    return json.loads(path.read_text())


def check_saved_config(run_dir: Path, overrides: Sequence[str]) -> None:
    """``ConfigError`` naming the keys where a finished run's ``config.yaml`` differs from what ``overrides``
    compose now (genpol.train's resume rule, which a done run never reaches): a job whose settings changed
    since (a bundle edited, an override added) was reported under the new settings with the old run's numbers."""
    from omegaconf import OmegaConf  # here: this module loads with the standard library alone

    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.runners.scaffold import compare_saved_config

    cfg = validate(compose_config([*overrides, f"run_dir={run_dir}"]))
    current = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    compare_saved_config(run_dir, run_dir / "config.yaml", cfg, current)


def read_summary(run_dir: Path, phase: str = "") -> dict[str, Any]:
    """``run_dir/<phase>/summary.json``: the final evaluation and totals of a finished run (``phase``
    ``"pretrain"``: of its offline phase)."""
    return json.loads((Path(run_dir) / phase / "summary.json").read_text())


def read_progress(run_dir: Path, phase: str = "") -> list[dict[str, Any]]:
    """The rows of ``run_dir/<phase>/progress.jsonl`` (``genpol.callbacks.logging.read_metrics``), one per
    logged iteration: ``global_step``, ``iteration``, ``wall_time`` and that iteration's metrics
    (``eval/...`` only on iterations that evaluated); ``[]`` if the file is missing."""
    from genpol.callbacks.logging import read_metrics  # here: genpol.callbacks imports torch

    return read_metrics(Path(run_dir) / phase / "progress.jsonl")


def curve(rows: Sequence[dict[str, Any]], key: str) -> list[tuple[int, float]]:
    """``(global_step, row[key])`` for the progress rows that logged ``key``, in order."""
    return [(row["global_step"], row[key]) for row in rows if key in row]
