"""Update-level parity of genpol's Consistency-AC / Consistency-BC with the authors' code, identical inputs, float64.

Two repositories are references, neither part of genpol: take a snapshot of each anywhere and point
``--ref`` at it (the option repeats; the kind is read off the files):

* Ding & Jin's (quantumiracle/Consistency_Model_For_Reinforcement_Learning), the method genpol's
  consistency head and ``learner=consistency_ac`` implement: ``agents/ql_consistency.py``
  (``Consistency_QL.train``, offline: CT loss + eta L_Q), ``agents/online_agent.py`` (``OnlineAgent.train``,
  online from scratch: L_Q alone) and ``agents/consistency.py`` (the consistency policy);
* CPQL's (cccedric/cpql, Chen et al. 2024), another consistency actor-critic: ``agents/ql_cm.py``
  (``CPQL.train``) and ``agents/karras_diffusion.py`` (``KarrasDenoiser``).

The harness imports their modules from ``--ref`` and drives their ``train`` for exactly one gradient step
on a fake replay whose ``sample`` returns the batch; genpol's side is ``QGradientActor.gradient_step`` on
the same batch. Both start from the same weights (their consistency network and critics copied layer by
layer into genpol's ``ConsistencyHead`` and ``QEnsemble``; their target critics, perturbed away from the
critics so that the TD target tests them, into genpol's), the same Adam settings and clip, and see the
same random draws: ``torch.randn``/``randn_like``/``randint``/``multinomial``/``randperm`` and
``numpy.random.uniform`` are replaced during each side's step by a feeder that hands out tensors drawn
beforehand, in the order that side asks for them (noise of the EMA actor's next actions, of the actor's
actions, the CT noise and noise-level indices, the critic pair of L_Q), checks every shape and fails if a
draw is left over. Their final layer is scaled (x 20 Ding & Jin's, x 60 CPQL's) so that about a third of
the sampled actions leave [-1, 1], where the clamp's backward pass matters (``saturated_share`` per row).

Reported per row, as the largest absolute difference and that over the largest |value| of the authors'
tensor (worst over tensors): the TD target, critic loss, L_Q, L_BC, the actor loss, every actor and critic
gradient as the optimizers see it (after any clip), and every actor, critic and target-critic parameter
after the step. Where gradients agree to ~1e-15, parameters after the step agree to ~1e-13..1e-12: Adam
divides each element by its own magnitude, so an element near its eps (1e-8) carries its rounding,
relative to itself, into the step. Rows without an update: their critic's fixed learning rate, the N(k)
schedule of CT over an offline run, the EMA actor's update steps around step 1000, and their --lr_decay,
each beside genpol's option that reproduces it.

Harness shims for the authors' code (not departures): their ``predict_consistency`` casts a float noise
level to a float32 tensor when sampling, and ``OnlineAgent.train`` casts observations with ``.float()``;
both are kept at float64 during their step. genpol is not patched: the rows set genpol's options for the
authors' behaviour (each row's ``genpol_options``; ``policy.time_input``, ``learner.critic_reduction=sum``,
``learner.actor_ema_warmup=hold``, ``policy.target_warmup=hold``, ``learner.q_norm``,
``learner.max_q_backup_samples``, ``policy.ct_distance=pseudo_huber_per_dim``), and a departure row leaves
one of them at genpol's default.

    python bench/parity/consistency_ac.py --ref DING_JIN_SNAPSHOT --ref CPQL_SNAPSHOT

Writes ``bench/results/parity_consistency_ac.json`` (a list of rows: method, repository, commit, differences).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib
import math
import sys
import types
import warnings
from dataclasses import dataclass, field
from pathlib import Path
from types import SimpleNamespace
from typing import Any, Callable, Iterator

import numpy as np
import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "bench"))  # bench/common (this script lives one folder down)

from common import date_stamp, machine, write_results  # noqa: E402
from shared import difference, reference_commit, worst  # noqa: E402

from genpol.algorithms.qgradient import QGradientActor  # noqa: E402
from genpol.config.offpolicy import QGradientConfig  # noqa: E402
from genpol.heads.consistency import ConsistencyHead, ct_num_scales, ema_update_due  # noqa: E402
from genpol.runners.offline_rl import OfflineRLRunner  # noqa: E402
from genpol.storage.replay import ReplayBatch  # noqa: E402
from genpol.updaters.schedules import cosine_lr  # noqa: E402

OBS_DIM, ACT_DIM, BATCH, LR, GAMMA, TAU = 11, 3, 64, 3e-4, 0.99, 0.005
SCALES = 40  # N of the CT step: CPQL's fixed num_scales; fed to Ding & Jin's schedule (see DingJin.patched)
SAMPLING_STEPS = 2  # Ding & Jin's T (n_timesteps) on most D4RL tasks, genpol's default
DING = "quantumiracle/Consistency_Model_For_Reinforcement_Learning"
CPQL = "cccedric/cpql"


# --------------------------------------------------------------------------- the authors' modules
def import_authors(ref: Path, names: list[str]) -> dict[str, types.ModuleType]:
    """Their modules, imported from the snapshot (both repositories call their packages ``agents`` and
    ``utils``: those of an earlier snapshot are dropped first). ``utils.logger`` (rllab's logger, which
    needs dateutil) is replaced by a stub where it cannot be imported; nothing here logs."""
    for name in [n for n in sys.modules if n.split(".")[0] in ("agents", "utils", "tabulate")]:
        del sys.modules[name]
    sys.path.insert(0, str(ref))
    try:
        try:
            importlib.import_module("utils.logger")
        except ImportError:
            stub = types.ModuleType("utils.logger")
            stub.logger = None
            sys.modules["utils.logger"] = stub
        return {name: importlib.import_module(name) for name in names}
    finally:
        sys.path.remove(str(ref))


def commit_of(ref: Path) -> str:
    return reference_commit(ref)


# --------------------------------------------------------------------------- identical random draws
class FedDraws:
    """Hands out the random draws of one side's step from tensors drawn beforehand, in call order.

    ``gaussian``: what ``torch.randn`` / ``randn_like`` return (shapes checked); ``integers``: what
    ``torch.randint`` / ``multinomial`` return (count and range checked, reshaped to the asked size);
    ``choices``: what ``torch.randperm`` (a permutation tensor) or ``numpy.random.uniform`` (a float)
    return. Leaving the context with a draw unused is an error: the step did not draw what was planned."""

    def __init__(self, gaussian: list[torch.Tensor], integers: list[torch.Tensor], choices: list[Any]):
        self.gaussian, self.integers, self.choices = list(gaussian), list(integers), list(choices)

    def _next(self, queue: list[Any], what: str) -> Any:
        if not queue:
            raise AssertionError(f"an unplanned {what} draw")
        return queue.pop(0)

    def randn(self, *size: Any, **_: Any) -> torch.Tensor:
        shape = tuple(size[0]) if len(size) == 1 and isinstance(size[0], (tuple, list, torch.Size)) else tuple(size)
        value = self._next(self.gaussian, "gaussian")
        if tuple(value.shape) != shape:
            raise AssertionError(f"randn{shape} fed a draw of shape {tuple(value.shape)}")
        return value.clone()

    def randn_like(self, like: torch.Tensor, **_: Any) -> torch.Tensor:
        return self.randn(tuple(like.shape))

    def randint(self, low: int, high: int, size: Any, **_: Any) -> torch.Tensor:
        value = self._next(self.integers, "integer")
        if value.numel() != math.prod(size) or value.min() < low or value.max() >= high:
            raise AssertionError(f"randint({low}, {high}, {size}) fed {value.numel()} values in "
                                 f"[{value.min()}, {value.max()}]")
        return value.reshape(size).clone()

    def multinomial(self, weights: torch.Tensor, count: int, *_: Any, **__: Any) -> torch.Tensor:
        return self.randint(0, weights.shape[-1], (count,))

    def randperm(self, n: int, **_: Any) -> torch.Tensor:
        value = self._next(self.choices, "choice")
        if sorted(value.tolist()) != list(range(n)):
            raise AssertionError(f"randperm({n}) fed {value}")
        return value.clone()

    def uniform(self, *_: Any, **__: Any) -> float:
        return float(self._next(self.choices, "choice"))

    def __enter__(self) -> FedDraws:
        self.saved = {name: getattr(torch, name)
                      for name in ("randn", "randn_like", "randint", "multinomial", "randperm")}
        self.saved_uniform = np.random.uniform
        for name in self.saved:
            setattr(torch, name, getattr(self, name))
        np.random.uniform = self.uniform
        return self

    def __exit__(self, kind: Any, *_: Any) -> None:
        for name, function in self.saved.items():
            setattr(torch, name, function)
        np.random.uniform = self.saved_uniform
        if kind is None and (self.gaussian or self.integers or self.choices):
            raise AssertionError(f"draws left unused: {len(self.gaussian)} gaussian, {len(self.integers)} integer, "
                                 f"{len(self.choices)} choice")


@contextlib.contextmanager
def patched(target: Any, name: str, value: Any) -> Iterator[None]:
    """``target.name = value`` for the duration of the block."""
    saved = getattr(target, name)
    setattr(target, name, value)
    try:
        yield
    finally:
        setattr(target, name, saved)


# --------------------------------------------------------------------------- weights and parameters
def linears(module: nn.Module) -> list[nn.Linear]:
    return [layer for layer in module.modules() if isinstance(layer, nn.Linear)]


def their_actor_linears(model: nn.Module) -> list[nn.Linear]:
    """Their ``MLP``: time_mlp (2 Linear), mid_layer (3 Linear), final_layer, in genpol's order."""
    return [*linears(model.time_mlp), *linears(model.mid_layer), model.final_layer]


def genpol_actor_linears(network: nn.Module) -> list[nn.Linear]:
    return [*linears(network.time_mlp), *linears(network.body)]


def copy_actor(model: nn.Module, head: ConsistencyHead) -> None:
    """Their consistency network's weights into genpol's online and CT-target networks."""
    with torch.no_grad():
        for network in (head.network, head.target):
            for source, target in zip(their_actor_linears(model), genpol_actor_linears(network), strict=True):
                target.weight.copy_(source.weight)
                target.bias.copy_(source.bias)


def actor_params(layers: list[nn.Linear]) -> list[torch.Tensor]:
    return [p for layer in layers for p in (layer.weight, layer.bias)]


def their_critic_stacked(critic: nn.Module, value: Callable[[torch.Tensor], torch.Tensor | None]
                         ) -> list[torch.Tensor | None]:
    """Their twin critics (``q1_model``, ``q2_model``) as genpol's QEnsemble stacks them, in its parameter
    order (weights [E, in, out], biases [E, 1, out], LayerNorm scales and shifts [E, 1, H]);
    ``value(parameter)``: the parameter itself or its recorded gradient (None: none)."""
    heads = [critic.q1_model, critic.q2_model]
    lin = [[layer for layer in head if isinstance(layer, nn.Linear)] for head in heads]
    norms = [[layer for layer in head if isinstance(layer, nn.LayerNorm)] for head in heads]

    def stack(tensors: list[torch.Tensor | None], shape: Callable[[torch.Tensor], torch.Tensor]) -> torch.Tensor | None:
        return None if any(t is None for t in tensors) else torch.stack([shape(t) for t in tensors])

    weights = [stack([value(h[k].weight) for h in lin], lambda t: t.mT) for k in range(len(lin[0]))]
    biases = [stack([value(h[k].bias) for h in lin], lambda t: t.unsqueeze(0)) for k in range(len(lin[0]))]
    scales = [stack([value(h[k].weight) for h in norms], lambda t: t.unsqueeze(0)) for k in range(len(norms[0]))]
    shifts = [stack([value(h[k].bias) for h in norms], lambda t: t.unsqueeze(0)) for k in range(len(norms[0]))]
    return weights + biases + scales + shifts


class GradientRecorder:
    """Keeps each parameter's gradient as the optimizer's step sees it (after any clip), by id."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.gradients: dict[int, torch.Tensor | None] = {}
        optimizer.register_step_pre_hook(self.record)

    def record(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        self.gradients = {id(p): None if p.grad is None else p.grad.detach().clone()
                          for group in optimizer.param_groups for p in group["params"]}


def paired(ours: list[torch.Tensor | None], theirs: list[torch.Tensor | None]) -> dict[str, float]:
    if len(ours) != len(theirs):
        raise AssertionError(f"{len(ours)} genpol tensors against {len(theirs)} of theirs")
    return worst([difference(o, t) for o, t in zip(ours, theirs) if t is not None and o is not None])


# --------------------------------------------------------------------------- one setting
@dataclass
class Setting:
    label: str
    agent: str = "offline"  # Ding & Jin: offline (Consistency_QL) / online (OnlineAgent); CPQL: its rl_type
    eta: float = 1.0
    bc: float = 1.0  # genpol's bc_coef; CPQL's alpha (Ding & Jin's offline BC weight is 1)
    grad_norm: float = 1.0  # 0: no clip (the authors' convention), genpol max_grad_norm None
    pair: int = 0  # L_Q's critic pair: 0 = -Q1 / mean|Q2|, 1 = -Q2 / mean|Q1|
    time_input: str = "authors"  # "authors" (policy.time_input=ding_jin / cpql) or "genpol"
    critic_sum: bool = True  # learner.critic_reduction=sum (theirs), else genpol's default sb3
    genpol: dict[str, Any] = field(default_factory=dict)  # head and learner options beyond the matched ones
    theirs: dict[str, Any] = field(default_factory=dict)  # their constructor options beyond the matched ones
    perturb_ema: bool = False  # CPQL: the EMA actor away from the online one (as after training)
    departure: dict[str, str] | None = None  # where, the authors, genpol
    option: str | None = None  # genpol's option that is theirs, if any


HEAD_KEYS = {"scale_input", "clamp_gradient", "ct_distance", "ct_noise_sampling", "target_decay", "target_every",
             "sampling_steps", "time_input", "target_warmup", "ct_schedule_repeats"}


def build_genpol(setting: Setting, kind: str, model: nn.Module, critic: nn.Module, critic_target: nn.Module
                 ) -> tuple[QGradientActor, dict[str, Any]]:
    """genpol's learner at the authors' settings (its options for their behaviour), holding their weights."""
    authors_time = "ding_jin" if kind == "ding" else "cpql"
    head_options = {"sampling_steps": SAMPLING_STEPS if kind == "ding" else 1,  # CPQL: the onestep sampler
                    "scale_input": kind == "cpql",  # Ding & Jin feed a_tau raw; CPQL scales by c_in
                    "clamp_gradient": "zero", "ct_loss_scale": True, "ct_distance": "l2",
                    "ct_noise_sampling": "uniform", "sigma_data": 0.5, "eps": 0.002, "tau_max": 80.0,
                    "tau_min_sampling": 2.0, "rho": 7.0, "ct_initial_scales": SCALES - 1,
                    "ct_final_scales": SCALES - 1, "ct_total_steps": 1,  # N = SCALES at genpol's first CT step
                    "time_input": authors_time if setting.time_input == "authors" else "genpol",
                    "target_warmup": "hold",  # their CT target is their EMA actor, held until step 1000
                    **{k: v for k, v in setting.genpol.items() if k in HEAD_KEYS}}
    assert ct_num_scales(1, 1, SCALES - 1, SCALES - 1) == SCALES
    head = ConsistencyHead(OBS_DIM, ACT_DIM, **head_options)
    copy_actor(model, head)
    layer_norm = kind == "cpql" and setting.agent == "offline"
    learner_options = {"lr": LR, "gamma": GAMMA, "tau": TAU, "batch_size": BATCH, "buffer_size": BATCH,
                       "eta": setting.eta, "bc_coef": setting.bc,
                       "max_grad_norm": setting.grad_norm if setting.grad_norm > 0 else None,
                       "critic_hidden_sizes": [256, 256, 256], "critic_activation": "mish",
                       "critic_layer_norm": layer_norm, "num_qs": 2, "learning_starts": 0,
                       "critic_reduction": "sum" if setting.critic_sum else "sb3", "actor_ema_warmup": "hold",
                       "critic_lr": 3e-4,  # their critic's Adam, whatever lr
                       **{k: v for k, v in setting.genpol.items() if k not in HEAD_KEYS}}
    algo = QGradientActor(head, QGradientConfig(**learner_options), total_steps=1000, num_envs=1, obs_dim=OBS_DIM,
                          act_dim=ACT_DIM, capacity=BATCH, device=torch.device("cpu"))
    algo.critic.load_heads(critic_heads(critic))
    algo.critic_target.load_heads(critic_heads(critic_target))
    return algo, {**head_options, **learner_options}


def critic_heads(critic: nn.Module) -> list[nn.Sequential]:
    """Their twin critics as plain heads (CPQL's online critics hold ``nn.Identity`` where the offline ones have
    a LayerNorm: left out, the same parameters)."""
    return [nn.Sequential(*[layer for layer in head if not isinstance(layer, nn.Identity)])
            for head in (critic.q1_model, critic.q2_model)]


def make_batch(generator: torch.Generator) -> dict[str, torch.Tensor]:
    return {"obs": torch.randn(BATCH, OBS_DIM, generator=generator),
            "actions": 0.95 * (2 * torch.rand(BATCH, ACT_DIM, generator=generator) - 1),
            "rewards": torch.randn(BATCH, generator=generator),
            "next_obs": torch.randn(BATCH, OBS_DIM, generator=generator),
            "dones": (torch.rand(BATCH, generator=generator) < 0.2).double()}


def sampler_noise(generator: torch.Generator, steps: int, rows: int = BATCH) -> list[torch.Tensor]:
    """x_T's standard normal and one re-noising normal per further step: what one sampling pass draws."""
    return [torch.randn(rows, ACT_DIM, generator=generator) for _ in range(steps)]


class RecordingF:
    """torch.nn.functional for their module, recording the arguments of ``mse_loss`` (the critics' Q and the
    TD target: their target is an inline expression)."""

    def __init__(self, functional: types.ModuleType):
        self.functional, self.calls = functional, []

    def __getattr__(self, name: str) -> Any:
        return getattr(self.functional, name)

    def mse_loss(self, prediction: torch.Tensor, target: torch.Tensor, *args: Any, **kwargs: Any) -> torch.Tensor:
        self.calls.append((prediction.detach().clone(), target.detach().clone()))
        return self.functional.mse_loss(prediction, target, *args, **kwargs)


def perturb_(module: nn.Module, generator: torch.Generator, scale: float = 0.05) -> None:
    with torch.no_grad():
        for parameter in module.parameters():
            parameter.add_(scale * torch.randn(parameter.shape, generator=generator))


# --------------------------------------------------------------------------- the two kinds of reference
class DingJin:
    """Ding & Jin's Consistency-AC (Consistency_QL offline, OnlineAgent online)."""

    kind, repository = "ding", DING
    output_scale = 20.0  # their final layer x 20: about a third of the sampled actions leave [-1, 1]
    files = ("agents/ql_consistency.py: Consistency_QL.train; agents/online_agent.py: OnlineAgent.train; "
             "agents/consistency.py: Consistency.loss, sample")

    def __init__(self, ref: Path):
        self.modules = import_authors(ref, ["agents.ql_consistency", "agents.online_agent", "agents.consistency",
                                            "agents.helpers"])
        self.ql, self.online = self.modules["agents.ql_consistency"], self.modules["agents.online_agent"]
        self.consistency = self.modules["agents.consistency"].Consistency

    def agent(self, setting: Setting) -> Any:
        common = dict(state_dim=OBS_DIM, action_dim=ACT_DIM, max_action=1.0, device="cpu", discount=GAMMA, tau=TAU,
                      n_timesteps=SAMPLING_STEPS, lr=LR, grad_norm=setting.grad_norm)
        if setting.agent == "online":
            return self.online.OnlineAgent(model="consistency", **common, **setting.theirs)
        return self.ql.Consistency_QL(eta=setting.eta, **common, **setting.theirs)

    @staticmethod
    def networks(agent: Any) -> tuple[nn.Module, nn.Module]:
        return agent.model, (agent.ema_model if hasattr(agent, "ema_model") else agent.ema_actor).model

    @contextlib.contextmanager
    def float64_shims(self) -> Iterator[None]:
        """Their sampler builds a float noise level as a float32 tensor; OnlineAgent casts observations with
        ``.float()``: both kept at float64 while their step runs."""
        original = self.consistency.predict_consistency

        def predict_consistency(actor: Any, state: torch.Tensor, action: torch.Tensor, t: Any) -> torch.Tensor:
            if isinstance(t, float):
                t = torch.full((action.shape[0], 1), float(t), dtype=action.dtype, device=action.device)
            return original(actor, state, action, t)

        with patched(self.consistency, "predict_consistency", predict_consistency), \
                patched(torch.Tensor, "float", lambda tensor, *_, **__: tensor):
            yield

    def their_step(self, agent: Any, setting: Setting, batch: dict[str, torch.Tensor], draws: FedDraws
                   ) -> dict[str, Any]:
        recording = RecordingF(self.ql.F)
        module = self.online if setting.agent == "online" else self.ql
        rewards, not_done = batch["rewards"].unsqueeze(-1), 1 - batch["dones"].unsqueeze(-1)
        if setting.agent == "online":
            data = SimpleNamespace(observations=batch["obs"], actions=batch["actions"],
                                   next_observations=batch["next_obs"],
                                   rewards=rewards, dones=batch["dones"].unsqueeze(-1))
            replay = SimpleNamespace(sample=lambda size: data)
        else:
            replay = SimpleNamespace(sample=lambda size: (batch["obs"], batch["actions"], batch["next_obs"], rewards,
                                                          not_done))
        with self.float64_shims(), patched(module, "F", recording), \
                patched(self.ql, "timesteps_schedule", lambda *_, **__: SCALES), \
                patched(self.ql, "improved_timesteps_schedule", lambda *_, **__: SCALES), draws:
            metric = agent.train(replay, iterations=1, batch_size=BATCH,
                                 log_writer=SimpleNamespace(add_scalar=lambda *a, **k: None))
        return {"metric": {k: v[0] for k, v in metric.items()}, "target": recording.calls[0][1]}

    def draws(self, setting: Setting, generator: torch.Generator) -> tuple[FedDraws, FedDraws]:
        """Their order: next actions (EMA actor), actions (actor), the pair's coin, CT noise, CT indices.
        genpol's: next actions, actions, CT indices, CT noise, the pair's permutation."""
        backup = setting.theirs.get("max_q_backup", False)
        next_noise = sampler_noise(generator, SAMPLING_STEPS, BATCH * (10 if backup else 1))
        genpol_samples = setting.genpol.get("max_q_backup_samples", 1)
        # genpol with one sample per next state: the first of their 10
        genpol_next = [noise[::10] for noise in next_noise] if backup and genpol_samples == 1 else next_noise
        actor_noise = sampler_noise(generator, SAMPLING_STEPS)
        ct_noise = torch.randn(BATCH, ACT_DIM, generator=generator)
        ct_index = torch.randint(0, SCALES - 1, (BATCH,), generator=generator)
        coin, permutation = (0.75, torch.tensor([0, 1])) if setting.pair == 0 else (0.25, torch.tensor([1, 0]))
        if setting.agent == "online":
            return (FedDraws(next_noise + actor_noise, [], [coin]),
                    FedDraws(genpol_next + actor_noise, [], [permutation]))
        theirs = FedDraws(next_noise + actor_noise + [ct_noise], [ct_index], [coin])
        ours = FedDraws(genpol_next + actor_noise + ([ct_noise] if setting.bc > 0 else []),
                        [ct_index] if setting.bc > 0 else [], [permutation])
        return theirs, ours

    def compare_bc(self, named: dict[str, torch.Tensor], metric: dict[str, float]) -> dict[str, Any]:
        return {"bc_loss": difference(named["bc_loss"], metric["bc_loss"])} if "bc_loss" in metric else {}

    def embedding(self) -> nn.Module:
        return self.modules["agents.helpers"].SinusoidalPosEmb(16)


class Cpql:
    """CPQL (CPQL.train with the onestep sampler)."""

    kind, repository = "cpql", CPQL
    output_scale = 60.0  # c_in shrinks the network's input at sigma 80: x 60 for about a third beyond [-1, 1]
    files = ("agents/ql_cm.py: CPQL.train; "
             "agents/karras_diffusion.py: KarrasDenoiser.consistency_losses, denoise, sample")

    def __init__(self, ref: Path):
        self.modules = import_authors(ref, ["agents.ql_cm", "agents.helpers"])
        self.ql = self.modules["agents.ql_cm"]

    def agent(self, setting: Setting) -> Any:
        return self.ql.CPQL(device="cpu", state_dim=OBS_DIM, action_dim=ACT_DIM, rl_type=setting.agent, discount=GAMMA,
                            alpha=setting.bc, eta=setting.eta, lr=LR, grad_norm=setting.grad_norm, sampler="onestep",
                            memory_size=BATCH, **setting.theirs)

    @staticmethod
    def networks(agent: Any) -> tuple[nn.Module, nn.Module]:
        return agent.actor, agent.actor_target

    def their_step(self, agent: Any, setting: Setting, batch: dict[str, torch.Tensor], draws: FedDraws
                   ) -> dict[str, Any]:
        recording = RecordingF(self.ql.F)
        sample = (batch["obs"], batch["actions"], batch["next_obs"], batch["rewards"].unsqueeze(-1),
                  1 - batch["dones"].unsqueeze(-1))
        with patched(self.ql, "F", recording), draws:
            metric = agent.train(SimpleNamespace(sample=lambda size: sample), batch_size=BATCH)
        return {"metric": {k: v[0] for k, v in metric.items()}, "target": recording.calls[0][1]}

    def draws(self, setting: Setting, generator: torch.Generator) -> tuple[FedDraws, FedDraws]:
        """Their order: next actions (online actor), CT noise, CT indices (from sigma_max down), actions, the
        pair's coin (offline). genpol's: next actions, actions, CT indices (ascending), CT noise, the pair."""
        next_noise, actor_noise = sampler_noise(generator, 1), sampler_noise(generator, 1)
        ct_noise = torch.randn(BATCH, ACT_DIM, generator=generator)
        their_index = torch.randint(0, SCALES - 1, (BATCH,), generator=generator)
        coin, permutation = (0.75, torch.tensor([0, 1])) if setting.pair == 0 else (0.25, torch.tensor([1, 0]))
        theirs = FedDraws(next_noise + [ct_noise] + actor_noise, [their_index],
                          [coin] if setting.agent == "offline" else [])
        ours = FedDraws(next_noise + actor_noise + ([ct_noise] if setting.bc > 0 else []),
                        [SCALES - 2 - their_index] if setting.bc > 0 else [], [permutation])
        return theirs, ours

    def compare_bc(self, named: dict[str, torch.Tensor], metric: dict[str, float]) -> dict[str, Any]:
        # their bc_loss is before alpha; genpol's named bc_loss after bc_coef
        return {"bc_loss": difference(named["bc_loss"], metric["bc_loss"])} if "bc_loss" in named else {}

    def embedding(self) -> nn.Module:
        return self.modules["agents.helpers"].SinusoidalPosEmb(16)


def one_step(reference: Any, setting: Setting, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    generator = torch.Generator().manual_seed(seed)
    agent = reference.agent(setting)
    model, ema = reference.networks(agent)
    with torch.no_grad():  # actions beyond the box for about a third of the samples; the EMA actor = the actor
        model.final_layer.weight.mul_(reference.output_scale)
        model.final_layer.bias.mul_(reference.output_scale)
        ema.load_state_dict(model.state_dict())
    perturb_(agent.critic_target, generator)  # target critics away from the critics
    algo, options = build_genpol(setting, reference.kind, model, agent.critic, agent.critic_target)
    if setting.perturb_ema:  # their actor_target (CPQL's EMA actor) and genpol's EMA actor, identically
        state = torch.Generator().manual_seed(seed + 1).get_state()
        perturb_(ema, torch.Generator().set_state(state))
        perturb_(algo.ema_head.network, torch.Generator().set_state(state))
    batch = make_batch(generator)
    their_draws, our_draws = reference.draws(setting, generator)
    steps = algo.head.sampling_steps  # the share of sampled actions beyond [-1, 1] at the starting weights
    with torch.no_grad(), FedDraws(sampler_noise(torch.Generator().manual_seed(seed + 2), steps), [], []):
        saturated = (algo.head._multistep(batch["obs"], None).abs() > 1).double().mean().item()

    their_actor_recorder = GradientRecorder(agent.actor_optimizer)
    their_critic_recorder = GradientRecorder(agent.critic_optimizer)
    theirs = reference.their_step(agent, setting, batch, their_draws)

    our_actor_recorder = GradientRecorder(algo.actor_optimizer)
    our_critic_recorder = GradientRecorder(algo.critic_optimizer)
    recorded: dict[str, torch.Tensor] = {}
    critic_loss = algo._critic_loss

    def recording_critic_loss(*args: Any) -> Any:
        loss, q, target = critic_loss(*args)
        recorded["target"] = target
        return loss, q, target

    algo._critic_loss = recording_critic_loss
    with our_draws:
        named = algo.gradient_step(ReplayBatch(**batch))

    their_layers, our_layers = their_actor_linears(model), genpol_actor_linears(algo.head.network)
    their_actor, our_actor = actor_params(their_layers), actor_params(our_layers)
    metric = theirs["metric"]
    losses = {"td_target": difference(recorded["target"], theirs["target"]),
              "critic_loss": difference(named["value"], metric["critic_loss"]),
              "q_loss": difference(named["q_loss"], metric.get("ql_loss", metric["actor_loss"])),
              **reference.compare_bc(named, metric),
              "actor_loss": difference(named["policy"], metric["actor_loss"])}
    if not setting.critic_sum:  # genpol's value is then half theirs
        losses["critic_loss_x2"] = difference(2 * named["value"], metric["critic_loss"])
    gradients = {
        "actor": paired([our_actor_recorder.gradients[id(p)] for p in our_actor],
                        [their_actor_recorder.gradients[id(p)] for p in their_actor]),
        "critic": paired([our_critic_recorder.gradients[id(p)] for p in algo.critic.parameters()],
                         their_critic_stacked(agent.critic, lambda p: their_critic_recorder.gradients[id(p)]))}
    after = {"actor": paired([p.detach() for p in our_actor], [p.detach() for p in their_actor]),
             "critic": paired([p.detach() for p in algo.critic.parameters()],
                              their_critic_stacked(agent.critic, lambda p: p.detach())),
             "critic_target": paired([p.detach() for p in algo.critic_target.parameters()],
                                     their_critic_stacked(agent.critic_target, lambda p: p.detach()))}
    reference_config = {"agent": setting.agent, "eta": setting.eta, "bc_weight": setting.bc,
                        "grad_norm": setting.grad_norm, "critic_pair": ["q1/|q2|", "q2/|q1|"][setting.pair],
                        **setting.theirs}
    return {"genpol_options": options, "saturated_share": saturated, "reference_config": reference_config,
            "differences": {"losses": losses, "gradients": gradients, "parameters_after_step": after}}


# --------------------------------------------------------------------------- rows without an update
def schedule_row(reference: DingJin) -> dict[str, Any]:
    """N(k) of consistency training over an offline run: theirs restarts with every ``train`` call
    (``iterations`` = eval_freq 50 x 1000 steps in offline.py); genpol's default grows once over
    ct_total_steps, ``policy.ct_schedule_repeats=true ct_total_steps=50000 ct_final_scales=149`` is theirs
    (read off the head's own ``imitation_loss`` at each step count)."""
    per_call, total = 50 * 1000, 2000 * 1000  # offline.py: eval_freq x num_steps_per_epoch; num_epochs x 1000
    steps = [0, 1, 100, 25_000, 49_999, 50_000, 50_001, 1_000_000, total - 1]
    theirs = [reference.ql.timesteps_schedule(k % per_call, per_call, 2, 150) for k in steps]
    ours = [ct_num_scales(k + 1, total, 2, 150) for k in steps]  # genpol counts the step before drawing N
    head = ConsistencyHead(OBS_DIM, ACT_DIM, hidden_sizes=(8,), ct_schedule_repeats=True, ct_total_steps=per_call,
                           ct_initial_scales=2, ct_final_scales=149)
    drawn: list[int] = []
    head.consistency_training_loss = lambda obs, actions, num_scales: drawn.append(num_scales) or torch.zeros(())
    for k in steps:  # k steps taken before this one, as their global step k
        head.ct_step = k
        head.imitation_loss(torch.zeros(1, OBS_DIM), torch.zeros(1, ACT_DIM))
    return {"setting": "N(k) of the CT loss at global step k (offline.py: train(iterations=50000) per call, "
                       "2000 epochs of 1000 steps; genpol ct_total_steps = 2,000,000)",
            "genpol_option": "policy.ct_schedule_repeats=true policy.ct_total_steps=50000 policy.ct_final_scales=149",
            "differences": {"steps": steps, "authors_N": theirs, "genpol_N": ours, "genpol_option_N": drawn,
                            "option_equal": drawn == theirs}}


def ema_row(reference: DingJin, seed: int) -> dict[str, Any]:
    """When the EMA actor (also their CT target) moves: theirs checks ``step % update_ema_every`` before
    incrementing ``step`` and ``step_ema`` returns before ``step_start_ema``, so it keeps the initial actor
    and first averages after update 1001; genpol's default copies every 5 steps before step 1000
    (``actor_ema_warmup=copy``), ``hold`` is theirs. Then one average on both sides, from the initial actor."""
    torch.manual_seed(seed)
    setting = Setting("ema")
    agent = reference.agent(setting)
    algo, _ = build_genpol(setting, "ding", agent.model, agent.critic, agent.critic_target)
    moves: list[int] = []
    update = agent.ema.update_model_average
    agent.ema.update_model_average = lambda *_: moves.append(agent.step + 1)  # as updates taken, from 1
    for _ in range(1012):  # their train loop's tail, update by update (their step_ema decides)
        if agent.step % agent.update_ema_every == 0:
            agent.step_ema()
        agent.step += 1
    agent.ema.update_model_average = update
    cfg = algo.cfg
    due = {warmup: [n for n in range(1, 1013) if ema_update_due(n, cfg.actor_ema_every, cfg.actor_ema_start, warmup)]
           for warmup in ("hold", "copy")}
    head_due = [n for n in range(1, 1013) if ema_update_due(n, algo.head.target_every, algo.head.target_start,
                                                            algo.head.target_warmup)]
    # the first average: perturbed ("trained") online weights, the same on both sides, into the initial actor
    state = torch.Generator().manual_seed(seed).get_state()
    perturb_(agent.actor, torch.Generator().set_state(state))
    perturb_(algo.head.network, torch.Generator().set_state(state))
    agent.step = 1000
    agent.step_ema()
    algo.actor_steps = 1001  # hold: due as an average after update 1001 (their step 1000)
    algo.update_ema_head(copy_online=False)
    first_average = paired(actor_params(genpol_actor_linears(algo.ema_head.network)),
                           actor_params(their_actor_linears(agent.ema_actor.model)))
    return {"setting": "EMA actor and CT target: the updates after which they move (1..1012), and the first average",
            "genpol_option": "learner.actor_ema_warmup=hold policy.target_warmup=hold",
            "differences": {"authors_moves_after_update": moves, "genpol_hold_moves": due["hold"],
                            "genpol_ct_target_hold_moves": head_due, "option_equal": due["hold"] == moves == head_due,
                            "genpol_copy_moves_before_1000": len([n for n in due["copy"] if n < 1000]),
                            "first_average": first_average}}


def critic_lr_row(reference: Any) -> dict[str, Any]:
    """Their critic's Adam is built with lr=3e-4 whatever ``lr`` (the actor's) is; genpol's ``learner.critic_lr``."""
    agent = (reference.ql.CPQL(device="cpu", state_dim=OBS_DIM, action_dim=ACT_DIM, lr=3e-5, memory_size=BATCH)
             if reference.kind == "cpql" else
             reference.ql.Consistency_QL(state_dim=OBS_DIM, action_dim=ACT_DIM, max_action=1.0, device="cpu",
                                         discount=GAMMA, tau=TAU, lr=3e-5))
    rates = {}
    for critic_lr in (None, 3e-4):
        cfg = QGradientConfig(lr=3e-5, critic_lr=critic_lr, batch_size=BATCH, buffer_size=BATCH)
        algo = QGradientActor(ConsistencyHead(OBS_DIM, ACT_DIM), cfg, total_steps=1, num_envs=1, obs_dim=OBS_DIM,
                              act_dim=ACT_DIM, capacity=BATCH, device=torch.device("cpu"))
        rates[critic_lr] = (algo.actor_optimizer.param_groups[0]["lr"], algo.critic_optimizer.param_groups[0]["lr"])
    return {"setting": "lr=3e-5 (the pen tasks' learning rate)", "genpol_option": "learner.critic_lr=3e-4",
            "differences": {"authors_actor_lr": agent.actor_optimizer.param_groups[0]["lr"],
                            "authors_critic_lr": agent.critic_optimizer.param_groups[0]["lr"],
                            "genpol_actor_lr": rates[None][0], "genpol_critic_lr": rates[None][1],
                            "genpol_option_actor_lr": rates[3e-4][0], "genpol_option_critic_lr": rates[3e-4][1]}}


def lr_decay_row(reference: DingJin) -> dict[str, Any]:
    """--lr_decay (their scripts/offline.sh): CosineAnnealingLR(T_max = num_epochs = 2000) stepped at the end of
    each ``train`` call, which offline.py makes 50 x 1000 steps long: 40 steps of the scheduler in a 2M-step run.
    genpol's ``offline_lr_decay`` moves every step and reaches 0; ``offline_lr_decay_every=50000
    offline_lr_decay_horizon=2000`` is theirs (read off ``OfflineRLRunner.decayed_lr``)."""
    agent = reference.ql.Consistency_QL(state_dim=OBS_DIM, action_dim=ACT_DIM, max_action=1.0, device="cpu",
                                        discount=GAMMA, tau=TAU, lr=LR, lr_decay=True, lr_maxt=2000)
    per_call, total = 50 * 1000, 2000 * 1000
    cfg = QGradientConfig(lr=LR, offline_lr_decay=True, offline_lr_decay_every=per_call, offline_lr_decay_horizon=2000,
                          batch_size=BATCH, buffer_size=BATCH)
    algo = QGradientActor(ConsistencyHead(OBS_DIM, ACT_DIM), cfg, total_steps=1, num_envs=1, obs_dim=OBS_DIM,
                          act_dim=ACT_DIM, capacity=BATCH, device=torch.device("cpu"))
    runner = OfflineRLRunner(algo, None, steps=total, batch_size=BATCH)  # only its schedule is read
    theirs, ours = [], []
    with warnings.catch_warnings():  # no optimizer step here: torch warns about the order
        warnings.simplefilter("ignore", UserWarning)
        for call in range(total // per_call):  # one scheduler step per train call
            theirs.append(agent.actor_optimizer.param_groups[0]["lr"])  # the rate during this call
            algo.offline_steps = call * per_call + per_call - 1  # its last step
            ours.append(runner.decayed_lr(LR))
            agent.actor_lr_scheduler.step()
            agent.critic_lr_scheduler.step()
    algo.offline_steps = total
    gaps = [abs(a - b) / a for a, b in zip(theirs, ours)]
    return {"setting": "--lr_decay over an offline run of 2000 epochs x 1000 steps (lr 3e-4)",
            "genpol_option": "learner.offline_lr_decay_every=50000 learner.offline_lr_decay_horizon=2000",
            "differences": {"authors_final_actor_lr": agent.actor_optimizer.param_groups[0]["lr"],
                            "authors_final_critic_lr": agent.critic_optimizer.param_groups[0]["lr"],
                            "genpol_lr_at_last_step": cosine_lr(LR, total - 1, total),
                            "genpol_lr_at_half": cosine_lr(LR, total // 2, total),
                            "genpol_option_final_lr": runner.decayed_lr(LR),
                            "option_lr_per_call_max_rel": max(gaps)}}


def time_input_row(reference: Any) -> dict[str, Any]:
    """Their time embedding (``SinusoidalPosEmb(16)`` of their time) against ``policy.time_input``'s at the 40
    Karras levels, before the time MLP."""
    levels = torch.tensor([(0.002 ** (1 / 7) + i / 39 * (80 ** (1 / 7) - 0.002 ** (1 / 7))) ** 7 for i in range(40)])
    option = "ding_jin" if reference.kind == "ding" else "cpql"
    their_time = levels if reference.kind == "ding" else 1000 * 0.25 * torch.log(levels + 1e-44)
    ours = ConsistencyHead(OBS_DIM, ACT_DIM, time_input=option).network.time_embedding(levels)
    return {"setting": "time embedding at the 40 Karras levels", "genpol_option": f"policy.time_input={option}",
            "differences": {"embedding": difference(ours, reference.embedding()(their_time))}}


# --------------------------------------------------------------------------- the settings
def ding_settings() -> list[Setting]:
    aligned = ("genpol's options for theirs (policy.time_input=ding_jin, learner.critic_reduction=sum, "
               "actor_ema_warmup and target_warmup hold)")
    improved = {"ct_distance": "pseudo_huber", "ct_noise_sampling": "lognormal", "target_decay": 0.0,
                "target_every": 1, "target_warmup": "copy"}  # their improved CT's teacher: the online network
    return [
        Setting(f"offline step, eta 1, clip 1, {aligned}"),
        Setting(f"offline step, eta 1, no clip, other critic pair, {aligned}", grad_norm=0.0, pair=1),
        Setting(f"offline step, BC only (eta 0): consistency training, {aligned}", eta=0.0),
        Setting(f"online step (OnlineAgent, genpol bc_coef 0), Q-loss only, {aligned}", agent="online", bc=0.0),
        Setting(f"offline step, their q_norm=True, learner.q_norm=true, {aligned}", theirs={"q_norm": True},
                genpol={"q_norm": True}),
        Setting(f"offline step, their max_q_backup=True, learner.max_q_backup_samples=10, {aligned}",
                theirs={"max_q_backup": True}, genpol={"max_q_backup_samples": 10}),
        Setting("departure: time input (genpol's own embedding)", time_input="genpol",
                departure={"where": "time input of F_theta",
                           "the authors": "sinusoidal embedding (transformer frequencies 10000^(-k/7)) of the raw "
                                          "noise level t in [0.002, 80]",
                           "genpol": "sin/cos(2^k pi u) of u = log(tau/eps) / log(tau_max/eps) in [0, 1]"},
                option="policy.time_input=ding_jin"),
        Setting("departure: critic loss scale (genpol's 0.5 sum_i MSE, no clip)", grad_norm=0.0, critic_sum=False,
                departure={"where": "critic loss", "the authors": "mse(Q1, y) + mse(Q2, y)",
                           "genpol": "0.5 (mse(Q1, y) + mse(Q2, y)) (critic_reduction sb3; mean is the same for 2 "
                                     "critics): gradients half theirs; after Adam, a difference only through eps"},
                option="learner.critic_reduction=sum"),
        Setting("departure: clamp gradient (genpol's default inward), online Q-loss only", agent="online", bc=0.0,
                genpol={"clamp_gradient": "inward"},
                departure={"where": "backward pass of the sampler's clamp to [-1, 1]",
                           "the authors": "action.clamp_(-1, 1): zero gradient outside the box",
                           "genpol": "clamp_gradient=inward by default"}, option="policy.clamp_gradient=zero"),
        Setting("departure: input scaling (genpol's default scale_input=true)", genpol={"scale_input": True},
                departure={"where": "F_theta's noisy-action input", "the authors": "raw a_tau (no c_in)",
                           "genpol": "c_in a_tau, c_in = 1/sqrt(tau^2 + 0.25), by default"},
                option="policy.scale_input=false"),
        Setting("departure: their q_norm=True (12 of their 20 offline tasks), genpol's default",
                theirs={"q_norm": True},
                departure={"where": "TD target",
                           "the authors": "q_norm: y / (std(y) + 1e-6) on 12 of 20 offline tasks (walker2d-medium, "
                                          "-medium-expert, 5 antmaze, pen, kitchen)",
                           "genpol": "no normalization by default"}, option="learner.q_norm=true"),
        Setting("departure: their max_q_backup=True (5 of their 6 antmaze tasks), genpol's default",
                theirs={"max_q_backup": True},
                departure={"where": "TD target", "the authors": "max_q_backup: 10 EMA-actor samples per next state, "
                                                                "max over them per critic, then the min",
                           "genpol": "one sample by default; here genpol's sample is the first of their 10"},
                option="learner.max_q_backup_samples=10"),
        Setting("departure: improved CT (their improved_CT=True: pseudo-Huber, log-normal levels, online teacher; "
                "genpol ct_distance=pseudo_huber, ct_noise_sampling=lognormal, target_decay 0, target_every 1)",
                theirs={"improved_CT": True}, genpol=improved,
                departure={"where": "pseudo-Huber CT distance",
                           "the authors": "elementwise sqrt(d_i^2 + c^2) - c, averaged over the action dims "
                                          "(c = 0.00054 sqrt(A))",
                           "genpol": "sqrt(||d||^2 + c^2) - c over the action vector (improved CT's definition); "
                                     "equal only for A = 1 (unused in their scripts: improved_CT=False)"},
                option="policy.ct_distance=pseudo_huber_per_dim"),
        Setting("improved CT as above with policy.ct_distance=pseudo_huber_per_dim: their distance",
                theirs={"improved_CT": True}, genpol={**improved, "ct_distance": "pseudo_huber_per_dim"}),
    ]


def cpql_settings() -> list[Setting]:
    aligned = "genpol's options for theirs (policy.time_input=cpql, learner.critic_reduction=sum)"
    matched = {"target_update_interval": 5}
    return [
        Setting(f"offline step, Q-term only (alpha 0, eta 1), onestep sampler, LayerNorm critics, "
                f"target_update_interval 5, {aligned}", bc=0.0, genpol=matched),
        Setting(f"offline step, Q-term only, other critic pair, no clip, {aligned}", bc=0.0, pair=1, grad_norm=0.0,
                genpol=matched),
        Setting(f"departure: critic target update (genpol's default Polyak every step), {aligned}", bc=0.0,
                departure={"where": "target critics",
                           "the authors": "EMA decay 0.995 every 5 steps from step 1000, the initial critics before",
                           "genpol": "Polyak tau 0.005 every step (target_update_interval 5 matches only until a "
                                     "5th step)"}),
        Setting(f"departure: BC term (alpha 1, eta 0), {aligned}", eta=0.0, genpol=matched,
                departure={"where": "BC term",
                           "the authors": "reconstruction: (1/t^2 + 1/0.25) mean|clamp(f(a + t xi, t)) - a|^2, "
                                          "N = 40 fixed (their consistency loss is computed and unused)",
                           "genpol": "consistency training: "
                                     "100/dtau mean|f(a + tau_{n+1} xi) - f_target(a + tau_n xi)|^2, "
                                     "N(k) from 2 to 151"}),
        Setting(f"departure: online rl_type (Q-term -min(Q1, Q2), no LayerNorm), {aligned}", agent="online", bc=0.0,
                genpol=matched,
                departure={"where": "Q-term online", "the authors": "-mean min(Q1, Q2), not normalized",
                           "genpol": "-mean Q_i / mean|Q_j| always"}),
        Setting(f"departure: clamp gradient (genpol's default inward), {aligned}", bc=0.0,
                genpol={**matched, "clamp_gradient": "inward"},
                departure={"where": "backward pass of the sampler's clamp to [-1, 1]",
                           "the authors": "clamp in denoise and in sample: zero gradient outside the box",
                           "genpol": "clamp_gradient=inward by default"}, option="policy.clamp_gradient=zero"),
        Setting(f"departure: TD target's next action (EMA actor away from the actor), {aligned}", bc=0.0,
                perturb_ema=True, genpol=matched,
                departure={"where": "TD target's next action", "the authors": "the online actor",
                           "genpol": "the EMA actor"}),
        Setting("departure: time input (genpol's own embedding)", bc=0.0, time_input="genpol", genpol=matched,
                departure={"where": "time input of F_theta",
                           "the authors": "sinusoidal embedding of 250 log(sigma)",
                           "genpol": "sin/cos(2^k pi u) of u = log(tau/eps) / log(tau_max/eps)"},
                option="policy.time_input=cpql"),
    ]


def row(reference: Any, commit: str, setting: str, payload: dict[str, Any]) -> dict[str, Any]:
    return {"method": "consistency_ac", "repository": reference.repository, "commit": commit, "file": reference.files,
            "setting": setting, "dtype": "float64", "date": date_stamp(), "machine": machine(), **payload}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", type=Path, action="append", required=True,
                        help="a snapshot of Ding & Jin's or CPQL's repository (repeat for both)")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)  # their networks and tensors in float64, as genpol's
    rows = []
    for ref in args.ref:
        if (ref / "agents" / "ql_consistency.py").exists():
            reference, settings = DingJin(ref), ding_settings()
        elif (ref / "agents" / "ql_cm.py").exists():
            reference, settings = Cpql(ref), cpql_settings()
        else:
            raise SystemExit(f"{ref}: neither agents/ql_consistency.py (Ding & Jin) nor agents/ql_cm.py (CPQL)")
        commit = commit_of(ref)
        for setting in settings:
            result = one_step(reference, setting, args.seed)
            extra: dict[str, Any] = {}
            if setting.departure:
                extra["departure"] = setting.departure
            if setting.option:
                extra["genpol_option"] = setting.option
            rows.append(row(reference, commit, setting.label, {**extra, **result}))
        extra_rows = [critic_lr_row(reference), time_input_row(reference)]
        if reference.kind == "ding":
            extra_rows += [schedule_row(reference), ema_row(reference, args.seed), lr_decay_row(reference)]
        for payload in extra_rows:
            rows.append(row(reference, commit, payload.pop("setting"), payload))
    write_results("parity_consistency_ac.json", rows)  # a list of rows, as every bench/results/parity*.json
    print_table(rows)


def rel(differences: dict[str, Any], group: str, key: str) -> str:
    value = differences.get(group, {}).get(key)
    return "-" if value is None else f"{value['rel']:.1e}"


def print_table(rows: list[dict[str, Any]]) -> None:
    print("| repository | setting | TD target | critic loss | L_Q | L_BC | actor grads | critic grads | actor after "
          "| critic after | target critic after |")
    print("|---|---|---|---|---|---|---|---|---|---|---|")
    for r in rows:
        d = r["differences"]
        if "losses" not in d:
            continue
        print(f"| {r['repository'].split('/')[0]} | {r['setting']} | {rel(d, 'losses', 'td_target')} "
              f"| {rel(d, 'losses', 'critic_loss')} | {rel(d, 'losses', 'q_loss')} | {rel(d, 'losses', 'bc_loss')} "
              f"| {rel(d, 'gradients', 'actor')} | {rel(d, 'gradients', 'critic')} "
              f"| {rel(d, 'parameters_after_step', 'actor')} | {rel(d, 'parameters_after_step', 'critic')} "
              f"| {rel(d, 'parameters_after_step', 'critic_target')} |")
    for r in rows:
        if "losses" not in r["differences"]:
            print(f"\n{r['repository'].split('/')[0]}: {r['setting']}: {r['differences']}")


if __name__ == "__main__":
    main()
