"""Structured configs: the schema of every Hydra group, one docstring per field.

Hydra checks names and types against these dataclasses while composing, so ``updater.lrr=1`` or
``updater.lr=abc`` fail before anything is built, naming the key. Ranges and choices are checked in
``__post_init__``, which runs when ``validate`` turns the composed config into these objects.
"""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, ClassVar, Dict, List, Optional

from hydra.core.config_store import ConfigStore
from omegaconf import MISSING, DictConfig, OmegaConf

ENV_BACKENDS = ("gym", "dmc", "playground", "genpol")
ACTIVATION_NAMES = ("tanh", "relu", "elu", "gelu", "mish", "silu")


class ConfigError(ValueError):
    """A config value out of its range; the message names the full key."""


def _require(condition: bool, key: str, requirement: str, value: Any) -> None:
    if not condition:
        raise ConfigError(f"{key} must be {requirement}, got {value!r}")


@dataclass
class EnvConfig:
    """The simulator and its wrappers."""

    backend: str = "gym"
    """Simulator backend: ``gym`` (gymnasium), ``dmc`` (dm_control suite), ``playground`` (MuJoCo Playground / MJX) or ``genpol``."""
    id: str = MISSING
    """Task name inside the backend, e.g. ``HalfCheetah-v5``, ``cheetah-run``, ``CheetahRun``, ``MultiGoal``."""
    num_envs: int = 8
    """Parallel environment copies stepped together."""
    normalize_obs: bool = True
    """Running mean/variance observation normalization (saved with the policy, frozen at evaluation)."""
    normalize_reward: bool = True
    """Scale rewards by the running std of the discounted return (as SB3's VecNormalize)."""
    obs_clip: float = 10.0
    """Clip range of normalized observations."""
    reward_clip: float = 10.0
    """Clip range of scaled rewards."""
    max_episode_steps: Optional[int] = None
    """Override the task's time limit (None keeps the registered one)."""
    render_width: int = 256
    """Width of rendered video frames in pixels."""
    render_height: int = 256
    """Height of rendered video frames in pixels."""
    kwargs: Dict[str, Any] = field(default_factory=dict)
    """Extra keyword arguments for the backend (``gymnasium.make`` for ``gym``)."""

    @property
    def full_id(self) -> str:
        return f"{self.backend}:{self.id}"

    def __post_init__(self) -> None:
        _require(self.backend in ENV_BACKENDS, "env.backend", f"one of {ENV_BACKENDS}", self.backend)
        _require(self.num_envs >= 1, "env.num_envs", ">= 1", self.num_envs)
        _require(self.obs_clip > 0, "env.obs_clip", "> 0", self.obs_clip)
        _require(self.reward_clip > 0, "env.reward_clip", "> 0", self.reward_clip)
        if self.max_episode_steps is not None:
            _require(self.max_episode_steps >= 1, "env.max_episode_steps", ">= 1 or null", self.max_episode_steps)


def _check_network(key: str, sizes: List[int], activation: str) -> None:
    _require(len(sizes) >= 1 and all(w >= 1 for w in sizes), f"policy.{key}", "non-empty positive widths", sizes)
    _require(activation in ACTIVATION_NAMES, f"policy.{key.replace('hidden_sizes', 'activation')}",
             f"one of {ACTIVATION_NAMES}", activation)


@dataclass
class PolicyConfig:
    """Fields every policy group has: the head family and the critic. The other fields of a
    subclass are the head's constructor arguments."""

    family: str = MISSING
    """Head family; selects the head class."""
    critic_hidden_sizes: List[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer widths of the value network."""
    critic_activation: str = "tanh"
    """Activation of the value network."""

    def __post_init__(self) -> None:
        _check_network("critic_hidden_sizes", self.critic_hidden_sizes, self.critic_activation)
        if hasattr(self, "hidden_sizes"):
            _check_network("hidden_sizes", self.hidden_sizes, self.activation)

    def head_kwargs(self) -> dict[str, Any]:
        """The head's constructor arguments: every field but the family and the critic's."""
        skip = {"family", "critic_hidden_sizes", "critic_activation"}
        return {f.name: getattr(self, f.name) for f in fields(self) if f.name not in skip}


@dataclass
class GaussianPolicyConfig(PolicyConfig):
    """Diagonal Gaussian head (MLP mean, state-independent log-std) and its critic."""

    family: str = "gaussian"
    """Head family; selects the head class."""
    hidden_sizes: List[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer widths of the mean network."""
    activation: str = "tanh"
    """Activation of the mean network."""
    log_std_init: float = 0.0
    """Initial log standard deviation of every action dimension."""
    orthogonal_init: bool = True
    """Orthogonal initialization (gain sqrt(2), output gain 0.01 for the mean)."""


@dataclass
class FlowPolicyConfig(PolicyConfig):
    """Velocity network and ODE sampler shared by the flow heads."""

    hidden_sizes: List[int] = field(default_factory=lambda: [32, 32, 32, 32])
    """Hidden layer widths of the velocity network."""
    activation: str = "silu"
    """Activation of the velocity network."""
    time_embed_dim: int = 8
    """Size of the sinusoidal time embedding."""
    output_scale: float = 0.25
    """Multiplies the velocity network's output."""
    integration_steps: int = 10
    """ODE steps from noise to action."""
    integrator: str = "euler"
    """``euler`` or ``midpoint``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.time_embed_dim >= 2 and self.time_embed_dim % 2 == 0, "policy.time_embed_dim",
                 "an even number >= 2", self.time_embed_dim)
        _require(self.output_scale > 0, "policy.output_scale", "> 0", self.output_scale)
        _require(self.integration_steps >= 1, "policy.integration_steps", ">= 1", self.integration_steps)
        _require(self.integrator in ("euler", "midpoint"), "policy.integrator", "euler or midpoint",
                 self.integrator)


@dataclass
class FPOPolicyConfig(FlowPolicyConfig):
    """FPO: flow policy with the flow-matching-loss ratio (defaults: FPO's playground settings)."""

    family: str = "fpo"
    """Head family; selects the head class."""
    n_mc: int = 8
    """(t, noise) pairs drawn per action."""
    ratio_mode: str = "average"
    """``average`` (FPO: one ratio from averaged losses) or ``per_sample`` (FPO++: one per pair)."""
    t_sampling: str = "grid"
    """``grid`` (t on the sampler's grid) or ``uniform``."""
    loss_weighting: str = "eps"
    """``eps`` (FPO's u_but_supervise_as_eps, weight t^2) or ``velocity`` (unweighted)."""
    critic_hidden_sizes: List[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer widths of the value network."""
    critic_activation: str = "silu"
    """Activation of the value network."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.n_mc >= 1, "policy.n_mc", ">= 1", self.n_mc)
        _require(self.ratio_mode in ("average", "per_sample"), "policy.ratio_mode", "average or per_sample",
                 self.ratio_mode)
        _require(self.t_sampling in ("grid", "uniform"), "policy.t_sampling", "grid or uniform", self.t_sampling)
        _require(self.loss_weighting in ("eps", "velocity"), "policy.loss_weighting", "eps or velocity",
                 self.loss_weighting)


@dataclass
class PolicyFlowPolicyConfig(FlowPolicyConfig):
    """PolicyFlow: flow prior plus learnable Gaussian noise, velocity-variation ratio, Brownian regularizer."""

    family: str = "policyflow"
    """Head family; selects the head class."""
    hidden_sizes: List[int] = field(default_factory=lambda: [64, 64, 64])
    """Hidden layer widths of the velocity network."""
    output_scale: float = 1.0
    """Multiplies the velocity network's output."""
    integrator: str = "midpoint"
    """``euler`` or ``midpoint`` (PolicyFlow's)."""
    log_std_init: float = 0.0
    """Initial log std of the exploration noise (clamped to [-5, 2])."""
    brownian_coef: float = 0.01
    """Weight of the Brownian regularizer."""
    brownian_beta: float = 1.0
    """Temperature beta of the Brownian regularizer."""
    degenerate_to_gaussian: bool = False
    """x0 = 0: the policy becomes a Gaussian around a deterministic flow output (ablation)."""
    critic_hidden_sizes: List[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer widths of the value network."""
    critic_activation: str = "elu"
    """Activation of the value network."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.brownian_coef >= 0, "policy.brownian_coef", ">= 0", self.brownian_coef)


@dataclass
class DiffusionPolicyConfig(PolicyConfig):
    """DPPO diffusion head (defaults: DPPO's Gym fine-tuning config, DDPM K = 20, K' = 10, chunks of 4)."""

    family: str = "diffusion"
    """Head family; selects the head class."""
    act_steps: int = 4
    """Actions executed per chunk (the env runs chunks of this length)."""
    horizon_steps: int = 4
    """Actions predicted per chunk (>= act_steps)."""
    denoising_steps: int = 20
    """K: DDPM steps (pretraining and, without DDIM, sampling)."""
    ft_denoising_steps: int = 10
    """K': the last denoising steps that are fine-tuned (K' = K from scratch)."""
    use_ddim: bool = False
    """Sample with DDIM."""
    ddim_steps: int = 5
    """DDIM sampling steps."""
    hidden_sizes: List[int] = field(default_factory=lambda: [512, 512, 512])
    """Residual MLP widths of the denoiser (all equal)."""
    activation: str = "mish"
    """Activation of the denoiser."""
    time_dim: int = 16
    """Time-embedding size."""
    min_sampling_std: float = 0.1
    """Lower clip of each denoising step's std while sampling (exploration)."""
    min_logprob_std: float = 0.1
    """Lower clip of each denoising step's std in log-probabilities (stability)."""
    randn_clip: float = 3.0
    """Clip of the Gaussian noise of each step."""
    denoised_clip: float = 1.0
    """Clip of the predicted clean action x0."""
    logprob_clamp: List[float] = field(default_factory=lambda: [-5.0, 2.0])
    """Clamp of the per-element log-probabilities."""
    gamma_denoising: float = 0.99
    """Denoising discount of the per-step advantages."""
    clip_base: float = 0.01
    """PPO clip range at the noisiest fine-tuned step."""
    clip_final: float = 0.01
    """PPO clip range at the last denoising step."""
    ddim_eta: float = 1.0
    """DDIM's eta while sampling stochastically."""
    critic_hidden_sizes: List[int] = field(default_factory=lambda: [256, 256, 256])
    """Hidden layer widths of the value network."""
    critic_activation: str = "mish"
    """Activation of the value network."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(self.act_steps >= 1, "policy.act_steps", ">= 1", self.act_steps)
        _require(self.horizon_steps >= self.act_steps, "policy.horizon_steps", f">= act_steps ({self.act_steps})",
                 self.horizon_steps)
        sampled = self.ddim_steps if self.use_ddim else self.denoising_steps
        _require(1 <= self.ft_denoising_steps <= sampled, "policy.ft_denoising_steps",
                 f"in [1, {sampled}] (the sampling steps)", self.ft_denoising_steps)
        _require(self.min_sampling_std >= 0 and self.min_logprob_std > 0, "policy.min_logprob_std",
                 "> 0 (and min_sampling_std >= 0)", self.min_logprob_std)
        _require(len(set(self.hidden_sizes)) == 1, "policy.hidden_sizes", "equal widths (residual blocks)",
                 self.hidden_sizes)
        _require(len(self.logprob_clamp) == 2 and self.logprob_clamp[0] < self.logprob_clamp[1],
                 "policy.logprob_clamp", "[low, high] with low < high", self.logprob_clamp)


@dataclass
class PPOConfig:
    """PPO-clip: rollout length, advantage estimation, and the minibatch epochs."""

    name: str = "ppo"
    """Updater name; selects the loss."""
    rollout_steps: int = 2048
    """Steps collected per env between updates (the rollout is rollout_steps x num_envs)."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    lr: float = 3e-4
    """Adam learning rate of the policy head (and of the critic unless critic_lr is set)."""
    critic_lr: Optional[float] = None
    """Separate critic learning rate (None: same as lr)."""
    lr_schedule: str = "constant"
    """``constant``; ``linear`` decay to 0 over total_steps; or ``adaptive`` (rsl_rl's KL rule, see desired_kl)."""
    desired_kl: float = 0.01
    """KL the ``adaptive`` schedule aims for: lr / 1.5 above 2x, lr x 1.5 below 1/2 (bounds 1e-5..1e-2)."""
    epochs: int = 10
    """Passes over the rollout per update."""
    minibatch_size: int = 64
    """Samples per gradient step."""
    clip_range: float = 0.2
    """PPO's epsilon: ratios are clipped to [1 - clip_range, 1 + clip_range]."""
    clip_range_vf: Optional[float] = None
    """Value clipping range around the old prediction (None: no value clipping)."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus."""
    vf_coef: float = 0.5
    """Weight of the value loss."""
    max_grad_norm: Optional[float] = 0.5
    """Global gradient-norm clip (None: no clipping)."""
    target_kl: Optional[float] = None
    """Stop the epochs once approx-KL exceeds 1.5 x target_kl (None: never)."""
    normalize_advantage: bool = True
    """Normalize advantages per minibatch."""
    adam_eps: float = 1e-5
    """Adam's epsilon."""
    compile: bool = False
    """Compile each minibatch step (loss, gradient, clip, Adam) with torch.compile: ~3x faster small
    minibatches after ~20 s of compilation; needs target_kl=null."""

    def __post_init__(self) -> None:
        if self.compile:
            _require(self.target_kl is None, "updater.target_kl", "null when updater.compile=true", self.target_kl)
        _require(self.rollout_steps >= 1, "updater.rollout_steps", ">= 1", self.rollout_steps)
        _require(0.0 < self.gamma <= 1.0, "updater.gamma", "in (0, 1]", self.gamma)
        _require(0.0 <= self.gae_lambda <= 1.0, "updater.gae_lambda", "in [0, 1]", self.gae_lambda)
        _require(self.lr > 0, "updater.lr", "> 0", self.lr)
        if self.critic_lr is not None:
            _require(self.critic_lr > 0, "updater.critic_lr", "> 0 or null", self.critic_lr)
        _require(self.lr_schedule in ("constant", "linear", "adaptive"), "updater.lr_schedule",
                 "constant, linear or adaptive", self.lr_schedule)
        _require(self.desired_kl > 0, "updater.desired_kl", "> 0", self.desired_kl)
        _require(self.epochs >= 1, "updater.epochs", ">= 1", self.epochs)
        _require(self.minibatch_size >= 1, "updater.minibatch_size", ">= 1", self.minibatch_size)
        _require(0.0 < self.clip_range < 1.0, "updater.clip_range", "in (0, 1)", self.clip_range)
        if self.clip_range_vf is not None:
            _require(self.clip_range_vf > 0, "updater.clip_range_vf", "> 0 or null", self.clip_range_vf)
        _require(self.ent_coef >= 0, "updater.ent_coef", ">= 0", self.ent_coef)
        _require(self.vf_coef >= 0, "updater.vf_coef", ">= 0", self.vf_coef)
        if self.max_grad_norm is not None:
            _require(self.max_grad_norm > 0, "updater.max_grad_norm", "> 0 or null", self.max_grad_norm)
        if self.target_kl is not None:
            _require(self.target_kl > 0, "updater.target_kl", "> 0 or null", self.target_kl)
        _require(self.adam_eps > 0, "updater.adam_eps", "> 0", self.adam_eps)


@dataclass
class SPOConfig(PPOConfig):
    """SPO: PPO's loop with the quadratic penalty -(A r - |A|/(2 eps) (r - 1)^2) instead of the clip."""

    name: str = "spo"
    """Updater name; selects the loss. clip_range is SPO's epsilon."""


@dataclass
class ASPOConfig(PPOConfig):
    """ASPO (FPO++): PPO-clip for positive advantages, SPO's penalty for the others."""

    name: str = "aspo"
    """Updater name; selects the loss. clip_range is the PPO epsilon of positive advantages."""
    spo_clip_range: float = 0.2
    """SPO epsilon for non-positive advantages (FPO++'s manipulation fine-tuning uses 0.01 for both)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _require(0.0 < self.spo_clip_range < 1.0, "updater.spo_clip_range", "in (0, 1)", self.spo_clip_range)


@dataclass
class TRPOConfig:
    """TRPO: one natural-gradient step per rollout (sb3-contrib's defaults), then critic epochs."""

    name: str = "trpo"
    """Updater name."""
    rollout_steps: int = 2048
    """Steps collected per env between updates."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    target_kl: float = 0.01
    """Trust-region radius delta on the mean KL(pi_old || pi_theta)."""
    cg_iterations: int = 15
    """Conjugate-gradient iterations."""
    cg_damping: float = 0.1
    """Damping added to the Fisher-vector product."""
    line_search_shrink: float = 0.8
    """Backtracking factor of the line search."""
    line_search_max_iter: int = 10
    """Backtracking steps tried before the step is rejected."""
    critic_lr: float = 1e-3
    """Adam learning rate of the critic."""
    critic_epochs: int = 10
    """Critic passes over the rollout per update."""
    critic_minibatch_size: int = 128
    """Critic minibatch size."""
    normalize_advantage: bool = True
    """Normalize advantages over the rollout."""
    lr_schedule: str = "constant"
    """Critic learning-rate schedule: ``constant`` or ``linear`` decay to 0."""
    adam_eps: float = 1e-5
    """The critic's Adam epsilon."""

    def __post_init__(self) -> None:
        _require(self.rollout_steps >= 1, "updater.rollout_steps", ">= 1", self.rollout_steps)
        _require(0.0 < self.gamma <= 1.0, "updater.gamma", "in (0, 1]", self.gamma)
        _require(0.0 <= self.gae_lambda <= 1.0, "updater.gae_lambda", "in [0, 1]", self.gae_lambda)
        _require(self.target_kl > 0, "updater.target_kl", "> 0", self.target_kl)
        _require(self.cg_iterations >= 1, "updater.cg_iterations", ">= 1", self.cg_iterations)
        _require(self.cg_damping >= 0, "updater.cg_damping", ">= 0", self.cg_damping)
        _require(0.0 < self.line_search_shrink < 1.0, "updater.line_search_shrink", "in (0, 1)",
                 self.line_search_shrink)
        _require(self.line_search_max_iter >= 1, "updater.line_search_max_iter", ">= 1", self.line_search_max_iter)
        _require(self.critic_lr > 0, "updater.critic_lr", "> 0", self.critic_lr)
        _require(self.critic_epochs >= 0, "updater.critic_epochs", ">= 0", self.critic_epochs)
        _require(self.critic_minibatch_size >= 1, "updater.critic_minibatch_size", ">= 1",
                 self.critic_minibatch_size)
        _require(self.lr_schedule in ("constant", "linear"), "updater.lr_schedule", "constant or linear",
                 self.lr_schedule)


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
        _require(self.checkpoint_every >= 0, "pipeline.checkpoint_every", ">= 0", self.checkpoint_every)
        _require(self.keep_checkpoints >= 1, "pipeline.keep_checkpoints", ">= 1", self.keep_checkpoints)
        _require(self.eval_every >= 0, "pipeline.eval_every", ">= 0", self.eval_every)
        _require(self.eval_episodes >= 1, "pipeline.eval_episodes", ">= 1", self.eval_episodes)


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
        _require(self.pretrain_steps >= 0, "pipeline.pretrain_steps", ">= 0", self.pretrain_steps)
        _require(self.pretrain_batch_size >= 1, "pipeline.pretrain_batch_size", ">= 1", self.pretrain_batch_size)
        _require(self.pretrain_lr > 0, "pipeline.pretrain_lr", "> 0", self.pretrain_lr)
        _require(0.0 < self.ema_decay < 1.0, "pipeline.ema_decay", "in (0, 1)", self.ema_decay)
        _require(self.pretrain_log_every >= 1, "pipeline.pretrain_log_every", ">= 1", self.pretrain_log_every)


@dataclass
class DatasetConfig:
    """The offline dataset of ``pipeline=offline_to_online``."""

    path: Optional[str] = None
    """A D4RL HDF5 file (.hdf5/.h5), or a Minari dataset id such as mujoco/hopper/medium-v0."""
    format: str = "auto"
    """``auto`` (by the path's suffix), ``d4rl`` or ``minari``."""
    minari_root: Optional[str] = None
    """Root of local Minari datasets (default: $MINARI_DATASETS_PATH or ~/.minari/datasets)."""

    def __post_init__(self) -> None:
        _require(self.format in ("auto", "d4rl", "minari"), "dataset.format", "auto, d4rl or minari", self.format)


@dataclass
class LoggerConfig:
    """Where progress goes."""

    tensorboard: bool = True
    """Write TensorBoard events to <run_dir>/tb."""
    progress_bar: bool = True
    """Show a progress bar with env-steps, SPS and the recent return."""


@dataclass
class TrainConfig:
    """Root of ``python -m genpol.train``."""

    env: EnvConfig = field(default_factory=EnvConfig)
    """Simulator and wrappers (group ``env``)."""
    policy: Any = MISSING
    """Policy head and critic (group ``policy``)."""
    updater: Any = MISSING
    """On-policy updater (group ``updater``)."""
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
    run_dir: str = "runs/${now:%Y-%m-%d}/${now:%H-%M-%S}"
    """Run directory; re-running with the same run_dir resumes from its latest checkpoint."""
    device: str = "cpu"
    """Torch device of networks and rollout tensors."""
    torch_threads: int = 1
    """torch intra-op threads; 1 is fastest for small MLPs next to a CPU simulator."""

    def __post_init__(self) -> None:
        _require(self.total_steps >= 1, "total_steps", ">= 1", self.total_steps)
        _require(self.torch_threads >= 1, "torch_threads", ">= 1", self.torch_threads)
        if getattr(self.pipeline, "name", None) == "offline_to_online":
            _require(self.dataset.path is not None, "dataset.path", "set for pipeline=offline_to_online",
                     self.dataset.path)


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

    def __post_init__(self) -> None:
        _require(self.episodes >= 1, "episodes", ">= 1", self.episodes)


POLICY_SCHEMAS: dict[str, type] = {"gaussian": GaussianPolicyConfig, "fpo": FPOPolicyConfig,
                                   "policyflow": PolicyFlowPolicyConfig, "diffusion": DiffusionPolicyConfig}
UPDATER_SCHEMAS: dict[str, type] = {"ppo": PPOConfig, "spo": SPOConfig, "aspo": ASPOConfig, "trpo": TRPOConfig}
PIPELINE_SCHEMAS: dict[str, type] = {"online": OnlinePipelineConfig,
                                     "offline_to_online": OfflineToOnlinePipelineConfig}
ALL_SCHEMAS: list[type] = [EnvConfig, PolicyConfig, FlowPolicyConfig, *POLICY_SCHEMAS.values(), *UPDATER_SCHEMAS.values(),
                           *PIPELINE_SCHEMAS.values(), DatasetConfig, LoggerConfig, TrainConfig, EvaluateConfig]


def register_configs() -> None:
    """Put the schemas in Hydra's ConfigStore (group option ``schema_<name>`` for each)."""
    store = ConfigStore.instance()
    store.store(name="train_schema", node=TrainConfig)
    store.store(name="evaluate_schema", node=EvaluateConfig)
    for group, schemas in (("policy", POLICY_SCHEMAS), ("updater", UPDATER_SCHEMAS),
                           ("pipeline", PIPELINE_SCHEMAS)):
        for name, schema in schemas.items():
            store.store(group=group, name=f"schema_{name}", node=schema)


def validate(cfg: DictConfig) -> Any:
    """Turn a composed config into dataclass objects, running every ``__post_init__`` check."""
    return OmegaConf.to_object(cfg)
