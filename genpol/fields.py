"""``FixedFields``: config dataclasses that refuse to be given an attribute they do not declare.

A validated config is a plain dataclass, and Python sets any attribute on one: ``config.learner.lrr = 1e-3``
(``lr`` misspelt) was accepted, and the run trained at the old rate without a word. Hydra refuses such a key
when it composes; this refuses it on the built object, naming the closest field. It imports nothing of genpol,
so every layer's configs (the heads' among them) can use it. ``schema_default``: a field's dataclass default.
"""

from __future__ import annotations

import dataclasses
import difflib
from typing import Any

__all__ = ["FixedFields", "NO_DEFAULT", "schema_default"]

NO_DEFAULT = object()  # schema_default's answer for a key without a default


class FixedFields:
    """Mixed into a config dataclass: setting a name that is not one of its fields raises ``AttributeError``."""

    __slots__ = ()

    def __setattr__(self, name: str, value: Any) -> None:
        if dataclasses.is_dataclass(self) and name not in (names := [f.name for f in dataclasses.fields(self)]):
            close = difflib.get_close_matches(name, names, n=1)
            hint = f"; did you mean '{close[0]}'?" if close else ""
            raise AttributeError(f"{type(self).__name__} has no field '{name}' to set{hint} (its fields: "
                                 f"{', '.join(names)})")
        object.__setattr__(self, name, value)


def schema_default(cfg: Any, key: str) -> Any:
    """The dataclass default of a dotted config key (``dataset.format``) of the config object ``cfg``, or
    ``NO_DEFAULT`` if it has none. (Resuming: a key missing from a saved config but at its default is a field
    added to genpol after the run started, which computed exactly what the default computes. Validating: an
    option a pipeline or learner does not read is refused only where it was moved from its default.)"""
    *parents, name = key.split(".")
    node = cfg
    for parent in parents:
        node = getattr(node, parent, None)
    if not dataclasses.is_dataclass(node):
        return NO_DEFAULT
    for schema_field in dataclasses.fields(node):
        if schema_field.name == name:
            if schema_field.default is not dataclasses.MISSING:
                return schema_field.default
            if schema_field.default_factory is not dataclasses.MISSING:
                return schema_field.default_factory()
    return NO_DEFAULT
