"""The Python API: the same configs as the command line, composed from keyword arguments.

    from genpol.api import evaluate, load_policy, train

    summary = train(env="gym:Hopper-v5", total_steps=200_000, run_dir="runs/hopper")
    results = evaluate("runs/hopper", episodes=10, video=True)
    policy = load_policy("runs/hopper")
    action = policy.predict(raw_observation)
"""

from __future__ import annotations

import difflib
import re
import time
import warnings
from pathlib import Path
from typing import Any, Iterable, Sequence

import torch
from hydra import compose, initialize_config_module
from hydra.errors import HydraException
from omegaconf import DictConfig

from genpol.config.aliases import quoted, rename_overrides
from genpol.config.base import check_run_dir, claim_new_dir, release_new_dir
from genpol.configure import import_learner_modules, register_configs, validate
from genpol.errors import ConfigError
from genpol.policy import TrainedPolicy


def compose_config(overrides: Sequence[str] = (), config_name: str = "config",
                   config_dirs: Sequence[str | Path] = (), return_hydra_config: bool = False) -> DictConfig:
    """Compose genpol's ``<config_name>.yaml`` (the installed ``genpol.configs``) with Hydra
    command-line style ``overrides``.

    ``config_dirs``: folders of your own config groups (Hydra's search path, as ``--config-dir``
    on the command line): ``my_dir/experiment/mine.yaml`` is then ``+experiment=mine``. genpol's
    own folder is searched first, so give your files names genpol's groups do not use. A lone string
    is one override or one folder.

    ``return_hydra_config``: keep Hydra's own node (``cfg.hydra``: the launcher, the sweeper), as a job sees it.

    Raises ``ConfigError`` where Hydra cannot compose (an unknown group option, a value of the wrong
    type), with Hydra's reason in the message (and the original exception as its cause).
    """
    overrides, config_dirs = _as_list(overrides, "overrides"), _as_list(config_dirs, "config_dirs")
    for folder in config_dirs:  # a misspelt one was searched in vain: Hydra blamed the group option it lacked
        if not Path(folder).expanduser().is_dir():
            where = Path(folder).expanduser().resolve()
            raise ConfigError(f"config_dirs: {folder} is not a directory (looked for {where})")
    overrides = rename_overrides(overrides)
    for item in overrides:  # the groups' typed schemas sit beside their options in Hydra's store, not choices
        chosen = re.match(r"^\+{0,2}(\w+)=(schema_\w+)$", str(item))
        if chosen:
            raise ConfigError(f"{chosen[1]}={chosen[2]}: {chosen[2]} is the {chosen[1]} group's typed schema, not "
                              f"one of its options; choose an option ({chosen[1]}={chosen[2][len('schema_'):]}?)")
    import_learner_modules(overrides, config_dirs)  # a learner of the user's own registers its schema
    register_configs()
    extra = [f"hydra.searchpath=[{','.join('file://' + str(Path(d).expanduser().resolve()) for d in config_dirs)}]"
             ] if config_dirs else []
    with initialize_config_module(config_module="genpol.configs", version_base="1.3"):
        try:
            return compose(config_name=config_name, overrides=[*extra, *overrides],
                           return_hydra_config=return_hydra_config)
        except HydraException as error:  # one error type for the API's bad input, with Hydra's reason in it
            _name_unknown_key(error, [*extra, *overrides], config_name)
            cause = f": {error.__cause__}" if error.__cause__ is not None else ""
            message = f"{error}{cause}".split("Config search path")[0]  # the folders searched: noise here
            message = re.sub(r"\s+schema_\w+", "", message)  # the schemas' entries are not choices
            missing = re.search(r"Could not find '(\w+)/([^']+)'.*?Available options in '\w+':(.*)", message, re.S)
            close = difflib.get_close_matches(missing[2], missing[3].split(), n=1) if missing else []
            if close:  # learner=sacc
                message += f" (did you mean {missing[1]}={close[0]}?)"
            clash = re.search(r"In 'experiment/([\w-]+)'.*Key '\w+' not in '\w+'\s+full_key: (\w+)\.", message, re.S)
            if clash:  # a group chosen beside the bundle wins over the bundle's choice, whose keys then fit nothing
                message += (f" (the bundle +experiment={clash[1]} sets {clash[2]} keys of its own {clash[2]} group; "
                            f"a {clash[2]}= given beside it replaced that group: give one of the two)")
            raise ConfigError(" ".join(message.split())) from error


def _name_unknown_key(error: HydraException, overrides: list[str], config_name: str) -> None:
    """For a key no schema declares (``learner.lrr=1``, ``learnr=sac``), the ``ConfigError`` that its ``+``
    form gets from validation, naming the key and the one it may have meant: Hydra's own message suggests the
    ``+``, which would add a key nothing reads. Returns where the error is another, or the ``+`` form composes
    without a refusal."""
    from genpol.configure import check_known_keys, type_own_head

    unknown = re.match(r"Could not override '([\w.]+)'", str(error))
    if not unknown or "not in" not in f"{error} {error.__cause__}":
        return
    key = unknown[1]
    items = [f"+{item}" if str(item).split("=", 1)[0] == key else item for item in overrides]
    try:
        cfg = compose(config_name=config_name, overrides=items)
    except HydraException:
        return
    type_own_head(cfg)  # a head of the user's own: the key checked against its Config
    check_known_keys(cfg)


def _as_list(items: Any, name: str) -> list[Any]:
    """A list argument as a list; a lone string or path is one item (iterating it would split it into
    characters, each taken for an override or a folder)."""
    if isinstance(items, (str, Path)):
        return [items]
    if not isinstance(items, Iterable):
        raise TypeError(f"{name} must be a list, got {type(items).__name__}: {items!r}")
    return list(items)


def _env_overrides(env: str) -> list[str]:
    """``"hopper"`` selects the env group; ``"gym:Hopper-v5"`` selects backend and id directly."""
    if ":" in env:
        backend, _, name = env.partition(":")
        group = {"genpol": "multigoal"}.get(backend, backend)
        return [f"env={group}", f"env.backend={backend}", f"env.id={name}"]
    return [f"env={env}"]


def train(
    env: str | None = None,
    policy: str | None = None,
    learner: str | None = None,
    *,
    total_steps: int | None = None,
    seed: int | None = None,
    run_dir: str | Path | None = None,
    overrides: Sequence[str] = (),
    config_dirs: Sequence[str | Path] = (),
    updater: str | None = None,
) -> dict[str, Any]:
    """Train one run and return its summary (the contents of ``summary.json``).

    Args:
        env: an env group (``"halfcheetah"``, ``"multigoal"``) or an id (``"gym:Pendulum-v1"``); None: the
            config's choice, an ``+experiment=`` bundle's in ``overrides`` or else ``halfcheetah``. A name given
            here wins over a bundle's, as on the command line.
        policy: a policy group (``"gaussian"``); None: the bundle's, else ``gaussian``.
        learner: a learner group (``"ppo"``, ``"sac"``; ``genpol.algorithms.registry``); None: the bundle's,
            else ``ppo``.
        total_steps: env steps (default: the config's).
        seed: the run's seed (default: the config's, 0).
        run_dir: run directory (default: a new ``runs/<date>/<time>``, ``..._1`` if that exists, as the CLI's); an
            existing run resumes when called with the same groups and overrides (the config is composed
            again and compared with the saved one: only budgets, logging and evaluation may change).
        overrides: further Hydra overrides, e.g. ``["learner.lr=1e-3", "env.num_envs=16"]``. One that sets a key
            the arguments set too (a group, ``env.backend`` and ``env.id`` of an id, the seed, total_steps) must
            agree with it (else ConfigError).
        config_dirs: folders of your own config groups (see ``compose_config``).
        updater: the old name of ``learner`` (accepted with a warning).

    Raises (in ``genpol.errors``, ``EnvError`` in ``genpol.envs``; the CLI's exit codes in brackets):
    ``ConfigError`` for a config that cannot train or differs from the run's saved one, ``EnvError``,
    ``DatasetError``, ``CheckpointError`` (2);
    ``NonFiniteError`` when training diverged (3); ``TrainingInterrupted`` after Ctrl-C or SIGTERM, with a
    checkpoint written: the same call resumes (4). ``TrainingInterrupted`` is a ``RuntimeError``, not a
    ``KeyboardInterrupt``.
    """
    from genpol.train import run_training

    extra = _as_list(overrides, "overrides")
    # an override's run_dir is Hydra syntax (quoted, interpolated): the folder is the composed config's, read below
    run_dir_overridden = any(re.match(r"^\+{0,2}run_dir=", item) for item in extra)
    if run_dir is not None:
        check_run_dir(str(run_dir))  # "" is Path("") == ".": the run went into the working directory
        run_dir = Path(run_dir).expanduser()  # "~/runs/x" made a folder named ~ in the working directory
    if updater is not None:
        if learner is not None and learner != updater:
            raise ConfigError(f"train(): learner={learner} and updater={updater} (its old name) differ: give learner")
        warnings.warn(f"train(updater=...) is now train(learner=...); using learner={updater!r}", FutureWarning,
                      stacklevel=2)
        learner = updater
    arguments = {"seed": seed, "total_steps": total_steps}
    env_items = _env_overrides(env) if env is not None else []
    groups = [*env_items,
              *(f"{group}={name}" for group, name in (("policy", policy), ("learner", learner)) if name is not None)]
    given = dict(item.split("=", 1) for item in groups)
    given.update({key: str(value) for key, value in arguments.items() if value is not None})
    for key, value in given.items():
        # an argument and an override of the same key: one silently won (the override a group, env.id or the
        # seed, the argument total_steps), against the docstring's promise
        pattern = "learner|updater" if key == "learner" else re.escape(key)
        named = [item.split("=", 1)[1] for item in extra if re.match(rf"^\+{{0,2}}(?:{pattern})=", item)]
        if named and named[-1] != value:
            raise ConfigError(f"train(): {key}={value} (from the arguments) and the override {key}={named[-1]} "
                              "differ: give one")
    claimed = run_dir is None and not run_dir_overridden
    if claimed:  # the command line's default folder, after the checks of the arguments (a refusal left it empty)
        run_dir = Path(claim_new_dir(str(Path("runs") / time.strftime("%Y-%m-%d") / time.strftime("%H-%M-%S"))))
    items = [*groups, *(f"{key}={value}" for key, value in arguments.items() if value is not None),
             *([] if run_dir_overridden else [f"run_dir={quoted(run_dir)}"]), *extra]
    try:
        config = validate(compose_config(items, config_dirs=config_dirs))
    except Exception:
        if claimed:  # the folder this call made for a run that never started
            release_new_dir(run_dir)
        raise
    if run_dir_overridden:  # the folder the config records, its quotes and interpolations resolved
        composed = Path(config.run_dir).expanduser()
        if run_dir is not None and composed != run_dir:
            raise ConfigError(f"train(): run_dir={run_dir} and the override run_dir={config.run_dir} differ: give one")
        run_dir, config.run_dir = composed, str(composed)
    threads = torch.get_num_threads()  # the run sets torch_threads for itself; the caller's count comes back
    try:
        return run_training(config, run_dir)
    finally:
        torch.set_num_threads(threads)


def evaluate(run_dir: str | Path, episodes: int = 10, video: bool = False, *, checkpoint: str | None = None,
             video_dir: str = "videos", seed: int = 10_000, device: str = "cpu", torch_threads: int = 1
             ) -> dict[str, Any]:
    """Deterministic and stochastic mean returns of a run's latest (or a given) checkpoint, as
    ``genpol-evaluate`` computes them (``device`` and ``torch_threads`` too: the training default, 1 thread,
    reproduces the run's own evaluation exactly)."""
    from genpol.evaluate import evaluate_run

    items = [f"run_dir={quoted(run_dir)}", f"episodes={episodes}", f"video={str(video).lower()}",
             f"video_dir={quoted(video_dir)}", f"seed={seed}", f"device={quoted(device)}",
             f"torch_threads={torch_threads}"]
    if checkpoint is not None:
        items.append(f"checkpoint={quoted(checkpoint)}")
    return evaluate_run(validate(compose_config(items, config_name="evaluate")))


def load_policy(path: str | Path, device: str = "cpu") -> TrainedPolicy:
    """A trained policy from a run directory (latest checkpoint) or a checkpoint directory."""
    return TrainedPolicy.load(path, device=device)
