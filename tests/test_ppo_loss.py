"""PPO-clip against stable-baselines3 as the oracle: same weights, same batch, same update."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from stable_baselines3 import PPO
from stable_baselines3.common.logger import configure

from genpol.heads import GaussianHead, RatioTerms
from genpol.nets import ValueNetwork
from genpol.storage import RolloutStorage
from genpol.updaters import MinibatchUpdater, PPOClipLoss

T = 256  # one env, so the batch is T samples


def copy_weights_into_sb3(head: GaussianHead, critic: ValueNetwork, policy) -> None:
    pairs = [
        (head.mean_net[0], policy.mlp_extractor.policy_net[0]),
        (head.mean_net[2], policy.mlp_extractor.policy_net[2]),
        (head.mean_net[4], policy.action_net),
        (critic.net[0], policy.mlp_extractor.value_net[0]),
        (critic.net[2], policy.mlp_extractor.value_net[2]),
        (critic.net[4], policy.value_net),
    ]
    with torch.no_grad():
        for ours, theirs in pairs:
            theirs.weight.copy_(ours.weight)
            theirs.bias.copy_(ours.bias)
        policy.log_std.copy_(head.log_std)


def sb3_params(policy):
    return [policy.mlp_extractor.policy_net[0].weight, policy.mlp_extractor.policy_net[2].weight,
            policy.action_net.weight, policy.action_net.bias, policy.log_std,
            policy.mlp_extractor.value_net[0].weight, policy.value_net.weight]


def genpol_params(head, critic):
    return [head.mean_net[0].weight, head.mean_net[2].weight, head.mean_net[4].weight, head.mean_net[4].bias,
            head.log_std, critic.net[0].weight, critic.net[4].weight]


@pytest.mark.parametrize("ent_coef", [0.0, 0.01])
def test_ppo_update_matches_stable_baselines3(tmp_path, ent_coef):
    env = gym.make("Pendulum-v1")
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    torch.manual_seed(0)
    head = GaussianHead(obs_dim, act_dim, hidden_sizes=(64, 64), log_std_init=-0.2)
    critic = ValueNetwork(obs_dim, (64, 64))
    model = PPO("MlpPolicy", env, n_steps=T, batch_size=T, n_epochs=3, learning_rate=3e-4, ent_coef=ent_coef,
                vf_coef=0.5, clip_range=0.2, max_grad_norm=0.5, device="cpu", seed=0)
    model.set_logger(configure(str(tmp_path), []))
    copy_weights_into_sb3(head, critic, model.policy)

    generator = torch.Generator().manual_seed(1)
    obs = torch.randn(T, obs_dim, generator=generator)
    with torch.no_grad():
        actions, record = head.sample(obs)
    # Perturb the old log-probs so some ratios start outside the clip range.
    old_log_prob = record["log_prob"] + 0.3 * torch.randn(T, generator=generator)
    advantages = torch.randn(T, generator=generator) * 2 + 0.5
    returns = torch.randn(T, generator=generator)
    old_values = torch.randn(T, generator=generator)

    buffer = model.rollout_buffer
    buffer.reset()
    buffer.observations[:] = obs.numpy()[:, None, :]
    buffer.actions[:] = actions.numpy()[:, None, :]
    buffer.log_probs[:] = old_log_prob.numpy()[:, None]
    buffer.advantages[:] = advantages.numpy()[:, None]
    buffer.returns[:] = returns.numpy()[:, None]
    buffer.values[:] = old_values.numpy()[:, None]
    buffer.full = True
    model.train()
    logged = model.logger.name_to_value

    storage = RolloutStorage(T, 1, obs_dim)
    storage.obs[:, 0] = obs
    storage.records = {key: value[:, None].clone() for key, value in record.items()}
    storage.records["log_prob"] = old_log_prob[:, None].clone()
    storage.advantages[:, 0], storage.returns[:, 0], storage.values[:, 0] = advantages, returns, old_values
    loss = PPOClipLoss(clip_range=0.2, ent_coef=ent_coef, vf_coef=0.5)
    # One epoch per call, three calls: the same three Adam steps, and per-epoch diagnostics
    # (SB3 logs approx_kl of the last epoch only, the other terms averaged over all epochs).
    updater = MinibatchUpdater(head, critic, loss, lr=3e-4, epochs=1, minibatch_size=T, max_grad_norm=0.5)
    epochs = [updater.update(storage, torch.Generator().manual_seed(0)) for _ in range(3)]

    def mean(key):
        return float(np.mean([stats[key] for stats in epochs]))

    assert mean("policy") == pytest.approx(logged["train/policy_gradient_loss"], rel=1e-4, abs=1e-6)
    assert mean("value") == pytest.approx(logged["train/value_loss"], rel=1e-4)
    assert -mean("entropy") == pytest.approx(logged["train/entropy_loss"], rel=1e-5)
    assert mean("clipfrac") == pytest.approx(logged["train/clip_fraction"], abs=1e-6)
    assert epochs[-1]["approx_kl"] == pytest.approx(logged["train/approx_kl"], rel=1e-4)
    assert 0.05 < mean("clipfrac") < 0.95  # the clip was active: the comparison covers both branches
    for ours, theirs in zip(genpol_params(head, critic), sb3_params(model.policy)):
        assert torch.allclose(ours, theirs, atol=2e-6), (ours - theirs).abs().max()
    assert not torch.allclose(head.log_std, torch.full_like(head.log_std, -0.2))  # the update moved it


@pytest.mark.parametrize("target_kl", [None, 0.003])
def test_shuffled_minibatches_and_the_kl_stop_match_stable_baselines3(monkeypatch, target_kl):
    """4 epochs of 4 shuffled minibatches of 64 (the test above runs one), SB3's joint clip at 0.5 (it fires:
    lr 3e-3), and with target_kl SB3's early stop at the minibatch whose approximate KL passes 1.5 x target_kl:
    genpol's MinibatchUpdater, given SB3's permutations, ends with SB3's parameters (float32 rounding)."""
    from genpol.storage import rollout as rollout_module

    steps, lr = 256, 3e-3
    torch.manual_seed(0)
    head, critic = GaussianHead(3, 1, hidden_sizes=(64, 64), log_std_init=-0.2), ValueNetwork(3, (64, 64))
    model = PPO("MlpPolicy", gym.make("Pendulum-v1"), n_steps=steps, batch_size=64, n_epochs=4, learning_rate=lr,
                clip_range=0.2, max_grad_norm=0.5, target_kl=target_kl, device="cpu", seed=0)
    model.set_logger(configure(None, []))
    copy_weights_into_sb3(head, critic, model.policy)
    generator = torch.Generator().manual_seed(1)
    obs = torch.randn(steps, 3, generator=generator)
    with torch.no_grad():
        actions, record = head.sample(obs)
    advantages, returns = torch.randn(steps, generator=generator) * 2 + 0.5, 5 * torch.randn(steps, generator=generator)
    old_values = torch.randn(steps, generator=generator)
    buffer = model.rollout_buffer
    buffer.reset()
    buffer.observations[:], buffer.actions[:] = obs.numpy()[:, None], actions.numpy()[:, None]
    buffer.log_probs[:], buffer.advantages[:] = record["log_prob"].numpy()[:, None], advantages.numpy()[:, None]
    buffer.returns[:], buffer.values[:], buffer.full = returns.numpy()[:, None], old_values.numpy()[:, None], True
    np.random.seed(123)  # SB3's buffer permutes with numpy's global generator
    model.train()
    storage = RolloutStorage(steps, 1, 3)
    storage.obs[:, 0] = obs
    storage.records = {key: value[:, None].clone() for key, value in record.items()}
    storage.advantages[:, 0], storage.returns[:, 0], storage.values[:, 0] = advantages, returns, old_values
    np.random.seed(123)
    monkeypatch.setattr(rollout_module.torch, "randperm",
                        lambda n, generator=None, device=None: torch.as_tensor(np.random.permutation(n)))
    updater = MinibatchUpdater(head, critic, PPOClipLoss(clip_range=0.2, vf_coef=0.5), lr=lr, epochs=4,
                               minibatch_size=64, max_grad_norm=0.5, target_kl=target_kl, joint_clip=True)
    stats = updater.update(storage, torch.Generator())
    # stopped early with the KL (SB3 logs epochs, not steps: equal parameters say it stopped at the same one)
    assert stats["gradient_steps"] == 16 if target_kl is None else stats["gradient_steps"] < 16
    if target_kl is not None:  # it stops in the first epoch, so SB3's logs (its KL's of the last epoch) are ours:
        # the minibatch that stopped it is in both averages (it was left out of genpol's, hiding the KL that stopped)
        logged = model.logger.name_to_value
        for ours, theirs in (("policy", "policy_gradient_loss"), ("value", "value_loss"), ("approx_kl", "approx_kl"),
                             ("clipfrac", "clip_fraction")):
            assert stats[ours] == pytest.approx(float(logged[f"train/{theirs}"]), rel=1e-4), ours  # float32 sums
        assert stats["entropy"] == pytest.approx(-float(logged["train/entropy_loss"]), rel=1e-5)
    for ours, theirs in zip(genpol_params(head, critic), sb3_params(model.policy)):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=2e-7)


def test_a_stop_at_the_first_minibatch_logs_the_kl_that_stopped_it():
    """A rollout whose old log-probs are off by 0.3 nats everywhere: approx-KL = (e^0.3 - 1) - 0.3 = 0.050 at
    the first minibatch, past 1.5 x 0.01. No step, and the logs say why (they were empty but for the counters)."""
    torch.manual_seed(0)
    head, critic = GaussianHead(3, 1, hidden_sizes=(16,)), ValueNetwork(3, (16,))
    storage = RolloutStorage(64, 1, 3)
    storage.obs.normal_()
    with torch.no_grad():
        _, record = head.sample(storage.obs[:, 0])
    record["log_prob"] = record["log_prob"] - 0.3
    storage.records = {key: value[:, None].clone() for key, value in record.items()}
    storage.advantages.normal_()
    before = [p.detach().clone() for p in [*head.parameters(), *critic.parameters()]]
    updater = MinibatchUpdater(head, critic, PPOClipLoss(clip_range=0.2), lr=1e-3, epochs=2, minibatch_size=32,
                               target_kl=0.01)
    stats = updater.update(storage, torch.Generator().manual_seed(0))
    assert stats["gradient_steps"] == 0 and stats["stopped_early"] == 1.0
    assert stats["approx_kl"] == pytest.approx(np.expm1(0.3) - 0.3, rel=1e-4)
    assert {"policy", "value", "clipfrac"} <= stats.keys()
    assert all(torch.equal(a, b) for a, b in zip(before, [*head.parameters(), *critic.parameters()]))


def test_ppo_clip_loss_hand_computed_boundaries():
    """Three samples, clip 0.2, no normalization: r = 1.5 (A > 0, clipped), r = 0.5 (A < 0, clipped),
    r = 1.1 (A > 0, inside)."""
    log_ratio = torch.log(torch.tensor([[1.5], [0.5], [1.1]])).requires_grad_()
    advantages = torch.tensor([2.0, -1.0, 3.0])
    loss = PPOClipLoss(clip_range=0.2, normalize_advantage=False, vf_coef=0.0)
    out = loss(RatioTerms(log_ratio), advantages, torch.zeros(3), torch.zeros(3), torch.zeros(3))
    # min(r A, clip(r) A): 1.2*2 = 2.4 ; min(-0.5, -0.8) = -0.8 ; 3.3  -> loss = -(2.4 - 0.8 + 3.3) / 3
    assert out.policy.item() == pytest.approx(-(2.4 - 0.8 + 3.3) / 3)
    out.total.backward()
    # clipped samples get no gradient; the inside one gets -A r / 3 (d r / d log r = r)
    assert torch.allclose(log_ratio.grad[:, 0], torch.tensor([0.0, 0.0, -3.0 * 1.1 / 3]))
    assert out.diagnostics["clipfrac"].item() == pytest.approx(2 / 3)
    assert out.diagnostics["ratio_deviation"].item() == pytest.approx((0.5 + 0.5 + 0.1) / 3)
    kl = np.mean([(r - 1) - np.log(r) for r in (1.5, 0.5, 1.1)])
    assert out.diagnostics["approx_kl"].item() == pytest.approx(kl, rel=1e-5)


def test_unit_weights_and_unit_clip_apply_per_unit():
    """Two units per sample: weights scale each unit's advantage, unit_clip overrides the clip."""
    log_ratio = torch.log(torch.tensor([[1.3, 1.3]]))
    terms = RatioTerms(log_ratio, unit_weights=torch.tensor([0.5, 1.0]), unit_clip=torch.tensor([0.1, 0.4]))
    out = PPOClipLoss(clip_range=0.2, normalize_advantage=False, vf_coef=0.0)(
        terms, torch.tensor([2.0]), torch.zeros(1), torch.zeros(1), torch.zeros(1))
    # unit 0: A = 1, r clipped at 1.1 -> 1.1 ; unit 1: A = 2, r = 1.3 inside 1.4 -> 2.6
    assert out.policy.item() == pytest.approx(-(1.1 + 2.6) / 2)
    assert out.diagnostics["clipfrac"].item() == pytest.approx(0.5)


def test_value_clipping_takes_the_pessimistic_error():
    loss = PPOClipLoss(clip_range_vf=0.5)
    values, returns, old = torch.tensor([2.0, 0.2]), torch.tensor([2.0, 0.0]), torch.tensor([0.0, 0.0])
    # sample 0: unclipped error 0, clipped prediction 0.5 -> error 2.25 ; sample 1: both 0.04
    assert loss.value_loss(values, returns, old).item() == pytest.approx((2.25 + 0.04) / 2)


def test_entropy_bonus_without_an_entropy_is_refused():
    with pytest.raises(ValueError, match="no entropy"):
        PPOClipLoss(ent_coef=0.01)(RatioTerms(torch.zeros(2, 1)), torch.ones(2), torch.zeros(2),
                                   torch.zeros(2), torch.zeros(2))


def wide_diffusion_twins():
    """A DPPO head and critic whose 128-wide layers take oneDNN's GEMM (tests run on one thread, 64
    rows per minibatch) and whose activations are genpol's Mish: the layers `+experiment=dppo_hopper`
    compiles."""
    from genpol.heads import DiffusionHead
    from genpol.mish import Mish
    from genpol.onednn import ONEDNN_AVAILABLE, OneDNNLinear

    head = DiffusionHead(5, 2, denoising_steps=3, ft_denoising_steps=2, hidden_sizes=(128, 128, 128))
    critic = ValueNetwork(5, (128, 128), activation="mish")
    layers = [m for m in [*head.modules(), *critic.modules()] if isinstance(m, OneDNNLinear) and m.use_onednn]
    assert len(layers) >= 3 or not ONEDNN_AVAILABLE  # the block's two in each denoiser copy, the critic's one
    assert any(isinstance(m, Mish) for m in head.modules())
    return head, critic


@pytest.mark.parametrize("heads", ["gaussian", "diffusion"])
def test_compiled_minibatch_step_matches_the_eager_one(heads, onednn_preferred):
    """learner.compile=true: same diagnostics and parameters as eager Adam, also across a learning-rate
    change (the rate is a tensor input, so it must not be baked into the compiled graph). For a Gaussian
    head, and for a DPPO head with oneDNN layers and genpol's Mish inside the compiled graph. The rollout
    (288 samples) ends in a short minibatch of 32: it steps eagerly, on the same Adam state, and compiles
    no second graph."""
    import copy

    from torch._dynamo.utils import counters

    torch.manual_seed(0)
    if heads == "gaussian":
        head, critic = GaussianHead(5, 2, hidden_sizes=(32, 32)), ValueNetwork(5, (32, 32))
    else:
        head, critic = wide_diffusion_twins()
    storage = RolloutStorage(72, 4, 5)
    for _ in range(72):
        obs = torch.randn(4, 5)
        with torch.no_grad():
            _, record = head.sample(obs)
        record["log_prob"] += 0.2 * torch.randn_like(record["log_prob"])
        storage.add(obs, record, torch.randn(4), torch.randn(4), torch.zeros(4, dtype=torch.bool),
                    torch.zeros(4, dtype=torch.bool))
    storage.compute_advantages(torch.zeros(4), 0.99, 0.95)
    twins = copy.deepcopy((head, critic))
    kwargs = dict(epochs=2, minibatch_size=64, critic_lr=1e-3, max_grad_norm=0.5)
    ent_coef = 0.01 if heads == "gaussian" else 0.0  # DPPO's chain has no entropy
    eager = MinibatchUpdater(head, critic, PPOClipLoss(ent_coef=ent_coef), **kwargs)
    compiled = MinibatchUpdater(*twins, PPOClipLoss(ent_coef=ent_coef), compile=True, **kwargs)
    graphs_before = counters["stats"]["unique_graphs"]
    for scale in (1.0, 0.5):
        eager.set_lr_scale(scale)
        compiled.set_lr_scale(scale)
        a = eager.update(storage, torch.Generator().manual_seed(0))
        # after the first update, nothing may recompile: the new learning rate is a tensor input
        with torch._dynamo.config.patch(error_on_recompile=scale != 1.0):
            b = compiled.update(storage, torch.Generator().manual_seed(0))
        assert counters["stats"]["unique_graphs"] - graphs_before == 1, "the short minibatch compiled a graph"
        assert b["gradient_steps"] == 2 * 5  # 4 full minibatches and the short one, 2 epochs
        for key in ("policy", "value", "entropy", "approx_kl", "clipfrac"):
            assert a[key] == pytest.approx(b[key], rel=1e-4, abs=1e-6), key
    for ours, theirs in zip([*head.parameters(), *critic.parameters()], [*twins[0].parameters(), *twins[1].parameters()]):
        assert torch.allclose(ours, theirs, atol=1e-5)
    assert eager.optimizer.state_dict()["state"].keys() == compiled.optimizer.state_dict()["state"].keys()


@pytest.mark.parametrize("compile", [False, True], ids=["eager", "compiled"])
def test_gradient_clip_is_per_network(compile):
    """max_grad_norm clips the actor's and the critic's gradients each on its own: the actor's step does
    not depend on how large the critic's gradient is. The two rollouts differ only in their returns,
    which only the value loss sees; a huge value error must not shrink the actor's step (clipped as one
    vector with the critic's, the actor's gradient would fall below Adam's eps and its step with it)."""
    import copy

    torch.manual_seed(0)
    head, critic = GaussianHead(5, 2, hidden_sizes=(32, 32)), ValueNetwork(5, (32, 32))
    storages = [RolloutStorage(64, 1, 5), RolloutStorage(64, 1, 5)]
    obs = torch.randn(64, 5)
    with torch.no_grad():
        _, record = head.sample(obs)
    record["log_prob"] += 0.2 * torch.randn(64)
    advantages, returns = torch.randn(64), torch.randn(64)
    for storage, return_scale in zip(storages, (1.0, 1e4)):
        storage.obs[:, 0] = obs
        storage.records = {key: value[:, None].clone() for key, value in record.items()}
        storage.advantages[:, 0], storage.returns[:, 0] = advantages, returns * return_scale
    twins = [copy.deepcopy((head, critic)) for _ in storages]
    for (twin_head, twin_critic), storage in zip(twins, storages):
        # the loss and sizes of test_compiled_minibatch_step_matches_the_eager_one's Gaussian case: the
        # compiled step is the same graph, which the second of them finds in the compile cache (~7 s)
        updater = MinibatchUpdater(twin_head, twin_critic, PPOClipLoss(ent_coef=0.01), epochs=1, minibatch_size=64,
                                   max_grad_norm=0.5, compile=compile)
        updater.update(storage, torch.Generator().manual_seed(0))
        if not compile:  # the eager path leaves the clipped gradients in .grad
            for params in (updater.actor_params, updater.critic_params):
                assert torch.linalg.vector_norm(torch.stack([p.grad.norm() for p in params])) <= 0.5 + 1e-5
    (small_head, small_critic), (large_head, large_critic) = twins
    for ours, theirs in zip(small_head.parameters(), large_head.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-7)
    assert not torch.allclose(small_critic.net[0].weight, large_critic.net[0].weight)  # the critics did differ
    assert not torch.allclose(small_head.log_std, head.log_std)  # and the actor did move


def test_joint_gradient_clip_scales_both_networks_by_one_norm():
    """learner.grad_clip=joint (SB3's PPO and SPO's code): one norm over actor and critic; the step
    equals an eager Adam step on gradients clipped as one vector, recomputed here with
    torch's clip_grad_norm_ over all parameters. The compiled step's joint clip is held to this eager
    one by test_onpolicy_options.py's compiled test (joint clip, weight decay and clip epsilon in one
    graph, which saves a compilation of ~7 s here)."""
    import copy

    torch.manual_seed(0)
    head, critic = GaussianHead(5, 2, hidden_sizes=(16,)), ValueNetwork(5, (16,))
    storage = RolloutStorage(32, 1, 5)
    obs = torch.randn(32, 5)
    with torch.no_grad():
        _, record = head.sample(obs)
    record["log_prob"] += 0.2 * torch.randn(32)
    storage.obs[:, 0] = obs
    storage.records = {key: value[:, None].clone() for key, value in record.items()}
    storage.advantages[:, 0], storage.returns[:, 0] = torch.randn(32), 100 * torch.randn(32)
    reference_head, reference_critic = copy.deepcopy(head), copy.deepcopy(critic)
    updater = MinibatchUpdater(head, critic, PPOClipLoss(), epochs=1, minibatch_size=32, max_grad_norm=0.5,
                               joint_clip=True)
    updater.update(storage, torch.Generator().manual_seed(0))
    # by hand: the same loss, one clip over every gradient, torch's Adam
    reference = MinibatchUpdater(reference_head, reference_critic, PPOClipLoss(), epochs=1, minibatch_size=32,
                                 max_grad_norm=None)
    batch = next(storage.minibatches(32, torch.Generator().manual_seed(0)))
    total, _ = reference.minibatch_loss(batch.obs, batch.record, batch.advantages, batch.returns, batch.values)
    total.backward()
    everything = reference.actor_params + reference.critic_params
    assert torch.nn.utils.clip_grad_norm_(everything, 0.5) > 0.5  # the clip binds
    reference.optimizer.step()
    for ours, expected in zip([*head.parameters(), *critic.parameters()],
                              [*reference_head.parameters(), *reference_critic.parameters()]):
        torch.testing.assert_close(ours, expected, rtol=1e-5, atol=1e-6)
