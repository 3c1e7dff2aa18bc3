"""Compose and validate: the config schema (``genpol.config``) joined with the extension tables.

``genpol.config`` is the schema alone: dataclasses whose ``__post_init__`` checks each group's own
ranges. What needs two groups and the learner table (``genpol.algorithms.registry``) lives here:
which head capabilities a learner needs, whether a pipeline takes a learner, and the Hydra
ConfigStore entries of every learner's schema. The entry points and the API call ``validate``.
"""

from __future__ import annotations

import dataclasses
import difflib
import logging
import math
import re
from pathlib import Path
from typing import Any, Sequence

from hydra.core.config_store import ConfigStore
from omegaconf import DictConfig, OmegaConf, open_dict
from omegaconf.errors import ConfigKeyError, MissingMandatoryValue, ValidationError

from genpol.algorithms.registry import LEARNERS, learner, on_policy_names
from genpol.memory import check_device
from genpol.config import PIPELINE_SCHEMAS, POLICY_SCHEMAS, EvaluateConfig, TrainConfig, claim_new_dir
from genpol.config.base import require
from genpol.config.maxentdp import MaxEntDPConfig
from genpol.errors import ConfigError, HeadCapabilityError
from genpol.fields import schema_default
from genpol.heads import HEADS, head_class
from genpol.heads.base import Capability, check_capabilities
from genpol.unread import unread_options

log = logging.getLogger(__name__)

__all__ = ["register_configs", "validate", "check_known_keys", "check_device", "type_own_head", "check_groups",
           "check_learner", "import_learner_modules", "config_dirs_of"]


def register_configs() -> None:
    """Put the schemas in Hydra's ConfigStore (group option ``schema_<name>`` for each; the learners'
    from their table), and register the ``genpol.new_dir`` resolver of the default run directory (and
    ``genpol.nonzero_or``, a default for a value that may be 0).

    The resolver's value is cached in the config, and Hydra copies that cache into every sweep job's
    config (``load_sweep_config``), pickled along to joblib, Ray and submitit workers and into a
    requeued SLURM job: a sweep claims its directory once, in the launching process."""
    if not OmegaConf.has_resolver("genpol.new_dir"):
        OmegaConf.register_new_resolver("genpol.new_dir", claim_new_dir, use_cache=True)
    if not OmegaConf.has_resolver("genpol.nonzero_or"):  # a default that a 0 falls back to (pretrain_steps=0)
        OmegaConf.register_new_resolver("genpol.nonzero_or", lambda value, default: value or default)
    _store_once(None, "train_schema", TrainConfig)
    _store_once(None, "evaluate_schema", EvaluateConfig)
    learner_schemas = {name: row.schema for name, row in LEARNERS.items()}
    for group, schemas in (("policy", POLICY_SCHEMAS), ("learner", learner_schemas),
                           ("pipeline", PIPELINE_SCHEMAS)):
        for name, schema in schemas.items():
            _store_once(group, f"schema_{name}", schema)


# (group, name) -> (the schema, the ConfigStore entry made from it), for _store_once
_STORED: dict[tuple[str | None, str], tuple[type, Any]] = {}


def _store_once(group: str | None, name: str, schema: type) -> None:
    """``ConfigStore.store`` builds an OmegaConf node from the dataclass every time (70 ms for genpol's
    schemas together, a third of a ``compose_config``), and ``compose_config`` registers before every
    compose, for a learner a user module may have added since: store only a schema that is new, changed,
    or no longer the store's entry."""
    stored = _STORED.get((group, name))
    if stored is not None and stored[0] is schema and stored[1] is _store_entry(group, name):
        return
    ConfigStore.instance().store(group=group, name=name, node=schema)
    _STORED[(group, name)] = (schema, _store_entry(group, name))


def _store_entry(group: str | None, name: str) -> Any:
    """The ConfigStore's entry for ``<group>/<name>``, or None."""
    folder = ConfigStore.instance().repo
    for part in (group.split("/") if group else ()):
        folder = folder.get(part, {})
    return folder.get(f"{name}.yaml")


# what to write for a value the config cannot default (``???`` in the schema), by key
MISSING_EXAMPLES: dict[str, str] = {
    "env.id": "env.id=Pendulum-v1 with env=gym (any gymnasium id), env.id=cheetah-run with env=dmc, or "
              "env.id=my_pkg.sim:make_env with env=custom",
    "run_dir": "run_dir=runs/hopper (a training run's directory)",
}


def validate(cfg: DictConfig) -> Any:
    """Turn a composed config into dataclass objects, running every ``__post_init__`` check; for a
    training config, also the checks across groups (``check_groups``) and the head's capabilities
    against the learner's needs (``check_learner``)."""
    type_own_head(cfg)
    check_known_keys(cfg)
    try:
        config = OmegaConf.to_object(cfg)
    except MissingMandatoryValue as error:
        key = error.full_key
        example = MISSING_EXAMPLES.get(key, f"{key}=<value>")
        raise ConfigError(f"{key} is required and has no default: set it, e.g. {example}") from None
    if isinstance(config, (TrainConfig, EvaluateConfig)):
        check_device(config.device)
    if isinstance(config, TrainConfig):
        if not dataclasses.is_dataclass(config.learner):
            raise ConfigError("the learner group's yaml has no schema: list schema_<name> in its defaults (a learner "
                              "of your own also sets module: <the module that registers it>)")
        if not dataclasses.is_dataclass(config.policy):
            raise ConfigError("the policy group's yaml has no schema: list schema_<name> in its defaults, or set "
                              "family: <module:ClassName> of a head of your own that declares a Config")
        check_group_names(config)
        check_numbers_finite(config)
        # the head against the learner first: a fix check_groups suggests (policy.ft_denoising_steps) led to this
        # refusal where the learner cannot train the head at all
        check_learner(config)
        check_groups(config)
        warn_minibatch_against_rollout(config)
    return config


def warn_minibatch_against_rollout(config: TrainConfig) -> None:
    """A warning where ``learner.minibatch_size`` does not fit the rollout (``rollout_steps`` x ``env.num_envs``):
    above it, each epoch is one minibatch of the whole rollout, a tenth of the gradient steps a user may expect
    from a minibatch of a tenth of it; not a divisor of it, each epoch ends with a short minibatch that still
    takes a full Adam step, its advantages normalized over a few samples (one sample's stay raw). Trained as
    asked (SB3 trains so too, and warns of the second), but said: both used to pass silently."""
    minibatch, steps = getattr(config.learner, "minibatch_size", None), getattr(config.learner, "rollout_steps", None)
    if minibatch is None or steps is None or learner(config.learner.name).off_policy:
        return
    samples = steps * config.env.num_envs
    if minibatch > samples:  # logged, as the rounding of total_steps is: one line on the command line
        log.warning("learner.minibatch_size=%d exceeds the rollout of learner.rollout_steps=%d x env.num_envs=%d = %d "
                    "samples: every epoch is one minibatch of the whole rollout (%d gradient steps per update)",
                    minibatch, steps, config.env.num_envs, samples, config.learner.epochs)
    elif samples % minibatch:
        log.warning("learner.minibatch_size=%d does not divide the rollout of learner.rollout_steps=%d x "
                    "env.num_envs=%d = %d samples: every epoch ends with a minibatch of %d samples, a full step on "
                    "them; a divisor of %d avoids it", minibatch, steps, config.env.num_envs, samples,
                    samples % minibatch, samples)


def check_numbers_finite(config: TrainConfig) -> None:
    """``ConfigError`` for a NaN or infinite number (alone or in a list) in the learner, policy, pipeline or env
    group: range checks such as ``> 0`` let inf through, and the run then stopped at its first update with
    non-finite values (exit 3, reward_scale=inf) or trained on without a word (adam_eps=inf: nothing learns). A
    ``*clip*`` field may be inf, meaning no clip (``denoised_clip: .inf``, ``env.obs_clip``)."""
    for group in ("learner", "policy", "pipeline", "env"):
        check_fields_finite(getattr(config, group), group)


def check_fields_finite(node: Any, key: str) -> None:
    """``check_numbers_finite`` of one dataclass object, its fields named ``<key>.<field>``. A clip bound may be
    inf; a clip's epsilon may not (``grad_clip_eps=inf``: max_norm / (norm + eps) zeroed every gradient)."""
    for schema_field in dataclasses.fields(node):
        value = getattr(node, schema_field.name)
        # a dict's entries by their own keys (pipeline.online_learner.lr, learner.per_env_temperatures.hopper)
        entries = ({f"{schema_field.name}.{name}": entry for name, entry in value.items()} if isinstance(value, dict)
                   else {schema_field.name: value})
        for name, entry in entries.items():
            numbers = entry if isinstance(entry, list) else [entry]
            no_clip = "clip" not in name or name.endswith("eps")
            if any(isinstance(number, float) and not math.isfinite(number) and (no_clip or not math.isinf(number))
                   for number in numbers):
                raise ConfigError(f"{key}.{name} must be finite, got {entry!r}")


def check_group_names(config: TrainConfig) -> None:
    """``ConfigError`` when ``policy.family``, ``learner.name`` or ``pipeline.name`` was set apart from its
    group. They are in ``config.yaml`` and look editable, but the group chose the schema: ``policy.family=
    diffusion`` on the Gaussian group's config failed deep in the build (an AttributeError on a field the
    Gaussian config lacks). Heads of your own (``policy=custom policy.family=<module:Class>``) name themselves."""
    for group, name_key in (("policy", "family"), ("learner", "name"), ("pipeline", "name")):
        node = getattr(config, group)
        chosen = next((schema_field.default for schema_field in dataclasses.fields(node)
                       if schema_field.name == name_key), dataclasses.MISSING)
        value = getattr(node, name_key)
        if isinstance(chosen, str) and chosen not in ("", "???") and ":" not in chosen + value and value != chosen:
            raise ConfigError(f"{group}.{name_key}={value} does not match the {group} group, whose schema is "
                              f"{type(node).__name__} ({chosen}): choose the {group} with the group itself "
                              f"({group}={value}), not {group}.{name_key}")


def check_known_keys(node: Any, path: str = "") -> None:
    """``ConfigError`` for a key that no schema declares. Hydra refuses ``learner.lrr=1``, but its ``+``
    prefix (what its own error message suggests) adds the key with the schema's struct flag lifted, and
    ``OmegaConf.to_object`` then sets it as a stray attribute that nothing reads: the run would train
    with the value silently dropped. Dict-typed fields (``env.kwargs``, ``policy.kwargs``) hold free keys."""
    if not isinstance(node, DictConfig):
        return
    schema = OmegaConf.get_type(node)
    if dataclasses.is_dataclass(schema):
        fields = [schema_field.name for schema_field in dataclasses.fields(schema)]
        for key in node.keys():
            if key not in fields:
                close = difflib.get_close_matches(str(key), fields, n=1)
                hint = f" (did you mean {path}{close[0]}?)" if close else f"; its keys are {sorted(fields)}"
                raise ConfigError(f"{path}{key} is not a key of {schema.__name__}, so it would be ignored{hint}")
    for key in node.keys():
        if not OmegaConf.is_missing(node, key) and not OmegaConf.is_interpolation(node, key):
            check_known_keys(node[key], f"{path}{key}.")


def type_own_head(cfg: DictConfig) -> None:
    """Give a policy group of the user's own its head's schema: a yaml with ``family:
    my_pkg.heads:MyHead`` and the head's fields, no ``schema_<name>`` in its defaults, is typed and
    checked by ``MyHead.Config`` (the dataclass beside the head), as genpol's own heads are by theirs.
    ``ConfigError`` names a head that cannot be imported, declares no Config, or a key it lacks."""
    policy = cfg.get("policy") if isinstance(cfg, DictConfig) and "policy" in cfg else None
    if not isinstance(policy, DictConfig) or OmegaConf.get_type(policy) is not dict:
        return  # a schema already types it (genpol's heads, policy=custom), or there is no policy group
    family = policy.get("family")
    if not isinstance(family, str) or ":" not in family:
        return  # validate names the missing schema
    try:
        head = head_class(family)
    except ValueError as error:
        raise ConfigError(f"policy.family: {error}") from None
    if head.Config is None:
        raise ConfigError(f"policy.family={family}: {head.__name__} declares no Config, so its yaml cannot be typed; "
                          f"use policy=custom policy.family={family} +policy.kwargs.<name>=<value>, or give it a Config")
    try:
        typed = OmegaConf.merge(OmegaConf.structured(head.Config), policy)
    except (ConfigKeyError, ValidationError) as error:
        what = "has no such field" if isinstance(error, ConfigKeyError) else str(error.msg).splitlines()[0]
        raise ConfigError(f"policy.{error.key}: {head.__name__}'s {head.Config.__name__}: {what}; its fields are "
                          f"{sorted(f.name for f in dataclasses.fields(head.Config))}") from None
    with open_dict(cfg):
        cfg.policy = typed


def import_learner_modules(overrides: Sequence[str], config_dirs: Sequence[str | Path] = ()) -> None:
    """Import the module of a learner of the user's own before Hydra composes, so that its schema is
    registered (``register_configs``) when its yaml names it.

    The learner chosen by ``learner=<name>`` among ``overrides`` is looked up as
    ``<config dir>/learner/<name>.yaml`` in ``config_dirs`` (``--config-dir``); a ``module`` key
    there names the module to import, which calls ``register_learner``. genpol's own learners have
    no such key. A sweep's options (``learner=td3,sac``, ``learner=choice(td3,sac)``) are each looked up: the
    sweep's jobs compose in this process or in a launcher's workers that inherit its registry. An
    ``+experiment=<name>`` bundle found in ``config_dirs`` adds the learner its defaults list picks.
    ``ConfigError`` names a module that fails to import."""
    folders = [Path(directory).expanduser() for directory in config_dirs]  # "~/configs", as compose_config reads it
    names = [name for value in _chosen(overrides, "learner") for name in _options(value)]
    for bundle in (name for value in _chosen(overrides, "experiment") for name in _options(value)):
        # a bundle of the user's own that picks their learner in its defaults (override /learner: td3)
        path = next((folder / "experiment" / f"{bundle}.yaml" for folder in folders
                     if (folder / "experiment" / f"{bundle}.yaml").is_file()), None)
        bundle_config = OmegaConf.load(path) if path is not None else None
        # a bundle that is not a mapping is Hydra's to refuse, naming it, when it composes
        defaults = bundle_config.get("defaults") if isinstance(bundle_config, DictConfig) else None
        for entry in defaults or ():
            if isinstance(entry, DictConfig):
                names += [str(value) for key, value in entry.items()
                          if re.fullmatch(r"(?:override\s+)?/?learner", str(key)) and value is not None]
    for name in names:
        for folder in folders:
            path = folder / "learner" / f"{name}.yaml"
            if path.is_file():
                module = OmegaConf.load(path).get("module")
                if module:
                    learner(name, module=str(module))
                break


def _chosen(overrides: Sequence[str], group: str) -> list[str]:
    """The values ``overrides`` give the config group ``group`` (``learner=td3``, ``+experiment=mine``)."""
    return [item.split("=", 1)[1] for item in overrides if re.match(rf"^\+{{0,2}}{group}=", item)]


def _options(value: str) -> list[str]:
    """A group value's options: one name, or a sweep's (``td3,sac``, ``choice(td3, sac)``, ``[td3]``)."""
    sweep = re.fullmatch(r"\s*(?:choice\((.*)\)|\[(.*)\]|(.*))\s*", value, re.S)
    options = next(group for group in sweep.groups() if group is not None)
    return [option.strip().strip("'\"") for option in options.split(",")]


def config_dirs_of(argv: Sequence[str]) -> list[str]:
    """The ``--config-dir`` / ``-cd`` folders of a Hydra command line."""
    found = []
    for index, item in enumerate(argv):
        if item in ("--config-dir", "-cd") and index + 1 < len(argv):
            found.append(argv[index + 1])
        elif item.startswith("--config-dir="):
            found.append(item.split("=", 1)[1])
    return found


def _check_offline_data(config: TrainConfig, row: Any, offline_phase: bool) -> None:
    """``dataset.path`` and ``learner.offline_ratio`` must agree before anything is built: they were checked only
    once the run's folder and envs existed (a ratio without data only when the learner was built)."""
    ratio = getattr(config.learner, "offline_ratio", 0)
    if ratio > 0 and config.dataset.path is None:
        raise ConfigError(f"learner.offline_ratio={ratio} draws that share of every batch from offline data, but "
                          "dataset.path is not set: set it (a D4RL HDF5 file or a Minari id), or "
                          "learner.offline_ratio=0 to learn from online data only")
    if config.dataset.path is None or offline_phase:
        return
    if not row.off_policy:
        raise ConfigError(f"dataset.path is set, but learner={config.learner.name} learns on-policy and cannot use "
                          "offline data online: use pipeline=offline_to_online to pretrain on it, or an off-policy "
                          "learner (learner=sac) with learner.offline_ratio to mix it into every batch")
    if ratio == 0:  # read and held, then never sampled: refused, not wasted
        raise ConfigError(f"dataset.path is set, but learner.offline_ratio=0 mixes none of it into the batches of "
                          f"learner={config.learner.name}: set learner.offline_ratio (RLPD: 0.5), or drop dataset.path")


def check_groups(config: TrainConfig) -> None:
    """The checks that need two groups at once (policy with pipeline or learner); ``ConfigError``
    names the keys. May set ``policy.clip_final`` from the learner's clip range (one source of truth)."""
    row = learner(config.learner.name)
    if config.dataset.actions == "auto":  # resolved here, so that a saved config says which
        config.dataset.actions = "env" if row.off_policy else "min_max"
    if getattr(config.pipeline, "name", None) == "offline_to_online":
        require(config.dataset.path is not None, "dataset.path", "set for pipeline=offline_to_online",
                 config.dataset.path)
    offline_phase = getattr(config.pipeline, "name", None) == "offline_to_online"
    _check_offline_data(config, row, offline_phase)
    if offline_phase:
        _check_online_options(config, row)
    if getattr(config.learner, "offline_lr_decay", False) and not offline_phase:
        raise ConfigError("learner.offline_lr_decay decays the learning rate over the offline phase of "
                          f"pipeline=offline_to_online; pipeline={config.pipeline.name} has none")
    if getattr(config.env, "step_groups", 0) and row.off_policy:
        raise ConfigError(f"env.step_groups={config.env.step_groups} pipelines on-policy collection only; "
                          f"learner={config.learner.name} steps one action at a time, so set env.step_groups=0")
    if getattr(config.pipeline, "name", None) == "gorl":
        require(getattr(config.policy, "family", None) == "gorl", "policy", "gorl for pipeline=gorl (its stages "
                "retrain the latent-decoder head's decoder)", getattr(config.policy, "family", None))
        require(not row.off_policy, "learner", f"an on-policy learner ({', '.join(on_policy_names())}) for "
                "pipeline=gorl: the encoder is a latent Gaussian policy", config.learner.name)
    # the learner's and pipeline's values, flattened as a saved config.yaml is, for the table of unread options
    values = {"learner.name": config.learner.name, "pipeline.name": getattr(config.pipeline, "name", None),
              "policy.family": getattr(config.policy, "family", None),
              **{f"learner.{field}": value for field, value in vars(config.learner).items()}}
    for key, why in unread_options(values).items():
        moved(config, key, why)
    if isinstance(config.learner, MaxEntDPConfig):  # a per_env_temperatures key in another case, refused now
        config.learner.temperature(config.env.id)
    entropy_bonus = getattr(config.learner, "ent_coef", 0) if not row.off_policy else 0
    if entropy_bonus and not head_class(config.policy.family).has_entropy:
        # refused here, not when the learner is built after the run's folder is made (exit 1, a traceback)
        raise ConfigError(f"learner.ent_coef={config.learner.ent_coef} weighs the policy's entropy, but "
                          f"policy={config.policy.family} has none to give: set learner.ent_coef=0")
    if getattr(config.policy, "family", None) == "diffusion":
        policy, pipeline = config.policy, config.pipeline
        sampled = policy.ddim_steps if policy.use_ddim else policy.denoising_steps
        # a learner whose offline phase is its own loss (a Q-gradient actor) trains every denoising
        # step by that loss: the frozen copy is taken before it (random), no pretraining for frozen steps
        pretrained = (pipeline.name == "offline_to_online" and pipeline.pretrain_steps > 0
                      and row.offline_phase != "own_loss")
        if policy.ft_denoising_steps < sampled and not pretrained:
            # the early steps run a frozen copy of the weights that pretraining leaves; with no
            # pretraining that copy is the random initialization, and those steps never learn
            q_gradient = row.offline_phase == "own_loss"
            if q_gradient and pipeline.name == "offline_to_online" and pipeline.pretrain_steps > 0:
                why = f"learner={config.learner.name}'s offline phase trains by its own loss, not by behaviour cloning"
            elif pipeline.name == "offline_to_online":
                why = "pipeline=offline_to_online with pretrain_steps=0 pretrains nothing"
            else:
                why = f"pipeline={pipeline.name} pretrains nothing"
            raise ConfigError(
                f"policy.ft_denoising_steps={policy.ft_denoising_steps} fine-tunes only the last "
                f"{policy.ft_denoising_steps} of {sampled} denoising steps and freezes the first "
                f"{sampled - policy.ft_denoising_steps} at their behaviour-cloned weights, but {why}, so they "
                f"would stay at their random initialization. Set policy.ft_denoising_steps={sampled}"
                + ("." if q_gradient else ", or pretrain with pipeline=offline_to_online.")
            )
        updater_clip = getattr(config.learner, "clip_range", None)
        if updater_clip is None:  # TRPO: a KL trust region, no clip for a schedule to shape
            for key in ("clip_base", "clip_final"):
                require(getattr(policy, key) is None, f"policy.{key}",
                         f"null with learner={config.learner.name} (it has no clip range)", getattr(policy, key))
        else:
            # one source of truth for the last step's clip: the updater's clip_range
            if policy.clip_final is not None and abs(policy.clip_final - updater_clip) > 1e-12:
                raise ConfigError(
                    f"policy.clip_final={policy.clip_final} and learner.clip_range={updater_clip} both set "
                    "the last denoising step's clip; set learner.clip_range only (and policy.clip_base "
                    "for a schedule that starts lower at the noisiest step)"
                )
            if policy.clip_base is not None:
                policy.clip_final = updater_clip


def moved(config: TrainConfig, key: str, why: str) -> None:
    """``ConfigError`` where ``key`` (``group.field``, or a root field), an option nothing reads in this
    configuration, was moved from its default: the run would have trained as if it had not been."""
    *group, name = key.split(".")
    holder = getattr(config, group[0]) if group else config  # a root key (update_threads) has no group
    value, default = getattr(holder, name, None), schema_default(config, key)
    if hasattr(holder, name) and value != default:
        raise ConfigError(f"{key}={value!r} is not read: {why}")


def _changed(schema_object: Any, options: dict[str, Any], key: str) -> Any:
    """``schema_object`` with ``options`` merged in, typed and checked as the group's own keys are;
    ``ConfigError`` names ``key``.<field>."""
    try:
        merged = OmegaConf.to_object(OmegaConf.merge(OmegaConf.structured(schema_object), options))
    except (ValidationError, ConfigKeyError) as error:
        raise ConfigError(f"{key}.{error.full_key}: {error.msg.splitlines()[0]}") from None
    except ConfigError as error:  # a range check of the group's __post_init__, which names the group's key
        raise ConfigError(f"{key}: {error}") from None
    check_fields_finite(merged, key)  # lr=inf here was found only when the online phase began, after pretraining
    return merged


def _check_online_options(config: TrainConfig, row: Any) -> None:
    """``pipeline.online_learner``, ``online_policy`` and ``online_reset``: fields the learner and the head
    can change between the phases, with values their schemas accept, and resets for a learner that runs
    both phases."""
    pipeline = config.pipeline
    if pipeline.online_reset and row.offline_phase != "own_loss":
        raise ConfigError(f"pipeline.online_reset={list(pipeline.online_reset)} starts parts of the learner afresh "
                          f"online, but learner={row.name} is built for the online phase only (the offline phase is "
                          "behaviour cloning), so all of it starts afresh: remove pipeline.online_reset")
    if pipeline.online_learner:
        if row.offline_phase != "own_loss":
            settings = " ".join(f"learner.{k}={v}" for k, v in pipeline.online_learner.items())
            raise ConfigError(f"pipeline.online_learner changes the learner between its phases, but learner={row.name} "
                              "is built for the online phase only (the offline phase is behaviour cloning): set "
                              f"{settings} instead")
        refused = sorted(set(pipeline.online_learner) - row.online_options)
        if refused:
            raise ConfigError(f"pipeline.online_learner: learner={row.name} cannot change {refused} between the "
                              f"phases; it can change {sorted(row.online_options)}")
        _changed(config.learner, pipeline.online_learner, "pipeline.online_learner")
    if pipeline.online_policy:
        try:
            head = head_class(config.policy.family)
        except ValueError as error:
            raise ConfigError(f"policy.family: {error}") from None
        refused = sorted(set(pipeline.online_policy) - head.online_options)
        if refused:
            can = sorted(head.online_options)
            raise ConfigError(f"pipeline.online_policy: policy={config.policy.family} cannot change {refused} once "
                              f"built; it can change {can if can else 'none of its fields'}")
        _changed(config.policy, pipeline.online_policy, "pipeline.online_policy")


def check_learner(cfg: Any) -> None:
    """Raise ``ConfigError`` when ``cfg.policy``'s head lacks a capability ``cfg.learner`` needs, or
    pretraining needs (imitation), naming head, learner and the missing capabilities; or when an
    off-policy learner meets a head that acts in chunks."""
    row = learner(cfg.learner.name)
    try:
        head = head_class(cfg.policy.family)
    except ValueError as error:
        raise ConfigError(f"policy.family: {error}") from None
    try:
        check_capabilities(head, f"learner={cfg.learner.name}", row.needs)
        if cfg.pipeline.name == "offline_to_online":
            check_capabilities(head, "pipeline=offline_to_online (behaviour cloning)", {Capability.IMITATION})
    except HeadCapabilityError as error:
        needs = set(row.needs) | ({Capability.IMITATION} if cfg.pipeline.name == "offline_to_online" else set())
        able = [f"policy={family}" for family, cls in HEADS.items() if needs <= set(cls.capabilities)]
        raise ConfigError(f"policy={cfg.policy.family} with learner={cfg.learner.name}: {error}; the heads that "
                          f"have what it needs: {', '.join(able) or 'none of genpol'}") from None
    for capability, why in head.lacks(cfg.policy).items():  # declared, but not as configured
        if capability in row.needs:
            raise ConfigError(f"policy={cfg.policy.family} with learner={cfg.learner.name}: {why}")
    chunk = (getattr(cfg.policy, "act_steps", 1), getattr(cfg.policy, "horizon_steps", 1))
    if chunk != (1, 1) and row.off_policy:
        raise ConfigError(f"learner={cfg.learner.name} learns from one-step transitions (its critics value single "
                          f"actions), but policy={cfg.policy.family} acts in chunks (policy.act_steps={chunk[0]}, "
                          f"policy.horizon_steps={chunk[1]}): set policy.act_steps=1 policy.horizon_steps=1")
    if getattr(cfg.learner, "kl_reduction", "sum") == "mean" and cfg.policy.family != "gaussian":
        # the updater divides the head's KL by act_dim: a diagonal Gaussian's summed KL becomes sb3-contrib's
        # mean; a diffusion head's KL is already a mean, and a chunk's act_dim is not the dimensions it sums
        raise ConfigError(f"learner.kl_reduction=mean is sb3-contrib's KL, a diagonal Gaussian's averaged over its "
                          f"action dimensions: policy=gaussian only (got policy={cfg.policy.family}); use "
                          f"learner.kl_reduction=sum")
