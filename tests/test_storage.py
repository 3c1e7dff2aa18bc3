"""GAE against a hand-computed case, and the rollout storage's bookkeeping."""

import pytest
import torch

from genpol.storage import RolloutStorage, generalized_advantage_estimate

# Two envs, three steps, gamma 0.9, lambda 0.8 (so gamma * lambda = 0.72).
# env 0: a time limit truncates its episode at t = 1; the true final obs has value 5.0.
# env 1: its episode terminates at t = 0 (no bootstrap).
REWARDS = [[1.0, 1.0], [2.0, 1.0], [3.0, 1.0]]
VALUES = [[0.5, 0.1], [0.6, 0.2], [0.7, 0.3]]
LAST_VALUE = [0.8, 0.4]
# Worked by hand:
# env 0: d0 = 1 + .9*.6 - .5 = 1.04   d1 = 2 + .9*5 - .6 = 5.9   d2 = 3 + .9*.8 - .7 = 3.02
#        A2 = 3.02; A1 = 5.9 (episode ended, recursion stops); A0 = 1.04 + .72*5.9 = 5.288
# env 1: d0 = 1 - .1 = 0.9 (terminated)  d1 = 1 + .9*.3 - .2 = 1.07   d2 = 1 + .9*.4 - .3 = 1.06
#        A2 = 1.06; A1 = 1.07 + .72*1.06 = 1.8332; A0 = 0.9
EXPECTED_ADVANTAGES = [[5.288, 0.9], [5.9, 1.8332], [3.02, 1.06]]


def test_gae_matches_the_hand_computed_case_with_truncation_and_termination():
    rewards, values = torch.tensor(REWARDS), torch.tensor(VALUES)
    terminated = torch.tensor([[False, True], [False, False], [False, False]])
    truncated = torch.tensor([[False, False], [True, False], [False, False]])
    next_values = torch.tensor([[0.6, 123.0], [5.0, 0.3], [0.8, 0.4]])  # 123: masked by termination
    advantages, returns = generalized_advantage_estimate(
        rewards, values, next_values, terminated, terminated | truncated, gamma=0.9, gae_lambda=0.8)
    assert torch.allclose(advantages, torch.tensor(EXPECTED_ADVANTAGES), atol=1e-5)
    assert torch.allclose(returns, advantages + values)


def test_storage_bootstraps_truncation_from_the_final_observation_value():
    storage = RolloutStorage(3, 2, obs_dim=1)
    terminated = [[False, True], [False, False], [False, False]]
    truncated = [[False, False], [True, False], [False, False]]
    for t in range(3):
        storage.add(torch.zeros(2, 1), {"x": torch.full((2, 4), float(t))}, torch.tensor(VALUES[t]),
                    torch.tensor(REWARDS[t]), torch.tensor(terminated[t]), torch.tensor(truncated[t]),
                    truncation_value=torch.tensor([5.0, -7.0]) if any(truncated[t]) else None)
    storage.compute_advantages(torch.tensor(LAST_VALUE), gamma=0.9, gae_lambda=0.8)
    assert torch.allclose(storage.advantages, torch.tensor(EXPECTED_ADVANTAGES), atol=1e-5)
    assert storage.records["x"].shape == (3, 2, 4)
    with pytest.raises(IndexError, match="full"):
        storage.add(torch.zeros(2, 1), {"x": torch.zeros(2, 4)}, torch.zeros(2), torch.zeros(2),
                    torch.zeros(2, dtype=torch.bool), torch.zeros(2, dtype=torch.bool))


def test_without_truncation_bootstrap_a_time_limit_ends_the_return_as_a_termination():
    """``learner.bootstrap_truncation=false`` (CleanRL's and SPO's code): env 0's truncated step t = 1 gets
    d1 = 2 - .6 = 1.4 instead of 5.9, so A1 = 1.4 and A0 = 1.04 + .72 * 1.4 = 2.048; env 1 is unchanged."""
    storage = RolloutStorage(3, 2, obs_dim=1)
    terminated = [[False, True], [False, False], [False, False]]
    truncated = [[False, False], [True, False], [False, False]]
    for t in range(3):
        storage.add(torch.zeros(2, 1), {"x": torch.zeros(2, 1)}, torch.tensor(VALUES[t]), torch.tensor(REWARDS[t]),
                    torch.tensor(terminated[t]), torch.tensor(truncated[t]),
                    truncation_value=torch.tensor([5.0, -7.0]) if any(truncated[t]) else None)
    storage.compute_advantages(torch.tensor(LAST_VALUE), gamma=0.9, gae_lambda=0.8, bootstrap_truncation=False)
    expected = [[2.048, 0.9], [1.4, 1.8332], [3.02, 1.06]]
    assert torch.allclose(storage.advantages, torch.tensor(expected), atol=1e-5)


def test_bootstrap_truncation_false_needs_per_rollout_estimation():
    from genpol.config import ConfigError
    from genpol.config.onpolicy import PPOConfig, TRPOConfig

    TRPOConfig(bootstrap_truncation=False)  # TRPO estimates per rollout
    with pytest.raises(ConfigError, match="learner.bootstrap_truncation"):
        PPOConfig(bootstrap_truncation=False, advantage_estimation="minibatch", rollout_steps=60, minibatch_size=60)


def test_gae_lambda_one_is_the_discounted_return_minus_value():
    torch.manual_seed(0)
    rewards, values = torch.randn(6, 1), torch.randn(6, 1)
    no = torch.zeros(6, 1, dtype=torch.bool)
    next_values = torch.cat([values[1:], torch.zeros(1, 1)])
    advantages, _ = generalized_advantage_estimate(rewards, values, next_values, no, no, 0.9, 1.0)
    discounts = 0.9 ** torch.arange(6.0)
    for t in range(6):
        expected = (rewards[t:, 0] * discounts[: 6 - t]).sum() - values[t, 0]
        assert advantages[t, 0] == pytest.approx(float(expected), abs=1e-5)


def test_minibatches_cover_every_sample_once_per_epoch():
    storage = RolloutStorage(5, 3, obs_dim=2)
    for t in range(5):
        obs = torch.stack([torch.tensor([t, env], dtype=torch.float32) for env in range(3)])
        storage.add(obs, {"id": obs[:, 0] * 3 + obs[:, 1]}, torch.zeros(3), torch.zeros(3),
                    torch.zeros(3, dtype=torch.bool), torch.zeros(3, dtype=torch.bool))
    storage.compute_advantages(torch.zeros(3), 0.99, 0.95)
    batches = list(storage.minibatches(4, torch.Generator().manual_seed(0)))
    assert [b.obs.shape[0] for b in batches] == [4, 4, 4, 3]
    ids = torch.cat([b.record["id"] for b in batches]).long().sort().values
    assert torch.equal(ids, torch.arange(15))
    for batch in batches:  # record rows stay aligned with their observations
        assert torch.equal(batch.record["id"], batch.obs[:, 0] * 3 + batch.obs[:, 1])


def test_gae_over_a_vectorized_rollout_matches_stable_baselines3():
    """3 envs x 64 steps with terminations, time-limit truncations and a step flagged both (gymnasium can):
    genpol's advantages and returns against SB3's ``RolloutBuffer.compute_returns_and_advantage``, the oracle
    taking the truncated steps' bootstrap as SB3's on-policy loop does (reward += gamma V(final observation)
    where a time limit cut an episode that did not terminate). Exactly equal."""
    import gymnasium as gym
    import numpy as np
    from stable_baselines3.common.buffers import RolloutBuffer

    steps, envs, gamma, gae_lambda = 64, 3, 0.99, 0.95
    rng = np.random.default_rng(0)
    rewards, values, final_values = (rng.normal(size=(steps, envs)).astype(np.float32) for _ in range(3))
    terminated = rng.random((steps, envs)) < 0.05
    truncated = (rng.random((steps, envs)) < 0.05) & ~terminated
    terminated[10, 0] = truncated[10, 0] = True
    last_values = rng.normal(size=envs).astype(np.float32)
    done = terminated | truncated
    oracle = RolloutBuffer(steps, gym.spaces.Box(-1, 1, (1,)), gym.spaces.Box(-1, 1, (1,)), gamma=gamma,
                           gae_lambda=gae_lambda, n_envs=envs)
    bootstrapped = rewards + gamma * final_values * (truncated & ~terminated)
    for t in range(steps):
        oracle.add(np.zeros((envs, 1)), np.zeros((envs, 1)), bootstrapped[t], done[t - 1] if t else np.zeros(envs, bool),
                   torch.tensor(values[t]), torch.zeros(envs))
    oracle.compute_returns_and_advantage(torch.tensor(last_values), done[-1])
    storage = RolloutStorage(steps, envs, 1)
    for t in range(steps):
        storage.add(torch.zeros(envs, 1), {"x": torch.zeros(envs)}, torch.tensor(values[t]), torch.tensor(rewards[t]),
                    torch.tensor(terminated[t]), torch.tensor(truncated[t]), torch.tensor(final_values[t]))
    storage.compute_advantages(torch.tensor(last_values), gamma, gae_lambda)
    assert np.array_equal(storage.advantages.numpy(), oracle.advantages)
    assert np.array_equal(storage.returns.numpy(), oracle.returns)
