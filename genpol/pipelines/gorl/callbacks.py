"""Callbacks of GoRL's encoder phases: keep the best-evaluation encoder, and log every stage into one
TensorBoard run at cumulative encoder env steps with the stage boundaries marked."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import torch

from genpol.callbacks import Evaluation, TensorBoardLogger
from genpol.callbacks.base import Callback
from genpol.checkpoint import save_checkpoint


def clone_tree(tree: Any) -> Any:
    """A deep copy of nested dicts / lists of tensors, detached from the live parameters."""
    if isinstance(tree, torch.Tensor):
        return tree.detach().clone()
    if isinstance(tree, dict):
        return {key: clone_tree(value) for key, value in tree.items()}
    if isinstance(tree, (list, tuple)):
        return type(tree)(clone_tree(value) for value in tree)
    return tree


class BestEvaluation(Callback):
    """Remembers the policy weights (head and observation statistics) of the best deterministic
    evaluation, periodic or final, and writes them at the end of the phase as a policy checkpoint in
    ``directory`` (loadable by ``load_policy``). Ties keep the earlier weights. Its memory travels
    in the phase's checkpoints, so a resumed phase keeps the best of the whole phase.

    Place it after the ``Evaluation`` it reads (its results join the metrics first)."""

    def __init__(self, evaluation: Evaluation, directory: str | Path, policy_spec: dict[str, Any]):
        self.evaluation = evaluation
        self.directory = Path(directory)
        self.policy_spec = policy_spec
        self.best_return: float | None = None
        self.best_step: int | None = None
        self.best_weights: dict[str, Any] | None = None

    def consider(self, runner: Any, value: float) -> None:
        if self.best_return is None or value > self.best_return:
            self.best_return, self.best_step = float(value), int(runner.global_step)
            self.best_weights = clone_tree(runner.policy_weights())

    def on_iteration_end(self, runner: Any, metrics: dict[str, float]) -> None:
        if "eval/episodic_return" in metrics:
            self.consider(runner, metrics["eval/episodic_return"])

    def on_train_end(self, runner: Any) -> None:
        self.consider(runner, self.evaluation.final_return)
        save_checkpoint(self.directory, self.best_step, self.policy_spec, self.best_weights,
                        {"eval_return": self.best_return, "global_step": self.best_step}, keep=1)

    def state_dict(self) -> dict[str, Any]:
        return {"best_return": self.best_return, "best_step": self.best_step, "best_weights": self.best_weights}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.best_return, self.best_step = state["best_return"], state["best_step"]
        self.best_weights = state["best_weights"]


class StageTensorBoard(TensorBoardLogger):
    """``TensorBoardLogger`` for stage ``stage`` of a multi-stage run: scalars at ``offset`` + the
    phase's env step, ``gorl/stage`` (the stage index, a step function whose jumps are the
    boundaries) with every iteration, and a text marker where the stage starts."""

    def __init__(self, log_dir: str | Path, stage: int, offset: int):
        super().__init__(log_dir)
        self.stage, self.offset = stage, offset

    def on_train_start(self, runner: Any) -> None:
        from torch.utils.tensorboard import SummaryWriter

        # a resumed (or restarted) stage drops what an interrupted session logged past its checkpoint.
        # Not at a fresh start (nothing to drop): TensorBoard reads event files in name order, and a
        # writer's name ends in a per-process counter compared as text ("10" < "9"), so a purge in the
        # first stage's file could be read after the later stages' events and drop them all. Stage 0 restarted
        # from step 0 onto event files purges them all: an attempt killed before its first checkpoint (no later
        # stage can have run), whose curve TensorBoard showed beside the new one.
        start = self.offset + runner.global_step
        stale = start == 0 and any(Path(self.log_dir).glob("events.out.tfevents.*"))
        self.writer = SummaryWriter(str(self.log_dir), purge_step=start + 1 if start > 0 else (0 if stale else None))
        if runner.global_step == 0:
            self.writer.add_text("gorl/stage_boundary", f"stage {self.stage} starts at encoder env step {self.offset}",
                                 self.offset)
            self.writer.add_scalar("gorl/stage", self.stage, self.offset)

    def on_iteration_end(self, runner: Any, metrics: dict[str, float]) -> None:
        step = self.offset + runner.global_step
        for name, value in metrics.items():
            self.writer.add_scalar(name, value, step)
        self.writer.add_scalar("gorl/stage", self.stage, step)
