"""Which gymnasium id an ``env.id`` of the gym backend names, and what to import to rebuild it elsewhere.

``env.id`` is ``[<module>:]<gymnasium id>``: the module (the user's package, which registers its ids when
imported) is imported first. An id registered by an optional package (gymnasium-robotics) imports it;
an unknown id is an ``EnvError`` that suggests the nearest registered ones.
"""

from __future__ import annotations

import difflib
import sys

import gymnasium as gym

from .core import EnvError
from .goal_envs import provider_of
from .imports import import_user_module


def _suggest_gym_id(env_id: str) -> str:
    close = difflib.get_close_matches(env_id, list(gym.registry.keys()), n=3, cutoff=0.6)
    return f" Did you mean {', '.join('gym:' + c for c in close)}?" if close else ""


def newer_version_hint(gym_id: str) -> str:
    """`` Use gym:Hopper-v5.`` for an id of a version that gymnasium still registers but no longer builds
    (the mujoco-py ``-v2``/``-v3`` of D4RL's era), where a newer version of the same env is registered."""
    name, _, version = gym_id.rpartition("-v")
    newer = sorted((key for key in gym.registry if key.rpartition("-v")[0] == name
                    and key.rpartition("-v")[2].isdigit() and version.isdigit()
                    and int(key.rpartition("-v")[2]) > int(version)), key=lambda key: int(key.rpartition("-v")[2]))
    return f" Use gym:{newer[-1]}." if newer else ""


# Ids that appeared in gymnasium's registry while genpol imported a module (the module's own
# registrations), for the error that lists what a module registers.
_REGISTERED_ON_IMPORT: dict[str, set[str]] = {}


def _entry_point_module(gym_id: str) -> str | None:
    entry = gym.spec(gym_id).entry_point
    return entry.partition(":")[0] if isinstance(entry, str) else getattr(entry, "__module__", None)


def ids_registered_by(module_name: str) -> list[str]:
    """The gymnasium ids that ``module_name`` registered when genpol imported it, and the ids whose
    entry point lives in that module or below it (when the user imported it first)."""
    ids = set(_REGISTERED_ON_IMPORT.get(module_name, ()))
    for gym_id in gym.registry:
        module = _entry_point_module(gym_id) or ""
        if module == module_name or module.startswith(module_name + "."):
            ids.add(gym_id)
    return sorted(ids)


def resolve_gym_id(env_id: str) -> tuple[str, tuple[str, ...]]:
    """``"[<module>:]<gymnasium id>"`` -> ``(gymnasium id, modules to import to rebuild it elsewhere)``.

    With a module (gymnasium's own ``module:EnvId`` form) the module is imported first, and the id
    carries it, so nothing more needs recording. Without one, an id whose entry point lives outside
    gymnasium (registered by the user's package, imported by the user) records its entry point's
    module: importing it in an env worker or at evaluation registers the id again (importing a
    module first imports its parent packages, where registration usually happens).
    """
    module_name, sep, gym_id = env_id.rpartition(":")
    if sep:
        first_import = module_name not in sys.modules
        before = set(gym.registry) if first_import else set()
        import_user_module(module_name, f"gym:{env_id}")
        if first_import:
            _REGISTERED_ON_IMPORT[module_name] = set(gym.registry) - before
        if gym_id not in gym.registry:
            registered = ids_registered_by(module_name)
            listing = ", ".join(registered) if registered else "none (does it call gymnasium.register on import?)"
            close = difflib.get_close_matches(gym_id, registered, n=1)
            hint = f" Did you mean gym:{module_name}:{close[0]}?" if close else ""
            raise EnvError(f"module '{module_name}' registers no gymnasium id '{gym_id}' (in gym:{env_id}); "
                           f"the ids it registers: {listing}.{hint}")
        return gym_id, ()
    provider = provider_of(gym_id)
    if gym_id not in gym.registry and provider is not None:
        try:
            import_user_module(provider, f"gym:{env_id}")
        except EnvError as error:
            raise EnvError(f"gym:{env_id} is registered by the optional package {provider}, which failed to import "
                           f"(pip install gymnasium-robotics): {error}") from None
    if gym_id not in gym.registry:
        raise EnvError(f"unknown gymnasium id 'gym:{env_id}'.{_suggest_gym_id(env_id)} If a module of yours "
                       f"registers it, name the module: gym:<module>:{env_id}, or env.imports=[<module>]")
    module = _entry_point_module(gym_id)
    if not module or module.partition(".")[0] in ("gymnasium", "__main__", "__mp_main__"):
        return gym_id, ()
    return gym_id, (module,)
