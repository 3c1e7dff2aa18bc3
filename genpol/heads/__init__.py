"""Policy heads behind one interface (see ``genpol.heads.base``)."""

from __future__ import annotations

import difflib
import importlib
from typing import Any

from genpol.heads.base import HeadCapabilityError, PolicyHead, RatioTerms, Record
from genpol.heads.consistency import ConsistencyHead
from genpol.heads.diffusion import DiffusionHead
from genpol.heads.energy_flow import EnergyFlowHead
from genpol.heads.fpo import FPOHead
from genpol.heads.gaussian import GaussianHead
from genpol.heads.latent import LatentDecoderHead
from genpol.heads.normalizing_flow import NormalizingFlowHead
from genpol.heads.policyflow import PolicyFlowHead
from genpol.heads.tanh_gaussian import TanhGaussianHead
from genpol.heads.vp_diffusion import VPDiffusionHead

HEADS: dict[str, type[PolicyHead]] = {
    head.family: head for head in (GaussianHead, DiffusionHead, FPOHead, PolicyFlowHead, TanhGaussianHead,
                                   ConsistencyHead, LatentDecoderHead, NormalizingFlowHead, VPDiffusionHead,
                                   EnergyFlowHead)
}
# Acting wrappers that own critics (EXPO's on-the-fly policy, Consistency-AC's softmax-Q choice) live
# with their learners in genpol.algorithms: a head knows no learner. A checkpoint still names them by
# family, so the registry maps those names to import paths, resolved when such a checkpoint is loaded.
ACTING_HEADS: dict[str, str] = {"expo": "genpol.algorithms.edit:OnTheFlyPolicy",
                                "softmax_q": "genpol.algorithms.softmax_q:SoftmaxQPolicy",
                                "max_q": "genpol.algorithms.maxentdp:MaxQPolicy"}

__all__ = ["HEADS", "ACTING_HEADS", "is_registered", "build_head", "head_class", "head_from_spec", "GaussianHead", "DiffusionHead", "FPOHead", "PolicyFlowHead", "TanhGaussianHead", "ConsistencyHead", "LatentDecoderHead", "NormalizingFlowHead", "VPDiffusionHead", "EnergyFlowHead", "HeadCapabilityError", "PolicyHead",
           "RatioTerms", "Record"]


def head_class(family: str) -> type[PolicyHead]:
    """The head class for ``family``: a registered name (e.g. ``"gaussian"``) or, for a head in the
    user's own package, ``"module:ClassName"`` (imported here). ``ValueError`` names what is wrong."""
    if family in HEADS:
        return HEADS[family]
    family = ACTING_HEADS.get(family, family)
    if ":" not in family:
        close = difflib.get_close_matches(family, [*HEADS, *ACTING_HEADS], n=1)
        hint = f" Did you mean '{close[0]}'?" if close else ""
        raise ValueError(f"unknown policy head '{family}'; known: {sorted([*HEADS, *ACTING_HEADS])}, or 'module:ClassName' "
                         f"for your own.{hint}")
    module_name, _, class_name = family.partition(":")
    try:
        module = importlib.import_module(module_name)
    except Exception as error:  # noqa: BLE001 - whatever the user's module raises, named in one line
        raise ValueError(f"policy head '{family}': cannot import module '{module_name}' "
                         f"({type(error).__name__}: {error}); is it on PYTHONPATH?") from error
    cls = getattr(module, class_name, None)
    if not (isinstance(cls, type) and issubclass(cls, PolicyHead)):
        found = ("not found" if cls is None else f"{cls.__module__}.{cls.__qualname__}, not a PolicyHead subclass"
                 if isinstance(cls, type) else f"a {type(cls).__name__}, not a PolicyHead subclass")
        raise ValueError(f"policy head '{family}': '{class_name}' in module '{module_name}' is {found}")
    return cls


def is_registered(cls: type[PolicyHead]) -> bool:
    """Whether ``cls`` is the head genpol registers under ``cls.family`` (a spec then records the
    family name; any other head class is recorded by its import path)."""
    if cls.family in HEADS:
        return HEADS[cls.family] is cls
    path = ACTING_HEADS.get(cls.family)
    return path is not None and path == f"{cls.__module__}:{cls.__qualname__}"


def build_head(family: str, obs_dim: int, act_dim: int, **kwargs: Any) -> PolicyHead:
    """Construct the head ``family`` names (see ``head_class``)."""
    return head_class(family)(obs_dim, act_dim, **kwargs)


def head_from_spec(spec: dict[str, Any]) -> PolicyHead:
    """Rebuild an (untrained) head from ``PolicyHead.spec()``."""
    return build_head(spec["family"], spec["obs_dim"], spec["act_dim"], **spec["kwargs"])
