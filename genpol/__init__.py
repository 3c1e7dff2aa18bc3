"""genpol: generative policies for continuous control.

Python API: ``from genpol.api import train, evaluate, load_policy``.
Command line: ``python -m genpol.train ...`` and ``python -m genpol.evaluate ...`` (installed as
``genpol-train``, ``genpol-evaluate`` and ``genpol-report`` too). (The API lives in ``genpol.api``
because ``genpol.train`` and ``genpol.evaluate`` are the command-line modules.)

Layers, lowest first; a module imports its own layer and those below, never one above
(``tests/test_layers.py`` checks every import, and that every module imports on its own):

====  ==========================================================================================
0     ``genpol.errors`` (imports nothing of genpol); ``genpol.envs``, the simulators as batched
      torch tensors (imports nothing of genpol but itself); ``genpol.configs``, the Hydra groups
1     networks and kernels (``nets``, ``qensemble``, ``mish``, ``onednn``); ``collectives``, the
      torch-only averaging a learner needs under torchrun; ``config``, the schema alone
2     ``heads``: one file per policy family, behind ``heads.base.PolicyHead``
3     ``storage`` (rollouts, replay), ``updaters`` (the losses and update steps), ``data``
      (dataset formats), ``checkpoint`` (files)
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

__version__ = "0.1.0"
