"""The DDIM decoder of GoRL's "PPO + Diffusion" variant (ALGORITHMS.md 6.1): a noise-prediction network
eps(x_k, k, s), trained by DDPM's epsilon loss from the fixed prior N(0, I) and sampled by
deterministic DDIM (eta = 0) from x_T = z instead of fresh noise.

Schedule: diffusers' ``DDIMScheduler`` tables with the cosine ``squaredcos_cap_v2`` betas (GoRL's
direct-epsilon decoder and DPPO use the cosine schedule too), built with ``T + 1`` timesteps of which
the last is dropped. That last one is zero-SNR: the cosine's final beta is 1, clipped by diffusers to
0.999, so abar = 2.0e-5 there (T = 10: 11 timesteps). Entering DDIM at it, the epsilon network must reproduce x to
~1e-3 and the first step multiplies its error by ~30. ``bench/gorl_decoders.py`` (3 seeds, 20
epochs; a 3-d Gaussian target of std 0.5): the decoded std is 1.00 entering there, 0.44 without it
(flow: 0.44); on a bimodal target 59 % against 93 % of the actions land near a mode (flow: 96 %).
GoRL's historical diffusion decoder also enters below it (abar = 0.024).
So training draws k uniformly from {0, .., T - 1}, and sampling takes ``steps`` DDIM steps with
``trailing`` spacing over those T timesteps, k = T - 1, T - 1 - r, .., r - 1 (r = T / steps), from
abar_{T-1} = 0.020 (T = 10) to abar = 1 (``set_alpha_to_one``); x0 is not clipped (pre-tanh actions
are unbounded).

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
    """Cosine DDPM schedule of ``train_timesteps`` steps with a deterministic ``steps``-step DDIM sampler
    (``steps`` divides ``train_timesteps``).

    Buffers (not persistent: rebuilt from the two sizes): ``alphas_cumprod [T]``; per sampling step i
    (0 = noisiest) ``timesteps [S]``, ``alpha_bar [S]`` and ``alpha_bar_prev [S]``.
    The network sees the timestep as ``k / T`` in [0, 1), the range of genpol's time embedding.
    """

    def __init__(self, train_timesteps: int = 10, steps: int = 10):
        super().__init__()
        if not 1 <= steps <= train_timesteps or train_timesteps % steps:
            raise ValueError(f"the GoRL ddim decoder needs integration_steps ({steps}) to divide "
                             f"diffusion_timesteps ({train_timesteps})")
        # imported here: diffusers takes ~1.6 s to import, which only the ddim decoder should pay
        from diffusers import DDIMScheduler

        scheduler = DDIMScheduler(num_train_timesteps=train_timesteps + 1, beta_schedule="squaredcos_cap_v2",
                                  prediction_type="epsilon", clip_sample=False, set_alpha_to_one=True)
        self.train_timesteps = train_timesteps
        alphas_cumprod = scheduler.alphas_cumprod[:train_timesteps].to(torch.float32)  # zero-SNR one dropped
        stride = train_timesteps // steps
        timesteps = torch.arange(train_timesteps - 1, -1, -stride)  # trailing spacing over the kept ones
        previous = timesteps - stride
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
