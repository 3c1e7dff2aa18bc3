"""Per-minibatch advantage estimation (``learner.advantage_estimation=minibatch``, Brax's PPO as FPO's and
GoRL's code): Brax's GAE by hand, the sub-sequence layout, the loss the updater builds from them, and a
short training run through the API."""

import pytest
import torch

from genpol.config import ConfigError
from genpol.config.onpolicy import PPOConfig
from genpol.heads import GaussianHead
from genpol.storage import RolloutStorage
from genpol.storage.rollout import Batch
from genpol.storage.sequences import SequenceBatch, sequence_gae, sequence_minibatches
from genpol.updaters.losses import PPOClipLoss
from genpol.updaters.minibatch import MinibatchUpdater, SequenceSettings

REWARDS = [1.0, 2.0, 3.0]
VALUES = [0.5, 1.0, 2.0]
BOOTSTRAP = 4.0


def test_sequence_gae_by_hand():
    """gamma = lambda = 0.5, three columns: no episode end; terminal at t = 1; truncation at t = 1.

    Column 0: deltas 1, 2, 3; vs - v = 1 + .25 (2 + .25 * 3) = 1.6875, 2.75, 3 -> vs 2.1875, 3.75, 5;
    A = r + .5 vs' - v = 1 + 1.875 - .5, 2 + 2.5 - 1, 3 + 2 - 2 = 2.375, 3.5, 3.
    Column 1 (terminal at t = 1): deltas 1, 1, 3; vs - v = 1.25, 1, 3 -> vs 1.75, 2, 5; A = 1.5, 1, 3.
    Column 2 (truncated at t = 1): deltas 1, 0 (masked), 3; vs - v = 1, 0, 3 -> vs 1.5, 1, 5;
    A = 1 + .5 - .5, 0 (masked), 3 = 1, 0, 3.
    """
    rewards = torch.tensor(REWARDS).unsqueeze(1).repeat(1, 3)
    values = torch.tensor(VALUES).unsqueeze(1).repeat(1, 3)
    terminated = torch.zeros(3, 3, dtype=torch.bool)
    truncated = torch.zeros(3, 3, dtype=torch.bool)
    terminated[1, 1] = True
    truncated[1, 2] = True
    targets, advantages = sequence_gae(rewards, values, torch.full((3,), BOOTSTRAP), terminated, truncated, 0.5, 0.5)
    torch.testing.assert_close(targets, torch.tensor([[2.1875, 1.75, 1.5], [3.75, 2.0, 1.0], [5.0, 5.0, 5.0]]))
    torch.testing.assert_close(advantages, torch.tensor([[2.375, 1.5, 1.0], [3.5, 1.0, 0.0], [3.0, 3.0, 3.0]]))
    # both flags at t = 1 (gymnasium's TimeLimit on the step the episode terminated): column 1's numbers, the
    # terminal reward learned from, not masked as a truncation's
    truncated[1, 1] = True
    both = sequence_gae(rewards, values, torch.full((3,), BOOTSTRAP), terminated, truncated, 0.5, 0.5)
    torch.testing.assert_close(both[0][:, 1], targets[:, 1])
    torch.testing.assert_close(both[1][:, 1], advantages[:, 1])


def test_sequence_minibatches_cut_each_env_into_whole_subsequences_with_their_bootstrap():
    """T = 4, N = 2, L = 2: obs[t, n] = 10 t + n; after the rollout 100 + n. Sub-sequence (n, c) holds
    steps 2c, 2c + 1 of env n and bootstraps from obs[2c + 2, n], or 100 + n for the last."""
    steps, envs, length = 4, 2, 2
    obs = (10 * torch.arange(steps).unsqueeze(1) + torch.arange(envs).unsqueeze(0)).float().unsqueeze(-1)
    flags = torch.zeros(steps, envs, dtype=torch.bool)
    last_obs = torch.tensor([[100.0], [101.0]])
    record = {"action": obs.clone()}
    batches = list(sequence_minibatches(obs, record, obs.squeeze(-1), flags, flags, obs.squeeze(-1), last_obs,
                                        length, 3, torch.Generator().manual_seed(0)))
    assert [batch.obs.shape for batch in batches] == [(2, 3, 1), (2, 1, 1)]
    seen = set()
    for batch in batches:
        for column in range(batch.obs.shape[1]):
            first = int(batch.obs[0, column, 0])
            t, n = divmod(first, 10)
            assert t % length == 0
            assert batch.obs[:, column, 0].tolist() == [first, first + 10]
            assert batch.record["action"][:, column, 0].tolist() == [first, first + 10]
            assert batch.rewards[:, column].tolist() == [first, first + 10]
            expected_bootstrap = 100 + n if t + length == steps else first + 10 * length
            assert batch.bootstrap_obs[column, 0] == expected_bootstrap
            seen.add((t, n))
    assert seen == {(0, 0), (2, 0), (0, 1), (2, 1)}
    with pytest.raises(ValueError, match="sub-sequences of 3"):
        next(sequence_minibatches(obs, record, obs.squeeze(-1), flags, flags, obs.squeeze(-1), last_obs, 3, 1))


@pytest.mark.parametrize("clip_range_vf", [None, 0.2])
def test_sequence_loss_feeds_the_recomputed_advantages_and_masks_truncated_value_errors(clip_range_vf):
    """The updater's loss on a [3, 1] sub-sequence equals PPO-clip's on sequence_gae's advantages and
    value targets from the critic as it is, with the truncated step's value error zero; also under
    clip_range_vf with a critic 1.0 away from the old values (the clipped branch logged (1 - 0.2)^2 there)."""
    torch.manual_seed(0)
    head = GaussianHead(2, 1, hidden_sizes=[8])
    critic = torch.nn.Sequential(torch.nn.Linear(2, 1), torch.nn.Flatten(0))
    loss = PPOClipLoss(clip_range=0.2, vf_coef=0.25, normalize_advantage=False, clip_range_vf=clip_range_vf)
    updater = MinibatchUpdater(head, critic, loss, minibatch_size=3,
                               sequences=SequenceSettings(length=3, gamma=0.5, gae_lambda=0.5, reward_scale=10.0))
    obs = torch.randn(3, 1, 2)
    with torch.no_grad():
        _, record = head.sample(obs.reshape(3, 2))
    record = {key: value.reshape(3, 1, *value.shape[1:]) for key, value in record.items()}
    rewards = torch.tensor([[0.1], [0.2], [0.3]])
    terminated = torch.zeros(3, 1, dtype=torch.bool)
    truncated = torch.tensor([[False], [True], [False]])
    bootstrap_obs = torch.randn(1, 2)
    with torch.no_grad():
        values = critic(obs.reshape(3, 2)).reshape(3, 1)
        targets, advantages = sequence_gae(10 * rewards, values, critic(bootstrap_obs), terminated, truncated, 0.5, 0.5)
    old_values = values - 1.0
    total, named = updater.sequence_loss(obs, record, rewards, terminated, truncated, old_values, bootstrap_obs)

    value_error = (targets - values).square()
    if clip_range_vf is not None:  # by hand: the clipped prediction is old + 0.2 at every step
        value_error = torch.maximum(value_error, (targets - (old_values + 0.2)).square())
    value_error = value_error * (~truncated)
    torch.testing.assert_close(named["value"], value_error.mean())  # the unweighted value term
    flat_record = {key: value.reshape(3, *value.shape[2:]) for key, value in record.items()}
    expected = loss(head.log_ratio(obs.reshape(3, 2), flat_record), advantages.reshape(-1),
                    critic(obs.reshape(3, 2)), torch.where(truncated, values, targets).reshape(-1),
                    torch.where(truncated, values, old_values).reshape(-1))
    torch.testing.assert_close(total, expected.total)
    assert advantages[1, 0] == 0  # the truncated step carries no advantage


def test_config_checks_name_the_keys():
    with pytest.raises(ConfigError, match="learner.advantage_estimation"):
        PPOConfig(advantage_estimation="brax")
    with pytest.raises(ConfigError, match="learner.rollout_steps"):
        PPOConfig(advantage_estimation="minibatch", rollout_steps=64, sequence_length=30, minibatch_size=60)
    with pytest.raises(ConfigError, match="learner.minibatch_size"):
        PPOConfig(advantage_estimation="minibatch", rollout_steps=60, sequence_length=30, minibatch_size=64)
    with pytest.raises(ConfigError, match="learner.reward_scale"):
        PPOConfig(reward_scale=0.0)


def test_reward_scale_scales_rollout_gae_linearly_with_zero_values():
    """With V = 0 everywhere GAE is linear in the rewards: scale 10 gives 10 x the advantages."""
    storage = RolloutStorage(4, 2, 3)
    for step in range(4):
        storage.add(torch.zeros(2, 3), {"a": torch.zeros(2, 1)}, torch.zeros(2), torch.tensor([1.0, -0.5]) * step,
                    torch.tensor([False, step == 2]), torch.zeros(2, dtype=torch.bool))
    storage.compute_advantages(torch.zeros(2), 0.9, 0.8)
    plain = storage.advantages.clone()
    storage.compute_advantages(torch.zeros(2), 0.9, 0.8, reward_scale=10.0, last_obs=torch.ones(2, 3))
    torch.testing.assert_close(storage.advantages, 10 * plain)
    torch.testing.assert_close(storage.last_obs, torch.ones(2, 3))


def test_minibatch_estimation_trains_through_the_api(tmp_path):
    from genpol.api import train

    summary = train(env="pendulum", learner="ppo", total_steps=512, seed=0, run_dir=tmp_path / "run",
                    overrides=["env.num_envs=4", "learner.rollout_steps=64", "learner.minibatch_size=64",
                               "learner.epochs=2", "learner.advantage_estimation=minibatch",
                               "learner.sequence_length=16", "learner.reward_scale=10", "env.normalize_reward=false",
                               "pipeline.video=false", "logger.progress_bar=false", "pipeline.eval_episodes=1"])
    assert summary["env_steps"] == 512
    progress = (tmp_path / "run" / "progress.jsonl").read_text().splitlines()
    assert len(progress) == 2 and "nan" not in progress[-1].lower()


def test_bootstrap_truncation_false_trains_through_the_api(tmp_path):
    """Pendulum's time limit (200 steps) truncates every episode: the flag reaches the rollout's GAE."""
    from genpol.api import train

    summary = train(env="pendulum", learner="ppo", total_steps=512, seed=0, run_dir=tmp_path / "run",
                    overrides=["env.num_envs=4", "learner.rollout_steps=64", "learner.minibatch_size=64",
                               "learner.epochs=1", "learner.bootstrap_truncation=false", "pipeline.video=false",
                               "logger.progress_bar=false", "pipeline.eval_episodes=1"])
    assert summary["env_steps"] == 512


@pytest.mark.parametrize("rollout_steps, minibatch_size, sequence_length, full, short", [
    (6, 8, None, 8, 2),  # 18 samples (3 envs): minibatches of 8, 8 and a short 2
    (4, 8, 2, 4, 2),  # 12 samples in sub-sequences of 2: 6 sequences, minibatches of 4 and a short 2
    (4, 32, None, 12, None),  # the rollout (12) is smaller than a minibatch: its one size is the full one
    (4, 32, 2, 6, None),
])
def test_the_compiled_step_sees_one_minibatch_size(rollout_steps, minibatch_size, sequence_length, full, short):
    """learner.compile=true traces its step for one size (dynamic=False): every full minibatch goes to it, a
    rollout's short last one steps eagerly (a second size would compile a second graph), on both the sample
    and the sub-sequence path; a rollout smaller than minibatch_size is itself the full size (it was never
    compiled before). The compiled slot holds a spy that records each size and runs the eager step."""
    torch.manual_seed(0)
    envs = 3
    head, critic = GaussianHead(5, 2, hidden_sizes=[8]), torch.nn.Sequential(torch.nn.Linear(5, 1), torch.nn.Flatten(0))
    storage = RolloutStorage(rollout_steps, envs, 5)
    for _ in range(rollout_steps):
        obs = torch.randn(envs, 5)
        with torch.no_grad():
            _, record = head.sample(obs)
        storage.add(obs, record, torch.randn(envs), torch.randn(envs), torch.zeros(envs, dtype=torch.bool),
                    torch.zeros(envs, dtype=torch.bool))
    storage.compute_advantages(torch.zeros(envs), 0.99, 0.95)
    sequences = None if sequence_length is None else SequenceSettings(length=sequence_length, gamma=0.99, gae_lambda=0.95)
    updater = MinibatchUpdater(head, critic, PPOClipLoss(), epochs=1, minibatch_size=minibatch_size, sequences=sequences)
    compiled_sizes, eager_sizes = [], []
    eager_step = updater.eager_step

    def size(batch):  # samples, or sub-sequences (rewards [L, B])
        return batch.rewards.shape[1] if isinstance(batch, SequenceBatch) else len(batch.obs)

    def spy(*args):  # the compiled step's arguments: _sequence_arguments, or a Batch's fields in order
        batch = SequenceBatch(*args) if sequences is not None else Batch(*args)
        compiled_sizes.append(size(batch))
        return eager_step(batch)[0]  # the compiled step returns the diagnostics alone (it never stops on a KL)

    def eager(batch):
        eager_sizes.append(size(batch))
        return eager_step(batch)

    updater.compiled_step, updater.eager_step = spy, eager
    stats = updater.update(storage, torch.Generator().manual_seed(0))
    assert set(compiled_sizes) == {full}
    assert eager_sizes == ([] if short is None else [short])
    assert stats["gradient_steps"] == len(compiled_sizes) + len(eager_sizes)
