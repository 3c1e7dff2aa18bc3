"""Shared pieces of the config schema: the error type and the range check that names the key."""

from __future__ import annotations

from typing import Any

ENV_BACKENDS = ("gym", "dmc", "playground", "envpool", "genpol", "custom")
ACTIVATION_NAMES = ("tanh", "relu", "elu", "gelu", "mish", "silu")


class ConfigError(ValueError):
    """A config value out of its range; the message names the full key."""


def require(condition: bool, key: str, requirement: str, value: Any) -> None:
    """Raise ``ConfigError("<key> must be <requirement>, got <value>")`` unless ``condition``."""
    if not condition:
        raise ConfigError(f"{key} must be {requirement}, got {value!r}")
