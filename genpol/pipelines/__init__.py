"""Pipelines: what one ``python -m genpol.train`` run does, chained from the loops of
``genpol.runners``. ``online`` (one loop, on- or off-policy, optionally with offline data mixed in),
``offline_to_online`` (behaviour cloning or offline RL on a dataset, then online fine-tuning) and
``gorl`` (GoRL's stages: encoder, collection, decoder; ``genpol.pipelines.gorl``).

``PIPELINES`` maps the ``pipeline`` config group's names to their functions ``(cfg, run_dir) ->
summary``."""

from __future__ import annotations

from typing import Any, Callable

from genpol.pipelines.gorl import train_gorl
from genpol.pipelines.offline_to_online import train_offline_to_online
from genpol.pipelines.online import train_online

PIPELINES: dict[str, Callable[[Any, Any], dict[str, Any]]] = {
    "online": train_online, "offline_to_online": train_offline_to_online, "gorl": train_gorl}

__all__ = ["PIPELINES", "train_online", "train_offline_to_online", "train_gorl"]
