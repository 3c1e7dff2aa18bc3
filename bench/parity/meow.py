"""Update-level parity of genpol's MEow (``learner=meow``, ``policy=energy_flow``) with its authors' PyTorch
code, on identical inputs, in float64.

The authors' repository (ChienFeng-hub/meow) is not part of genpol: take a snapshot anywhere and point
``--ref`` at it. Two references, both imported from the snapshot:

* ``cleanrl``: ``cleanrl/cleanrl/meow_continuous_action.py`` ``FlowPolicy`` with ``cleanrl/cleanrl/nf``. Their
  update is inline in ``train()`` (not a function), so this harness runs its statements on their model:
  ``get_v`` of the target on ``[s'; s']``, the min over halves, ``r + (1 - d) gamma V``, ``get_qv`` of the
  online model in train mode on ``[s; s], [a; a]``, ``F.mse_loss``, ``clip_grad_norm_(30)``, their Adam,
  and their Polyak loop over ``parameters()``.
* ``toy``: ``toy/agents/meow.py`` ``MEOW.update_q`` and ``MEOW.soft_update`` called as they are, on an
  instance holding their toy ``FlowPolicy`` (``toy/modules/policy.py``; its ``nf`` files are the cleanrl ones).

genpol's side is ``MEow.gradient_step(batch, dropout_masks)``. Both start from the same weights (theirs copied
into genpol's head and target head), see the same batch (a third of the actions at exactly +-1, as uniform
warm-up and clipped actions are, to exercise their clip), and the same coupling dropout masks: each of their
``nn.Dropout`` modules multiplies by the mask genpol's learner is handed. float64 throughout
(``torch.set_default_dtype``: their ``get_qv`` accumulates in tensors of the default dtype).

Reported per row: the TD target, Q (both heads) and the loss; every parameter's gradient as the optimizer
sees it (after the clip); every parameter after the Adam step; every target parameter after the Polyak step;
as the largest absolute and relative difference. An acting row compares the deterministic action
``tanh(f(0; s))``, a stochastic action from the same base draw, and log pi of replay actions.

    python bench/parity/meow.py --ref /path/to/meow

Writes ``bench/results/parity_meow.json`` (a list of rows: method, repository, commit, differences).
"""

from __future__ import annotations

import argparse
import copy
import importlib
import sys
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import torch

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "bench"))  # bench/common (this script lives one folder down)

from common import date_stamp, machine, write_results  # noqa: E402
from shared import difference, reference_commit, stub_modules, worst  # noqa: E402

from genpol.algorithms.meow import MEow  # noqa: E402
from genpol.config.meow import MEowConfig  # noqa: E402
from genpol.heads import EnergyFlowHead  # noqa: E402
from genpol.storage.replay import ReplayBatch  # noqa: E402

OBS_DIM, ACT_DIM, BATCH = 11, 3, 64  # Hopper's sizes; an odd |A| exercises both masks
ALPHA, GAMMA, TAU, LR, CLIP, SIGMA_MAX, SIGMA_MIN = 0.25, 0.99, 0.005, 1e-3, 30.0, -0.3, -5.0


def their_policy_class(ref: Path, flavour: str) -> type:
    """``FlowPolicy`` of the cleanrl script or of the toy, imported from the snapshot."""
    if flavour == "cleanrl":
        stub_modules({"tyro": {"cli": None}})
        sys.path.insert(0, str(ref / "cleanrl"))  # `from cleanrl.nf.nets import MLP` resolves here
        return importlib.import_module("cleanrl.meow_continuous_action").FlowPolicy
    sys.path.insert(0, str(ref / "toy"))
    return importlib.import_module("modules.policy").FlowPolicy


def toy_agent(ref: Path, policy: torch.nn.Module, target: torch.nn.Module, clip: float) -> Any:
    """Their toy ``MEOW`` without its constructor (a tensorboard writer and a replay buffer, not used by
    ``update_q`` / ``soft_update``), holding ``policy``, ``target`` and their Adam."""
    sys.path.insert(0, str(ref / "toy"))
    stub_modules({"modules.train_loop": {"train_loop": None}})
    agent_class = importlib.import_module("agents.meow").MEOW
    agent = agent_class.__new__(agent_class)
    agent.args = SimpleNamespace(gamma=GAMMA, tau=TAU, grad_clip=clip)  # their `if grad_clip > 0`
    agent.policy, agent.policy_old = policy, target
    agent.optim = torch.optim.Adam(policy.parameters(), lr=LR)
    return agent


def network_pairs(theirs: torch.nn.Module, ours: EnergyFlowHead) -> list[tuple[str, torch.nn.Module, torch.nn.Module]]:
    """``(name, their network, our SwishMLP)``: the prior's log-scale MLP, the 4 coupling t-nets, the 2 shifts."""
    flows = list(theirs.flows)
    pairs = [("base_log_sigma", theirs.prior.log_scale, ours.base_log_sigma)]
    pairs += [(f"coupling{k}", flows[k].t, ours.couplings[k].net) for k in range(len(ours.couplings))]
    scaling = flows[len(ours.couplings)]
    pairs += [("shift0", scaling.scale1, ours.shifts[0]), ("shift1", scaling.scale2, ours.shifts[1])]
    return pairs


def parameter_pairs(theirs: torch.nn.Module, ours: EnergyFlowHead) -> list[tuple[str, torch.Tensor, torch.Tensor]]:
    """Every parameter of theirs with genpol's counterpart: Linear, LayerNorm and Swish modules pair in order."""
    pairs = []
    for name, their_net, our_net in network_pairs(theirs, ours):
        for kind in (torch.nn.Linear, torch.nn.LayerNorm):
            their_modules = [m for m in their_net.modules() if isinstance(m, kind)]
            our_modules = ([*our_net.hidden, our_net.output] if kind is torch.nn.Linear
                           else [m for m in our_net.norms if isinstance(m, kind)])
            assert len(their_modules) == len(our_modules), (name, kind, len(their_modules), len(our_modules))
            for i, (t, o) in enumerate(zip(their_modules, our_modules)):
                pairs += [(f"{name}.{kind.__name__}{i}.weight", t.weight, o.weight),
                          (f"{name}.{kind.__name__}{i}.bias", t.bias, o.bias)]
        their_betas = [m.beta for m in their_net.modules() if hasattr(m, "beta")]
        assert len(their_betas) == len(our_net.activations), name
        pairs += [(f"{name}.swish{i}.beta", t, o.beta) for i, (t, o) in enumerate(zip(their_betas, our_net.activations))]
    assert len(pairs) == len(list(theirs.parameters())) == len(list(ours.parameters())), len(pairs)
    return pairs


def copy_into(theirs: torch.nn.Module, ours: EnergyFlowHead) -> None:
    with torch.no_grad():
        for _, t, o in parameter_pairs(theirs, ours):
            o.copy_(t)


def feed_dropout_masks(theirs: torch.nn.Module, masks: list[list[torch.Tensor]], couplings: int) -> None:
    """Make coupling k's l-th ``nn.Dropout`` of theirs multiply by ``masks[k][l]`` (genpol's inverted masks)."""
    flows = list(theirs.flows)
    for k in range(couplings):
        dropouts = [m for m in flows[k].t.modules() if isinstance(m, torch.nn.Dropout)]
        assert len(dropouts) == len(masks[k])
        for dropout, mask in zip(dropouts, masks[k]):
            dropout.forward = lambda x, mask=mask: x * mask


class GradientRecorder:
    """Each parameter's gradient as the optimizer's step sees it (after the clip), by parameter identity."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.gradients: dict[int, torch.Tensor] = {}
        optimizer.register_step_pre_hook(self.record)

    def record(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        self.gradients = {id(p): p.grad.detach().clone() for g in optimizer.param_groups for p in g["params"]}


def make_batch(generator: torch.Generator) -> ReplayBatch:
    obs = torch.randn(BATCH, OBS_DIM, generator=generator)
    actions = 2 * torch.rand(BATCH, ACT_DIM, generator=generator) - 1
    at_bound = torch.rand(BATCH, ACT_DIM, generator=generator) < 1 / 3
    actions = torch.where(at_bound, actions.sign(), actions)
    rewards = torch.randn(BATCH, generator=generator)
    next_obs = torch.randn(BATCH, OBS_DIM, generator=generator)
    dones = (torch.rand(BATCH, generator=generator) < 0.2).double()
    return ReplayBatch(obs, actions, rewards, next_obs, dones)


def their_update_cleanrl(policy, target, optimizer, batch: ReplayBatch, clip: float) -> dict[str, torch.Tensor]:
    """The update statements of their ``train()`` (meow_continuous_action.py), on their model."""
    import torch.nn.functional as F

    with torch.no_grad():
        target.eval()
        v_old = target.get_v(torch.cat((batch.next_obs, batch.next_obs), dim=0))
        exact_v_old = torch.min(v_old[:v_old.shape[0] // 2], v_old[v_old.shape[0] // 2:])
        target_q = batch.rewards.flatten() + (1 - batch.dones.flatten()) * GAMMA * exact_v_old.view(-1)
    policy.train()
    current_q1, _ = policy.get_qv(torch.cat((batch.obs, batch.obs), dim=0), torch.cat((batch.actions, batch.actions), dim=0))
    loss = F.mse_loss(current_q1.flatten(), torch.cat((target_q, target_q), dim=0).flatten())
    optimizer.zero_grad()
    loss.backward()
    if clip > 0:  # their `if args.grad_clip > 0`
        torch.nn.utils.clip_grad_norm_(policy.parameters(), clip)
    optimizer.step()
    with torch.no_grad():
        for param, target_param in zip(policy.parameters(), target.parameters()):
            target_param.data.copy_(TAU * param.data + (1 - TAU) * target_param.data)
    return {"target": target_q, "q": current_q1.detach().flatten(), "loss": loss.detach()}


def their_update_toy(agent, batch: ReplayBatch) -> dict[str, torch.Tensor]:
    """Their toy ``MEOW.update_q`` and ``soft_update``, as called by ``MEOW.update``; Q and the target from
    hooks on their model (``update_q`` returns only means)."""
    seen: dict[str, torch.Tensor] = {}
    original_get_qv, original_get_v = agent.policy.get_qv, agent.policy_old.get_v

    def get_qv(obs, act):
        q, v = original_get_qv(obs, act)
        seen["q"] = q.detach().flatten()
        return q, v

    def get_v(obs):
        v = original_get_v(obs)
        seen["v_next"] = v.detach().flatten()
        return v

    agent.policy.get_qv, agent.policy_old.get_v = get_qv, get_v
    r, d = batch.rewards[:, None], batch.dones[:, None]  # their buffer's [B, 1] columns
    result = agent.update_q(batch=(batch.obs, batch.actions, r, batch.next_obs, d))
    agent.soft_update(agent.policy_old, agent.policy)
    del agent.policy.get_qv, agent.policy_old.get_v
    v_next = seen["v_next"].view(2, BATCH).min(dim=0).values
    return {"target": batch.rewards + (1 - batch.dones) * GAMMA * v_next, "q": seen["q"],
            "loss": torch.tensor(result["Loss/critic1_loss"], dtype=torch.float64)}


def one_update(ref: Path, flavour: str, perturb: float, clip: float, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    policy_class = their_policy_class(ref, flavour)
    theirs = policy_class(ALPHA, SIGMA_MAX, SIGMA_MIN, ACT_DIM, OBS_DIM, "cpu").double()
    their_target = copy.deepcopy(theirs)
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():  # away from the zero-weight start, the online and target nets apart
        for online, target in zip(theirs.parameters(), their_target.parameters()):
            online.add_(perturb * torch.randn(online.shape, generator=generator, dtype=online.dtype))
            target.copy_(online + perturb * torch.randn(online.shape, generator=generator, dtype=online.dtype))

    head = EnergyFlowHead(OBS_DIM, ACT_DIM, log_sigma_min=SIGMA_MIN, log_sigma_max=SIGMA_MAX).double()
    copy_into(theirs, head)
    cfg = MEowConfig(temperature=ALPHA, gamma=GAMMA, tau=TAU, lr=LR, max_grad_norm=clip if clip > 0 else None, batch_size=BATCH,
                     buffer_size=BATCH)
    learner = MEow(head, cfg, num_envs=1, obs_dim=OBS_DIM, act_dim=ACT_DIM, capacity=BATCH, device=torch.device("cpu"))
    copy_into(their_target, learner.target_head)

    batch = make_batch(generator)
    masks = head.draw_dropout_masks(BATCH, generator, torch.float64)
    feed_dropout_masks(theirs, masks, len(head.couplings))

    ours_recorder = GradientRecorder(learner.optimizer)
    with torch.no_grad():
        our_target = learner.td_target(batch)
    q_ours, _ = head.soft_q_and_v(batch.obs, batch.actions, ALPHA, masks)
    our_loss = float((q_ours - our_target).square().mean().detach())
    q_ours = q_ours.detach().flatten()
    learner.gradient_step(batch, masks)

    if flavour == "cleanrl":
        optimizer = torch.optim.Adam(theirs.parameters(), lr=LR)
        their_recorder = GradientRecorder(optimizer)
        their = their_update_cleanrl(theirs, their_target, optimizer, batch, clip)
    else:
        agent = toy_agent(ref, theirs, their_target, clip)
        their_recorder = GradientRecorder(agent.optim)
        their = their_update_toy(agent, batch)

    pairs = parameter_pairs(theirs, head)
    target_pairs = parameter_pairs(their_target, learner.target_head)
    gradients = {name: difference(ours_recorder.gradients[id(o)], their_recorder.gradients[id(t)]) for name, t, o in pairs}
    parameters = [difference(o, t) for _, t, o in pairs]
    targets = [difference(o, t) for _, t, o in target_pairs]
    return {"loss_terms": {"td_target": difference(our_target, their["target"]), "q": difference(q_ours, their["q"]),
                           "loss": difference(our_loss, their["loss"])},
            "gradients": worst(list(gradients.values())), "parameters_after_step": worst(parameters),
            "target_parameters_after_polyak": worst(targets),
            # 30.0 where the clip acted
            "gradient_norm_after_clip": float(torch.linalg.vector_norm(
                torch.stack([g.norm() for g in ours_recorder.gradients.values()]))),
            "per_parameter_gradient_rel": {name: g["rel"] for name, g in gradients.items()}}


def acting(ref: Path, seed: int) -> dict[str, Any]:
    """Deterministic and stochastic actions and log pi of replay actions, no dropout (their eval mode)."""
    torch.manual_seed(seed)
    theirs = their_policy_class(ref, "cleanrl")(ALPHA, SIGMA_MAX, SIGMA_MIN, ACT_DIM, OBS_DIM, "cpu").double()
    generator = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        for parameter in theirs.parameters():
            parameter.add_(0.1 * torch.randn(parameter.shape, generator=generator, dtype=parameter.dtype))
    head = EnergyFlowHead(OBS_DIM, ACT_DIM, log_sigma_min=SIGMA_MIN, log_sigma_max=SIGMA_MAX).double()
    copy_into(theirs, head)
    theirs.eval()
    batch = make_batch(generator)
    with torch.no_grad():
        # their `sample` casts observations to float32; its statements, with the base draw fed explicitly
        xi = torch.randn(BATCH, ACT_DIM, generator=generator, dtype=torch.float64)
        _, std = theirs.prior.get_mean_std(xi, context=batch.obs)
        their_deterministic, _ = theirs.forward(obs=batch.obs, act=torch.zeros_like(xi))
        their_action, log_det = theirs.forward(obs=batch.obs, act=std * xi)
        their_log_pi_sample = theirs.prior.log_prob(std * xi, context=batch.obs) - log_det
        their_log_pi = theirs.log_prob(batch.obs, batch.actions)
        ours_u = head.flow(batch.obs, head.log_sigma(batch.obs).exp() * xi)
        ours_log_pi_sample = ((-0.5 * xi.square() - head.log_sigma(batch.obs)).sum(-1)
                              - 0.5 * ACT_DIM * torch.log(torch.tensor(2 * torch.pi, dtype=torch.float64))
                              - head._tanh_term(ours_u))
        # their own density direction at the sampled action (atanh of a saturated action is clipped: compare
        # where |a| < 1 - 1e-4 on every dimension, as ALGORITHMS.md 14a advises)
        inside = their_action.abs().amax(dim=-1) < 1 - 1e-4
        their_log_pi_at_sample = theirs.log_prob(batch.obs, their_action)
        return {"deterministic_action": difference(head.act(batch.obs), their_deterministic),
                "stochastic_action": difference(torch.tanh(ours_u), their_action),
                "log_pi_of_own_sample_vs_their_log_prob": difference(ours_log_pi_sample[inside],
                                                                     their_log_pi_at_sample[inside]),
                "log_pi_of_replay_actions": difference(head.log_prob(batch.obs, batch.actions), their_log_pi),
                # a finding, not a comparison with genpol: their `sample` adds the tanh log-det instead of
                # subtracting it (FlowPolicy.forward returns minus the sum, and sample subtracts that again);
                # it feeds only --autotune's temperature loss (off in every command of theirs)
                "their_sample_log_q_vs_their_log_prob": difference(their_log_pi_sample[inside],
                                                                   their_log_pi_at_sample[inside]),
                "twice_tanh_log_det_vs_that_gap": difference(
                    -2 * torch.log(1 - their_action.square() + torch.finfo(torch.float32).eps).sum(-1)[inside],
                    (their_log_pi_at_sample - their_log_pi_sample)[inside]),
                "rows_compared_for_sample_log_pi": int(inside.sum())}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", type=Path, required=True, help="a snapshot of ChienFeng-hub/meow")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    torch.set_default_dtype(torch.float64)
    commit = reference_commit(args.ref)
    common = {"method": "meow", "repository": "ChienFeng-hub/meow", "commit": commit, "dtype": "float64",
              "date": date_stamp(), "machine": machine()}
    rows = []
    for flavour, file in (("cleanrl", "cleanrl/cleanrl/meow_continuous_action.py: train() update statements, FlowPolicy"),
                          ("toy", "toy/agents/meow.py: MEOW.update_q, MEOW.soft_update; toy/modules/policy.py")):
        for label, perturb, clip in (("their initialization, clip 30", 0.0, CLIP),
                                     ("weights perturbed by N(0, 0.1^2), clip 30", 0.1, CLIP),
                                     ("weights perturbed by N(0, 0.1^2), no clip", 0.1, 0.0)):
            result = one_update(args.ref, flavour, perturb, clip, args.seed)
            rows.append({**common, "file": file, "setting": f"{flavour}, {label}, dropout 0.1 with shared masks",
                         **result})
    rows.append({**common, "file": "cleanrl/cleanrl/meow_continuous_action.py: FlowPolicy.forward, log_prob",
                 "setting": "acting, weights perturbed by N(0, 0.1^2), no dropout", "differences": acting(args.ref, args.seed)})
    write_results("parity_meow.json", rows)
    print("| setting | TD target rel | Q rel | loss rel | gradients rel (max) | parameters after step rel (max) | target after Polyak rel (max) |")
    print("|---|---|---|---|---|---|---|")
    for row in rows[:-1]:
        terms = row["loss_terms"]
        print(f"| {row['setting']} | {terms['td_target']['rel']:.1e} | {terms['q']['rel']:.1e} | {terms['loss']['rel']:.1e} "
              f"| {row['gradients']['rel']:.1e} | {row['parameters_after_step']['rel']:.1e} "
              f"| {row['target_parameters_after_polyak']['rel']:.1e} |")
    print({key: value if isinstance(value, int) else f"{value['rel']:.1e}"
           for key, value in rows[-1]["differences"].items()})


if __name__ == "__main__":
    main()
