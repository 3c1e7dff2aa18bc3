"""Energy-based normalizing flow (MEow, Chao et al., NeurIPS 2024; ALGORITHMS.md 14b): one flow that is
both the policy and the soft critic.

Generation direction (acting), conditioned on the observation s:

    z   = sigma(s) * xi,  xi ~ N(0, I)        (zero-mean base; log sigma squashed into [sigma_min, sigma_max])
    u   = c_K o ... o c_1(z)                   (additive couplings, NICE: c(x) = x + (1 - m) * t([m * x, s]))
    a   = tanh(u)

Density direction (a given action): a is clipped to +-(1 - action_clip), u = atanh(a), the couplings are
undone in reverse order, z = u - sum of shifts. Additive couplings have log-det 0, so the density splits
into a part that depends on the action and a part that depends on the state only (the EBFlow split):

    q(s, a) = -1/2 ||z / sigma(s)||^2 - sum_i log(1 - a_i^2 + eps)          (action-dependent)
    v(s)    =  A/2 log(2 pi) + sum_i log sigma_i(s)                         (state-only normaliser)
    log pi(a | s) = q(s, a) - v(s)

With the learnable state shifts b_j(s) (MEow's "LRS", one per value head j), the soft values are

    Q_j(s, a) = alpha * (q(s, a) + b_j(s)),   V_j(s) = alpha * (v(s) + b_j(s)),

so ``alpha log pi = Q_j - V_j`` exactly and ``V_j = alpha log int exp(Q_j / alpha) da`` by construction
(tests/test_meow.py checks both, the second by quadrature), for ``log_prob_epsilon=0`` and a negligible
``action_clip``. With the authors' epsilon and clip (the defaults), the density is clipped at |u| =
atanh(1 - action_clip) = 6.1: where the policy's own samples pass it, V exceeds the log-partition (by 2.4
nats at a pre-tanh mean of 7 in one dimension, measured by quadrature), an optimism the authors' code shares.
``learner=meow`` regresses Q_j on a TD target; the head is also a plain exact-likelihood policy (SAC, the
on-policy learners and BC can train it, the shifts then stay unused).

Networks as the authors' ``init_Flow``: every network is an MLP whose hidden layers are
``Linear -> [LayerNorm] -> Swish with a learnable per-unit beta -> [dropout]``. The coupling networks use
LayerNorm, dropout and orthogonal weights; the base's log-sigma network and the shift networks zero
weights (PyTorch's default biases), so at the start sigma and the shifts are nearly constant in s.

Dropout is explicit, not a module mode: only ``soft_q_and_v`` with ``dropout_masks`` applies it (MEow's
loss pass, in train mode on their side); acting, the target's values and every log-prob run without it,
as theirs run in eval mode. The masks come from the caller (``dropout_masks``), so a learner draws them
from its own generator (a bit-identical resume) and the parity harness can feed both sides the same.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field
from typing import Any, List, Optional

import torch
from torch import nn

from genpol.errors import require
from genpol.heads.base import Capability, HeadConfig, PolicyHead, RatioTerms, Record
from genpol.heads.tanh_gaussian import tanh_log_abs_det_jacobian
from genpol.onednn import OneDNNLinear

FLOAT32_EPS = float(torch.finfo(torch.float32).eps)  # the authors' eps inside log(1 - a^2 + eps), any dtype


class LearnableSwish(nn.Module):
    """``x * sigmoid(beta * x)`` with one learnable ``beta`` per unit (starting at 1): ``[B, width] -> [B, width]``."""

    def __init__(self, width: int):
        super().__init__()
        self.beta = nn.Parameter(torch.ones(width))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.sigmoid(self.beta * x)


class SwishMLP(nn.Module):
    """``in_dim -> hidden_sizes -> out_dim``; each hidden layer is Linear, optional LayerNorm, learnable Swish
    and, when masks are given, dropout. ``weight_init``: ``orthogonal`` (gain 1) or ``zero`` weights; biases
    keep PyTorch's default either way (as the authors' networks)."""

    def __init__(self, in_dim: int, hidden_sizes: List[int], out_dim: int, layer_norm: bool, weight_init: str):
        super().__init__()
        sizes = [in_dim, *hidden_sizes]
        self.hidden = nn.ModuleList(OneDNNLinear(fan_in, fan_out) for fan_in, fan_out in zip(sizes[:-1], sizes[1:]))
        self.norms = nn.ModuleList(nn.LayerNorm(width) if layer_norm else nn.Identity() for width in hidden_sizes)
        self.activations = nn.ModuleList(LearnableSwish(width) for width in hidden_sizes)
        self.output = OneDNNLinear(sizes[-1], out_dim)
        for linear in [*self.hidden, self.output]:
            if weight_init == "orthogonal":
                nn.init.orthogonal_(linear.weight)
            else:
                nn.init.zeros_(linear.weight)

    @property
    def widths(self) -> List[int]:
        return [linear.out_features for linear in self.hidden]

    def forward(self, x: torch.Tensor, dropout_masks: Optional[List[torch.Tensor]] = None) -> torch.Tensor:
        """``x [B, in_dim] -> [B, out_dim]``; ``dropout_masks``: one ``[B, width]`` multiplier per hidden layer
        (0 or 1 / (1 - p)), or None for no dropout."""
        for k, (linear, norm, activation) in enumerate(zip(self.hidden, self.norms, self.activations)):
            x = activation(norm(linear(x)))
            if dropout_masks is not None:
                x = x * dropout_masks[k]
        return self.output(x)


class AdditiveCoupling(nn.Module):
    """``x -> x + (1 - m) * t([m * x, s])``: keeps the dimensions where ``mask`` m is 1; log-det 0."""

    def __init__(self, mask: torch.Tensor, net: SwishMLP):
        super().__init__()
        self.register_buffer("mask", mask, persistent=False)
        self.net = net

    def shift(self, x: torch.Tensor, obs: torch.Tensor, dropout_masks: Optional[List[torch.Tensor]]) -> torch.Tensor:
        """``[B, A]``, zero on the kept dimensions (the network sees only those, and the state)."""
        return (1 - self.mask) * self.net(torch.cat([self.mask * x, obs], dim=-1), dropout_masks)

    def forward(self, x: torch.Tensor, obs: torch.Tensor) -> torch.Tensor:
        return x + self.shift(x, obs, None)

    def inverse(self, y: torch.Tensor, obs: torch.Tensor,
                dropout_masks: Optional[List[torch.Tensor]] = None) -> torch.Tensor:
        # the kept dimensions of y are x's, so the network sees what the forward pass saw
        return y - self.shift(y, obs, dropout_masks)


@dataclass
class EnergyFlowConfig(HeadConfig):
    """MEow's energy-based flow (``policy=energy_flow``): zero-mean base with a squashed state-dependent
    sigma, additive couplings, tanh, and learnable state shifts; its likelihood gives soft Q and V
    (``learner=meow``). Defaults: the authors' ``init_Flow`` and MuJoCo ``Args``."""

    family: str = "energy_flow"
    """Head family; selects the head class."""
    base_hidden_sizes: List[int] = field(default_factory=lambda: [64, 64])
    """Hidden widths of the base's log-sigma network (on s; zero weights at the start)."""
    coupling_layers: int = 4
    """K additive couplings, masks alternating 1010... and 0101... (the authors: 2 pairs)."""
    coupling_hidden_sizes: List[int] = field(default_factory=lambda: [64, 64])
    """Hidden widths of each coupling's shift network t([m x, s]) (orthogonal weights)."""
    coupling_layer_norm: bool = True
    """LayerNorm after each hidden layer of the coupling networks (the authors')."""
    coupling_dropout: float = 0.1
    """Dropout after each hidden layer of the coupling networks, in MEow's loss pass only (the authors' 0.1)."""
    value_shifts: int = 2
    """Learnable state shifts b_j(s), one per soft-value head (2: the authors' clipped double-Q, SCDQ)."""
    shift_hidden_sizes: List[int] = field(default_factory=lambda: [256, 256])
    """Hidden widths of each shift network (on s; zero weights at the start)."""
    log_sigma_min: float = -5.0
    """Lower end of the base's log sigma (the authors' sigma_min on MuJoCo; MultiGoal -2)."""
    log_sigma_max: float = -0.3
    """Upper end of the base's log sigma (the authors' sigma_max: -0.3; HalfCheetah 2.0, MultiGoal 1.0)."""
    log_prob_epsilon: float = FLOAT32_EPS
    """eps in log(1 - a^2 + eps) (the authors': float32's machine epsilon, in every dtype)."""
    action_clip: float = 1e-5
    """Actions are clipped to +-(1 - action_clip) before atanh in the density direction (the authors')."""

    def __post_init__(self) -> None:
        super().__post_init__()
        for key in ("base_hidden_sizes", "coupling_hidden_sizes", "shift_hidden_sizes"):
            sizes = getattr(self, key)
            require(len(sizes) >= 1 and all(w >= 1 for w in sizes), f"policy.{key}", "non-empty positive widths", sizes)
        require(self.coupling_layers >= 0, "policy.coupling_layers", ">= 0", self.coupling_layers)
        require(0.0 <= self.coupling_dropout < 1.0, "policy.coupling_dropout", "in [0, 1)", self.coupling_dropout)
        require(self.value_shifts >= 1, "policy.value_shifts", ">= 1", self.value_shifts)
        require(self.log_sigma_min < self.log_sigma_max, "policy.log_sigma_min", f"< log_sigma_max ({self.log_sigma_max})",
                self.log_sigma_min)
        require(self.log_prob_epsilon >= 0, "policy.log_prob_epsilon", ">= 0", self.log_prob_epsilon)
        require(0.0 < self.action_clip < 1.0, "policy.action_clip", "in (0, 1)", self.action_clip)


class EnergyFlowHead(PolicyHead):
    """MEow's flow; hyperparameters: ``EnergyFlowConfig``. See the module docstring.

    Record: ``pre_tanh [B, A]`` (u), ``noise [B, A]`` (xi), ``flow_log_prob [B]`` (log p(u), what
    ``log_ratio`` subtracts) and ``log_prob [B]`` (log pi(a)). ``log_ratio`` is ``[B, 1]``.
    """

    family = "energy_flow"
    Config = EnergyFlowConfig
    capabilities = frozenset({Capability.ON_POLICY_RATIO, Capability.IMITATION, Capability.REPARAMETERIZED,
                              Capability.LOG_PROB, Capability.CANDIDATES, Capability.SOFT_VALUE})
    has_exact_kl = False
    has_entropy = True  # a reparameterized one-sample estimate, as the normalizing_flow head's

    def __init__(self, obs_dim: int, act_dim: int, config: EnergyFlowConfig | None = None, **hyperparameters: Any):
        super().__init__(obs_dim, act_dim, config, **hyperparameters)
        c = self.config
        self.base_log_sigma = SwishMLP(obs_dim, c.base_hidden_sizes, act_dim, layer_norm=False, weight_init="zero")
        kept_first = (torch.arange(act_dim) % 2 == 0).float()  # 1010...: the authors' first mask
        self.couplings = nn.ModuleList(
            AdditiveCoupling(kept_first if k % 2 == 0 else 1 - kept_first,
                             SwishMLP(act_dim + obs_dim, c.coupling_hidden_sizes, act_dim, c.coupling_layer_norm,
                                      weight_init="orthogonal"))
            for k in range(c.coupling_layers))
        self.shifts = nn.ModuleList(SwishMLP(obs_dim, c.shift_hidden_sizes, 1, layer_norm=False, weight_init="zero")
                                    for _ in range(c.value_shifts))

    # ------------------------------------------------------------------ the flow and its density split
    def log_sigma(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs [B, D] -> log sigma [B, A]`` in [log_sigma_min, log_sigma_max] (a tanh squash, not a clamp)."""
        c = self.config
        return c.log_sigma_min + 0.5 * (c.log_sigma_max - c.log_sigma_min) * (torch.tanh(self.base_log_sigma(obs)) + 1)

    def flow(self, obs: torch.Tensor, z: torch.Tensor) -> torch.Tensor:
        """``z [B, A] -> u [B, A]`` through the couplings (volume preserving)."""
        for coupling in self.couplings:
            z = coupling(z, obs)
        return z

    def flow_inverse(self, obs: torch.Tensor, pre_tanh: torch.Tensor,
                     dropout_masks: Optional[List[List[torch.Tensor]]] = None) -> torch.Tensor:
        """``u [B, A] -> z [B, A]``; ``dropout_masks[k]``: coupling k's masks (``draw_dropout_masks``)."""
        z = pre_tanh
        for k in reversed(range(len(self.couplings))):
            z = self.couplings[k].inverse(z, obs, None if dropout_masks is None else dropout_masks[k])
        return z

    def density_terms(self, obs: torch.Tensor, actions: torch.Tensor,
                      dropout_masks: Optional[List[List[torch.Tensor]]] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(q [B], v [B])`` of actions ``[B, A]`` in [-1, 1]: log pi(a|s) = q - v, q depends on a, v on s
        only (module docstring); no shift, no alpha."""
        c = self.config
        # below the dtype's resolution near 1 (float32: action_clip < 3e-8) 1 - action_clip rounds to 1, and a
        # replayed or min-max scaled action at exactly +-1 gave atanh = inf and NaN losses: the largest value below 1
        bound = min(1.0 - c.action_clip, 1.0 - torch.finfo(actions.dtype).eps / 2)
        clipped = actions.clamp(-bound, bound)
        log_sigma = self.log_sigma(obs)
        z = self.flow_inverse(obs, torch.atanh(clipped), dropout_masks)
        q = -0.5 * (z / log_sigma.exp()).square().sum(dim=-1) - torch.log(1 - clipped.square()
                                                                           + c.log_prob_epsilon).sum(dim=-1)
        v = 0.5 * self.act_dim * math.log(2 * math.pi) + log_sigma.sum(dim=-1)
        return q, v

    def value_shift(self, obs: torch.Tensor) -> torch.Tensor:
        """``b_j(s)``: ``obs [B, D] -> [E, B]``, E = value_shifts."""
        return torch.stack([shift(obs).squeeze(-1) for shift in self.shifts])

    def soft_q_and_v(self, obs: torch.Tensor, actions: torch.Tensor, alpha: float | torch.Tensor,
                     dropout_masks: Optional[List[List[torch.Tensor]]] = None) -> tuple[torch.Tensor, torch.Tensor]:
        """``(Q [E, B], V [E, B])``: ``Q_j = alpha (q + b_j)``, ``V_j = alpha (v + b_j)`` (``SOFT_VALUE``).

        With ``dropout_masks`` (``draw_dropout_masks(B)``: E B rows, head j's rows j B .. (j + 1) B - 1) each
        head's q takes its own pass through the couplings with its own masks, as the authors' one pass over the
        doubled batch [s; s] does; without dropout one pass serves every head (the values are the same)."""
        shift = self.value_shift(obs)
        heads, batch = shift.shape
        if dropout_masks is None:
            q, v = self.density_terms(obs, actions)
            q, v = q.expand(heads, batch), v.expand(heads, batch)
        else:
            q, v = self.density_terms(obs.repeat(heads, 1), actions.repeat(heads, 1), dropout_masks)
            q, v = q.view(heads, batch), v.view(heads, batch)
        return alpha * (q + shift), alpha * (v + shift)

    def soft_value(self, obs: torch.Tensor, alpha: float | torch.Tensor) -> torch.Tensor:
        """``V [E, B]`` without an action (V depends on s only; the couplings do not run)."""
        v = 0.5 * self.act_dim * math.log(2 * math.pi) + self.log_sigma(obs).sum(dim=-1)
        return alpha * (v + self.value_shift(obs))

    def draw_dropout_masks(self, batch_size: int, generator: torch.Generator | None = None,
                           dtype: torch.dtype = torch.float32) -> Optional[List[List[torch.Tensor]]]:
        """Inverted-dropout masks for ``soft_q_and_v`` on ``batch_size`` rows: ``masks[k][l]`` is
        ``[E B, width_l]`` (one pass per value head) of coupling k's hidden layer l, 0 with probability p, else
        1 / (1 - p); None when p is 0. Drawn on the CPU from ``generator`` (torch's global one when None), then
        moved to the head's device."""
        p = self.config.coupling_dropout
        if p == 0:
            return None
        device = next(self.parameters()).device
        rows = self.config.value_shifts * batch_size
        masks = []
        for coupling in self.couplings:
            layers = []
            for width in coupling.net.widths:
                keep = torch.rand(rows, width, generator=generator, dtype=torch.float64) >= p
                layers.append((keep.to(dtype) / (1 - p)).to(device))
            masks.append(layers)
        return masks

    def log_prob(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """``log pi(a | s)`` of actions ``[B, A]`` in [-1, 1] -> ``[B]`` (exact, no dropout)."""
        q, v = self.density_terms(obs, actions)
        return q - v

    def _flow_log_prob(self, obs: torch.Tensor, pre_tanh: torch.Tensor) -> torch.Tensor:
        """``log p(u | s)`` ``[B]`` of pre-tanh actions, by the inverse pass."""
        log_sigma = self.log_sigma(obs)
        z = self.flow_inverse(obs, pre_tanh)
        return (-0.5 * (z / log_sigma.exp()).square() - log_sigma).sum(dim=-1) - 0.5 * self.act_dim * math.log(2 * math.pi)

    def _draw(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(xi, u, log p(u))``, reparameterized; ``log p(u) = log N(sigma xi; 0, sigma^2)`` (log-det 0)."""
        xi = torch.randn(obs.shape[0], self.act_dim, dtype=obs.dtype, device=obs.device)
        log_sigma = self.log_sigma(obs)
        pre_tanh = self.flow(obs, log_sigma.exp() * xi)
        log_p = (-0.5 * xi.square() - log_sigma).sum(dim=-1) - 0.5 * self.act_dim * math.log(2 * math.pi)
        return xi, pre_tanh, log_p

    def _tanh_term(self, pre_tanh: torch.Tensor) -> torch.Tensor:
        """``sum_i log(1 - tanh(u_i)^2 + eps)`` ``[B]`` (the generation direction's Jacobian, the authors' eps);
        at eps 0 the exact form, finite where float32's tanh rounds to +-1 (|u| > ~9), as SAC's head."""
        return tanh_log_abs_det_jacobian(pre_tanh, self.config.log_prob_epsilon)

    # ------------------------------------------------------------------ the PolicyHead interface
    def rsample(self, obs: torch.Tensor) -> torch.Tensor:
        return torch.tanh(self._draw(obs)[1])

    def rsample_log_prob(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        _, pre_tanh, log_p = self._draw(obs)
        return torch.tanh(pre_tanh), log_p - self._tanh_term(pre_tanh)

    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, Record]:
        xi, pre_tanh, _ = self._draw(obs)
        # by the inverse pass, as log_ratio computes it: the ratio must be exactly 1 before an update
        flow_log_prob = self._flow_log_prob(obs, pre_tanh)
        return torch.tanh(pre_tanh), {"pre_tanh": pre_tanh, "noise": xi, "flow_log_prob": flow_log_prob,
                                      "log_prob": flow_log_prob - self._tanh_term(pre_tanh)}

    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """Deterministic: ``tanh(f(0; s))``, the base's mode through the flow: with volume-preserving couplings
        the exact mode of u (the authors' deterministic action)."""
        if deterministic:
            return torch.tanh(self.flow(obs, torch.zeros(obs.shape[0], self.act_dim, dtype=obs.dtype,
                                                         device=obs.device)))
        return self.rsample(obs)

    def log_ratio(self, obs: torch.Tensor, record: Record) -> RatioTerms:
        flow_log_prob = self._flow_log_prob(obs, record["pre_tanh"])
        # reparameterized entropy estimate: the recorded base draw through the current flow
        xi = record["noise"]
        log_sigma = self.log_sigma(obs)
        pre_tanh_now = self.flow(obs, log_sigma.exp() * xi)
        entropy = ((0.5 * xi.square() + log_sigma).sum(dim=-1) + 0.5 * self.act_dim * math.log(2 * math.pi)
                   + self._tanh_term(pre_tanh_now))
        return RatioTerms(log_ratio=(flow_log_prob - record["flow_log_prob"]).unsqueeze(-1), entropy=entropy)

    def imitation_loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Negative log-likelihood of expert ``actions [B, A]``, batch mean (exact)."""
        return -self.log_prob(obs, actions).mean()
