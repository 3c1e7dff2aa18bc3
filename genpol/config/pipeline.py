"""Schemas of the ``pipeline`` and ``logger`` groups."""

from __future__ import annotations

from dataclasses import dataclass

from genpol.config.base import require


@dataclass
class OnlinePipelineConfig:
    """Training from scratch: checkpoints, evaluation and videos around the on-policy loop."""

    name: str = "online"
    """Pipeline name."""
    checkpoint_every: int = 10
    """Write a checkpoint every this many iterations (0: only at the end)."""
    keep_checkpoints: int = 3
    """Keep this many most recent checkpoints."""
    eval_every: int = 0
    """Evaluate every this many iterations (0: only at the end)."""
    eval_episodes: int = 5
    """Deterministic episodes per evaluation (reset seeds 10000, 10001, ...)."""
    video: bool = True
    """Record the final evaluation's first episode as an mp4 under video_dir/<run name>/."""
    video_dir: str = "videos"
    """Directory of evaluation videos (relative to the working directory)."""
    compile_sampling: bool = False
    """Compile the head's sampling with torch.compile (worth it for flow heads: ~2x faster rollouts)."""

    def __post_init__(self) -> None:
        require(self.checkpoint_every >= 0, "pipeline.checkpoint_every", ">= 0", self.checkpoint_every)
        require(self.keep_checkpoints >= 1, "pipeline.keep_checkpoints", ">= 1", self.keep_checkpoints)
        require(self.eval_every >= 0, "pipeline.eval_every", ">= 0", self.eval_every)
        require(self.eval_episodes >= 1, "pipeline.eval_episodes", ">= 1", self.eval_episodes)


@dataclass
class OfflineToOnlinePipelineConfig(OnlinePipelineConfig):
    """Behaviour-cloning pretraining on ``dataset``, evaluation, then online fine-tuning, in one run."""

    name: str = "offline_to_online"
    """Pipeline name."""
    pretrain_steps: int = 20000
    """Behaviour-cloning gradient steps (0: skip pretraining)."""
    pretrain_batch_size: int = 128
    """Behaviour-cloning batch size."""
    pretrain_lr: float = 1e-3
    """AdamW learning rate of pretraining (cosine-decayed to pretrain_min_lr)."""
    pretrain_min_lr: float = 1e-4
    """Final learning rate of the cosine decay."""
    pretrain_weight_decay: float = 1e-6
    """AdamW weight decay."""
    ema_decay: float = 0.995
    """EMA decay of the pretrained weights (fine-tuning starts from the EMA)."""
    ema_start: int = 1000
    """Gradient step at which the EMA starts."""
    ema_every: int = 5
    """Gradient steps between EMA updates."""
    pretrain_log_every: int = 200
    """Gradient steps between pretraining logs (and the unit of pretrain_checkpoint_every)."""
    pretrain_checkpoint_every: int = 10
    """Pretraining checkpoints every this many logs."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.pretrain_steps >= 0, "pipeline.pretrain_steps", ">= 0", self.pretrain_steps)
        require(self.pretrain_batch_size >= 1, "pipeline.pretrain_batch_size", ">= 1", self.pretrain_batch_size)
        require(self.pretrain_lr > 0, "pipeline.pretrain_lr", "> 0", self.pretrain_lr)
        require(0.0 < self.ema_decay < 1.0, "pipeline.ema_decay", "in (0, 1)", self.ema_decay)
        require(self.pretrain_log_every >= 1, "pipeline.pretrain_log_every", ">= 1", self.pretrain_log_every)


@dataclass
class LoggerConfig:
    """Where progress goes."""

    tensorboard: bool = True
    """Write TensorBoard events to <run_dir>/tb."""
    progress_bar: bool = True
    """Show a progress bar with env-steps, SPS and the recent return."""
