"""Schema of MEow's ``learner`` group (``genpol.algorithms.meow``; ALGORITHMS.md 14b)."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Optional

from genpol.config.base import require
from genpol.config.offpolicy import OffPolicyConfig


@dataclass
class MEowConfig(OffPolicyConfig):
    """MEow (Chao et al., NeurIPS 2024): the energy-based flow (``policy=energy_flow``) is policy and soft
    critic at once; one TD regression of its soft Q on ``r + gamma (1 - term) min_j Vbar_j(s')``, one Adam
    over the whole flow, a Polyak copy of the whole flow as target. Defaults: the authors' ``Args`` in
    ``meow_continuous_action.py`` (``+experiment=meow`` sets their Hopper command).

    The ``critic_*``, ``num_qs``, ``num_min_qs`` and ``critic_reduction`` fields of the off-policy schema are
    unused (``unread_fields``: refused when set): the head's ``value_shifts`` are the value heads, and the loss
    is the mean over them."""

    name: str = "meow"
    """Learner name; selects the learner."""
    temperature: float = 0.2
    """alpha, fixed (the authors' default; their README's per-task values: Hopper and HalfCheetah 0.25,
    Walker2d 0.1, Ant 0.05, Humanoid 0.125; MultiGoal 2.5). Their --autotune is not ported (it never reaches
    their Q and V: their FlowPolicy keeps the initial alpha)."""
    lr: float = 1e-3
    """Adam learning rate over every parameter of the flow (the authors' q_lr)."""
    learning_starts: int = 5000
    """Env steps of uniform random actions before learning starts."""
    max_grad_norm: Optional[float] = 30.0
    """Gradient-norm clip over the whole flow (the authors' grad_clip)."""

    def __post_init__(self) -> None:
        super().__post_init__()
        require(self.temperature > 0, "learner.temperature", "> 0", self.temperature)
        require(not self.compile, "learner.compile", "false (MEow's steps run eager)", self.compile)
        # one network is both actor and critic, with one optimizer at lr
        require(self.critic_lr is None, "learner.critic_lr", "null (MEow's flow is its critic; set lr)", self.critic_lr)

    @classmethod
    def unread_fields(cls, values: Mapping[str, Any]) -> dict[str, str]:
        unread = super().unread_fields(values)
        unread.update(dict.fromkeys(MEOW_UNREAD, "MEow's flow is its own critic (policy=energy_flow: its value heads "
                                    "are policy.value_shifts, the TD loss is the mean over them)"))
        return unread


# the off-policy schema's critic fields, which MEow (no Q-network) never reads
MEOW_UNREAD = ("num_qs", "num_min_qs", "critic_layer_norm", "critic_layer_norm_eps", "critic_hidden_sizes",
               "critic_activation", "critic_init", "critic_reduction")
