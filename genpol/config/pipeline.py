"""Schemas of the ``pipeline`` and ``logger`` groups."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Dict, List

from genpol.config.base import ConfigError, require
from genpol.fields import FixedFields

# what pipeline.online_reset can give the learner that runs both phases of offline_to_online afresh
ONLINE_RESETS = ("optimizers", "targets", "step_counts")


@dataclass
class OnlinePipelineConfig(FixedFields):
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
    """Episodes per evaluation (reset seeds 10000, 10001, ...)."""
    eval_deterministic: bool = True
    """Evaluate with ``act(obs, deterministic=True)`` (the mean or mode; for heads that act by drawing, such as a
    softmax-Q policy, the same seeded draws for every state at every step, so the action is a function of
    the state), or false: fresh draws every step, as the policy acts in training (Ding & Jin's consistency
    code evaluates so: docs/fidelity.md)."""
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
        if self.video and Path(self.video_dir).expanduser().is_file():  # found after training, the video lost
            raise ConfigError(f"pipeline.video_dir={self.video_dir} is a file, not a directory: pick another "
                              "video_dir (or pipeline.video=false)")


@dataclass
class OfflineToOnlinePipelineConfig(OnlinePipelineConfig):
    """Pretraining on ``dataset``, evaluation, then online fine-tuning, in one run. The pretraining is
    behaviour cloning, or with ``learner=consistency_ac`` offline RL by that learner (its optimizers
    and lr, pretrain_batch_size; the BC-only pretrain_lr, pretrain_min_lr, pretrain_weight_decay and
    ema_* keys do not apply)."""

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
    pretrain_eval_every: int = 0
    """Offline RL phase (learner=consistency_ac): evaluate every this many logs (0: only at the end)."""
    online_learner: Dict[str, Any] = field(default_factory=dict)
    """Learner fields that take these values when the online phase starts, for a learner that runs both
    phases (learner=consistency_ac: eta, bc_coef, lr, critic_lr), e.g. ``+pipeline.online_learner.eta=1.0
    +pipeline.online_learner.bc_coef=0 +pipeline.online_learner.lr=1e-5`` (Ding & Jin's online phase). Other
    learners are built for the online phase: set ``learner.*``."""
    online_policy: Dict[str, Any] = field(default_factory=dict)
    """Head fields that take these values when the online phase starts (the consistency head: sampling_steps,
    ``+pipeline.online_policy.sampling_steps=5``), on the head and any copy of it the learner keeps; the online
    phase's checkpoints rebuild the head so."""
    online_reset: List[str] = field(default_factory=list)
    """What the learner that runs both phases starts the online phase with afresh: ``optimizers`` (Adam's
    moments and step counts), ``targets`` (random weights for the target critics and the EMA actor),
    ``step_counts`` (the gradient steps that clock the target and EMA schedules). All three,
    ``[optimizers,targets,step_counts]``: Ding & Jin's reload of the offline model into a new agent."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.pretrain_steps >= 0, "pipeline.pretrain_steps", ">= 0", self.pretrain_steps)
        require(self.pretrain_batch_size >= 1, "pipeline.pretrain_batch_size", ">= 1", self.pretrain_batch_size)
        require(self.pretrain_lr > 0, "pipeline.pretrain_lr", "> 0", self.pretrain_lr)
        # the cosine runs from pretrain_lr down to pretrain_min_lr: a larger floor would climb, a negative one ascend
        require(0 <= self.pretrain_min_lr <= self.pretrain_lr, "pipeline.pretrain_min_lr",
                f"in [0, pipeline.pretrain_lr={self.pretrain_lr}]", self.pretrain_min_lr)
        require(self.pretrain_weight_decay >= 0, "pipeline.pretrain_weight_decay", ">= 0", self.pretrain_weight_decay)
        require(0.0 < self.ema_decay < 1.0, "pipeline.ema_decay", "in (0, 1)", self.ema_decay)
        require(self.ema_start >= 0, "pipeline.ema_start", ">= 0", self.ema_start)
        require(self.ema_every >= 1, "pipeline.ema_every", ">= 1", self.ema_every)
        require(self.pretrain_checkpoint_every >= 0, "pipeline.pretrain_checkpoint_every", ">= 0",
                self.pretrain_checkpoint_every)
        require(self.pretrain_log_every >= 1, "pipeline.pretrain_log_every", ">= 1", self.pretrain_log_every)
        require(self.pretrain_eval_every >= 0, "pipeline.pretrain_eval_every", ">= 0", self.pretrain_eval_every)
        require(set(self.online_reset) <= set(ONLINE_RESETS) and len(set(self.online_reset)) == len(self.online_reset),
                "pipeline.online_reset", f"distinct items of {list(ONLINE_RESETS)}", list(self.online_reset))


@dataclass
class GoRLPipelineConfig(OnlinePipelineConfig):
    """GoRL's stages in one run (ALGORITHMS.md 6.2): in every stage a fresh encoder learns by the
    on-policy updater with the decoder frozen; then, except after the last stage, the best encoder
    and the current decoder collect (s, pre-tanh a), and a new decoder learns by flow matching from
    N(0, I) onto those actions. ``total_steps`` is the encoder budget of all stages together (the
    paper's x-axis); collection steps are counted apart. Needs ``policy=gorl``."""

    name: str = "gorl"
    """Pipeline name."""
    stage_weights: List[float] = field(default_factory=lambda: [2.0, 2.0, 1.0, 1.0])
    """Relative encoder budgets of the stages (their number is its length): stage k trains for
    total_steps * w_k / sum(w). GoRL: 60M, 60M, 30M, 30M of 180M = [2, 2, 1, 1]."""
    clip_range_first: float = 0.15
    """learner.clip_range in stage 0 (GoRL: 0.15); PPO-family updaters only."""
    clip_range_later: float = 0.3
    """learner.clip_range in stages 1+ (GoRL: 0.3)."""
    max_grad_norm_first: float = 0.5
    """learner.max_grad_norm in stage 0 (GoRL: 0.5); PPO-family updaters only."""
    max_grad_norm_later: float = 1.0
    """learner.max_grad_norm in stages 1+ (GoRL: 1.0)."""
    latent_l2_first: float = 5e-4
    """Encoder penalty c_z (mean(mu^2) + mean(sigma^2)) in stage 0 (GoRL: 5e-4; 0 for BallInCup)."""
    latent_l2_later: float = 1e-3
    """Encoder penalty c_z in stages 1+ (GoRL: 1e-3)."""
    collect_steps: int = 20_000_000
    """Env steps of data collection after each stage but the last (GoRL: 20 x ~0.98M)."""
    decoder_epochs: int = 50
    """Passes over the collected data per decoder training (GoRL: 50)."""
    decoder_batch_size: int = 8192
    """Actions per decoder gradient step (GoRL: 8192)."""
    decoder_lr: float = 3e-4
    """Adam learning rate of the decoder (GoRL: 3e-4)."""
    decoder_pairs: int = 8
    """(t, noise) pairs drawn per action in the flow-matching loss (GoRL: 8)."""
    decoder_validation: float = 0.1
    """Fraction of the collected actions held out for validation (GoRL: 0.1)."""
    decoder_patience: int = 20
    """Epochs without a better validation loss before the decoder training stops (GoRL: 20)."""
    decoder_max_samples: int = 10_000_000
    """At most this many collected actions are used, a random subset (GoRL: 10M)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(len(self.stage_weights) >= 1 and all(w > 0 for w in self.stage_weights), "pipeline.stage_weights",
                "a non-empty list of positive weights", self.stage_weights)
        for key in ("clip_range_first", "clip_range_later"):
            require(0.0 < getattr(self, key) < 1.0, f"pipeline.{key}", "in (0, 1)", getattr(self, key))
        for key in ("max_grad_norm_first", "max_grad_norm_later", "decoder_lr"):
            require(getattr(self, key) > 0, f"pipeline.{key}", "> 0", getattr(self, key))
        for key in ("latent_l2_first", "latent_l2_later"):
            require(getattr(self, key) >= 0, f"pipeline.{key}", ">= 0", getattr(self, key))
        for key in ("collect_steps", "decoder_epochs", "decoder_batch_size", "decoder_pairs", "decoder_patience",
                    "decoder_max_samples"):
            require(getattr(self, key) >= 1, f"pipeline.{key}", ">= 1", getattr(self, key))
        require(0.0 < self.decoder_validation < 1.0, "pipeline.decoder_validation", "in (0, 1)",
                self.decoder_validation)


@dataclass
class LoggerConfig(FixedFields):
    """Where progress goes."""

    tensorboard: bool = True
    """Write TensorBoard events to <run_dir>/tb."""
    progress_bar: bool = True
    """Show a progress bar with env-steps, SPS and the recent return."""
