"""PolicyFlow (Yang, Liu, Chen; ICLR 2026): a flow prior plus learnable Gaussian exploration noise,
with an importance ratio from the change of the velocity field.

Action a = x1 + delta: x1 is the flow's push-forward of x0 ~ N(0, I) (10 midpoint steps), delta ~
N(0, sigma^2) with a learnable state-independent sigma. The record keeps x0, x1, delta and the
rollout sigma. For the ratio, pick t uniformly from the solver's evaluation times, set
x_t = (1 - t) x0 + t x1 on the straight path, and let

    dv = v_theta(x_t, t, s) - v_snapshot(x_t, t, s)

where the snapshot is a frozen copy of the rollout network, refreshed by ``begin_update`` (the
runner calls it at the start of every update). To first order the endpoint moved by dv, so

    r = N(delta; dv, sigma_theta^2) / N(delta; 0, sigma_old^2).

Extra terms (in ``RatioTerms``): the Gaussian entropy of sigma, and the Brownian regularizer
``brownian_coef * MSE((1 - t) v_theta(x_t), beta * (x_t - t v_snapshot(x_t)))`` (ALGORITHMS.md 5.3),
whose fixed point is an expanding field that counters mode collapse; reported as ``head/brownian``.

``kl`` is the closed form KL(N(0, sigma_old) || N(dv, sigma_theta)) of that same first-order model,
which is what the reference's KL-adaptive learning rate uses (``kl_log_eps`` adds the port's 1e-5
inside its log, ``log(sigma_theta / sigma_old + eps)``). ``degenerate_to_gaussian`` fixes
x0 = 0, which makes x1 a deterministic function of s: Gaussian PPO as a built-in ablation.
``velocity_network=port`` swaps genpol's velocity MLP for the PolicyFlow port's network
(``flow_core.FourierVelocityNetwork``).
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, List

import torch
from torch import nn

from genpol.errors import require
from genpol.heads.base import PolicyHead, RatioTerms, Record
from genpol.heads.flow_core import (FlowConfig, FourierVelocityNetwork, VelocityNetwork, VelocitySnapshot,
                                   brownian_regularizer, flow_matching_loss, integrate, solver_grid)
from genpol.heads.gaussian import diagonal_gaussian_kl, diagonal_gaussian_log_prob

LOG_STD_BOUNDS = (-5.0, 2.0)  # genpol's default clamp of the noise's log std (the port's: -20, 4)


@dataclass
class PolicyFlowConfig(FlowConfig):
    """PolicyFlow: flow prior plus learnable Gaussian noise, velocity-variation ratio, Brownian regularizer."""

    family: str = "policyflow"
    """Head family; selects the head class."""
    hidden_sizes: List[int] = field(default_factory=lambda: [64, 64, 64])
    """Hidden layer widths of the velocity network."""
    output_scale: float = 1.0
    """Multiplies the velocity network's output."""
    velocity_network: str = "genpol"
    """``genpol``: one MLP on [obs, x_t, time embedding]. ``port``: the PolicyFlow port's network, an MLP on
    [x_t, c] with c = MLP_mish(Fourier features of t) + a linear map of obs (``FourierVelocityNetwork``; its
    width c is ``time_embed_dim``, the port's ``flow_embedding_dim``, at least 8; its random frequencies
    N(0, ``fourier_scale``^2); ``time_embedding`` unused). The port's other settings: ``activation=elu``,
    ``time_embed_dim=64``, ``output_scale=1``."""
    fourier_scale: float = 16.0
    """Std of the random time frequencies of ``velocity_network=port`` (the port's 16)."""
    integrator: str = "midpoint"
    """``euler`` or ``midpoint`` (PolicyFlow's)."""
    log_std_init: float = 0.0
    """Initial log std of the exploration noise (clamped to log_std_bounds)."""
    log_std_bounds: List[float] = field(default_factory=lambda: list(LOG_STD_BOUNDS))
    """[low, high] the noise's log std is clamped to: genpol's [-5, 2], or the PolicyFlow port's [-20, 4]
    (``LearnableVariance``). Outside them the log std gets no gradient."""
    time_grid_endpoint: bool = False
    """Also draw t = 1 among the ratio's evaluation times: the solver's times plus the path's end (2N + 1
    points under midpoint, as the PolicyFlow port's ``time_steps_tensor``). genpol's default draws only
    the times the solver evaluates (2N under midpoint, N under euler)."""
    kl_log_eps: float = 0.0
    """Added to sigma_theta / sigma_old inside the log of the KL that the ``adaptive`` learning-rate
    schedule reads: 0 is the exact KL (genpol's default), 1e-5 the PolicyFlow port's formula (with
    ``learner.adaptive_lr_rule=per_epoch``, its whole rule)."""
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
        require(len(self.log_std_bounds) == 2 and self.log_std_bounds[0] < self.log_std_bounds[1],
                "policy.log_std_bounds", "[low, high] with low < high", list(self.log_std_bounds))
        require(self.kl_log_eps >= 0, "policy.kl_log_eps", ">= 0", self.kl_log_eps)
        require(self.velocity_network in ("genpol", "port"), "policy.velocity_network", "genpol or port",
                self.velocity_network)
        require(self.fourier_scale > 0, "policy.fourier_scale", "> 0", self.fourier_scale)
        if self.velocity_network == "port":
            require(self.time_embed_dim >= 8, "policy.time_embed_dim", ">= 8 with policy.velocity_network=port",
                    self.time_embed_dim)


class PolicyFlowHead(VelocitySnapshot, PolicyHead):
    """PolicyFlow head; hyperparameters: ``PolicyFlowConfig`` (PolicyFlow's: 10 midpoint steps, Brownian
    weight 0.01, beta 1). See the module docstring."""

    family = "policyflow"
    Config = PolicyFlowConfig
    has_exact_kl = True  # exact for the first-order ratio model; see the module docstring
    has_entropy = True

    def __init__(self, obs_dim: int, act_dim: int, config: PolicyFlowConfig | None = None, **hyperparameters: Any):
        super().__init__(obs_dim, act_dim, config, **hyperparameters)
        c = self.config
        if c.velocity_network == "port":
            self.velocity = FourierVelocityNetwork(obs_dim, act_dim, c.hidden_sizes, c.activation, c.time_embed_dim,
                                                   c.output_scale, c.fourier_scale)
        else:
            self.velocity = VelocityNetwork(obs_dim, act_dim, c.hidden_sizes, c.activation, c.time_embed_dim,
                                            c.output_scale, c.time_embedding)
        self.log_std = nn.Parameter(torch.full((act_dim,), float(c.log_std_init)))
        self.integration_steps = c.integration_steps
        self.integrator = c.integrator
        self.brownian_coef = c.brownian_coef
        self.brownian_beta = c.brownian_beta
        self.degenerate_to_gaussian = c.degenerate_to_gaussian
        self.log_std_bounds = tuple(float(bound) for bound in c.log_std_bounds)
        self.kl_log_eps = c.kl_log_eps
        # the evaluation times t of the ratio [2N] (midpoint) or [N] (euler), [+ 1] with the end t = 1
        grid = solver_grid(c.integration_steps, c.integrator)
        if c.time_grid_endpoint:
            grid = torch.cat([grid, torch.ones(1, dtype=grid.dtype)])
        self.register_buffer("time_grid", grid, persistent=False)
        self.init_snapshot()

    def clamped_log_std(self) -> torch.Tensor:
        return self.log_std.clamp(*self.log_std_bounds)

    def _noise_source(self, batch: int, device: torch.device) -> torch.Tensor:
        x0 = torch.randn(batch, self.act_dim, device=device)
        return torch.zeros_like(x0) if self.degenerate_to_gaussian else x0

    def flow(self, obs: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
        """``x0 [B, A]`` -> the action prior ``x1 [B, A]``."""
        return integrate(lambda x, t: self.velocity(obs, x, t), x0, self.integration_steps, self.integrator)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, Record]:
        x0 = self._noise_source(obs.shape[0], obs.device)
        x1 = self.flow(obs, x0)
        log_std = self.clamped_log_std().expand_as(x1)
        delta = torch.randn_like(x1) * log_std.exp()
        log_prob = diagonal_gaussian_log_prob(delta, torch.zeros_like(delta), log_std)
        return x1 + delta, {"x0": x0, "x1": x1, "delta": delta, "log_std": log_std.clone(), "log_prob": log_prob}

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """Deterministic: the flow from x0 = 0 without exploration noise. Otherwise a full sample."""
        if deterministic:
            return self.flow(obs, torch.zeros(obs.shape[0], self.act_dim, device=obs.device))
        return self.sample(obs)[0]

    def _velocity_change(self, obs: torch.Tensor, record: Record) -> tuple[torch.Tensor, ...]:
        """``(t [B], x_t [B, A], v_theta, v_snapshot)`` at a random solver time on the stored path."""
        index = torch.randint(0, self.time_grid.numel(), (obs.shape[0],), device=obs.device)
        t = self.time_grid[index]
        x_t = (1 - t).unsqueeze(-1) * record["x0"] + t.unsqueeze(-1) * record["x1"]
        v_new = self.velocity(obs, x_t, t)
        with torch.no_grad():
            v_old = self.snapshot(obs, x_t, t)
        return t, x_t, v_new, v_old

    def log_ratio(self, obs: torch.Tensor, record: Record) -> RatioTerms:
        t, x_t, v_new, v_old = self._velocity_change(obs, record)
        delta_v = v_new - v_old
        log_std = self.clamped_log_std().expand_as(delta_v)
        log_prob = diagonal_gaussian_log_prob(record["delta"], delta_v, log_std)
        entropy = (self.clamped_log_std() + 0.5 + 0.5 * math.log(2 * math.pi)).sum()
        brownian = brownian_regularizer(v_new, v_old, x_t, t, self.brownian_beta)
        return RatioTerms(
            log_ratio=(log_prob - record["log_prob"]).unsqueeze(-1),
            entropy=entropy.expand(obs.shape[0]),
            aux_loss=self.brownian_coef * brownian,
            kl=self._kl(delta_v, record),
            diagnostics={"brownian": brownian.detach(), "std": log_std.detach().exp().mean(),
                         "delta_v": delta_v.detach().norm(dim=-1).mean()},
        )

    def _kl(self, delta_v: torch.Tensor, record: Record) -> torch.Tensor:
        """``[B]``: KL(N(0, sigma_old) || N(dv, sigma_theta)), summed over action dims. With ``kl_log_eps``
        its log term log(sigma_theta / sigma_old) becomes log(sigma_theta / sigma_old + eps), the port's."""
        log_std = self.clamped_log_std().expand_as(delta_v)
        kl = diagonal_gaussian_kl(torch.zeros_like(delta_v), record["log_std"], delta_v, log_std)
        if self.kl_log_eps:
            std_ratio = (log_std - record["log_std"]).exp()
            kl = kl + (torch.log(std_ratio + self.kl_log_eps) - (log_std - record["log_std"])).sum(dim=-1)
        return kl

    def kl(self, obs: torch.Tensor, record: Record) -> torch.Tensor:
        """KL at fresh random evaluation times; ``log_ratio`` also returns it at its own times
        (``RatioTerms.kl``), which is what the updaters use."""
        _, _, v_new, v_old = self._velocity_change(obs, record)
        return self._kl(v_new - v_old, record)

    def imitation_loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Conditional flow matching of the flow prior on expert actions (t ~ U[0, 1))."""
        t = torch.rand(obs.shape[0], 1, device=obs.device)
        noise = torch.randn(obs.shape[0], 1, self.act_dim, device=obs.device)
        return flow_matching_loss(self.velocity, obs, actions, t, noise, "velocity").mean()
