"""Consistency policy (Ding & Jin, ICLR 2024; ALGORITHMS.md 8): a few-step generative policy.

The consistency function maps a noisy action at noise level tau straight to a clean one:

    f_theta(a_tau, tau, s) = c_skip(tau) a_tau + c_out(tau) F_theta(a_tau, tau, s),
    c_skip = sigma_data^2 / ((tau - eps)^2 + sigma_data^2),  c_out = sigma_data (tau - eps) / sqrt(tau^2 + sigma_data^2),

with sigma_data = 0.5 and eps = 0.002, so f(a, eps) = a exactly (c_skip = 1, c_out = 0).
F_theta is an MLP (3 x 256 Mish) on [c_in a_tau, time embedding, s]. c_in = 1 / sqrt(tau^2 + sigma_data^2)
(EDM's input scaling) is genpol's default; the reference feeds a_tau raw (``scale_input=False``), which
puts inputs of size ~80 into the first layer at the first sampling step: on MultiGoal BC at 3000
steps the raw input left unimodal states with +-0.3 of action noise, c_in about +-0.03. The time input is
log(tau / eps) / log(tau_max / eps), which maps [eps, tau_max] onto [0, 1] for
``nets.sinusoidal_time_embedding``; ``time_input=ding_jin`` / ``cpql`` are the references' embeddings of
raw tau / 250 log tau (``genpol.heads.consistency_network``).

Sampling (T = ``sampling_steps``, 2 by default): noise levels linspace(tau_min_sampling, tau_max, T)
taken in descending order; a ~ N(0, tau_max^2), a <- f(a, tau_max); then for every further tau,
a <- f(a + sqrt(tau^2 - eps^2) xi, tau); clamp to [-1, 1]. ``rsample`` keeps the graph (Q-gradient
actors); its clamp lets the gradient of a saturated action back in when it points into the box
(``clamp_gradient``, ``genpol.heads.bounds``: with torch's clamp a Q-loss-only actor freezes at a
corner of the box), and is torch's clamp in the forward pass. ``candidates`` draws n per state in one
batched call. ``act(deterministic=True)`` draws the noise from a fixed seed, one draw shared by every
state of the batch, so that the action is a function of s alone, whatever batch s is in.

Consistency training (``imitation_loss``, Consistency-BC): N(k) Karras boundaries (rho 7 on
[eps, tau_max]) with N growing from 2 to 150 over ``ct_total_steps`` (the CM paper's schedule);
n ~ U{0..N-2}, xi ~ N(0, I), loss d(f_theta(a + tau_{n+1} xi, tau_{n+1}), f_target(a + tau_n xi, tau_n)),
optionally weighted by 100 / (tau_{n+1} - tau_n) (the reference's ``scale_consis_loss``). The target
network is an EMA of the online one (decay 0.995, every 5 steps from step 1000; before that a copy
of it every 5 steps: genpol's choice, ``target_warmup=copy``; Diffusion-QL's and Ding & Jin's EMA
helpers leave the target at its initial random weights until step 1000, ``target_warmup=hold``,
``ema_update_due``). The head counts its own training steps: every ``imitation_loss``
call made in training mode is one step, and it first refreshes the target from the weights the
previous steps produced. Target and step count are saved with the head (exact resume). N(k) grows
once over the run; Ding & Jin's code restarts it with every ``train`` call (``ct_schedule_repeats``).

On-policy sampler (``sample`` / ``log_ratio``, genpol's extension, "no peer offers this"). The
multistep sampler is a Markov chain x_0 -> x_1 -> ... -> x_T over noisy actions:

    x_0 ~ N(0, tau_max^2 I)                                  (fixed, no parameters)
    x_{i+1} ~ N(f_theta(x_i, tau_i, s), sigma_{i+1}^2 I),    i = 0 .. T - 1,

with sigma_{i+1} = max(sqrt(tau_{i+1}^2 - eps^2), min_sampling_std) for the re-noising steps and
sigma_T = min_sampling_std for the last (the action, executed clamped to [-1, 1] by the env's action
clip; the record holds the unclamped x_T). Every transition is Gaussian, so each has an exact
log-probability (summed over action dims), and ``log_ratio`` is ``[B, T]``, one unit per step, as
DPPO's denoising chain. ``kl`` is exact per step (equal stds): the mean over steps of
sum_dims (mu_old - mu_theta)^2 / (2 sigma^2), which matches the updaters' mean over units.
An on-policy learner calls ``act_as_sampled``: from then on a stochastic ``act`` (evaluation with
``pipeline.eval_deterministic=false``, a saved policy's ``predict(deterministic=False)``) draws this chain's
action, the policy the ratio trained, instead of the reference sampler; the switch is saved with the weights.

Action chunks (``act_steps`` executed of ``horizon_steps`` predicted, as DPPO's head): the network,
the chain and the CT targets are whole chunks of C = horizon_steps * A values; acting returns the
first act_steps * A. The last transition's log-prob and KL sum over those executed dims only: the
rest of x_T is a leaf of the chain that nothing executes, so leaving it out is exact marginalization
(the earlier transitions keep every dim, since they feed the later means).
"""

from __future__ import annotations

import copy
import math
from dataclasses import dataclass, field
from typing import Any, List

import torch
from torch import nn

from genpol.errors import require
from genpol.heads.base import (Capability, HeadConfig, PolicyHead, RatioTerms, Record, evaluation_generator,
                               standard_normal)
from genpol.heads.bounds import CLAMP_GRADIENTS, clamp_to_box
from genpol.heads.chunking import ChunkedActions
from genpol.heads.consistency_network import TIME_INPUTS, ConsistencyNetwork
from genpol.heads.consistency_training import (CT_DISTANCES, consistency_coefficients, ct_num_scales,
                                               ema_update_due, karras_boundaries, lognormal_level_weights,
                                               pseudo_huber)

# the formulas live in consistency_training; importable from here as before
__all__ = ["ConsistencyConfig", "ConsistencyHead", "ConsistencyNetwork", "consistency_coefficients", "ct_num_scales",
           "ema_update_due", "karras_boundaries", "lognormal_level_weights", "pseudo_huber"]

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


@dataclass
class ConsistencyConfig(HeadConfig):
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
    time_input: str = "genpol"
    """What F_theta's time MLP sees (``genpol.heads.consistency_network``): ``genpol``, sin/cos(2^k pi u) of
    u = log(tau / eps) / log(tau_max / eps); ``ding_jin``, the transformer embedding of raw tau (Ding & Jin's
    code); ``cpql``, of 250 log tau (CPQL's). The authors' is needed to load or compare their weights."""
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
    """Training step from which the target is an EMA (before: see target_warmup)."""
    target_warmup: str = "copy"
    """The target before target_start: ``copy`` of the online network every target_every steps (genpol);
    ``hold``, left at its initial weights, with the references' step count (Ding & Jin's code, whose
    CT target is its EMA actor; ``ema_update_due``)."""
    ct_schedule_repeats: bool = False
    """False: N(k) grows once over ct_total_steps (k counted from 1) and stays. True: N restarts every
    ct_total_steps steps, k counted from 0 within each (Ding & Jin's code restarts it with every ``train``
    call, 50 000 steps in their offline.py: ct_total_steps=50000 ct_final_scales=149 is their
    timesteps_schedule, whose final_timesteps 150 enters as 150^2 where genpol's enters as (150 + 1)^2)."""
    ct_distance: str = "l2"
    """Consistency-training distance: ``l2`` (the mean over dims of d^2), ``pseudo_huber`` (improved CT's,
    over the action vector) or ``pseudo_huber_per_dim`` (Ding & Jin's code's: per dim, then the mean)."""
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
        require(self.rho > 0, "policy.rho", "> 0 (the Karras boundaries divide by it)", self.rho)
        require(2 <= self.ct_initial_scales <= self.ct_final_scales, "policy.ct_initial_scales",
                f"in [2, ct_final_scales={self.ct_final_scales}]", self.ct_initial_scales)
        require(self.ct_total_steps >= 1, "policy.ct_total_steps", ">= 1", self.ct_total_steps)
        require(0.0 <= self.target_decay < 1.0, "policy.target_decay", "in [0, 1)", self.target_decay)
        require(self.target_every >= 1, "policy.target_every", ">= 1", self.target_every)
        require(self.ct_distance in CT_DISTANCES, "policy.ct_distance", f"one of {tuple(CT_DISTANCES)}",
                self.ct_distance)
        require(self.time_input in TIME_INPUTS, "policy.time_input", f"one of {TIME_INPUTS}", self.time_input)
        if self.time_input != "genpol":  # the transformer frequencies divide by time_dim / 2 - 1
            require(self.time_dim >= 4, "policy.time_dim", f">= 4 with time_input={self.time_input}", self.time_dim)
        require(self.target_warmup in ("copy", "hold"), "policy.target_warmup", "copy or hold", self.target_warmup)
        require(self.ct_noise_sampling in ("uniform", "lognormal"), "policy.ct_noise_sampling", "uniform or lognormal",
                self.ct_noise_sampling)
        require(self.min_sampling_std > 0, "policy.min_sampling_std", "> 0", self.min_sampling_std)
        require(self.clamp_gradient in CLAMP_GRADIENTS, "policy.clamp_gradient", f"one of {CLAMP_GRADIENTS}",
                self.clamp_gradient)


class ConsistencyHead(ChunkedActions, PolicyHead):
    """Consistency policy; hyperparameters: ``ConsistencyConfig``. See the module docstring for the
    method and the defaults' sources. ``act_dim`` is ``act_steps * A`` in a chunked env: the network
    predicts ``horizon_steps`` actions per observation and the env executes the first ``act_steps``,
    as DPPO's diffusion head (Q-gradient learners need single actions)."""

    family = "consistency"
    Config = ConsistencyConfig
    capabilities = frozenset({Capability.ON_POLICY_RATIO, Capability.IMITATION, Capability.REPARAMETERIZED,
                              Capability.CANDIDATES})
    has_exact_kl = True
    has_entropy = False
    online_options = frozenset({"sampling_steps"})

    def __init__(self, obs_dim: int, act_dim: int, config: ConsistencyConfig | None = None, **hyperparameters: Any):
        super().__init__(obs_dim, act_dim, config, **hyperparameters)
        c = self.config
        act_steps, horizon_steps, sampling_steps = c.act_steps, c.horizon_steps, c.sampling_steps
        eps, tau_max, min_sampling_std = c.eps, c.tau_max, c.min_sampling_std
        if act_dim % act_steps:
            raise ValueError(f"consistency chunks need act_dim ({act_dim}) a multiple of policy.act_steps ({act_steps})")
        self.scale_input, self.clamp_gradient = c.scale_input, c.clamp_gradient
        self.act_steps, self.horizon_steps = act_steps, horizon_steps
        self.chunk_dim = horizon_steps * (act_dim // act_steps)  # what the network denoises
        self.executed_dim = act_dim  # the chunk's first act_steps actions
        self.sigma_data, self.eps, self.tau_max, self.rho = c.sigma_data, eps, tau_max, c.rho
        self.sampling_steps = sampling_steps
        self.ct_initial_scales, self.ct_final_scales, self.ct_total_steps = (c.ct_initial_scales, c.ct_final_scales,
                                                                            c.ct_total_steps)
        self.target_decay, self.target_every, self.target_start = c.target_decay, c.target_every, c.target_start
        self.target_warmup, self.ct_schedule_repeats = c.target_warmup, c.ct_schedule_repeats
        self.ct_distance, self.ct_loss_scale, self.ct_noise_sampling = c.ct_distance, c.ct_loss_scale, c.ct_noise_sampling
        self.min_sampling_std = min_sampling_std
        self.network = ConsistencyNetwork(obs_dim, self.chunk_dim, c.hidden_sizes, c.activation, c.time_dim, eps, tau_max,
                                          c.time_input)
        self.target = copy.deepcopy(self.network)
        for parameter in self.target.parameters():
            parameter.requires_grad_(False)
        self.ct_step = 0  # consistency-training steps taken (saved as extra state)
        # what act(deterministic=False) draws: the reference sampler, or the on-policy chain (act_as_sampled)
        self.stochastic_act = "reference"
        for name, buffer in self._sampling_buffers(sampling_steps).items():
            self.register_buffer(name, buffer, persistent=False)

    def _sampling_buffers(self, sampling_steps: int) -> dict[str, torch.Tensor]:
        """The sampler's schedule for T = ``sampling_steps``: ``sampling_taus [T]``, ``step_stds [T]`` and
        ``logprob_dims [T, C]`` (derived, not saved: a checkpoint's head spec carries T)."""
        c = self.config
        levels = torch.linspace(c.tau_min_sampling, self.tau_max, sampling_steps).flip(0) if sampling_steps > 1 \
            else torch.tensor([self.tau_max])
        # std of transition i (x_i -> x_{i+1}): the re-noising level of step i + 1, the floor for the last
        renoise = (levels[1:].square() - self.eps**2).sqrt().clamp(min=self.min_sampling_std)
        # which dims of each chain transition enter its log-prob: all, except the never-executed tail of the
        # last one (a leaf: marginalizing it out is exact, and it would only add variance to the ratio)
        dims = torch.ones(sampling_steps, self.chunk_dim)
        dims[-1, self.executed_dim:] = 0.0
        return {"sampling_taus": levels, "step_stds": torch.cat([renoise, torch.tensor([self.min_sampling_std])]),
                "logprob_dims": dims}

    def _options_changed(self) -> None:
        """A new ``sampling_steps`` (Ding & Jin sample with T = 2 offline and T = 5 online): its schedule,
        on the head's device and in its dtype."""
        self.sampling_steps = self.config.sampling_steps
        like = self.sampling_taus
        for name, buffer in self._sampling_buffers(self.sampling_steps).items():
            setattr(self, name, buffer.to(device=like.device, dtype=like.dtype))

    # ------------------------------------------------------------------ the consistency function
    def consistency(self, noisy: torch.Tensor, tau: torch.Tensor, obs: torch.Tensor,
                    network: nn.Module | None = None) -> torch.Tensor:
        """``f(noisy [B, C], tau [B], obs [B, D]) -> [B, C]`` with the online network (or ``network``)."""
        c_skip, c_out = consistency_coefficients(tau.unsqueeze(-1), self.sigma_data, self.eps)
        network_input = noisy
        if self.scale_input:  # EDM's c_in: unit-variance network inputs at every noise level
            network_input = noisy / (tau.unsqueeze(-1).square() + self.sigma_data**2).sqrt()
        return c_skip * noisy + c_out * (network or self.network)(network_input, tau, obs)

    def _multistep(self, obs: torch.Tensor, generator: torch.Generator | None) -> torch.Tensor:
        """The reference sampler, differentiable, before clamping: ``obs [B, D] -> [B, C]`` (the whole chunk)."""
        batch = obs.shape[0]
        x = standard_normal((batch, self.chunk_dim), generator, obs.device) * self.tau_max
        action = self.consistency(x, self.sampling_taus[0].expand(batch), obs)
        for tau in self.sampling_taus[1:]:
            noise = standard_normal(action.shape, generator, obs.device)
            x = action + (tau.square() - self.eps**2).sqrt() * noise
            action = self.consistency(x, tau.expand(batch), obs)
        return action

    def rsample(self, obs: torch.Tensor) -> torch.Tensor:
        return clamp_to_box(self._multistep(obs, None)[:, : self.executed_dim], self.clamp_gradient)

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """The reference sampler, or (stochastic, after ``act_as_sampled``) the on-policy chain's action;
        deterministic: the reference sampler on a fixed draw either way."""
        if not deterministic and self.stochastic_act == "chain":
            return self._draw_chain(obs)[:, -1, : self.executed_dim].clamp(-1.0, 1.0)
        return self._multistep(obs, evaluation_generator(obs, deterministic))[:, : self.executed_dim].clamp(-1.0, 1.0)

    def act_as_sampled(self) -> None:
        """Stochastic ``act`` draws the on-policy chain (``sample``'s action, its last step's
        ``min_sampling_std`` noise included), not the reference sampler: measured on the contract test's
        head, the chain's action std is 0.156 where the reference sampler's is 0.117."""
        self.stochastic_act = "chain"

    def candidates(self, obs: torch.Tensor, num_candidates: int) -> torch.Tensor:
        """``[B, n, A]`` from the (differentiable) sampler on the repeated observations."""
        return self.rsample(obs.repeat_interleave(num_candidates, dim=0)).reshape(obs.shape[0], num_candidates, -1)

    # ------------------------------------------------------------------ on-policy chain
    def chain_log_probs(self, obs: torch.Tensor, chain: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """Log-probabilities of the stored transitions under the current weights.

        Args:
            obs: ``[B, D]``; chain: ``[B, T + 1, C]`` (x_0 .. x_T, whole chunks).
        Returns:
            ``(log_probs [B, T], means [B, T, C])``, summed over the chunk's dims (the last transition:
            over the executed ones); one batched network call.
        """
        batch, steps = obs.shape[0], self.sampling_steps
        taus = self.sampling_taus.repeat(batch)
        repeated_obs = obs.unsqueeze(1).expand(batch, steps, obs.shape[-1]).reshape(batch * steps, -1)
        means = self.consistency(chain[:, :-1].reshape(batch * steps, -1), taus, repeated_obs).view(batch, steps, -1)
        stds = self.step_stds.view(1, steps, 1)
        z = (chain[:, 1:] - means) / stds
        log_probs = ((-0.5 * z.square() - stds.log() - _HALF_LOG_2PI) * self.logprob_dims).sum(dim=-1)
        return log_probs, means

    def _draw_chain(self, obs: torch.Tensor) -> torch.Tensor:
        """One draw of the on-policy chain: ``obs [B, D] -> chain [B, T + 1, C]`` (x_0 .. x_T, whole chunks)."""
        batch = obs.shape[0]
        x = torch.randn(batch, self.chunk_dim, device=obs.device) * self.tau_max
        chain = [x]
        for i in range(self.sampling_steps):
            mean = self.consistency(x, self.sampling_taus[i].expand(batch), obs)
            x = mean + self.step_stds[i] * torch.randn_like(mean)
            chain.append(x)
        return torch.stack(chain, dim=1)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, Record]:
        chain = self._draw_chain(obs)
        log_probs, means = self.chain_log_probs(obs, chain)
        action = chain[:, -1, : self.executed_dim].clamp(-1.0, 1.0)
        return action, {"chain": chain, "log_prob": log_probs, "mean": means}

    def log_ratio(self, obs: torch.Tensor, record: Record) -> RatioTerms:
        log_probs, _ = self.chain_log_probs(obs, record["chain"])
        return RatioTerms(log_ratio=log_probs - record["log_prob"])

    def kl(self, obs: torch.Tensor, record: Record) -> torch.Tensor:
        _, means = self.chain_log_probs(obs, record["chain"])
        variance = self.step_stds.square().view(1, -1, 1)
        per_dim = (means - record["mean"]).square() / (2 * variance) * self.logprob_dims
        return per_dim.sum(dim=-1).mean(dim=-1)

    # ------------------------------------------------------------------ consistency training
    @torch.no_grad()
    def update_target(self, copy_online: bool | None = None) -> None:
        """Copy the online network into the target (``copy_online``; None: before ``target_start``), else the EMA."""
        online, target = list(self.network.parameters()), list(self.target.parameters())
        if copy_online if copy_online is not None else self.ct_step < self.target_start:
            torch._foreach_copy_(target, online)
        else:
            torch._foreach_lerp_(target, online, 1.0 - self.target_decay)

    def consistency_training_loss(self, obs: torch.Tensor, actions: torch.Tensor, num_scales: int) -> torch.Tensor:
        """CT loss (scalar) on ``obs [B, D]`` and clean ``actions [B, C]`` with N = ``num_scales``
        boundaries: draws n ~ U{0..N-2} (or improved CT's log-normal) and xi ~ N(0, I), then ``ct_loss_at``."""
        # in the batch's dtype: float32 as before in float32 training, float64 levels in float64 (the references')
        boundaries = karras_boundaries(num_scales, self.eps, self.tau_max, self.rho, obs.dtype).to(obs.device)
        if self.ct_noise_sampling == "lognormal":
            index = torch.multinomial(lognormal_level_weights(boundaries), obs.shape[0], replacement=True)
        else:
            index = torch.randint(0, num_scales - 1, (obs.shape[0],), device=obs.device)
        return self.ct_loss_at(obs, actions, boundaries[index], boundaries[index + 1], torch.randn_like(actions))

    def ct_loss_at(self, obs: torch.Tensor, actions: torch.Tensor, tau_low: torch.Tensor, tau_high: torch.Tensor,
                   noise: torch.Tensor) -> torch.Tensor:
        """mean_b w_b d(f_theta(a + tau_high xi, tau_high), f_target(a + tau_low xi, tau_low)) for given
        ``tau_low, tau_high [B]`` and ``noise [B, C]``; w = 100 / (tau_high - tau_low) with ``ct_loss_scale``."""
        prediction = self.consistency(actions + tau_high.unsqueeze(-1) * noise, tau_high, obs)
        with torch.no_grad():
            target = self.consistency(actions + tau_low.unsqueeze(-1) * noise, tau_low, obs, self.target)
        difference = prediction - target
        per_sample = CT_DISTANCES[self.ct_distance](difference)
        if self.ct_loss_scale:
            per_sample = 100.0 / (tau_high - tau_low) * per_sample
        return per_sample.mean()

    def imitation_loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Consistency training on expert ``actions [B, C]`` (chunks of ``horizon_steps`` actions, in [-1, 1]);
        in training mode each call is one CT step (it advances N(k) and refreshes the target every
        ``target_every`` steps)."""
        if actions.shape[-1] != self.chunk_dim:
            raise ValueError(f"consistency imitation needs action chunks of {self.horizon_steps} x "
                             f"{self.act_dim // self.act_steps} = {self.chunk_dim} values, got {actions.shape[-1]}")
        if self.training:
            due = ema_update_due(self.ct_step, self.target_every, self.target_start, self.target_warmup)
            if due is not None:
                self.update_target(copy_online=due == "copy")
            self.ct_step += 1
        if self.ct_schedule_repeats:  # the references' k: this step's index from 0 within its period
            step, period = (self.ct_step - 1) % self.ct_total_steps, self.ct_total_steps
        else:
            step, period = self.ct_step, self.ct_total_steps
        scales = ct_num_scales(step, period, self.ct_initial_scales, self.ct_final_scales)
        return self.consistency_training_loss(obs, actions, scales)

    def get_extra_state(self) -> dict[str, Any]:
        return {"ct_step": self.ct_step, "stochastic_act": self.stochastic_act}

    def set_extra_state(self, state: dict[str, Any]) -> None:
        self.ct_step = int(state["ct_step"])
        # weights saved before 2026-12-07 carry no sampler: the head's own stays (a resumed on-policy run's chain)
        self.stochastic_act = str(state.get("stochastic_act", self.stochastic_act))
