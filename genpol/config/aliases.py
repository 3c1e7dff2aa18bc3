"""Config keys that were renamed, and the translation that keeps old commands and runs working.

``RENAMED`` maps an old top-level key to its new name. Old command lines and API overrides
(``updater=sac``, ``updater.lr=1e-3``, ``+updater.x=1``) are rewritten with a warning that names
the new key; a run directory saved under the old name (its ``config.yaml``) is read under the new
one, so it resumes and reports with the runs saved after the change.
"""

from __future__ import annotations

import re
import warnings
from typing import Any, Sequence

RENAMED: dict[str, str] = {
    "updater": "learner",  # 2026-12-02: the group selects every learner, SAC included
}

# an override: optional +, ++ or ~, a dotted key, then =value or nothing (a deletion)
_OVERRIDE = re.compile(r"^(?P<prefix>\+\+|\+|~)?(?P<head>[A-Za-z_][\w-]*)(?P<rest>[.@=].*)?$", re.S)


def rename_overrides(items: Sequence[str]) -> list[str]:
    """``items`` (Hydra overrides or command-line arguments) with renamed keys in their new name;
    anything that is not an override (``--multirun``, ``-m``) passes unchanged. Warns once per key."""
    renamed, seen = [], set()
    for item in items:
        match = _OVERRIDE.match(item)
        # a bare word (no "=", ".", "@" and no "~") is no override: a positional argument, e.g. a folder named so
        is_override = match and (match["rest"] is not None or match["prefix"] == "~")
        if is_override and match["head"] in RENAMED:
            old, new = match["head"], RENAMED[match["head"]]
            item = f"{match['prefix'] or ''}{new}{match['rest'] or ''}"
            if old not in seen:
                seen.add(old)
                warnings.warn(f"'{old}' is now '{new}': write {new}=... and {new}.<key>=... ({old} still works)",
                              FutureWarning, stacklevel=2)
        renamed.append(item)
    return renamed


def rename_saved(config: dict[str, Any]) -> dict[str, Any]:
    """A saved config (``config.yaml`` as a dict) with its renamed top-level keys in their new name."""
    return {RENAMED.get(key, key): value for key, value in config.items()}


def quoted(path: Any) -> str:
    """``path`` as a quoted Hydra override value: a folder named ``seed=1,lr=3e-4`` (as sweeps name them) is
    one string, not Hydra syntax."""
    return "'" + str(path).replace("\\", "\\\\").replace("'", "\\'") + "'"
