"""genpol: generative policies for continuous control.

Python API: ``from genpol.api import train, evaluate, load_policy``.
Command line: ``python -m genpol.train ...`` and ``python -m genpol.evaluate ...`` (installed as
``genpol-train``, ``genpol-evaluate`` and ``genpol-report`` too). (The API lives in ``genpol.api``
because ``genpol.train`` and ``genpol.evaluate`` are the command-line modules.)

Layers, lowest first; a module imports its own layer and those below, never one above
(``tests/test_layers.py`` checks every import, and that every module imports on its own):

====  ==========================================================================================
0     ``genpol.errors``, ``genpol.files`` (files replaced whole) and ``genpol.allocator`` (malloc's
      thresholds; none imports anything of genpol); ``genpol.envs``, the simulators as batched
      torch tensors (imports nothing of genpol but itself); ``genpol.configs``, the Hydra groups
1     networks and kernels (``nets``, ``qensemble``, ``mish``, ``onednn``); ``collectives``, the
      torch-only averaging a learner needs under torchrun; ``memory``, what a device has left
2     ``heads``: one file per policy family, behind ``heads.base.PolicyHead``, each with its
      hyperparameters' config
3     ``config``, the schema alone (its policy group gathers the heads' configs); ``storage``
      (rollouts, replay), ``updaters`` (the losses and update steps), ``data`` (dataset formats),
      ``checkpoint`` (files)
4     ``policy``: a trained policy loaded from a checkpoint, acting and evaluating episodes
5     ``algorithms``: one object per learner, which owns its critics, optimizers and storage, and
      ``algorithms.registry``, the learner table; ``build`` (env and head from a config);
      ``callbacks``
6     ``configure`` (validation that needs the learner table), ``distributed`` (torchrun's launch
      and per-rank state)
7     loops: ``runners`` (on-policy, off-policy, offline RL, behaviour cloning)
8     ``pipelines``: online, offline-to-online, GoRL's stages (``pipelines.gorl``)
9     entry points: ``train``, ``evaluate``, ``api``, ``report``, and the dataset generators
====  ==========================================================================================
"""

from __future__ import annotations

import sys
from importlib.machinery import ModuleSpec
from importlib.util import spec_from_file_location
from pathlib import Path

__version__ = "0.1.0"


class _CheckoutFolders:
    """``genpol.envs`` and ``genpol.configs`` in a bare checkout on ``sys.path`` (``PYTHONPATH=<repo>``,
    nothing installed): the repository's ``envs/`` and ``configs/``, as the build maps them. An
    installed genpol (a wheel, or an editable install's own finder) never reaches this finder: it
    comes last on ``sys.meta_path`` and answers only these two names. Written here because the
    mapping is setuptools' at install time, and a checkout run without installing has none."""

    root = Path(__file__).resolve().parent.parent
    folders = {"genpol.envs": "envs", "genpol.configs": "configs"}

    @classmethod
    def find_spec(cls, fullname: str, path: object = None, target: object = None) -> ModuleSpec | None:
        folder = cls.root / cls.folders.get(fullname, "")
        if fullname not in cls.folders or not (folder / "__init__.py").is_file():
            return None
        return spec_from_file_location(fullname, folder / "__init__.py", submodule_search_locations=[str(folder)])


if (_CheckoutFolders.root / "envs" / "__init__.py").is_file() and not any(
        finder is _CheckoutFolders for finder in sys.meta_path):
    sys.meta_path.append(_CheckoutFolders)
