"""TRPO: one natural-gradient step per rollout, for any head that gives a log-ratio.

maximize  L(theta) = mean(A r)   subject to   mean KL(pi_old || pi_theta) <= delta

1. g = grad L at the rollout parameters (advantages normalized over the whole rollout);
2. Fisher-vector products F v = grad((grad KL) . v) + damping v, by double backpropagation;
3. s = F^-1 g by conjugate gradient;
4. the largest step along s allowed by the quadratic model: beta = sqrt(2 delta / s^T F s);
5. backtracking line search theta_old + c^j beta s, accepting the first step whose KL <= delta and
   whose surrogate improves; if none does, the parameters stay as they were;
6. then the critic trains on its own (Adam, minibatch MSE epochs).

The KL is the head's closed form where it has one (Gaussian, DPPO's per-step Gaussians,
PolicyFlow's first-order model); other heads (FPO) use the sample estimate mean((r - 1) - log r),
whose Hessian at the old parameters is the empirical Fisher of the head's own log-ratio. That
fallback is logged once. A head's auxiliary loss (PolicyFlow's Brownian regularizer) is subtracted
from the surrogate, so it shapes the step as it does under PPO.

Memory: the surrogate, the KL, the gradient and every Fisher-vector product are sums over chunks of
``chunk_size`` samples, so the autograd graphs - for DPPO, K' denoiser evaluations per sample, with
double backpropagation - hold one chunk at a time, whatever the rollout size.

Randomness: every evaluation of one policy step replays the same random draws (``ReplayedDraws``),
so a head whose log-ratio samples (PolicyFlow's evaluation times) gives one fixed surrogate and KL
for the gradient, the Fisher products and all line-search probes.

Follows sb3-contrib's TRPO (the tests' oracle for the Gaussian head) except in two places:
* the KL's reduction: genpol's is the KL of the whole action (summed over a diagonal Gaussian's
  dimensions, the TRPO paper's); sb3-contrib averages its per-dimension KL over the action dimensions
  too, so at the same target_kl its trust region is A times wider and its damping A times stronger
  relative to the Fisher (Hopper: genpol at target_kl 0.03 and cg_damping 0.3). ``kl_reduction="mean"``
  is theirs (docs/fidelity.md: their 5 seeds learn faster on Hopper at 200k steps);
* the KL's direction: genpol constrains KL(pi_old || pi_theta), as the TRPO paper and the sample
  estimate do, where sb3-contrib uses KL(pi_theta || pi_old). Both have the same curvature at the old
  parameters, so the step is the same; only the line search's accept test can differ near the boundary.
"""

from __future__ import annotations

import logging
import math
from contextlib import contextmanager
from typing import Any, Callable, Iterator

import torch
from torch import nn
from torch.nn.utils import parameters_to_vector

from genpol import collectives
from genpol.heads.base import PolicyHead
from genpol.storage import RolloutStorage
from genpol.updaters.losses import estimated_kl, normalize_advantages
from genpol.updaters.minibatch import explained_variance_stat
from genpol.updaters.schedules import policy_kl

log = logging.getLogger(__name__)

DEFAULT_CHUNK_SIZE = 512  # samples; TRPOConfig.chunk_size documents the choice


def flat_grad(output: torch.Tensor, params: list[nn.Parameter], retain_graph: bool = False,
              create_graph: bool = False) -> torch.Tensor:
    """Gradient of scalar ``output`` with respect to ``params``, concatenated into ``[P]`` (zeros for
    parameters ``output`` does not depend on)."""
    grads = torch.autograd.grad(output, params, retain_graph=retain_graph, create_graph=create_graph,
                                allow_unused=True)
    return torch.cat([(torch.zeros_like(p) if g is None else g).reshape(-1) for g, p in zip(grads, params)])


def conjugate_gradient(matvec: Callable[[torch.Tensor], torch.Tensor], b: torch.Tensor, iterations: int,
                       residual_tol: float = 1e-10, start: torch.Tensor | None = None) -> torch.Tensor:
    """Approximately solve ``A x = b`` for symmetric positive-definite A given as ``matvec``.

    Starts from ``start``, by default ``1e-4 * randn`` rather than 0, as sb3-contrib does: with a
    vanishing gradient a zero start makes the first step 0/0.
    """
    x = 1e-4 * torch.randn_like(b) if start is None else start
    residual = b - matvec(x)
    residual_norm = residual @ residual
    if residual_norm < residual_tol:
        return x
    direction = residual.clone()
    for i in range(iterations):
        a_direction = matvec(direction)
        alpha = residual_norm / (direction @ a_direction)
        x = x + alpha * direction
        if i == iterations - 1:
            break
        residual = residual - alpha * a_direction
        new_residual_norm = residual @ residual
        if new_residual_norm < residual_tol:
            break
        direction = residual + (new_residual_norm / residual_norm) * direction
        residual_norm = new_residual_norm
    return x


class ReplayedDraws:
    """Common random numbers for the evaluations of one policy step.

    A head whose ``log_ratio`` draws random numbers (PolicyFlow's evaluation times) would otherwise
    give a different surrogate and KL at every call, so that the line search compared each probe
    with a different function than the gradient and the Fisher products were taken of. Inside
    ``replay(i)`` the torch RNG of the device starts every time from the same state, one stream per
    chunk i; outside, the RNG is left as it was (forked), so heads that draw nothing are unaffected.
    CPU and CUDA devices are replayed.
    """

    def __init__(self, device: torch.device):
        self.devices: list[int] = []  # CUDA devices whose generator is forked and replayed
        if device.type == "cuda":
            self.devices.append(device.index if device.index is not None else torch.cuda.current_device())
        # the base seed follows from the current RNG state, drawn from a fork: nothing is consumed
        with torch.random.fork_rng(devices=self.devices):
            self.seed = int(torch.randint(0, 2**62, ()))

    @contextmanager
    def replay(self, stream: int) -> Iterator[None]:
        with torch.random.fork_rng(devices=self.devices):
            torch.default_generator.manual_seed(self.seed + stream)
            for index in self.devices:
                torch.cuda.default_generators[index].manual_seed(self.seed + stream)
            yield


def copy_into_parameters(vector: torch.Tensor, params: list[torch.Tensor]) -> None:
    """Write the flat ``vector`` into ``params`` in place, each keeping its own storage. Not torch's
    ``vector_to_parameters``: it rebinds every parameter to a view of ``vector``, most of them a few bytes off
    alignment, and the BLAS kernels round small products differently there than in the separately allocated
    tensors a checkpoint loads into: a resumed TRPO run acted 1e-7 apart and then drifted."""
    offset = 0
    for param in params:
        param.copy_(vector[offset:offset + param.numel()].view_as(param))
        offset += param.numel()


class TRPOUpdater:
    """One trust-region policy step per rollout, then critic epochs. See the module docstring.

    Args:
        head, critic: the modules to train.
        target_kl: delta, the KL radius.
        cg_iterations: conjugate-gradient iterations.
        cg_damping: damping added to the Fisher-vector product.
        line_search_shrink: backtracking factor c.
        line_search_max_iter: backtracking steps tried.
        critic_lr: Adam learning rate of the critic.
        critic_epochs: passes over the rollout for the critic.
        critic_minibatch_size: critic minibatch size.
        normalize_advantage: normalize advantages over the rollout.
        advantage_std: the std that normalizes them, ``unbiased`` (SB3) or ``population`` (``jnp.std``).
        adam_eps: the critic's Adam epsilon.
        chunk_size: samples per chunk of the policy step. The surrogate, the KL and their gradients
            are sums over chunks, each weighted by its share of the batch, so the memory of an
            autograd graph is bounded by this instead of the rollout size; the result equals the
            unchunked one up to float rounding. A rollout of at most one chunk keeps the graph of
            grad KL across the conjugate-gradient iterations; several chunks rebuild theirs in every
            Fisher-vector product (a forward and two backward passes per chunk instead of one).
    """

    def __init__(self, head: PolicyHead, critic: nn.Module, target_kl: float = 0.01, cg_iterations: int = 15,
                 cg_damping: float = 0.1, line_search_shrink: float = 0.8, line_search_max_iter: int = 10,
                 critic_lr: float = 1e-3, critic_epochs: int = 10, critic_minibatch_size: int = 128,
                 normalize_advantage: bool = True, adam_eps: float = 1e-5, chunk_size: int = DEFAULT_CHUNK_SIZE,
                 advantage_std: str = "unbiased", kl_reduction: str = "sum"):
        if chunk_size < 1:
            raise ValueError(f"TRPO chunk_size must be >= 1, got {chunk_size}")
        self.head = head
        self.critic = critic
        self.target_kl = target_kl
        self.cg_iterations = cg_iterations
        self.cg_damping = cg_damping
        self.line_search_shrink = line_search_shrink
        self.line_search_max_iter = line_search_max_iter
        self.critic_epochs = critic_epochs
        self.critic_minibatch_size = critic_minibatch_size
        self.normalize_advantage = normalize_advantage
        self.advantage_std = advantage_std
        self.chunk_size = chunk_size
        # "mean": sb3-contrib's KL, averaged over action dimensions as well as samples (its
        # kl_divergence(...).mean() over a [B, A] per-dimension KL), i.e. the summed KL / A: with target_kl
        # and cg_damping unchanged this is genpol at target_kl * A and cg_damping * A (Hopper: 0.03, 0.3).
        if kl_reduction not in ("sum", "mean"):
            raise ValueError(f"kl_reduction must be sum or mean, got {kl_reduction!r}")
        self.kl_scale = 1.0 / head.act_dim if kl_reduction == "mean" else 1.0
        self.base_critic_lr = critic_lr
        self.actor_params = [p for p in head.parameters() if p.requires_grad]
        self.critic_optimizer = torch.optim.Adam(critic.parameters(), lr=critic_lr, eps=adam_eps)
        if not head.has_exact_kl:
            log.info("TRPO: the %s head has no closed-form KL; the trust region uses the sample estimate "
                     "mean((r - 1) - log r) of its log-ratio", head.family)

    def set_lr_scale(self, scale: float) -> None:
        """Scale the critic's learning rate (the policy step has no learning rate)."""
        self.critic_optimizer.param_groups[0]["lr"] = self.base_critic_lr * scale

    def policy_step(self, obs: torch.Tensor, record: dict[str, torch.Tensor],
                    advantages: torch.Tensor) -> dict[str, float]:
        """The natural-gradient step with line search on one batch; returns diagnostics.

        ``obs [N, D]``, ``record`` (tensors with leading dim N) and ``advantages [N]``."""
        synchronized = collectives.world_size() > 1  # torchrun: every sum below is over all ranks' data
        if self.normalize_advantage:  # over the whole rollout (all ranks' rollouts), before chunking
            normalize = collectives.normalize_advantages if synchronized else normalize_advantages
            advantages = normalize(advantages, self.advantage_std)
        params = self.actor_params
        total = obs.shape[0]
        chunks = [slice(start, min(start + self.chunk_size, total)) for start in range(0, total, self.chunk_size)]
        draws = ReplayedDraws(obs.device)

        def surrogate_and_kl(index: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
            """Chunk ``index``'s share of the batch surrogate and KL (its means weighted by its share
            of the samples, so the shares sum to the batch means), and its ``log_ratio [n, U]``."""
            chunk = chunks[index]
            chunk_obs, chunk_record = obs[chunk], {key: value[chunk] for key, value in record.items()}
            with draws.replay(index):
                terms = self.head.log_ratio(chunk_obs, chunk_record)
                kl = self.kl_scale * policy_kl(self.head, chunk_obs, chunk_record, terms)
            unit_advantages = advantages[chunk].unsqueeze(-1).expand_as(terms.log_ratio)
            if terms.unit_weights is not None:
                unit_advantages = unit_advantages * terms.unit_weights
            surrogate = (unit_advantages * terms.log_ratio.exp()).mean()
            if terms.aux_loss is not None:  # a batch mean too, so it splits over chunks the same way
                surrogate = surrogate - terms.aux_loss
            share = (chunk.stop - chunk.start) / total
            return share * surrogate, share * kl, terms.log_ratio

        def evaluate_batch() -> tuple[float, float, torch.Tensor]:
            """Surrogate and KL of the whole batch without gradients, and ``log_ratio [N, U]``."""
            surrogate, kl, log_ratios = 0.0, 0.0, []
            with torch.no_grad():
                for index in range(len(chunks)):
                    chunk_surrogate, chunk_kl, log_ratio = surrogate_and_kl(index)
                    surrogate, kl = surrogate + float(chunk_surrogate), kl + float(chunk_kl)
                    log_ratios.append(log_ratio)
            if synchronized:  # every rank takes the same line-search decision
                surrogate, kl = collectives.average_floats(surrogate, kl)
            return surrogate, kl, torch.cat(log_ratios)

        # Per-chunk work sits in functions so that each chunk's graph is freed on return, before
        # the next chunk's is built: one chunk's graph at a time.
        def chunk_gradient(index: int) -> tuple[torch.Tensor, float]:
            surrogate, _, _ = surrogate_and_kl(index)
            return flat_grad(surrogate, params), float(surrogate.detach())

        def chunk_fisher_product(index: int, vector: torch.Tensor) -> torch.Tensor:
            _, kl, _ = surrogate_and_kl(index)
            grad_kl = flat_grad(kl, params, retain_graph=True, create_graph=True)
            return flat_grad((grad_kl * vector).sum(), params)

        retained_grad_kl = None
        if len(chunks) == 1:  # small enough to keep grad KL's graph for every Fisher-vector product
            surrogate, kl, _ = surrogate_and_kl(0)
            retained_grad_kl = flat_grad(kl, params, retain_graph=True, create_graph=True)
            gradient = flat_grad(surrogate, params, retain_graph=True)
            old_surrogate = float(surrogate.detach())
            del surrogate, kl
        else:
            gradient, old_surrogate = torch.zeros_like(parameters_to_vector(params)), 0.0
            for index in range(len(chunks)):
                chunk_grad, chunk_surrogate = chunk_gradient(index)
                gradient += chunk_grad
                old_surrogate += chunk_surrogate
        start = None
        if synchronized:  # one all-reduce: the gradient, the surrogate and CG's random start
            flat = collectives.average_tensor(torch.cat([gradient, gradient.new_tensor([old_surrogate]),
                                                         1e-4 * torch.randn_like(gradient)]))
            size = gradient.numel()
            gradient, old_surrogate, start = flat[:size], float(flat[size]), flat[size + 1:]

        def fisher_vector_product(vector: torch.Tensor) -> torch.Tensor:
            if retained_grad_kl is not None:
                product = flat_grad((retained_grad_kl * vector).sum(), params, retain_graph=True)
            else:
                product = torch.zeros_like(vector)
                for index in range(len(chunks)):
                    product += chunk_fisher_product(index, vector)
            if synchronized:
                product = collectives.average_tensor(product)
            return product + self.cg_damping * vector

        direction = conjugate_gradient(fisher_vector_product, gradient, self.cg_iterations, start=start)
        curvature = float(direction @ fisher_vector_product(direction))
        retained_grad_kl = None  # frees the graph before the line search
        max_step = math.sqrt(2 * self.target_kl / curvature) if curvature > 0 else 0.0
        original = parameters_to_vector(params).detach().clone()
        accepted, coefficient, tried = False, 1.0, 0
        with torch.no_grad():
            for tried in range(1, self.line_search_max_iter + 1):
                copy_into_parameters(original + coefficient * max_step * direction, params)
                new_surrogate, new_kl, log_ratio = evaluate_batch()
                if new_kl <= self.target_kl and new_surrogate > old_surrogate:
                    accepted = True
                    break
                coefficient *= self.line_search_shrink
            if not accepted:
                copy_into_parameters(original, params)
                new_surrogate, new_kl, log_ratio = evaluate_batch()
        approx_kl, ratio_deviation = float(estimated_kl(log_ratio)), float((log_ratio.exp() - 1).abs().mean())
        if synchronized:
            approx_kl, ratio_deviation = collectives.average_floats(approx_kl, ratio_deviation)
        return {
            "approx_kl": approx_kl,
            "ratio_deviation": ratio_deviation,
            "policy": -new_surrogate,
            "kl": new_kl,
            "line_search_success": float(accepted),
            "line_search_steps": float(tried),
            "step_size": coefficient * max_step if accepted else 0.0,
            "gradient_norm": float(gradient.norm()),
        }

    def update(self, storage: RolloutStorage, generator: torch.Generator) -> dict[str, float]:
        data = storage.flat()
        stats = self.policy_step(data.obs, data.record, data.advantages)
        value_losses = []
        for _ in range(self.critic_epochs):
            for batch in storage.minibatches(self.critic_minibatch_size, generator):
                value_loss = (batch.returns - self.critic(batch.obs)).square().mean()
                self.critic_optimizer.zero_grad(set_to_none=True)
                value_loss.backward()
                if collectives.world_size() > 1:
                    collectives.average_gradients(list(self.critic.parameters()))
                self.critic_optimizer.step()
                value_losses.append(value_loss.detach())
        stats["value"] = float(torch.stack(value_losses).mean())
        stats.update(explained_variance_stat(data.values, data.returns))
        stats["learning_rate"] = float(self.critic_optimizer.param_groups[0]["lr"])
        return stats

    def state_dict(self) -> dict[str, Any]:
        return {"critic_optimizer": self.critic_optimizer.state_dict()}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.critic_optimizer.load_state_dict(state["critic_optimizer"])
