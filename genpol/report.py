"""``python -m genpol.report <sweep or runs dir>``: the results of many runs, per configuration.

A run is a directory holding ``config.yaml`` (the resolved config every run saves) and
``summary.json`` (written when it finishes); the report finds them at any depth, so a sweep
directory, a ``runs/`` tree or a folder of separate launches all work. Runs are grouped by
configuration: the config keys whose values differ between runs, except the seed and the keys that
do not change what a run computes (run_dir, logging, video, checkpoint cadence, device, threads).
A key that a run's ``config.yaml`` lacks because genpol added it after the run started counts as
what that run computed, as the resume check reads it (``genpol.runners.scaffold``): the value that
reproduces the old behaviour (``LEGACY_VALUES``) or else the key's default; and the ``dataset.*``
keys of a run without a dataset (``dataset.actions`` outside offline_to_online), which it never
read, count as their defaults.

It writes to ``<dir>/report`` (or ``--out``), a folder of its own: an ``--out`` that is a run
directory, holds runs or lies in a run's own folder (its ``tb/``) is refused (exit 2), and a re-run
replaces the ``curves/`` and ``tb/`` of a folder only where the report wrote them before (its
``.genpol-report`` marker).

* ``report.md``: per configuration, the number of seeds, the **median** of the final metric over
  seeds and its **95 % confidence interval: a percentile bootstrap of the median**. Up to 7 seeds the
  bootstrap distribution is exact (every one of the n^n equally likely resamples), so the interval
  carries no resampling noise; from 8 seeds on it uses 10,000 resamples drawn with a fixed seed (0).
  The percentiles are the inverted empirical CDF (numpy ``method="inverted_cdf"``): the interval's
  ends are medians that the bootstrap actually produces (with an even number of seeds, a median between two
  sorted values is widened outward to them), a pair of the sorted values, and beside it the
  probability that such a pair holds the true median (``genpol.report_stats``): below 6 seeds less than
  95 % (3 seeds' [min, max]: 75 %). The mean is given too.
* ``curves/<configuration>.png``: the learning curve (``charts/episodic_return`` from each run's
  ``progress.jsonl`` against env steps) as the **mean over seeds with a 95 % Student-t interval**
  (mean +- t_{0.975, n-1} s / sqrt(n)), after interpolating every seed onto the first seed's steps from
  the latest first step to the shortest run's last. The file is named by the configuration's label where
  that is a short, plain file name; otherwise by the label with other characters as ``_``, cut to 120
  characters, and 8 hex digits of the full label's SHA-256 appended, so no two configurations share a file.
* ``tb/``: TensorBoard HParams, one session per run (the configuration keys and the seed as hparams,
  the summary's metrics as ``hparam/<name>``): ``tensorboard --logdir <dir>/report/tb``.
* ``report.json``: the table's numbers at full precision, and the runs behind each row.

Directories with ``config.yaml`` but no ``summary.json`` (runs still going, or stopped) are listed,
not counted; so are finished runs without the metric and runs that repeat a seed already counted in their
configuration (one sample per seed), and rows without a curve are named.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import math
import re
import shutil
import sys
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Sequence

import numpy as np
import yaml
from omegaconf import MISSING, OmegaConf

from genpol.algorithms.registry import LEARNERS
from genpol.callbacks.logging import read_metrics
from genpol.config import PIPELINE_SCHEMAS, POLICY_SCHEMAS, TrainConfig
from genpol.config.aliases import rename_saved
from genpol.config.base import flatten_keys
from genpol.files import write_text_atomic
from genpol.report_folder import REPORT_MARKER, OutputFolderError, check_out_dir, run_config_files
from genpol.report_stats import (BOOTSTRAP_RESAMPLES, BOOTSTRAP_SEED, EXACT_BOOTSTRAP_MAX_SEEDS,  # noqa: F401
                                 bootstrap_median_ci, median_interval_coverage, t_interval)
from genpol.fields import NO_DEFAULT, schema_default
from genpol.runners.scaffold import LEGACY_VALUES, holds_progress, unread_keys
from genpol.unread import is_unread

# Keys that never separate two configurations: the seed is what the statistics run over, and the
# others do not change what a run computes (the video's size, how often it saves, on how many threads).
NOT_CONFIGURATION = ("seed", "run_dir", "logger.", "pipeline.video", "pipeline.checkpoint_every",
                     "pipeline.pretrain_checkpoint_every", "pipeline.keep_checkpoints", "device", "torch_threads",
                     "update_threads", "env.workers", "env.render_width", "env.render_height", "learner.compile")
# How often a run evaluates: its evaluations draw from their own envs and generators, so it trains the same and
# ends on the same final evaluation (a resume may change it, and rewrites config.yaml), except under
# pipeline=gorl, whose stages build on the encoder their evaluations pick.
EVALUATION_CADENCE = ("pipeline.eval_every", "pipeline.pretrain_eval_every")
NAME_MAX_CHARS = 120  # of a label in a file name; the digest adds 9 (ext4 and most others allow 255 bytes)



@dataclass
class Run:
    """One finished run: its directory, flattened config and summary."""

    directory: Path
    config: dict[str, Any]
    summary: dict[str, Any]

    @property
    def seed(self) -> int:
        return int(self.config.get("seed", 0))


@dataclass
class Row:
    """One configuration's line of the table."""

    label: str
    settings: dict[str, Any]
    runs: list[Run]
    values: np.ndarray
    median: float
    ci_low: float
    ci_high: float
    mean: float
    ci_coverage: float  # how often [ci_low, ci_high] holds the true median (``median_interval_coverage``)
    # (repeat, the run of ``runs`` it repeats): runs of a seed already counted, left out of ``values`` but named in
    # report.md and report.json; the stderr warning alone left a header counting more runs than the rows, unexplained
    repeats: list[tuple[Run, Run]] = field(default_factory=list)


def find_runs(root: str | Path) -> tuple[list[Run], list[Path], list[Path]]:
    """The finished runs under ``root`` (sorted by path), the unfinished run directories, and the damaged
    ones (a config.yaml or summary.json that cannot be parsed: named with a warning, not a traceback)."""
    root = Path(root)
    runs, unfinished, damaged = [], [], []
    for config_path in run_config_files(root):
        directory = config_path.parent
        summary_path = directory / "summary.json"
        if not summary_path.exists():
            unfinished.append(directory)
            continue
        try:
            container = OmegaConf.to_container(OmegaConf.load(config_path), resolve=False)
            summary = json.loads(summary_path.read_text())
            # parsed, but not a run's: a list, null, or a seed that is no integer failed later with a traceback
            if not isinstance(container, dict) or not isinstance(summary, dict):
                raise ValueError(f"config.yaml holds a {type(container).__name__}, summary.json a "
                                 f"{type(summary).__name__}; both must be mappings")
            config = flatten_keys(rename_saved(container))
            if not isinstance(config.get("seed", 0), int) or isinstance(config.get("seed"), bool):
                raise ValueError(f"config.yaml's seed is {config.get('seed')!r}, not an integer")
        except (OSError, ValueError, yaml.YAMLError) as error:  # json's decode error is a ValueError
            warnings.warn(f"genpol.report: skipping {directory}: its config.yaml or summary.json cannot be read "
                          f"({type(error).__name__}: {error})", RuntimeWarning, stacklevel=2)
            damaged.append(directory)
            continue
        runs.append(Run(directory, config, summary))
    return runs, unfinished, damaged


def run_schema(config: dict[str, Any]) -> TrainConfig:
    """The schema a run's flattened ``config`` was saved from, for ``scaffold.schema_default`` to read defaults
    from: ``TrainConfig`` with the learner, policy and pipeline schemas (the dataclasses themselves, whose
    fields hold the defaults) that the config names, or None for one this process does not know (a learner of
    the user's own whose module is not imported): its keys then have no default here."""
    learner_row = LEARNERS.get(config.get("learner.name"))
    return TrainConfig(learner=learner_row.schema if learner_row is not None else None,
                       policy=POLICY_SCHEMAS.get(config.get("policy.family")),
                       pipeline=PIPELINE_SCHEMAS.get(config.get("pipeline.name")))


def _default_of(schema: TrainConfig, key: str) -> Any:
    """The schema default of ``key``, or ``NO_DEFAULT`` where its schema lacks the key or leaves it required."""
    default = schema_default(schema, key)
    return NO_DEFAULT if default == MISSING else default  # MISSING ("???"): a field that must be set, as env.id


def computed_config(config: dict[str, Any], keys: Sequence[str]) -> dict[str, Any]:
    """The flattened ``config`` of a run as what the run computed, over ``keys`` (those of every run reported), so
    that runs of one configuration saved by different genpol versions group together. The resume check
    (``genpol.runners.scaffold.compare_saved_config``) reads a saved config the same way:

    * a key its schema declares but its config.yaml lacks was added to genpol after the run started: the run
      computed ``LEGACY_VALUES``' value where the key has one (the behaviour before the key), else the default;
      a key its schema does not declare (a SAC key in a PPO run) stays missing;
    * keys the run never read (``scaffold.unread_keys``: ``dataset.*`` without a dataset, ``dataset.actions``
      outside offline_to_online, the learner fields its schema's ``unread_fields`` names, such as a learned
      temperature's under a fixed one) count as their defaults, whatever the run saved; so does the
      evaluation cadence (``EVALUATION_CADENCE``) of a run outside ``pipeline=gorl``.
    """
    schema = run_schema(config)
    unread = unread_keys(config) + (EVALUATION_CADENCE if config.get("pipeline.name") != "gorl" else ())
    computed = dict(config)
    for key in keys:
        default = _default_of(schema, key)
        if default is NO_DEFAULT:
            continue
        if is_unread(key, unread):
            computed[key] = default
        elif key not in config:
            computed[key] = LEGACY_VALUES.get(key, default)
    return computed


def configuration_keys(configs: Sequence[dict[str, Any]]) -> list[str]:
    """The keys whose values differ between the flattened ``configs`` (except ``NOT_CONFIGURATION``), sorted."""
    keys = set().union(*configs) if configs else set()
    varying = [key for key in keys
               if not key.startswith(NOT_CONFIGURATION)
               and len({json.dumps(config.get(key), sort_keys=True) for config in configs}) > 1]
    return sorted(varying)


def _one_run_per_seed(label: str, members: list[Run]) -> tuple[list[Run], list[tuple[Run, Run]]]:
    """The first run of each seed, and the others each with the first run of its seed, with a warning naming them:
    one seed run twice (a sweep launched twice into one folder) is one sample, and counting it twice would narrow
    the interval."""
    first: dict[int, Run] = {}
    repeats = []
    for run in members:
        if run.seed in first:
            warnings.warn(f"genpol.report: {run.directory} repeats seed {run.seed} of {first[run.seed].directory} "
                          f"({label}); counted once", stacklevel=3)
            repeats.append((run, first[run.seed]))
        else:
            first[run.seed] = run
    return list(first.values()), repeats


def metric_value(run: Run, metric: str) -> float | None:
    """The run's summary value of ``metric`` if it is a finite number, else None (not counted, named as such): one
    NaN made its row's median, interval and mean NaN (and report.json invalid JSON), a string a traceback."""
    value = run.summary.get(metric)
    if isinstance(value, bool) or not isinstance(value, (int, float)) or not math.isfinite(value):
        return None
    return float(value)


def summarize(runs: Sequence[Run], metric: str) -> list[Row]:
    """One row per configuration (the runs' computed configs, ``computed_config``), in the order of their first run."""
    all_keys = sorted(set().union(*(run.config for run in runs))) if runs else []
    configs = [computed_config(run.config, all_keys) for run in runs]
    keys = configuration_keys(configs)
    groups: dict[str, list[Run]] = {}
    settings: dict[str, dict[str, Any]] = {}  # label -> the configuration's values of ``keys``
    for run, config in zip(runs, configs):
        label = ", ".join(f"{key}={config.get(key)}" for key in keys) or "all runs"
        groups.setdefault(label, []).append(run)
        settings.setdefault(label, {key: config.get(key) for key in keys})
    rows = []
    for label, members in groups.items():
        # measured first, then one run per seed: a seed's first copy without the metric hid its measured one
        measured, repeats = _one_run_per_seed(label, [run for run in members
                                                      if metric_value(run, metric) is not None])
        if not measured:
            continue
        values = np.array([metric_value(run, metric) for run in measured], float)  # runs and values stay paired
        low, high = bootstrap_median_ci(values)
        rows.append(Row(label, settings[label], measured, values, float(np.median(values)), low, high,
                        float(values.mean()), median_interval_coverage(values, low, high), repeats))
    return rows


def markdown_table(rows: Sequence[Row], metric: str, curve_files: dict[str, str]) -> str:
    lines = [f"| configuration | seeds | median {metric} | 95% CI of the median | it holds the median | mean | curve |",
             "|---|---:|---:|---|---:|---:|---|"]
    for row in rows:
        curve = f"![{row.label}]({curve_files[row.label]})" if row.label in curve_files else ""
        several = len(row.values) > 1  # one seed has no interval, so nothing to hold the median either
        interval = f"[{row.ci_low:.2f}, {row.ci_high:.2f}]" if several else "none (one seed)"
        coverage = f"{row.ci_coverage:.1%}" if several else "n/a"
        lines.append(f"| {row.label} | {len(row.values)} | {row.median:.2f} | {interval} | {coverage} "
                     f"| {row.mean:.2f} | {curve} |")
    return "\n".join(lines) + "\n"


def _slug(label: str) -> str:
    """The file and folder name of a row (``curves/<name>.png``, ``tb/<name>/``): the label itself where it is a
    plain name (letters, digits, ``_.=-``) of at most ``NAME_MAX_CHARS`` characters; otherwise the label with every
    other run of characters as ``_``, cut to ``NAME_MAX_CHARS``, and ``-`` with 8 hex digits of the full label's
    SHA-256 appended. Two labels that differ only after the cut (many keys vary when runs of two learners are
    reported together) or only in replaced characters get two names, and a row keeps its name across reports."""
    if label == "all runs":  # the one row of runs that share one configuration
        return "all_runs"
    plain = re.sub(r"[^A-Za-z0-9_.=-]+", "_", label).strip("_")
    if plain == label and len(label) <= NAME_MAX_CHARS:
        return label
    return f"{plain[:NAME_MAX_CHARS]}-{hashlib.sha256(label.encode()).hexdigest()[:8]}"


def seed_curves(runs: Sequence[Run], curve_metric: str) -> tuple[np.ndarray, np.ndarray] | None:
    """``(steps [T], values [n, T])``: each run's ``curve_metric`` interpolated onto the first run's
    steps, from the latest first step to the shortest run's last (a seed is not held flat before its first
    value); None if a run never logged the metric."""
    curves = []
    for run in runs:
        rows = [r for r in read_metrics(run.directory / "progress.jsonl") if r.get(curve_metric) is not None]
        if not rows:
            return None
        curves.append((np.array([r["global_step"] for r in rows], float), np.array([r[curve_metric] for r in rows], float)))
    first, last = max(steps[0] for steps, _ in curves), min(steps[-1] for steps, _ in curves)
    grid = curves[0][0][(curves[0][0] >= first) & (curves[0][0] <= last)]
    if len(grid) == 0:
        return None
    return grid, np.stack([np.interp(grid, steps, values) for steps, values in curves])


def plot_curve(row: Row, curve_metric: str, output: Path) -> bool:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    curves = seed_curves(row.runs, curve_metric)
    if curves is None:
        return False
    steps, values = curves
    mean, low, high = t_interval(values)
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    seeds = values.shape[0]
    ax.plot(steps, mean, color="tab:blue", label=f"mean over {seeds} seed{'s' if seeds > 1 else ''}")
    if seeds > 1:
        ax.fill_between(steps, low, high, color="tab:blue", alpha=0.25, label="95% CI (Student t)")
    ax.set_xlabel("environment steps")
    ax.set_ylabel(curve_metric)
    ax.set_title(row.label, fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(loc="best")
    fig.tight_layout()
    output.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(output)
    plt.close(fig)
    return True


def _hparam_value(value: Any) -> Any:
    return value if isinstance(value, (bool, int, float, str)) else json.dumps(value)


def write_hparams(rows: Sequence[Row], out_dir: Path) -> None:
    """One TensorBoard HParams session per run under ``out_dir``."""
    from torch.utils.tensorboard import SummaryWriter

    for row in rows:
        for run in row.runs:
            hparams = {**{key: _hparam_value(value) for key, value in row.settings.items()}, "seed": run.seed}
            metrics = {f"hparam/{name}": float(value) for name, value in run.summary.items()
                       if isinstance(value, (int, float)) and not isinstance(value, bool)}
            with SummaryWriter(str(out_dir / _slug(row.label) / f"seed_{run.seed}")) as writer:
                writer.add_hparams(hparams, metrics, run_name=".")


def report(root: str | Path, out_dir: str | Path | None = None, metric: str = "eval_return_mean",
           curve_metric: str = "charts/episodic_return") -> dict[str, Any]:
    """Write the report of the runs under ``root`` (see the module docstring); returns ``report.json``.

    ``OutputFolderError`` for an ``out_dir`` that is not the report's own to write (``check_out_dir``)."""
    root = Path(root)
    if not root.is_dir():
        raise FileNotFoundError(f"{root} is not a directory")
    named = f"--out {out_dir}" if out_dir is not None else f"the default --out, {root / 'report'},"
    out_dir = Path(out_dir) if out_dir is not None else root / "report"
    check_out_dir(out_dir, named)  # before anything is read or written; it also means no run lies under out_dir
    runs, unfinished, damaged = find_runs(root)
    if not runs:
        raise FileNotFoundError(f"no finished run under {root} (a run directory holds config.yaml and summary.json)")
    rows = summarize(runs, metric)
    if not rows:
        raise KeyError(f"no run under {root} has '{metric}' in its summary.json; choose another --metric")
    out_dir.mkdir(parents=True, exist_ok=True)
    # the marker first: a report that fails half-way still leaves its curves/ and tb/ to the next one to replace
    write_text_atomic(out_dir / REPORT_MARKER, "genpol.report wrote this folder; a new report replaces its curves/ "
                                               "and tb/\n")
    for stale in ("curves", "tb"):  # a re-run replaces them (TensorBoard would show old sessions twice)
        shutil.rmtree(out_dir / stale, ignore_errors=True)
    curve_files = {}
    for row in rows:
        relative = f"curves/{_slug(row.label)}.png"
        if plot_curve(row, curve_metric, out_dir / relative):
            curve_files[row.label] = relative
    curve_missing = None
    if not curve_files:
        logged = {key for run in runs for line in read_metrics(run.directory / "progress.jsonl") for key in line}
        if logged and curve_metric not in logged:
            curve_missing = (f"no run under {root} logged '{curve_metric}' in its progress.jsonl, so no curves were "
                             f"drawn; its fields include {sorted(key for key in logged if '/' in key)[:12]}")
    write_hparams(rows, out_dir / "tb")
    table = markdown_table(rows, metric, curve_files)
    without = [run.directory for run in runs if metric_value(run, metric) is None]
    repeats = [(run, first) for row in rows for run, first in row.repeats]
    # every finished run is counted in a row, lacks the metric or repeats a counted seed: the header's number adds
    # up to the rows' seeds and the runs named below (it said 10 runs over a row of 9 seeds, the 10th unnamed)
    left_out = ([f"{len(without)} without the metric"] if without else []) + (
        [f"{len(repeats)} repeating a seed already counted in its configuration"] if repeats else [])
    counted = (f"; {sum(len(row.runs) for row in rows)} counted in the table, not counted (named below): "
               f"{', '.join(left_out)}" if left_out else "")
    text = (f"# Report of {root}\n\n{len(runs)} finished runs in {len(rows)} configurations{counted}. Median of the "
            f"final `{metric}` over seeds; 95% CI: percentile bootstrap of the median (exact up to "
            f"{EXACT_BOOTSTRAP_MAX_SEEDS} seeds, else {BOOTSTRAP_RESAMPLES} resamples with seed {BOOTSTRAP_SEED}), a "
            "pair of the sorted values, and how often such a pair holds the true median (continuous returns): "
            "below 6 seeds less than the 95% asked (3 seeds: 75%). "
            f"Curves: `{curve_metric}`, mean over seeds with a 95% Student-t band.\n\n{table}")
    if without:  # dropped from the rows: said, not lost
        text += f"\nFinished without a finite `{metric}` in summary.json (absent, null, non-finite or not a " \
                "number; not counted): " + ", ".join(
            f"`{path}`" for path in without) + "\n"
    if repeats:  # a repeat's metric is not in its row (one sample per seed): said, not lost, as those without it
        text += ("\nRepeating a seed already counted in its configuration (a run launched twice, or runs that differ "
                 "only in keys that do not separate configurations, such as threads or device; not counted): "
                 + ", ".join(f"`{run.directory}` (repeats seed {run.seed} of `{first.directory}`)"
                             for run, first in repeats) + "\n")
    uncurved = [row.label for row in rows if row.label not in curve_files]
    if curve_files and uncurved:
        text += ("\nNo curve (a seed logged no `" + curve_metric + "`, or the seeds' steps do not overlap): "
                 + ", ".join(f"`{label}`" for label in uncurved) + "\n")
    if curve_missing:
        text += f"\n{curve_missing}\n"
    if damaged:
        text += "\nUnreadable (a config.yaml or summary.json that does not parse): " + ", ".join(
            f"`{path}`" for path in damaged) + "\n"
    # a folder without a checkpoint never trained to one: refused at its start (a bad env id, a missing dataset,
    # after its config.yaml was written) or stopped before its first checkpoint; said apart from runs to resume
    not_started = [path for path in unfinished if not holds_progress(path)]
    unfinished = [path for path in unfinished if holds_progress(path)]
    if unfinished:
        text += "\nUnfinished (no summary.json; re-run to resume): " + ", ".join(
            f"`{path}`" for path in unfinished) + "\n"
    if not_started:
        text += ("\nNo checkpoint (refused at the start, or stopped before the first checkpoint): "
                 + ", ".join(f"`{path}`" for path in not_started) + "\n")
    write_text_atomic(out_dir / "report.md", text)
    result = {"metric": metric, "rows": [{"configuration": row.label, "settings": row.settings,
                                          "seeds": [run.seed for run in row.runs], "values": row.values.tolist(),
                                          "median": row.median, "ci95": [row.ci_low, row.ci_high],
                                          "ci95_coverage": row.ci_coverage, "mean": row.mean,
                                          "runs": [str(run.directory) for run in row.runs],
                                          "curve": curve_files.get(row.label)} for row in rows],
              "unfinished": [str(path) for path in unfinished], "not_started": [str(path) for path in not_started],
              "damaged": [str(path) for path in damaged],
              "without_metric": [str(path) for path in without],
              "duplicates": [{"run": str(run.directory), "repeats": str(first.directory), "seed": run.seed}
                             for run, first in repeats],
              "curve_missing": curve_missing}
    write_text_atomic(out_dir / "report.json", json.dumps(result, indent=2))
    return result


def main(argv: Sequence[str] | None = None) -> None:
    parser = argparse.ArgumentParser(prog="python -m genpol.report", description=__doc__.split("\n\n")[0])
    parser.add_argument("root", help="a sweep directory, or any directory with run directories below it")
    parser.add_argument("--out", default=None, help="output directory (default: <root>/report)")
    parser.add_argument("--metric", default="eval_return_mean", help="summary.json field of the table")
    parser.add_argument("--curve", default="charts/episodic_return", help="progress.jsonl field of the curves")
    args = parser.parse_args(argv)
    try:
        with warnings.catch_warnings():
            # the report's warnings name what they skip: one line each (Python's format added report.py's line)
            warnings.showwarning = lambda message, *_, **__: print(message, file=sys.stderr)
            result = report(args.root, args.out, args.metric, args.curve)
    except (OutputFolderError, FileNotFoundError, KeyError, OSError) as error:
        # bad input (no runs, a metric no run has, an --out that cannot be made): exit 2, as genpol's other entry
        # points (it was 1 but for --out, and an --out under a file was a traceback)
        message = error.args[0] if isinstance(error, KeyError) else error  # str(KeyError) quotes its message
        print(f"genpol.report: {message}", file=sys.stderr)
        raise SystemExit(2) from None
    if result["curve_missing"]:
        print(f"genpol.report: {result['curve_missing']}", file=sys.stderr)
    out_dir = Path(args.out) if args.out else Path(args.root) / "report"
    print((out_dir / "report.md").read_text())


if __name__ == "__main__":
    main()
