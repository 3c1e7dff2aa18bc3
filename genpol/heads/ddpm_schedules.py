"""Discrete DDPM noise schedules of the diffusion head (``policy.beta_schedule``).

* ``squaredcos_cap_v2``: diffusers' cosine schedule (Nichol and Dhariwal 2021), genpol's default and
  DPPO's; its tables come from ``diffusers.DDPMScheduler`` in float32, as they always have.
* ``vp``: the discretized variance-preserving SDE of IDQL and EXPO (their ``vp_beta_schedule``), computed
  here from its definition: with the linear rate beta(s) = beta_min + s (beta_max - beta_min) on
  s in [0, 1], step t of T keeps ``alpha_t = exp(-int_{(t-1)/T}^{t/T} beta(s) ds)``
  ``= exp(-beta_min / T - (beta_max - beta_min) (2t - 1) / (2 T^2))``, so that
  ``alpha_bar_t = exp(-beta_min t / T - (beta_max - beta_min) t^2 / (2 T^2))``. At T = 10 with EXPO's
  beta_min 0.1 and beta_max 10: alpha_bar runs from exp(-0.0595) = 0.942 to exp(-5.05) = 0.0064, where
  the cosine schedule ends at 0 (alpha_bar up to 0.218 apart in between).
"""

from __future__ import annotations

import torch

BETA_SCHEDULES = ("squaredcos_cap_v2", "vp")
"""The values of ``policy.beta_schedule``."""

VP_BETA_MIN, VP_BETA_MAX = 0.1, 10.0
"""The VP SDE's rates at s = 0 and s = 1 (IDQL's and EXPO's)."""


def vp_betas(steps: int, beta_min: float = VP_BETA_MIN, beta_max: float = VP_BETA_MAX) -> torch.Tensor:
    """``[steps]`` float64: beta_t = 1 - alpha_t of the discretized VP SDE, t = 1..steps (module docstring)."""
    t = torch.arange(1, steps + 1, dtype=torch.float64)
    return 1.0 - torch.exp(-beta_min / steps - 0.5 * (beta_max - beta_min) * (2 * t - 1) / steps**2)


def alphas_cumprod(schedule: str, steps: int) -> torch.Tensor:
    """``[steps]`` alpha_bar of timesteps 0..steps - 1 in torch's default dtype (float32 unless changed).

    ``squaredcos_cap_v2`` keeps diffusers' float32 table (genpol's values, bit for bit); ``vp`` is computed
    in float64 and then cast, so that a head built under a float64 default dtype (the parity harness)
    holds it unrounded."""
    if schedule == "vp":
        return torch.cumprod(1.0 - vp_betas(steps), dim=0).to(torch.get_default_dtype())
    if schedule != "squaredcos_cap_v2":
        raise ValueError(f"unknown beta schedule '{schedule}'; choose one of {BETA_SCHEDULES}")
    # imported here: diffusers takes ~1.6 s to import, which every genpol process paid at start
    from diffusers import DDPMScheduler

    ddpm = DDPMScheduler(num_train_timesteps=steps, beta_schedule="squaredcos_cap_v2",
                         prediction_type="epsilon", clip_sample=False)
    return ddpm.alphas_cumprod.to(torch.float32).to(torch.get_default_dtype())


def step_tables(denoising_steps: int, use_ddim: bool, ddim_steps: int, beta_schedule: str = "squaredcos_cap_v2",
                sampling_variance: str = "posterior") -> dict[str, torch.Tensor]:
    """The diffusion head's tables, per sampling step i (0 = noisiest), each ``[steps sampled]``: the
    timestep, alpha-bar of it and of the step's target, the DDPM posterior mean's coefficients of x0 and
    x_t, and the step's variance; ``train_alphas_cumprod [denoising_steps]`` for imitation. DDIM's
    timesteps come from diffusers' scheduler (they do not depend on the betas).

    ``sampling_variance``: ``posterior`` (beta_t (1 - abar_{t-1}) / (1 - abar_t), floored at 1e-20) or
    ``beta`` (beta_t, and exactly 0 on the last step: no noise there, as Ho et al.'s and EXPO's sampler)."""
    table = alphas_cumprod(beta_schedule, denoising_steps)
    if use_ddim:
        from diffusers import DDIMScheduler  # imported here: diffusers takes ~1.6 s to import

        ddim = DDIMScheduler(num_train_timesteps=denoising_steps, beta_schedule="squaredcos_cap_v2",
                             prediction_type="epsilon", clip_sample=False, set_alpha_to_one=True)
        ddim.set_timesteps(ddim_steps)
        timesteps = ddim.timesteps.long()
        previous = timesteps - denoising_steps // ddim_steps
    else:
        timesteps = torch.arange(denoising_steps - 1, -1, -1)
        previous = timesteps - 1
    alpha_bar = table[timesteps]
    alpha_bar_prev = torch.where(previous >= 0, table[previous.clamp(min=0)], torch.ones((), dtype=table.dtype))
    beta = 1 - alpha_bar / alpha_bar_prev  # the step's own beta (= beta_t for DDPM)
    # DDPM's posterior variance; it is also DDIM's sigma^2 at eta = 1 (scaled by eta^2 in step_mean)
    variance = (beta * (1 - alpha_bar_prev) / (1 - alpha_bar)).clamp(min=1e-20)
    if sampling_variance == "beta":
        variance = torch.where(previous >= 0, beta, torch.zeros((), dtype=table.dtype))
    return {"train_alphas_cumprod": table, "timesteps": timesteps.to(table.dtype), "alpha_bar": alpha_bar,
            "alpha_bar_prev": alpha_bar_prev, "coef_x0": alpha_bar_prev.sqrt() * beta / (1 - alpha_bar),
            "coef_xt": (1 - beta).sqrt() * (1 - alpha_bar_prev) / (1 - alpha_bar), "variance": variance}
