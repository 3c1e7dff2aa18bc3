"""SPO, ASPO, TRPO and the KL-adaptive learning rate against hand computations and sb3-contrib."""

import gymnasium as gym
import numpy as np
import pytest
import torch
from sb3_contrib import TRPO
from stable_baselines3.common.logger import configure

from genpol.heads import GaussianHead, RatioTerms
from genpol.nets import ValueNetwork
from genpol.storage import RolloutStorage
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
    assert out.diagnostics["clipfrac"].item() == pytest.approx(1.0)  # all three outside [0.9, 1.1]


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


def test_trpo_step_matches_sb3_contrib(tmp_path):
    env = gym.make("Pendulum-v1")
    torch.manual_seed(0)
    head = GaussianHead(3, 1, hidden_sizes=(64, 64), log_std_init=-0.5)
    critic = ValueNetwork(3, (64, 64))
    model = TRPO("MlpPolicy", env, n_steps=T, batch_size=T, n_critic_updates=3, target_kl=0.01, cg_max_steps=15,
                 cg_damping=0.1, line_search_shrinking_factor=0.8, line_search_max_iter=10, learning_rate=1e-3,
                 device="cpu", seed=0, policy_kwargs={"log_std_init": -0.5})
    model.set_logger(configure(str(tmp_path), []))
    copy_weights_into_sb3(head, critic, model.policy)
    storage, obs, actions, record = trpo_batch(3, 1, head)
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
                          line_search_max_iter=10, critic_lr=1e-3, critic_epochs=3, critic_minibatch_size=T)
    torch.manual_seed(42)
    stats = updater.update(storage, torch.Generator().manual_seed(0))

    assert logged["train/is_line_search_success"] == 1.0 and stats["line_search_success"] == 1.0
    assert stats["kl"] <= 0.01
    assert stats["kl"] == pytest.approx(logged["train/kl_divergence_loss"], rel=0.05)  # KL(old||new) vs KL(new||old)
    assert -stats["policy"] == pytest.approx(logged["train/policy_objective"], rel=1e-4)
    for ours, theirs in zip(genpol_params(head, critic), sb3_params(model.policy)):
        assert torch.allclose(ours, theirs, atol=1e-5), (ours - theirs).abs().max()
    assert not torch.allclose(head.log_std, torch.full_like(head.log_std, -0.5))


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
