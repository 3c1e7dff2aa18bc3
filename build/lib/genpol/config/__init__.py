"""Structured configs: the schema of every Hydra group, one docstring per field.

Hydra checks names and types against these dataclasses while composing, so ``updater.lrr=1`` or
``updater.lr=abc`` fail before anything is built, naming the key. Ranges and choices are checked in
``__post_init__``, which runs when ``validate`` turns the composed config into these objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

from genpol.config.base import ACTIVATION_NAMES, ENV_BACKENDS, ConfigError, claim_new_dir, require
from genpol.config.env import DatasetConfig, EnvConfig
from genpol.config.pipeline import (GoRLPipelineConfig, LoggerConfig, OfflineToOnlinePipelineConfig,
                                   OnlinePipelineConfig)
from genpol.config.offpolicy import ExpoConfig, QGradientConfig, SACConfig
from genpol.config.policy import (ConsistencyPolicyConfig, CustomPolicyConfig, DiffusionPolicyConfig, FlowPolicyConfig,
                                  FPOPolicyConfig, GaussianPolicyConfig, GoRLPolicyConfig, PolicyConfig,
                                  PolicyFlowPolicyConfig, TanhGaussianPolicyConfig)
from genpol.config.updater import ASPOConfig, PPOConfig, RolloutConfig, SPOConfig, TRPOConfig

__all__ = ["ACTIVATION_NAMES", "ENV_BACKENDS", "ConfigError", "DatasetConfig", "EnvConfig", "LoggerConfig",
           "OfflineToOnlinePipelineConfig", "OnlinePipelineConfig", "GoRLPipelineConfig", "DiffusionPolicyConfig",
           "FlowPolicyConfig", "FPOPolicyConfig", "GaussianPolicyConfig", "PolicyConfig", "PolicyFlowPolicyConfig",
           "TanhGaussianPolicyConfig", "ConsistencyPolicyConfig", "GoRLPolicyConfig", "CustomPolicyConfig",
           "ASPOConfig", "PPOConfig", "RolloutConfig", "SPOConfig", "TRPOConfig", "SACConfig", "ExpoConfig",
           "QGradientConfig", "TrainConfig", "EvaluateConfig", "ALL_SCHEMAS", "register_configs", "validate"]


@dataclass
class TrainConfig:
    """Root of ``python -m genpol.train``."""

    env: EnvConfig = field(default_factory=EnvConfig)
    """Simulator and wrappers (group ``env``)."""
    policy: Any = MISSING
    """Policy head and critic (group ``policy``)."""
    updater: Any = MISSING
    """Learner (group ``updater``): on-policy ppo, spo, aspo, trpo; off-policy sac (RLPD: +experiment=rlpd)."""
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
    collection keeps torch_threads, which is faster for the policy's small per-step batches."""

    def __post_init__(self) -> None:
        """Ranges, and the checks that need two groups at once (policy with pipeline or updater)."""
        require(self.total_steps >= 1, "total_steps", ">= 1", self.total_steps)
        require(self.torch_threads >= 1, "torch_threads", ">= 1", self.torch_threads)
        require(self.update_threads >= 0, "update_threads", ">= 0 (0: torch_threads)", self.update_threads)
        if getattr(self.pipeline, "name", None) == "offline_to_online":
            require(self.dataset.path is not None, "dataset.path", "set for pipeline=offline_to_online",
                     self.dataset.path)
        offline_phase = getattr(self.pipeline, "name", None) == "offline_to_online"
        if getattr(self.updater, "offline_lr_decay", False) and not offline_phase:
            raise ConfigError("updater.offline_lr_decay decays the learning rate over the offline phase of "
                              f"pipeline=offline_to_online; pipeline={self.pipeline.name} has none")
        if getattr(self.env, "step_groups", 0) and self.updater.name not in ("ppo", "spo", "aspo", "trpo"):
            raise ConfigError(f"env.step_groups={self.env.step_groups} pipelines on-policy collection only; "
                              f"updater={self.updater.name} steps one action at a time, so set env.step_groups=0")
        if getattr(self.pipeline, "name", None) == "gorl":
            require(getattr(self.policy, "family", None) == "gorl", "policy", "gorl for pipeline=gorl (its stages "
                    "retrain the latent-decoder head's decoder)", getattr(self.policy, "family", None))
            require(self.updater.name in ("ppo", "spo", "aspo", "trpo"), "updater", "an on-policy updater (ppo, spo, "
                    "aspo or trpo) for pipeline=gorl: the encoder is a latent Gaussian policy", self.updater.name)
        if getattr(self.policy, "family", None) == "diffusion":
            policy, pipeline = self.policy, self.pipeline
            sampled = policy.ddim_steps if policy.use_ddim else policy.denoising_steps
            # a Q-gradient learner's offline phase trains every denoising step by its own loss: the
            # frozen copy is taken before it (random), so it is no pretraining for frozen steps
            pretrained = (pipeline.name == "offline_to_online" and pipeline.pretrain_steps > 0
                          and self.updater.name != "consistency_ac")
            if policy.ft_denoising_steps < sampled and not pretrained:
                # the early steps run a frozen copy of the weights that pretraining leaves; with no
                # pretraining that copy is the random initialization, and those steps never learn
                q_gradient = self.updater.name == "consistency_ac"
                if q_gradient and pipeline.name == "offline_to_online" and pipeline.pretrain_steps > 0:
                    why = "updater=consistency_ac's offline phase trains by its own loss, not by behaviour cloning"
                elif pipeline.name == "offline_to_online":
                    why = "pipeline=offline_to_online with pretrain_steps=0 pretrains nothing"
                else:
                    why = f"pipeline={pipeline.name} pretrains nothing"
                raise ConfigError(
                    f"policy.ft_denoising_steps={policy.ft_denoising_steps} fine-tunes only the last "
                    f"{policy.ft_denoising_steps} of {sampled} denoising steps and freezes the first "
                    f"{sampled - policy.ft_denoising_steps} at their behaviour-cloned weights, but {why}, so they "
                    f"would stay at their random initialization. Set policy.ft_denoising_steps={sampled}"
                    + ("." if q_gradient else ", or pretrain with pipeline=offline_to_online.")
                )
            updater_clip = getattr(self.updater, "clip_range", None)
            if updater_clip is None:  # TRPO: a KL trust region, no clip for a schedule to shape
                for key in ("clip_base", "clip_final"):
                    require(getattr(policy, key) is None, f"policy.{key}",
                             f"null with updater={self.updater.name} (it has no clip range)", getattr(policy, key))
            else:
                # one source of truth for the last step's clip: the updater's clip_range
                if policy.clip_final is not None and abs(policy.clip_final - updater_clip) > 1e-12:
                    raise ConfigError(
                        f"policy.clip_final={policy.clip_final} and updater.clip_range={updater_clip} both set "
                        "the last denoising step's clip; set updater.clip_range only (and policy.clip_base "
                        "for a schedule that starts lower at the noisiest step)"
                    )
                if policy.clip_base is not None:
                    policy.clip_final = updater_clip


@dataclass
class EvaluateConfig:
    """Root of ``python -m genpol.evaluate``."""

    run_dir: str = MISSING
    """Run directory to evaluate (its latest checkpoint, unless checkpoint is set)."""
    checkpoint: Optional[str] = None
    """A specific checkpoint directory (default: the latest one in run_dir)."""
    episodes: int = 10
    """Episodes per mode (deterministic and stochastic)."""
    video: bool = True
    """Write mp4s of the deterministic and stochastic rollouts."""
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
        require(self.torch_threads >= 1, "torch_threads", ">= 1", self.torch_threads)


POLICY_SCHEMAS: dict[str, type] = {"gaussian": GaussianPolicyConfig, "fpo": FPOPolicyConfig,
                                   "policyflow": PolicyFlowPolicyConfig, "diffusion": DiffusionPolicyConfig,
                                   "tanh_gaussian": TanhGaussianPolicyConfig, "gorl": GoRLPolicyConfig,
                                   "consistency": ConsistencyPolicyConfig, "custom": CustomPolicyConfig}
UPDATER_SCHEMAS: dict[str, type] = {"ppo": PPOConfig, "spo": SPOConfig, "aspo": ASPOConfig, "trpo": TRPOConfig,
                                    "sac": SACConfig, "consistency_ac": QGradientConfig,
                                    "expo": ExpoConfig}
PIPELINE_SCHEMAS: dict[str, type] = {"online": OnlinePipelineConfig,
                                     "offline_to_online": OfflineToOnlinePipelineConfig, "gorl": GoRLPipelineConfig}
ALL_SCHEMAS: list[type] = [EnvConfig, PolicyConfig, FlowPolicyConfig, RolloutConfig, *POLICY_SCHEMAS.values(), *UPDATER_SCHEMAS.values(),
                           *PIPELINE_SCHEMAS.values(), DatasetConfig, LoggerConfig, TrainConfig, EvaluateConfig]


def register_configs() -> None:
    """Put the schemas in Hydra's ConfigStore (group option ``schema_<name>`` for each), and register
    the ``genpol.new_dir`` resolver of the default run directory.

    The resolver's value is cached in the config, and Hydra copies that cache into every sweep job's
    config (``load_sweep_config``), pickled along to joblib, Ray and submitit workers and into a
    requeued SLURM job: a sweep claims its directory once, in the launching process."""
    if not OmegaConf.has_resolver("genpol.new_dir"):
        OmegaConf.register_new_resolver("genpol.new_dir", claim_new_dir, use_cache=True)
    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig)
    store.store(name="evaluate_schema", node=EvaluateConfig)
    for group, schemas in (("policy", POLICY_SCHEMAS), ("updater", UPDATER_SCHEMAS),
                           ("pipeline", PIPELINE_SCHEMAS)):
        for name, schema in schemas.items():
            store.store(group=group, name=f"schema_{name}", node=schema)


def validate(cfg: DictConfig) -> Any:
    """Turn a composed config into dataclass objects, running every ``__post_init__`` check, and
    check that the policy head has every capability the learner needs."""
    config = OmegaConf.to_object(cfg)
    if isinstance(config, TrainConfig):
        from genpol.algorithms import check_learner

        check_learner(config)
    return config
