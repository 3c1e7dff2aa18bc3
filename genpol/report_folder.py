"""Where ``genpol.report`` may write: an output folder of its own, never among a run's files.

A run directory's ``tb/`` holds its TensorBoard events and ``checkpoints/`` its resumable state; a report
written there would be read (or replaced) as the run's. The report marks the folders it writes
(``REPORT_MARKER``), so a re-run may replace its own ``curves/`` and ``tb/`` and nothing else."""

from __future__ import annotations

import json
from pathlib import Path

REPORT_MARKER = ".genpol-report"  # in an output folder: the report wrote it; a re-run may replace its curves/, tb/
REPORT_FILES = ("report.md", "report.json", "curves", "tb")  # what the report writes into its folder


class OutputFolderError(ValueError):
    """An output folder (``--out``) the report must not write into: a run directory, a folder holding runs, or
    one holding files of the report's names that it did not write."""


def run_config_files(root: Path) -> list[Path]:
    """The ``config.yaml`` of every run directory under ``root`` (``root`` itself included), sorted by path."""
    # Hydra's own copy of the composed config (.hydra/config.yaml) is not a run
    return [path for path in sorted(root.rglob("config.yaml")) if path.parent.name != ".hydra"]


def _written_by_report(out_dir: Path) -> bool:
    """Whether the report wrote ``out_dir``: it holds the report's marker, or (a report written before the
    marker) a ``report.json`` of the report's own shape."""
    if (out_dir / REPORT_MARKER).is_file():
        return True
    try:
        earlier = json.loads((out_dir / "report.json").read_text())
    except (OSError, ValueError):
        return False
    return isinstance(earlier, dict) and {"metric", "rows"} <= set(earlier)


def check_not_inside_a_runs_folder(out_dir: Path, named: str) -> None:
    """``OutputFolderError`` for an output folder inside one of a run's own folders (``<run>/tb``, its
    TensorBoard events, whose reader would take the report's events for the run's; ``<run>/checkpoints``):
    the folder of the run that ``out_dir`` lies under exists and the report did not write it. A new folder
    in a run directory (the default ``<run>/report`` when the root is one run) is the report's own."""
    path = out_dir.absolute()
    for run in path.parents:
        if (run / "config.yaml").is_file() and run.name != ".hydra":
            top = run / path.relative_to(run).parts[0]
            if top.exists() and not (top / REPORT_MARKER).is_file():
                raise OutputFolderError(f"{named} lies inside {top}, a folder of the run {run}; the report would "
                                        "write among the run's files: choose a folder of its own")


def check_out_dir(out_dir: Path, named: str) -> None:
    """``OutputFolderError`` for an output folder the report would damage: a run directory (its ``tb/`` is the
    run's TensorBoard events), a folder holding runs (the root itself, say: the report's files would lie among
    them), or one holding ``report.md``, ``report.json``, ``curves/`` or ``tb/`` that the report did not write.
    ``named`` is how the message names the folder (``--out <path>``)."""
    check_not_inside_a_runs_folder(out_dir, named)
    if not out_dir.exists():
        return
    if not out_dir.is_dir():
        raise OutputFolderError(f"{named} is a file, not a folder; choose a folder for the report")
    if (out_dir / "config.yaml").is_file():
        raise OutputFolderError(f"{named} is a run directory (it holds config.yaml); the report would write among the "
                                "run's files: choose a folder of its own")
    runs = run_config_files(out_dir)
    if runs:
        raise OutputFolderError(f"{named} holds {len(runs)} run director{'y' if len(runs) == 1 else 'ies'} "
                                f"({runs[0].parent}{', ...' if len(runs) > 1 else ''}); the report would write among "
                                "them: choose a folder without runs")
    foreign = [f"{name}/" if (out_dir / name).is_dir() else name for name in REPORT_FILES if (out_dir / name).exists()]
    if foreign and not _written_by_report(out_dir):
        raise OutputFolderError(f"{named} holds {', '.join(foreign)} that genpol.report did not write (no "
                                f"{REPORT_MARKER} there); the report would replace them: choose another folder")
