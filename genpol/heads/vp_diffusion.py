"""A diffusion policy on the continuous VP cosine schedule: MaxEntDP's policy (Dong, Cheng, Zhang, ICML
2025; ALGORITHMS.md 14c), as its code builds it on QSM's ``jaxrl5``.

Network ``eps_theta(s, a_t, lambda)``: learnable Fourier features of the log-SNR lambda (``time_dim``
outputs, cos and sin of ``2 pi lambda w``, ``w ~ N(0, time_kernel_std^2)`` learned) -> an MLP
(``time_hidden_sizes``, Mish, no final activation); its output is concatenated with ``[a_t, s]``
and fed to an MLP (``hidden_sizes``, Mish) -> A noise values. Linear layers start xavier-uniform with
zero biases (flax's ``Dense`` under jaxrl5's ``default_init``).

Sampler (``act``): DDPM with ``sampling_steps`` steps on ``t = linspace(1e-3, 0.9946, T + 1)``
(``genpol.heads.vp_schedule``): at step k it predicts x0, clips it to [-1, 1] (``clip_denoised``),
forms the posterior mean ``sqrt(ab_prev) beta_k / (1 - ab) x0 + sqrt(1 - beta_k) (1 - ab_prev) / (1 - ab) x``
and adds noise of std ``sqrt(beta_k)`` (MaxEntDP's choice, not the posterior variance), none at the
last step; the final action is clipped to [-1, 1]. Deterministic acting draws the chain's noise from a
generator seeded with 0, one draw shared by every state of the batch, so the action is a function of the
state alone (the learner's evaluation rule, argmax-Q over samples, lives with the learner:
``genpol.algorithms.maxentdp``).

Capabilities: ``NOISE_PREDICTION`` (``predict_noise`` and ``estimate_log_prob``, what MaxEntDP
trains and backs up through), ``IMITATION`` (noise-prediction MSE at ``t ~ U(1e-3, 0.9946)``),
``CANDIDATES``, and ``ON_POLICY_RATIO``: every noisy step is an exact Gaussian transition, so the
record keeps the chain and the ratio has one unit per noisy step (``T - 1``; the last step adds no
noise), each the exact log-density ratio summed over action dimensions, with no std floor (DPPO's
head clips the std and averages; this one does not, so its per-step ratios are sharper). The last,
noise-free step's map from x_1 to the action is outside the ratio: a change of the network that moved
that step's output alone would leave the ratio at 0 (DPPO gives its last step a std floor instead). The
network is shared across steps, so on-policy learning goes on through the noisy steps.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, List, Sequence

import torch
from torch import nn

from genpol.errors import require
from genpol.heads.base import (Capability, HeadConfig, PolicyHead, RatioTerms, Record, check_network,
                               evaluation_generator, standard_normal)
from genpol.heads.vp_schedule import (T_MAX, T_MIN, alpha_bar, estimate_log_prob, grid_alpha_bars, log_snr,
                                      predicted_noise_after_clip)
from genpol.nets import activation_class
from genpol.onednn import OneDNNLinear


def xavier_mlp(sizes: Sequence[int], activation: str) -> nn.Sequential:
    """Linear layers of ``sizes`` with ``activation`` between them (none after the last), xavier-uniform
    weights and zero biases (jaxrl5's ``MLP`` with ``activate_final=False``)."""
    layers: list[nn.Module] = []
    for index, (fan_in, fan_out) in enumerate(zip(sizes[:-1], sizes[1:])):
        linear = OneDNNLinear(fan_in, fan_out)
        nn.init.xavier_uniform_(linear.weight)
        nn.init.zeros_(linear.bias)
        layers.append(linear)
        if index < len(sizes) - 2:
            layers.append(activation_class(activation)())
    return nn.Sequential(*layers)


class FourierFeatures(nn.Module):
    """``lambda [R, 1]`` -> ``[R, dim]``: cos and sin of ``2 pi lambda w``, ``w [dim / 2]`` learned."""

    def __init__(self, dim: int, kernel_std: float):
        super().__init__()
        self.kernel = nn.Parameter(torch.randn(dim // 2, 1) * kernel_std)

    def forward(self, noise_level: torch.Tensor) -> torch.Tensor:
        angles = 2 * math.pi * noise_level @ self.kernel.T
        return torch.cat([angles.cos(), angles.sin()], dim=-1)


class NoiseNetwork(nn.Module):
    """``eps_theta(obs [R, D], noisy [R, A], log_snr [R, 1]) -> [R, A]`` (see the module docstring)."""

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int], activation: str, time_dim: int,
                 time_hidden_sizes: Sequence[int], time_kernel_std: float):
        super().__init__()
        self.time_features = FourierFeatures(time_dim, time_kernel_std)
        self.time_mlp = xavier_mlp([time_dim, *time_hidden_sizes], activation)
        self.body = xavier_mlp([act_dim + obs_dim + time_hidden_sizes[-1], *hidden_sizes, act_dim], activation)

    def forward(self, obs: torch.Tensor, noisy: torch.Tensor, noise_level: torch.Tensor) -> torch.Tensor:
        condition = self.time_mlp(self.time_features(noise_level))
        return self.body(torch.cat([noisy, obs, condition], dim=-1))  # MaxEntDP's order: [a_t, s, cond]


@dataclass
class VPDiffusionConfig(HeadConfig):
    """Diffusion on the continuous VP cosine schedule (defaults: MaxEntDP's code, ALGORITHMS.md 14c)."""

    family: str = "vp_diffusion"
    """Head family; selects the head class."""
    sampling_steps: int = 20
    """T: DDPM steps of the sampler, on t = linspace(1e-3, 0.9946, T + 1)."""
    hidden_sizes: List[int] = field(default_factory=lambda: [256, 256])
    """Hidden widths of the noise network's body (on [a_t, s, time features])."""
    activation: str = "mish"
    """Activation of the noise network (body and time MLP)."""
    time_dim: int = 64
    """Learnable Fourier features of the log-SNR (even)."""
    time_hidden_sizes: List[int] = field(default_factory=lambda: [128, 128])
    """Widths of the MLP on the Fourier features (its last width is the condition's size; no final activation)."""
    time_kernel_std: float = 0.2
    """Initial std of the Fourier frequencies."""
    clip_denoised: bool = True
    """Clip each step's predicted x0 to [-1, 1] (sampler and log-prob estimate)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.sampling_steps >= 1, "policy.sampling_steps", ">= 1", self.sampling_steps)
        require(self.time_dim >= 2 and self.time_dim % 2 == 0, "policy.time_dim", "even and >= 2", self.time_dim)
        check_network("time_hidden_sizes", self.time_hidden_sizes, "activation", self.activation)
        require(self.time_kernel_std > 0, "policy.time_kernel_std", "> 0", self.time_kernel_std)


class VPDiffusionHead(PolicyHead):
    """MaxEntDP's diffusion policy; hyperparameters: ``VPDiffusionConfig``. See the module docstring."""

    family = "vp_diffusion"
    Config = VPDiffusionConfig
    capabilities = PolicyHead.capabilities | {Capability.NOISE_PREDICTION}
    has_exact_kl = False
    has_entropy = False

    @classmethod
    def lacks(cls, config: Any) -> dict[Capability, str]:
        if getattr(config, "sampling_steps", 2) == 1:  # chain_log_probs' T = 1 case: a ratio of 1 whatever the weights
            return {Capability.ON_POLICY_RATIO: "policy.sampling_steps=1 leaves the chain no noisy step to take a "
                                                "ratio of (its log-ratio is 0 whatever the weights, so the learner "
                                                "would train nothing); use policy.sampling_steps >= 2"}
        return {}

    def __init__(self, obs_dim: int, act_dim: int, config: VPDiffusionConfig | None = None, **hyperparameters: Any):
        super().__init__(obs_dim, act_dim, config, **hyperparameters)
        c = self.config
        self.num_steps, self.clip_denoised = c.sampling_steps, c.clip_denoised
        self.network = NoiseNetwork(obs_dim, act_dim, c.hidden_sizes, c.activation, c.time_dim,
                                    c.time_hidden_sizes, c.time_kernel_std)
        grid, grid_prev = grid_alpha_bars(c.sampling_steps)  # index k: step k (0 the last)
        beta = 1 - grid / grid_prev
        for name, value in (("alpha_bar", grid), ("log_snr", log_snr(grid)), ("beta", beta),
                            ("coef_x0", grid_prev.sqrt() * beta / (1 - grid)),
                            ("coef_xt", (1 - beta).sqrt() * (1 - grid_prev) / (1 - grid))):
            # float64 values cast to the dtype the network is built in (float32 tables in a float64 head
            # failed its first call and, through .double(), kept float32 roundings)
            self.register_buffer(name, value.to(torch.get_default_dtype()), persistent=False)

    # ------------------------------------------------------------------ the noise network
    def predict_noise(self, obs: torch.Tensor, noisy: torch.Tensor, noise_level: torch.Tensor) -> torch.Tensor:
        """``eps_theta``: ``obs [R, D]``, ``noisy [R, A]``, log-SNR ``noise_level [R, 1]`` -> ``[R, A]``."""
        return self.network(obs, noisy, noise_level)

    def estimate_log_prob(self, obs: torch.Tensor, actions: torch.Tensor, levels: int, draws: int,
                          chunk_rows: int = 65536) -> torch.Tensor:
        """MaxEntDP's ``log pi(a | s)`` estimate ``[B]`` (``vp_schedule.estimate_log_prob``), with this head's
        x0 clipping; gradients flow only if the caller allows them."""
        return estimate_log_prob(self.predict_noise, obs, actions, levels, draws, self.clip_denoised, chunk_rows)

    # ------------------------------------------------------------------ the sampler
    def step_mean(self, x: torch.Tensor, step: int, obs: torch.Tensor) -> torch.Tensor:
        """The posterior mean of step ``step`` at ``x [B, A]`` (its x0 prediction clipped when configured)."""
        level = self.log_snr[step].expand(x.shape[0], 1)
        eps = self.predict_noise(obs, x, level)
        x0, _ = predicted_noise_after_clip(x, eps, self.alpha_bar[step], self.clip_denoised)
        return self.coef_x0[step] * x0 + self.coef_xt[step] * x

    def _run_chain(self, obs: torch.Tensor, generator: torch.Generator | None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(action [B, A] in the box, chain [B, T + 1, A])``: the chain from the initial noise to the
        last step's unclipped output, drawn from ``generator`` (None: torch's global one)."""
        x = standard_normal((obs.shape[0], self.act_dim), generator, obs.device)
        chain = [x]
        for step in range(self.num_steps - 1, -1, -1):
            x = self.step_mean(x, step, obs)
            if step > 0:  # the last step adds no noise
                noise = standard_normal(x.shape, generator, x.device)
                x = x + self.beta[step].sqrt() * noise
            chain.append(x)
        return x.clamp(-1.0, 1.0), torch.stack(chain, dim=1)

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        return self._run_chain(obs, evaluation_generator(obs, deterministic))[0]

    # ------------------------------------------------------------------ on-policy ratio, imitation
    def chain_log_probs(self, obs: torch.Tensor, chain: torch.Tensor) -> torch.Tensor:
        """``[B, T - 1]``: log N(x_{k-1}; mean_theta(x_k), beta_k I) of the chain's noisy steps, summed
        over action dimensions, noisiest first; one batched network call per step."""
        columns = []
        for position, step in enumerate(range(self.num_steps - 1, 0, -1)):
            mean = self.step_mean(chain[:, position], step, obs)
            variance = self.beta[step]
            squared = (chain[:, position + 1] - mean).square().sum(dim=-1)
            columns.append(-0.5 * squared / variance - 0.5 * self.act_dim * torch.log(2 * math.pi * variance))
        if not columns:  # T = 1: one noise-free step, nothing to ratio
            return torch.zeros(obs.shape[0], 1, device=obs.device)
        return torch.stack(columns, dim=1)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, Record]:
        action, chain = self._run_chain(obs, None)
        return action, {"chain": chain, "log_prob": self.chain_log_probs(obs, chain)}

    def log_ratio(self, obs: torch.Tensor, record: Record) -> RatioTerms:
        return RatioTerms(log_ratio=self.chain_log_probs(obs, record["chain"]) - record["log_prob"])

    def imitation_loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Noise-prediction MSE on ``actions [B, A]`` at ``t ~ U(1e-3, 0.9946)`` (MaxEntDP's training law)."""
        t = T_MIN + (T_MAX - T_MIN) * torch.rand(obs.shape[0], device=obs.device)
        abar = alpha_bar(t).unsqueeze(-1)
        noise = torch.randn_like(actions)
        noisy = (abar.sqrt() * actions + (1 - abar).sqrt() * noise).to(actions.dtype)
        eps = self.predict_noise(obs, noisy, log_snr(abar).to(actions.dtype))
        return (eps - noise).square().mean()
