"""DPPO (Ren et al., ICLR 2025): a diffusion policy fine-tuned as a two-layer MDP.

The head predicts a chunk of ``horizon_steps`` actions (flattened, ``H * A``); the env executes
the first ``act_steps`` of them (``genpol.envs.chunking``). Each denoising step is a Gaussian policy
``x^{k-1} ~ N(mu_theta(x^k, k, s), sigma_k^2)``, so the denoising chain has exact per-step
log-probabilities and the ratio is taken per step:

* only the last ``ft_denoising_steps`` (K') steps are fine-tuned, on the trainable ``denoiser``;
  the earlier steps run a frozen copy (``start_finetuning`` refreshes it from the pretrained,
  usually EMA, weights). From scratch, K' = K and there is no frozen copy (see below);
* sampling clips each step's std from below at ``min_sampling_std`` (exploration); log-probs use
  ``min_logprob_std`` (raw DDPM posterior stds near the end are ~1e-2 and would make ratios explode);
* the Gaussian noise is clipped to +-``randn_clip``, the predicted clean action x0 to
  +-``denoised_clip``, and the final sample to [-1, 1] (``final_clamp``; DPPO's configs leave it unclamped);
* per-element log-probs are clamped to ``logprob_clamp`` and averaged (not summed) over the
  executed action dims, which keeps ratios near 1 and explains DPPO's tiny clip values;
* the record stores the last K' + 1 chain states, ``log_ratio`` returns ``[B, K']``, the advantage
  of step j (j = 0 the noisiest) is weighted by ``gamma_denoising^(K' - 1 - j)`` and its clip range
  is interpolated from ``clip_base`` (noisiest) to ``clip_final`` (last step) as
  ``base + (final - base) (e^{3u} - 1) / (e^3 - 1)``, ``u = j / (K' - 1)``; a single fine-tuned
  step (K' = 1) is the last step and gets ``clip_final``, as in DPPO's code. Without ``clip_final``
  the head hands out no per-step clip and the updater's ``clip_range`` applies to every step; a
  config fills ``clip_final`` from ``learner.clip_range`` when ``clip_base`` is set, so the
  updater's value is the one source of the final step's clip (``TrainConfig.__post_init__``).

Early steps at their pretrained weights. With K' < K the first K - K' steps run ``frozen_denoiser``,
which holds the weights of the moment ``start_finetuning`` was called (after pretraining). Until
then it holds the random initialization, and those steps would never learn: a config that trains
from scratch must fine-tune every step (K' = K), which ``TrainConfig.__post_init__`` enforces.

Schedules come from diffusers (``DDPMScheduler`` / ``DDIMScheduler``, cosine ``squaredcos_cap_v2``,
epsilon prediction), or, ``beta_schedule=vp``, EXPO's (``genpol.heads.ddpm_schedules``); the steps are written out here because DPPO needs their Gaussian means and
variances, which the schedulers' ``step`` functions do not expose. ``kl`` is exact: the mean over
fine-tuned steps and action dims of KL(N(mu_old, sigma^2) || N(mu_theta, sigma^2)) with the log-prob
std, which matches the averaged log-ratio.

Deterministic evaluation follows DPPO's noise levels - DDPM keeps std 1e-3 on intermediate steps and
0 on the last, DDIM uses eta = 0 - with the initial and intermediate noise drawn from a fixed seed,
one draw shared by every state of the batch, so that ``act(s, deterministic=True)`` is a function of s
alone, whatever batch s is in (``heads.base.standard_normal``). With DDIM, eta = 0 evaluates another chain
than the one fine-tuning trains (its means carry sqrt(1 - abar_prev - sigma^2) eps, sigma set by the
sampling eta). ``ddim_eval_eta`` = ``ddim_eta`` evaluates the trained chain's means without noise
instead, as DDPM's evaluation does; on Hopper (``bench/dppo_options.py``, 3 seeds, 120k steps) that
read 1446, 1429 and 1741 after fine-tuning where eta = 0 read 586, 544 and 601.
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, List, Optional

import torch
from torch import nn

from genpol.errors import require
from genpol.heads.base import (Capability, HeadConfig, PolicyHead, RatioTerms, Record, evaluation_generator,
                               standard_normal)
from genpol.heads.bounds import CLAMP_GRADIENTS, clamp_to_box
from genpol.heads.chunking import ChunkedActions
from genpol.heads.ddpm_schedules import BETA_SCHEDULES, step_tables
from genpol.heads.denoiser import DENOISER_TIME_EMBEDDINGS, DENOISERS, Denoiser, ExpoDenoiser
from genpol.nets import ACTIVATIONS


@dataclass
class DiffusionConfig(HeadConfig):
    """DPPO diffusion head (defaults: DPPO's Gym fine-tuning config, DDPM K = 20, K' = 10; single
    actions here, and ``policy=diffusion`` sets DPPO's Gym chunks of 4)."""

    family: str = "diffusion"
    """Head family; selects the head class."""
    act_steps: int = 1
    """Actions executed per chunk (the env runs chunks of this length; policy=diffusion: 4, DPPO's Gym)."""
    horizon_steps: int = 1
    """Actions predicted per chunk (>= act_steps; policy=diffusion: 4)."""
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
    """Residual MLP widths of the denoiser (all equal); ``denoiser=expo``: one residual block per entry."""
    denoiser: str = "residual_mlp"
    """The network: ``residual_mlp`` (genpol's, DPPO's residual MLP with the time options below) or ``expo``
    (EXPO's ``DDPM``: learned Fourier features of the integer timestep of size time_dim, a time MLP to
    2 time_dim, a LayerNorm ResNet of len(hidden_sizes) blocks; theirs: time_dim 128, activation silu)."""
    beta_schedule: str = "squaredcos_cap_v2"
    """Noise schedule: ``squaredcos_cap_v2`` (diffusers' cosine, genpol's and DPPO's) or ``vp`` (EXPO's
    ``vp_beta_schedule``, the discretized VP SDE; ``genpol.heads.ddpm_schedules``)."""
    sampling_variance: str = "posterior"
    """DDPM step variance: ``posterior`` (the posterior's beta_t (1 - abar_{t-1}) / (1 - abar_t), genpol's
    and DPPO's) or ``beta`` (beta_t, none at the last step: Ho et al.'s other choice and EXPO's sampler).
    DDPM only."""
    clip_every_step: bool = False
    """Clamp every chain state to [-1, 1], not just the final one (EXPO's ``clip_sampler``); the stored
    chain holds the clamped states. EXPO's sampler also clips neither x0 nor the noise: denoised_clip and
    randn_clip .inf."""
    imitation_reduction: str = "mean"
    """The imitation loss's reduction of the squared noise error: ``mean`` over every element (genpol's)
    or ``sum`` over the chunk's dims, then the mean over the batch (EXPO's: |A| times larger)."""
    activation: str = "mish"
    """Activation of the denoiser."""
    time_dim: int = 16
    """Time-embedding size."""
    time_embedding: str = "genpol"
    """The denoiser's embedding of the diffusion timestep: ``genpol`` (sin and cos of 2^k pi timestep / 1000)
    or ``dppo`` (DPPO's code: sin and cos of timestep x 10000^(-k / (time_dim/2 - 1)), time_dim >= 4); the
    authors' is needed to load or compare their weights (docs/fidelity.md)."""
    output_activation: bool = True
    """An activation before the denoiser's output layer (genpol's); false: none, as DPPO's ResidualMLP."""
    time_mlp_activation: Optional[str] = None
    """Activation of the time MLP; null: the denoiser's ``activation`` (genpol's), ``mish``: DPPO's, whose
    time MLP is Mish whatever the denoiser's activation (their Gym configs: ReLU denoisers)."""
    final_clamp: bool = True
    """Clamp the chain's final state to [-1, 1] (genpol's). False: unclamped, as DPPO's configs (their
    final_action_clip_value is unset); the stored chain and the last step's log-prob are then of the
    unclamped state, and actions leave the box: the env wrapper clips what it executes. Applies to sample,
    act and rsample (where clamp_gradient then has nothing to do)."""
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
        # before the checks bounded by it, which named ft_denoising_steps for denoising_steps=0
        require(self.denoising_steps >= 1, "policy.denoising_steps", ">= 1", self.denoising_steps)
        if self.use_ddim:  # DDIM samples a subset of the training chain's steps
            require(1 <= self.ddim_steps <= self.denoising_steps, "policy.ddim_steps",
                    f"in [1, {self.denoising_steps}] (policy.denoising_steps, the chain DDIM samples from)",
                    self.ddim_steps)
        sampled = self.ddim_steps if self.use_ddim else self.denoising_steps
        require(1 <= self.ft_denoising_steps <= sampled, "policy.ft_denoising_steps",
                 f"in [1, {sampled}] (the sampling steps)", self.ft_denoising_steps)
        # accepted, these silently flipped alternate steps' advantages (gamma < 0), froze the noise at one value
        # (randn_clip < 0) or pinned x0 at a bound (denoised_clip <= 0)
        require(0 < self.gamma_denoising <= 1, "policy.gamma_denoising", "in (0, 1]", self.gamma_denoising)
        require(self.randn_clip > 0, "policy.randn_clip", "> 0 (.inf: no clip)", self.randn_clip)
        require(self.denoised_clip > 0, "policy.denoised_clip", "> 0 (.inf: no clip)", self.denoised_clip)
        require(self.min_sampling_std >= 0 and self.min_logprob_std > 0, "policy.min_logprob_std",
                 "> 0 (and min_sampling_std >= 0)", self.min_logprob_std)
        require(len(set(self.hidden_sizes)) == 1, "policy.hidden_sizes", "equal widths (residual blocks)",
                 self.hidden_sizes)
        for key, allowed in (("denoiser", DENOISERS), ("beta_schedule", BETA_SCHEDULES),
                             ("sampling_variance", ("posterior", "beta")), ("imitation_reduction", ("mean", "sum"))):
            require(getattr(self, key) in allowed, f"policy.{key}", f"one of {allowed}", getattr(self, key))
        require(not (self.use_ddim and self.sampling_variance == "beta"), "policy.sampling_variance",
                "posterior with use_ddim (DDIM's sigma is set by its eta)", self.sampling_variance)
        # EXPO's network has its own time features and always an activation before its output layer
        require(self.denoiser != "expo" or (self.time_embedding == "genpol" and self.output_activation
                                            and self.time_mlp_activation is None), "policy.denoiser",
                "residual_mlp with time_embedding, output_activation or time_mlp_activation set", self.denoiser)
        require(self.time_embedding in DENOISER_TIME_EMBEDDINGS, "policy.time_embedding",
                f"one of {tuple(DENOISER_TIME_EMBEDDINGS)}", self.time_embedding)
        smallest = 4 if self.time_embedding == "dppo" else 2  # DPPO's frequencies divide by time_dim/2 - 1
        require(self.time_dim >= smallest and self.time_dim % 2 == 0, "policy.time_dim",
                f"an even number >= {smallest}", self.time_dim)
        require(self.time_mlp_activation is None or self.time_mlp_activation in ACTIVATIONS,
                "policy.time_mlp_activation", f"null or one of {tuple(ACTIVATIONS)}", self.time_mlp_activation)
        require(len(self.logprob_clamp) == 2 and self.logprob_clamp[0] < self.logprob_clamp[1],
                 "policy.logprob_clamp", "[low, high] with low < high", self.logprob_clamp)
        for key in ("ddim_eta", "ddim_eval_eta"):
            require(0.0 <= getattr(self, key) <= 1.0, f"policy.{key}", "in [0, 1]", getattr(self, key))
        require(self.clamp_gradient in CLAMP_GRADIENTS, "policy.clamp_gradient", f"one of {CLAMP_GRADIENTS}",
                self.clamp_gradient)
        for key in ("clip_base", "clip_final"):
            value = getattr(self, key)
            if value is not None:
                require(0.0 < value < 1.0, f"policy.{key}", "in (0, 1) or null", value)


class DiffusionHead(ChunkedActions, PolicyHead):
    """DPPO's diffusion policy; hyperparameters: ``DiffusionConfig``. See the module docstring for the
    method and the defaults' sources. ``act_dim`` is the env's action size, ``act_steps * A`` (chunked env).

    The per-step clip (``unit_clip``) rises from ``clip_base`` at the noisiest fine-tuned step to
    ``clip_final`` at the last; ``clip_base`` None: ``clip_final`` at every step; ``clip_final`` None
    (then ``clip_base`` must be None too): no per-step clip, the updater's clip applies. ``rsample``'s
    final clamp to [-1, 1] has the forward value of a clamp in every ``clamp_gradient`` mode
    (``genpol.heads.bounds``).
    """

    family = "diffusion"
    Config = DiffusionConfig
    # rsample: the stochastic chain keeps its graph, so Q-gradient learners (Diffusion-QL) train through it
    capabilities = PolicyHead.capabilities | {Capability.REPARAMETERIZED}
    has_exact_kl = True
    has_entropy = False

    def __init__(self, obs_dim: int, act_dim: int, config: DiffusionConfig | None = None, **hyperparameters: Any):
        super().__init__(obs_dim, act_dim, config, **hyperparameters)
        c = self.config
        act_steps, horizon_steps, ft_denoising_steps = c.act_steps, c.horizon_steps, c.ft_denoising_steps
        use_ddim, ddim_steps, denoising_steps = c.use_ddim, c.ddim_steps, c.denoising_steps
        clip_base, clip_final = c.clip_base, c.clip_final
        if act_dim % act_steps:
            raise ValueError(f"act_dim {act_dim} is not a multiple of policy.act_steps {act_steps}")
        if clip_final is None and clip_base is not None:  # the config leaves it to the learner's clip_range
            raise ValueError("clip_base needs clip_final: the schedule rises from clip_base to clip_final")
        steps_sampled = ddim_steps if use_ddim else denoising_steps
        self.act_steps, self.horizon_steps = act_steps, horizon_steps
        self.single_act_dim = act_dim // act_steps
        self.chunk_dim = horizon_steps * self.single_act_dim
        self.executed_dim = act_dim
        self.num_steps, self.ft_steps = steps_sampled, ft_denoising_steps
        self.use_ddim = use_ddim
        self.min_sampling_std, self.min_logprob_std = c.min_sampling_std, c.min_logprob_std
        self.randn_clip, self.denoised_clip = c.randn_clip, c.denoised_clip
        self.logprob_clamp = tuple(c.logprob_clamp)
        self.ddim_eta, self.ddim_eval_eta = c.ddim_eta, c.ddim_eval_eta
        self.clamp_gradient = c.clamp_gradient
        self.final_clamp, self.clip_every_step = c.final_clamp, c.clip_every_step
        self.imitation_reduction = c.imitation_reduction
        if c.denoiser == "expo":
            self.denoiser = ExpoDenoiser(obs_dim, self.chunk_dim, c.hidden_sizes[0], len(c.hidden_sizes),
                                         c.activation, c.time_dim)
        else:
            self.denoiser = Denoiser(obs_dim, self.chunk_dim, c.hidden_sizes, c.activation, c.time_dim,
                                     c.time_embedding, c.output_activation, c.time_mlp_activation)
        self.frozen_denoiser = None
        if ft_denoising_steps < steps_sampled:  # early steps run the pretrained weights, frozen
            self.frozen_denoiser = self._frozen_copy()
        self._register_schedule(denoising_steps, use_ddim, ddim_steps, c.beta_schedule, c.sampling_variance)
        j = torch.arange(ft_denoising_steps, dtype=torch.float32)
        self.register_buffer("unit_weights", c.gamma_denoising ** (ft_denoising_steps - 1 - j), persistent=False)
        # None: no per-step clip, the updater's clip_range applies to every step
        unit_clip = None if clip_final is None else self.clip_schedule(ft_denoising_steps, clip_base, clip_final)
        self.register_buffer("unit_clip", unit_clip, persistent=False)

    @staticmethod
    def clip_schedule(ft_steps: int, clip_base: float | None, clip_final: float) -> torch.Tensor:
        """DPPO's per-step clip ``[K']``: exponential from ``clip_base`` (j = 0, the noisiest step) to
        ``clip_final`` (j = K' - 1, the last step); ``clip_base`` None is a constant ``clip_final``."""
        if clip_base is None:
            clip_base = clip_final
        if ft_steps == 1:  # the only fine-tuned step is the last one (u = 1), not the noisiest (u = 0)
            u = torch.ones(1)
        else:
            u = torch.arange(ft_steps, dtype=torch.float32) / (ft_steps - 1)
        return clip_base + (clip_final - clip_base) * (torch.exp(3 * u) - 1) / (math.exp(3) - 1)

    # ------------------------------------------------------------------ schedule
    def _register_schedule(self, denoising_steps: int, use_ddim: bool, ddim_steps: int,
                           beta_schedule: str = "squaredcos_cap_v2", sampling_variance: str = "posterior") -> None:
        """The schedule's tables as non-persistent buffers (``genpol.heads.ddpm_schedules.step_tables``)."""
        tables = step_tables(denoising_steps, use_ddim, ddim_steps, beta_schedule, sampling_variance)
        for name, table in tables.items():
            self.register_buffer(name, table, persistent=False)

    def _frozen_copy(self) -> nn.Module:
        frozen = copy.deepcopy(self.denoiser)
        for parameter in frozen.parameters():
            parameter.requires_grad_(False)
        return frozen

    def start_finetuning(self) -> None:
        """Freeze the current (pretrained) weights for the early, non-fine-tuned denoising steps."""
        if self.frozen_denoiser is not None:
            self.frozen_denoiser.load_state_dict(self.denoiser.state_dict())

    # ------------------------------------------------------------------ one denoising step
    def step_mean(self, x: torch.Tensor, step: torch.Tensor, obs: torch.Tensor,
                  network: nn.Module, eta: float = 1.0) -> tuple[torch.Tensor, torch.Tensor]:
        """Mean and variance of ``x^{k-1}`` given ``x [B, C]`` at sampling steps ``step [B]`` (long).

        Returns ``(mean [B, C], variance [B, 1])`` (the raw schedule variance, before std clipping).
        """
        alpha_bar = self.alpha_bar[step].unsqueeze(-1)
        eps = network(x, self.timesteps[step], obs)
        x0 = ((x - (1 - alpha_bar).sqrt() * eps) / alpha_bar.sqrt()).clamp(-self.denoised_clip, self.denoised_clip)
        variance = self.variance[step].unsqueeze(-1)
        if self.use_ddim:
            eps = (x - alpha_bar.sqrt() * x0) / (1 - alpha_bar).sqrt()  # consistent with the clipped x0
            alpha_bar_prev = self.alpha_bar_prev[step].unsqueeze(-1)
            variance = eta**2 * variance
            mean = alpha_bar_prev.sqrt() * x0 + (1 - alpha_bar_prev - variance).clamp(min=0).sqrt() * eps
        else:
            mean = self.coef_x0[step].unsqueeze(-1) * x0 + self.coef_xt[step].unsqueeze(-1) * x
        return mean, variance

    def _network(self, step: int) -> nn.Module:
        frozen = self.frozen_denoiser is not None and step < self.num_steps - self.ft_steps
        return self.frozen_denoiser if frozen else self.denoiser

    def _run_chain(self, obs: torch.Tensor, deterministic: bool, reparameterized: bool = False
                   ) -> tuple[torch.Tensor, torch.Tensor]:
        """Sample a chunk; returns ``(final sample [B, C], last K' + 1 chain states [B, K' + 1, C])``.

        ``reparameterized``: the final clamp passes the gradient by ``clamp_gradient``'s rule (``rsample``);
        otherwise it is torch's clamp (same values). Without ``final_clamp`` the final state is left as
        drawn, and the chain stores it so: its log-prob is of the state the chain reached."""
        batch = obs.shape[0]
        # deterministic: DPPO's noise levels, drawn from a fixed-seed generator, so that the same
        # observation always gives the same action (DPPO's own evaluation redraws x_K every call)
        generator = evaluation_generator(obs, deterministic)
        x = standard_normal((batch, self.chunk_dim), generator, obs.device)
        chain = []
        first_ft = self.num_steps - self.ft_steps
        for i in range(self.num_steps):
            if i == first_ft:
                chain.append(x)
            step = torch.full((batch,), i, dtype=torch.long, device=obs.device)
            eta = self.ddim_eval_eta if deterministic else self.ddim_eta
            mean, variance = self.step_mean(x, step, obs, self._network(i), eta)
            std = variance.sqrt()
            last = i == self.num_steps - 1
            if deterministic:
                std = torch.zeros_like(std) if (last or self.use_ddim) else std.clamp(min=1e-3)
            else:
                std = std.clamp(min=self.min_sampling_std)
            noise = standard_normal(x.shape, generator, x.device).clamp(-self.randn_clip, self.randn_clip)
            x = mean + std * noise
            if self.clip_every_step or (last and self.final_clamp):
                x = clamp_to_box(x, self.clamp_gradient) if reparameterized else x.clamp(-1.0, 1.0)
            if i >= first_ft:
                chain.append(x)
        return x, torch.stack(chain, dim=1)

    def chain_log_probs(self, obs: torch.Tensor, chain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Per fine-tuned step log-probabilities of the stored transitions under the current weights.

        Args:
            obs: ``[B, D]``; chain: ``[B, K' + 1, C]``.
        Returns:
            ``(log_probs [B, K'], means [B, K', C])``: element log-probs clamped, averaged over the
            executed action dims; one batched network call for all K' steps.
        """
        batch, k = obs.shape[0], self.ft_steps
        steps = torch.arange(self.num_steps - k, self.num_steps, device=obs.device).repeat(batch)
        x = chain[:, :-1].reshape(batch * k, -1)
        repeated_obs = obs.unsqueeze(1).expand(batch, k, obs.shape[-1]).reshape(batch * k, -1)
        mean, variance = self.step_mean(x, steps, repeated_obs, self.denoiser, self.ddim_eta)
        std = variance.sqrt().clamp(min=self.min_logprob_std)
        target = chain[:, 1:].reshape(batch * k, -1)
        element = -0.5 * ((target - mean) / std).square() - std.log() - 0.5 * math.log(2 * math.pi)
        element = element[:, : self.executed_dim].clamp(*self.logprob_clamp)
        return element.mean(dim=-1).view(batch, k), mean.view(batch, k, -1)

    # ------------------------------------------------------------------ the head protocol
    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, Record]:
        final, chain = self._run_chain(obs, deterministic=False)
        log_probs, means = self.chain_log_probs(obs, chain)
        return final[:, : self.executed_dim], {"chain": chain, "log_prob": log_probs, "mean": means}

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        return self._run_chain(obs, deterministic)[0][:, : self.executed_dim]

    def rsample(self, obs: torch.Tensor) -> torch.Tensor:
        """The stochastic chain with its graph (every denoising step differentiable): ``[B, act_dim]``.

        A saturated action's gradient passes back when it points into the box (``clamp_gradient``): with
        torch's clamp a Q-loss-only actor whose samples all leave the box gets no gradient again."""
        return self._run_chain(obs, deterministic=False, reparameterized=True)[0][:, : self.executed_dim]

    def log_ratio(self, obs: torch.Tensor, record: Record) -> RatioTerms:
        log_probs, _ = self.chain_log_probs(obs, record["chain"])
        return RatioTerms(log_ratio=log_probs - record["log_prob"], unit_weights=self.unit_weights,
                          unit_clip=self.unit_clip)

    def kl(self, obs: torch.Tensor, record: Record) -> torch.Tensor:
        batch, k = obs.shape[0], self.ft_steps
        _, means = self.chain_log_probs(obs, record["chain"])
        steps = torch.arange(self.num_steps - k, self.num_steps, device=obs.device)
        eta_squared = self.ddim_eta**2 if self.use_ddim else 1.0
        variance = (eta_squared * self.variance[steps]).clamp(min=self.min_logprob_std**2)
        squared = (means - record["mean"])[..., : self.executed_dim].square()
        return (squared / (2 * variance.view(1, k, 1))).mean(dim=(1, 2)).view(batch)

    def imitation_loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """DDPM noise-prediction MSE on expert chunks ``actions [B, horizon_steps * A]`` (in [-1, 1])."""
        if actions.shape[-1] != self.chunk_dim:
            raise ValueError(f"diffusion imitation needs action chunks of {self.horizon_steps} x "
                             f"{self.single_act_dim} = {self.chunk_dim} values, got {actions.shape[-1]}")
        timestep = torch.randint(0, self.train_alphas_cumprod.numel(), (obs.shape[0],), device=obs.device)
        alpha_bar = self.train_alphas_cumprod[timestep].unsqueeze(-1)
        noise = torch.randn_like(actions)
        noisy = alpha_bar.sqrt() * actions + (1 - alpha_bar).sqrt() * noise
        squared = (self.denoiser(noisy, timestep.to(alpha_bar.dtype), obs) - noise).square()
        return squared.mean() if self.imitation_reduction == "mean" else squared.sum(dim=-1).mean()
