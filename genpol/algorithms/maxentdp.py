"""MaxEntDP (Dong, Cheng, Zhang, ICML 2025; ALGORITHMS.md 14c): maximum-entropy RL with a diffusion policy.

The policy improvement target is ``pi*(a|s) ∝ exp(Q(s, a) / alpha)`` on the action box. One gradient step
(per env transition, ``utd`` 1), in the order of the authors' ``MaxEntropyLearner.update``:

1. critic: ``a' ~ pi(s')`` by the DDPM sampler; ``y = r + gamma (1 - done) (min_i Q_target,i(s', a') -
   alpha log pi_hat(a'|s'))`` with ``log pi_hat`` the head's I-MMSE estimate (``log_prob_levels`` x
   ``log_prob_draws`` network rows per action; ``genpol.heads.vp_schedule``); an MSE step of each critic,
   then the Polyak update (tau 0.005);
2. actor, Q-weighted noise estimation (``genpol.updaters.maxentdp_losses``): ``t ~ U(1e-3, 0.9946)``, the
   replay action noised to ``a_t``, K truncated-normal candidates of the clean action, weights
   ``softmax_k(min_i Q_target,i(s, a0_k) / alpha)`` from the *updated* target critics, target
   ``eps* = -sum_k w_k e_k`` and an MSE step of ``eps_theta(s, a_t, lambda)`` toward it. The actor's
   learning rate follows optax's cosine decay over ``actor_lr_decay_steps`` actor steps.

The temperature is fixed per task by default (``ent_coef=per_env``: the authors' values, 0.1 elsewhere);
``ent_coef=auto`` learns it as SAC does, on the estimate ``-log pi_hat`` of the next actions (genpol's
extension, not the authors').

Acting: uniform random actions for ``learning_starts`` env steps, then one DDPM sample. Evaluation
(``acting_head()``, a checkpoint's ``policy/``): ``MaxQPolicy``, the argmax of the target critics' minimum
over ``eval_candidates`` samples; its stochastic action is the policy's own sample.

The two big passes are chunked by ``chunk_rows``: the QNE critic pass (B K rows) and the log-prob estimate
(B N T_lp network rows), so their memory is bounded by the config. The effective sample size of the QNE
weights (``1 / sum w^2``) is logged: with a small temperature the softmax degenerates to one candidate.
"""

from __future__ import annotations

import math
from typing import Any

import torch

from genpol.algorithms.acting import CandidatePolicy
from genpol.algorithms.offpolicy import LearnedTemperature, OffPolicyAlgorithm
from genpol.envs import VectorEnv
from genpol.heads.base import Capability, PolicyHead
from genpol.heads.vp_schedule import T_MAX, T_MIN, alpha_bar, log_snr
from genpol.qensemble import QEnsemble
from genpol.storage.replay import OfflineReplay, ReplayBatch
from genpol.updaters.maxentdp_losses import (effective_sample_size, noise_matching_loss, qne_candidates,
                                             qne_noise_target)
from genpol.updaters.sac_losses import td_target, temperature_loss
from genpol.updaters.schedules import cosine_lr, set_lr


def min_q_chunked(critic: QEnsemble, obs: torch.Tensor, actions: torch.Tensor, chunk_rows: int) -> torch.Tensor:
    """``min_i Q_i(s_b, a_bk)`` ``[B, K]`` for ``obs [B, D]`` and ``actions [B, K, A]``, at most
    ``chunk_rows`` (state, action) rows per critic call."""
    batch, count, act_dim = actions.shape
    flat_actions = actions.reshape(batch * count, act_dim)
    values = torch.empty(batch * count, device=actions.device, dtype=actions.dtype)
    for start in range(0, batch * count, chunk_rows):
        rows = torch.arange(start, min(start + chunk_rows, batch * count), device=actions.device)
        values[rows] = critic(obs[rows // count], flat_actions[rows]).min(dim=0).values
    return values.view(batch, count)


class MaxQPolicy(CandidatePolicy):
    """MaxEntDP's evaluation rule as a head: ``num_candidates`` policy samples per state, the one with the
    largest minimum of ``critic`` (the target critics) acts (the authors' ``eval_actions_select``).
    ``act(deterministic=True)`` draws the candidates from a fixed seed (``CandidatePolicy.act``);
    ``deterministic=False`` is the policy's own single sample (the authors' exploration action), so a
    stochastic evaluation measures the distribution MaxEntDP trains, not its argmax.

    Args:
        obs_dim, act_dim: sizes.
        actor: the diffusion head (any head with batched candidates), or its spec.
        critic: a ``QEnsemble`` or its kwargs.
        num_candidates: samples per state (the authors: 10).
    """

    family = "max_q"
    description = "MaxEntDP's argmax-Q evaluation policy"
    trained_part = "actor"

    def __init__(self, obs_dim: int, act_dim: int, actor: PolicyHead | dict[str, Any],
                 critic: QEnsemble | dict[str, Any], num_candidates: int = 10):
        super().__init__(obs_dim, act_dim)
        if num_candidates < 1:
            raise ValueError(f"num_candidates must be >= 1, got {num_candidates}")
        self.actor = self.sampling_head(actor)
        self.critic = self.critic_module(critic)
        self.num_candidates = num_candidates
        self.spec_kwargs = {"actor": self.actor.spec(), "critic": self.critic_spec(), "num_candidates": num_candidates}

    def choose(self, obs: torch.Tensor, deterministic: bool) -> torch.Tensor:
        if not deterministic:
            return self.actor.act(obs, deterministic=False)
        candidates = self.actor.candidates(obs, self.num_candidates)  # [B, n, A]
        q = min_q_chunked(self.critic, obs, candidates, chunk_rows=max(obs.shape[0] * self.num_candidates, 1))
        best = q.argmax(dim=1)
        return candidates[torch.arange(obs.shape[0], device=obs.device), best]


class MaxEntDP(LearnedTemperature, OffPolicyAlgorithm):
    """MaxEntDP. ``cfg`` is a ``MaxEntDPConfig`` (the ``learner`` group); the arguments are
    ``OffPolicyAlgorithm``'s, plus ``temperature``, the fixed alpha (or the learned one's start)."""

    name = "maxentdp"
    needs = frozenset({Capability.NOISE_PREDICTION, Capability.CANDIDATES})

    def __init__(self, head: PolicyHead, cfg: Any, *, temperature: float, num_envs: int, obs_dim: int, act_dim: int,
                 capacity: int, device: torch.device, seed: int = 0, offline: OfflineReplay | None = None):
        super().__init__(head, cfg, num_envs=num_envs, obs_dim=obs_dim, act_dim=act_dim, capacity=capacity,
                         device=device, seed=seed, offline=offline)
        self.learn_temperature = cfg.ent_coef == "auto"
        self.target_entropy = cfg.target_entropy_scale * act_dim
        self.log_alpha = torch.tensor([math.log(temperature)], device=device, requires_grad=self.learn_temperature)
        fused = device.type in ("cpu", "cuda")
        self.alpha_optimizer = (torch.optim.Adam([self.log_alpha], lr=cfg.lr, fused=fused)
                                if self.learn_temperature else None)
        self.evaluation_policy = MaxQPolicy(obs_dim, act_dim, head, self.critic_target, cfg.eval_candidates)
        self._next_log_prob: torch.Tensor | None = None  # the last TD target's log pi_hat(a'|s')

    @property
    def alpha(self) -> torch.Tensor:
        return self.log_alpha.detach().exp()

    def acting_head(self) -> PolicyHead:
        """The argmax-Q evaluation policy (the head itself with ``eval_candidates`` 1)."""
        return self.head if self.cfg.eval_candidates == 1 else self.evaluation_policy

    # ------------------------------------------------------------------ critic
    def _td_target(self, batch: ReplayBatch, alpha: torch.Tensor, subset_heads: torch.Tensor | None) -> torch.Tensor:
        """``y [B]``: the target critics' minimum at ``a' ~ pi(s')`` less ``alpha log pi_hat(a'|s')``."""
        next_actions = self.head.act(batch.next_obs, deterministic=False)
        next_q = self.critic_target(batch.next_obs, next_actions).min(dim=0).values
        next_log_prob = None
        if self.cfg.backup_entropy:
            next_log_prob = self.head.estimate_log_prob(batch.next_obs, next_actions, self.cfg.log_prob_levels,
                                                        self.cfg.log_prob_draws, self.cfg.chunk_rows)
        self._next_log_prob = next_log_prob
        return td_target(batch.rewards, batch.dones, next_q, next_log_prob, alpha, self.cfg.gamma)

    def temperature_step(self) -> torch.Tensor:
        """SAC's temperature step on the last TD target's ``log pi_hat`` (``ent_coef=auto`` only)."""
        if self.alpha_optimizer is None or self._next_log_prob is None:
            return torch.zeros((), device=self.device)
        loss = temperature_loss(self.log_alpha, self._next_log_prob, self.target_entropy, self.cfg.temperature_loss)
        self.alpha_optimizer.zero_grad(set_to_none=True)
        loss.backward()
        self.alpha_optimizer.step()
        return loss.detach()

    # ------------------------------------------------------------------ actor: Q-weighted noise estimation
    def draw_qne(self, batch_size: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
        """``(t [B], xi [B, A], uniforms [B, K, A] in float64)`` from torch's global generator."""
        t = T_MIN + (T_MAX - T_MIN) * torch.rand(batch_size, device=self.device)
        xi = torch.randn(batch_size, self.act_dim, device=self.device)
        uniform = torch.rand(batch_size, self.cfg.candidates, self.act_dim, device=self.device, dtype=torch.float64)
        return t, xi, uniform

    @torch.no_grad()
    def qne_target(self, obs: torch.Tensor, actions: torch.Tensor, t: torch.Tensor, xi: torch.Tensor,
                   uniform: torch.Tensor, alpha: torch.Tensor) -> dict[str, torch.Tensor]:
        """The QNE regression problem of a batch: ``noisy [B, A]`` (``a_t``), ``log_snr [B, 1]``, ``target``
        ``eps* [B, A]`` and ``weights [B, K]``, from the draws of ``draw_qne``."""
        abar = alpha_bar(t).unsqueeze(-1)  # float64
        noisy = (abar.sqrt() * actions.to(torch.float64) + (1 - abar).sqrt() * xi.to(torch.float64)).to(actions.dtype)
        clean, noise = qne_candidates(noisy, abar, uniform)
        q = min_q_chunked(self.critic_target, obs, clean, self.cfg.chunk_rows)
        target, weights = qne_noise_target(noise, q, alpha)
        return {"noisy": noisy, "log_snr": log_snr(abar).to(actions.dtype), "target": target, "weights": weights}

    def actor_lr(self) -> float:
        """The actor's learning rate before its next step (optax's cosine_decay_schedule in closed form)."""
        if self.cfg.actor_lr_decay_steps is None:
            return self.cfg.lr
        return cosine_lr(self.cfg.lr, self.actor_steps, self.cfg.actor_lr_decay_steps)

    def actor_step(self, batch: ReplayBatch, alpha: torch.Tensor) -> dict[str, torch.Tensor]:
        """One QNE step of the noise network on ``batch``'s replay actions."""
        problem = self.qne_target(batch.obs, batch.actions, *self.draw_qne(len(batch)), alpha)
        predicted = self.head.predict_noise(batch.obs, problem["noisy"], problem["log_snr"])
        loss = noise_matching_loss(predicted, problem["target"])
        lr = self.actor_lr()
        set_lr(lr, self.actor_optimizer)
        self._step(self.actor_optimizer, loss, self.actor_params)
        self.actor_steps += 1
        ess = effective_sample_size(problem["weights"])
        return {"policy": loss.detach(), "qne_ess": ess.mean(), "qne_ess_min": ess.min(),
                "eps_target_abs": problem["target"].abs().mean(), "actor_lr": torch.tensor(lr)}

    # ------------------------------------------------------------------ one gradient step
    def gradient_step(self, batch: ReplayBatch | None = None) -> dict[str, torch.Tensor]:
        """Critic step (and Polyak update), temperature step (``auto``), actor step, on one batch."""
        if batch is None:
            batch = self.sampler.sample(self.cfg.batch_size)
        alpha = self.alpha
        critic = self.critic_step(batch, alpha)
        temperature = self.temperature_step()
        named = {"value": critic["value"], "temperature": temperature, "alpha": alpha.squeeze(),
                 "q_mean": critic["q"].mean(), "target_mean": critic["target"].mean()}
        if self._next_log_prob is not None:
            named["next_log_prob"] = self._next_log_prob.mean()
        return {**named, **self.actor_step(batch, alpha)}

    def update(self) -> dict[str, torch.Tensor]:
        """The gradient steps due (``num_envs x utd`` per call, accrued); the last one's diagnostics."""
        named: dict[str, torch.Tensor] = {}
        for _ in range(self.gradient_steps_due()):
            named = self.gradient_step()
        return named


def make_maxentdp(cfg: Any, head: PolicyHead, env: VectorEnv, offline: OfflineReplay | None) -> MaxEntDP:
    """MaxEntDP from a ``TrainConfig``: the temperature of ``learner.ent_coef`` for ``env.id``."""
    return MaxEntDP.build(cfg, head, env, offline, temperature=cfg.learner.temperature(cfg.env.id))
