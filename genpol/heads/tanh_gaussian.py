"""Squashed (tanh) Gaussian policy: the actor of SAC (stable-baselines3) and RLPD.

An MLP latent, then linear ``mu`` and linear ``log_std`` heads (both state-dependent); log_std is
clamped to ``[log_std_min, log_std_max]`` = [-20, 2]; ``u ~ N(mu, sigma)``, ``a = tanh(u)``, and

    log pi(a) = sum_i log N(u_i; mu_i, sigma_i) - sum_i log(1 - tanh(u_i)^2 + eps).

``log_prob_epsilon`` is stable-baselines3's eps = 1e-6 by default; 0 selects the exact form
``log(1 - tanh(u)^2) = 2 (log 2 - u - softplus(-2u))`` of RLPD / tfp / torch's ``TanhTransform``,
which stays finite for any u. The deterministic action is ``tanh(mu)``.

The module names and layout are stable-baselines3's ``sac.policies.Actor`` (``latent_pi`` = Linear,
act, Linear, act; ``mu``; ``log_std``), so an SB3 actor's state dict loads unchanged
(``load_sb3_actor``). Initialization is PyTorch's default, as SB3's SAC; ``init="xavier_uniform"``
gives RLPD's (xavier-uniform weights, zero biases).

On-policy use: ``sample`` records the pre-tanh ``u``, the standard-normal ``noise`` that drew it,
and log-probs. Because tanh is a fixed bijection, its Jacobian cancels in the ratio, so
``log_ratio = log N_theta(u) - log N_old(u)`` is the exact ``log pi_theta(a) - log pi_old(a)``,
computed without the Jacobian's rounding. The tanh Gaussian has no closed-form entropy or KL
(``has_exact_kl`` False; TRPO uses the sample estimate). ``RatioTerms.entropy`` is a one-sample
*reparameterized* estimate: the Gaussian entropy in closed form plus ``E[log |d tanh / du|]`` at
``u' = mu_theta + sigma_theta * noise``. The plain ``-log pi_theta(a_old)`` of the stored sample
would be an unbiased value but a useless bonus: its gradient is minus the score, zero in
expectation at the sampling parameters.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, List

import torch
import torch.nn.functional as F
from torch import nn

from genpol.errors import require
from genpol.heads.base import Capability, HeadConfig, PolicyHead, RatioTerms, Record
from genpol.heads.gaussian import diagonal_gaussian_log_prob
from genpol.nets import activation_class
from genpol.onednn import OneDNNLinear

_HALF_LOG_2PI = 0.5 * math.log(2 * math.pi)
_LOG_2 = math.log(2.0)
IMITATION_ACTION_BOUND = 1.0 - 1e-6  # expert actions are clipped to +-this before atanh


def tanh_log_abs_det_jacobian(pre_tanh: torch.Tensor, epsilon: float) -> torch.Tensor:
    """``sum_i log(1 - tanh(u_i)^2 + epsilon)``: ``pre_tanh u [B, A] -> [B]``.

    ``epsilon > 0`` is stable-baselines3's form (computed on ``tanh(u)`` as SB3 does);
    ``epsilon == 0`` the exact ``2 (log 2 - u - softplus(-2u))``, finite for any u."""
    if epsilon > 0:
        per_dim = torch.log(1 - torch.tanh(pre_tanh).square() + epsilon)
    else:
        per_dim = 2 * (_LOG_2 - pre_tanh - F.softplus(-2 * pre_tanh))
    return per_dim.sum(dim=-1)


def tanh_gaussian_log_prob(
    pre_tanh: torch.Tensor, mean: torch.Tensor, log_std: torch.Tensor, epsilon: float
) -> torch.Tensor:
    """``log pi(tanh(u))`` for ``u ~ N(mean, exp(log_std)^2)``: ``[B, A]`` inputs -> ``[B]``."""
    return diagonal_gaussian_log_prob(pre_tanh, mean, log_std) - tanh_log_abs_det_jacobian(pre_tanh, epsilon)


@dataclass
class TanhGaussianConfig(HeadConfig):
    """Squashed Gaussian head (SAC's actor: state-dependent log-std, a = tanh(u)), ``policy=tanh_gaussian``.
    Its critic fields size a value network for on-policy learners; SAC's Q-critics are sized in the
    learner group."""

    family: str = "tanh_gaussian"
    """Head family; selects the head class."""
    hidden_sizes: List[int] = field(default_factory=lambda: [256, 256])
    """Hidden layer widths of the actor (SB3's net_arch; an activation after every one)."""
    activation: str = "relu"
    """Activation of the actor (SB3: ReLU)."""
    log_std_min: float = -20.0
    """Lower clamp of the state-dependent log-std (SB3 and RLPD: -20)."""
    log_std_max: float = 2.0
    """Upper clamp of the log-std (SB3 and RLPD: 2)."""
    log_std_bound: str = "clamp"
    """How the network's output x is kept in [log_std_min, log_std_max]: ``clamp`` (SB3, RLPD) or
    ``tanh``, min + (max - min) (tanh(x) + 1) / 2 (CleanRL's SAC, with bounds -5 and 2; a gradient
    everywhere)."""
    log_prob_epsilon: float = 1e-6
    """eps in log(1 - tanh(u)^2 + eps) (SB3); 0 gives the exact form (RLPD)."""
    init: str = "default"
    """``default`` (PyTorch's, as SB3) or ``xavier_uniform`` (RLPD's, biases zero)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.log_std_min < self.log_std_max, "policy.log_std_min", f"< log_std_max ({self.log_std_max})",
                self.log_std_min)
        require(self.log_std_bound in ("clamp", "tanh"), "policy.log_std_bound", "clamp or tanh", self.log_std_bound)
        require(self.log_prob_epsilon >= 0, "policy.log_prob_epsilon", ">= 0", self.log_prob_epsilon)
        require(self.init in ("default", "xavier_uniform"), "policy.init", "default or xavier_uniform", self.init)


class TanhGaussianHead(PolicyHead):
    """``a = tanh(u)``, ``u ~ N(mu_theta(s), diag(exp(log_std_theta(s)))^2)``: SAC's actor;
    hyperparameters: ``TanhGaussianConfig``.

    Record: ``pre_tanh [B, A]`` (u), ``noise [B, A]`` (the standard-normal draw), ``gaussian_log_prob
    [B]`` (log N(u), what ``log_ratio`` subtracts) and ``log_prob [B]`` (log pi(a), with the tanh
    Jacobian). ``log_ratio`` is ``[B, 1]``.
    """

    family = "tanh_gaussian"
    Config = TanhGaussianConfig
    capabilities = frozenset({Capability.ON_POLICY_RATIO, Capability.IMITATION, Capability.REPARAMETERIZED,
                              Capability.LOG_PROB, Capability.CANDIDATES})
    has_exact_kl = False
    has_entropy = True  # a reparameterized one-sample estimate, see the module docstring

    def __init__(self, obs_dim: int, act_dim: int, config: TanhGaussianConfig | None = None,
                 **hyperparameters: Any):
        super().__init__(obs_dim, act_dim, config, **hyperparameters)
        c = self.config
        self.log_std_min = c.log_std_min
        self.log_std_max = c.log_std_max
        self.log_std_bound = c.log_std_bound
        self.log_prob_epsilon = c.log_prob_epsilon
        hidden_sizes, activation, init = c.hidden_sizes, c.activation, c.init
        act = activation_class(activation)
        layers: list[nn.Module] = []
        fan_in = obs_dim
        for width in hidden_sizes:  # SB3's create_mlp(features_dim, -1, net_arch): an activation after each
            layers += [OneDNNLinear(fan_in, width), act()]  # nn.Linear, with oneDNN's GEMM where faster
            fan_in = width
        self.latent_pi = nn.Sequential(*layers)
        self.mu = nn.Linear(fan_in, act_dim)
        self.log_std = nn.Linear(fan_in, act_dim)
        if init == "xavier_uniform":
            for module in self.modules():
                if isinstance(module, nn.Linear):
                    nn.init.xavier_uniform_(module.weight)
                    nn.init.zeros_(module.bias)

    def load_sb3_actor(self, actor: nn.Module) -> None:
        """Copy the weights of a stable-baselines3 SAC ``Actor`` (``model.actor``, no gSDE): its
        ``latent_pi``, ``mu`` and ``log_std`` Linear layers map one to one onto this head's."""
        self.load_state_dict(actor.state_dict(), strict=True)

    def distribution(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs [B, D]`` -> ``(mean [B, A], log_std [B, A])`` of the pre-tanh Gaussian."""
        latent = self.latent_pi(obs)
        raw = self.log_std(latent)
        if self.log_std_bound == "tanh":
            log_std = self.log_std_min + 0.5 * (self.log_std_max - self.log_std_min) * (torch.tanh(raw) + 1)
        else:
            log_std = torch.clamp(raw, self.log_std_min, self.log_std_max)
        return self.mu(latent), log_std

    def log_prob(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``obs [B, D]``, ``actions [B, A]`` in [-1, 1] -> ``log pi(actions | obs) [B]``. Actions are
        clipped to +-(1 - 1e-6) first, so that atanh of a bound action stays finite."""
        mean, log_std = self.distribution(obs)
        pre_tanh = torch.atanh(actions.clamp(-IMITATION_ACTION_BOUND, IMITATION_ACTION_BOUND))
        return tanh_gaussian_log_prob(pre_tanh, mean, log_std, self.log_prob_epsilon)

    def _draw(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
        """``obs [B, D]`` -> ``(noise, pre_tanh, mean, log_std)``, all ``[B, A]``, reparameterized.
        One ``randn_like`` of the mean's shape: the draw of torch's ``Normal.rsample``, so a seeded
        call gives SB3's ``actor.action_log_prob`` sample."""
        mean, log_std = self.distribution(obs)
        noise = torch.randn_like(mean)
        return noise, mean + noise * torch.exp(log_std), mean, log_std

    def rsample(self, obs: torch.Tensor) -> torch.Tensor:
        _, pre_tanh, _, _ = self._draw(obs)
        return torch.tanh(pre_tanh)

    def rsample_log_prob(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, pre_tanh, mean, log_std = self._draw(obs)
        # log-prob from u, not atanh(a): exact, and it keeps the gradient path SB3 uses
        return torch.tanh(pre_tanh), tanh_gaussian_log_prob(pre_tanh, mean, log_std, self.log_prob_epsilon)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, Record]:
        noise, pre_tanh, mean, log_std = self._draw(obs)
        gaussian_log_prob = diagonal_gaussian_log_prob(pre_tanh, mean, log_std)
        log_prob = gaussian_log_prob - tanh_log_abs_det_jacobian(pre_tanh, self.log_prob_epsilon)
        record = {"pre_tanh": pre_tanh, "noise": noise, "gaussian_log_prob": gaussian_log_prob, "log_prob": log_prob}
        return torch.tanh(pre_tanh), record

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        if deterministic:
            return torch.tanh(self.distribution(obs)[0])
        return self.rsample(obs)

    def candidates(self, obs: torch.Tensor, num_candidates: int) -> torch.Tensor:
        """``obs [B, D]`` -> ``actions [B, n, A]``. The network runs once per state; the noise
        ``[B, n, A]`` is laid out as the base class's ``[B * n, A]``, so a seeded call returns the
        same candidates as ``act`` on the repeated observations."""
        mean, log_std = self.distribution(obs)
        noise = torch.randn(obs.shape[0], num_candidates, self.act_dim, dtype=mean.dtype, device=mean.device)
        return torch.tanh(mean.unsqueeze(1) + noise * torch.exp(log_std).unsqueeze(1))

    def log_ratio(self, obs: torch.Tensor, record: Record) -> RatioTerms:
        mean, log_std = self.distribution(obs)
        gaussian_log_prob = diagonal_gaussian_log_prob(record["pre_tanh"], mean, log_std)
        # reparameterized entropy estimate: the old noise pushed through the current distribution
        pre_tanh_now = mean + record["noise"] * torch.exp(log_std)
        gaussian_entropy = (log_std + 0.5 + _HALF_LOG_2PI).sum(dim=-1)
        entropy = gaussian_entropy + tanh_log_abs_det_jacobian(pre_tanh_now, self.log_prob_epsilon)
        return RatioTerms(
            log_ratio=(gaussian_log_prob - record["gaussian_log_prob"]).unsqueeze(-1),
            entropy=entropy,
            diagnostics={"std": log_std.detach().exp().mean()},
        )

    def imitation_loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Negative log-likelihood of expert ``actions [B, A]`` (clipped to +-(1 - 1e-6)), batch mean."""
        return -self.log_prob(obs, actions).mean()
