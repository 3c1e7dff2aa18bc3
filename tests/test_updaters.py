"""SPO, ASPO, TRPO and the KL-adaptive learning rate against hand computations and sb3-contrib."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from sb3_contrib import TRPO
from stable_baselines3.common.logger import configure

from genpol.errors import ConfigError
from genpol.heads import DiffusionHead, GaussianHead, PolicyFlowHead, RatioTerms
from genpol.nets import ValueNetwork
from genpol.storage import RolloutStorage
from genpol.updaters import MinibatchUpdater
from genpol.updaters.losses import ASPOLoss, PPOClipLoss, SPOLoss
from genpol.updaters.schedules import AdaptiveLR
from genpol.updaters.trpo import TRPOUpdater, conjugate_gradient

from test_ppo_loss import copy_weights_into_sb3, genpol_params, sb3_params


def policy_loss_and_grad(loss, ratios, advantages):
    log_ratio = torch.log(torch.tensor(ratios)).unsqueeze(-1).requires_grad_()
    out = loss(RatioTerms(log_ratio), torch.tensor(advantages), torch.zeros(len(ratios)),
               torch.zeros(len(ratios)), torch.zeros(len(ratios)))
    out.total.backward()
    return out, log_ratio.grad[:, 0]


def test_spo_hand_computed_values_and_gradients():
    """eps 0.2, A = [2, -1, 1]: r = 1.5 (beyond the clip), r = 0.8 (at its optimum 1 - eps), r = 1.2
    (at its optimum 1 + eps). Loss per sample -(A r - |A|/(2 eps) (r-1)^2)."""
    spo = SPOLoss(clip_range=0.2, normalize_advantage=False, vf_coef=0.0)
    out, grad = policy_loss_and_grad(spo, [1.5, 0.8, 1.2], [2.0, -1.0, 1.0])
    per_sample = [-(2 * 1.5 - 2 / 0.4 * 0.25), -(-0.8 - 1 / 0.4 * 0.04), -(1.2 - 1 / 0.4 * 0.04)]
    assert out.policy.item() == pytest.approx(np.mean(per_sample))
    # d loss / d log r = r * d loss / d r = -r (A - |A| (r - 1) / eps) / 3
    expected = [-1.5 * (2 - 2 * 0.5 / 0.2) / 3, -0.8 * (-1 - 1 * (-0.2) / 0.2) / 3, -1.2 * (1 - 1 * 0.2 / 0.2) / 3]
    assert torch.allclose(grad, torch.tensor(expected), atol=1e-6)
    assert grad[0] > 0  # beyond the boundary the penalty pulls r back down...
    assert grad[1:].abs().max() < 1e-6  # ...and r = 1 +- eps are the per-sample optima
    ppo = PPOClipLoss(clip_range=0.2, normalize_advantage=False, vf_coef=0.0)
    _, ppo_grad = policy_loss_and_grad(ppo, [1.5], [2.0])
    assert ppo_grad.item() == 0.0  # where PPO's clipped objective gives no gradient at all


def test_spo_optimum_is_the_clip_boundary():
    spo = SPOLoss(clip_range=0.2, normalize_advantage=False, vf_coef=0.0)
    ratios = torch.linspace(0.5, 1.5, 1001)
    for advantage, optimum in ((1.0, 1.2), (-3.0, 0.8)):
        losses = spo.policy_loss(ratios.log()[:, None], torch.full((1001, 1), advantage), None)[:, 0]
        assert ratios[losses.argmin()].item() == pytest.approx(optimum, abs=1e-3)


def test_aspo_clips_positive_and_penalizes_negative_advantages():
    aspo = ASPOLoss(clip_range=0.1, spo_clip_range=0.3, normalize_advantage=False, vf_coef=0.0)
    out, grad = policy_loss_and_grad(aspo, [1.5, 1.5, 0.5], [1.0, -1.0, -1.0])
    # A > 0, r = 1.5 > 1.1: PPO-clip, loss -1.1, no gradient
    # A < 0, r = 1.5: SPO with eps 0.3, loss -(-1.5 - 0.25/0.6); r = 0.5: -(-0.5 - 0.25/0.6)
    expected = [-1.1, 1.5 + 0.25 / 0.6, 0.5 + 0.25 / 0.6]
    assert out.policy.item() == pytest.approx(np.mean(expected))
    assert grad[0].item() == 0.0
    assert grad[1] > 0 and grad[2] < 0  # both pulled towards the SPO optimum 1 - 0.3
    # each unit against its own trust region: A > 0 and r 1.5 outside [0.9, 1.1], A < 0 and r 1.5 and 0.5
    # outside [0.7, 1.3]
    assert out.diagnostics["clipfrac"].item() == pytest.approx(1.0)
    # r = 1.2 with A < 0 sits inside SPO's [0.7, 1.3], though outside PPO's [0.9, 1.1]; with A > 0 it is outside
    out, _ = policy_loss_and_grad(aspo, [1.2, 1.2, 1.05], [-1.0, 1.0, 1.0])
    assert out.diagnostics["clipfrac"].item() == pytest.approx(1 / 3)


def test_adaptive_lr_follows_the_rsl_rl_rule():
    schedule = AdaptiveLR(1e-3, target_kl=0.01)
    assert schedule.step(0.03) == pytest.approx(1e-3 / 1.5)  # above 2 x target: shrink
    assert schedule.step(0.015) == pytest.approx(1e-3 / 1.5)  # inside [target/2, 2 target]: keep
    assert schedule.step(0.001) == pytest.approx(1e-3)  # below target/2: grow
    assert schedule.step(0.0) == pytest.approx(1e-3)  # exactly 0 (no update yet): keep
    for _ in range(40):
        schedule.step(1.0)
    assert schedule.lr == 1e-5  # bounded below
    for _ in range(40):
        schedule.step(1e-6)
    assert schedule.lr == 1e-2  # and above


def test_conjugate_gradient_solves_a_spd_system():
    torch.manual_seed(0)
    m = torch.randn(6, 6, dtype=torch.float64)
    a = m @ m.T + 0.5 * torch.eye(6, dtype=torch.float64)
    b = torch.randn(6, dtype=torch.float64)
    x = conjugate_gradient(lambda v: a @ v, b, iterations=20)
    assert torch.allclose(a @ x, b, atol=1e-8)


T = 512


def trpo_batch(obs_dim, act_dim, head, seed=1, zero_advantages=False):
    generator = torch.Generator().manual_seed(seed)
    obs = torch.randn(T, obs_dim, generator=generator)
    with torch.no_grad():
        actions, record = head.sample(obs)
    # advantages that prefer actions above the mean in the first dimension: a learnable signal
    advantages = (actions[:, 0] - record["mean"][:, 0]) + 0.3 * torch.randn(T, generator=generator)
    if zero_advantages:
        advantages = torch.zeros(T)
    returns = torch.randn(T, generator=generator)
    values = torch.randn(T, generator=generator)
    storage = RolloutStorage(T, 1, obs_dim)
    storage.obs[:, 0] = obs
    storage.records = {key: value[:, None].clone() for key, value in record.items()}
    storage.advantages[:, 0], storage.returns[:, 0], storage.values[:, 0] = advantages, returns, values
    return storage, obs, actions, record


@pytest.mark.parametrize("chunk_size,env_id,kl_reduction", [(T, "Pendulum-v1", "sum"), (100, "Pendulum-v1", "sum"),
                                                             (T, "Hopper-v5", "mean")],
                         ids=["one-chunk", "six-uneven-chunks", "three-action-dims"])
def test_trpo_step_matches_sb3_contrib(tmp_path, chunk_size, env_id, kl_reduction):
    """sb3-contrib's unchunked math is the oracle; in chunks of 100 (the last one 12 samples) the
    gradient, the Fisher products and the line search are sums over chunks and must agree as well.
    With more than one action dimension sb3-contrib averages the KL over them: kl_reduction="mean"
    (genpol's default sum steps sqrt(3) shorter on Hopper's 3 dims, and the parameters differ)."""
    env = gym.make(env_id)
    obs_dim, act_dim = env.observation_space.shape[0], env.action_space.shape[0]
    torch.manual_seed(0)
    head = GaussianHead(obs_dim, act_dim, hidden_sizes=(64, 64), log_std_init=-0.5)
    critic = ValueNetwork(obs_dim, (64, 64))
    model = TRPO("MlpPolicy", env, n_steps=T, batch_size=T, n_critic_updates=3, target_kl=0.01, cg_max_steps=15,
                 cg_damping=0.1, line_search_shrinking_factor=0.8, line_search_max_iter=10, learning_rate=1e-3,
                 device="cpu", seed=0, policy_kwargs={"log_std_init": -0.5})
    model.set_logger(configure(str(tmp_path), []))
    copy_weights_into_sb3(head, critic, model.policy)
    storage, obs, actions, record = trpo_batch(obs_dim, act_dim, head)
    buffer = model.rollout_buffer
    buffer.reset()
    buffer.observations[:] = obs.numpy()[:, None, :]
    buffer.actions[:] = actions.numpy()[:, None, :]
    buffer.log_probs[:] = record["log_prob"].numpy()[:, None]
    buffer.advantages[:] = storage.advantages.numpy()
    buffer.returns[:] = storage.returns.numpy()
    buffer.values[:] = storage.values.numpy()
    buffer.full = True
    torch.manual_seed(42)  # conjugate gradient starts from 1e-4 * randn in both
    model.train()
    logged = model.logger.name_to_value

    updater = TRPOUpdater(head, critic, target_kl=0.01, cg_iterations=15, cg_damping=0.1, line_search_shrink=0.8,
                          line_search_max_iter=10, critic_lr=1e-3, critic_epochs=3, critic_minibatch_size=T,
                          chunk_size=chunk_size, kl_reduction=kl_reduction)
    torch.manual_seed(42)
    stats = updater.update(storage, torch.Generator().manual_seed(0))

    assert logged["train/is_line_search_success"] == 1.0 and stats["line_search_success"] == 1.0
    assert stats["kl"] <= 0.01
    assert stats["kl"] == pytest.approx(logged["train/kl_divergence_loss"], rel=0.05)  # KL(old||new) vs KL(new||old)
    assert -stats["policy"] == pytest.approx(logged["train/policy_objective"], rel=1e-4)
    for ours, theirs in zip(genpol_params(head, critic), sb3_params(model.policy)):
        assert torch.allclose(ours, theirs, atol=1e-5), (ours - theirs).abs().max()
    assert not torch.allclose(head.log_std, torch.full_like(head.log_std, -0.5))


def test_kl_reduction_reaches_the_updater_and_needs_a_gaussian():
    """learner.kl_reduction=mean from the config to the TRPO updater (its KL scaled by 1 / A: Hopper's 3
    dims), and refused, naming the key, where dividing by act_dim is not sb3-contrib's mean (a diffusion
    head's KL is already one, in chunks or not)."""
    from genpol.algorithms.registry import make_updater
    from genpol.api import compose_config
    from genpol.configure import validate

    cfg = validate(compose_config(["run_dir=/tmp/x", "env=hopper", "policy=gaussian", "learner=trpo",
                                   "learner.kl_reduction=mean"]))
    head = GaussianHead(11, 3, hidden_sizes=(8,))
    assert make_updater(cfg.learner, head, ValueNetwork(11, (8,))).kl_scale == pytest.approx(1 / 3)
    with pytest.raises(ConfigError, match="learner.kl_reduction=mean.*got policy=diffusion"):
        validate(compose_config(["run_dir=/tmp/x", "env=hopper", "policy=diffusion", "policy.ft_denoising_steps=20",
                                 "learner=trpo", "learner.kl_reduction=mean"]))


def test_trpo_rejects_a_step_that_cannot_improve():
    torch.manual_seed(0)
    head = GaussianHead(3, 2, hidden_sizes=(16,))
    storage, obs, _, record = trpo_batch(3, 2, head, zero_advantages=True)
    before = [p.detach().clone() for p in head.parameters()]
    stats = TRPOUpdater(head, ValueNetwork(3, (16,)), critic_epochs=0).policy_step(obs, record,
                                                                                   storage.advantages[:, 0])
    assert stats["line_search_success"] == 0.0 and stats["line_search_steps"] == 10
    assert all(torch.equal(a, b) for a, b in zip(before, head.parameters()))


class EstimatedKLGaussian(GaussianHead):
    """A Gaussian head that hides its closed-form KL, to exercise TRPO's estimated-KL path."""

    has_exact_kl = False

    def kl(self, obs, record):
        raise AssertionError("TRPO must not call kl() on a head without an exact KL")


@pytest.mark.parametrize("head_class", [GaussianHead, EstimatedKLGaussian])
def test_trpo_step_stays_inside_the_trust_region(head_class):
    torch.manual_seed(0)
    head = head_class(4, 2, hidden_sizes=(32,))
    storage, obs, _, record = trpo_batch(4, 2, head)
    old = GaussianHead(4, 2, hidden_sizes=(32,))
    old.load_state_dict(head.state_dict())
    stats = TRPOUpdater(head, ValueNetwork(4, (16,)), target_kl=0.01, critic_epochs=0).policy_step(
        obs, record, storage.advantages[:, 0])
    assert stats["line_search_success"] == 1.0
    exact_kl = GaussianHead.kl(head, obs, record).mean().item()  # the true KL, whichever path was used
    assert 0 < exact_kl <= 0.0105 and stats["kl"] <= 0.01
    assert stats["policy"] < 0  # the surrogate improved from 0 (mean of normalized A times r = 1)
    # the step is written into each parameter's own storage: views of one flat vector (torch's
    # vector_to_parameters) rounded products apart from the tensors a resume loads into
    assert all(param.storage_offset() == 0 and param.untyped_storage().nbytes() == param.numel() * 4
               for param in head.parameters())


def test_aspo_keeps_its_spo_epsilon_under_a_head_clip_schedule():
    """A head's per-unit clip schedule (last unit = clip_range) used to replace spo_clip_range too. The SPO
    half now follows the same schedule scaled to spo_clip_range: its optimum for A < 0 sits at
    r = 1 - spo_eps_j with spo_eps = unit_clip * spo_clip_range / clip_range."""
    aspo = ASPOLoss(clip_range=0.1, spo_clip_range=0.3, normalize_advantage=False, vf_coef=0.0)
    unit_clip = torch.tensor([0.05, 0.1])  # a schedule rising to clip_range
    ratios = torch.linspace(0.5, 1.5, 1001)
    losses = aspo.policy_loss(ratios.log()[:, None].expand(1001, 2), torch.full((1001, 2), -1.0), unit_clip)
    optima = ratios[losses.argmin(dim=0)]
    assert optima.tolist() == pytest.approx([1 - 0.15, 1 - 0.3], abs=1e-3)
    # positive advantages keep PPO's clip at the schedule itself
    positive = aspo.policy_loss(torch.full((1, 2), 0.5), torch.ones(1, 2), unit_clip)
    assert positive[0].tolist() == pytest.approx([-1.05, -1.1])


def policyflow_batch(samples: int):
    torch.manual_seed(0)
    head = PolicyFlowHead(3, 2, hidden_sizes=(16, 16))
    obs = torch.randn(samples, 3)
    with torch.no_grad():
        _, record = head.sample(obs)
        head.begin_update()
    return head, obs, record, torch.randn(samples)


@pytest.mark.parametrize("chunk_size", [64, 32], ids=["one-chunk", "two-chunks"])
def test_trpo_evaluates_policyflow_at_the_same_random_times_throughout_a_step(chunk_size):
    """PolicyFlow's log_ratio draws its evaluation times at random. Within one TRPO step the gradient,
    every Fisher product and every line-search probe must use the same ones (each chunk its own), or
    each probe compares a different surrogate with the one the step was computed from.

    One chunk keeps its graph for the Fisher products, so there every probe is forced: with zero
    advantages and no regularizer the surrogate cannot improve, and all 10 probes are rejected."""
    head, obs, record, advantages = policyflow_batch(64)
    chunks = 64 // chunk_size
    if chunks == 1:
        head.brownian_coef, advantages = 0.0, torch.zeros(64)
    seen = []
    draw_times = head._velocity_change

    def recording(chunk_obs, chunk_record):
        t, x_t, v_new, v_old = draw_times(chunk_obs, chunk_record)
        seen.append(t.clone())
        return t, x_t, v_new, v_old

    head._velocity_change = recording
    updater = TRPOUpdater(head, ValueNetwork(3, (8,)), critic_epochs=0, chunk_size=chunk_size)
    rng_before = torch.get_rng_state()
    stats = updater.policy_step(obs, record, advantages)
    if chunks == 1:  # the first evaluation, 10 rejected probes and the one after restoring
        assert stats["line_search_steps"] == 10 and len(seen) == 12
    else:  # the gradient, each conjugate-gradient product and each probe, chunk by chunk
        assert len(seen) > 10 and len(seen) % chunks == 0
    for index, times in enumerate(seen):
        assert torch.equal(times, seen[index % chunks]), f"evaluation {index} drew other times"
    if chunks > 1:
        assert not torch.equal(seen[0], seen[1])  # each chunk has its own draws, not a copy of the first's
    # the replayed draws come from a fork: of the global RNG only conjugate gradient's start was drawn
    rng_after = torch.get_rng_state()
    torch.set_rng_state(rng_before)
    torch.randn(sum(p.numel() for p in head.parameters() if p.requires_grad))
    assert torch.equal(torch.get_rng_state(), rng_after)


def diffusion_batch(samples: int):
    torch.manual_seed(0)
    head = DiffusionHead(4, 2, denoising_steps=4, ft_denoising_steps=4, hidden_sizes=(16, 16, 16))
    obs = torch.randn(samples, 4)
    with torch.no_grad():
        actions, record = head.sample(obs)
    advantages = actions[:, 0] + 0.3 * torch.randn(samples)  # prefers a larger first action
    return head, obs, record, advantages


def test_chunked_trpo_step_equals_the_unchunked_one_for_dppo():
    """The DPPO head's step in chunks of 40 (96 samples: 40, 40, 16) equals the one-chunk step: same
    diagnostics and parameters to float tolerance. Not bitwise: the time MLP's Mish sees 384 rows x 32
    whole and 160 x 32 in a chunk, on either side of the size where genpol's Mish leaves torch's kernel
    for its own ops (equal to float rounding, not bitwise); conjugate gradient amplifies that to ~2e-4
    relative on single parameters. A dropped or doubled chunk would be off by tens of percent."""
    results = []
    for chunk_size in (96, 40):
        head, obs, record, advantages = diffusion_batch(96)
        torch.manual_seed(7)  # conjugate gradient's random start
        stats = TRPOUpdater(head, ValueNetwork(4, (8,)), critic_epochs=0, chunk_size=chunk_size).policy_step(
            obs, record, advantages)
        results.append((stats, [p.detach().clone() for p in head.parameters()]))
    (whole, whole_params), (chunked, chunked_params) = results
    assert whole["line_search_success"] == chunked["line_search_success"] == 1.0
    assert whole["line_search_steps"] == chunked["line_search_steps"]
    for key in ("policy", "kl", "approx_kl", "step_size", "gradient_norm"):
        assert chunked[key] == pytest.approx(whole[key], rel=1e-3, abs=1e-8), key
    for ours, theirs in zip(chunked_params, whole_params):
        torch.testing.assert_close(ours, theirs, rtol=1e-3, atol=1e-5)


def test_trpo_chunk_size_bounds_the_batch_of_every_graph():
    """Memory follows the largest batch an autograd graph is built on: with chunk_size 32 no evaluation
    that records a graph sees more than 32 samples, whatever the rollout size (the peak-RSS measurement
    for DPPO on Hopper sizes is in TRPOConfig.chunk_size's docstring)."""
    for samples in (64, 160):
        head, obs, record, advantages = diffusion_batch(samples)
        graph_batches = []
        chain_log_probs = head.chain_log_probs

        def recording(chunk_obs, chain):
            if torch.is_grad_enabled():
                graph_batches.append(chunk_obs.shape[0])
            return chain_log_probs(chunk_obs, chain)

        head.chain_log_probs = recording
        TRPOUpdater(head, ValueNetwork(4, (8,)), critic_epochs=0, chunk_size=32).policy_step(obs, record, advantages)
        assert graph_batches and max(graph_batches) == 32
        assert sum(graph_batches) % samples == 0  # every pass covers the whole rollout


@pytest.mark.parametrize("rollout_steps", [T, 1])
def test_an_undefined_explained_variance_is_not_logged(rollout_steps):
    """Returns all equal (a one-step task with a sparse reward) or a one-sample rollout: the explained variance
    is undefined. Logged as NaN it stopped the run as diverged (the runner checks every logged value): PPO's
    and TRPO's stats are finite, without that key."""
    torch.manual_seed(0)
    head = GaussianHead(4, 2, hidden_sizes=(16,))
    storage, *_ = trpo_batch(4, 2, head)
    if rollout_steps == 1:
        small = RolloutStorage(1, 1, 4)
        small.obs[:], small.advantages[:], small.values[:] = storage.obs[:1], storage.advantages[:1], storage.values[:1]
        small.records = {key: value[:1].clone() for key, value in storage.records.items()}
        storage = small
    storage.returns.fill_(0.0)
    updaters = (MinibatchUpdater(head, ValueNetwork(4, (16,)), PPOClipLoss(normalize_advantage=False), epochs=1,
                                 minibatch_size=64),
                TRPOUpdater(head, ValueNetwork(4, (16,)), target_kl=0.01, critic_epochs=1, normalize_advantage=False))
    for updater in updaters:
        stats = updater.update(storage, torch.Generator().manual_seed(0))
        assert "explained_variance" not in stats and all(np.isfinite(value) for value in stats.values()), stats
    storage.returns.normal_()  # defined again: logged
    if rollout_steps > 1:
        assert np.isfinite(updaters[0].update(storage, torch.Generator().manual_seed(0))["explained_variance"])


def test_rollout_advantage_normalization_equals_normalizing_the_whole_rollout_by_hand():
    """advantage_normalization=rollout (rsl_rl, the PolicyFlow port): the rollout's advantages are normalized
    once, (A - mean) / (std + 1e-8) over all of them, and the minibatches take them as they are. Two epochs of
    four minibatches end at the weights of an updater fed the hand-normalized rollout with no normalization;
    per-minibatch normalization (the default) ends elsewhere."""
    from genpol.algorithms.registry import make_updater
    from genpol.config.onpolicy import PPOConfig

    def trained(cfg, normalize_by_hand=False):
        torch.manual_seed(0)
        head, critic = GaussianHead(3, 2, hidden_sizes=(8,)), ValueNetwork(3, (8,))
        storage = trpo_batch(3, 2, head)[0]
        storage.advantages *= 1 + torch.arange(T, dtype=torch.float32).unsqueeze(-1) / T  # unequal scales
        if normalize_by_hand:
            raw = storage.advantages.double()
            storage.advantages = ((raw - raw.mean()) / (raw.std() + 1e-8)).float()
        make_updater(cfg, head, critic).update(storage, torch.Generator().manual_seed(3))
        return torch.cat([p.detach().reshape(-1) for p in [*head.parameters(), *critic.parameters()]])

    common = {"epochs": 2, "minibatch_size": T // 4, "lr": 1e-3}
    per_rollout = trained(PPOConfig(advantage_normalization="rollout", **common))
    by_hand = trained(PPOConfig(normalize_advantage=False, **common), normalize_by_hand=True)
    torch.testing.assert_close(per_rollout, by_hand, rtol=1e-5, atol=1e-6)
    assert not torch.allclose(per_rollout, trained(PPOConfig(**common)), rtol=1e-4, atol=1e-5)
    with pytest.raises(ConfigError, match="advantage_normalization"):
        PPOConfig(advantage_normalization="rollout", advantage_estimation="minibatch")
