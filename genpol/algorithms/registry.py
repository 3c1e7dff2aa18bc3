"""The learner table: every place that asks "which learner is this?" reads it.

One row per learner of the ``learner`` config group (``learner=`` is its old name): the config
schema Hydra checks the group against, the builder, the loop it runs in, what
``pipeline=offline_to_online``'s offline phase does with it, whether torchrun can spread it over
processes, and the head capabilities it needs. Validation (``genpol.configure``), the pipelines and
the torchrun checks read these fields; none of them names a learner.

``register_learner`` adds a row; a learner's module calls it at import.
"""

from __future__ import annotations

import difflib
import importlib
from dataclasses import dataclass
from typing import Any, Callable, Literal

import torch

from genpol.algorithms.base import Algorithm
from genpol.algorithms.expo import EXPO
from genpol.algorithms.maxentdp import MaxEntDP, make_maxentdp
from genpol.algorithms.meow import MEow
from genpol.algorithms.offpolicy import OffPolicyAlgorithm
from genpol.algorithms.onpolicy import OnPolicyAlgorithm
from genpol.algorithms.qgradient import QGradientActor, make_qgradient
from genpol.algorithms.sac import SAC
from genpol.config.maxentdp import MaxEntDPConfig
from genpol.config.meow import MEowConfig
from genpol.config.offpolicy import ExpoConfig, QGradientConfig, SACConfig
from genpol.config.onpolicy import ASPOConfig, PPOConfig, SPOConfig, TRPOConfig
from genpol.envs import VectorEnv
from genpol.errors import ConfigError
from genpol.heads.base import Capability, PolicyHead
from genpol.nets import ValueNetwork
from genpol.updaters.losses import ASPOLoss, PPOClipLoss, SPOLoss
from genpol.updaters.minibatch import MinibatchUpdater, SequenceSettings
from genpol.updaters.schedules import adaptive_lr
from genpol.updaters.trpo import TRPOUpdater

# cfg (a TrainConfig), the head, the env, the offline replay or None -> the learner
Builder = Callable[[Any, PolicyHead, VectorEnv, Any], Algorithm]


@dataclass(frozen=True)
class Learner:
    """One row of the table."""

    name: str
    """The value of ``learner.name`` (and the group option's file name)."""
    schema: type
    """The config dataclass of its ``learner`` group option."""
    build: Builder
    """``build(cfg, head, env, offline)``: the algorithm (``offline``: the offline replay or None)."""
    off_policy: bool
    """True: the off-policy loop (act, store, update from replay); False: rollouts and on-policy updates."""
    offline_phase: Literal["behaviour_cloning", "own_loss"]
    """What ``pipeline=offline_to_online`` does before the online phase: behaviour-clone the head, or
    train with the learner's own loss on the dataset (offline RL, as Consistency-AC)."""
    torchrun: bool
    """Whether one run can span processes under torchrun (data-parallel gradients)."""
    needs: frozenset[Capability]
    """The head capabilities it uses; validation names any the chosen head lacks."""
    online_options: frozenset[str] = frozenset()
    """Its config fields that ``pipeline.online_learner`` may change when the online phase starts (a learner
    whose offline phase is its own loss, and so one learner object for both phases)."""
    check_memory: Callable[[Any, PolicyHead, VectorEnv], None] | None = None
    """``check_memory(cfg, head, env)``: ``ConfigError`` naming the key when what ``build`` will allocate cannot
    fit, allocating nothing and drawing no random numbers. ``pipeline=offline_to_online`` calls it before a
    behaviour-cloning pretraining (after it, the refused key could no longer change: the run is resumed);
    ``build`` checks again. None: the learner checks in ``build`` only."""


LEARNERS: dict[str, Learner] = {}


def register_learner(learner: Learner) -> Learner:
    """Add ``learner`` to the table (a name registered twice with another row is refused)."""
    known = LEARNERS.get(learner.name)
    if known is not None and known != learner:
        raise ValueError(f"learner '{learner.name}' is registered already (by {known.build.__module__})")
    LEARNERS[learner.name] = learner
    return learner


def learner(name: str, module: str | None = None) -> Learner:
    """The row of ``name``, importing ``module`` first when given (a learner of the user's own
    registers itself at import). ``ConfigError`` names the known learners."""
    if module:
        try:
            importlib.import_module(module)
        except Exception as error:  # noqa: BLE001 - whatever the user's module raises, named in one line
            raise ConfigError(f"learner.module: cannot import '{module}' ({type(error).__name__}: {error}); "
                              "is it on PYTHONPATH?") from error
    if name not in LEARNERS:
        close = difflib.get_close_matches(name, list(LEARNERS), n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ConfigError(f"unknown learner '{name}'; known: {sorted(LEARNERS)}.{hint}")
    return LEARNERS[name]


def on_policy_names() -> tuple[str, ...]:
    return tuple(name for name, row in LEARNERS.items() if not row.off_policy)


def make_critic(policy_cfg: Any, obs_dim: int) -> ValueNetwork:
    """The value network of the policy group's ``critic_*`` fields (``HeadConfig``)."""
    return ValueNetwork(obs_dim, policy_cfg.critic_hidden_sizes, policy_cfg.critic_activation,
                        residual=policy_cfg.critic_residual)


def make_updater(updater_cfg: Any, head: PolicyHead, critic: torch.nn.Module) -> MinibatchUpdater | TRPOUpdater:
    """PPO / SPO / ASPO (minibatch epochs on their loss) or TRPO, from the learner's config."""
    if updater_cfg.name == "trpo":
        return TRPOUpdater(
            head, critic, target_kl=updater_cfg.target_kl, cg_iterations=updater_cfg.cg_iterations,
            cg_damping=updater_cfg.cg_damping, line_search_shrink=updater_cfg.line_search_shrink,
            line_search_max_iter=updater_cfg.line_search_max_iter, critic_lr=updater_cfg.critic_lr,
            critic_epochs=updater_cfg.critic_epochs, critic_minibatch_size=updater_cfg.critic_minibatch_size,
            normalize_advantage=updater_cfg.normalize_advantage, adam_eps=updater_cfg.adam_eps,
            chunk_size=updater_cfg.chunk_size, advantage_std=updater_cfg.advantage_std,
            kl_reduction=updater_cfg.kl_reduction,
        )
    per_rollout = updater_cfg.normalize_advantage and updater_cfg.advantage_normalization == "rollout"
    common = dict(ent_coef=updater_cfg.ent_coef, vf_coef=updater_cfg.vf_coef,
                  clip_range_vf=updater_cfg.clip_range_vf,
                  normalize_advantage=updater_cfg.normalize_advantage and not per_rollout,
                  advantage_std=updater_cfg.advantage_std)
    losses = {
        "ppo": lambda: PPOClipLoss(clip_range=updater_cfg.clip_range, **common),
        "spo": lambda: SPOLoss(clip_range=updater_cfg.clip_range, **common),
        "aspo": lambda: ASPOLoss(clip_range=updater_cfg.clip_range, spo_clip_range=updater_cfg.spo_clip_range,
                                 **common),
    }
    adaptive = (adaptive_lr(updater_cfg.adaptive_lr_rule, updater_cfg.lr, updater_cfg.desired_kl)
                if updater_cfg.lr_schedule == "adaptive" else None)
    return MinibatchUpdater(
        head, critic, losses[updater_cfg.name](), lr=updater_cfg.lr, critic_lr=updater_cfg.critic_lr,
        epochs=updater_cfg.epochs, minibatch_size=updater_cfg.minibatch_size,
        max_grad_norm=updater_cfg.max_grad_norm, target_kl=updater_cfg.target_kl, adam_eps=updater_cfg.adam_eps,
        adaptive_lr=adaptive, compile=updater_cfg.compile, joint_clip=updater_cfg.grad_clip == "joint",
        weight_decay=updater_cfg.weight_decay, clip_eps=updater_cfg.grad_clip_eps,
        sequences=(SequenceSettings(updater_cfg.sequence_length, updater_cfg.gamma, updater_cfg.gae_lambda,
                                    updater_cfg.reward_scale)
                   if updater_cfg.advantage_estimation == "minibatch" else None),
        rollout_advantage_std=updater_cfg.advantage_std if per_rollout else None,
    )


def build_on_policy(cfg: Any, head: PolicyHead, env: VectorEnv, offline: Any = None) -> OnPolicyAlgorithm:
    """PPO, SPO, ASPO or TRPO: a value critic, the learner's update, and a rollout."""
    critic = make_critic(cfg.policy, env.obs_dim).to(torch.device(cfg.device))
    updater = make_updater(cfg.learner, head, critic)
    return OnPolicyAlgorithm(
        head, critic, updater, name=cfg.learner.name, rollout_steps=cfg.learner.rollout_steps,
        num_envs=env.num_envs, obs_dim=env.obs_dim, gamma=cfg.learner.gamma, gae_lambda=cfg.learner.gae_lambda,
        seed=cfg.seed, lr_schedule=cfg.learner.lr_schedule, compile_sampling=cfg.pipeline.compile_sampling,
        reward_scale=cfg.learner.reward_scale, bootstrap_truncation=cfg.learner.bootstrap_truncation,
    )


def check_on_policy_memory(cfg: Any, head: PolicyHead, env: VectorEnv) -> None:
    """``build_on_policy``'s memory check, its critic on the meta device (sizes only, no draws)."""
    with torch.device("meta"):
        critic = make_critic(cfg.policy, env.obs_dim)
    sequences = getattr(cfg.learner, "advantage_estimation", None) == "minibatch"  # as make_updater decides
    OnPolicyAlgorithm.check_memory(head, critic, cfg.learner.rollout_steps, env.num_envs, env.obs_dim,
                                   torch.device(cfg.device), cfg.learner.sequence_length if sequences else None)


for _name, _schema in (("ppo", PPOConfig), ("spo", SPOConfig), ("aspo", ASPOConfig), ("trpo", TRPOConfig)):
    register_learner(Learner(_name, _schema, build_on_policy, off_policy=False, offline_phase="behaviour_cloning",
                             torchrun=True, needs=OnPolicyAlgorithm.needs, check_memory=check_on_policy_memory))
_replay_check = OffPolicyAlgorithm.check_memory
register_learner(Learner("sac", SACConfig, SAC.build, off_policy=True, offline_phase="behaviour_cloning",
                         torchrun=False, needs=SAC.needs, check_memory=_replay_check))
register_learner(Learner("expo", ExpoConfig, EXPO.build, off_policy=True, offline_phase="behaviour_cloning",
                         torchrun=False, needs=EXPO.needs, check_memory=_replay_check))
register_learner(Learner("consistency_ac", QGradientConfig, make_qgradient, off_policy=True,
                         offline_phase="own_loss", torchrun=False, needs=QGradientActor.needs,
                         online_options=QGradientActor.online_options, check_memory=_replay_check))
register_learner(Learner("maxentdp", MaxEntDPConfig, make_maxentdp, off_policy=True, offline_phase="behaviour_cloning",
                         torchrun=False, needs=MaxEntDP.needs, check_memory=_replay_check))
register_learner(Learner("meow", MEowConfig, MEow.build, off_policy=True, offline_phase="behaviour_cloning",
                         torchrun=False, needs=MEow.needs, check_memory=_replay_check))
