"""Epochs of minibatch gradient descent on a surrogate loss: the update of PPO (and SPO, ASPO).

The updater owns the optimizer and the learning rate; the loss object (``PPOClipLoss`` or a
subclass) owns the math. It sees a filled ``RolloutStorage`` and the head and critic modules, and
does no I/O: it returns named diagnostics for the callbacks to log.

With ``sequences`` (``learner.advantage_estimation=minibatch``) the minibatches are whole
sub-sequences of each env and every minibatch's loss recomputes its advantages and value targets
from the critic being trained (``genpol.storage.sequences``: Brax's PPO, as FPO's and GoRL's code);
without, they are shuffled single steps with the advantages GAE gave once per rollout.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch
from torch import nn

from genpol import collectives
from genpol.heads.base import PolicyHead
from genpol.storage import Batch, RolloutStorage
from genpol.storage.sequences import SequenceBatch, sequence_gae, sequence_minibatches
from genpol.updaters.compiled import CompiledAdamStep
from genpol.updaters.losses import PPOClipLoss, normalize_advantages
from genpol.updaters.schedules import AdaptiveLR, policy_kl


TORCH_CLIP_EPS = 1e-6
"""The epsilon ``torch.nn.utils.clip_grad_norm_`` adds to the norm (``learner.grad_clip_eps``'s default)."""


def clip_gradient_norm(params: list[torch.Tensor], max_norm: float, eps: float = TORCH_CLIP_EPS) -> torch.Tensor:
    """Scale the gradients of ``params`` by ``min(1, max_norm / (norm + eps))``, ``norm`` their joint L2
    norm; returns it. At ``eps`` 1e-6 this is ``clip_grad_norm_``'s arithmetic, operation for operation
    (the same bits); it is written out because torch fixes that epsilon, and GoRL's code clips with
    1e-8 (``learner.grad_clip_eps``)."""
    grads = [p.grad for p in params if p.grad is not None]
    if not grads:
        return torch.zeros(())
    norm = nn.utils.get_total_norm(grads, foreach=True)
    torch._foreach_mul_(grads, torch.clamp(max_norm / (norm + eps), max=1.0))
    return norm


def explained_variance(predictions: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
    """``1 - Var(targets - predictions) / Var(targets)``; NaN when the targets are constant or one."""
    if targets.numel() < 2:  # torch's var() of one sample warns, then gives NaN
        return torch.tensor(float("nan"))
    var_targets = targets.var()
    if var_targets == 0:
        return torch.tensor(float("nan"))
    return 1 - (targets - predictions).var() / var_targets


def explained_variance_stat(predictions: torch.Tensor, targets: torch.Tensor) -> dict[str, float]:
    """``{"explained_variance": ...}``, or nothing where it is undefined: constant returns (a one-step task with
    a sparse reward) or a one-sample rollout. Logged as NaN, it stopped healthy runs as diverged (the runner
    checks every logged value); SB3 logs the NaN, having no such check."""
    value = explained_variance(predictions, targets)
    return {"explained_variance": float(value)} if torch.isfinite(value) else {}


@dataclass(frozen=True)
class SequenceSettings:
    """Per-minibatch advantage estimation (``genpol.storage.sequences``): sub-sequences of ``length``
    steps; the discount, GAE's lambda and the reward scale of the recomputed GAE."""

    length: int
    gamma: float
    gae_lambda: float
    reward_scale: float = 1.0


class MinibatchUpdater:
    """``epochs`` passes of shuffled minibatches over the rollout, one Adam step each.

    Args:
        head: the policy head (its trainable parameters).
        critic: the value network.
        loss: the surrogate loss object.
        lr: actor learning rate (and critic's, unless ``critic_lr`` is set).
        critic_lr: separate critic learning rate, or None.
        epochs: passes over the rollout per update.
        minibatch_size: samples per gradient step.
        max_grad_norm: gradient-norm clip, applied to the actor's and the critic's gradients
            separately. Clipped as one vector (SB3, SPO), a large critic gradient would shrink the
            actor's step by a factor that changes every step; DPPO clips its actor on its own.
        target_kl: stop the epochs early once a minibatch's approx-KL exceeds 1.5 * target_kl
            (checked before its step, as SB3), or None.
        adam_eps: Adam's epsilon (1e-5 as SB3 and most PPO implementations).
        weight_decay: AdamW's decoupled weight decay of both networks (the PolicyFlow port's 1e-5;
            0, genpol's default, is plain Adam).
        clip_eps: the epsilon added to the gradient norm in the clip factor ``max_norm / (norm + eps)``
            (torch's 1e-6; GoRL's code 1e-8).
        adaptive_lr: a KL-adaptive schedule, stepped after every minibatch with the head's KL
            (exact where the head has one, else the sample estimate), or once per epoch with the
            mean of its minibatches' KLs (``AdaptiveLR.every``); it scales both learning rates,
            keeping their ratio. None: the rates change only through ``set_lr_scale``.
        compile: run each minibatch step as one ``torch.compile``d function (``CompiledAdamStep``):
            several times faster for small minibatches, after a one-off compilation of ~20 s.
            Not combined with ``target_kl``, whose check must come between loss and step.
        sequences: minibatches of ``minibatch_size / sequences.length`` whole sub-sequences with
            advantages recomputed in every loss (module docstring), or None (single steps, the
            rollout's advantages).
        rollout_advantage_std: normalize the rollout's advantages once, over the whole rollout (every
            rank's under torchrun), with this std (``unbiased`` or ``population``) before the epochs, as
            rsl_rl and the PolicyFlow port do; None: the loss normalizes each minibatch, or nothing.
    """

    def __init__(
        self,
        head: PolicyHead,
        critic: nn.Module,
        loss: PPOClipLoss,
        lr: float = 3e-4,
        critic_lr: float | None = None,
        epochs: int = 10,
        minibatch_size: int = 64,
        max_grad_norm: float | None = 0.5,
        target_kl: float | None = None,
        adam_eps: float = 1e-5,
        adaptive_lr: AdaptiveLR | None = None,
        compile: bool = False,
        joint_clip: bool = False,
        weight_decay: float = 0.0,
        clip_eps: float = TORCH_CLIP_EPS,
        sequences: SequenceSettings | None = None,
        rollout_advantage_std: str | None = None,
    ):
        if loss.ent_coef != 0.0 and not head.has_entropy:
            raise ValueError(
                f"learner.ent_coef={loss.ent_coef} needs an entropy, but the {head.family} head "
                "has none; set learner.ent_coef=0"
            )
        self.head = head
        self.critic = critic
        self.loss = loss
        self.epochs = epochs
        self.minibatch_size = minibatch_size
        self.max_grad_norm = max_grad_norm
        self.clip_eps = clip_eps
        self.target_kl = target_kl
        self.base_lr = lr
        self.base_critic_lr = lr if critic_lr is None else critic_lr
        self.actor_params = [p for p in head.parameters() if p.requires_grad]
        self.critic_params = [p for p in critic.parameters() if p.requires_grad]
        # fused: one kernel for all parameters; the default per-tensor loop measured 2.4x slower
        # (550 vs 228 us per step for two 64-64 MLPs on this CPU), a large share of a small minibatch.
        # Decoupled weight decay (AdamW's p <- p (1 - lr wd) before the Adam step); at 0, Adam exactly.
        self.optimizer = torch.optim.Adam(
            [{"params": self.actor_params, "lr": lr}, {"params": self.critic_params, "lr": self.base_critic_lr}],
            eps=adam_eps, fused=True, weight_decay=weight_decay, decoupled_weight_decay=weight_decay > 0,
        )
        self.adaptive_lr = adaptive_lr
        self.sequences = sequences
        if rollout_advantage_std is not None and (sequences is not None or loss.normalize_advantage):
            raise ValueError("rollout_advantage_std normalizes the rollout's advantages once: not with advantages "
                             "recomputed in every loss (sequences), nor with a loss that normalizes each minibatch")
        self.rollout_advantage_std = rollout_advantage_std
        if sequences is not None and minibatch_size % sequences.length:
            raise ValueError(f"learner.minibatch_size={minibatch_size} must be a multiple of "
                             f"learner.sequence_length={sequences.length}")
        self.compiled_step = None
        if compile:
            if target_kl is not None:
                raise ValueError("learner.compile=true cannot stop early on target_kl; set target_kl=null")
            self.compiled_step = CompiledAdamStep({"head": head, "critic": critic},
                                                  self.minibatch_loss if sequences is None else self.sequence_loss,
                                                  self.optimizer, max_grad_norm, joint_clip=joint_clip,
                                                  clip_eps=clip_eps)
        # the parameter groups whose gradient norm is clipped: each network, or both as one
        self.clip_groups = ([self.actor_params + self.critic_params] if joint_clip
                            else [self.actor_params, self.critic_params])

    def set_lr_scale(self, scale: float) -> None:
        """Set both learning rates to ``scale`` times their base values (for schedules)."""
        self.optimizer.param_groups[0]["lr"] = self.base_lr * scale
        self.optimizer.param_groups[1]["lr"] = self.base_critic_lr * scale

    @property
    def learning_rate(self) -> float:
        return float(self.optimizer.param_groups[0]["lr"])

    def minibatch_loss(self, obs: torch.Tensor, record: dict[str, torch.Tensor], advantages: torch.Tensor,
                       returns: torch.Tensor, old_values: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The surrogate loss of one minibatch of ``[B]`` samples and its named diagnostics (detached)."""
        return self._loss(obs, record, advantages, self.critic(obs), returns, old_values)

    def sequence_loss(self, obs: torch.Tensor, record: dict[str, torch.Tensor], rewards: torch.Tensor,
                      terminated: torch.Tensor, truncated: torch.Tensor, old_values: torch.Tensor,
                      bootstrap_obs: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The surrogate loss of ``[L, B]`` sub-sequences (``SequenceBatch``'s fields), advantages and
        value targets from ``sequence_gae`` on the critic being trained, without gradient through
        them. A truncated step's value target and old value are the prediction itself: no value error there,
        with or without ``clip_range_vf``, as the references' ``(vs - v) (1 - truncation)``; the mean still
        counts it."""
        settings = self.sequences
        length, batch = rewards.shape
        flat_obs = obs.reshape(length * batch, -1)
        values = self.critic(flat_obs)
        with torch.no_grad():
            value_targets, advantages = sequence_gae(
                rewards * settings.reward_scale, values.detach().reshape(length, batch), self.critic(bootstrap_obs),
                terminated, truncated, settings.gamma, settings.gae_lambda)
            cut = truncated & ~terminated  # a step with both flags is a termination (sequence_gae)
            returns = torch.where(cut, values.detach().reshape(length, batch), value_targets)
            # and so is its old value: else clip_range_vf's clipped branch, (V - V_old -+ eps)^2, logged a value
            # error there once the critic had moved (no gradient: the clamp is saturated)
            old_values = torch.where(cut, values.detach().reshape(length, batch), old_values)
        flat_record = {key: tensor.reshape(length * batch, *tensor.shape[2:]) for key, tensor in record.items()}
        return self._loss(flat_obs, flat_record, advantages.reshape(-1), values, returns.reshape(-1),
                          old_values.reshape(-1))

    def _loss(self, obs: torch.Tensor, record: dict[str, torch.Tensor], advantages: torch.Tensor, values: torch.Tensor,
              returns: torch.Tensor, old_values: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        """The loss object on ``[B]`` samples whose ``values`` the critic has just predicted."""
        terms = self.head.log_ratio(obs, record)
        out = self.loss(terms, advantages, values, returns, old_values)
        named = {"policy": out.policy, "value": out.value, "entropy": out.entropy, **out.diagnostics}
        named.update({f"head/{key}": value.detach() for key, value in terms.diagnostics.items()})
        if self.adaptive_lr is not None:
            with torch.no_grad():
                named["kl"] = policy_kl(self.head, obs, record, terms)
        return out.total, named

    def eager_step(self, batch: Batch | SequenceBatch) -> tuple[dict[str, torch.Tensor], bool]:
        """Loss, backward, clip, Adam; the diagnostics, and False (no step) when approx-KL passes
        1.5 x target_kl.

        Under torchrun the gradients and the diagnostics are averaged over ranks in one all-reduce
        before the KL check and the clip, so every rank stops, clips and steps alike."""
        if isinstance(batch, SequenceBatch):
            total, named = self.sequence_loss(*self._sequence_arguments(batch))
        else:
            total, named = self.minibatch_loss(batch.obs, batch.record, batch.advantages, batch.returns,
                                               batch.values)
        synchronized = collectives.world_size() > 1
        if not synchronized and self._kl_too_large(named):
            return named, False
        self.optimizer.zero_grad(set_to_none=True)
        total.backward()
        if synchronized:
            named = collectives.average_gradients(self.actor_params + self.critic_params, named)
            if self._kl_too_large(named):
                return named, False
        if self.max_grad_norm is not None:
            for params in self.clip_groups:
                if params:
                    clip_gradient_norm(params, self.max_grad_norm, self.clip_eps)
        self.optimizer.step()
        return named, True

    @staticmethod
    def _sequence_arguments(batch: SequenceBatch) -> tuple[Any, ...]:
        return (batch.obs, batch.record, batch.rewards, batch.terminated, batch.truncated, batch.values,
                batch.bootstrap_obs)

    def _minibatches(self, storage: RolloutStorage, generator: torch.Generator) -> Any:
        if self.sequences is None:
            return storage.minibatches(self.minibatch_size, generator)
        return sequence_minibatches(storage.obs, storage.records, storage.rewards, storage.terminated,
                                    storage.truncated, storage.values, storage.last_obs, self.sequences.length,
                                    self.minibatch_size // self.sequences.length, generator)

    def _size(self, batch: Batch | SequenceBatch) -> int:
        """A minibatch's size: samples, or sub-sequences (``rewards [L, B]``)."""
        return batch.rewards.shape[1] if isinstance(batch, SequenceBatch) else len(batch.obs)

    def _full_minibatch(self, storage: RolloutStorage) -> int:
        """The size of every minibatch but a rollout's short last one (the rollout itself when it is smaller
        than ``minibatch_size``): the one size the compiled step is traced for."""
        samples = storage.rewards.numel()
        if self.sequences is None:
            return min(self.minibatch_size, samples)
        length = self.sequences.length
        return min(self.minibatch_size // length, samples // length)

    def _kl_too_large(self, named: dict[str, torch.Tensor]) -> bool:
        return self.target_kl is not None and bool(named["approx_kl"] > 1.5 * self.target_kl)

    def update(self, storage: RolloutStorage, generator: torch.Generator) -> dict[str, float]:
        """Run the epochs on a rollout whose advantages are computed; return mean diagnostics."""
        # each minibatch's diagnostics, averaged at the end: a running sum cost ~20 us of tensor adds per step.
        # The minibatch that stops the epochs on target_kl is among them, as in SB3's logs: left out, the logged
        # approx_kl hid the very value that stopped the update (and a stop at the first minibatch logged none).
        diagnostics: list[dict[str, torch.Tensor]] = []
        stopped_early, steps = False, 0
        if self.rollout_advantage_std is not None:  # once, after the returns were taken from the raw advantages
            normalize = collectives.normalize_advantages if collectives.world_size() > 1 else normalize_advantages
            raw = storage.advantages
            storage.advantages = normalize(raw.reshape(-1), self.rollout_advantage_std).view_as(raw).to(raw.dtype)
        per_epoch = self.adaptive_lr is not None and self.adaptive_lr.every == "epoch"
        full_size = self._full_minibatch(storage) if self.compiled_step is not None else None
        for _ in range(self.epochs):
            epoch_kls: list[float] = []
            for batch in self._minibatches(storage, generator):
                stepped = True
                if self.compiled_step is None or self._size(batch) != full_size:
                    # eager; or a rollout's short last minibatch, whose other size would compile a second graph
                    named, stepped = self.eager_step(batch)
                elif self.sequences is not None:
                    named = self.compiled_step(*self._sequence_arguments(batch))
                else:
                    named = self.compiled_step(batch.obs, batch.record, batch.advantages, batch.returns,
                                               batch.values)
                diagnostics.append(named)
                if not stepped:
                    stopped_early = True
                    break
                steps += 1
                if per_epoch:
                    epoch_kls.append(float(named["kl"]))
                elif self.adaptive_lr is not None:
                    self.set_lr_scale(self.adaptive_lr.step(float(named["kl"])) / self.base_lr)
            if per_epoch and epoch_kls:  # the epoch's mean KL, over the minibatches that stepped
                self.set_lr_scale(self.adaptive_lr.step(sum(epoch_kls) / len(epoch_kls)) / self.base_lr)
            if stopped_early:
                break
        stats = {key: float(torch.stack([named[key] for named in diagnostics]).mean()) for key in
                 (diagnostics[0] if diagnostics else {})}
        flat = storage.flat()
        # of the rollout's GAE returns, under either estimation (the per-minibatch targets are not kept)
        stats.update(explained_variance_stat(flat.values, flat.returns))
        stats["gradient_steps"] = float(steps)
        stats["stopped_early"] = float(stopped_early)
        stats["learning_rate"] = self.learning_rate
        return stats

    def state_dict(self) -> dict[str, Any]:
        state = {"optimizer": self.optimizer.state_dict()}
        if self.adaptive_lr is not None:
            state["adaptive_lr"] = self.adaptive_lr.state_dict()
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        self.optimizer.load_state_dict(state["optimizer"])
        if self.adaptive_lr is not None:
            self.adaptive_lr.load_state_dict(state["adaptive_lr"])
