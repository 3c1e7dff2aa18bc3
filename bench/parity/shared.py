"""What the parity harnesses share: the difference they report, and, for the JAX references, moving
parameter trees through ``.npz`` files and the shims their libraries need on a recent jax.

Imports numpy alone at load: a harness's JAX side (run by another venv's python, without torch or
genpol) imports this module too. Scripts in this folder import it as ``shared`` (Python puts the
script's folder first on ``sys.path``).
"""

from __future__ import annotations

import os
import subprocess
from pathlib import Path
from typing import Any, Callable

import numpy as np


def as_array(value: Any) -> np.ndarray:
    """A float64 numpy array of a number, a numpy array, a JAX array or a torch tensor."""
    if hasattr(value, "detach"):  # torch, without importing it here
        value = value.detach().cpu().numpy()
    return np.asarray(value, np.float64)


def difference(ours: Any, theirs: Any) -> dict[str, float]:
    """The largest absolute difference, and that over the largest ``|theirs|`` (relative to the authors'),
    element by element in C order (``[B, 1]`` against ``[B]`` compares B pairs)."""
    ours, theirs = as_array(ours).reshape(-1), as_array(theirs).reshape(-1)
    assert ours.size == theirs.size, (ours.size, theirs.size)
    if not ours.size:
        return {"abs": 0.0, "rel": 0.0}
    absolute = float(np.abs(ours - theirs).max())
    # relative to theirs; where theirs is all zero (a term one side drops), relative to ours
    scale = float(np.abs(theirs).max()) or float(np.abs(ours).max())
    return {"abs": absolute, "rel": absolute / max(scale, 1e-300)}


def worst(rows: list[dict[str, float]]) -> dict[str, float]:
    """The largest absolute and relative difference over ``rows`` (``difference`` results)."""
    return {"abs": max(r["abs"] for r in rows), "rel": max(r["rel"] for r in rows)}


def flatten(params: Any, prefix: str) -> dict[str, np.ndarray]:
    """A nested parameter dict as ``<prefix>/<path>`` keys (no prefix for ``""``): an ``.npz``'s layout."""
    flat: dict[str, np.ndarray] = {}

    def walk(node: Any, path: list[str]) -> None:
        if hasattr(node, "items"):
            for key, value in node.items():
                walk(value, [*path, str(key)])
        else:
            flat["/".join(path)] = np.asarray(node)

    walk(params, [prefix] if prefix else [])
    return flat


def unflatten(data: dict[str, np.ndarray], prefix: str, convert: Callable[[np.ndarray], Any]) -> dict[str, Any]:
    """The nested dict under ``prefix`` of a ``flatten``-ed mapping, each leaf through ``convert``."""
    nested: dict[str, Any] = {}
    for key, value in data.items():
        if key.startswith(prefix + "/"):
            *path, leaf = key[len(prefix) + 1:].split("/")
            node = nested
            for part in path:
                node = node.setdefault(part, {})
            node[leaf] = convert(value)
    return nested


class GymBox:
    """What the references' ``create`` reads of a gym Box space: its shape, and a sample."""

    def __init__(self, dim: int):
        self.shape = (dim,)

    def sample(self) -> np.ndarray:
        return np.zeros(self.shape, np.float32)


def shim_tfp_for_recent_jax() -> None:
    """tensorflow-probability 0.25's JAX backend reads ``pytype_aval_mappings`` where recent jax removed
    it (tfp registers its NumpyVariable there; nothing in the harnesses uses that class). Call before
    importing tfp."""
    import jax
    import jax._src.core as jax_core

    if not hasattr(jax.interpreters.xla, "pytype_aval_mappings"):
        jax.interpreters.xla.pytype_aval_mappings = jax_core.pytype_aval_mappings
    if "pytype_aval_mappings" not in vars(jax.core):
        jax.core.pytype_aval_mappings = jax_core.pytype_aval_mappings


def reference_commit(ref: Path) -> str:
    """``"<sha> <commit date>"`` of the snapshot at ``ref``; for a snapshot rebuilt file by file (no git),
    the commit noted in ``ref/COMMIT``; else ``"unknown (not a git checkout)"``."""
    found = subprocess.run(["git", "-C", str(ref), "log", "-1", "--format=%H %cs"], capture_output=True,
                           text=True).stdout.strip()
    if not found and (ref / "COMMIT").exists():
        found = (ref / "COMMIT").read_text().strip()
    return found or "unknown (not a git checkout)"


ONE_THREAD_XLA = "--xla_cpu_multi_thread_eigen=false intra_op_parallelism_threads=1"


def run_jax_side(jax_python: Path, script: str, *arguments: str) -> None:
    """Run ``script`` (a harness, in its JAX mode) with the reference's venv, on one CPU thread."""
    env = {**os.environ, "XLA_FLAGS": ONE_THREAD_XLA, "JAX_PLATFORMS": "cpu", "PYTHONWARNINGS": "ignore"}
    subprocess.run([str(jax_python), script, *arguments], check=True, env=env)


def stub_gym_and_packages(ref: Path, packages: tuple[str, ...]) -> None:
    """Import the reference's modules from ``ref`` without what they do not need here: a stand-in ``gym``
    (their learners import it for a type annotation and ``gym.utils.seeding``), and the ``packages``
    registered without running their ``__init__`` (which import pixel agents and replay buffers)."""
    import sys
    import types

    sys.path.insert(0, str(ref))
    gym = types.ModuleType("gym")
    gym.Space = object
    gym.utils = types.ModuleType("gym.utils")
    gym.utils.seeding = types.ModuleType("gym.utils.seeding")
    sys.modules.update({"gym": gym, "gym.utils": gym.utils, "gym.utils.seeding": gym.utils.seeding})
    for package in packages:
        module = types.ModuleType(package)
        module.__path__ = [str(ref / package.replace(".", "/"))]
        sys.modules[package] = module


def stub_modules(stubs: dict[str, dict[str, Any]]) -> None:
    """Register each ``{module name: attributes}`` as a bare module where it cannot be imported: what a
    reference imports at load but the compared code never calls (a CLI parser, a training loop's plotting)."""
    import importlib
    import sys
    import types

    for name, attributes in stubs.items():
        try:
            importlib.import_module(name)
            continue
        except ImportError:
            pass
        module = types.ModuleType(name)
        module.__dict__.update(attributes)
        sys.modules[name] = module
