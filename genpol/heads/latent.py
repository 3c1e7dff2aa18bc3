"""GoRL's latent-decoder head (Zhang et al. 2025, ALGORITHMS.md 6): a Gaussian latent policy (the
*encoder*) followed by a deterministic conditional generative map (the *decoder*), then tanh:

    z ~ N(mu_theta(s), diag(sigma_theta(s))^2),   a_pre = g_phi(s, z),   a = tanh(a_pre).

The decoder integrates ``dx/dt = v_phi(x, t, s)`` with 10 Euler steps from ``x = z`` (not from fresh
noise), so the action is a deterministic function of (s, z), and the on-policy "action" is z: the
record holds z, ``log_ratio`` is the encoder's exact Gaussian ratio, and the KL and entropy are the
encoder's, in closed form. PPO, SPO, ASPO and TRPO therefore see a plain Gaussian policy in z-space.

The decoder is frozen inside the head (its parameters have ``requires_grad=False``, so no updater
optimizes them); the GoRL pipeline (``genpol.pipelines.gorl.stages``) retrains it between stages by
conditional flow matching from the fixed prior N(0, I) onto the current policy's pre-tanh actions.
With ``zero_init_decoder`` every decoder weight is 0, so v = 0 and g(s, z) = z exactly: stage 0 is
Gaussian PPO with tanh-squashed actions.

The DDIM variant (``decoder="ddim"``, GoRL's "PPO + Diffusion"): the decoder network predicts the noise
eps(x_k, k, s) of a DDPM with diffusers' cosine schedule of ``diffusion_timesteps`` steps, and decodes
by deterministic DDIM (eta = 0) in ``integration_steps`` steps from x_T = z; it is trained by the
standard epsilon loss from the same fixed prior N(0, I) (``latent_ddim``). A zero noise network is
not the identity under DDIM: each step scales x by sqrt(abar_prev / abar), 7.1x over the default 10
steps. So in stage 0 the DDIM head *bypasses* its decoder (``decoder_bypassed``, a persistent buffer
set by ``zero_init_decoder``): g(s, z) = z exactly, as GoRL's own stage-0 ``IdentityDecoder``;
``load_decoder`` (the pipeline's first distilled decoder) clears it.

Conventions: flow_core's (t = 0 noise, t = 1 action); GoRL's code runs the mirror image
(tau = 1 - t), the same ODE. The encoder's scale is softplus(.) + 1e-3 clipped to [1e-3, 10]
(GoRL's ``gaussian_policy_fwd``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, List

import torch
from torch import nn

from genpol.errors import require
from genpol.heads.base import Capability, HeadConfig, PolicyHead, RatioTerms, Record, check_network
from genpol.heads.flow_core import VelocityNetwork, flow_matching_loss, integrate
from genpol.heads.gaussian import diagonal_gaussian_kl, diagonal_gaussian_log_prob
from genpol.heads.latent_ddim import DDIMSchedule
from genpol.nets import MLP, TIME_EMBEDDINGS

MIN_SCALE, MAX_SCALE = 1e-3, 10.0
ATANH_LIMIT = 1.0 - 1e-6  # actions at the bounds map to a finite pre-tanh value


@dataclass
class GoRLConfig(HeadConfig):
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
    time_embedding: str = "genpol"
    """The decoder's time embedding: ``genpol`` (sin and cos of 2^k pi t) or ``fpo`` (GoRL's code: cos
    and sin of 2^k (1 - t)); the authors' is needed to load or compare their weights (docs/fidelity.md)."""
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
        check_network("decoder_hidden_sizes", self.decoder_hidden_sizes, "decoder_activation", self.decoder_activation)
        require(self.time_embed_dim >= 2 and self.time_embed_dim % 2 == 0, "policy.time_embed_dim",
                "an even number >= 2", self.time_embed_dim)
        require(self.time_embedding in TIME_EMBEDDINGS, "policy.time_embedding", f"one of {tuple(TIME_EMBEDDINGS)}",
                self.time_embedding)
        require(self.integration_steps >= 1, "policy.integration_steps", ">= 1", self.integration_steps)
        require(self.decoder in ("flow", "ddim"), "policy.decoder", "flow or ddim", self.decoder)
        require(self.diffusion_timesteps >= 1, "policy.diffusion_timesteps", ">= 1", self.diffusion_timesteps)
        if self.decoder == "ddim":
            require(self.diffusion_timesteps % self.integration_steps == 0, "policy.diffusion_timesteps",
                    f"a multiple of policy.integration_steps ({self.integration_steps}) for the ddim decoder",
                    self.diffusion_timesteps)
        require(self.latent_l2_coef >= 0, "policy.latent_l2_coef", ">= 0", self.latent_l2_coef)


class LatentDecoderHead(PolicyHead):
    """GoRL: Gaussian encoder in latent space, frozen flow (or DDIM) decoder, tanh; hyperparameters:
    ``GoRLConfig`` (GoRL's: a 4 x 32 SiLU encoder, a 4 x 64 SiLU decoder with an 8-dim time embedding
    and output scale 1.0, 10 decoder steps). The latent has the action's size (z_dim = act_dim).

    Record: ``z [B, A]``, ``log_prob [B]``, ``mean [B, A]``, ``log_std [B, A]`` (the old encoder
    distribution, for the exact ratio and KL). ``log_ratio`` is ``[B, 1]``.
    """

    family = "gorl"
    Config = GoRLConfig
    capabilities = frozenset({Capability.ON_POLICY_RATIO, Capability.CANDIDATES})
    has_exact_kl = True
    has_entropy = True

    def __init__(self, obs_dim: int, act_dim: int, config: GoRLConfig | None = None, **hyperparameters: Any):
        super().__init__(obs_dim, act_dim, config, **hyperparameters)
        c = self.config
        decoder, integration_steps, zero_init_decoder = c.decoder, c.integration_steps, c.zero_init_decoder
        self.decoder_kind = decoder
        self.schedule = DDIMSchedule(c.diffusion_timesteps, integration_steps) if decoder == "ddim" else None
        self.integration_steps = integration_steps
        self.latent_l2_coef = c.latent_l2_coef
        self.encoder = self.new_encoder()
        self.decoder = self.new_decoder()
        if zero_init_decoder:
            with torch.no_grad():
                for parameter in self.decoder.parameters():
                    parameter.zero_()
        self.decoder.requires_grad_(False)
        if self.schedule is not None:  # persistent: a checkpoint of stage 0 decodes as stage 0 did
            self.register_buffer("decoder_bypassed", torch.tensor(zero_init_decoder))

    # ------------------------------------------------------------------ the two networks
    def new_encoder(self) -> MLP:
        """A freshly initialized encoder (orthogonal, output gain 0.01: mean near 0, scale near
        softplus(0) = 0.69), drawn from torch's global generator."""
        spec = self.spec_kwargs
        return MLP(self.obs_dim, spec["hidden_sizes"], 2 * self.act_dim, spec["activation"], orthogonal_init=True,
                   output_gain=0.01)

    def new_decoder(self) -> VelocityNetwork:
        """A freshly (randomly) initialized decoder network, output scale 1.0 (GoRL): the velocity
        (flow) or the noise (ddim), both an MLP on [observation, x, time embedding]."""
        spec = self.spec_kwargs
        return VelocityNetwork(self.obs_dim, self.act_dim, spec["decoder_hidden_sizes"], spec["decoder_activation"],
                               spec["time_embed_dim"], output_scale=1.0, time_embedding=spec["time_embedding"])

    def reset_encoder(self) -> None:
        """Re-initialize the encoder in place (GoRL trains a fresh encoder in every stage)."""
        fresh = self.new_encoder().to(next(self.encoder.parameters()).device)
        self.encoder.load_state_dict(fresh.state_dict())

    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs [B, D]`` -> encoder ``(mean [B, A], scale [B, A])``."""
        mean, raw_scale = self.encoder(obs).chunk(2, dim=-1)
        scale = (nn.functional.softplus(raw_scale) + MIN_SCALE).clamp(MIN_SCALE, MAX_SCALE)
        return mean, scale

    def load_decoder(self, weights: dict[str, torch.Tensor]) -> None:
        """Install trained decoder weights (the pipeline's distilled decoder); ends the ddim bypass."""
        self.decoder.load_state_dict(weights)
        if self.schedule is not None:
            self.decoder_bypassed.fill_(False)

    def decode(self, obs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """The decoder g(s, z) from ``x = z [B, A]``: Euler integration (flow) or deterministic DDIM
        (ddim; z itself while bypassed); the pre-tanh action ``[B, A]``."""
        if self.schedule is None:
            return integrate(lambda x, t: self.decoder(obs, x, t), z, self.integration_steps, "euler")
        if self.decoder_bypassed:
            return z
        return self.schedule.sample(lambda x, t: self.decoder(obs, x, t), z)

    # ------------------------------------------------------------------ the head protocol
    def sample_pre_tanh(self, obs: torch.Tensor) -> tuple[torch.Tensor, Record]:
        """``obs [B, D]`` -> ``(pre-tanh action [B, A], record)``: what GoRL's data collection stores."""
        mean, scale = self.distribution(obs)
        z = mean + torch.randn_like(mean) * scale
        log_std = scale.log()
        record = {"z": z, "log_prob": diagonal_gaussian_log_prob(z, mean, log_std), "mean": mean, "log_std": log_std}
        return self.decode(obs, z), record

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, Record]:
        pre_tanh, record = self.sample_pre_tanh(obs)
        return torch.tanh(pre_tanh), record

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """Deterministic: z = the encoder mean (GoRL's evaluation); otherwise z is sampled."""
        if not deterministic:
            return self.sample(obs)[0]
        return torch.tanh(self.decode(obs, self.distribution(obs)[0]))

    def log_ratio(self, obs: torch.Tensor, record: Record) -> RatioTerms:
        mean, scale = self.distribution(obs)
        log_std = scale.log()
        log_prob = diagonal_gaussian_log_prob(record["z"], mean, log_std)
        entropy = (log_std + 0.5 + 0.5 * math.log(2 * math.pi)).sum(dim=-1)
        diagnostics = {"latent_std": scale.detach().mean(), "latent_mean_abs": mean.detach().abs().mean()}
        aux_loss = None
        if self.latent_l2_coef > 0:
            penalty = mean.square().mean() + scale.square().mean()
            aux_loss, diagnostics["latent_l2"] = self.latent_l2_coef * penalty, penalty.detach()
        return RatioTerms(log_ratio=(log_prob - record["log_prob"]).unsqueeze(-1), entropy=entropy,
                          aux_loss=aux_loss, diagnostics=diagnostics)

    def kl(self, obs: torch.Tensor, record: Record) -> torch.Tensor:
        mean, scale = self.distribution(obs)
        return diagonal_gaussian_kl(record["mean"], record["log_std"], mean, scale.log())

    def decoder_loss(self, obs: torch.Tensor, pre_tanh_actions: torch.Tensor, pairs: int = 8,
                     decoder: VelocityNetwork | None = None) -> torch.Tensor:
        """GoRL's decoder objective, per action ``[B]``, from the fixed prior N(0, I) onto
        ``pre_tanh_actions [B, A]`` given ``obs [B, D]``, with ``pairs`` (t, noise) draws per action,
        t ~ U[0, 1); see ``decoder_error``."""
        t = torch.rand(obs.shape[0], pairs, device=obs.device)
        noise = torch.randn(obs.shape[0], pairs, self.act_dim, device=obs.device)
        return self.decoder_error(obs, pre_tanh_actions, t, noise, decoder).mean(dim=1)

    def decoder_error(self, obs: torch.Tensor, pre_tanh_actions: torch.Tensor, t: torch.Tensor,
                      noise: torch.Tensor, decoder: VelocityNetwork | None = None) -> torch.Tensor:
        """Per-draw decoder loss ``[B, N]`` at given ``t [B, N]`` in [0, 1) and ``noise [B, N, A]``.

        flow: conditional flow matching, unweighted velocity error (GoRL's ``compute_cfm_loss``).
        ddim: DDPM's epsilon loss at timestep floor(t T), i.e. uniform over the T training steps.
        """
        decoder = self.decoder if decoder is None else decoder
        if self.schedule is None:
            return flow_matching_loss(decoder, obs, pre_tanh_actions, t, noise, "velocity")
        return self.schedule.epsilon_error(decoder, obs, pre_tanh_actions, t, noise)

    def imitation_loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """The decoder's loss (flow matching, or ddim's epsilon loss) on expert ``actions [B, A]`` in
        [-1, 1] (mapped through atanh). The head keeps its decoder frozen, so this is a measurement,
        not a BC objective: the head declares no ``IMITATION`` capability and GoRL trains its decoder
        in its own phase."""
        pre_tanh = torch.atanh(actions.clamp(-ATANH_LIMIT, ATANH_LIMIT))
        return self.decoder_loss(obs, pre_tanh).mean()
