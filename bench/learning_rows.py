"""The rows of ``bench/learning.py``'s results file: one row per job across invocations (``merge_seeds``),
where each run stands (``print_status``), and issue 30's verdict against SAC with its picture (``against_sac``,
``plot_against_sac``). Imported by ``learning.py`` inside its functions, as ``common`` is."""

from __future__ import annotations

import json
import math
import statistics
from pathlib import Path
from typing import Any


def merge_seeds(previous: dict | None, row: dict) -> dict:
    """``row`` (this invocation's seeds of a job) with the seeds of ``previous`` (the results file's row of the
    job) that were not re-run, when both ran the same budget and overrides: ``--seeds 1 2`` after ``--seeds 0``
    then reports seeds 0-2, also where seed 0's run directory is gone (runs move between machines). Every
    per-seed list (final returns, wall times, curves, ...) is merged seed by seed; the medians are recomputed."""
    if not previous or (previous["steps"], previous["overrides"]) != (row["steps"], row["overrides"]):
        return row
    kept = [i for i, seed in enumerate(previous["seeds"]) if seed not in row["seeds"]]
    if not kept:
        return row
    joined_seeds = [previous["seeds"][i] for i in kept] + row["seeds"]
    order = sorted(range(len(joined_seeds)), key=joined_seeds.__getitem__)
    merged = dict(row)
    for key, values in row.items():
        if key == "overrides" or not isinstance(values, list) or len(values) != len(row["seeds"]):
            continue
        old = previous.get(key)
        if isinstance(old, list) and len(old) == len(previous["seeds"]):
            joined = [old[i] for i in kept] + values
            merged[key] = [joined[i] for i in order]
        else:  # a per-seed list the earlier row lacks (a newer field) cannot line up with the merged seeds
            del merged[key]
    merged["median_final_return"] = finite_median(merged["final_returns"])
    if "sps" in merged:
        merged["sps_median"] = statistics.median(merged["sps"])
    if "ratio_deviation_means" in merged:
        merged["ratio_deviation_mean"] = pooled_mean(merged)
    else:  # the earlier row kept no per-seed means: this invocation's seeds alone would pass for all of them
        merged.pop("ratio_deviation_mean", None)
    return merged


def pooled_mean(row: dict) -> float:
    """The mean of the spo_deep suite's logged ratio deviations over every seed's iterations, from the
    per-seed means and counts (a seed with more logged iterations weighs more, as in one pooled list)."""
    total = sum(mean * count for mean, count in zip(row["ratio_deviation_means"], row["ratio_deviation_counts"]))
    return total / sum(row["ratio_deviation_counts"])


def finite_median(values: list) -> float | None:
    """The median of the finite values, None when there are none. A run whose final evaluation failed has
    ``eval_return_mean`` None (its summary's ``missing`` says why): statistics.median raised on it, after every
    job had trained, and a NaN made the median depend on which seed held it."""
    finite = [value for value in values if is_finite(value)]
    return statistics.median(finite) if finite else None


def is_finite(value: Any) -> bool:
    return isinstance(value, (int, float)) and math.isfinite(value)


def against_sac(table: dict, sac_jobs: dict) -> None:
    """Issue 30's criterion, written into each max-entropy job's row as ``against_sac``: its median final
    return at or above SAC's (the ``sac`` suite's job on the same task and budget), or inside the 95 %
    bootstrap interval of SAC's median (``genpol.report``; with 3 seeds that interval is SAC's [min, max], which
    holds SAC's true median only 75 % of the time: ``sac_ci95_coverage``)."""
    from genpol.report_stats import bootstrap_median_ci, median_interval_coverage

    for job, row in table.items():
        task = job.split("-")[0]
        # the sac suite's own row first: a copy in this suite's file (an earlier ``--jobs hopper-sac``) falls behind
        # it as the sac suite gains seeds
        candidates = [sac_jobs.get(f"{task}-sac"), table.get(f"{task}-sac")]
        sac = next((c for c in candidates if c is not None and c["steps"] == row["steps"]), None)
        if job == f"{task}-sac" or sac is None:
            continue
        if not all(is_finite(value) for value in [*sac["final_returns"], *row["final_returns"]]):
            # a seed without a final evaluation, or a NaN (whose median depends on the order): no verdict
            row["against_sac"] = {"verdict": "not judged: a seed without a finite final return", "met": False}
            continue
        sac_median, (low, high) = statistics.median(sac["final_returns"]), bootstrap_median_ci(sac["final_returns"])
        median = row["median_final_return"]
        verdict = "at or above SAC's median" if median >= sac_median else (
            "inside SAC's 95 % interval" if median >= low else "below SAC's 95 % interval")
        row["against_sac"] = {"sac_seeds": sac["seeds"], "sac_final_returns": sac["final_returns"],
                              "sac_median": sac_median, "sac_ci95": [low, high],
                              "sac_ci95_coverage": median_interval_coverage(sac["final_returns"], low, high),
                              "seeds": len(row["seeds"]),
                              "median": median, "ci95": list(bootstrap_median_ci(row["final_returns"])),
                              "verdict": verdict, "met": median >= low and len(row["seeds"]) >= 3}


def plot_against_sac(table: dict, sac_jobs: dict, path: Path) -> None:
    """Issue 30's picture: per task, every seed's deterministic evaluation curve of each max-entropy job and
    of SAC (the ``sac`` suite's), drawn from the results rows (``eval_curves``), so runs whose directories
    are gone still show."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    tasks = sorted({job.split("-")[0] for job in table})
    fig, axes = plt.subplots(1, len(tasks), figsize=(7 * len(tasks), 4), squeeze=False)
    colors = plt.rcParams["axes.prop_cycle"].by_key()["color"]
    learners = sorted({job.split("-", 1)[1] for job in table})  # one colour per learner on every task's panel
    for ax, task in zip(axes[0], tasks):
        rows = {job: row for job, row in table.items() if job.startswith(f"{task}-") and row.get("eval_curves")}
        sac = sac_jobs.get(f"{task}-sac")
        if sac is not None and sac.get("eval_curves"):
            rows[f"{task}-sac"] = sac
        for job, row in sorted(rows.items()):
            learner = job.split("-", 1)[1]
            color = "black" if learner == "sac" else colors[learners.index(learner) % len(colors)]
            for i, curve in enumerate(row["eval_curves"]):
                if curve:
                    ax.plot(*zip(*curve), color=color, alpha=0.75, marker=".",
                            label=f"{job} ({len(row['seeds'])} seeds)" if i == 0 else None)
        ax.set_title(task)
        ax.set_xlabel("environment steps")
        ax.set_ylabel("deterministic evaluation return (5 episodes)")
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.suptitle("issue 30: maximum-entropy learners against SAC, every seed")
    fig.tight_layout()
    fig.savefig(path)
    plt.close(fig)


def print_status(run_dirs: dict[tuple[str, int], Path], steps: int, results: dict[str, Any]) -> None:
    """Per (job, seed) and its run directory: finished (its final evaluation), resumable from a checkpoint (its
    step), only in the results file (``results``, the suite's JSON: the run went elsewhere), or not started."""
    print(f"{'job':32s} {'seed':>4s}  state")
    for (job, seed), run_dir in run_dirs.items():
        row = results.get("jobs", {}).get(job)
        checkpoints = sorted((run_dir / "checkpoints").glob("step_*")) if run_dir.is_dir() else []
        summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else None
        if summary is not None and summary["env_steps"] >= steps:
            final = summary["eval_return_mean"]
            state = "done: no final evaluation (its summary's missing)" if final is None else \
                f"done: final evaluation {final:.0f}"
        elif checkpoints:
            state = f"resumes from step {int(checkpoints[-1].name.split('_')[1])} of {steps}"
        elif row is not None and row["steps"] == steps and seed in row["seeds"]:
            final = row["final_returns"][row["seeds"].index(seed)]
            state = (f"in the results file only: final evaluation {'-' if final is None else f'{final:.0f}'} "
                     "(its run directory is not here)")
        else:
            state = "not started"
        print(f"{job:32s} {seed:4d}  {state}")
