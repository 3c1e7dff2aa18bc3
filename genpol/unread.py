"""The options a run never reads, named once for the two places that ask.

An option is unread where another choice leaves nothing to read it: an off-policy learner has no
rollout to compile, ``pipeline=gorl`` sets the clip per stage, PPO's ``desired_kl`` waits for
``lr_schedule=adaptive``. Validation (``genpol.configure.check_groups``) refuses such an option moved
from its default, since the run would train as if it had not been; the resume check and
``genpol.report`` (``genpol.runners.scaffold.unread_keys``) skip it in saved configs, so that a run
saved before a rule existed still resumes and groups with its peers. The rules were once written
in both places and drifted (the resume check missed GoRL's learner clip); here they are one table.
"""

from __future__ import annotations

from typing import Any, Mapping

from genpol.algorithms.registry import LEARNERS

# the head's value-critic fields, which only the on-policy learners build
HEAD_CRITIC_FIELDS = ("critic_hidden_sizes", "critic_activation", "critic_residual")


def unread_options(config: Mapping[str, Any]) -> dict[str, str]:
    """``{key: why}`` for the options that a run of the flattened ``config`` (``{"learner.lr": 3e-4,
    "update_threads": 0, ...}``; values as a saved config.yaml holds them, strings included) never
    reads, whatever their values; ``why`` completes "``key``=value is not read: ...". Reads
    ``learner.name``, ``pipeline.name``, ``policy.family`` and the ``learner.*`` values; a learner not
    in the table (a user's, not imported here) names no learner fields."""
    name = config.get("learner.name")
    row = LEARNERS.get(str(name))
    gorl = config.get("pipeline.name") == "gorl"
    unread: dict[str, str] = {}
    if gorl:
        for key in ("clip_range", "max_grad_norm"):
            unread[f"learner.{key}"] = (f"pipeline=gorl sets them per stage: set pipeline.{key}_first and "
                                        f"pipeline.{key}_later")
    unread_fields = getattr(row.schema, "unread_fields", None) if row is not None else None
    learner_unread = {}
    if unread_fields is not None:
        learner_unread = unread_fields({key.removeprefix("learner."): value for key, value in config.items()
                                        if key.startswith("learner.")})
    for field, why in learner_unread.items():
        # GoRL's stages clip with pipeline.max_grad_norm_*, so they read the clip's kind whatever
        # learner.max_grad_norm says (runs saved before that was refused set it null)
        if not (gorl and field.startswith("grad_clip")):
            unread[f"learner.{field}"] = why
    if row is not None and row.off_policy:
        for field in HEAD_CRITIC_FIELDS:
            unread[f"policy.{field}"] = f"learner={name} does not use the head's value critic; " + (
                learner_unread[field] if field in learner_unread  # MEow: no learner.critic_* either
                else "its Q-critics are sized in the learner group (learner.critic_*)")
        unread["pipeline.compile_sampling"] = (f"only the on-policy learners' rollouts sample through it; "
                                               f"learner={name} acts one step at a time")
        unread["update_threads"] = (f"only an on-policy update runs on its threads; learner={name} updates "
                                    "on torch_threads")
    if config.get("policy.family") == "energy_flow" and name != "meow":
        unread["policy.coupling_dropout"] = (f"only learner=meow's loss pass drops coupling units; "
                                             f"learner={name} trains the flow without dropout")
    return unread


def is_unread(key: str, unread: Mapping[str, Any] | tuple[str, ...]) -> bool:
    """Whether the flattened ``key`` is one of ``unread``'s keys or lies under one (a dict field's
    entries, ``learner.per_env_temperatures.hopper``). Not a bare prefix: ``learner.clip_range``
    unread leaves ``learner.clip_range_vf`` read."""
    return any(key == name or key.startswith(f"{name}.") for name in unread)
