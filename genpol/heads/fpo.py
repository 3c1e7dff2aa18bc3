"""FPO (McAllister et al. 2025): a flow policy whose likelihood ratio is replaced by flow-matching losses.

The action is the ODE push-forward of Gaussian noise (10 Euler steps by default; no extra noise).
At sampling time the head draws N_mc pairs (t_i, noise_i) per action, and records them with the
per-sample flow-matching losses l_old,i under the sampling parameters. Since the weighted loss is a
negative ELBO up to constants, L_old - L_theta approximates log pi_theta(a|s) - log pi_old(a|s):

* ``ratio_mode="average"`` (FPO): log r = mean_i l_old,i - mean_i l_theta,i, one unit per action;
* ``ratio_mode="per_sample"`` (FPO++): log r_i = clamp(l_old,i - l_theta,i, -3, 3), N_mc units, each
  clipped on its own by the updater (FPO++ pairs this with the ASPO loss). The clamp is FPO's own
  per-sample mode's (``log_ratio_clamp="hard"``: no gradient beyond +-3). FPO++'s manipulation code
  clamps only when asked, and then straight through (``"straight_through"``: the clamped value, the
  unclamped gradient, so SPO's and ASPO's pull-back still acts on a ratio past the clamp); ``"none"``.

The stored observations are the normalized ones of collection time, so the observation normalizer
is in effect frozen during the update and log r is exactly 0 at its start (the reference code
re-normalizes before the update, a known source of a spurious initial ratio).
There is no closed-form KL or entropy: TRPO and the adaptive learning rate use the sample estimate.

Mode collapse. FPO has no entropy control, and on a multimodal task its flow collapses onto one mode
(ALGORITHMS.md 4.5; bench/multigoal.py: 1 of 4 MultiGoal goals). ``brownian_coef`` > 0 adds
PolicyFlow's Brownian regularizer (flow_core.brownian_regularizer) on FPO's own velocity field, at
the flow-matching points x_t that the ratio already evaluates, against a frozen snapshot of the
rollout network. It is off by default (FPO's recipe); genpol's extension, measured in bench/multigoal.py.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, List

import torch

from genpol.errors import require
from genpol.heads.base import PolicyHead, RatioTerms, Record
from genpol.heads.flow_core import (FlowConfig, VelocityNetwork, VelocitySnapshot, brownian_regularizer, flow_matching_error,
                                   flow_matching_loss, integrate, velocity_at_interpolants)

LOG_RATIO_CLAMP = 3.0  # FPO's per-sample mode clamps each loss difference to [-3, 3]
LOG_RATIO_CLAMPS = ("hard", "straight_through", "none")


@dataclass
class FPOConfig(FlowConfig):
    """FPO: flow policy with the flow-matching-loss ratio (defaults: FPO's playground settings)."""

    family: str = "fpo"
    """Head family; selects the head class."""
    n_mc: int = 8
    """(t, noise) pairs drawn per action."""
    ratio_mode: str = "average"
    """``average`` (FPO: one ratio from averaged losses) or ``per_sample`` (FPO++: one per pair)."""
    log_ratio_clamp: str = "hard"
    """``per_sample`` only: how each log r_i is held to [-3, 3]. ``hard`` (FPO's per-sample code: zero gradient
    beyond), ``straight_through`` (FPO++'s ``clamp_ste``: the clamped value with the identity's gradient) or
    ``none`` (FPO++'s default, ``clamp_logratio=None``)."""
    t_sampling: str = "grid"
    """``grid`` (t on the sampler's grid) or ``uniform``."""
    loss_weighting: str = "eps"
    """``eps`` (FPO's u_but_supervise_as_eps, weight t^2) or ``velocity`` (unweighted)."""
    brownian_coef: float = 0.0
    """Weight of PolicyFlow's Brownian regularizer on FPO's velocity field (0: off, as in FPO; it
    counters mode collapse; 0.1 with FPO++'s per-sample ratio and ASPO keeps 3-4 MultiGoal goals)."""
    brownian_beta: float = 1.0
    """Temperature beta of the Brownian regularizer."""
    critic_hidden_sizes: List[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer widths of the value network."""
    critic_activation: str = "silu"
    """Activation of the value network."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.n_mc >= 1, "policy.n_mc", ">= 1", self.n_mc)
        require(self.ratio_mode in ("average", "per_sample"), "policy.ratio_mode", "average or per_sample",
                 self.ratio_mode)
        require(self.log_ratio_clamp in LOG_RATIO_CLAMPS, "policy.log_ratio_clamp", "hard, straight_through or none",
                self.log_ratio_clamp)
        require(self.ratio_mode == "per_sample" or self.log_ratio_clamp == "hard", "policy.log_ratio_clamp",
                "hard (the default) with ratio_mode=average, which does not clamp", self.log_ratio_clamp)
        require(self.t_sampling in ("grid", "uniform"), "policy.t_sampling", "grid or uniform", self.t_sampling)
        require(self.brownian_coef >= 0, "policy.brownian_coef", ">= 0", self.brownian_coef)
        require(self.brownian_beta > 0, "policy.brownian_beta", "> 0", self.brownian_beta)
        require(self.loss_weighting in ("eps", "velocity"), "policy.loss_weighting", "eps or velocity",
                 self.loss_weighting)


class FPOHead(VelocitySnapshot, PolicyHead):
    """Flow Policy Optimization head; hyperparameters: ``FPOConfig`` (FPO's playground: a 4 x 32 SiLU
    velocity network with output x 0.25, 10 Euler steps, 8 pairs per action; FPO++ manipulation: 16).
    ``t_sampling="grid"`` draws t from the sampler's grid {0, 0.1, ..., 0.9} (FPO's
    ``discretize_t_for_training``); ``loss_weighting="eps"`` is FPO's ``u_but_supervise_as_eps``, the
    velocity error times t^2, i.e. the error of the implied noise prediction."""

    family = "fpo"
    Config = FPOConfig
    has_exact_kl = False
    has_entropy = False

    def __init__(self, obs_dim: int, act_dim: int, config: FPOConfig | None = None, **hyperparameters: Any):
        super().__init__(obs_dim, act_dim, config, **hyperparameters)
        c = self.config
        self.velocity = VelocityNetwork(obs_dim, act_dim, c.hidden_sizes, c.activation, c.time_embed_dim, c.output_scale,
                                        c.time_embedding)
        self.integration_steps = c.integration_steps
        self.integrator = c.integrator
        self.n_mc = c.n_mc
        self.ratio_mode = c.ratio_mode
        self.log_ratio_clamp = c.log_ratio_clamp
        self.t_sampling = c.t_sampling
        self.loss_weighting = c.loss_weighting
        self.brownian_coef = c.brownian_coef
        self.brownian_beta = c.brownian_beta
        self.init_snapshot()

    def generate(self, obs: torch.Tensor, x0: torch.Tensor) -> torch.Tensor:
        """Push ``x0 [B, A]`` through the flow conditioned on ``obs [B, D]``: the action ``[B, A]``."""
        return integrate(lambda x, t: self.velocity(obs, x, t), x0, self.integration_steps, self.integrator)

    def _draw_times(self, batch: int, device: torch.device) -> torch.Tensor:
        if self.t_sampling == "grid":
            index = torch.randint(0, self.integration_steps, (batch, self.n_mc), device=device)
            return index.float() / self.integration_steps
        return torch.rand(batch, self.n_mc, device=device)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, Record]:
        """The record: ``action [B, A]``, the pairs ``t [B, N]``, ``noise [B, N, A]``, their embedding
        ``t_embed [B, N, E]`` (stored so that no minibatch step recomputes it) and ``cfm_loss [B, N]``."""
        action = self.generate(obs, torch.randn(obs.shape[0], self.act_dim, device=obs.device))
        t = self._draw_times(obs.shape[0], obs.device)
        noise = torch.randn(obs.shape[0], self.n_mc, self.act_dim, device=obs.device)
        t_embed = self.velocity.time_embedding(t)
        loss = flow_matching_loss(self.velocity, obs, action, t, noise, self.loss_weighting, t_embed)
        return action, {"action": action, "t": t, "noise": noise, "t_embed": t_embed, "cfm_loss": loss}

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """Deterministic: FPO++'s zero sampling (x0 = 0). Otherwise x0 ~ N(0, I)."""
        x0 = torch.zeros(obs.shape[0], self.act_dim, device=obs.device)
        return self.generate(obs, x0 if deterministic else torch.randn_like(x0))

    def log_ratio(self, obs: torch.Tensor, record: Record) -> RatioTerms:
        action, t, noise = record["action"], record["t"], record["noise"]
        t_embed = record.get("t_embed")  # None in a record written without it: computed from t
        x_t, v_new = velocity_at_interpolants(self.velocity, obs, action, t, noise, t_embed)
        loss = flow_matching_error(v_new, action, t, noise, self.loss_weighting)
        if self.ratio_mode == "average":
            log_ratio = (record["cfm_loss"].mean(dim=1) - loss.mean(dim=1)).unsqueeze(-1)
        else:
            log_ratio = record["cfm_loss"] - loss
            if self.log_ratio_clamp == "hard":
                log_ratio = log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP)
            elif self.log_ratio_clamp == "straight_through":
                log_ratio = log_ratio + (log_ratio.clamp(-LOG_RATIO_CLAMP, LOG_RATIO_CLAMP) - log_ratio).detach()
        diagnostics = {"cfm_loss": loss.detach().mean()}
        aux_loss = None
        if self.brownian_coef > 0:
            with torch.no_grad():
                _, v_old = velocity_at_interpolants(self.snapshot, obs, action, t, noise, t_embed)
            brownian = brownian_regularizer(v_new, v_old, x_t, t, self.brownian_beta)
            aux_loss, diagnostics["brownian"] = self.brownian_coef * brownian, brownian.detach()
        return RatioTerms(log_ratio=log_ratio, aux_loss=aux_loss, diagnostics=diagnostics)

    def imitation_loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Conditional flow matching on expert actions, t ~ U[0, 1), unweighted."""
        t = torch.rand(obs.shape[0], 1, device=obs.device)
        noise = torch.randn(obs.shape[0], 1, self.act_dim, device=obs.device)
        return flow_matching_loss(self.velocity, obs, actions, t, noise, "velocity").mean()
