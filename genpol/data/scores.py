"""D4RL normalized scores: 100 * (return - random) / (expert - random), with D4RL's reference returns.

The references are D4RL's (``d4rl/infos.py``, the ``<env>-random-v0`` entries that every -v2 dataset
reuses). genpol evaluates on gymnasium's -v5 envs: Hopper-v5 and HalfCheetah-v5 keep the v2
observation layout and reward (Hopper scores 1.0 less per terminated episode, at most 0.03
normalized points); Walker2d-v5 changes foot friction (use ``xml_file=walker2d.xml``) and Ant-v5
changes observations, so their scores compare only approximately.
"""

from __future__ import annotations

import re

import numpy as np

from genpol.errors import DatasetError

D4RL_REFERENCE = {  # env: (random return, expert return)
    "halfcheetah": (-280.178953, 12135.0),
    "hopper": (-20.272305, 3234.3),
    "walker2d": (1.629008, 4592.3),
    "ant": (-325.6, 3879.7),
}


# the backends whose envs are D4RL's MuJoCo tasks: dm_control's hopper-hop is another robot, reward and scale
D4RL_BACKENDS = ("gym", "envpool")


def d4rl_env_name(env_id: str) -> str | None:
    """``"gym:Hopper-v5"`` or ``"hopper-medium-v2"`` (a dataset's name) -> ``"hopper"``; None if not a D4RL
    locomotion task (``"dmc:hopper-hop"``: a backend other than ``D4RL_BACKENDS``)."""
    backend, sep, name = env_id.partition(":")
    if sep and backend not in D4RL_BACKENDS:
        return None
    tokens = re.split(r"[^a-z0-9]+", (name if sep else env_id).lower())  # whole words: not antmaze -> ant
    return next((env for env in D4RL_REFERENCE if env in tokens), None)


def d4rl_normalized_score(env_name: str, returns: float | np.ndarray) -> float | np.ndarray:
    if env_name not in D4RL_REFERENCE:
        raise ValueError(f"no D4RL reference returns for '{env_name}'; known: {sorted(D4RL_REFERENCE)}")
    return normalized_score(D4RL_REFERENCE[env_name], returns)


def reference_returns(metadata: dict, env_id: str, source: str = "the dataset") -> tuple[float, float] | None:
    """``(random, expert)`` returns for normalized scores: the dataset's own ``ref_min_score`` /
    ``ref_max_score`` when it has them (a Minari dataset's metadata, or a D4RL file's ``metadata/``
    group, as ``genpol.data.maze_dataset`` writes; never mixed with D4RL's), else D4RL's for the
    env's task. ``DatasetError`` naming ``source`` for stored ones that are not two finite numbers, min below
    max (a string was a bare ValueError at the run's start, equal ones an inf score in the summary)."""
    for prefix in ("", "metadata/"):
        low, high = metadata.get(f"{prefix}ref_min_score"), metadata.get(f"{prefix}ref_max_score")
        if low is not None and high is not None:
            try:
                low, high = float(np.asarray(low).item()), float(np.asarray(high).item())
            except (TypeError, ValueError):
                low = high = float("nan")
            if not (np.isfinite(low) and np.isfinite(high) and low < high):
                raise DatasetError(f"{source}: {prefix}ref_min_score / {prefix}ref_max_score must be finite numbers, "
                                   f"min below max, got {metadata[f'{prefix}ref_min_score']!r} / "
                                   f"{metadata[f'{prefix}ref_max_score']!r}")
            return low, high
    name = d4rl_env_name(env_id)
    return None if name is None else D4RL_REFERENCE[name]


def normalized_score(references: tuple[float, float], returns: float | np.ndarray) -> float | np.ndarray:
    """``100 * (returns - random) / (expert - random)``."""
    low, high = references
    return 100.0 * (np.asarray(returns) - low) / (high - low)
