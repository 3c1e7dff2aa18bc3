"""``summary.json`` and ``learning_curve.png`` in the run directory at the end of training."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

import numpy as np

from genpol.callbacks.base import Callback, failure_hint, log
from genpol.callbacks.checkpointing import Checkpointer
from genpol.callbacks.evaluation import Evaluation
from genpol.callbacks.logging import read_metrics
from genpol.files import write_text_atomic


def plot_learning_curve(metrics_path: Path, output: Path, title: str) -> Path:
    """Training-episode return (per iteration) and evaluation return against env steps."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = read_metrics(metrics_path)
    train = [(r["global_step"], r["charts/episodic_return"]) for r in rows if "charts/episodic_return" in r]
    evals = [(r["global_step"], r["eval/episodic_return"]) for r in rows if "eval/episodic_return" in r]
    fig, ax = plt.subplots(figsize=(7, 4), dpi=100)
    if train:
        ax.plot(*zip(*train), label="training episodes (mean per iteration)", color="tab:blue", alpha=0.8)
    if evals:
        ax.plot(*zip(*evals), "o-", label="evaluation", color="tab:orange")
    ax.set_xlabel("environment steps")
    ax.set_ylabel("episodic return")
    ax.set_title(title)
    ax.grid(alpha=0.3)
    if train or evals:  # a run too short to finish an episode has nothing to label
        ax.legend(loc="best")
    fig.tight_layout()
    fig.savefig(output)
    plt.close(fig)
    return output


class Summary(Callback):
    """Writes the run's headline numbers and its learning curve when training ends.

    Place it after the ``Checkpointer`` so that the final checkpoint exists when it writes.
    ``missing`` maps each artifact lost to a failure at the end of training (the final video, the
    evaluation, the learning curve) to its one-line cause; the weights are never among them.

    ``episodic_return_mean`` is the mean return of the last 20 training episodes (raw rewards);
    ``eval_return_mean`` is the final evaluation's mean (deterministic unless ``eval_deterministic`` is false);
    where the env defines success, ``eval_success_rate`` is that evaluation's fraction of successful episodes
    and ``success_rate`` the fraction among the last 20 training episodes (both None otherwise); ``sps`` counts
    env steps per second of collecting and updating, ``wall_time_s`` everything since the run first started
    (evaluation, checkpoints and resumes included).
    """

    def __init__(self, run_dir: str | Path, metrics_path: Path, evaluation: Evaluation | None,
                 checkpointer: Checkpointer, extra: dict[str, Any]):
        self.run_dir = Path(run_dir)
        self.metrics_path = metrics_path
        self.evaluation = evaluation
        self.checkpointer = checkpointer
        self.extra = extra
        self.summary: dict[str, Any] = {}
        self._elapsed_before = 0.0  # wall time of earlier sessions of this run (resumes)
        self._start = time.perf_counter()

    def elapsed(self) -> float:
        return self._elapsed_before + time.perf_counter() - self._start

    def on_train_start(self, runner: Any) -> None:
        self._start = time.perf_counter()

    def on_train_end(self, runner: Any) -> None:
        missing = dict(getattr(runner.callbacks, "failures", {}))  # artifacts lost to earlier failures
        evaluation = self.evaluation
        if evaluation is not None and evaluation.video_error:
            missing["video"] = evaluation.video_error
        curve: Path | None = None
        try:
            curve = plot_learning_curve(self.metrics_path, self.run_dir / "learning_curve.png",
                                        f"{runner.env.env_id} - {self.extra.get('policy', '')}/"
                                        f"{self.extra.get('learner', '')}")
        except Exception as error:  # noqa: BLE001 - a plot is not worth the summary
            missing["learning_curve"] = failure_hint(error)
            log.warning("the learning curve failed: %s", missing["learning_curve"])
        video = evaluation.video_path if evaluation is not None else None
        self.summary = {
            **self.extra,
            "env_steps": runner.global_step,
            "iterations": runner.iteration,
            "episodic_return_mean": float(np.mean(runner.recent_returns)) if runner.recent_returns else None,
            "eval_return_mean": evaluation.final_return if evaluation is not None else None,
            "eval_normalized_score": evaluation.final_score if evaluation is not None else None,
            "eval_success_rate": evaluation.final_success_rate if evaluation is not None else None,
            "success_rate": float(np.mean(runner.recent_successes)) if getattr(runner, "recent_successes", None)
            else None,
            "eval_episodes": evaluation.episodes if evaluation is not None else 0,
            "eval_deterministic": evaluation.deterministic if evaluation is not None else None,
            "sps": runner.global_step / runner.wall_time if runner.wall_time > 0 else None,
            "train_time_s": runner.wall_time,
            "wall_time_s": self.elapsed(),
            "checkpoint": str(self.checkpointer.last_path) if self.checkpointer.last_path else None,
            "video": str(video) if video else None,
            "learning_curve": str(curve) if curve else None,
            "tensorboard": str(self.run_dir / "tb"),
            "missing": missing,
        }
        write_text_atomic(self.run_dir / "summary.json", json.dumps(self.summary, indent=2))

    def state_dict(self) -> dict[str, Any]:
        return {"elapsed": self.elapsed()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self._elapsed_before = float(state["elapsed"])
