"""Schemas of the ``learner`` group: PPO, SPO, ASPO and TRPO."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from omegaconf import MISSING

from genpol.config.base import require
from genpol.fields import FixedFields

# learner.adaptive_lr_rule -> the (min, max) learning rate its KL rule keeps to (genpol.updaters.schedules.adaptive_lr)
ADAPTIVE_LR_BOUNDS = {"per_minibatch": (1e-5, 1e-2), "per_epoch": (1e-6, 1e-2)}


@dataclass
class RolloutConfig(FixedFields):
    """What every on-policy learner shares: the rollout length and advantage estimation."""

    name: str = MISSING
    """Learner name; selects the learner and its loss."""
    rollout_steps: int = 2048
    """Steps collected per env between updates (the rollout is rollout_steps x num_envs)."""
    gamma: float = 0.99
    """Discount factor."""
    gae_lambda: float = 0.95
    """GAE lambda."""
    reward_scale: float = 1.0
    """Rewards are multiplied by it before advantages are estimated (FPO's and GoRL's code: 10, with
    env.normalize_reward=false)."""
    bootstrap_truncation: bool = True
    """Where a time limit cut an episode, bootstrap the return from V(final observation) (genpol's default,
    as stable-baselines3); false ends it there like a termination (CleanRL's and SPO's code: done =
    terminated or truncated). Per-rollout estimation only (advantage_estimation=minibatch masks truncations)."""

    def __post_init__(self) -> None:
        require(self.rollout_steps >= 1, "learner.rollout_steps", ">= 1", self.rollout_steps)
        require(0.0 < self.gamma <= 1.0, "learner.gamma", "in (0, 1]", self.gamma)
        require(0.0 <= self.gae_lambda <= 1.0, "learner.gae_lambda", "in [0, 1]", self.gae_lambda)
        require(self.reward_scale > 0, "learner.reward_scale", "> 0", self.reward_scale)
        if not self.bootstrap_truncation:
            require(getattr(self, "advantage_estimation", "rollout") == "rollout", "learner.bootstrap_truncation",
                    "true with advantage_estimation=minibatch (which masks truncations)", self.bootstrap_truncation)

    @classmethod
    def unread_fields(cls, values: Mapping[str, Any]) -> dict[str, str]:
        """The fields that a run with these field ``values`` (``{"lr_schedule": "constant", ...}``, strings from a
        saved config.yaml too) never reads, each with why: validation refuses one moved from its default (the
        run would train as if it had not been), and a resume and ``genpol.report`` ignore them
        (``scaffold.unread_keys``). The off-policy schemas name theirs the same way."""
        unread: dict[str, str] = {}
        if not is_true(values.get("normalize_advantage", True)):
            unread["advantage_std"] = "learner.normalize_advantage=false leaves the advantages as they are"
        return unread

    def total_steps_clock(self, trained: int, saved_total: int, new_total: int) -> tuple[str, str] | None:
        """``(what this learner times by total_steps, what a resume with new_total would change)`` after
        ``trained`` env steps, or None: a linear learning rate (PPO's and TRPO's ``lr_schedule``) decays to 0 at
        total_steps, so another budget re-times every update left."""
        if getattr(self, "lr_schedule", None) == "linear":
            return (f"decays its learning rate linearly over total_steps={saved_total} (learner.lr_schedule=linear)",
                    "the rate of every update left")
        return None


@dataclass
class PPOConfig(RolloutConfig):
    """PPO-clip: rollout length, advantage estimation, and the minibatch epochs."""

    name: str = "ppo"
    """Learner name; selects the loss."""
    lr: float = 3e-4
    """Adam learning rate of the policy head (and of the critic unless critic_lr is set)."""
    critic_lr: Optional[float] = None
    """Separate critic learning rate (None: same as lr)."""
    lr_schedule: str = "constant"
    """``constant``; ``linear`` decay to 0 over total_steps; or ``adaptive`` (rsl_rl's KL rule, see desired_kl)."""
    desired_kl: float = 0.01
    """KL the ``adaptive`` schedule aims for: lr / 1.5 above 2x, lr x 1.5 below 1/2, within the bounds of
    ``adaptive_lr_rule`` (1e-5..1e-2, or 1e-6..1e-2 per epoch), which ``lr`` must start inside."""
    adaptive_lr_rule: str = "per_minibatch"
    """When the ``adaptive`` schedule steps: ``per_minibatch`` (after every minibatch on its KL, lr within
    [1e-5, 1e-2], raised only for a KL above 0: rsl_rl's PPO, genpol's default) or ``per_epoch`` (once per
    epoch on the mean of its minibatches' KLs, within [1e-6, 1e-2], raised at a KL of 0 too: the PolicyFlow
    port's; with ``policy.kl_log_eps=1e-5`` its KL too, docs/fidelity.md)."""
    epochs: int = 10
    """Passes over the rollout per update."""
    minibatch_size: int = 64
    """Samples per gradient step."""
    clip_range: float = 0.2
    """PPO's epsilon: ratios are clipped to [1 - clip_range, 1 + clip_range]. With a diffusion head it
    is the last denoising step's clip (policy.clip_base sets the noisiest step's)."""
    clip_range_vf: Optional[float] = None
    """Value clipping range around the old prediction (None: no value clipping): the mean of the larger of the
    unclipped and clipped squared errors, as CleanRL and SPO (stable-baselines3 takes the clipped error alone)."""
    ent_coef: float = 0.0
    """Weight of the entropy bonus."""
    vf_coef: float = 0.5
    """Weight c of the value loss c * mean((R - V)^2), the form of SB3 (vf_coef 0.5) and of rsl_rl and
    PolicyFlow (1.0). DPPO, SPO and CleanRL write c' * 0.5 * mean((R - V)^2) with c' = 0.5: there the
    same loss is vf_coef = 0.5 * c' = 0.25. It weighs the critic against the actor only through
    ``grad_clip=joint`` where that clip binds: the critic's gradient comes from this term alone, so with
    ``grad_clip=per_network`` (the default) or no clip, Adam's step depends on c only through ``adam_eps`` and
    through minibatches where the clip binds on some steps and not others. Between c = 0.5 and 5, one Pendulum
    update moved the critic's parameters (~0.6) by 3e-8 at max_grad_norm 0.5 (its clip bound on every step),
    2e-3 with no clip (adam_eps 1e-5) and 4e-3 at max_grad_norm 2 (adam_eps 1e-12)."""
    max_grad_norm: Optional[float] = 0.5
    """Gradient-norm clip (None: no clipping), of each network on its own or of both together (grad_clip)."""
    grad_clip: str = "per_network"
    """``per_network``: the actor's and the critic's gradients clipped separately, so neither network's
    gradient rescales the other's step (genpol's default; DPPO clips its actor alone); ``joint``: one
    norm over both, as stable-baselines3's PPO and SPO's code (docs/fidelity.md)."""
    grad_clip_eps: float = 1e-6
    """Epsilon of the clip factor min(1, max_grad_norm / (norm + eps)): 1e-6 is torch's ``clip_grad_norm_``
    (genpol's default); GoRL's code uses 1e-8."""
    target_kl: Optional[float] = None
    """Stop the epochs once approx-KL exceeds 1.5 x target_kl (None: never)."""
    normalize_advantage: bool = True
    """Normalize advantages: per minibatch, or once per rollout (``advantage_normalization``)."""
    advantage_normalization: str = "minibatch"
    """Where ``normalize_advantage`` normalizes: ``minibatch`` (each minibatch on its own, stable-baselines3 and
    CleanRL; genpol's default) or ``rollout`` (once over the whole rollout, every rank's under torchrun: rsl_rl
    and the PolicyFlow port, whose ``compute_returns`` normalizes; TRPO always does). Not with
    ``advantage_estimation=minibatch``, whose advantages are recomputed in every loss."""
    advantage_std: str = "unbiased"
    """The std that normalizes them: ``unbiased`` (n - 1, stable-baselines3; genpol's default) or
    ``population`` (n, ``jnp.std``: FPO's and GoRL's code)."""
    advantage_estimation: str = "rollout"
    """``rollout``: GAE once per rollout over each env's whole rollout, a time-limit truncation bootstrapped
    from V(final observation), advantage vs - V (genpol's default); ``minibatch``: Brax's PPO, as FPO's and
    GoRL's code, minibatches of whole sub-sequences of sequence_length steps whose advantages and value
    targets are recomputed in every loss from the critic being trained, truncations masked, advantage
    r + gamma vs' - V (``genpol.storage.sequences``)."""
    sequence_length: int = 30
    """``minibatch`` estimation: steps per sub-sequence (Brax's unroll_length; FPO 30); divides
    rollout_steps and minibatch_size."""
    adam_eps: float = 1e-5
    """Adam's epsilon."""
    weight_decay: float = 0.0
    """Decoupled (AdamW) weight decay of actor and critic; 0 is Adam (genpol's default). The PolicyFlow
    port's AdamW uses 1e-5."""
    compile: bool = False
    """Compile each minibatch step (loss, gradient, clip, Adam) with torch.compile: ~3x faster small
    minibatches after ~20 s of compilation; needs target_kl=null. The step is compiled for one size: a
    rollout's short last minibatch (num_envs x rollout_steps, or its sub-sequences, not a multiple of the
    minibatch) steps eagerly rather than compile a second graph; a rollout smaller than minibatch_size is
    that one size."""

    def __post_init__(self) -> None:
        super().__post_init__()
        if self.compile:
            require(self.target_kl is None, "learner.target_kl", "null when learner.compile=true", self.target_kl)
        require(self.lr > 0, "learner.lr", "> 0", self.lr)
        if self.critic_lr is not None:
            require(self.critic_lr > 0, "learner.critic_lr", "> 0 or null", self.critic_lr)
        require(self.lr_schedule in ("constant", "linear", "adaptive"), "learner.lr_schedule",
                 "constant, linear or adaptive", self.lr_schedule)
        require(self.desired_kl > 0, "learner.desired_kl", "> 0", self.desired_kl)
        require(self.epochs >= 1, "learner.epochs", ">= 1", self.epochs)
        require(self.minibatch_size >= 1, "learner.minibatch_size", ">= 1", self.minibatch_size)
        require(0.0 < self.clip_range < 1.0, "learner.clip_range", "in (0, 1)", self.clip_range)
        if self.clip_range_vf is not None:
            require(self.clip_range_vf > 0, "learner.clip_range_vf", "> 0 or null", self.clip_range_vf)
        require(self.ent_coef >= 0, "learner.ent_coef", ">= 0", self.ent_coef)
        require(self.vf_coef >= 0, "learner.vf_coef", ">= 0", self.vf_coef)
        if self.max_grad_norm is not None:
            require(self.max_grad_norm > 0, "learner.max_grad_norm", "> 0 or null", self.max_grad_norm)
        require(self.grad_clip in ("per_network", "joint"), "learner.grad_clip", "per_network or joint", self.grad_clip)
        if self.target_kl is not None:
            require(self.target_kl > 0, "learner.target_kl", "> 0 or null", self.target_kl)
        require(self.adam_eps > 0, "learner.adam_eps", "> 0", self.adam_eps)
        require(self.weight_decay >= 0, "learner.weight_decay", ">= 0", self.weight_decay)
        require(self.grad_clip_eps >= 0, "learner.grad_clip_eps", ">= 0", self.grad_clip_eps)
        require(self.advantage_std in ("unbiased", "population"), "learner.advantage_std", "unbiased or population",
                self.advantage_std)
        require(self.adaptive_lr_rule in ADAPTIVE_LR_BOUNDS, "learner.adaptive_lr_rule",
                "per_minibatch or per_epoch", self.adaptive_lr_rule)
        if self.lr_schedule == "adaptive":
            # outside the rule's bounds the rule misbehaves: a rate below the floor was raised to it by a KL too
            # high, and one above the ceiling stayed there (rsl_rl's rule does the same)
            low, high = ADAPTIVE_LR_BOUNDS[self.adaptive_lr_rule]
            require(low <= self.lr <= high, "learner.lr", f"in [{low:g}, {high:g}], the bounds of "
                    f"lr_schedule=adaptive with adaptive_lr_rule={self.adaptive_lr_rule}", self.lr)
        require(self.advantage_estimation in ("rollout", "minibatch"), "learner.advantage_estimation",
                "rollout or minibatch", self.advantage_estimation)
        require(self.advantage_normalization in ("minibatch", "rollout"), "learner.advantage_normalization",
                "minibatch or rollout", self.advantage_normalization)
        require(self.advantage_normalization == "minibatch" or self.advantage_estimation == "rollout",
                "learner.advantage_normalization", "minibatch with advantage_estimation=minibatch (whose advantages "
                "each loss recomputes)", self.advantage_normalization)
        require(self.sequence_length >= 1, "learner.sequence_length", ">= 1", self.sequence_length)
        if self.advantage_estimation == "minibatch":
            require(self.rollout_steps % self.sequence_length == 0, "learner.rollout_steps",
                    f"a multiple of learner.sequence_length={self.sequence_length}", self.rollout_steps)
            require(self.minibatch_size % self.sequence_length == 0, "learner.minibatch_size",
                    f"a multiple of learner.sequence_length={self.sequence_length}", self.minibatch_size)

    @classmethod
    def unread_fields(cls, values: Mapping[str, Any]) -> dict[str, str]:
        unread = super().unread_fields(values)
        if not is_true(values.get("normalize_advantage", True)):
            unread["advantage_normalization"] = unread["advantage_std"]
        if str(values.get("lr_schedule", "constant")) != "adaptive":
            why = (f"learner.lr_schedule={values.get('lr_schedule', 'constant')} (only adaptive reads it; "
                   "a bundle's value, as +experiment=default's 0.02, goes back with learner.desired_kl=0.01)")
            unread.update(dict.fromkeys(("desired_kl", "adaptive_lr_rule"), why))
        if str(values.get("advantage_estimation", "rollout")) != "minibatch":
            unread["sequence_length"] = ("learner.advantage_estimation=rollout estimates over each env's whole "
                                         "rollout (advantage_estimation=minibatch reads it)")
        if is_none(values.get("max_grad_norm", 0.5)):
            unread.update(dict.fromkeys(("grad_clip", "grad_clip_eps"),
                                        "learner.max_grad_norm=null clips no gradient"))
        return unread


def is_true(value: Any) -> bool:
    """A boolean field's value, given as a bool or as a saved config's string."""
    return value is True or str(value).lower() == "true"


def is_none(value: Any) -> bool:
    """Whether an optional field's value, given as itself or as a saved config's string, is None."""
    return value is None or str(value) in ("None", "null")


@dataclass
class SPOConfig(PPOConfig):
    """SPO: PPO's loop with the quadratic penalty -(A r - |A|/(2 eps) (r - 1)^2) instead of the clip."""

    name: str = "spo"
    """Learner name; selects the loss. clip_range is SPO's epsilon."""


@dataclass
class ASPOConfig(PPOConfig):
    """ASPO (FPO++): PPO-clip for positive advantages, SPO's penalty for the others."""

    name: str = "aspo"
    """Learner name; selects the loss. clip_range is the PPO epsilon of positive advantages."""
    spo_clip_range: float = 0.2
    """SPO epsilon for non-positive advantages (FPO++'s manipulation fine-tuning uses 0.01 for both).
    Under a head's per-step clip schedule it is the last step's, earlier steps scaled as clip_range's."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(0.0 < self.spo_clip_range < 1.0, "learner.spo_clip_range", "in (0, 1)", self.spo_clip_range)


@dataclass
class TRPOConfig(RolloutConfig):
    """TRPO: one natural-gradient step per rollout (sb3-contrib's defaults), then critic epochs."""

    name: str = "trpo"
    """Learner name."""
    target_kl: float = 0.01
    """Trust-region radius delta on the mean KL(pi_old || pi_theta)."""
    cg_iterations: int = 15
    """Conjugate-gradient iterations."""
    cg_damping: float = 0.1
    """Damping added to the Fisher-vector product."""
    line_search_shrink: float = 0.8
    """Backtracking factor of the line search."""
    line_search_max_iter: int = 10
    """Backtracking steps tried before the step is rejected."""
    critic_lr: float = 1e-3
    """Adam learning rate of the critic."""
    critic_epochs: int = 10
    """Critic passes over the rollout per update."""
    critic_minibatch_size: int = 128
    """Critic minibatch size."""
    normalize_advantage: bool = True
    """Normalize advantages over the rollout."""
    advantage_std: str = "unbiased"
    """The std that normalizes them: ``unbiased`` (n - 1, stable-baselines3; genpol's default) or
    ``population`` (n, ``jnp.std``)."""
    lr_schedule: str = "constant"
    """Critic learning-rate schedule: ``constant`` or ``linear`` decay to 0."""
    adam_eps: float = 1e-5
    """The critic's Adam epsilon."""
    kl_reduction: str = "sum"
    """``sum``: the KL of the whole action (genpol's default, the TRPO paper); ``mean``: averaged over action
    dimensions too, as sb3-contrib's TRPO does for a diagonal Gaussian (its trust region is then target_kl x A;
    policy=gaussian only)."""
    chunk_size: int = 512
    """Samples per chunk of the policy step: the gradient, each Fisher-vector product and each
    line-search probe are sums over chunks of this many samples, so this, not the rollout size,
    bounds the memory of their autograd graphs (DPPO's default head on Hopper: ~1.4 MB per sample;
    peak RSS 1.1 GB at 512 for rollouts of 512 to 4096 samples, 1.8 GB unchunked at 1024). A rollout
    within one chunk keeps its graph across the conjugate-gradient iterations; in chunks each
    product rebuilds it, and the policy step takes ~1.4x as long (DPPO, 1024 samples: 10.4 -> 15.2 s;
    Gaussian 256-256, 2048 samples: 0.44 -> 0.62 s; 2 CPU cores). Results equal the unchunked step's
    up to float rounding, except for heads whose log-ratio draws random numbers (PolicyFlow's evaluation
    times, GoRL's latents), whose draws are seeded per chunk: another chunk size is another draw."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.chunk_size >= 1, "learner.chunk_size", ">= 1", self.chunk_size)
        require(self.kl_reduction in ("sum", "mean"), "learner.kl_reduction", "sum or mean", self.kl_reduction)
        require(self.advantage_std in ("unbiased", "population"), "learner.advantage_std", "unbiased or population",
                self.advantage_std)
        require(self.target_kl > 0, "learner.target_kl", "> 0", self.target_kl)
        require(self.cg_iterations >= 1, "learner.cg_iterations", ">= 1", self.cg_iterations)
        require(self.cg_damping >= 0, "learner.cg_damping", ">= 0", self.cg_damping)
        require(0.0 < self.line_search_shrink < 1.0, "learner.line_search_shrink", "in (0, 1)",
                 self.line_search_shrink)
        require(self.line_search_max_iter >= 1, "learner.line_search_max_iter", ">= 1", self.line_search_max_iter)
        require(self.critic_lr > 0, "learner.critic_lr", "> 0", self.critic_lr)
        require(self.adam_eps > 0, "learner.adam_eps", "> 0", self.adam_eps)
        require(self.critic_epochs >= 1, "learner.critic_epochs", ">= 1", self.critic_epochs)
        require(self.critic_minibatch_size >= 1, "learner.critic_minibatch_size", ">= 1",
                 self.critic_minibatch_size)
        require(self.lr_schedule in ("constant", "linear"), "learner.lr_schedule", "constant or linear",
                 self.lr_schedule)
