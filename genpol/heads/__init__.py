"""Policy heads behind one interface (see ``genpol.heads.base``)."""

from __future__ import annotations

import difflib
from typing import Any

from genpol.heads.base import HeadCapabilityError, PolicyHead, RatioTerms, Record
from genpol.heads.diffusion import DiffusionHead
from genpol.heads.edit import OnTheFlyPolicy
from genpol.heads.fpo import FPOHead
from genpol.heads.gaussian import GaussianHead
from genpol.heads.policyflow import PolicyFlowHead
from genpol.heads.tanh_gaussian import TanhGaussianHead

HEADS: dict[str, type[PolicyHead]] = {
    head.family: head for head in (GaussianHead, DiffusionHead, FPOHead, PolicyFlowHead, TanhGaussianHead,
                                      OnTheFlyPolicy)
}

__all__ = ["HEADS", "build_head", "head_from_spec", "GaussianHead", "DiffusionHead", "FPOHead", "PolicyFlowHead", "TanhGaussianHead", "HeadCapabilityError", "PolicyHead",
           "RatioTerms", "Record"]


def build_head(family: str, obs_dim: int, act_dim: int, **kwargs: Any) -> PolicyHead:
    """Construct the head registered as ``family`` (e.g. ``"gaussian"``)."""
    if family not in HEADS:
        close = difflib.get_close_matches(family, list(HEADS), n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"unknown policy head '{family}'; known: {sorted(HEADS)}.{hint}")
    return HEADS[family](obs_dim, act_dim, **kwargs)


def head_from_spec(spec: dict[str, Any]) -> PolicyHead:
    """Rebuild an (untrained) head from ``PolicyHead.spec()``."""
    return build_head(spec["family"], spec["obs_dim"], spec["act_dim"], **spec["kwargs"])
