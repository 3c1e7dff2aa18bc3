"""Replay storage: true final observations, ring wrap-around, offline transitions (hand-built and from
a real simulator's D4RL file), RLPD's symmetric sampling, reproducible checkpointed sampling, errors."""

import h5py
import numpy as np
import pytest
import torch

from genpol.data import DatasetError, OfflineDataset, load_dataset, write_d4rl
from genpol.storage.replay import (TANH_SAFE_BOUND, MixedSampler, ReplayBuffer, offline_row_positions,
                                   offline_transitions)


def filled_buffer(seed=0, steps=6, num_envs=4, capacity=64):
    buffer = ReplayBuffer(capacity, obs_dim=2, act_dim=2, seed=seed)
    rng = np.random.default_rng(0)
    for _ in range(steps):
        buffer.add(torch.as_tensor(rng.standard_normal((num_envs, 2)), dtype=torch.float32),
                   torch.as_tensor(rng.uniform(-1, 1, (num_envs, 2)), dtype=torch.float32),
                   torch.zeros(num_envs), torch.as_tensor(rng.standard_normal((num_envs, 2)), dtype=torch.float32),
                   torch.as_tensor(rng.random(num_envs) < 0.2))
    return buffer


def hand_dataset():
    """Rows 0-2: an episode that terminates; rows 3-5: one cut by a time limit; rows 6-7: one cut by
    the end of the file. Observation of row i is [i, 10 i]; actions reach +-2."""
    rows = np.arange(8, dtype=np.float32)
    return OfflineDataset(
        observations=np.stack([rows, 10 * rows], axis=1), actions=np.stack([rows / 2 - 2, -2 * np.ones(8)], 1),
        rewards=rows + 0.5, terminals=np.isin(np.arange(8), [2]), timeouts=np.isin(np.arange(8), [5]),
        source="hand")


def offline_store(rewards=None, seed=1, dataset=None):
    dataset = hand_dataset() if dataset is None else dataset
    if rewards is not None:
        dataset.rewards[:] = rewards
    return offline_transitions(dataset, action_transform=lambda a: a / 2, seed=seed)


def assert_batches_equal(first, second):
    for name, value in vars(first).items():
        assert torch.equal(value, getattr(second, name)), name


def test_final_observation_is_stored_and_truncation_is_not_done():
    buffer = ReplayBuffer(8, obs_dim=2, act_dim=1)
    obs = torch.tensor([[0.0, 0.0], [1.0, 1.0], [2.0, 2.0]])
    final_x, final_y, reset_obs = torch.tensor([7.0, 7.0]), torch.tensor([9.0, 9.0]), torch.tensor([-5.0, -5.0])
    # env 0 continues, env 1 is truncated by a time limit, env 2 terminates; envs 1 and 2 auto-reset
    returned_obs = torch.stack([torch.tensor([0.5, 0.5]), reset_obs, reset_obs])
    final_obs = torch.stack([returned_obs[0], final_x, final_y])  # what info["final_obs"] holds
    terminated = torch.tensor([False, False, True])  # env 1's truncation is not stored: it stays bootstrappable
    buffer.add(obs, torch.zeros(3, 1), torch.ones(3), final_obs, terminated)
    buffer.add(returned_obs, torch.zeros(3, 1), torch.ones(3), returned_obs + 1, torch.zeros(3, dtype=torch.bool))
    assert len(buffer) == 6
    batch = buffer.sample(256)
    truncated_rows = (batch.obs == obs[1]).all(1)
    terminated_rows = (batch.obs == obs[2]).all(1)
    assert truncated_rows.any() and terminated_rows.any()
    assert (batch.next_obs[truncated_rows] == final_x).all() and (batch.dones[truncated_rows] == 0).all()
    assert (batch.next_obs[terminated_rows] == final_y).all() and (batch.dones[terminated_rows] == 1).all()
    assert batch.dones.dtype == torch.float32 and batch.dones.sum() == terminated_rows.sum()


def test_ring_buffer_overwrites_the_oldest_rows():
    buffer = ReplayBuffer(5, obs_dim=1, act_dim=1)
    for step in range(3):  # step s, env e carries the value 10 s + e in every field
        value = torch.tensor([10.0 * step, 10.0 * step + 1])
        buffer.add(value[:, None], -value[:, None], value, value[:, None] + 0.5, value == 11)
    # rows 0-1 <- step 0, rows 2-3 <- step 1, rows 4 and 0 <- step 2: step 0's env 0 is overwritten
    expected = torch.tensor([21.0, 1.0, 10.0, 11.0, 20.0])
    assert len(buffer) == 5 and buffer.position == 1
    assert torch.equal(buffer.obs[:, 0], expected) and torch.equal(buffer.actions[:, 0], -expected)
    assert torch.equal(buffer.rewards, expected) and torch.equal(buffer.next_obs[:, 0], expected + 0.5)
    assert torch.equal(buffer.terminated, expected == 11)
    # one add larger than the ring keeps only its newest rows, still in ring order
    value = torch.arange(100.0, 107.0)
    buffer.add(value[:, None], value[:, None], value, value[:, None], torch.zeros(7, dtype=torch.bool))
    assert buffer.position == (1 + 7) % 5
    # value k would land in row (1 + k) % 5: rows 1-4, 0 get 100-104, then 105, 106 overwrite rows 1, 2
    assert torch.equal(buffer.obs[:, 0], torch.tensor([104.0, 105.0, 106.0, 102.0, 103.0]))


def test_offline_transitions_follow_episodes_transform_and_clip():
    dataset = hand_dataset()
    store = offline_transitions(dataset, obs_transform=lambda o: o + 100, action_transform=lambda a: a / 2)
    everything = store.batch_at(torch.arange(len(store)))
    # terminal row 2 is kept with its own obs as s'; timeout row 5 and end-of-file row 7 are dropped
    assert len(store) == 6 and store.rows.tolist() == [0, 1, 2, 3, 4, 6]
    expected_next = torch.tensor([1.0, 2.0, 2.0, 4.0, 5.0, 7.0])
    assert torch.equal(everything.obs[:, 0], torch.tensor([0.0, 1, 2, 3, 4, 6]) + 100)
    assert torch.equal(everything.next_obs, torch.stack([expected_next + 100, 10 * expected_next + 100], 1))
    assert everything.dones.tolist() == [0, 0, 1, 0, 0, 0]
    assert torch.equal(everything.rewards, torch.tensor([0.5, 1.5, 2.5, 3.5, 4.5, 6.5]))
    # a / 2 maps actions to [-1, 0.75] x {-1}; the -1 ends are clipped into tanh's open interval
    assert everything.actions[0, 0] == -TANH_SAFE_BOUND and (everything.actions[:, 1] == -TANH_SAFE_BOUND).all()
    assert torch.allclose(everything.actions[1:, 0], torch.tensor([1, 2, 3, 4, 6]) / 4 - 1)
    assert store.observations.shape == (8, 2)  # one copy of the observations, s' indexes into it
    with pytest.warns(UserWarning, match="actions reach 2"):  # the transform was forgotten
        offline_transitions(dataset)


def test_mixed_batches_hold_the_offline_ratio_in_every_minibatch():
    online = ReplayBuffer(32, obs_dim=2, act_dim=2, seed=0)
    online.add(torch.ones(16, 2), torch.zeros(16, 2), torch.zeros(16), torch.ones(16, 2), torch.zeros(16, dtype=bool))
    offline = offline_store(rewards=1.0)  # offline rows carry reward 1, online rows 0
    batch = MixedSampler(online, offline, 0.5).sample(512)
    assert batch.rewards.sum() == 256 and (batch.rewards[0::2] == 1).all() and (batch.rewards[1::2] == 0).all()
    assert [float(half.rewards.sum()) for half in batch.chunk(2)] == [128.0, 128.0]
    quarter = MixedSampler(online, offline, 0.25).sample(512)
    assert quarter.rewards.sum() == 128
    assert [float(part.rewards.sum()) for part in quarter.chunk(2)] == [64.0, 64.0]
    assert [float(part.rewards.sum()) for part in quarter.chunk(4)] == [32.0] * 4
    assert torch.equal(offline_row_positions(8, 0.25), torch.tensor([0, 1, 0, 0, 0, 1, 0, 0], dtype=torch.bool))
    assert MixedSampler(online, None, 0.0).sample(64).rewards.sum() == 0
    assert MixedSampler(None, offline, 1.0).sample(64).rewards.sum() == 64
    with pytest.raises(ValueError, match="offline_ratio 0.5 needs an offline store"):
        MixedSampler(online, None, 0.5)


def test_sampling_is_reproducible_and_resumes_bit_identically(tmp_path):
    first, second = filled_buffer(seed=3), filled_buffer(seed=3)
    for _ in range(3):
        assert_batches_equal(first.sample(32), second.sample(32))
    assert not torch.equal(first.sample(32).obs, filled_buffer(seed=4).sample(32).obs)
    sampler = MixedSampler(filled_buffer(seed=5, capacity=16), offline_store(), 0.5)  # 24 adds: wrapped
    for _ in range(2):
        sampler.sample(64)
    torch.save(sampler.state_dict(), tmp_path / "replay.pt")
    state = torch.load(tmp_path / "replay.pt", weights_only=True)
    assert state["online"]["obs"].shape == (16, 2) and state["online"]["position"] == 24 % 16
    restored = MixedSampler(ReplayBuffer(16, 2, 2, seed=99), offline_store(seed=77), 0.5)
    restored.load_state_dict(state)
    for _ in range(3):
        assert_batches_equal(sampler.sample(64), restored.sample(64))
    # only the filled rows are saved: a large, mostly empty buffer costs what its data cost
    small = filled_buffer(capacity=100_000)
    torch.save(small.state_dict(), tmp_path / "small.pt")
    assert small.nbytes() == 24 * (2 * 4 * 2 + 2 * 4 + 4 + 1) + small.generator.get_state().numel()
    assert (tmp_path / "small.pt").stat().st_size < small.nbytes() + 8_000  # plus pickle framing
    other_file = hand_dataset()
    other_file.observations[3, 1] += 1e-3  # same size, other data
    with pytest.raises(ValueError, match="checkpoint was made with offline data"):
        offline_store(dataset=other_file).load_state_dict(state["offline"])


def test_bad_shapes_and_mismatched_states_are_named():
    buffer = ReplayBuffer(8, obs_dim=3, act_dim=2)
    obs, actions, rewards, done = torch.zeros(4, 3), torch.zeros(4, 2), torch.zeros(4), torch.zeros(4, dtype=bool)
    with pytest.raises(RuntimeError, match="buffer is empty"):
        buffer.sample(4)
    with pytest.raises(ValueError, match=r"'actions' has shape \(4, 3\), expected \(4, 2\)"):
        buffer.add(obs, torch.zeros(4, 3), rewards, obs, done)
    with pytest.raises(ValueError, match=r"'rewards' has shape \(4, 1\), expected \(4,\)"):
        buffer.add(obs, actions, torch.zeros(4, 1), obs, done)
    with pytest.raises(ValueError, match=r"'next_obs' has shape \(4, 5\), expected \(4, 3\)"):
        buffer.add(obs, actions, rewards, torch.zeros(4, 5), done)
    with pytest.raises(ValueError, match=r"'terminated' has shape \(3,\), expected \(4,\)"):
        buffer.add(obs, actions, rewards, obs, done[:3])
    buffer.add(obs, actions, rewards, obs, done)
    with pytest.raises(ValueError, match=r"saved \(capacity, obs_dim, act_dim\) = \(8, 3, 2\), this buffer has "
                                         r"\(8, 4, 2\)"):
        ReplayBuffer(8, obs_dim=4, act_dim=2).load_state_dict(buffer.state_dict())
    with pytest.raises(ValueError, match=r"online \(obs_dim, act_dim, device\) = \(3, 2, 'cpu'\), offline = \(2, 2"):
        MixedSampler(buffer, offline_store(), 0.5)


def test_offline_transitions_from_a_d4rl_file_of_real_hopper_rollouts(tmp_path):
    import gymnasium as gym

    env = gym.make("Hopper-v5", max_episode_steps=50)
    obs, _ = env.reset(seed=0)
    env.action_space.seed(0)
    columns = {key: [] for key in ("observations", "actions", "rewards", "terminals", "timeouts", "next")}
    for _ in range(300):
        action = env.action_space.sample()
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(columns, (obs, action, reward, terminated, truncated, next_obs)):
            columns[key].append(value)
        obs = env.reset()[0] if terminated or truncated else next_obs
    env.close()
    data = {key: np.array(value) for key, value in columns.items()}
    terminals, timeouts = data["terminals"], data["timeouts"]
    assert terminals.sum() > 0 and timeouts.sum() > 0 and not (terminals[-1] or timeouts[-1])
    path = write_d4rl(tmp_path / "hopper_random-v5.hdf5", data["observations"], data["actions"], data["rewards"],
                      terminals, timeouts, next_observations=data["next"])
    with h5py.File(path) as handle:
        assert {"observations", "actions", "rewards", "terminals", "timeouts", "next_observations"} <= set(handle)
    dataset = load_dataset(str(path))
    truncated_ends = np.flatnonzero((timeouts | (np.arange(300) == 299)) & ~terminals)
    np.testing.assert_array_equal(dataset.end_rows, truncated_ends)
    # drop (D4RL's qlearning_dataset): every row has a transition except timeout rows and the last row (its
    # episode was cut by the file); a row both terminal and timed out (seed 0: row 125, a fall at the 50th
    # step) is a terminal, kept
    dropped = offline_transitions(dataset, truncated_rows="drop")
    assert len(dropped) == 300 - len(truncated_ends)
    # keep (the default): those rows too, bootstrapped from the next observation the file holds for them
    kept = offline_transitions(dataset)
    assert len(kept) == 300 and kept.fingerprint()["dataset_rows"] == 300 + len(truncated_ends)
    for store in (dropped, kept):
        everything = store.batch_at(torch.arange(len(store)))
        rows = store.rows.numpy()
        inside = ~terminals[rows]
        np.testing.assert_array_equal(everything.next_obs[inside].numpy(), data["next"][rows[inside]].astype(np.float32))
        np.testing.assert_array_equal(everything.obs.numpy(), data["observations"][rows].astype(np.float32))
        assert everything.dones.sum() == terminals.sum() and (everything.dones.numpy() == terminals[rows]).all()
    # learner.bootstrap_truncation=false stores an online truncation as done: the kept rows are done too
    as_terminal = offline_transitions(dataset, truncation_is_terminal=True)
    dones = as_terminal.batch_at(torch.arange(len(as_terminal))).dones.numpy()
    np.testing.assert_array_equal(dones, (terminals | np.isin(np.arange(300), truncated_ends))[as_terminal.rows.numpy()])
    shifted = offline_transitions(dataset, obs_transform=lambda obs: obs + 100)  # s' of the ends transformed too
    at_ends = np.isin(shifted.rows.numpy(), truncated_ends)
    np.testing.assert_allclose(shifted.batch_at(torch.arange(len(shifted))).next_obs[at_ends].numpy(),
                               (data["next"][truncated_ends] + 100).astype(np.float32))
    # a file without next_observations (as written before, or by other tools) keeps what drop keeps, with
    # the same fingerprint: runs saved before truncated_rows existed resume on it
    bare = write_d4rl(tmp_path / "bare" / "hopper_random-v5.hdf5", data["observations"], data["actions"],
                      data["rewards"], terminals, timeouts)
    assert load_dataset(str(bare)).end_rows is None
    assert offline_transitions(load_dataset(str(bare))).fingerprint() == dropped.fingerprint()
    with pytest.raises(ValueError, match="truncated_rows must be keep or drop, got 'all'"):
        offline_transitions(dataset, truncated_rows="all")


def test_end_rows_must_name_truncated_episode_ends():
    """``OfflineDataset.end_rows`` holds next observations for truncated ends only: a row inside an episode or
    a terminal one would give a transition two different s'."""
    rows = 6
    timeouts, terminals = np.zeros(rows, bool), np.zeros(rows, bool)
    timeouts[2], terminals[4] = True, True
    base = dict(observations=np.zeros((rows, 3), np.float32), actions=np.zeros((rows, 2), np.float32),
                rewards=np.zeros(rows, np.float32), terminals=terminals, timeouts=timeouts, source="made.hdf5")
    OfflineDataset(**base, end_rows=np.array([2, 5]), end_next_observations=np.ones((2, 3), np.float32))
    for bad_rows in ([1], [4], [5, 2]):
        with pytest.raises(DatasetError, match="made.hdf5: end_rows must be increasing rows that end a truncated"):
            OfflineDataset(**base, end_rows=np.array(bad_rows),
                           end_next_observations=np.ones((len(bad_rows), 3), np.float32))
    with pytest.raises(DatasetError, match=r"made.hdf5: end_next_observations has shape \(1, 2\), expected \(1, 3\)"):
        OfflineDataset(**base, end_rows=np.array([2]), end_next_observations=np.ones((1, 2), np.float32))
    with pytest.raises(DatasetError, match="the next observation of row 5 holds NaN"):
        OfflineDataset(**base, end_rows=np.array([2, 5]),
                       end_next_observations=np.array([[0, 0, 0], [0, np.nan, 0]], np.float32))
