"""Conditional normalizing flow with exact likelihood, squashed like SAC's tanh-Gaussian.

A base draw z ~ N(0, I) in R^A goes through invertible maps conditioned on the observation s, then tanh:

    u_0 = mu(s) + sigma(s) * z                      (SAC's state-dependent affine; log sigma clamped to [-20, 2])
    u_k = c_k(u_{k-1}; s),  k = 1..K               (affine couplings, RealNVP: Dinh et al. 2017)
    a   = tanh(u_K)

Coupling k keeps the dimensions of its mask m_k (alternating 0101... and 1010...) and moves the others:
``c_k(x) = x * exp(scale) + shift`` on (1 - m_k), with ``(scale, shift) = net_k([m_k * x, s])`` and the
log-scale bounded to ``(-scale_clamp, scale_clamp)`` by ``scale_clamp * tanh(. / scale_clamp)`` (an
unbounded log-scale lets one update make exp(scale) overflow). Every map is invertible in closed form
(the kept dimensions fix the conditioner), so

    log pi(a | s) = log N(z) - sum_i log sigma_i(s) - sum_k sum_{i not in m_k} scale_k,i - sum_i log(1 - a_i^2 + eps)

is exact, for the head's own samples (``rsample_log_prob``: SAC's entropy term) and for any given action
(``log_ratio``, ``imitation_loss``: invert through atanh and the couplings). Each coupling's output
layer starts at zero, so an untrained head is exactly SAC's tanh-Gaussian; the couplings then add
dependence between action dimensions and multiple modes (ALGORITHMS.md 14; MEow, Chao et al. 2024,
uses the same exact-likelihood flow inside a max-entropy learner).

On-policy use: the record keeps the pre-tanh ``u_K`` and its flow log-density; tanh is a fixed
bijection, so ``log_ratio`` is ``log p_theta(u_K) - log p_old(u_K)`` without the tanh term, exact.
``RatioTerms.entropy`` is the one-sample reparameterized estimate ``-log pi_theta(a'(z))`` at the
recorded base draw pushed through the current flow (as the tanh-Gaussian head's; the value of
``-log pi_theta(a_old)`` would carry no useful gradient). No closed-form KL.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, List

import torch
from torch import nn

from genpol.errors import require
from genpol.heads.base import Capability, HeadConfig, PolicyHead, RatioTerms, Record, check_network
from genpol.heads.tanh_gaussian import IMITATION_ACTION_BOUND, tanh_log_abs_det_jacobian
from genpol.nets import MLP

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)


def standard_normal_log_prob(z: torch.Tensor) -> torch.Tensor:
    """``log N(z; 0, I)`` summed over the last dim: ``[B, A] -> [B]``."""
    return (-0.5 * z.square() - _HALF_LOG_2PI).sum(dim=-1)


@dataclass
class NormalizingFlowConfig(HeadConfig):
    """Conditional affine-coupling flow squashed by tanh (``policy=normalizing_flow``): exact log-likelihood
    and reparameterized samples, so SAC, RLPD, the on-policy learners and BC train it unchanged."""

    family: str = "normalizing_flow"
    """Head family; selects the head class."""
    hidden_sizes: List[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer widths of the base affine's network (mu and log sigma of u_0; SAC's actor)."""
    activation: str = "relu"
    """Activation of every network of the head."""
    coupling_layers: int = 4
    """K: affine coupling layers after the base affine, masks alternating (0: the tanh-Gaussian)."""
    coupling_hidden_sizes: List[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer widths of each coupling's conditioner network."""
    scale_clamp: float = 2.0
    """Bound of each coupling's log-scale (soft, by scale_clamp * tanh(. / scale_clamp))."""
    log_std_min: float = -20.0
    """Lower clamp of the base affine's log sigma (SAC's)."""
    log_std_max: float = 2.0
    """Upper clamp of the base affine's log sigma (SAC's)."""
    log_prob_epsilon: float = 1e-6
    """eps in log(1 - tanh(u)^2 + eps) (SB3's); 0 gives the exact form."""
    init: str = "default"
    """Weights of every layer but the couplings' (zero) output layers: ``default`` (PyTorch's, as SB3) or
    ``xavier_uniform`` (RLPD's, biases zero; +experiment=rlpd sets it)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        check_network("coupling_hidden_sizes", self.coupling_hidden_sizes, "activation", self.activation)
        require(self.coupling_layers >= 0, "policy.coupling_layers", ">= 0", self.coupling_layers)
        require(self.scale_clamp > 0, "policy.scale_clamp", "> 0", self.scale_clamp)
        require(self.log_std_min < self.log_std_max, "policy.log_std_min", f"< log_std_max ({self.log_std_max})",
                self.log_std_min)
        require(self.log_prob_epsilon >= 0, "policy.log_prob_epsilon", ">= 0", self.log_prob_epsilon)
        require(self.init in ("default", "xavier_uniform"), "policy.init", "default or xavier_uniform", self.init)


class AffineCoupling(nn.Module):
    """One conditional affine coupling: keeps the dimensions where ``mask`` is 1, moves the others.
    Its conditioner's output layer is zero at initialization (the identity map)."""

    def __init__(self, act_dim: int, obs_dim: int, mask: torch.Tensor, hidden_sizes: List[int], activation: str,
                 scale_clamp: float):
        super().__init__()
        self.scale_clamp = scale_clamp
        self.register_buffer("mask", mask, persistent=False)
        self.net = MLP(act_dim + obs_dim, hidden_sizes, 2 * act_dim, activation, orthogonal_init=False)
        nn.init.zeros_(self.output.weight)
        nn.init.zeros_(self.output.bias)

    @property
    def output(self) -> nn.Linear:
        """The conditioner's output layer (zero at initialization)."""
        return [module for module in self.net.modules() if isinstance(module, nn.Linear)][-1]

    def parameters_of(self, x: torch.Tensor, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``(log_scale, shift)``, ``[B, A]`` each, zero on the kept dimensions."""
        raw_scale, shift = self.net(torch.cat([x * self.mask, obs], dim=-1)).chunk(2, dim=-1)
        moved = 1.0 - self.mask
        return self.scale_clamp * torch.tanh(raw_scale / self.scale_clamp) * moved, shift * moved

    def forward(self, x: torch.Tensor, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``x [B, A] -> (y [B, A], log|det dy/dx| [B])``."""
        log_scale, shift = self.parameters_of(x, obs)
        return x * log_scale.exp() + shift, log_scale.sum(dim=-1)

    def inverse(self, y: torch.Tensor, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``y [B, A] -> (x [B, A], log|det dy/dx| [B])``: the kept dimensions of y are x's, so the
        conditioner sees what the forward pass saw."""
        log_scale, shift = self.parameters_of(y, obs)
        return (y - shift) * (-log_scale).exp(), log_scale.sum(dim=-1)


class NormalizingFlowHead(PolicyHead):
    """``a = tanh(c_K o ... o c_1(mu(s) + sigma(s) z))``, ``z ~ N(0, I)``; hyperparameters:
    ``NormalizingFlowConfig``. See the module docstring.

    Record: ``pre_tanh [B, A]`` (u_K), ``noise [B, A]`` (z), ``flow_log_prob [B]`` (log p(u_K), what
    ``log_ratio`` subtracts) and ``log_prob [B]`` (log pi(a), with the tanh Jacobian). ``log_ratio``
    is ``[B, 1]``.
    """

    family = "normalizing_flow"
    Config = NormalizingFlowConfig
    capabilities = frozenset({Capability.ON_POLICY_RATIO, Capability.IMITATION, Capability.REPARAMETERIZED,
                              Capability.LOG_PROB, Capability.CANDIDATES})
    has_exact_kl = False
    has_entropy = True  # a reparameterized one-sample estimate, see the module docstring

    def __init__(self, obs_dim: int, act_dim: int, config: NormalizingFlowConfig | None = None,
                 **hyperparameters: Any):
        super().__init__(obs_dim, act_dim, config, **hyperparameters)
        c = self.config
        self.base = MLP(obs_dim, c.hidden_sizes, 2 * act_dim, c.activation, orthogonal_init=False)
        dims = torch.arange(act_dim)
        self.couplings = nn.ModuleList(
            AffineCoupling(act_dim, obs_dim, ((dims + k) % 2 == 1).float(), c.coupling_hidden_sizes, c.activation,
                           c.scale_clamp)
            for k in range(c.coupling_layers))
        if c.init == "xavier_uniform":
            zero_outputs = {id(coupling.output) for coupling in self.couplings}
            for module in self.modules():
                if isinstance(module, nn.Linear) and id(module) not in zero_outputs:
                    nn.init.xavier_uniform_(module.weight)
                    nn.init.zeros_(module.bias)

    # ------------------------------------------------------------------ the flow and its inverse
    def base_affine(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs [B, D]`` -> ``(mu [B, A], log sigma [B, A])`` of u_0, log sigma clamped."""
        mean, log_std = self.base(obs).chunk(2, dim=-1)
        return mean, log_std.clamp(self.config.log_std_min, self.config.log_std_max)

    def flow(self, obs: torch.Tensor, z: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``z [B, A]`` -> ``(u_K [B, A], log|det du_K/dz| [B])``, differentiable."""
        mean, log_std = self.base_affine(obs)
        u, log_det = mean + log_std.exp() * z, log_std.sum(dim=-1)
        for coupling in self.couplings:
            u, step = coupling(u, obs)
            log_det = log_det + step
        return u, log_det

    def flow_log_prob(self, obs: torch.Tensor, pre_tanh: torch.Tensor) -> torch.Tensor:
        """``log p_theta(u_K | s)`` of given pre-tanh actions ``[B, A]`` -> ``[B]``, by the exact inverse."""
        u, log_det = pre_tanh, torch.zeros(pre_tanh.shape[0], dtype=pre_tanh.dtype, device=pre_tanh.device)
        for coupling in reversed(self.couplings):
            u, step = coupling.inverse(u, obs)
            log_det = log_det + step
        mean, log_std = self.base_affine(obs)
        z = (u - mean) * (-log_std).exp()
        return standard_normal_log_prob(z) - log_det - log_std.sum(dim=-1)

    def log_prob(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``log pi(a | s)`` of actions in [-1, 1] (clipped to +-(1 - 1e-6) before atanh): ``[B]``."""
        pre_tanh = torch.atanh(actions.clamp(-IMITATION_ACTION_BOUND, IMITATION_ACTION_BOUND))
        return self.flow_log_prob(obs, pre_tanh) - tanh_log_abs_det_jacobian(pre_tanh, self.config.log_prob_epsilon)

    def _draw(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(z, u_K, log p(u_K))``, reparameterized."""
        z = torch.randn(obs.shape[0], self.act_dim, dtype=obs.dtype, device=obs.device)
        pre_tanh, log_det = self.flow(obs, z)
        return z, pre_tanh, standard_normal_log_prob(z) - log_det

    # ------------------------------------------------------------------ the PolicyHead interface
    def rsample(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self._draw(obs)[1])

    def rsample_log_prob(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, pre_tanh, flow_log_prob = self._draw(obs)
        return torch.tanh(pre_tanh), flow_log_prob - tanh_log_abs_det_jacobian(pre_tanh, self.config.log_prob_epsilon)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, Record]:
        z, pre_tanh, _ = self._draw(obs)
        # the density by the inverse pass, as log_ratio computes it: the forward pass's equals it to
        # rounding only, and the ratio must be exactly 1 before an update (the head contract)
        flow_log_prob = self.flow_log_prob(obs, pre_tanh)
        log_prob = flow_log_prob - tanh_log_abs_det_jacobian(pre_tanh, self.config.log_prob_epsilon)
        return torch.tanh(pre_tanh), {"pre_tanh": pre_tanh, "noise": z, "flow_log_prob": flow_log_prob,
                                      "log_prob": log_prob}

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """Deterministic: the flow of z = 0 (the base affine's mean, then the couplings), squashed."""
        if deterministic:
            return torch.tanh(self.flow(obs, torch.zeros(obs.shape[0], self.act_dim, dtype=obs.dtype,
                                                         device=obs.device))[0])
        return self.rsample(obs)

    def log_ratio(self, obs: torch.Tensor, record: Record) -> RatioTerms:
        flow_log_prob = self.flow_log_prob(obs, record["pre_tanh"])
        # reparameterized entropy estimate: the recorded base draw through the current flow
        pre_tanh_now, log_det = self.flow(obs, record["noise"])
        entropy = (-standard_normal_log_prob(record["noise"]) + log_det
                   + tanh_log_abs_det_jacobian(pre_tanh_now, self.config.log_prob_epsilon))
        return RatioTerms(log_ratio=(flow_log_prob - record["flow_log_prob"]).unsqueeze(-1), entropy=entropy)

    def imitation_loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Negative log-likelihood of expert ``actions [B, A]``, batch mean (exact)."""
        return -self.log_prob(obs, actions).mean()
