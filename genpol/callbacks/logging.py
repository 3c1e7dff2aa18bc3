"""TensorBoard, a JSON-lines metrics file, and a progress bar."""

from __future__ import annotations

import json
import logging
from pathlib import Path
from typing import Any

import numpy as np

from genpol.callbacks.base import Callback
from genpol.files import write_text_atomic

log = logging.getLogger(__name__)


class TensorBoardLogger(Callback):
    """Scalars at the runner's ``global_step`` under the names of DESIGN.md (``charts/``,
    ``losses/``, ``head/``, ``eval/``). A resumed run purges events past its checkpoint."""

    def __init__(self, log_dir: str | Path):
        self.log_dir = Path(log_dir)
        self.writer: Any = None

    def on_train_start(self, runner: Any) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # events up to the checkpoint's step were logged before it was written: purge only later ones. A start from
        # step 0 onto event files purges them all: they are an attempt killed before its first checkpoint
        # (progress.jsonl starts over then, and TensorBoard showed that attempt's curve twice). Onto none, no purge
        # (TensorBoard orders a folder's files by name, and a purge read after another writer's file drops it)
        stale = any(self.log_dir.glob("events.out.tfevents.*"))
        purge = runner.global_step + 1 if runner.global_step > 0 else (0 if stale else None)
        self.writer = SummaryWriter(str(self.log_dir), purge_step=purge)

    def on_iteration_end(self, runner: Any, metrics: dict[str, float]) -> None:
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, runner.global_step)

    def on_train_end(self, runner: Any) -> None:
        if self.writer is not None:
            self.writer.close()


class MetricsFile(Callback):
    """One JSON object per iteration in ``progress.jsonl`` (the learning curve is drawn from it).

    On a resume, lines written after the checkpoint are dropped, so the file matches what the
    uninterrupted run would have written (on a start from scratch, every line: an earlier attempt
    stopped before its first checkpoint). A line that does not parse (cut off by a kill or a full disk
    mid-write) is dropped with a warning rather than stopping the resume; the file is replaced whole.
    """

    def __init__(self, path: str | Path):
        self.path = Path(path)

    def on_train_start(self, runner: Any) -> None:
        if runner.global_step == 0 and self.path.exists():
            self.path.unlink()  # an attempt that saved no checkpoint (its last line may be cut off mid-write)
        elif self.path.exists():
            rows, damaged, _ = parse_metrics(self.path)
            if damaged:
                log.warning("%s: dropping line(s) %s, which do not parse (cut off mid-write)", self.path,
                            ", ".join(map(str, damaged)))
            kept = [row for row in rows if row.get("global_step", 0) <= runner.global_step]
            write_text_atomic(self.path, "".join(json.dumps(row) + "\n" for row in kept))

    def on_iteration_end(self, runner: Any, metrics: dict[str, float]) -> None:
        row = {"global_step": runner.global_step, "iteration": runner.iteration,
               "wall_time": runner.wall_time, **metrics}
        with open(self.path, "a") as handle:
            handle.write(json.dumps(row) + "\n")


def parse_metrics(path: Path) -> tuple[list[dict[str, Any]], list[int], int]:
    """``(rows, damaged, last)``: the JSON objects of a ``progress.jsonl`` file, the 1-based numbers of its
    non-blank lines that are not one, and the number of its last non-blank line (0 if none)."""
    rows, damaged, last = [], [], 0
    for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
        if not line.strip():
            continue
        last = number
        try:
            row = json.loads(line)
        except ValueError:
            row = None
        if isinstance(row, dict):
            rows.append(row)
        else:
            damaged.append(number)
    return rows, damaged, last


def read_metrics(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a ``progress.jsonl`` file. A run being written may end in half a line (a reader racing
    the writer, or a killed run): it is left out, as is any other line that does not parse, with a
    warning for those."""
    path = Path(path)
    if not path.exists():
        return []
    rows, damaged, last = parse_metrics(path)
    inner = [number for number in damaged if number != last]  # the last one may be mid-write
    if inner:
        log.warning("%s: skipping line(s) %s, which do not parse", path, ", ".join(map(str, inner)))
    return rows


class ProgressBar(Callback):
    """A tqdm bar over the runner's ``global_step`` (env steps, or gradient steps when pretraining)
    showing SPS, the mean return of the last 20 episodes and the evaluation return when known."""

    def __init__(self, total_steps: int, description: str = "", unit: str = "step"):
        self.total_steps = total_steps
        self.description = description
        self.unit = unit
        self.bar: Any = None

    def on_train_start(self, runner: Any) -> None:
        from tqdm.auto import tqdm

        self.bar = tqdm(total=self.total_steps, initial=min(runner.global_step, self.total_steps), unit=self.unit,
                        unit_scale=True, dynamic_ncols=True, desc=self.description)

    def on_env_step(self, runner: Any) -> None:
        # an off-policy iteration (learner.iteration_steps) can last minutes: the bar stood at 0 through the first
        self.bar.update(min(runner.global_step, self.total_steps) - self.bar.n)  # tqdm redraws at most 10x a second

    def on_iteration_end(self, runner: Any, metrics: dict[str, float]) -> None:
        self.bar.update(min(runner.global_step, self.total_steps) - self.bar.n)
        postfix = {}
        if "charts/SPS" in metrics:
            postfix["SPS"] = f"{metrics['charts/SPS']:.0f}"
        if getattr(runner, "recent_returns", None):
            postfix["return"] = f"{np.mean(runner.recent_returns):.1f}"
        for key, label in (("eval/episodic_return", "eval"), ("pretrain/loss", "loss")):
            if key in metrics:
                postfix[label] = f"{metrics[key]:.4g}"
        self.bar.set_postfix(postfix, refresh=False)

    def on_train_end(self, runner: Any) -> None:
        if self.bar is not None:
            self.bar.close()
