"""The policy-head protocol: what every head gives an updater.

For an on-policy updater every head reduces to two calls:

1. ``sample(obs) -> (action, record)``: an action and a *record* of how it was drawn, a dict of
   tensors with leading batch dim B that the rollout stores. A Gaussian records its log-prob; DPPO
   its denoising chain; FPO its (tau, noise) pairs and old flow-matching losses; PolicyFlow x0, x1
   and its exploration noise.
2. ``log_ratio(obs, record) -> RatioTerms``: the differentiable log importance ratio between the
   current parameters and the ones that drew the record, shape ``[B, U]``. U is the number of
   ratio *units* per sample: 1 for a Gaussian, K' fine-tuned denoising steps for DPPO, N_mc samples
   for per-sample FPO.

PPO-clip, SPO, ASPO and TRPO see only ``RatioTerms`` and advantages, so every head works with every
updater. The contract, tested for every head: right after ``sample``, before any parameter change,
``log_ratio`` of the sampled batch is exactly 0. Recomputed in another batch shape (PPO's minibatches)
it is 0 to float rounding (~1e-6), not bitwise: GEMM kernels and genpol's Mish pick their code path
by the size of the tensor.

Heads that have a closed-form KL set ``has_exact_kl`` and implement ``kl``; TRPO and the adaptive
learning rate otherwise use the sample estimate ``mean((r - 1) - log r)``.

Off-policy learners need other things of a head. Each head declares them in ``capabilities`` (a
set of ``Capability``), and a run refuses, when it is built, a learner that needs one its head
lacks (``check_capabilities``):

* ``ON_POLICY_RATIO``: ``sample`` records and ``log_ratio`` (PPO, SPO, ASPO, TRPO);
* ``IMITATION``: ``imitation_loss`` (BC pretraining, EXPO's base policy);
* ``REPARAMETERIZED``: ``rsample(obs)``, actions differentiable in the parameters (Q-gradient actors);
* ``LOG_PROB``: ``rsample_log_prob(obs)``, a reparameterized action together with the exact
  log-density of that action as the env receives it (SAC's entropy term);
* ``CANDIDATES``: ``candidates(obs, n)``, n independent actions per state in one batched call
  (argmax-Q over candidates);
* ``NOISE_PREDICTION``: ``predict_noise(obs, noisy_actions, log_snr)``, a diffusion noise network on a
  continuous noise level, and ``estimate_log_prob(obs, actions, levels, draws)`` (MaxEntDP);
* ``SOFT_VALUE``: ``soft_q_and_v(obs, actions, alpha, dropout_masks)`` and ``soft_value(obs, alpha)``, soft
  Q and V from the head's own likelihood, and ``draw_dropout_masks`` (MEow's energy-based flow).
"""

from __future__ import annotations

import abc
import dataclasses
import enum
from dataclasses import dataclass, field
from typing import Any, ClassVar, List

import torch
from torch import nn

from genpol.errors import HeadCapabilityError, require
from genpol.fields import FixedFields
from genpol.nets import ACTIVATIONS

Record = dict[str, torch.Tensor]


class Capability(str, enum.Enum):
    """What a learner may need of a head (see the module docstring)."""

    ON_POLICY_RATIO = "on-policy log-ratio"
    IMITATION = "imitation loss"
    REPARAMETERIZED = "reparameterized sampling"
    LOG_PROB = "log-prob of its own samples"
    CANDIDATES = "batched candidates"
    NOISE_PREDICTION = "continuous-noise epsilon network"
    SOFT_VALUE = "soft Q and V from its likelihood"


def check_capabilities(head: "PolicyHead | type[PolicyHead]", learner: str, needed: "set[Capability] | frozenset[Capability]") -> None:
    """Raise ``HeadCapabilityError`` naming head, learner and every missing capability."""
    missing = [capability for capability in Capability if capability in needed and capability not in head.capabilities]
    if missing:
        names = ", ".join(capability.value for capability in missing)
        raise HeadCapabilityError(
            f"the {head.family} head cannot be trained by {learner}: it lacks {names}"
        )


@dataclass
class RatioTerms:
    """What a head hands an on-policy updater for one minibatch of B samples.

    Attributes:
        log_ratio: ``[B, U]`` log pi_theta / pi_old per ratio unit, differentiable in theta.
        unit_weights: ``[U]`` or ``[B, U]`` multipliers of each unit's advantage (DPPO's denoising
            discount), or None for all ones.
        unit_clip: ``[U]`` clip range per unit overriding the updater's (DPPO's interpolated clip),
            or None.
        entropy: ``[B]`` differentiable entropy for the entropy bonus, or None if the head has none.
        aux_loss: scalar head regularizer, already weighted, added to the policy loss (or None).
        kl: ``[B]`` closed-form KL(pi_old || pi_theta) computed with the same random draws as
            ``log_ratio`` (heads whose ratio evaluates the network at random points), or None.
        diagnostics: detached scalars logged under ``head/<name>``.
    """

    log_ratio: torch.Tensor
    unit_weights: torch.Tensor | None = None
    unit_clip: torch.Tensor | None = None
    entropy: torch.Tensor | None = None
    aux_loss: torch.Tensor | None = None
    kl: torch.Tensor | None = None
    diagnostics: dict[str, torch.Tensor] = field(default_factory=dict)


def check_network(key: str, sizes: List[int], activation_key: str, activation: str) -> None:
    """``ConfigError`` naming ``policy.<key>`` unless ``sizes`` are positive widths and ``activation`` is
    one of ``genpol.nets.ACTIVATIONS``."""
    require(len(sizes) >= 1 and all(w >= 1 for w in sizes), f"policy.{key}", "non-empty positive widths", sizes)
    require(activation in ACTIVATIONS, f"policy.{activation_key}", f"one of {tuple(ACTIVATIONS)}", activation)


@dataclass
class HeadConfig(FixedFields):
    """A head's hyperparameters: the one place each is written. Each head declares a subclass beside
    it (``PolicyHead.Config``) whose fields, with their docstrings, are its constructor's keyword
    arguments, checked once in ``__post_init__`` (``genpol.errors.require`` names ``policy.<field>``).
    The same dataclass is the schema of the head's Hydra group (``configs/policy/<family>.yaml``), so
    a field added here is a command-line key, a checked value and a checkpointed argument at once.

    Besides the head's own fields, the policy group carries the value network that the on-policy
    learners train beside the head; each head picks the critic its authors used (these defaults
    are stable-baselines3's). Off-policy learners size their Q-critics in the learner group.
    """

    family: str = ""
    """Head family; selects the head class (``module:ClassName`` for a head of your own)."""
    critic_hidden_sizes: List[int] = field(default_factory=lambda: [64, 64])
    """Hidden layer widths of the value network."""
    critic_activation: str = "tanh"
    """Activation of the value network."""
    critic_residual: bool = False
    """A residual value network (DPPO's ``CriticObs`` with ``residual_style=True``: input layer, two-layer
    pre-activation blocks, no activation before the output; an odd number of equal widths) instead of a
    plain MLP (docs/fidelity.md)."""

    NOT_HEAD_ARGUMENTS: ClassVar[frozenset[str]] = frozenset({"family", "critic_hidden_sizes", "critic_activation",
                                                              "critic_residual"})

    def __post_init__(self) -> None:
        check_network("critic_hidden_sizes", self.critic_hidden_sizes, "critic_activation", self.critic_activation)
        if self.critic_residual:
            sizes = list(self.critic_hidden_sizes)
            require(len(set(sizes)) == 1 and len(sizes) % 2 == 1, "policy.critic_hidden_sizes",
                    "an odd number of equal widths (policy.critic_residual=true)", sizes)
        if hasattr(self, "hidden_sizes") and hasattr(self, "activation"):
            check_network("hidden_sizes", self.hidden_sizes, "activation", self.activation)

    def head_kwargs(self) -> dict[str, Any]:
        """The head's constructor arguments: every field but the family and the critic's, as plain
        JSON-able values (lists, not tuples or OmegaConf containers)."""
        return {f.name: _plain(getattr(self, f.name)) for f in dataclasses.fields(self)
                if f.name not in self.NOT_HEAD_ARGUMENTS}


def evaluation_generator(obs: torch.Tensor, deterministic: bool) -> torch.Generator | None:
    """A CPU generator seeded with 0 for a deterministic action (None: draw from torch's global RNG). On the
    CPU whatever the device: CUDA's generator draws other numbers from the same seed, and the action of a
    policy trained on a GPU would change when it is evaluated or served on a CPU (``standard_normal`` moves
    the draws)."""
    return torch.Generator().manual_seed(0) if deterministic else None


def standard_normal(shape: "tuple[int, ...] | torch.Size", generator: torch.Generator | None,
                    device: torch.device) -> torch.Tensor:
    """``shape [B, ...]`` standard normal draws: from torch's RNG, or, with ``generator`` (a deterministic
    action), one row's draws shared by every row. Drawn per row, the noise of state b would depend on B and
    on b, and so would a state's deterministic action (docs/fidelity.md: a softmax-Q policy evaluated
    so returned 51 on Hopper at 1 env and 228 at 10); shared, the action is a function of the state alone."""
    if generator is None:
        return torch.randn(shape, device=device)
    return torch.randn((1, *shape[1:]), generator=generator).to(device).expand(shape)


def _plain(value: Any) -> Any:
    """Lists for sequences, recursively (a checkpoint's JSON spec, and a config equal to its reload)."""
    if isinstance(value, (list, tuple)):
        return [_plain(item) for item in value]
    return value


class PolicyHead(nn.Module, abc.ABC):
    """Base class of policy heads. Actions live in ``[-1, 1]^A`` (the env rescales them).

    Subclasses set ``family`` (the registry name), ``has_exact_kl`` and ``has_entropy``, and implement
    ``sample``, ``act``, ``log_ratio`` and ``imitation_loss``. A head declares its hyperparameters
    as ``Config``, a ``HeadConfig`` subclass: the constructor then takes ``config`` or the same
    fields as keyword arguments (``GaussianHead(11, 3, hidden_sizes=[32])``), checks them once and
    keeps them as ``self.config``, and ``spec_kwargs`` (the JSON-able arguments that rebuild the head
    from a checkpoint) is derived from it. A head without a ``Config`` sets ``self.spec_kwargs`` itself.
    """

    family: ClassVar[str] = ""
    Config: ClassVar[type[HeadConfig] | None] = None
    capabilities: ClassVar[frozenset[Capability]] = frozenset({Capability.ON_POLICY_RATIO, Capability.IMITATION,
                                                               Capability.CANDIDATES})
    has_exact_kl: ClassVar[bool] = False
    has_entropy: ClassVar[bool] = False
    online_options: ClassVar[frozenset[str]] = frozenset()
    """The ``Config`` fields ``change_options`` can set on a built head (``pipeline.online_policy``)."""

    @classmethod
    def lacks(cls, config: Any) -> dict[Capability, str]:
        """The declared ``capabilities`` that a head built from ``config`` (its policy group) does not have, each
        with why: validation refuses such a head for a learner that needs one. None by default."""
        return {}

    def __init__(self, obs_dim: int, act_dim: int, config: HeadConfig | None = None, **hyperparameters: Any):
        super().__init__()
        self.obs_dim = obs_dim
        self.act_dim = act_dim
        self.spec_kwargs: dict[str, Any] = {}
        if self.Config is None:
            if config is not None or hyperparameters:
                raise TypeError(f"{type(self).__name__} declares no Config; it takes its arguments itself")
            return
        if config is not None and not isinstance(config, self.Config):
            raise TypeError(f"{type(self).__name__} takes a {self.Config.__name__}, got {type(config).__name__}")
        try:  # dataclasses.replace re-runs __post_init__: the checks see the final values
            self.config = dataclasses.replace(config or self.Config(), **hyperparameters)
        except TypeError as error:  # an unknown argument: name the head and its fields
            known = sorted(f.name for f in dataclasses.fields(self.Config)
                           if f.name not in HeadConfig.NOT_HEAD_ARGUMENTS)
            raise TypeError(f"{type(self).__name__}: {error}; its hyperparameters are {known}") from None
        self.spec_kwargs = self.config.head_kwargs()

    @abc.abstractmethod
    def sample(self, obs: torch.Tensor) -> tuple[torch.Tensor, Record]:
        """``obs [B, D]`` -> ``(action [B, A], record)``; called without gradients."""

    @abc.abstractmethod
    def act(self, obs: torch.Tensor, deterministic: bool = True) -> torch.Tensor:
        """``obs [B, D]`` -> ``action [B, A]`` for evaluation, without a record."""

    @abc.abstractmethod
    def log_ratio(self, obs: torch.Tensor, record: Record) -> RatioTerms:
        """``obs [B, D]`` and the stored ``record`` -> ``RatioTerms`` with ``log_ratio [B, U]``."""

    @abc.abstractmethod
    def imitation_loss(self, obs: torch.Tensor, actions: torch.Tensor) -> torch.Tensor:
        """Behaviour-cloning loss (scalar) for ``obs [B, D]`` and expert ``actions [B, A]``."""

    def kl(self, obs: torch.Tensor, record: Record) -> torch.Tensor:
        """Exact ``KL(pi_old || pi_theta)`` per sample, ``[B]``; only where ``has_exact_kl``."""
        raise HeadCapabilityError(
            f"the {self.family or type(self).__name__} head has no closed-form KL; "
            "use the sample estimate mean((r - 1) - log r) of its log_ratio"
        )

    def rsample(self, obs: torch.Tensor) -> torch.Tensor:
        """``obs [B, D]`` -> ``action [B, A]`` differentiable in the parameters (``REPARAMETERIZED``)."""
        raise HeadCapabilityError(f"the {self.family} head has no {Capability.REPARAMETERIZED.value}")

    def rsample_log_prob(self, obs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """``obs [B, D]`` -> ``(action [B, A], log_prob [B])``, both differentiable (``LOG_PROB``)."""
        raise HeadCapabilityError(f"the {self.family} head has no {Capability.LOG_PROB.value}")

    def candidates(self, obs: torch.Tensor, num_candidates: int) -> torch.Tensor:
        """``obs [B, D]`` -> ``actions [B, n, A]``: n independent stochastic actions per state, drawn
        in one batched call (``CANDIDATES``). Candidate j of state b is row ``b * n + j`` of one
        ``act`` call on the repeated observations."""
        repeated = obs.repeat_interleave(num_candidates, dim=0)
        return self.act(repeated, deterministic=False).reshape(obs.shape[0], num_candidates, -1)

    def begin_update(self) -> None:
        """Called by the runner once before each update phase (e.g. to snapshot the rollout network)."""

    def act_as_sampled(self) -> None:
        """From now on ``act(deterministic=False)`` draws what ``sample`` draws. On-policy learners call it
        once when built: their ratio is of ``sample``'s distribution, so a stochastic evaluation, and a
        saved policy's ``predict(deterministic=False)``, must act with that policy too. Most heads' ``act``
        already does (a test checks every head); one whose stochastic ``act`` is another sampler (the
        consistency head's reference multistep sampler, which BC and the Q-gradient learners train)
        switches, and saves the switch with its weights."""

    def start_finetuning(self) -> None:
        """Called once between offline pretraining and online fine-tuning (e.g. to freeze the early
        denoising steps of a diffusion policy at their pretrained weights)."""

    def change_options(self, **options: Any) -> None:
        """Give the built head other values of the fields in ``online_options`` (the weights stay):
        ``self.config`` and ``spec_kwargs`` follow, so a checkpoint rebuilds the head as it now is.
        ``ValueError`` names a field the head cannot change. A head that declares ``online_options``
        rebuilds what those fields shape in ``_options_changed``."""
        refused = sorted(set(options) - self.online_options)
        if refused:
            can = ", ".join(sorted(self.online_options)) or "none"
            raise ValueError(f"the {self.family or type(self).__name__} head cannot change {refused} once built "
                             f"(it can change: {can})")
        if not options:
            return
        self.config = dataclasses.replace(self.config, **options)  # re-runs the config's checks
        self.spec_kwargs = self.config.head_kwargs()
        self._options_changed()

    def _options_changed(self) -> None:
        """Rebuild what depends on ``self.config``'s ``online_options`` (after ``change_options``)."""

    def spec(self) -> dict[str, Any]:
        """``{"family", "obs_dim", "act_dim", "kwargs"}``: enough to rebuild this head untrained. A head
        that genpol does not register (the user's own) is recorded as ``"module:ClassName"``, which
        ``head_from_spec`` imports."""
        from genpol.heads import is_registered  # the registry imports this module

        cls = type(self)
        family = self.family if is_registered(cls) else f"{cls.__module__}:{cls.__qualname__}"
        return {"family": family, "obs_dim": self.obs_dim, "act_dim": self.act_dim, "kwargs": dict(self.spec_kwargs)}
