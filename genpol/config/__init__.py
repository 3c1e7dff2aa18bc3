"""Structured configs: the schema of every Hydra group, one docstring per field. The ``policy`` group's
schemas are the heads' own configs, declared beside each head (``genpol.config.policy`` gathers them).

Hydra checks names and types against these dataclasses while composing, so ``learner.lrr=1`` or
``learner.lr=abc`` fail before anything is built, naming the key. Ranges and choices are checked in
``__post_init__``, which runs when ``genpol.configure.validate`` turns the composed config into these
objects. This package is the schema only: it imports no learner, and the checks that need the
learner table (a head with a learner, a pipeline with a learner) run in ``genpol.configure``.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from omegaconf import MISSING

from genpol.config.base import ACTIVATION_NAMES, ENV_BACKENDS, ConfigError, check_run_dir, claim_new_dir, require
from genpol.config.env import DatasetConfig, EnvConfig
from genpol.config.pipeline import (GoRLPipelineConfig, LoggerConfig, OfflineToOnlinePipelineConfig,
                                   OnlinePipelineConfig)
from genpol.config.offpolicy import ExpoConfig, OffPolicyConfig, QGradientConfig, SACConfig
from genpol.config.policy import (POLICY_SCHEMAS, ConsistencyPolicyConfig, CustomPolicyConfig, DiffusionPolicyConfig,
                                  FlowPolicyConfig, FPOPolicyConfig, GaussianPolicyConfig, GoRLPolicyConfig, PolicyConfig,
                                  PolicyFlowPolicyConfig, TanhGaussianPolicyConfig)
from genpol.config.onpolicy import ASPOConfig, PPOConfig, RolloutConfig, SPOConfig, TRPOConfig
from genpol.fields import FixedFields
from genpol.errors import require_seed

__all__ = ["ACTIVATION_NAMES", "ENV_BACKENDS", "ConfigError", "DatasetConfig", "EnvConfig", "LoggerConfig",
           "OfflineToOnlinePipelineConfig", "OnlinePipelineConfig", "GoRLPipelineConfig", "DiffusionPolicyConfig",
           "FlowPolicyConfig", "FPOPolicyConfig", "GaussianPolicyConfig", "PolicyConfig", "PolicyFlowPolicyConfig",
           "TanhGaussianPolicyConfig", "ConsistencyPolicyConfig", "GoRLPolicyConfig", "CustomPolicyConfig",
           "ASPOConfig", "PPOConfig", "RolloutConfig", "SPOConfig", "TRPOConfig", "SACConfig", "OffPolicyConfig", "ExpoConfig",
           "QGradientConfig", "TrainConfig", "EvaluateConfig", "ALL_SCHEMAS", "POLICY_SCHEMAS", "PIPELINE_SCHEMAS",
           "claim_new_dir"]


@dataclass
class TrainConfig(FixedFields):
    """Root of ``python -m genpol.train``."""

    env: EnvConfig = field(default_factory=EnvConfig)
    """Simulator and wrappers (group ``env``)."""
    policy: Any = MISSING
    """Policy head and critic (group ``policy``)."""
    learner: Any = MISSING
    """Learner (group ``learner``; ``updater`` before 2026-12-02): on-policy ppo, spo, aspo, trpo;
    off-policy sac (RLPD: +experiment=rlpd), expo, consistency_ac (``genpol.algorithms.registry``)."""
    pipeline: Any = MISSING
    """Training pipeline (group ``pipeline``)."""
    logger: LoggerConfig = field(default_factory=LoggerConfig)
    """Logging (group ``logger``)."""
    dataset: DatasetConfig = field(default_factory=DatasetConfig)
    """Offline dataset (used by pipeline=offline_to_online)."""
    seed: int = 0
    """Seed of torch, the environments and minibatch shuffling."""
    total_steps: int = 1_000_000
    """Environment steps to train for (summed over envs)."""
    run_dir: str = "${genpol.new_dir:runs/${now:%Y-%m-%d}/${now:%H-%M-%S}}"
    """Run directory (a sweep's job i: <run_dir>/i); re-running with the same run_dir resumes from its
    latest checkpoint. The default is claimed when it is first resolved, so two launches in the same
    second get two directories (the second ``..._1``), never one."""
    device: str = "cpu"
    """Torch device of networks and rollout tensors."""
    torch_threads: int = 1
    """torch intra-op threads; 1 is fastest for small MLPs next to a CPU simulator."""
    update_threads: int = 0
    """torch intra-op threads during an on-policy update (0: torch_threads). Env worker processes
    (env.workers) sit idle while the learner updates, so their cores can serve the update's GEMMs;
    collection keeps torch_threads, which is faster for the policy's small per-step batches. The off-policy
    learners read none (refused when set: ``genpol.unread``)."""

    def __post_init__(self) -> None:
        """Ranges of the root's own fields. The checks that need two groups at once (policy with
        pipeline or learner) read the learner table, so they run in ``genpol.configure.validate``."""
        require(self.total_steps >= 1, "total_steps", ">= 1", self.total_steps)
        require_seed("seed", self.seed)
        check_run_dir(self.run_dir)
        require(self.torch_threads >= 1, "torch_threads", ">= 1", self.torch_threads)
        require(self.update_threads >= 0, "update_threads", ">= 0 (0: torch_threads)", self.update_threads)


@dataclass
class EvaluateConfig(FixedFields):
    """Root of ``python -m genpol.evaluate``."""

    run_dir: str = MISSING
    """Run directory to evaluate (its latest checkpoint, unless checkpoint is set)."""
    checkpoint: Optional[str] = None
    """A specific checkpoint directory of run_dir (default: its latest), as a path or relative to run_dir
    (``checkpoints/step_000000512000``)."""
    episodes: int = 10
    """Episodes per mode (deterministic and stochastic)."""
    video: bool = False
    """Write mp4s of the deterministic and stochastic rollouts (``video=true``; off by default, as in
    ``genpol.api.evaluate``: on, a bare ``genpol-evaluate`` made ``videos/`` in whatever folder it ran from)."""
    video_dir: str = "videos"
    """Videos go to <video_dir>/<run name>/."""
    seed: int = 10000
    """Reset seed of the first episode; episode i uses seed + i."""
    device: str = "cpu"
    """Torch device."""
    torch_threads: int = 1
    """torch intra-op threads; the training default (1) reproduces the run's own evaluation exactly."""

    def __post_init__(self) -> None:
        require(self.episodes >= 1, "episodes", ">= 1", self.episodes)
        require_seed("seed", self.seed)
        require(self.torch_threads >= 1, "torch_threads", ">= 1", self.torch_threads)


PIPELINE_SCHEMAS: dict[str, type] = {"online": OnlinePipelineConfig,
                                     "offline_to_online": OfflineToOnlinePipelineConfig, "gorl": GoRLPipelineConfig}
# the learners' schemas are in their table, genpol.algorithms.registry.LEARNERS
ALL_SCHEMAS: list[type] = [EnvConfig, PolicyConfig, FlowPolicyConfig, RolloutConfig, OffPolicyConfig,
                           *POLICY_SCHEMAS.values(),
                           *PIPELINE_SCHEMAS.values(), DatasetConfig, LoggerConfig, TrainConfig, EvaluateConfig]
