"""Schemas of the ``policy`` group: one per head family, each with its critic."""

from __future__ import annotations

from dataclasses import dataclass, field, fields
from typing import Any, Dict, List, Optional

from omegaconf import MISSING

from genpol.config.base import ACTIVATION_NAMES, require


def _check_network(key: str, sizes: List[int], activation: str) -> None:
    require(len(sizes) >= 1 and all(w >= 1 for w in sizes), f"policy.{key}", "non-empty positive widths", sizes)
    require(activation in ACTIVATION_NAMES, f"policy.{key.replace('hidden_sizes', 'activation')}",
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
        require(self.time_embed_dim >= 2 and self.time_embed_dim % 2 == 0, "policy.time_embed_dim",
                 "an even number >= 2", self.time_embed_dim)
        require(self.output_scale > 0, "policy.output_scale", "> 0", self.output_scale)
        require(self.integration_steps >= 1, "policy.integration_steps", ">= 1", self.integration_steps)
        require(self.integrator in ("euler", "midpoint"), "policy.integrator", "euler or midpoint",
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
    brownian_coef: float = 0.0
    """Weight of PolicyFlow's Brownian regularizer on FPO's velocity field (0: off, as in FPO; it
    counters mode collapse; 0.1 with FPO++'s per-sample ratio and ASPO keeps 3-4 MultiGoal goals)."""
    brownian_beta: float = 1.0
    """Temperature beta of the Brownian regularizer."""
    critic_hidden_sizes: List[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer widths of the value network."""
    critic_activation: str = "silu"
    """Activation of the value network."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.n_mc >= 1, "policy.n_mc", ">= 1", self.n_mc)
        require(self.ratio_mode in ("average", "per_sample"), "policy.ratio_mode", "average or per_sample",
                 self.ratio_mode)
        require(self.t_sampling in ("grid", "uniform"), "policy.t_sampling", "grid or uniform", self.t_sampling)
        require(self.brownian_coef >= 0, "policy.brownian_coef", ">= 0", self.brownian_coef)
        require(self.brownian_beta > 0, "policy.brownian_beta", "> 0", self.brownian_beta)
        require(self.loss_weighting in ("eps", "velocity"), "policy.loss_weighting", "eps or velocity",
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
        require(self.brownian_coef >= 0, "policy.brownian_coef", ">= 0", self.brownian_coef)
        require(self.brownian_beta > 0, "policy.brownian_beta", "> 0", self.brownian_beta)


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
    """K': the last denoising steps that are fine-tuned; the earlier ones keep their pretrained weights,
    so K' < K needs pipeline=offline_to_online with pretrain_steps > 0 (from scratch: K' = K)."""
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
    clip_base: Optional[float] = None
    """PPO clip at the noisiest fine-tuned step, rising exponentially to learner.clip_range at the last
    step (DPPO Robomimic: 0.001 to 0.01). None: learner.clip_range at every step (DPPO Gym: 0.01)."""
    clip_final: Optional[float] = None
    """PPO clip at the last denoising step: always learner.clip_range, the one source of truth. Left
    None it is filled in from there when clip_base is set; a different value is a config error."""
    ddim_eta: float = 1.0
    """DDIM's eta while sampling stochastically."""
    ddim_eval_eta: float = 0.0
    """DDIM's eta in deterministic evaluation (no noise): 0 is DPPO's; equal to ddim_eta it follows the
    means of the chain that fine-tuning trains (policy=diffusion_ddim)."""
    clamp_gradient: str = "inward"
    """Backward pass of rsample's final clamp to [-1, 1] (Q-gradient learners, Diffusion-QL): inward (a saturated
    action's gradient passes when it points back into the box), straight_through, or zero (torch's clamp)."""
    critic_hidden_sizes: List[int] = field(default_factory=lambda: [256, 256, 256])
    """Hidden layer widths of the value network."""
    critic_activation: str = "mish"
    """Activation of the value network."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.act_steps >= 1, "policy.act_steps", ">= 1", self.act_steps)
        require(self.horizon_steps >= self.act_steps, "policy.horizon_steps", f">= act_steps ({self.act_steps})",
                 self.horizon_steps)
        sampled = self.ddim_steps if self.use_ddim else self.denoising_steps
        require(1 <= self.ft_denoising_steps <= sampled, "policy.ft_denoising_steps",
                 f"in [1, {sampled}] (the sampling steps)", self.ft_denoising_steps)
        require(self.min_sampling_std >= 0 and self.min_logprob_std > 0, "policy.min_logprob_std",
                 "> 0 (and min_sampling_std >= 0)", self.min_logprob_std)
        require(len(set(self.hidden_sizes)) == 1, "policy.hidden_sizes", "equal widths (residual blocks)",
                 self.hidden_sizes)
        require(len(self.logprob_clamp) == 2 and self.logprob_clamp[0] < self.logprob_clamp[1],
                 "policy.logprob_clamp", "[low, high] with low < high", self.logprob_clamp)
        for key in ("ddim_eta", "ddim_eval_eta"):
            require(0.0 <= getattr(self, key) <= 1.0, f"policy.{key}", "in [0, 1]", getattr(self, key))
        require(self.clamp_gradient in ("inward", "straight_through", "zero"), "policy.clamp_gradient",
                "inward, straight_through or zero", self.clamp_gradient)
        for key in ("clip_base", "clip_final"):
            value = getattr(self, key)
            if value is not None:
                require(0.0 < value < 1.0, f"policy.{key}", "in (0, 1) or null", value)


@dataclass
class TanhGaussianPolicyConfig(PolicyConfig):
    """Squashed Gaussian head (SAC's actor: state-dependent log-std, a = tanh(u)). Its critic fields
    size a value network for on-policy learners; SAC's Q-critics are sized in the updater group."""

    family: str = "tanh_gaussian"
    """Head family; selects the head class."""
    hidden_sizes: List[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer widths of the actor (SB3's net_arch)."""
    activation: str = "relu"
    """Activation of the actor."""
    log_std_min: float = -20.0
    """Lower clamp of the log-std."""
    log_std_max: float = 2.0
    """Upper clamp of the log-std."""
    log_prob_epsilon: float = 1e-6
    """eps in log(1 - tanh(u)^2 + eps) (SB3); 0 gives the exact form (RLPD)."""
    init: str = "default"
    """``default`` (PyTorch's, as SB3) or ``xavier_uniform`` (RLPD)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.log_std_min < self.log_std_max, "policy.log_std_min", f"< log_std_max ({self.log_std_max})",
                self.log_std_min)
        require(self.log_prob_epsilon >= 0, "policy.log_prob_epsilon", ">= 0", self.log_prob_epsilon)
        require(self.init in ("default", "xavier_uniform"), "policy.init", "default or xavier_uniform", self.init)


@dataclass
class CustomPolicyConfig(PolicyConfig):
    """A head from the user's own package: ``policy=custom policy.family=my_pkg.heads:MyHead
    +policy.kwargs.width=64``. The class subclasses ``genpol.heads.PolicyHead``; checkpoints record
    the same ``module:ClassName``, so evaluation imports it (the module must be importable there too)."""

    family: str = MISSING
    """``module:ClassName`` of the head class."""
    kwargs: Dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the head's constructor, after ``obs_dim`` and ``act_dim``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(":" in self.family, "policy.family", "'module:ClassName' (your head class)", self.family)

    def head_kwargs(self) -> dict[str, Any]:
        return dict(self.kwargs)


@dataclass
class ConsistencyPolicyConfig(PolicyConfig):
    """Consistency policy (Ding & Jin 2024): few-step sampler, consistency-training BC, and genpol's
    stochastic multistep sampler with per-step Gaussian log-probs for the on-policy updaters."""

    family: str = "consistency"
    """Head family; selects the head class."""
    act_steps: int = 1
    """Actions executed per chunk (1: single actions; Q-gradient learners need 1)."""
    horizon_steps: int = 1
    """Actions predicted per chunk (>= act_steps)."""
    hidden_sizes: List[int] = field(default_factory=lambda: [256, 256, 256])
    """Hidden layer widths of F_theta (reference: 3 x 256)."""
    activation: str = "mish"
    """Activation of F_theta."""
    time_dim: int = 16
    """Size of the noise-level embedding."""
    sampling_steps: int = 2
    """T: network calls per action (reference: 2, 5 on some tasks)."""
    sigma_data: float = 0.5
    """sigma_data of c_skip / c_out."""
    eps: float = 0.002
    """Smallest noise level; f(a, eps) = a."""
    tau_max: float = 80.0
    """Largest noise level (the sampler's start)."""
    tau_min_sampling: float = 2.0
    """Smallest noise level the sampler re-noises to (levels: linspace(this, tau_max, T))."""
    rho: float = 7.0
    """rho of the Karras boundaries."""
    ct_initial_scales: int = 2
    """N(0) of the consistency-training schedule."""
    ct_final_scales: int = 150
    """N grows to this + 1 over ct_total_steps."""
    ct_total_steps: int = 20000
    """Training steps over which N grows (the yaml ties it to pipeline.pretrain_steps)."""
    target_decay: float = 0.995
    """EMA decay of the consistency-training target network (0 with target_every=1: the online network
    without gradient, improved CT's target)."""
    target_every: int = 5
    """Training steps between target updates."""
    target_start: int = 1000
    """Training step from which the target is an EMA (before: a copy)."""
    ct_distance: str = "l2"
    """Consistency-training distance: ``l2`` or ``pseudo_huber``."""
    ct_noise_sampling: str = "uniform"
    """How CT draws its pair of noise levels: uniform over the N - 1 pairs (reference) or lognormal (improved CT)."""
    ct_loss_scale: bool = True
    """Weight each sample by 100 / (tau_{n+1} - tau_n) (the reference's scale_consis_loss)."""
    min_sampling_std: float = 0.1
    """On-policy sampler: std floor of every step and std of the last one (exploration)."""
    scale_input: bool = True
    """Scale F_theta's noisy-action input by c_in = 1 / sqrt(tau^2 + sigma_data^2) (EDM); false: raw, as the reference."""
    clamp_gradient: str = "inward"
    """Backward pass of the Q-gradient sampler's clamp to [-1, 1]: inward (a saturated action's gradient passes
    when it points back into the box), straight_through, or zero (torch's clamp, the reference's)."""
    critic_hidden_sizes: List[int] = field(default_factory=lambda: [256, 256, 256])
    """Hidden layer widths of the value network."""
    critic_activation: str = "mish"
    """Activation of the value network."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.act_steps >= 1, "policy.act_steps", ">= 1", self.act_steps)
        require(self.horizon_steps >= self.act_steps, "policy.horizon_steps", f">= act_steps ({self.act_steps})",
                self.horizon_steps)
        require(self.sampling_steps >= 1, "policy.sampling_steps", ">= 1", self.sampling_steps)
        require(self.time_dim >= 2 and self.time_dim % 2 == 0, "policy.time_dim", "an even number >= 2", self.time_dim)
        require(0 < self.eps < self.tau_min_sampling <= self.tau_max, "policy.tau_min_sampling",
                f"in (eps={self.eps}, tau_max={self.tau_max}]", self.tau_min_sampling)
        require(self.sigma_data > 0, "policy.sigma_data", "> 0", self.sigma_data)
        require(2 <= self.ct_initial_scales <= self.ct_final_scales, "policy.ct_initial_scales",
                f"in [2, ct_final_scales={self.ct_final_scales}]", self.ct_initial_scales)
        require(self.ct_total_steps >= 1, "policy.ct_total_steps", ">= 1", self.ct_total_steps)
        require(0.0 <= self.target_decay < 1.0, "policy.target_decay", "in [0, 1)", self.target_decay)
        require(self.target_every >= 1, "policy.target_every", ">= 1", self.target_every)
        require(self.ct_distance in ("l2", "pseudo_huber"), "policy.ct_distance", "l2 or pseudo_huber",
                self.ct_distance)
        require(self.ct_noise_sampling in ("uniform", "lognormal"), "policy.ct_noise_sampling", "uniform or lognormal",
                self.ct_noise_sampling)
        require(self.min_sampling_std > 0, "policy.min_sampling_std", "> 0", self.min_sampling_std)
        require(self.clamp_gradient in ("inward", "straight_through", "zero"), "policy.clamp_gradient",
                "inward, straight_through or zero", self.clamp_gradient)


@dataclass
class GoRLPolicyConfig(PolicyConfig):
    """GoRL latent-decoder head (Gaussian encoder in z-space, frozen flow decoder, tanh) and its
    critic; defaults are GoRL's (Brax DMC sizes). Stage settings live in ``pipeline=gorl``."""

    family: str = "gorl"
    """Head family; selects the head class."""
    hidden_sizes: List[int] = field(default_factory=lambda: [32, 32, 32, 32])
    """Hidden layer widths of the encoder (it outputs the latent mean and raw scale)."""
    activation: str = "silu"
    """Activation of the encoder."""
    decoder_hidden_sizes: List[int] = field(default_factory=lambda: [64, 64, 64, 64])
    """Hidden layer widths of the decoder's velocity network."""
    decoder_activation: str = "silu"
    """Activation of the decoder."""
    time_embed_dim: int = 8
    """Size of the decoder's sinusoidal time embedding."""
    integration_steps: int = 10
    """Decoder steps from x = z to the pre-tanh action: Euler (flow) or deterministic DDIM (ddim)."""
    zero_init_decoder: bool = True
    """Zero decoder weights, so stage 0's decoder is exactly the identity (GoRL); the ddim decoder is
    bypassed (g(s, z) = z) until the first distilled decoder is loaded."""
    decoder: str = "flow"
    """flow: conditional flow matching, Euler from x = z; ddim: epsilon-prediction DDPM network,
    deterministic DDIM (eta 0) from x_T = z (GoRL's PPO + Diffusion)."""
    diffusion_timesteps: int = 10
    """T of the ddim decoder's cosine DDPM schedule (a multiple of integration_steps); unused by flow."""
    latent_l2_coef: float = 0.0
    """Penalty c_z (mean(mu^2) + mean(sigma^2)) on the encoder; pipeline=gorl sets it per stage."""
    critic_hidden_sizes: List[int] = field(default_factory=lambda: [256, 256, 256, 256, 256])
    """Hidden layer widths of the value network (Brax: 256 x 5)."""
    critic_activation: str = "silu"
    """Activation of the value network."""

    def __post_init__(self) -> None:
        super().__post_init__()
        _check_network("decoder_hidden_sizes", self.decoder_hidden_sizes, self.decoder_activation)
        require(self.time_embed_dim >= 2 and self.time_embed_dim % 2 == 0, "policy.time_embed_dim",
                "an even number >= 2", self.time_embed_dim)
        require(self.integration_steps >= 1, "policy.integration_steps", ">= 1", self.integration_steps)
        require(self.decoder in ("flow", "ddim"), "policy.decoder", "flow or ddim", self.decoder)
        if self.decoder == "ddim":
            require(self.diffusion_timesteps % self.integration_steps == 0, "policy.diffusion_timesteps",
                    f"a multiple of policy.integration_steps ({self.integration_steps}) for the ddim decoder",
                    self.diffusion_timesteps)
        require(self.latent_l2_coef >= 0, "policy.latent_l2_coef", ">= 0", self.latent_l2_coef)
