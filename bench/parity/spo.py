"""Update-level parity of genpol's SPO with its authors' code, on identical inputs, in float64.

The authors' repository (MyRepositories-hub/Simple-Policy-Optimization) is not part of genpol: take a
snapshot anywhere and point ``--ref`` at it. This script imports its ``mujoco/agent.py`` and
``mujoco/trainer.py`` from there and drives its ``Trainer.train`` for exactly one minibatch
(``batch_size == minibatch_size``, one epoch); genpol's side is ``MinibatchUpdater.eager_step`` with
``SPOLoss``. Both start from the same weights (the authors' ``Agent`` copied into genpol's Gaussian
head and value network), see the same batch (observations, actions, the old policy's log-probs,
advantages, returns, old values) and take one Adam step at the same learning rate and epsilon.

Reported per row: the loss and its terms, every parameter's gradient (as the optimizer sees it) and
every parameter after the step, as the largest absolute and relative difference.

Settings matched, and where genpol's defaults differ (named departures, not bugs):
* value loss: the authors' ``0.5 mean(max(...))`` times ``c_1`` = 0.5 is genpol's ``mean(max(...))``
  (stable-baselines3's convention) times ``vf_coef`` = 0.25;
* Adam's epsilon: the authors' 1e-8 (``optim.Adam`` default), genpol's default 1e-5 (``adam_eps``);
* gradient clip: the authors clip actor and critic together to norm 0.5, genpol by default each
  network to ``max_grad_norm`` on its own; ``learner.grad_clip=joint`` is theirs. Three rows: no clip,
  genpol's default clip (what it changes), and the joint clip.

    python bench/parity/spo.py --ref /path/to/Simple-Policy-Optimization

Writes ``bench/results/parity_spo.json`` (a list of rows: method, repository, commit, differences).
"""

from __future__ import annotations

import argparse
import copy
import importlib.util
import sys
from pathlib import Path
from types import ModuleType, SimpleNamespace
from typing import Any

import gymnasium as gym
import numpy as np
import torch

ROOT = Path(__file__).resolve().parent.parent.parent
sys.path.insert(0, str(ROOT / "bench"))  # bench/common (this script lives one folder down)

from common import date_stamp, machine, write_results  # noqa: E402
from shared import difference, reference_commit, worst  # noqa: E402

from genpol.heads import GaussianHead  # noqa: E402
from genpol.nets import ValueNetwork  # noqa: E402
from genpol.storage.rollout import Batch  # noqa: E402
from genpol.updaters.losses import SPOLoss  # noqa: E402
from genpol.updaters.minibatch import MinibatchUpdater  # noqa: E402

OBS_DIM, ACT_DIM, BATCH, EPSILON, LR = 11, 3, 64, 0.2, 3e-4


def load(path: Path, name: str) -> ModuleType:
    """A module of the authors' snapshot, imported from its file (their folder is not a package)."""
    spec = importlib.util.spec_from_file_location(name, path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def linears(module: torch.nn.Module) -> list[torch.nn.Linear]:
    return [layer for layer in module.modules() if isinstance(layer, torch.nn.Linear)]


def copy_weights(agent: torch.nn.Module, head: GaussianHead, critic: ValueNetwork) -> None:
    """The authors' actor_mean, actor_log_std and critic into genpol's mean_net, log_std and net."""
    with torch.no_grad():
        for source, target in [*zip(linears(agent.actor_mean), linears(head.mean_net)),
                               *zip(linears(agent.critic), linears(critic.net))]:
            target.weight.copy_(source.weight)
            target.bias.copy_(source.bias)
        head.log_std.copy_(agent.actor_log_std.view(-1))


class GradientRecorder:
    """Keeps each parameter's gradient as the optimizer's step sees it (after any clip)."""

    def __init__(self, optimizer: torch.optim.Optimizer):
        self.gradients: list[torch.Tensor] = []
        optimizer.register_step_pre_hook(self.record)

    def record(self, optimizer: torch.optim.Optimizer, *_: Any) -> None:
        self.gradients = [p.grad.detach().clone() for group in optimizer.param_groups for p in group["params"]]


def one_step(ref: Path, max_grad_norm: float, joint_clip: bool, seed: int) -> dict[str, Any]:
    torch.manual_seed(seed)
    agent_module, trainer_module = load(ref / "mujoco" / "agent.py", "spo_agent"), load(ref / "mujoco" / "trainer.py",
                                                                                        "spo_trainer")
    envs = SimpleNamespace(single_observation_space=gym.spaces.Box(-1, 1, (OBS_DIM,)),
                           single_action_space=gym.spaces.Box(-1, 1, (ACT_DIM,)))
    agent = agent_module.Agent(envs, policy_layers=3).double()
    head, critic = GaussianHead(OBS_DIM, ACT_DIM, hidden_sizes=(64, 64), activation="tanh").double(), ValueNetwork(OBS_DIM, (64, 64)).double()
    copy_weights(agent, head, critic)

    # the batch: the old policy is the current one with perturbed weights (ratios away from 1)
    old = copy.deepcopy(agent)
    with torch.no_grad():
        for parameter in old.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    obs = torch.randn(BATCH, OBS_DIM, dtype=torch.float64)
    with torch.no_grad():
        actions, old_log_prob, _, _, old_dist = old.get_action_and_value(obs)
    advantages = 2 * torch.randn(BATCH, dtype=torch.float64) + 0.3
    returns, old_values = torch.randn(BATCH, dtype=torch.float64), torch.randn(BATCH, dtype=torch.float64)

    # the authors' update: Trainer.train on exactly one minibatch, its Adam recording the gradients
    args = SimpleNamespace(batch_size=BATCH, minibatch_size=BATCH, update_epochs=1, adaptive_learning_rate=False,
                           algo="spo", desired_kl=0.01, advantage_normalization=True, clip_value_loss=True,
                           epsilon=EPSILON, c_1=0.5, c_2=0.0, max_grad_norm=max_grad_norm, learning_rate=LR)
    optimizer = torch.optim.Adam(agent.parameters(), lr=LR)  # eps 1e-8, the authors' main.py
    theirs_recorder = GradientRecorder(optimizer)
    trainer = trainer_module.Trainer(args, agent, optimizer, SimpleNamespace(add_scalar=lambda *a, **k: None))
    with torch.no_grad():  # their loss terms at the starting weights, recomputed with their functions
        _, new_log_prob, _, new_value, _ = agent.get_action_and_value(obs, actions)
        normalized = (advantages - advantages.mean()) / (advantages.std() + 1e-8)
        their_policy = trainer.compute_policy_loss((new_log_prob - old_log_prob).exp(), normalized)
        their_value = trainer.compute_value_loss(new_value, returns, old_values)
    np.random.seed(seed)
    trainer.train(0, obs, actions, old_log_prob, advantages, returns, old_values, old_dist.loc,
                  old_dist.scale)

    # genpol's update: one eager minibatch step with SPOLoss at the matched settings
    updater = MinibatchUpdater(head, critic, SPOLoss(clip_range=EPSILON, ent_coef=0.0, vf_coef=0.25, clip_range_vf=EPSILON,
                                                     normalize_advantage=True),
                               lr=LR, critic_lr=LR, epochs=1, minibatch_size=BATCH, max_grad_norm=max_grad_norm,
                               target_kl=None, adam_eps=1e-8, joint_clip=joint_clip)
    ours_recorder = GradientRecorder(updater.optimizer)
    record = {"action": actions, "log_prob": old_log_prob, "mean": old_dist.loc, "log_std": old_dist.scale.log()}
    named = updater.eager_step(Batch(obs=obs, record=record, advantages=advantages, returns=returns,
                                     values=old_values))

    # pair the parameters: genpol's groups are [actor..., critic...] in module order
    theirs_params = [*linear_params(agent.actor_mean), agent.actor_log_std, *linear_params(agent.critic)]
    ours_params = [*linear_params(head.mean_net), head.log_std, *linear_params(critic.net)]
    their_grads = dict(zip(map(id, agent.parameters()), theirs_recorder.gradients))
    our_grads = dict(zip([id(p) for group in updater.optimizer.param_groups for p in group["params"]],
                         ours_recorder.gradients))
    gradients = [difference(our_grads[id(o)].view(-1), their_grads[id(t)].view(-1))
                 for o, t in zip(ours_params, theirs_params)]
    parameters = [difference(o.detach().view(-1), t.detach().view(-1)) for o, t in zip(ours_params, theirs_params)]
    return {"loss_terms": {"policy": difference(named["policy"], their_policy),
                           # genpol reports its value term before vf_coef: 2 x theirs (their 0.5 inside)
                           "value": difference(named["value"] / 2, their_value)},
            "gradients": worst(gradients), "parameters_after_step": worst(parameters),
            "per_parameter_gradient_rel": [g["rel"] for g in gradients]}


def linear_params(module: torch.nn.Module) -> list[torch.nn.Parameter]:
    return [p for layer in linears(module) for p in (layer.weight, layer.bias)]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--ref", type=Path, required=True, help="a snapshot of the authors' repository")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    commit = reference_commit(args.ref)
    rows = []
    for label, max_grad_norm, joint in (("no clip", 1e9, False), ("clip 0.5, per network (genpol's default)", 0.5, False),
                                        ("clip 0.5, learner.grad_clip=joint", 0.5, True)):
        result = one_step(args.ref, max_grad_norm, joint, args.seed)
        rows.append({"method": "spo", "repository": "MyRepositories-hub/Simple-Policy-Optimization",
                     "commit": commit, "file": "mujoco/trainer.py: Trainer.train, compute_policy_loss",
                     "setting": label, "dtype": "float64", "date": date_stamp(), "machine": machine(), **result})
    write_results("parity_spo.json", rows)  # a list of rows, as every bench/results/parity*.json
    print("| setting | policy loss rel | value loss rel | gradients rel (max) | parameters after step rel (max) |")
    print("|---|---|---|---|---|")
    for row in rows:
        print(f"| {row['setting']} | {row['loss_terms']['policy']['rel']:.1e} | {row['loss_terms']['value']['rel']:.1e} "
              f"| {row['gradients']['rel']:.1e} | {row['parameters_after_step']['rel']:.1e} |")


if __name__ == "__main__":
    main()
