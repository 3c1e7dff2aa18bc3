"""Import the user's own modules before an env is built: ``gym:my_pkg:MyReach-v0``, ``imports=[...]``.

A user's task lives in their own package, which registers gymnasium ids or defines a batched
backend when it is imported. genpol imports it (1) where an id names it (``gym:<module>:<id>``, as
gymnasium's own ``module:EnvId`` form, and ``custom:<module>:<factory>``), and (2) from an explicit
list (``genpol.envs.make(..., imports=[...])``, config ``env.imports``) for modules that register ids
under a plain name. Env worker processes start with ``spawn`` and import the same list before they
build their slice, and policy checkpoints record it, so evaluation in a fresh process imports it too.
"""

from __future__ import annotations

import importlib
import re
from types import ModuleType
from typing import Iterable

from .core import EnvError

MODULE_NAME = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)*$")


def is_module_name(name: str) -> bool:
    """True for a dotted Python module name such as ``my_pkg.envs``."""
    return isinstance(name, str) and MODULE_NAME.match(name) is not None


def import_user_module(name: str, named_by: str) -> ModuleType:
    """Import ``name``; an ``EnvError`` of one line naming the module, ``named_by`` and the cause.

    ``named_by`` says where the name came from (an env id, or ``env.imports``), so that the message
    points at the setting to fix. The original exception is chained for Python callers.
    """
    if not is_module_name(name):
        raise EnvError(f"'{name}' (in {named_by}) is not a module name; expected a dotted name such as my_pkg.envs")
    try:
        return importlib.import_module(name)
    except ModuleNotFoundError as error:
        missing = error.name or ""
        if name == missing or name.startswith(missing + "."):  # the module itself, not one of its imports
            raise EnvError(f"cannot import module '{name}' (named by {named_by}): {type(error).__name__}: "
                           f"{_first_line(error)}; is it installed, or its directory on PYTHONPATH?") from error
        raise EnvError(f"module '{name}' (named by {named_by}) failed to import: "
                       f"{type(error).__name__}: {_first_line(error)}") from error
    except Exception as error:  # noqa: BLE001 - anything the user's module raises, named in one line
        raise EnvError(f"module '{name}' (named by {named_by}) failed to import: "
                       f"{type(error).__name__}: {_first_line(error)}") from error


def import_user_modules(names: Iterable[str], named_by: str = "imports") -> None:
    """Import each of ``names`` in order (see ``import_user_module``)."""
    for name in names:
        import_user_module(name, named_by)


def merge_imports(*groups: Iterable[str]) -> tuple[str, ...]:
    """The modules of ``groups`` in order of first appearance, each once."""
    return tuple(dict.fromkeys(name for group in groups for name in group))


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    return text.splitlines()[0] if text else "(no message)"
