"""The run scaffold every pipeline and phase shares: run preparation and the resume check, the
callbacks (metrics file, TensorBoard, progress bar, evaluation, checkpoints, summary), resuming
from the latest checkpoint, and the end of a phase.

A phase (online training, BC pretraining, a GoRL stage) is a runner plus a ``Phase`` saying where
its files go. ``run_phase`` resumes the runner from the phase's latest checkpoint, if any, runs it,
and closes its env whatever happens.
"""

from __future__ import annotations

import hashlib
import json
import logging
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Callable

import torch
from omegaconf import OmegaConf

from genpol import collectives, distributed
from genpol.allocator import retain_freed_memory
from genpol.callbacks import Checkpointer, Evaluation, MetricsFile, ProgressBar, Summary, TensorBoardLogger
from genpol.callbacks.base import Callback
from genpol.checkpoint import PREFIX, list_checkpoints, load_latest, remove_temporary
from genpol.config import ConfigError, TrainConfig
from genpol.config.aliases import rename_saved
from genpol.config.base import flatten_keys
from genpol.data import DatasetError, OfflineDataset
from genpol.fields import schema_default
from genpol.files import write_text_atomic
from genpol.unread import is_unread, unread_options

log = logging.getLogger(__name__)

# Keys that may change when a run is resumed: they do not alter what the run computes.
# Keys a resumed run may change: budgets, I/O, and how (not what) the updates compute. Compiled and
# eager steps run the same math to within float rounding, so a run saved before a bundle turned
# learner.compile on still resumes; the same holds for the update's thread count, and for env.workers
# (bit-identical results and the same saved env state with any worker count).
RESUMABLE_CHANGES = ("total_steps", "run_dir", "logger.", "pipeline.video", "pipeline.eval_",
                     "pipeline.pretrain_eval_every", "pipeline.checkpoint_every", "pipeline.pretrain_checkpoint_every",
                     "pipeline.keep_checkpoints",
                     "learner.compile", "update_threads", "env.workers")

# Fields added with a default that computes something new: the value that reproduces what a run saved
# before the field existed computed. A key missing from a saved config is compared against this value
# instead of the default, so such a run resumes only when the old behaviour is asked for.
LEGACY_VALUES = {"learner.adjust_target_entropy": False, "learner.td_subsets": "shared", "learner.clip_edits": True,
                 "learner.critic_layer_norm_eps": 1e-5, "dataset.truncated_rows": "drop",
                 "dataset.actions": "min_max"}

VIDEO_OWNER = ".run_dir"  # in a videos folder: the absolute run directory its videos belong to


def video_folder(video_root: str | Path, run_dir: Path) -> Path:
    """The folder a run's videos go to, claimed for that run: ``<video_root>/<run name>``, the run
    directory's name (with its parent's for sweep jobs, whose directories are numbered 0, 1, ...).

    The folder holds a marker (``.run_dir``) with the run's absolute directory. A name another run
    claimed first (``runs/ppo/seed0`` and ``runs/sac/seed0`` are both ``seed0``) gets a digest of this
    run's directory appended, so no run overwrites another's videos, and a resumed run or
    ``genpol.evaluate`` finds its own folder again. A folder without a marker (written before markers)
    goes to the first run that asks for it."""
    run_dir = Path(run_dir).resolve()
    name = f"{run_dir.parent.name}_{run_dir.name}" if run_dir.name.isdigit() else run_dir.name
    owner = str(run_dir)
    digest = hashlib.sha256(owner.encode()).hexdigest()[:8]
    for candidate in (name, f"{name}-{digest}"):
        folder = Path(video_root) / candidate
        marker = folder / VIDEO_OWNER
        try:
            folder.mkdir(parents=True, exist_ok=True)
            with open(marker, "x") as file:  # exclusive: of two runs starting together, one claims it
                file.write(owner + "\n")
            return folder
        except FileExistsError:
            if marker.read_text().strip() == owner:
                return folder
        except OSError:  # an unwritable root: the recorder fails there, where a failed video is handled
            return folder
    return folder  # the digest's, claimed by a run whose path shares the digest: as unlikely as a hash collision


def check_resume_config(run_dir: Path, cfg: TrainConfig) -> None:
    """Write ``config.yaml`` on a first start; on a resume, refuse a config that changes the run."""
    path = run_dir / "config.yaml"
    current = OmegaConf.to_container(OmegaConf.structured(cfg), resolve=True)
    if path.exists() and not holds_progress(run_dir):
        log.info("%s holds an earlier start that saved no checkpoint: starting afresh with this config", run_dir)
    if check_saved_run(run_dir, cfg, current):
        # what may change on a resume (the budget, the evaluation) did: the file says what the run does now,
        # for genpol.report, which groups runs by it
        set_aside_outgrown_summary(run_dir, cfg, OmegaConf.load(path).get("total_steps"))
    write_text_atomic(path, OmegaConf.to_yaml(current))


def check_saved_run(run_dir: Path, cfg: TrainConfig, current: dict[str, Any]) -> bool:
    """Whether ``run_dir`` holds a run that ``cfg`` (``current``: it as a container) resumes; ``ConfigError`` where
    it holds one that ``cfg`` would change, or checkpoints without their config.yaml. Writes nothing: the resume
    check and the sweep check before launch (``genpol.sweep_check``, each job's folder) share it."""
    path = run_dir / "config.yaml"
    if not holds_progress(run_dir):  # nothing saved, or an earlier start that failed before its first checkpoint
        return False
    if not path.exists():  # deleted by hand: the resume could not be checked against what the run was
        raise ConfigError(f"{run_dir} holds checkpoints but no config.yaml, so a resume cannot be checked against "
                          "the config the run trained with; put its config.yaml back, or start anew in another "
                          "run_dir")
    compare_saved_config(run_dir, path, cfg, current)
    return True


def set_aside_outgrown_summary(run_dir: Path, cfg: TrainConfig, saved_total_steps: int | None) -> None:
    """A finished run resumed with a larger ``total_steps`` than ``saved_total_steps`` (its config.yaml's) trains
    on, and its ``summary.json`` describes the smaller budget until the new end replaces it: a stop before that end
    (exit 4, a preemption, NaN) left it, and ``genpol.report``, which counts a run with a summary as finished,
    showed the old numbers under the new budget. It moves to ``summary-<env_steps>.json``. The same budget again
    keeps it: a chunked head's run ends a few env steps short of total_steps by design (478 of 480 with
    act_steps=3), and read as "trains on" that moved a finished run's summary aside. (GoRL's steps count its
    stages apart: left as it is.)"""
    path = run_dir / "summary.json"
    if cfg.pipeline.name == "gorl" or not list_checkpoints(run_dir / "checkpoints"):
        return  # without a checkpoint the summary is what marks the run as holding progress
    if saved_total_steps is not None and cfg.total_steps <= saved_total_steps:
        return
    try:
        env_steps = int(json.loads(path.read_text())["env_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return
    if env_steps < cfg.total_steps:
        os.replace(path, run_dir / f"summary-{env_steps}.json")
        log.info("%s: training on to total_steps=%d; the summary of its end at %d env steps is now %s", run_dir,
                 cfg.total_steps, env_steps, f"summary-{env_steps}.json")


def holds_progress(run_dir: Path) -> bool:
    """Whether ``run_dir`` holds something a resume would continue: a checkpoint of any phase, or a finished
    run's summary. Without one, an earlier start failed before its first checkpoint (a bad dataset path, a
    misspelt env id): the same run_dir may start again, with the config corrected. A checkpoint moved aside
    by a re-save that was killed (``.old-step_*``, which the resume moves back) counts."""
    return (run_dir / "summary.json").exists() or any(run_dir.rglob(f"checkpoints/{PREFIX}*")) or any(
        run_dir.rglob(f"checkpoints/.old-{PREFIX}*"))


def unread_keys(config: dict[str, Any]) -> tuple[str, ...]:
    """The keys that a run of the flattened ``config`` never reads, whatever their values (``unread.is_unread``
    matches a key and the keys under it): ``dataset`` without a dataset, ``dataset.actions`` outside
    offline_to_online (the only pipeline that maps actions), and ``genpol.unread.unread_options``' keys (the
    learned temperature's settings under a fixed one, MEow's critic fields, PPO's ``desired_kl`` under a
    constant rate, GoRL's learner clip, ...; MaxEntDP's ``target_entropy_scale`` default moved from -1 to 0.5
    on 2026-12-07: runs saved before resume and report as one configuration)."""
    unread = ("dataset",) if config.get("dataset.path") is None else ()
    if config.get("pipeline.name") != "offline_to_online":
        unread += ("dataset.actions",)
    return unread + tuple(unread_options(config))


def compare_saved_config(run_dir: Path, path: Path, cfg: TrainConfig, current: dict[str, Any]) -> None:
    """``ConfigError`` naming every key whose value differs from the saved ``config.yaml`` in a way that
    changes what the run computes."""
    try:
        saved = flatten_keys(rename_saved(OmegaConf.to_container(OmegaConf.load(path), resolve=True)))
    except Exception as error:  # noqa: BLE001 - yaml's and OmegaConf's parse errors: a hand edit broke the file
        raise ConfigError(f"{path} cannot be read ({type(error).__name__}: {' '.join(str(error).split())[:300]}); "
                          "fix the file, or start anew in another run_dir") from None
    now = flatten_keys(current)
    unused = tuple(set(unread_keys(saved)) & set(unread_keys(now)))  # read by neither the saved run nor this one
    resumable = RESUMABLE_CHANGES
    if now.get("pipeline.name") == "gorl":  # its evaluations pick each stage's best encoder, which the next builds on
        resumable = tuple(key for key in RESUMABLE_CHANGES if key != "pipeline.eval_")
    changed = sorted(key for key in set(saved) | set(now)
                     if saved.get(key) != now.get(key) and not key.startswith(resumable) and not is_unread(key, unused)
                     and not (key not in saved and now[key] == LEGACY_VALUES.get(key, schema_default(cfg, key))))
    trained = _online_steps_trained(run_dir) if now.get("pipeline.name") != "gorl" else None
    clock = getattr(cfg.learner, "total_steps_clock", None)  # a learner of the user's may time nothing by it
    if saved.get("total_steps") != now.get("total_steps") and clock is not None:
        timed = clock(trained or 0, saved.get("total_steps", now["total_steps"]), now["total_steps"])
        if timed is not None:  # a schedule over total_steps: another budget re-times what is left of it
            raise ConfigError(f"{run_dir} {timed[0]}: resuming with total_steps={now['total_steps']} would change "
                              f"{timed[1]}; resume with the saved total_steps, or start anew")
    if trained is not None and now["total_steps"] < min(saved.get("total_steps", trained), trained):
        # the run would end at once, and config.yaml (what genpol.report groups runs by) would understate it
        raise ConfigError(f"{run_dir} has trained {trained} env steps (total_steps={saved.get('total_steps')}): "
                          f"total_steps={now['total_steps']} is below that; resume with total_steps >= {trained}, "
                          "or start anew in another run_dir")
    if changed:
        def was(key: str) -> str:
            if key not in saved and key in LEGACY_VALUES:
                return f"{LEGACY_VALUES[key]!r} (saved before the field existed)"
            return repr(saved.get(key))

        details = ", ".join(f"{key}: {was(key)} -> {now.get(key)!r}" for key in changed)
        raise ConfigError(
            f"{run_dir} holds a run with a different config ({details}); resuming it would not "
            "continue the same run. Use another run_dir, or the saved config."
        )


def _online_steps_trained(run_dir: Path) -> int | None:
    """The env steps the online phase has trained: its latest checkpoint's (``run_dir/checkpoints/step_<n>``),
    else a finished run's summary; None when neither is there (a run still pretraining)."""
    checkpoints = list_checkpoints(run_dir / "checkpoints")  # zero-padded step names: the last is the latest
    if checkpoints:
        return int(checkpoints[-1].name[len(PREFIX):])
    try:
        return int(json.loads((run_dir / "summary.json").read_text())["env_steps"])
    except (OSError, ValueError, KeyError, TypeError):
        return None


def prepare_run(cfg: TrainConfig, run_dir: str | Path) -> Path:
    """Create the run directory, check a resumed config, set threads, the allocator's thresholds
    (``genpol.allocator``) and the seed."""
    run_dir = Path(run_dir)
    run_dir.mkdir(parents=True, exist_ok=True)
    if collectives.is_main():  # ranks > 0 run with their own seed and write nothing
        check_resume_config(run_dir, cfg)
    torch.set_num_threads(cfg.torch_threads)
    retain_freed_memory()
    torch.manual_seed(cfg.seed)
    return run_dir


@dataclass
class Phase:
    """Where one training phase keeps its files, and how it reports.

    Attributes:
        directory: holds ``checkpoints/``, ``progress.jsonl`` and (with a ``summary``) ``summary.json``.
        tensorboard_dir: TensorBoard events (None: no TensorBoard).
        total: the phase's length in its own unit, for the progress bar (None: no bar).
        label, unit: progress-bar description and unit (``step`` for env steps, ``grad step``).
        checkpoint_every, keep_checkpoints: iterations between checkpoints (0: only at the end)
            and how many to keep.
        policy_spec: the JSON half of the checkpoints' ``policy/``.
        evaluation: the phase's evaluation callback, or None.
        summary_extra: headline fields of ``summary.json``; None writes no summary for the phase.
    """

    directory: Path
    tensorboard_dir: Path | None
    total: int | None
    label: str
    checkpoint_every: int
    keep_checkpoints: int
    policy_spec: dict[str, Any]
    unit: str = "step"
    evaluation: Evaluation | None = None
    summary_extra: dict[str, Any] | None = None
    extra_callbacks: list[Callback] = field(default_factory=list)

    @property
    def checkpoints_dir(self) -> Path:
        return self.directory / "checkpoints"

    @property
    def metrics_path(self) -> Path:
        return self.directory / "progress.jsonl"


@dataclass
class PhaseCallbacks:
    """The callbacks of one phase, in the order the runner calls them after each iteration:
    evaluation first (its result joins the metrics), then the files, then the checkpoint (which
    captures the others' state), then the summary. At the end of training the checkpoint is
    written first (``Checkpointer.end_first``), so a failing evaluation or video never costs the
    weights."""

    callbacks: list[Callback]
    checkpointer: Checkpointer
    summary: Summary | None


class RankCheckpointer(Checkpointer):
    """The checkpointer of ranks > 0 under torchrun: on the same schedule as rank 0's, it hands over
    this rank's state (``runner.training_state`` joins the gather) and writes nothing."""

    def save(self, runner: Any) -> Any:
        runner.training_state()
        self._last_step = runner.global_step
        return f"rank 0's checkpoint in {self.checkpoints_dir}"

    def save_unless_saved(self, runner: Any) -> Any:
        # as rank 0 decides, from the step alone (a save is a collective: one rank skipping it alone would hang)
        return (f"rank 0's checkpoint in {self.checkpoints_dir}" if self._last_step == runner.global_step
                else self.save(runner))


def phase_callbacks(phase: Phase) -> PhaseCallbacks:
    """The phase's callbacks; under torchrun, ranks > 0 get only a ``RankCheckpointer`` (rank 0 does
    all I/O)."""
    if not collectives.is_main():
        checkpointer = RankCheckpointer(phase.checkpoints_dir, phase.policy_spec, phase.checkpoint_every,
                                        phase.keep_checkpoints)
        return PhaseCallbacks([checkpointer], checkpointer, None)
    phase.directory.mkdir(parents=True, exist_ok=True)
    callbacks: list[Callback] = [] if phase.evaluation is None else [phase.evaluation]
    callbacks.append(MetricsFile(phase.metrics_path))
    if phase.tensorboard_dir is not None:
        callbacks.append(TensorBoardLogger(phase.tensorboard_dir))
    if phase.total is not None:
        callbacks.append(ProgressBar(phase.total, phase.label, phase.unit))
    callbacks += phase.extra_callbacks
    checkpointer = Checkpointer(phase.checkpoints_dir, phase.policy_spec, phase.checkpoint_every,
                                phase.keep_checkpoints, synced_first=[phase.metrics_path])
    callbacks.append(checkpointer)
    summary = None
    if phase.summary_extra is not None:
        summary = Summary(phase.directory, phase.metrics_path, phase.evaluation, checkpointer, phase.summary_extra)
        callbacks.append(summary)
    return PhaseCallbacks(callbacks, checkpointer, summary)


def _resume(runner: Any, phase: Phase, device: str | torch.device) -> None:
    """Load the phase's latest checkpoint (if any) into ``runner``. Once loaded, the checkpoint's tensors are
    garbage: held through the run, a resumed off-policy run kept a second copy of its replay beside the live
    one (and a third while the next checkpoint is written), past what its memory check allowed."""
    latest = load_latest(phase.checkpoints_dir, map_location=device)
    if latest is not None:
        log.info("resuming %s from %s", phase.label, latest[0])
        runner.load(latest[1], latest[2])


def run_phase(runner: Any, phase: Phase, device: str | torch.device, close: Callable[[], None] | None = None) -> None:
    """Resume ``runner`` from the phase's latest checkpoint (if any), run it, then ``close()``."""
    if collectives.is_main():  # the lock holder: a rank > 0 removing them could race a save of rank 0's
        remove_temporary(phase.checkpoints_dir)
    if collectives.world_size() > 1:  # before the resume, whose env reset (an inexact env state) updates them
        distributed.synchronize_normalizers(runner.env)
    _resume(runner, phase, device)  # its own frame: the loaded state (an off-policy replay's copy) is freed
    if collectives.world_size() > 1:
        distributed.prepare_runner(runner)
    try:
        runner.run()
    finally:
        if close is not None:
            close()


def check_same_dataset(run_dir: Path, dataset: OfflineDataset) -> None:
    """Record the dataset's fingerprint in ``run_dir/dataset.json`` at the first start; on a resume, refuse data
    that changed since (a file made again at the same path): the pretraining's order and the min-max bounds of
    the saved policy and of the training env's checkpoint belong to the data the run started with, and an
    online run's offline replay (RLPD's half of every batch) restores its sampler against them."""
    record = run_dir / "dataset.json"
    now = dataset.fingerprint()
    if record.exists() and holds_progress(run_dir):
        saved = json.loads(record.read_text())
        if saved["fingerprint"] != now:
            raise DatasetError(f"dataset.path: {dataset.source} is not the data {run_dir} started with "
                               f"({saved['source']}: {saved['fingerprint']}, now {now}); resume with that data, "
                               "or use another run_dir")
        return
    write_text_atomic(record, json.dumps({"source": dataset.source, "fingerprint": now}, indent=2))
