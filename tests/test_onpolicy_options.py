"""The on-policy options that reproduce the authors' code where genpol chose otherwise (docs/fidelity.md,
"Departures"), each against values computed by hand here:

* ``learner.advantage_std=population``: FPO's and GoRL's ``jnp.std`` (n, not n - 1);
* ``learner.grad_clip_eps``: GoRL's clip factor max_norm / (norm + 1e-8) (torch's adds 1e-6);
* ``learner.weight_decay``: the PolicyFlow port's AdamW;
* ``learner.adaptive_lr_rule=per_epoch`` and ``policy.kl_log_eps``: the port's KL-adaptive rule;
* ``policy.log_std_bounds``, ``policy.time_grid_endpoint``: the port's noise clamp and evaluation times;
* ``policy.velocity_network=port``: the port's velocity network (Fourier time MLP plus a linear map of obs).

genpol's defaults stay as they were; each test also checks that the default is the old behaviour.
"""

from __future__ import annotations

import copy
import math

import pytest
import torch

from genpol.heads import GaussianHead, PolicyFlowHead
from genpol.nets import ValueNetwork
from genpol.storage import RolloutStorage
from genpol.updaters.losses import PPOClipLoss, normalize_advantages
from genpol.updaters.minibatch import MinibatchUpdater, clip_gradient_norm
from genpol.updaters.schedules import adaptive_lr

# ---------------------------------------------------------------- advantage normalization


def test_population_std_normalizes_advantages_as_jnp_std():
    """A = (1, 2, 3, 6): mean 3, squared deviations 4, 1, 0, 9 (sum 14); population std sqrt(14 / 4),
    unbiased sqrt(14 / 3). One sample: the population std is 0, so it normalizes to 0 (jnp's result)."""
    advantages = torch.tensor([1.0, 2.0, 3.0, 6.0], dtype=torch.float64)
    deviations = torch.tensor([-2.0, -1.0, 0.0, 3.0], dtype=torch.float64)
    population = normalize_advantages(advantages, "population")
    assert torch.allclose(population, deviations / (math.sqrt(14 / 4) + 1e-8), rtol=1e-15, atol=0)
    assert torch.allclose(normalize_advantages(advantages), deviations / (math.sqrt(14 / 3) + 1e-8), rtol=1e-15, atol=0)
    assert torch.equal(normalize_advantages(advantages), normalize_advantages(advantages, "unbiased"))
    one = torch.tensor([5.0], dtype=torch.float64)
    assert torch.equal(normalize_advantages(one, "population"), torch.zeros(1, dtype=torch.float64))
    assert torch.equal(normalize_advantages(one), one)  # no unbiased std of one sample: left as it is


def test_the_loss_and_trpo_and_torchrun_normalize_with_the_configured_std():
    """PPOClipLoss's policy term at r = 1 is -mean(normalized A) = 0 either way, so the check is on the
    A r term's gradient: d/d log r of -mean(r A') at r = 1 is -A' / n, A' normalized by the chosen std."""
    from genpol import collectives

    advantages = torch.tensor([1.0, 2.0, 3.0, 6.0], dtype=torch.float64)
    expected = torch.tensor([-2.0, -1.0, 0.0, 3.0], dtype=torch.float64) / (math.sqrt(3.5) + 1e-8)
    from genpol.heads.base import RatioTerms

    log_ratio = torch.zeros(4, 1, dtype=torch.float64, requires_grad=True)
    loss = PPOClipLoss(advantage_std="population")
    out = loss(RatioTerms(log_ratio=log_ratio), advantages, torch.zeros(4, dtype=torch.float64),
               torch.zeros(4, dtype=torch.float64), torch.zeros(4, dtype=torch.float64))
    out.total.backward()
    assert torch.allclose(log_ratio.grad.squeeze(-1), -expected / 4, rtol=1e-14, atol=0)
    with pytest.raises(ValueError, match="advantage_std"):
        PPOClipLoss(advantage_std="sample")
    # torchrun's all-rank moments (one process here, without a process group: its own moments)
    assert torch.allclose(collectives.normalize_advantages(advantages, "population"), expected, rtol=1e-14, atol=0)
    assert torch.allclose(collectives.normalize_advantages(advantages),
                          normalize_advantages(advantages), rtol=1e-14, atol=0)


def config(*overrides: str):
    from genpol.api import compose_config
    from genpol.configure import validate

    return validate(compose_config(["run_dir=/tmp/genpol_test_onpolicy_options_unused", *overrides]))


def test_the_options_reach_the_updaters_from_the_config():
    """learner.* and policy.* as documented; every default is genpol's earlier behaviour."""
    from genpol.algorithms.registry import make_updater
    from genpol.build import make_head
    from genpol.errors import ConfigError

    default = config()
    assert (default.learner.advantage_std, default.learner.weight_decay, default.learner.grad_clip_eps,
            default.learner.adaptive_lr_rule) == ("unbiased", 0.0, 1e-6, "per_minibatch")
    cfg = config("learner.advantage_std=population", "learner.weight_decay=1e-5", "learner.grad_clip_eps=1e-8",
                 "learner.lr_schedule=adaptive", "learner.adaptive_lr_rule=per_epoch")
    head = make_head(cfg.policy, 3, 2)
    updater = make_updater(cfg.learner, head, ValueNetwork(3, (8,)))
    assert updater.loss.advantage_std == "population" and updater.clip_eps == 1e-8
    assert all(group["weight_decay"] == 1e-5 and group["decoupled_weight_decay"]
               for group in updater.optimizer.param_groups)
    assert (updater.adaptive_lr.every, updater.adaptive_lr.min_lr, updater.adaptive_lr.raise_at_zero_kl) == (
        "epoch", 1e-6, True)
    trpo = make_updater(config("learner=trpo", "learner.advantage_std=population").learner, head, ValueNetwork(3, (8,)))
    assert trpo.advantage_std == "population"
    plain = make_updater(default.learner, head, ValueNetwork(3, (8,)))
    assert all(group["weight_decay"] == 0.0 and not group["decoupled_weight_decay"]
               for group in plain.optimizer.param_groups)
    for bad in ("learner.advantage_std=sample", "learner.weight_decay=-1", "learner.adaptive_lr_rule=never",
                "policy=policyflow policy.log_std_bounds=[2,-5]"):
        with pytest.raises(ConfigError):
            config(*bad.split())


# ---------------------------------------------------------------- gradient clip epsilon


def test_clip_epsilon_is_torchs_by_default_and_gorls_when_asked():
    """Gradients (3, 4) and (12,): joint norm 13; clipped to 1, the factor is 1 / (13 + eps)."""
    def parameters():
        a, b = torch.zeros(2, dtype=torch.float64), torch.zeros(1, dtype=torch.float64)
        a.grad, b.grad = torch.tensor([3.0, 4.0], dtype=torch.float64), torch.tensor([12.0], dtype=torch.float64)
        return [a, b]

    ours = parameters()
    norm = clip_gradient_norm(ours, 1.0, eps=1e-8)
    assert norm.item() == 13.0
    assert torch.equal(ours[0].grad, torch.tensor([3.0, 4.0], dtype=torch.float64) * (1.0 / (13.0 + 1e-8)))
    assert torch.equal(ours[1].grad, torch.tensor([12.0], dtype=torch.float64) * (1.0 / (13.0 + 1e-8)))
    default, torchs = parameters(), parameters()
    clip_gradient_norm(default, 1.0)
    torch.nn.utils.clip_grad_norm_(torchs, 1.0, foreach=True)
    assert all(torch.equal(p.grad, q.grad) for p, q in zip(default, torchs))  # the same bits as torch's
    assert default[0].grad[0].item() == 3.0 * (1.0 / (13.0 + 1e-6))
    below = parameters()
    clip_gradient_norm(below, 100.0, eps=1e-8)  # inside the limit: untouched
    assert torch.equal(below[1].grad, torch.tensor([12.0], dtype=torch.float64))


# ---------------------------------------------------------------- AdamW weight decay


def test_weight_decay_is_decoupled_as_adamw():
    """Adam's first step is lr g / (|g| + eps) (bias-corrected moments g and g^2); AdamW first scales
    the parameter by 1 - lr wd: p1 = p0 (1 - lr wd) - lr g / (|g| + eps)."""
    torch.manual_seed(0)
    head, critic = GaussianHead(3, 1, hidden_sizes=(4,)), ValueNetwork(3, (4,))
    lr, wd, eps = 1e-2, 0.5, 1e-8
    updater = MinibatchUpdater(head, critic, PPOClipLoss(), lr=lr, adam_eps=eps, weight_decay=wd)
    before = [p.detach().clone() for p in updater.actor_params + updater.critic_params]
    for p in updater.actor_params + updater.critic_params:
        p.grad = torch.full_like(p, 0.25)
    updater.optimizer.step()
    for p, p0 in zip(updater.actor_params + updater.critic_params, before):
        assert torch.allclose(p.detach(), p0 * (1 - lr * wd) - lr * 0.25 / (0.25 + eps), rtol=1e-6, atol=1e-7)


def test_compiled_step_applies_weight_decay_and_clip_epsilon_as_the_eager_one():
    """learner.compile=true: the hand-written Adam decays, clips the gradients as one vector
    (learner.grad_clip=joint, which test_ppo_loss.py checks eagerly against torch's clip_grad_norm_) with
    the clip's epsilon (learner.grad_clip_eps) as the eager updater does."""
    torch.manual_seed(0)
    head, critic = GaussianHead(5, 2, hidden_sizes=(16,)), ValueNetwork(5, (16,))
    storage = RolloutStorage(32, 2, 5)
    for _ in range(32):
        obs = torch.randn(2, 5)
        with torch.no_grad():
            _, record = head.sample(obs)
        record["log_prob"] += 0.2 * torch.randn_like(record["log_prob"])
        storage.add(obs, record, torch.randn(2), 30 * torch.randn(2), torch.zeros(2, dtype=torch.bool),
                    torch.zeros(2, dtype=torch.bool))
    storage.compute_advantages(torch.zeros(2), 0.99, 0.95)
    twins = copy.deepcopy((head, critic))
    kwargs = dict(epochs=1, minibatch_size=64, lr=1e-2, max_grad_norm=0.05, weight_decay=0.3, clip_eps=1e-2,
                  joint_clip=True)
    eager = MinibatchUpdater(head, critic, PPOClipLoss(), **kwargs)
    compiled = MinibatchUpdater(*twins, PPOClipLoss(), compile=True, **kwargs)
    batch = next(storage.minibatches(64, torch.Generator().manual_seed(0)))  # the one minibatch
    total, _ = eager.minibatch_loss(batch.obs, batch.record, batch.advantages, batch.returns, batch.values)
    gradients = torch.autograd.grad(total, eager.actor_params + eager.critic_params)
    assert torch.linalg.vector_norm(torch.stack([g.norm() for g in gradients])) > 10 * 0.05  # the clip binds
    eager.update(storage, torch.Generator().manual_seed(0))
    compiled.update(storage, torch.Generator().manual_seed(0))
    for ours, theirs in zip([*head.parameters(), *critic.parameters()], [*twins[0].parameters(), *twins[1].parameters()]):
        assert torch.allclose(ours, theirs, atol=1e-6)


# ---------------------------------------------------------------- the KL-adaptive rule


def test_the_per_epoch_rule_is_the_policyflow_ports():
    """The port's AdaptiveKLScheduler (desired KL 0.01): lr / 1.5 above 0.02, x 1.5 below 0.005 (KL 0
    included), within [1e-6, 1e-2]. genpol's default keeps the rate at KL 0 and stops at 1e-5."""
    port = adaptive_lr("per_epoch", 1e-4, 0.01)
    assert port.step(0.0) == pytest.approx(1.5e-4, rel=1e-15)
    port.lr = 1.2e-6
    assert port.step(0.05) == 1e-6  # 1.2e-6 / 1.5 = 8e-7, held at the port's floor
    default = adaptive_lr("per_minibatch", 1e-4, 0.01)
    assert default.step(0.0) == 1e-4
    default.lr = 1.2e-5
    assert default.step(0.05) == 1e-5
    with pytest.raises(ValueError, match="adaptive_lr_rule"):
        adaptive_lr("per_step", 1e-4, 0.01)


def test_a_learning_rate_outside_the_adaptive_rules_bounds_is_refused():
    """Below its floor a too-high KL raised the rate to the floor (2e-6 -> 1e-5 at KL 0.5); above its ceiling the
    rate stayed there while the KL sat in the band. Each rule's own bounds; other schedules take any rate."""
    from genpol.errors import ConfigError

    with pytest.raises(ConfigError, match=r"learner.lr must be in \[1e-05, 0.01\].*per_minibatch, got 2e-06"):
        config("learner.lr_schedule=adaptive", "learner.lr=2e-6")
    with pytest.raises(ConfigError, match=r"in \[1e-06, 0.01\]"):
        config("learner.lr_schedule=adaptive", "learner.adaptive_lr_rule=per_epoch", "learner.lr=5e-2")
    assert config("learner.lr_schedule=adaptive", "learner.adaptive_lr_rule=per_epoch", "learner.lr=2e-6").learner.lr \
        == 2e-6
    assert config("learner.lr=5e-2").learner.lr == 5e-2  # a constant rate has no bounds


class FixedKLStorage:
    """``minibatches`` yields placeholders; the updater's ``eager_step`` is replaced to report given KLs."""

    def __init__(self, per_epoch: int):
        self.per_epoch = per_epoch

    def minibatches(self, size: int, generator: torch.Generator):
        yield from range(self.per_epoch)

    def flat(self):
        class Flat:
            values, returns = torch.zeros(4), torch.arange(4.0)

        return Flat


@pytest.mark.parametrize("rule, expected", [("per_epoch", 1e-4), ("per_minibatch", 2.25e-4)])
def test_the_rule_steps_once_per_epoch_on_the_mean_kl(rule, expected):
    """Minibatch KLs 0.05, 0.001, 0.001, 0.001 from lr 1e-4 (docs/fidelity.md's example): their mean
    0.01325 lies inside [0.005, 0.02], so the port keeps 1e-4; per minibatch genpol divides by 1.5 once
    and multiplies three times: 1e-4 / 1.5 x 1.5^3 = 2.25e-4. The critic's rate follows in proportion."""
    head, critic = GaussianHead(3, 1, hidden_sizes=(4,)), ValueNetwork(3, (4,))
    updater = MinibatchUpdater(head, critic, PPOClipLoss(), lr=1e-4, critic_lr=1e-3, epochs=1,
                               adaptive_lr=adaptive_lr(rule, 1e-4, 0.01))
    kls = iter([0.05, 0.001, 0.001, 0.001])
    seen_lrs = []

    def step(batch):
        seen_lrs.append(updater.learning_rate)
        return {"kl": torch.tensor(next(kls)), "policy": torch.tensor(0.0)}, True  # the diagnostics, stepped

    updater.eager_step = step
    stats = updater.update(FixedKLStorage(4), torch.Generator())
    assert stats["learning_rate"] == pytest.approx(expected, rel=1e-12)
    assert updater.optimizer.param_groups[1]["lr"] == pytest.approx(10 * expected, rel=1e-12)
    if rule == "per_epoch":  # the rate holds within the epoch
        assert seen_lrs == [1e-4] * 4


# ---------------------------------------------------------------- PolicyFlow head options


def policyflow(**options) -> PolicyFlowHead:
    torch.manual_seed(0)
    return PolicyFlowHead(4, 2, hidden_sizes=(8,), integration_steps=10, **options).double()


def test_log_std_bounds_clamp_the_noise_as_configured():
    """log std 2.5: genpol's default clamps to 2 (no gradient), the port's [-20, 4] keeps 2.5; the entropy
    of the noise is sum(log std + 1/2 + log(2 pi) / 2) over the two action dims."""
    obs = torch.randn(3, 4, dtype=torch.float64)
    for options, kept in (({}, 2.0), ({"log_std_bounds": [-20.0, 4.0]}, 2.5)):
        head = policyflow(**options)
        with torch.no_grad():
            head.log_std.fill_(2.5)
        _, record = head.sample(obs)
        assert torch.equal(record["log_std"], torch.full((3, 2), kept, dtype=torch.float64))
        terms = head.log_ratio(obs, record)
        assert terms.entropy[0].item() == pytest.approx(2 * (kept + 0.5 + 0.5 * math.log(2 * math.pi)), rel=1e-15)
        terms.entropy.sum().backward()
        assert torch.all(head.log_std.grad == (0.0 if kept == 2.0 else 3.0))  # d/d log std of 3 entropies


def test_the_time_grid_endpoint_adds_t_equal_one():
    """10 midpoint steps: genpol's evaluation times k / 20, k = 0..19; with the endpoint k = 0..20, the
    port's 21. Under euler, k / 10 for k = 0..9 (+ 1)."""
    assert torch.allclose(policyflow().time_grid, torch.arange(20, dtype=torch.float64) / 20, atol=1e-7, rtol=0)
    grid = policyflow(time_grid_endpoint=True).time_grid
    assert grid.shape == (21,) and grid[-1].item() == 1.0
    assert torch.allclose(grid, torch.arange(21, dtype=torch.float64) / 20, atol=1e-7, rtol=0)
    euler = policyflow(time_grid_endpoint=True, integrator="euler").time_grid
    assert torch.allclose(euler, torch.arange(11, dtype=torch.float64) / 10, atol=1e-7, rtol=0)
    # the ratio draws from all 21: randint's upper bound is the grid's length
    head, seen = policyflow(time_grid_endpoint=True), []
    obs = torch.randn(5, 4, dtype=torch.float64)
    _, record = head.sample(obs)
    original = torch.randint

    def recording(low, high, *args, **kwargs):
        seen.append(high)
        return original(low, high, *args, **kwargs)

    torch.randint = recording
    try:
        head.log_ratio(obs, record)
    finally:
        torch.randint = original
    assert seen == [21]


def test_kl_log_eps_is_the_ports_kl():
    """dv = 0.3 in both dims (the velocity's output bias moved by 0.3), sigma_old = 1, sigma_theta = e^0.5:
    KL per dim = log(sigma_theta / sigma_old [+ eps]) + (sigma_old^2 + dv^2) / (2 sigma_theta^2) - 1/2."""
    obs = torch.randn(3, 4, dtype=torch.float64)
    for eps in (0.0, 1e-5):
        head = policyflow(kl_log_eps=eps)
        _, record = head.sample(obs)
        record["log_std"] = torch.zeros(3, 2, dtype=torch.float64)
        with torch.no_grad():
            head.log_std.fill_(0.5)
            head.velocity.net[-1].bias.add_(0.3 / head.velocity.output_scale)
        per_dim = math.log(math.exp(0.5) + eps) + (1 + 0.09) / (2 * math.exp(1.0)) - 0.5
        kl = head.log_ratio(obs, record).kl
        assert torch.allclose(kl, torch.full((3,), 2 * per_dim, dtype=torch.float64), rtol=1e-13, atol=0)


def test_the_port_velocity_network_by_hand():
    """policy.velocity_network=port, width 16 (2 frequencies f), one hidden layer of 8, ELU:
    c = W2 mish(W1 [cos 2 pi f t, sin 2 pi f t] + b1) + b2 + Ws obs + bs, v = A2 elu(A1 [x, c] + a1) + a2,
    in plain float64 ops from the head's own weights; mish(h) = h tanh(log(1 + e^h)), elu(z) = z or e^z - 1."""
    from genpol.api import compose_config
    from genpol.build import make_head
    from genpol.configure import validate
    from genpol.errors import ConfigError
    from genpol.heads.flow_core import FourierVelocityNetwork, VelocityNetwork

    head = policyflow(velocity_network="port", time_embed_dim=16, activation="elu")
    assert isinstance(head.velocity, FourierVelocityNetwork) and isinstance(policyflow().velocity, VelocityNetwork)
    w = {name: value.detach().clone() for name, value in head.velocity.state_dict().items()}
    assert sorted(w) == ["frequencies", "net.0.bias", "net.0.weight", "net.2.bias", "net.2.weight", "obs_map.bias",
                         "obs_map.weight", "time_mlp.0.bias", "time_mlp.0.weight", "time_mlp.2.bias",
                         "time_mlp.2.weight"]
    assert w["frequencies"].shape == (2,) and w["time_mlp.0.weight"].shape == (16, 4)
    assert w["obs_map.weight"].shape == (16, 4) and w["net.0.weight"].shape == (8, 2 + 16)
    obs = torch.randn(5, 4, dtype=torch.float64)
    x = torch.randn(5, 2, dtype=torch.float64)
    t = torch.tensor([0.0, 0.05, 0.35, 0.95, 1.0], dtype=torch.float64)

    expected = torch.zeros(5, 2, dtype=torch.float64)
    for b in range(5):
        features = [math.cos(2 * math.pi * f * t[b].item()) for f in w["frequencies"].tolist()]
        features += [math.sin(2 * math.pi * f * t[b].item()) for f in w["frequencies"].tolist()]
        h = w["time_mlp.0.weight"] @ torch.tensor(features, dtype=torch.float64) + w["time_mlp.0.bias"]
        h = torch.tensor([v * math.tanh(math.log1p(math.exp(v))) for v in h.tolist()], dtype=torch.float64)
        c = w["time_mlp.2.weight"] @ h + w["time_mlp.2.bias"] + w["obs_map.weight"] @ obs[b] + w["obs_map.bias"]
        z = w["net.0.weight"] @ torch.cat([x[b], c]) + w["net.0.bias"]
        z = torch.tensor([v if v > 0 else math.expm1(v) for v in z.tolist()], dtype=torch.float64)
        expected[b] = w["net.2.weight"] @ z + w["net.2.bias"]
    assert torch.allclose(head.velocity(obs, x, t), expected, rtol=1e-13, atol=1e-15)
    # output_scale multiplies it; the snapshot is the same network (dv = 0 right after sampling)
    scaled = policyflow(velocity_network="port", time_embed_dim=16, activation="elu", output_scale=0.5)
    assert torch.allclose(scaled.velocity(obs, x, t), 0.5 * expected, rtol=1e-13, atol=1e-15)
    _, record = head.sample(obs)
    assert torch.equal(head.log_ratio(obs, record).diagnostics["delta_v"], torch.tensor(0.0, dtype=torch.float64))
    # the frequencies are saved, and a loaded state dict moves them into the snapshot as well
    other = policyflow(velocity_network="port", time_embed_dim=16, activation="elu")
    state = {name: value + 1.0 for name, value in head.state_dict().items()}
    other.load_state_dict(state)
    assert torch.equal(other.snapshot.frequencies, w["frequencies"] + 1.0)
    assert torch.equal(other.snapshot(obs, x, t), other.velocity(obs, x, t))
    # from the config; genpol's network by default; a width under 8 (no frequency) or an unknown name refused
    cfg = validate(compose_config(["run_dir=/tmp/genpol_test_onpolicy_options_unused", "policy=policyflow",
                                   "policy.velocity_network=port", "policy.time_embed_dim=64"]))
    assert (cfg.policy.velocity_network, cfg.policy.fourier_scale) == ("port", 16.0)
    assert isinstance(make_head(cfg.policy, 3, 2).velocity, FourierVelocityNetwork)
    assert config("policy=policyflow").policy.velocity_network == "genpol"
    for bad in ("policy.velocity_network=theirs", "policy.velocity_network=port policy.time_embed_dim=6",
                "policy.fourier_scale=0"):
        with pytest.raises(ConfigError):
            config("policy=policyflow", *bad.split())
