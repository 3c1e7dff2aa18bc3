"""MEow (genpol/algorithms/meow.py, heads/energy_flow.py), each piece against math written out here: the
EBFlow split alpha log pi = Q - V, V as the log-partition of exp(Q / alpha) by quadrature in 1-D and 2-D,
the flow's round trip, the TD target, loss and one optimizer step on a fixed batch in float64 by hand, and a
short training run whose resume reproduces the uninterrupted run bit for bit."""

from __future__ import annotations

import json
import math

import pytest
import torch

from conftest import assert_trees_equal, final_checkpoint, rewound_copy

from genpol.algorithms.meow import MEow, meow_loss, meow_td_target
from genpol.config.meow import MEowConfig
from genpol.heads import EnergyFlowHead
from genpol.storage.replay import ReplayBatch


def random_head(obs_dim: int, act_dim: int, seed: int = 0, scale: float = 0.3, **kwargs) -> EnergyFlowHead:
    """A float64 head with every parameter moved off its initialization (the base and shift nets start with
    zero weights, the flow would be nearly a state-independent Gaussian)."""
    torch.manual_seed(seed)
    head = EnergyFlowHead(obs_dim, act_dim, base_hidden_sizes=[16], coupling_hidden_sizes=[16, 16],
                          shift_hidden_sizes=[16], **kwargs).double()
    with torch.no_grad():
        for parameter in head.parameters():
            parameter.add_(scale * torch.randn_like(parameter))
    return head


def test_alpha_log_pi_is_q_minus_v_and_v_does_not_depend_on_the_action():
    head = random_head(4, 3)
    obs = torch.randn(32, 4, dtype=torch.float64)
    actions = 2 * torch.rand(32, 3, dtype=torch.float64) - 1
    alpha = 0.37
    q, v = head.soft_q_and_v(obs, actions, alpha)
    assert q.shape == v.shape == (2, 32)
    torch.testing.assert_close(alpha * head.log_prob(obs, actions).expand(2, -1), q - v, rtol=1e-14, atol=0)
    torch.testing.assert_close(head.soft_value(obs, alpha), v, rtol=1e-14, atol=0)
    _, v_other = head.soft_q_and_v(obs, -actions, alpha)
    assert torch.equal(v, v_other)
    # the two heads differ by their shifts only
    torch.testing.assert_close(q[0] - q[1], alpha * (head.value_shift(obs)[0] - head.value_shift(obs)[1]))


def log_partition_by_quadrature(head: EnergyFlowHead, obs: torch.Tensor, alpha: float, points: int) -> torch.Tensor:
    """``log int exp(Q_j(s, a) / alpha) da`` over (-1, 1)^A by the midpoint rule in u = atanh(a) on [-7, 7]
    (da = (1 - tanh(u)^2) du), for one state: ``[E]``."""
    act_dim = head.act_dim
    u = torch.linspace(-7, 7, points + 1, dtype=torch.float64)
    u = (u[1:] + u[:-1]) / 2
    grid = torch.cartesian_prod(*[u] * act_dim).reshape(-1, act_dim)
    actions = torch.tanh(grid)
    q, _ = head.soft_q_and_v(obs.expand(grid.shape[0], -1), actions, alpha)
    log_jacobian = torch.log(1 - actions.square()).sum(-1)
    cell = math.log(14 / points) * act_dim
    return torch.logsumexp(q / alpha + log_jacobian, dim=-1) + cell


@pytest.mark.parametrize("act_dim,points", [(1, 20000), (2, 400)])
def test_v_is_alpha_times_the_log_partition_of_q_over_alpha(act_dim, points):
    """Exact Jacobian (eps 0) and a clip small enough not to matter inside |u| <= 7."""
    head = random_head(3, act_dim, seed=act_dim, log_sigma_min=-1.5, log_sigma_max=0.0, log_prob_epsilon=0.0,
                       action_clip=1e-12)
    alpha = 0.8
    for row in range(2):
        obs = torch.randn(1, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(row))
        expected = head.soft_value(obs, alpha)[:, 0] / alpha
        torch.testing.assert_close(log_partition_by_quadrature(head, obs, alpha, points), expected, rtol=0, atol=2e-5)


def test_the_exact_tanh_jacobian_stays_finite_where_float32_saturates():
    """``policy.log_prob_epsilon=0`` is the exact Jacobian: in float32, tanh(u) rounds to 1 for |u| > ~9, and
    log(1 - tanh^2) was -inf there (a log-prob of +inf for 7055 of 20000 draws at the authors' HalfCheetah
    sigma); it matches the float64 form 2 (log 2 - u - softplus(-2u)) instead."""
    head = EnergyFlowHead(2, 1, base_hidden_sizes=[8], coupling_hidden_sizes=[8], shift_hidden_sizes=[8],
                          log_prob_epsilon=0.0)
    pre_tanh = torch.tensor([[3.0], [9.5], [12.0]])
    exact = 2 * (math.log(2) - pre_tanh.double() - torch.nn.functional.softplus(-2 * pre_tanh.double()))
    torch.testing.assert_close(head._tanh_term(pre_tanh).double(), exact[:, 0], rtol=1e-5, atol=1e-5)


def test_an_action_clip_below_float32s_resolution_still_keeps_saturated_actions_finite():
    """``policy.action_clip=1e-8``: 1 - 1e-8 is 1 in float32, so an action at exactly +-1 (a min-max scaled
    dataset's extremes, a saturated tanh) went through atanh(1) = inf and NaN losses; the clip now stops at the
    largest float32 below 1."""
    head = EnergyFlowHead(2, 2, base_hidden_sizes=[8], coupling_hidden_sizes=[8], shift_hidden_sizes=[8],
                          action_clip=1e-8)
    log_prob = head.log_prob(torch.zeros(2, 2), torch.tensor([[1.0, 0.2], [-1.0, -1.0]]))
    assert torch.isfinite(log_prob).all()


def test_inverse_undoes_the_flow_and_both_directions_give_the_same_log_prob():
    head = random_head(4, 3, seed=3)
    obs = torch.randn(64, 4, dtype=torch.float64)
    z = 0.5 * torch.randn(64, 3, dtype=torch.float64)
    torch.testing.assert_close(head.flow_inverse(obs, head.flow(obs, z)), z, rtol=0, atol=1e-12)
    torch.manual_seed(5)
    actions, log_prob = head.rsample_log_prob(obs)
    inside = actions.abs().amax(-1) < 1 - 1e-4  # atanh of a saturated action is clipped (ALGORITHMS.md 14a)
    assert inside.sum() > 32
    torch.testing.assert_close(log_prob[inside], head.log_prob(obs, actions)[inside], rtol=0, atol=1e-8)
    # the deterministic action is the base's mode through the flow
    torch.testing.assert_close(head.act(obs), torch.tanh(head.flow(obs, torch.zeros_like(z))))


def hand_q(head: EnergyFlowHead, obs, actions, alpha, masks, j):
    """Q_j by hand in float64: clip, atanh, couplings undone one row at a time with head j's dropout rows."""
    cfg, rows = head.config, obs.shape[0]
    out = torch.empty(rows, dtype=torch.float64)
    for b in range(rows):
        a = actions[b].clamp(-1 + cfg.action_clip, 1 - cfg.action_clip)
        z = torch.atanh(a)
        for k in reversed(range(len(head.couplings))):
            coupling = head.couplings[k]
            m = coupling.mask.double()
            x = torch.cat([m * z, obs[b]])[None]
            net = coupling.net
            for layer, (linear, norm, activation) in enumerate(zip(net.hidden, net.norms, net.activations)):
                x = activation(norm(linear(x))) * masks[k][layer][j * rows + b]
            z = z - (1 - m) * net.output(x)[0]
        log_sigma = head.log_sigma(obs[b:b + 1])[0]
        q = sum(-0.5 * (z[i] / math.exp(log_sigma[i])) ** 2 - math.log(1 - a[i] ** 2 + cfg.log_prob_epsilon)
                for i in range(head.act_dim))
        out[b] = alpha * (q + head.shifts[j](obs[b:b + 1])[0, 0])
    return out


def test_td_target_loss_and_one_step_match_a_float64_hand_computation():
    head = random_head(3, 2, seed=7)
    cfg = MEowConfig(temperature=0.5, gamma=0.9, tau=0.1, lr=1e-3, max_grad_norm=None, batch_size=8, buffer_size=8)
    learner = MEow(head, cfg, num_envs=1, obs_dim=3, act_dim=2, capacity=8, device=torch.device("cpu"))
    with torch.no_grad():  # a target flow apart from the online one
        for parameter in learner.target_head.parameters():
            parameter.add_(0.1 * torch.randn_like(parameter))
    g = torch.Generator().manual_seed(0)
    actions = (2 * torch.rand(8, 2, generator=g, dtype=torch.float64) - 1)
    actions[0, 0], actions[1, 1] = 1.0, -1.0  # replay actions at the bound go through the clip
    batch = ReplayBatch(torch.randn(8, 3, generator=g, dtype=torch.float64), actions,
                        torch.randn(8, generator=g, dtype=torch.float64), torch.randn(8, 3, generator=g, dtype=torch.float64),
                        torch.tensor([0, 1, 0, 0, 1, 0, 0, 0], dtype=torch.float64))
    masks = head.draw_dropout_masks(8, g, torch.float64)
    assert len(masks) == 4 and masks[0][0].shape == (16, 16)
    assert set(masks[0][0].unique().tolist()) <= {0.0, 1 / 0.9}

    target_head = learner.target_head
    with torch.no_grad():
        y = torch.empty(8, dtype=torch.float64)
        for b in range(8):
            s_next = batch.next_obs[b:b + 1]
            v = [0.5 * (2 * math.log(2 * math.pi) + 2 * float(target_head.log_sigma(s_next).sum()))
                 + float(target_head.shifts[j](s_next)) for j in range(2)]
            y[b] = batch.rewards[b] + 0.9 * (1 - batch.dones[b]) * 0.5 * min(v)
        q_by_hand = torch.stack([hand_q(head, batch.obs, batch.actions, 0.5, masks, j) for j in range(2)])
    torch.testing.assert_close(learner.td_target(batch), y, rtol=1e-13, atol=0)
    torch.testing.assert_close(meow_td_target(batch.rewards, batch.dones, target_head.soft_value(batch.next_obs, 0.5), 0.9),
                               y, rtol=1e-13, atol=0)
    loss, q, target = learner.loss(batch, masks)
    torch.testing.assert_close(q.detach(), q_by_hand, rtol=1e-12, atol=0)
    expected_loss = float(((q_by_hand - y) ** 2).sum() / 16)
    assert float(loss.detach()) == pytest.approx(expected_loss, rel=1e-12)
    assert float(meow_loss(q_by_hand, y)) == pytest.approx(expected_loss, rel=1e-12)

    # one step: Adam's first step is -lr g / (|g| + eps) elementwise; the target moves tau of the way
    before = [p.detach().clone() for p in head.parameters()]
    target_before = [p.detach().clone() for p in target_head.parameters()]
    grads = torch.autograd.grad(loss, list(head.parameters()))
    learner.gradient_step(batch, masks)
    for p0, p1, grad, t0, t1 in zip(before, head.parameters(), grads, target_before, target_head.parameters()):
        torch.testing.assert_close(p1.detach(), p0 - 1e-3 * grad / (grad.abs() + 1e-8), rtol=1e-10, atol=1e-15)
        torch.testing.assert_close(t1, 0.9 * t0 + 0.1 * p1.detach(), rtol=1e-12, atol=1e-15)
    assert learner.critic_steps == 1


def test_dropout_off_gives_one_pass_and_the_grad_clip_bounds_the_norm():
    head = random_head(3, 2, seed=9, coupling_dropout=0.0)
    assert head.draw_dropout_masks(4) is None
    cfg = MEowConfig(temperature=1.0, max_grad_norm=1e-3, batch_size=8, buffer_size=8)
    learner = MEow(head, cfg, num_envs=1, obs_dim=3, act_dim=2, capacity=8, device=torch.device("cpu"))
    norms = []
    learner.optimizer.register_step_pre_hook(lambda opt, *_: norms.append(
        torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in learner.params]))))
    batch = ReplayBatch(torch.randn(8, 3, dtype=torch.float64), torch.rand(8, 2, dtype=torch.float64) - 0.5,
                        torch.randn(8, dtype=torch.float64), torch.randn(8, 3, dtype=torch.float64),
                        torch.zeros(8, dtype=torch.float64))
    learner.gradient_step(batch)
    assert float(norms[0]) == pytest.approx(1e-3, rel=1e-9)


def test_a_head_without_soft_values_is_refused_at_validation():
    from genpol.api import compose_config
    from genpol.config import ConfigError
    from genpol.configure import validate

    with pytest.raises(ConfigError, match="soft Q and V from its likelihood"):
        validate(compose_config(["learner=meow", "policy=normalizing_flow", "env=pendulum", "run_dir=/tmp/x"]))


# ----------------------------------------------------------------------------------- a real run
TINY = ["env.num_envs=2", "learner.learning_starts=64", "learner.iteration_steps=64", "learner.batch_size=16",
        "policy.base_hidden_sizes=[16]", "policy.coupling_hidden_sizes=[16,16]", "policy.shift_hidden_sizes=[16]",
        "pipeline.video=false", "logger.progress_bar=false", "pipeline.eval_episodes=1", "pipeline.eval_every=0",
        "pipeline.checkpoint_every=1"]


def test_a_short_run_has_finite_losses_and_resumes_to_the_uninterrupted_runs_state(tmp_path):
    """Pendulum, 2 envs, 256 steps (192 gradient steps): every logged loss is finite; stopped at step 128 and
    resumed, every weight, the target flow, the optimizer, the generators and the replay equal the
    uninterrupted run's; the checkpoint's policy reloads and acts."""
    from genpol.api import load_policy, train

    summary = train(env="pendulum", policy="energy_flow", learner="meow", total_steps=256, run_dir=tmp_path / "whole",
                    overrides=TINY)
    assert summary["learner"] == "meow" and summary["policy"] == "energy_flow"
    rows = [json.loads(line) for line in (tmp_path / "whole" / "progress.jsonl").read_text().splitlines()]
    losses = {key: row[key] for row in rows for key in row if key.startswith("losses/")}
    assert {"losses/value", "losses/q_mean", "losses/target_mean", "losses/shift_mean"} <= set(losses)
    assert all(math.isfinite(value) for value in losses.values()), losses
    rewound_copy(tmp_path / "whole", tmp_path / "resumed", ["step_000000000192", "step_000000000256"])
    train(env="pendulum", policy="energy_flow", learner="meow", total_steps=256, run_dir=tmp_path / "resumed",
          overrides=TINY)
    name_a, spec, weights_a, state_a = final_checkpoint(tmp_path / "whole")
    name_b, _, weights_b, state_b = final_checkpoint(tmp_path / "resumed")
    assert name_a == name_b == "step_000000000256" and spec["head"]["family"] == "energy_flow"
    assert state_a["algorithm"]["critic_steps"] == 192
    assert_trees_equal(weights_a, weights_b, "policy")
    assert_trees_equal(state_a["algorithm"], state_b["algorithm"], "algorithm")
    policy = load_policy(tmp_path / "resumed")
    obs = torch.randn(5, 3)
    assert torch.equal(policy.act(obs), policy.act(obs)) and policy.act(obs).abs().max() <= 1.0
