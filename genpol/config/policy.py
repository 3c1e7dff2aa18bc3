"""Schemas of the ``policy`` group. Each head's schema is its own config, declared beside the head
(``genpol.heads.<family>``'s ``Config``: fields, docstrings and checks in one place); this module
only gathers them, and adds ``policy=custom`` for a head of the user's own that declares no config.

The names before 2026-12-02 (``GaussianPolicyConfig``, ...) remain as aliases of the heads' configs.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict

from omegaconf import MISSING

from genpol.errors import require
from genpol.heads import HEADS
from genpol.heads.base import HeadConfig
from genpol.heads.consistency import ConsistencyConfig
from genpol.heads.diffusion import DiffusionConfig
from genpol.heads.flow_core import FlowConfig
from genpol.heads.fpo import FPOConfig
from genpol.heads.gaussian import GaussianConfig
from genpol.heads.latent import GoRLConfig
from genpol.heads.policyflow import PolicyFlowConfig
from genpol.heads.tanh_gaussian import TanhGaussianConfig


@dataclass
class CustomPolicyConfig(HeadConfig):
    """A head from the user's own package that declares no ``Config``: ``policy=custom
    policy.family=my_pkg.heads:MyHead +policy.kwargs.width=64``. The class subclasses
    ``genpol.heads.PolicyHead``; checkpoints record the same ``module:ClassName``, so evaluation imports
    it (the module must be importable there too). A head that declares a ``Config`` needs no
    ``policy=custom``: a yaml of its own with ``family: my_pkg.heads:MyHead`` and its fields
    (docs/tutorials/add-a-head.md)."""

    family: str = MISSING
    """``module:ClassName`` of the head class."""
    kwargs: Dict[str, Any] = field(default_factory=dict)
    """Keyword arguments of the head's constructor, after ``obs_dim`` and ``act_dim``."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(":" in self.family, "policy.family", "'module:ClassName' (your head class)", self.family)

    def head_kwargs(self) -> dict[str, Any]:
        return dict(self.kwargs)


# the policy group's schemas: one per registered head (its own Config), and custom
POLICY_SCHEMAS: dict[str, type[HeadConfig]] = {**{family: head.Config for family, head in HEADS.items()},
                                              "custom": CustomPolicyConfig}

# the names these schemas had when they lived here
PolicyConfig = HeadConfig
GaussianPolicyConfig = GaussianConfig
FlowPolicyConfig = FlowConfig
FPOPolicyConfig = FPOConfig
PolicyFlowPolicyConfig = PolicyFlowConfig
DiffusionPolicyConfig = DiffusionConfig
TanhGaussianPolicyConfig = TanhGaussianConfig
ConsistencyPolicyConfig = ConsistencyConfig
GoRLPolicyConfig = GoRLConfig
