"""The DDIM decoder of GoRL's "PPO + Diffusion" variant (ALGORITHMS.md 6.1): a noise-prediction network
eps(x_k, k, s), trained by DDPM's epsilon loss from the fixed prior N(0, I) and sampled by
deterministic DDIM (eta = 0) from x_T = z instead of fresh noise.

Schedule: diffusers' ``DDIMScheduler`` with the cosine ``squaredcos_cap_v2`` betas (GoRL's direct-epsilon
decoder and DPPO use the cosine schedule too), ``T = train_timesteps`` training steps and ``steps``
sampling steps with ``trailing`` spacing, so that sampling starts at the noisiest timestep T - 1,
whatever ``steps`` is (``leading`` spacing would start at T - T/steps, a less noisy level than the
N(0, I) latent the decoder is given). The final step goes to abar = 1 (``set_alpha_to_one``), and x0
is not clipped (pre-tanh actions are unbounded).

The tables come from the scheduler; the eta = 0 step is written out below rather than calling
``DDIMScheduler.step``: the tables live as buffers that move with the head (``.to(device)``), the
training loss needs a different timestep per sample (``step`` takes one), and the scheduler object
keeps mutable sampling state that a policy head should not share. ``tests/test_gorl_ddim.py``
checks the step against ``DDIMScheduler.step`` and the noising against ``DDPMScheduler.add_noise``.
"""

from __future__ import annotations

from typing import Callable

import torch
from torch import nn

EpsilonFn = Callable[[torch.Tensor, torch.Tensor], torch.Tensor]  # (x [B, A], t [B] in [0, 1)) -> eps [B, A]


class DDIMSchedule(nn.Module):
    """Cosine DDPM schedule of ``train_timesteps`` steps with a deterministic ``steps``-step DDIM sampler.

    Buffers (not persistent: rebuilt from the two sizes): ``alphas_cumprod [T]``; per sampling step i
    (0 = noisiest) ``timesteps [S]``, ``alpha_bar [S]`` and ``alpha_bar_prev [S]``.
    The network sees the timestep as ``k / T`` in [0, 1), the range of genpol's time embedding.
    """

    def __init__(self, train_timesteps: int = 10, steps: int = 10):
        super().__init__()
        if not 1 <= steps <= train_timesteps:
            raise ValueError(f"the GoRL ddim decoder needs 1 <= integration_steps ({steps}) <= "
                             f"diffusion_timesteps ({train_timesteps})")
        # imported here: diffusers takes ~1.6 s to import, which only the ddim decoder should pay
        from diffusers import DDIMScheduler

        scheduler = DDIMScheduler(num_train_timesteps=train_timesteps, beta_schedule="squaredcos_cap_v2",
                                  prediction_type="epsilon", clip_sample=False, set_alpha_to_one=True,
                                  timestep_spacing="trailing")
        scheduler.set_timesteps(steps)
        self.train_timesteps = train_timesteps
        alphas_cumprod = scheduler.alphas_cumprod.to(torch.float32)
        timesteps = scheduler.timesteps.long()
        previous = timesteps - train_timesteps // steps  # as DDIMScheduler.step computes it
        alpha_bar_prev = torch.where(previous >= 0, alphas_cumprod[previous.clamp(min=0)],
                                     scheduler.final_alpha_cumprod.to(torch.float32))
        self.register_buffer("alphas_cumprod", alphas_cumprod, persistent=False)
        self.register_buffer("timesteps", timesteps, persistent=False)
        self.register_buffer("alpha_bar", alphas_cumprod[timesteps], persistent=False)
        self.register_buffer("alpha_bar_prev", alpha_bar_prev, persistent=False)

    def sample(self, epsilon: EpsilonFn, z: torch.Tensor) -> torch.Tensor:
        """Deterministic DDIM from ``x_T = z [B, A]`` to the clean sample ``[B, A]``:

            x0 = (x - sqrt(1 - abar) eps) / sqrt(abar),   x <- sqrt(abar_prev) x0 + sqrt(1 - abar_prev) eps.
        """
        x = z
        for i in range(len(self.timesteps)):
            t = (self.timesteps[i].to(z.dtype) / self.train_timesteps).expand(z.shape[0])
            eps = epsilon(x, t)
            alpha_bar, alpha_bar_prev = self.alpha_bar[i], self.alpha_bar_prev[i]
            x0 = (x - (1 - alpha_bar) ** 0.5 * eps) / alpha_bar ** 0.5
            x = alpha_bar_prev ** 0.5 * x0 + (1 - alpha_bar_prev) ** 0.5 * eps
        return x

    def timestep_of(self, t: torch.Tensor) -> torch.Tensor:
        """``t`` uniform in [0, 1) -> a training timestep ``floor(t T)``, uniform over {0, .., T - 1}."""
        return (t * self.train_timesteps).long().clamp(max=self.train_timesteps - 1)

    def epsilon_error(self, network: nn.Module, obs: torch.Tensor, actions: torch.Tensor, t: torch.Tensor,
                      noise: torch.Tensor) -> torch.Tensor:
        """DDPM's epsilon loss per draw, mean over action dims: ``[B, N]``.

        Args:
            network: ``(obs [M, D], x [M, A], t [M]) -> eps [M, A]``.
            obs: ``[B, D]``; actions: ``[B, A]`` (the clean samples); t: ``[B, N]`` in [0, 1), mapped
                to timesteps by ``timestep_of``; noise: ``[B, N, A]``, the N(0, I) prior's draws.
        """
        batch, draws = t.shape
        timestep = self.timestep_of(t)
        alpha_bar = self.alphas_cumprod[timestep].unsqueeze(-1)
        noisy = alpha_bar.sqrt() * actions.unsqueeze(1) + (1 - alpha_bar).sqrt() * noise
        flat_obs = obs.unsqueeze(1).expand(batch, draws, obs.shape[-1]).reshape(batch * draws, -1)
        predicted = network(flat_obs, noisy.reshape(batch * draws, -1),
                            timestep.reshape(-1).to(noise.dtype) / self.train_timesteps)
        return (predicted.view_as(noise) - noise).square().mean(dim=-1)
