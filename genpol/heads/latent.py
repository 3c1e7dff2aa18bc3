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
from typing import Sequence

import torch
from torch import nn

from genpol.heads.base import Capability, PolicyHead, RatioTerms, Record
from genpol.heads.flow_core import VelocityNetwork, flow_matching_loss, integrate
from genpol.heads.gaussian import diagonal_gaussian_kl, diagonal_gaussian_log_prob
from genpol.heads.latent_ddim import DDIMSchedule
from genpol.nets import MLP

MIN_SCALE, MAX_SCALE = 1e-3, 10.0
ATANH_LIMIT = 1.0 - 1e-6  # actions at the bounds map to a finite pre-tanh value


class LatentDecoderHead(PolicyHead):
    """GoRL: Gaussian encoder in latent space, frozen flow (or DDIM) decoder, tanh.

    Record: ``z [B, A]``, ``log_prob [B]``, ``mean [B, A]``, ``log_std [B, A]`` (the old encoder
    distribution, for the exact ratio and KL). ``log_ratio`` is ``[B, 1]``.

    Args:
        obs_dim, act_dim: sizes; the latent has the action's size (z_dim = act_dim).
        hidden_sizes, activation: the encoder MLP (GoRL: 4 x 32 SiLU, outputs mean and raw scale).
        decoder_hidden_sizes, decoder_activation, time_embed_dim: the decoder's network, the velocity
            (flow) or the noise (ddim) (GoRL: 4 x 64 SiLU, 8-dim time embedding, output scale 1.0).
        integration_steps: decoder steps, Euler (flow) or DDIM (ddim) (GoRL: 10).
        zero_init_decoder: all decoder weights 0, so the decoder is the identity (stage 0); the
            ddim decoder is bypassed until ``load_decoder`` (see the module docstring).
        decoder: ``flow`` (conditional flow matching, Euler from x = z) or ``ddim``.
        diffusion_timesteps: T of the ddim decoder's DDPM training schedule (a multiple of
            integration_steps).
        latent_l2_coef: weight c_z of the penalty c_z (mean(mu^2) + mean(sigma^2)) added to the policy
            loss; the GoRL pipeline sets it per stage.
    """

    family = "gorl"
    capabilities = frozenset({Capability.ON_POLICY_RATIO, Capability.CANDIDATES})
    has_exact_kl = True
    has_entropy = True

    def __init__(self, obs_dim: int, act_dim: int, hidden_sizes: Sequence[int] = (32, 32, 32, 32),
                 activation: str = "silu", decoder_hidden_sizes: Sequence[int] = (64, 64, 64, 64),
                 decoder_activation: str = "silu", time_embed_dim: int = 8, integration_steps: int = 10,
                 zero_init_decoder: bool = True, latent_l2_coef: float = 0.0, decoder: str = "flow",
                 diffusion_timesteps: int = 10):
        super().__init__(obs_dim, act_dim)
        if decoder not in ("flow", "ddim"):
            raise ValueError(f"unknown GoRL decoder '{decoder}'; choose flow or ddim")
        self.spec_kwargs = {
            "hidden_sizes": list(hidden_sizes), "activation": activation,
            "decoder_hidden_sizes": list(decoder_hidden_sizes), "decoder_activation": decoder_activation,
            "time_embed_dim": time_embed_dim, "integration_steps": integration_steps,
            "zero_init_decoder": zero_init_decoder, "latent_l2_coef": latent_l2_coef, "decoder": decoder,
            "diffusion_timesteps": diffusion_timesteps,
        }
        self.decoder_kind = decoder
        self.schedule = DDIMSchedule(diffusion_timesteps, integration_steps) if decoder == "ddim" else None
        self.integration_steps = integration_steps
        self.latent_l2_coef = latent_l2_coef
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
                               spec["time_embed_dim"], output_scale=1.0)

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
