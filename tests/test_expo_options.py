"""EXPO's base policy as its authors' code builds it, as options (docs/fidelity.md, issue 28), each against
values computed by hand: their ``vp_beta_schedule`` (``policy.beta_schedule=vp``), their sampler (beta_t
variance, every state clipped: ``policy.sampling_variance=beta``, ``policy.clip_every_step``), their summed
imitation loss (``policy.imitation_reduction=sum``), their ``optax.adamw`` (``learner.base_weight_decay``)
and their eps-network (``policy.denoiser=expo``). Defaults stay genpol's."""

import math

import numpy as np
import pytest
import torch
from torch import nn

from genpol.config import ConfigError
from genpol.heads import DiffusionHead
from genpol.heads.denoiser import ExpoDenoiser

from test_expo import ACT_DIM, OBS_DIM, tiny_expo

T = 10


def float64_head(**options) -> DiffusionHead:
    """A single-action DDPM head of T = 10 steps built in float64 (its tables too)."""
    torch.set_default_dtype(torch.float64)
    try:
        return DiffusionHead(OBS_DIM, ACT_DIM, denoising_steps=T, ft_denoising_steps=T, hidden_sizes=[8, 8],
                             time_dim=4, min_sampling_std=0.0, **options)
    finally:
        torch.set_default_dtype(torch.float32)


def hand_vp_betas() -> np.ndarray:
    """beta_t = 1 - exp(-0.1 / 10 - 0.5 (10 - 0.1) (2t - 1) / 10^2) = 1 - exp(-0.01 - 0.0495 (2t - 1)), t = 1..10."""
    t = np.arange(1, T + 1)
    return 1 - np.exp(-0.01 - 0.0495 * (2 * t - 1))


def test_the_vp_schedule_is_theirs_at_t_10_and_the_default_stays_diffusers_cosine():
    head = float64_head(beta_schedule="vp")
    t = np.arange(1, T + 1)
    # sum_{s <= t} (2s - 1) = t^2: alpha_bar_t = exp(-0.01 t - 0.0495 t^2), from exp(-0.0595) to exp(-5.05)
    expected = np.exp(-0.01 * t - 0.0495 * t**2)
    np.testing.assert_allclose(head.train_alphas_cumprod.numpy(), expected, rtol=1e-13)
    assert head.train_alphas_cumprod[0].item() == pytest.approx(math.exp(-0.0595), rel=1e-13)
    assert head.train_alphas_cumprod[-1].item() == pytest.approx(math.exp(-5.05), rel=1e-13)
    # genpol's default: diffusers' squaredcos_cap_v2, whose last alpha_bar is 0 up to its beta cap (0.999)
    default = DiffusionHead(OBS_DIM, ACT_DIM, denoising_steps=T, ft_denoising_steps=T, hidden_sizes=[8, 8])
    steps = np.arange(T + 1)
    cosine = np.cos((steps / T + 0.008) / 1.008 * math.pi / 2) ** 2
    betas = np.minimum(1 - cosine[1:] / cosine[:-1], 0.999)
    np.testing.assert_allclose(default.train_alphas_cumprod.numpy(), np.cumprod(1 - betas), rtol=1e-5, atol=1e-7)


def test_the_beta_variance_is_beta_t_with_no_noise_on_the_last_step():
    head, posterior = float64_head(beta_schedule="vp", sampling_variance="beta"), float64_head(beta_schedule="vp")
    betas = hand_vp_betas()
    # sampling step i runs timestep T - 1 - i, whose beta is beta_{T - i} (1-based)
    expected = betas[::-1].copy()
    expected[-1] = 0.0
    np.testing.assert_allclose(head.variance.numpy(), expected, rtol=1e-12, atol=0)
    alpha_bar = np.cumprod(1 - betas)[::-1]
    alpha_bar_prev = np.append(alpha_bar[1:], 1.0)
    np.testing.assert_allclose(posterior.variance.numpy()[:-1],
                               (expected * (1 - alpha_bar_prev) / (1 - alpha_bar))[:-1], rtol=1e-12)
    with pytest.raises(ConfigError, match="policy.sampling_variance"):
        DiffusionHead(OBS_DIM, ACT_DIM, use_ddim=True, ft_denoising_steps=5, sampling_variance="beta")


class AffineEps(nn.Module):
    """A stand-in network: eps = 0.3 x + 0.05 t (t the integer timestep) + 0.1 s_0."""

    def forward(self, x: torch.Tensor, timestep: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        return 0.3 * x.double() + 0.05 * timestep.unsqueeze(-1) + 0.1 * obs[:, :1]  # x_T is drawn in float32


@pytest.mark.parametrize("clip_every_step", [True, False])
def test_their_sampler_step_by_hand(clip_every_step):
    """x_{t-1} = (x_t - beta_t / sqrt(1 - abar_t) eps) / sqrt(alpha_t) + [t > 0] sqrt(beta_t) z, then
    clipped to [-1, 1] (every step with clip_every_step, else the last only); x0 and z unclipped."""
    head = float64_head(beta_schedule="vp", sampling_variance="beta", clip_every_step=clip_every_step,
                        denoised_clip=math.inf, randn_clip=math.inf)
    head.denoiser = AffineEps()
    obs = torch.linspace(-1, 1, 64 * OBS_DIM, dtype=torch.float64).view(64, OBS_DIM)
    torch.manual_seed(3)
    _, record = head.sample(obs)
    torch.manual_seed(3)  # the same draws: x_T, then one z per step (the last one unused)
    betas = hand_vp_betas()
    alpha_bar = np.cumprod(1 - betas)
    x = torch.randn(64, ACT_DIM).double().numpy()  # the head draws in the default dtype
    states = [x]
    for t in range(T - 1, -1, -1):
        z = torch.randn(64, ACT_DIM).double().numpy()
        eps = 0.3 * x + 0.05 * t + 0.1 * obs[:, :1].numpy()
        x = (x - betas[t] / math.sqrt(1 - alpha_bar[t]) * eps) / math.sqrt(1 - betas[t])
        x = x + (t > 0) * math.sqrt(betas[t]) * z
        if clip_every_step or t == 0:
            x = np.clip(x, -1, 1)
        states.append(x)
    np.testing.assert_allclose(record["chain"].numpy(), np.stack(states, axis=1), rtol=1e-12, atol=1e-13)
    inside = (record["chain"][:, 1:-1].abs() <= 1).all()
    assert inside if clip_every_step else not inside  # without it, intermediate states leave the box


def test_the_summed_imitation_loss_is_the_per_sample_sum_meaned_over_the_batch():
    class Zero(nn.Module):
        def forward(self, x, timestep, obs):
            return torch.zeros_like(x)

    obs, actions = torch.randn(16, OBS_DIM), torch.rand(16, ACT_DIM) * 2 - 1
    losses = {}
    for reduction in ("mean", "sum"):
        head = DiffusionHead(OBS_DIM, ACT_DIM, denoising_steps=T, ft_denoising_steps=T, hidden_sizes=[8, 8],
                             imitation_reduction=reduction)
        head.denoiser = Zero()  # eps_theta = 0: the loss is that of the noise draws alone
        torch.manual_seed(5)
        losses[reduction] = head.imitation_loss(obs, actions)
    torch.manual_seed(5)
    torch.randint(0, T, (16,))  # the timesteps, drawn first
    noise = torch.randn(16, ACT_DIM)
    assert losses["mean"].item() == pytest.approx(noise.square().mean().item(), rel=1e-6)
    assert losses["sum"].item() == pytest.approx(noise.square().sum(dim=-1).mean().item(), rel=1e-6)
    assert losses["sum"].item() == pytest.approx(ACT_DIM * losses["mean"].item(), rel=1e-6)


@pytest.mark.parametrize("weight_decay", [0.0, 0.01])
def test_base_weight_decay_is_decoupled_and_scaled_by_the_learning_rate_as_optax_adamw(weight_decay):
    """optax.adamw's update -lr (m_hat / (sqrt(v_hat) + eps) + wd p) equals torch's AdamW step
    p (1 - lr wd) - lr m_hat / (sqrt(v_hat) + eps); on the first step m_hat = g and v_hat = g^2."""
    lr = 1e-2
    algorithm = tiny_expo(lr=lr, base_weight_decay=weight_decay)
    assert type(algorithm.actor_optimizer) is (torch.optim.AdamW if weight_decay else torch.optim.Adam)
    params = list(algorithm.head.parameters())
    slopes = [torch.linspace(-2, 3, p.numel()).view_as(p) for p in params]
    # a loss with gradient `slope` for every parameter
    algorithm.head.imitation_loss = lambda obs, actions: sum((c * p).sum() for c, p in zip(slopes, params))
    before = [p.detach().clone() for p in params]
    algorithm.base_step(algorithm.sampler.sample(8))
    for old, new, g in zip(before, params, slopes):
        expected = old * (1 - lr * weight_decay) - lr * g / (g.abs() + 1e-8)
        torch.testing.assert_close(new.detach(), expected, rtol=1e-6, atol=1e-7)
    with pytest.raises(ConfigError, match="learner.base_weight_decay"):
        tiny_expo(base_weight_decay=-1.0)


def swish(x: np.ndarray) -> np.ndarray:
    return x / (1 + np.exp(-x))


def test_the_expo_denoiser_by_hand_and_at_their_size():
    torch.set_default_dtype(torch.float64)
    try:
        net = ExpoDenoiser(obs_dim=2, chunk_dim=3, width=4, num_blocks=2, activation="silu", time_dim=6)
    finally:
        torch.set_default_dtype(torch.float32)
    with torch.no_grad():  # away from the init (zero biases, unit LayerNorm), so that every term shows
        for p in net.parameters():
            p.add_(0.1 * torch.randn_like(p))
    x, obs, t = torch.randn(5, 3, dtype=torch.float64), torch.randn(5, 2, dtype=torch.float64), \
        torch.tensor([0.0, 1.0, 4.0, 7.0, 9.0], dtype=torch.float64)
    w = {k: v.detach().numpy() for k, v in net.state_dict().items()}

    def dense(h, name):
        return h @ w[f"{name}.weight"].T + w[f"{name}.bias"]

    phase = 2 * math.pi * t.numpy()[:, None] * w["time_features.kernel"][:, 0][None, :]  # [B, 3]
    time = dense(swish(dense(np.concatenate([np.cos(phase), np.sin(phase)], -1), "time_mlp.0")), "time_mlp.2")
    h = dense(np.concatenate([x.numpy(), obs.numpy(), time], -1), "input")
    for k in range(2):
        mean, var = h.mean(-1, keepdims=True), h.var(-1, keepdims=True)
        normed = (h - mean) / np.sqrt(var + 1e-6) * w[f"blocks.{k}.norm.weight"] + w[f"blocks.{k}.norm.bias"]
        h = h + dense(swish(dense(normed, f"blocks.{k}.expand")), f"blocks.{k}.project")
    expected = dense(swish(h), "output")
    np.testing.assert_allclose(net(x, t, obs).detach().numpy(), expected, rtol=1e-12, atol=1e-14)
    # their Hopper network (policy=diffusion_expo_authors): 1,747,267 parameters, as their flax tree counts
    head = DiffusionHead(11, 3, denoising_steps=T, ft_denoising_steps=T, hidden_sizes=[256] * 3, denoiser="expo",
                         activation="silu", time_dim=128)
    assert sum(p.numel() for p in head.denoiser.parameters()) == 1_747_267
    with pytest.raises(ConfigError, match="policy.denoiser"):
        DiffusionHead(OBS_DIM, ACT_DIM, denoiser="expo", time_embedding="dppo")
