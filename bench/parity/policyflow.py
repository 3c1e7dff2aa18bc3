"""Update-level parity of genpol's PolicyFlow with a THIRD-PARTY port, on identical inputs, in float64.

PolicyFlow (Yang, Liu, Chen; ICLR 2026) has no official code. The reference here is the third-party
port SUPERGUPPY0907/rsl_rl (``rsl_rl/algorithms/policyflow.py``, ``rsl_rl/modules/actor_critic_policyflow.py``,
``rsl_rl/modules/policyflow/``), NOT the authors' code: agreement with it says nothing about the paper
beyond what that port encodes. It is not part of genpol: take a snapshot anywhere and point ``--ref`` at
its root. This script imports those files from there; what they import and do not need here (tensordict,
``rsl_rl.utils``, ``rsl_rl.networks``, ``rsl_rl.storage``) is shimmed in this process only: ``TensorDict``
as a dict, ``resolve_optimizer`` (adamw -> ``torch.optim.AdamW``), ``resolve_nn_activation`` (elu ->
``nn.ELU``), a storage that yields the one prepared minibatch.

Their ``PolicyFlow.update`` runs for exactly one minibatch (``mini_batches=1``, ``learning_epochs=1``); genpol's
side is ``MinibatchUpdater.eager_step`` with ``PPOClipLoss`` on a ``PolicyFlowHead``. Both see the same batch:
observations, x0, x1 (their sampler, old weights), delta, the old log std and log-prob, advantages (theirs
normalized over the rollout as their storage does, genpol normalizing the same minibatch itself), returns and
old values; the current network is the old one perturbed (so dv != 0) and the old one is both sides' frozen
snapshot (their ``model_last``). The evaluation time t is fed explicitly: ``torch.randint`` is replaced, for
each call, by the same prescribed indices into each side's time grid, which in the matched rows both hold
k / 20, k = 0 .. 20, in float64 (``policy.time_grid_endpoint=true``: their t = 1 included; with genpol's
default grid, k < 20, t = 1 is never drawn: a row).

The velocity network: theirs is ``FlowMlp(x, FourierMLP(t) + Linear(obs))`` (an MLP on ``[x, emb]``, the time
embedding a random-frequency Fourier feature followed by a Linear-Mish-Linear MLP, the observation entering
through a linear layer added to it); genpol's default ``VelocityNetwork`` is one MLP on ``[obs, x, sin/cos(2^k pi
t)]``. genpol's head is built with ``policy.velocity_network=port`` (``FourierVelocityNetwork``, since
2026-12-03; before, this harness put a wrapper of their modules into genpol's head) and their weights and
frequencies are copied into it layer by layer (``copy_their_network``): their ``model_last`` into the head
before ``begin_update`` (the snapshot), then their current ``model``. Everything, the network's forward
included, is genpol's code.

Compared per row (largest absolute and relative difference): dv, the log-ratio, the policy (clipped surrogate),
entropy, Brownian and value terms, the KL their adaptive learning rate uses and the learning rate after that
rule, each parameter's gradient as the optimizer sees it, each parameter after the step, and the action prior
x1 each sampler draws from the same x0.

genpol settings for a match: ``learner.vf_coef=1.0``, ``learner.clip_range_vf=0.2``, ``learner.ent_coef`` and
``policy.brownian_coef`` = their scales, ``learner.adam_eps=1e-8``, ``learner.grad_clip=joint``, and, options
since 2026-12-02 (genpol's defaults differ; each has a row with genpol's value): ``policy.log_std_bounds=[-20,4]``,
``policy.time_grid_endpoint=true``, ``policy.kl_log_eps=1e-5`` (their KL, log(std ratio + 1e-5)),
``policy.velocity_network=port policy.time_embed_dim=16 policy.activation=elu`` (their network at this width),
``learner.adaptive_lr_rule=per_epoch`` and ``learner.weight_decay`` = their AdamW weight decay (0 in most
rows; their default 1e-5 in one). The harness builds genpol's head and updater from these values directly
(no config): ``PolicyFlowHead(log_std_bounds=, time_grid_endpoint=, kl_log_eps=)``,
``MinibatchUpdater(weight_decay=, adaptive_lr=adaptive_lr(rule, ...))``.

    python bench/parity/policyflow.py --ref /path/to/SUPERGUPPY0907-rsl_rl

Writes ``bench/results/parity_policyflow.json`` (a list of rows: method, repository, commit, differences).
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import importlib.util
import sys
import types
from pathlib import Path
from typing import Any, Iterator

import torch
from torch import nn

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "bench"))  # bench/common (this script lives one folder down)

from common import date_stamp, machine, write_results  # noqa: E402
from shared import difference, reference_commit, worst  # noqa: E402

from genpol.heads import GaussianHead  # noqa: E402
from genpol.heads.policyflow import LOG_STD_BOUNDS, PolicyFlowHead  # noqa: E402
from genpol.nets import ValueNetwork  # noqa: E402
from genpol.storage.rollout import Batch  # noqa: E402
from genpol.updaters.losses import PPOClipLoss  # noqa: E402
from genpol.updaters.minibatch import MinibatchUpdater  # noqa: E402
from genpol.updaters.schedules import adaptive_lr  # noqa: E402

OBS_DIM, ACT_DIM, BATCH, HIDDEN, EMB = 11, 3, 64, [64, 64], 16
LR, DESIRED_KL, RATIO_CLIP, VALUE_CLIP, STEPS = 1e-4, 0.01, 0.2, 0.2, 10
OLD_POLICY_NOISE = 0.05  # current network = old + this x N(0, 1) per weight
PORT_LOG_STD_BOUNDS = (-20.0, 4.0)  # their LearnableVariance's clamp (policy.log_std_bounds=[-20,4])


@dataclasses.dataclass(frozen=True)
class Setting:
    label: str
    grad_clip: float = 0.0  # their grad_norm_clip (0: none) and genpol's learner.max_grad_norm (None if 0)
    joint_clip: bool = True  # genpol's learner.grad_clip=joint (theirs: always one clip over all parameters)
    their_weight_decay: float = 0.0  # their AdamW weight decay (their default 1e-5)
    weight_decay: float = 0.0  # genpol's learner.weight_decay (decoupled, AdamW's)
    adam_eps: float = 1e-8  # genpol's learner.adam_eps (their AdamW: 1e-8)
    log_std_base: float = 0.0  # the old log std (current = this + 0.1 N(0, 1) per dimension)
    degenerate: bool = False  # their degenerate2gaussian, genpol's policy.degenerate_to_gaussian
    their_entropy: float = 0.01  # their gaussian_entropy_loss_scale
    their_brownian: float = 0.01  # their brownian_reg_loss_scale
    genpol_ent_coef: float = 0.01  # genpol's learner.ent_coef
    genpol_brownian: float = 0.01  # genpol's policy.brownian_coef
    float64_grids: bool = True  # False: each side's float32-built time grid and sampler schedule
    log_std_bounds: tuple[float, float] = PORT_LOG_STD_BOUNDS  # genpol's policy.log_std_bounds
    time_grid_endpoint: bool = True  # genpol's policy.time_grid_endpoint (t = 1 among the evaluation times)
    kl_log_eps: float = 1e-5  # genpol's policy.kl_log_eps (their KL's 1e-5 inside the log)
    adaptive_lr_rule: str = "per_epoch"  # genpol's learner.adaptive_lr_rule


SETTINGS = [
    Setting("matched: no gradient clip"),
    Setting("matched: their default joint clip 1.0 (learner.grad_clip=joint)", grad_clip=1.0),
    Setting("matched: joint clip 0.05 (active)", grad_clip=0.05),
    Setting("matched: their config file's scales 0.0025 (ent_coef, brownian_coef 0.0025)", their_entropy=0.0025,
            their_brownian=0.0025, genpol_ent_coef=0.0025, genpol_brownian=0.0025),
    Setting("matched: degenerate to Gaussian, genpol policy.brownian_coef=0", degenerate=True, genpol_brownian=0.0),
    Setting("native grids (each side's float32-built time grid and sampler schedule)", float64_grids=False),
    Setting("matched: their default AdamW weight decay 1e-5 (learner.weight_decay=1e-5)", their_weight_decay=1e-5,
            weight_decay=1e-5),
    Setting("matched: log std 2.5 (inside their [-20, 4]; policy.log_std_bounds=[-20,4])", log_std_base=2.5),
    Setting("departure: genpol's default per-network clip (0.05)", grad_clip=0.05, joint_clip=False),
    Setting("departure: their default AdamW weight decay 1e-5, genpol's default learner.weight_decay=0",
            their_weight_decay=1e-5),
    Setting("departure: genpol's default learner.adam_eps=1e-5", adam_eps=1e-5),
    Setting("departure: log std 2.5, genpol's default policy.log_std_bounds=[-5,2]", log_std_base=2.5,
            log_std_bounds=LOG_STD_BOUNDS),
    Setting("departure: genpol's default policy.kl_log_eps=0 (the exact KL)", kl_log_eps=0.0),
    Setting("departure: genpol's default policy.time_grid_endpoint=false (t = 1 never drawn; the same t fed)",
            time_grid_endpoint=False),
    Setting("departure: degenerate to Gaussian, genpol keeps the Brownian term", degenerate=True),
]


# --------------------------------------------------------------------------- their code, with shims
def load_theirs(ref: Path) -> types.SimpleNamespace:
    """Their algorithm and actor-critic modules, with what they import and this harness does not need
    shimmed (tensordict, rsl_rl.utils / networks / storage)."""
    tensordict = types.ModuleType("tensordict")
    tensordict.TensorDict = dict
    sys.modules["tensordict"] = tensordict
    package = types.ModuleType("rsl_rl")
    package.__path__ = [str(ref / "rsl_rl")]
    sys.modules["rsl_rl"] = package
    utils = types.ModuleType("rsl_rl.utils")
    utils.resolve_nn_activation = lambda name: {"elu": nn.ELU, "relu": nn.ReLU, "tanh": nn.Tanh, "mish": nn.Mish,
                                                "silu": nn.SiLU}[name.lower()]()
    utils.resolve_optimizer = lambda name: {"adamw": torch.optim.AdamW, "adam": torch.optim.Adam}[name.lower()]
    sys.modules["rsl_rl.utils"] = utils
    networks = types.ModuleType("rsl_rl.networks")
    networks.EmpiricalNormalization = None  # observation normalization off (their config's default)
    sys.modules["rsl_rl.networks"] = networks
    storage = types.ModuleType("rsl_rl.storage")

    class RolloutStorage:  # only its Transition is used by PolicyFlow.__init__
        class Transition:
            pass

    storage.RolloutStorage = RolloutStorage
    sys.modules["rsl_rl.storage"] = storage
    modules = types.ModuleType("rsl_rl.modules")
    modules.__path__ = [str(ref / "rsl_rl" / "modules")]
    sys.modules["rsl_rl.modules"] = modules
    actor_critic = importlib.import_module("rsl_rl.modules.actor_critic_policyflow")
    modules.ActorCriticPolicyFlow = actor_critic.ActorCriticPolicyFlow
    spec = importlib.util.spec_from_file_location("rsl_rl.algorithms.policyflow",
                                                  ref / "rsl_rl" / "algorithms" / "policyflow.py")
    algorithm = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(algorithm)
    return types.SimpleNamespace(ActorCriticPolicyFlow=actor_critic.ActorCriticPolicyFlow,
                                 PolicyFlow=algorithm.PolicyFlow, AdaptiveKLScheduler=algorithm.AdaptiveKLScheduler)


class OneMinibatchStorage:
    """Their storage's interface for one update: one minibatch, then ``clear``."""

    def __init__(self, batch: tuple):
        self.batch = batch

    def mini_batch_generator(self, num_mini_batches: int, num_epochs: int = 1) -> Iterator[tuple]:
        assert num_mini_batches == 1 and num_epochs == 1
        yield self.batch

    def clear(self) -> None:
        pass


def copy_their_network(velocity: nn.Module, flow: nn.Module, condition: nn.Module) -> dict[str, str]:
    """Copies their ``FlowMlp`` and ``ConditionLinearLayer`` into genpol's ``FourierVelocityNetwork``
    (``policy.velocity_network=port``); returns genpol's parameter names -> theirs under ``actor.model``."""
    names = {"time_mlp.0": "flow.map_noise.mlp.0", "time_mlp.2": "flow.map_noise.mlp.2", "obs_map": "condition.linear"}
    ours = dict(velocity.named_modules())
    theirs = {f"flow.{n}": m for n, m in flow.named_modules()}
    theirs |= {f"condition.{n}": m for n, m in condition.named_modules()}
    our_net = [n for n, m in velocity.net.named_modules() if isinstance(m, nn.Linear)]
    their_net = [n for n, m in flow.mlp.named_modules() if isinstance(m, nn.Linear)]
    assert len(our_net) == len(their_net)
    names |= {f"net.{o}": f"flow.mlp.{t}" for o, t in zip(our_net, their_net)}
    with torch.no_grad():
        velocity.frequencies.copy_(flow.map_noise.freqs)
        for our, their in names.items():
            ours[our].weight.copy_(theirs[their].weight)
            ours[our].bias.copy_(theirs[their].bias)
    return {f"{o}.{p}": f"{t}.{p}" for o, t in names.items() for p in ("weight", "bias")}


@contextlib.contextmanager
def fed_indices(index: torch.Tensor) -> Iterator[list[int]]:
    """``torch.randint`` returns ``index`` (the evaluation-time draw) on both sides; yields the ``high``s seen."""
    original, highs = torch.randint, []

    def fake(*args: Any, **kwargs: Any) -> torch.Tensor:
        high = kwargs.get("high", args[1] if len(args) > 1 else None)
        highs.append(int(high))
        return index.clone()

    torch.randint = fake
    try:
        yield highs
    finally:
        torch.randint = original


class GradientRecorder:
    """Keeps each parameter's gradient as the optimizer's step sees it (after any clip)."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.gradients: dict[int, torch.Tensor] = {}
        optimizer.register_step_pre_hook(self.record)

    def record(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        self.gradients = {id(p): p.grad.detach().clone() for g in optimizer.param_groups for p in g["params"]
                          if p.grad is not None}


def linears(module: nn.Module) -> list[nn.Linear]:
    return [layer for layer in module.modules() if isinstance(layer, nn.Linear)]


# --------------------------------------------------------------------------- one update on both sides
def one_step(theirs: types.SimpleNamespace, s: Setting, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    obs_dict = {"policy": torch.zeros(BATCH, OBS_DIM)}
    policy = theirs.ActorCriticPolicyFlow(obs_dict, {"policy": ["policy"], "critic": ["policy"]}, ACT_DIM,
                                          actor_hidden_dims=HIDDEN, critic_hidden_dims=HIDDEN, flow_embedding_dim=EMB,
                                          flow_sample_steps=STEPS).double()
    actor = policy.actor
    head = PolicyFlowHead(OBS_DIM, ACT_DIM, hidden_sizes=HIDDEN, activation="elu", integrator="midpoint",
                          integration_steps=STEPS, brownian_coef=s.genpol_brownian,
                          degenerate_to_gaussian=s.degenerate, log_std_bounds=list(s.log_std_bounds),
                          time_grid_endpoint=s.time_grid_endpoint, kl_log_eps=s.kl_log_eps, velocity_network="port",
                          time_embed_dim=EMB).double()
    critic = ValueNetwork(OBS_DIM, HIDDEN, activation="elu").double()
    with torch.no_grad():
        for source, target in zip(linears(policy.critic), linears(critic.net)):
            target.weight.copy_(source.weight)
            target.bias.copy_(source.bias)

    native = {"their_grid": actor.time_steps_tensor.clone(), "genpol_grid": head.time_grid.clone()}
    if s.float64_grids:  # both grids k / 20 in float64 (theirs, and genpol's with the endpoint, end with t = 1)
        grid = torch.arange(2 * STEPS, dtype=torch.float64) / (2 * STEPS)
        with_end = torch.cat([grid, torch.ones(1, dtype=torch.float64)])
        head.time_grid = with_end.clone() if s.time_grid_endpoint else grid.clone()
        actor.time_steps_tensor = with_end
        actor.sample_step_schedule_tensor = torch.arange(STEPS + 1, dtype=torch.float64) / STEPS

    # the batch, drawn with the old weights (their model == model_last at construction)
    obs = torch.randn(BATCH, OBS_DIM, dtype=torch.float64)
    x0 = torch.zeros(BATCH, ACT_DIM, dtype=torch.float64) if s.degenerate else torch.randn(BATCH, ACT_DIM,
                                                                                           dtype=torch.float64)
    old_log_std = torch.full((ACT_DIM,), s.log_std_base, dtype=torch.float64)
    with torch.no_grad():
        x1, _ = actor.sample(x0, obs, BATCH)
        old_std = old_log_std.exp().expand(BATCH, ACT_DIM)
        delta = torch.randn(BATCH, ACT_DIM, dtype=torch.float64) * old_std
        old_log_prob = torch.distributions.Normal(torch.zeros_like(delta), old_std).log_prob(delta).sum(-1)
        for parameter in actor.model.parameters():  # the current policy: old + noise (snapshot stays old)
            parameter.add_(OLD_POLICY_NOISE * torch.randn_like(parameter))
        actor.model["variance"]._log_std.copy_(old_log_std + 0.1 * torch.randn(ACT_DIM, dtype=torch.float64))
    raw_advantages = 2 * torch.randn(BATCH, dtype=torch.float64) + 0.3
    advantages = (raw_advantages - raw_advantages.mean()) / (raw_advantages.std() + 1e-8)  # their storage
    returns, old_values = torch.randn(BATCH, dtype=torch.float64), torch.randn(BATCH, dtype=torch.float64)
    # t = grid[index], the same nominal t on both sides: t = 1 among them where genpol's grid holds it
    index = torch.randint(0, 2 * STEPS + int(s.time_grid_endpoint), (BATCH,))

    # genpol's head (policy.velocity_network=port): their model_last's weights, snapshotted, then their model's
    copy_their_network(head.velocity, actor.model_last["flow"], actor.model_last["condition"])
    head.begin_update()
    their_names = copy_their_network(head.velocity, actor.model["flow"], actor.model["condition"])
    with torch.no_grad():
        head.log_std.copy_(actor.model["variance"]._log_std)

    # the sampler from the same x0 (current weights on both sides)
    with torch.no_grad():
        their_x1, _ = actor.sample(x0, obs, BATCH)
        our_x1 = head.flow(obs, x0)

    # their update
    captured: dict[str, Any] = {}
    original_variation = policy.compute_flow_variation

    def variation(*args: Any, **kwargs: Any) -> Any:
        out = original_variation(*args, **kwargs)
        captured["variation"] = [o.detach().clone() for o in out]
        return out

    policy.compute_flow_variation = variation
    algorithm = theirs.PolicyFlow(policy, desired_kl=DESIRED_KL, learning_rate=LR, mini_batches=1, learning_epochs=1,
                                  gaussian_entropy_loss_scale=s.their_entropy, brownian_reg_loss_scale=s.their_brownian,
                                  ratio_clip=RATIO_CLIP, value_clip=VALUE_CLIP, value_loss_scale=1.0,
                                  grad_norm_clip=s.grad_clip, degenerate2gaussian=s.degenerate,
                                  optimizer="adamw", optimizer_kwargs={"weight_decay": s.their_weight_decay})
    their_recorder = GradientRecorder(algorithm.optimizer)
    algorithm.storage = OneMinibatchStorage((
        {"policy": obs}, x1 + delta, old_values.unsqueeze(-1), advantages.unsqueeze(-1), returns.unsqueeze(-1),
        x1, x0, delta, old_std, old_log_prob.unsqueeze(-1), (None, None), None))
    their_params = {name: p for name, p in policy.named_parameters() if p.requires_grad}
    with fed_indices(index) as their_highs:
        their = algorithm.update()
    their_dv, their_std = captured["variation"][:2]
    their_log_ratio = torch.distributions.Normal(their_dv, their_std).log_prob(delta).sum(-1) - old_log_prob
    their_grad_norm = torch.cat([g.view(-1) for g in their_recorder.gradients.values()]).norm().item()
    # their KL formula without its 1e-5 inside the log: what separates it from genpol's closed form
    their_kl_no_eps = (torch.log(their_std / old_std) + (old_std.square() + their_dv.square())
                       / (2 * their_std.square()) - 0.5).sum(-1).mean()

    # genpol's update
    genpol_terms: dict[str, Any] = {}
    original_change, original_log_ratio = head._velocity_change, head.log_ratio

    def change(*args: Any) -> Any:
        out = original_change(*args)
        genpol_terms["dv"] = (out[2] - out[3]).detach().clone()
        return out

    def log_ratio(*args: Any) -> Any:
        terms = original_log_ratio(*args)
        genpol_terms["terms"] = terms
        return terms

    head._velocity_change, head.log_ratio = change, log_ratio
    adaptive = adaptive_lr(s.adaptive_lr_rule, LR, DESIRED_KL)  # one minibatch: one epoch, either rule
    updater = MinibatchUpdater(head, critic, PPOClipLoss(clip_range=RATIO_CLIP, ent_coef=s.genpol_ent_coef, vf_coef=1.0,
                                                         clip_range_vf=VALUE_CLIP, normalize_advantage=True),
                               lr=LR, epochs=1, minibatch_size=BATCH, max_grad_norm=s.grad_clip or None,
                               target_kl=None, adam_eps=s.adam_eps, adaptive_lr=adaptive, joint_clip=s.joint_clip,
                               weight_decay=s.weight_decay)
    our_recorder = GradientRecorder(updater.optimizer)
    record = {"x0": x0, "x1": x1, "delta": delta, "log_std": old_log_std.expand(BATCH, ACT_DIM).clone(),
              "log_prob": old_log_prob}
    with fed_indices(index) as our_highs:
        named = updater.eager_step(Batch(obs=obs, record=record, advantages=raw_advantages, returns=returns,
                                         values=old_values))
    genpol_lr = adaptive.step(float(named["kl"]))
    terms = genpol_terms["terms"]

    # pair the parameters by name: genpol's log_std, velocity.* (copy_their_network's map), critic.net.* with theirs
    pairs = [(head.log_std, their_params["actor.model.variance._log_std"])]
    pairs += [(p, their_params[f"actor.model.{their_names[name]}"]) for name, p in head.velocity.named_parameters()]
    pairs += [(o, t) for lo, lt in zip(linears(critic.net), linears(policy.critic))
              for o, t in ((lo.weight, lt.weight), (lo.bias, lt.bias))]
    assert len(pairs) == len(their_params)
    gradients = [difference(our_recorder.gradients[id(o)], their_recorder.gradients[id(t)]) for o, t in pairs]
    parameters = [difference(o.detach(), t.detach()) for o, t in pairs]
    brownian_theirs = their.get("brownian_reg_loss", 0.0) / s.their_brownian if s.their_brownian else 0.0
    result = {
        "dv": difference(genpol_terms["dv"], their_dv),
        "log_ratio": difference(terms.log_ratio.squeeze(-1).detach(), their_log_ratio),
        "loss_terms": {
            "policy_clipped_surrogate": difference(named["policy"], their["policy_loss"]),
            "entropy": difference(-s.genpol_ent_coef * named["entropy"], their["gaussian_entropy_loss"]),
            "brownian_scaled": difference(terms.aux_loss.detach(), s.their_brownian * brownian_theirs
                                          if not s.degenerate else 0.0),
            "value": difference(named["value"], their["value_loss"]),
        },
        "values": {"policy": float(named["policy"]), "brownian_unscaled_genpol": float(named["head/brownian"]),
                   "brownian_unscaled_theirs": brownian_theirs if not s.degenerate else None,
                   "brownian_scaled_genpol": float(terms.aux_loss), "kl_genpol": float(named["kl"]),
                   "kl_theirs": their["metrics"]["kl"], "their_gradient_norm": their_grad_norm,
                   "clipfrac": float(named["clipfrac"]) if "clipfrac" in named else None},
        "kl": difference(named["kl"], their["metrics"]["kl"]),
        "kl_vs_theirs_without_1e-5": difference(named["kl"], their_kl_no_eps),
        "lr_after_adaptive_rule": {"genpol": genpol_lr, "theirs": algorithm.learning_rate},
        "gradients": worst(gradients), "parameters_after_step": worst(parameters),
        "per_parameter_gradient_rel": [g["rel"] for g in gradients],
        "sampler_x1": difference(our_x1, their_x1),
        "randint_high": {"genpol": our_highs, "theirs": their_highs},
    }
    if not s.float64_grids:
        genpol_grid = native["genpol_grid"]
        result["grids"] = {"theirs": native["their_grid"].tolist(), "genpol": genpol_grid.tolist(),
                           f"first {genpol_grid.numel()}": difference(genpol_grid,
                                                                      native["their_grid"][:genpol_grid.numel()])}
    return result


class FixedKLs:
    """A rollout storage for ``MinibatchUpdater.update`` whose minibatches are placeholders: the updater's
    ``eager_step`` is replaced to report given KLs, so only the learning-rate rule runs."""

    def __init__(self, per_epoch: int):
        self.per_epoch = per_epoch

    def minibatches(self, size: int, generator: torch.Generator) -> Iterator[int]:
        yield from range(self.per_epoch)

    def flat(self) -> Batch:
        return Batch(obs=torch.zeros(2, 1), record={}, advantages=torch.zeros(2), returns=torch.arange(2.0),
                     values=torch.zeros(2))


def genpol_lr_after_epoch(rule: str, lr: float, kls: list[float]) -> float:
    """The learning rate after one epoch of ``MinibatchUpdater.update`` whose minibatches report ``kls``."""
    head = GaussianHead(1, 1, hidden_sizes=(2,))
    updater = MinibatchUpdater(head, ValueNetwork(1, [2]), PPOClipLoss(), lr=lr, epochs=1,
                               adaptive_lr=adaptive_lr(rule, lr, DESIRED_KL))
    reported = iter(kls)
    updater.eager_step = lambda batch: {"kl": torch.tensor(next(reported)), "policy": torch.tensor(0.0)}
    return updater.update(FixedKLs(len(kls)), torch.Generator())["learning_rate"]


def adaptive_rule(theirs: types.SimpleNamespace) -> dict[str, Any]:
    """The KL-adaptive learning rate over one epoch of 4 minibatches: theirs steps once per epoch on the mean
    KL (``AdaptiveKLScheduler``, min_lr 1e-6, raised at KL 0); genpol's ``learner.adaptive_lr_rule=per_epoch``
    the same, its default ``per_minibatch`` after every minibatch (min_lr 1e-5, kept at KL 0)."""
    out = {}
    for label, lr, kls in (("KLs 0.05, 0.001, 0.001, 0.001 from lr 1e-4", 1e-4, [0.05, 0.001, 0.001, 0.001]),
                           ("KLs 0.05 x 4 from lr 1e-5 (min_lr)", 1e-5, [0.05] * 4),
                           ("KLs 0.05 x 4 from lr 1.2e-6 (below genpol's default floor)", 1.2e-6, [0.05] * 4),
                           ("KL 0 x 4 from lr 1e-4", 1e-4, [0.0] * 4)):
        optimizer = torch.optim.SGD([nn.Parameter(torch.zeros(1))], lr=lr)
        scheduler = theirs.AdaptiveKLScheduler(optimizer, kl_threshold=DESIRED_KL)
        scheduler.step(torch.tensor(kls).mean())
        out[label] = {"theirs": scheduler.get_last_lr()[0],
                      "genpol per_epoch": genpol_lr_after_epoch("per_epoch", lr, kls),
                      "genpol per_minibatch (default)": genpol_lr_after_epoch("per_minibatch", lr, kls)}
    return out


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", type=Path, required=True, help="a snapshot of SUPERGUPPY0907/rsl_rl")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_num_threads(1)
    torch.set_default_dtype(torch.float64)
    ref = args.ref.resolve()
    commit = reference_commit(ref)
    theirs = load_theirs(ref)
    rows = []
    for setting in SETTINGS:
        with contextlib.redirect_stdout(sys.stderr):  # their constructors print the networks
            result = one_step(theirs, setting, args.seed)
        rows.append({"method": "policyflow",
                     "repository": "SUPERGUPPY0907/rsl_rl (third-party port; PolicyFlow has no official code)",
                     "commit": commit or "unknown", "file": "rsl_rl/algorithms/policyflow.py: PolicyFlow.update; "
                     "rsl_rl/modules/policyflow/flow.py: ContinuousNormalizingFlow.compute_flow_variation, sample",
                     "setting": setting.label, "options": dataclasses.asdict(setting), "dtype": "float64",
                     "date": date_stamp(), "machine": machine(), **result})
    rule = adaptive_rule(theirs)
    rows.append({"method": "policyflow", "repository": rows[0]["repository"], "commit": commit or "unknown",
                 "file": "rsl_rl/algorithms/policyflow.py: AdaptiveKLScheduler, PolicyFlow.update",
                 "setting": "adaptive learning-rate rule: theirs (per-epoch mean KL, min_lr 1e-6, raised at KL 0) vs "
                            "learner.adaptive_lr_rule=per_epoch and genpol's default per_minibatch (min_lr 1e-5, "
                            "kept at KL 0)", "date": date_stamp(),
                 "learning_rate_after_one_epoch": rule})
    write_results("parity_policyflow.json", rows)  # a list of rows, as every bench/results/parity*.json
    print("| setting | dv rel | log-ratio rel | policy / entropy / brownian / value rel | KL rel (theirs w/o 1e-5) "
          "| lr after rule (genpol / theirs) | gradients rel | parameters rel | sampler x1 rel |")
    print("|---|---|---|---|---|---|---|---|---|")
    for row in rows[:-1]:
        t = row["loss_terms"]
        print(f"| {row['setting']} | {row['dv']['rel']:.1e} | {row['log_ratio']['rel']:.1e} "
              f"| {t['policy_clipped_surrogate']['rel']:.1e} / {t['entropy']['rel']:.1e} / "
              f"{t['brownian_scaled']['rel']:.1e} / {t['value']['rel']:.1e} "
              f"| {row['kl']['rel']:.1e} ({row['kl_vs_theirs_without_1e-5']['rel']:.1e}) "
              f"| {row['lr_after_adaptive_rule']['genpol']:.3g} / {row['lr_after_adaptive_rule']['theirs']:.3g} "
              f"| {row['gradients']['rel']:.1e} | {row['parameters_after_step']['rel']:.1e} "
              f"| {row['sampler_x1']['rel']:.1e} |")
    print("\nadaptive learning rate after one epoch of 4 minibatches (genpol per_epoch / genpol per_minibatch / "
          "theirs):")
    for label, lrs in rows[-1]["learning_rate_after_one_epoch"].items():
        print(f"* {label}: {lrs['genpol per_epoch']:.3g} / {lrs['genpol per_minibatch (default)']:.3g} "
              f"/ {lrs['theirs']:.3g}")


if __name__ == "__main__":
    main()
