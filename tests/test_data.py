"""Offline data: D4RL and Minari round trips on generated files, bad files, chunks, scores, BC."""

import json

import h5py
import numpy as np
import pytest
import torch

from genpol import envs
from genpol.data import (DatasetError, Normalization, OfflineDataset, d4rl_normalized_score, load_d4rl, load_dataset,
                         load_minari, write_d4rl, write_minari)
from genpol.data.collect import main as collect_main

from conftest import run_cli


def tiny_d4rl(path, dtype=np.float32, rewards_2d=False, lengths=(5, 7, 4), ends=("term", "timeout", "cut")):
    """Three episodes: one terminated, one timed out, one cut by the end of the file (no flag)."""
    rng = np.random.default_rng(0)
    obs, act, rew, term, timeout = [], [], [], [], []
    for length, end in zip(lengths, ends):
        obs.append(rng.standard_normal((length, 11)))
        act.append(rng.uniform(-1, 1, (length, 3)))
        rew.append(rng.standard_normal(length))
        term.append(np.arange(length) == length - 1 if end == "term" else np.zeros(length, bool))
        timeout.append(np.arange(length) == length - 1 if end == "timeout" else np.zeros(length, bool))
    rewards = np.concatenate(rew)
    write_d4rl(path, np.concatenate(obs), np.concatenate(act), rewards[:, None] if rewards_2d else rewards,
               np.concatenate(term), np.concatenate(timeout), infos={"qpos": np.zeros((16, 6))},
               metadata={"algorithm": "scripted"}, dtype=dtype)
    return np.concatenate(obs), np.concatenate(act), rewards


@pytest.mark.parametrize("dtype,rewards_2d", [(np.float32, False), (np.float64, True)], ids=["float32", "replay-float64"])
def test_d4rl_round_trip_and_episode_split(tmp_path, dtype, rewards_2d):
    path = tmp_path / "hopper_medium-v2.hdf5"
    obs, act, rewards = tiny_d4rl(path, dtype, rewards_2d)
    with h5py.File(path) as handle:  # the real format: flat root datasets plus nested groups
        assert handle["observations"].dtype == dtype and "infos/qpos" in handle and "metadata/algorithm" in handle
    data = load_d4rl(path)
    assert data.env_name == "hopper" and data.observations.dtype == np.float32
    np.testing.assert_allclose(data.observations, obs, rtol=1e-6)
    np.testing.assert_allclose(data.rewards, rewards, rtol=1e-6)
    assert data.episode_bounds() == [(0, 5), (5, 12), (12, 16)]  # the cut last episode still counts
    assert data.terminals.sum() == 1 and data.timeouts.sum() == 1


def test_minari_round_trip_and_reference_scores(tmp_path):
    import gymnasium as gym
    import minari

    rng = np.random.default_rng(1)
    episodes = [{"observations": rng.standard_normal((t + 1, 11)), "actions": rng.uniform(-1, 1, (t, 3)).astype(np.float32),
                 "rewards": rng.standard_normal(t), "terminations": np.arange(t) == t - 1 if term else np.zeros(t, bool),
                 "truncations": np.zeros(t, bool) if term else np.arange(t) == t - 1}
                for t, term in ((5, True), (7, False))]
    write_minari("genpol/hopper/tiny-v0", episodes, gym.spaces.Box(-np.inf, np.inf, (11,), np.float64),
                 gym.spaces.Box(-1, 1, (3,), np.float32), root=tmp_path, ref_min_score=-20.272305, ref_max_score=3234.3)
    data = load_minari("genpol/hopper/tiny-v0", root=tmp_path)
    assert data.episode_bounds() == [(0, 5), (5, 12)] and data.env_name == "hopper"
    np.testing.assert_allclose(data.observations[5:], episodes[1]["observations"][:-1], rtol=1e-6)
    assert data.terminals[4] and data.timeouts[11] and not data.terminals[11]
    with pytest.MonkeyPatch.context() as patch:
        patch.setenv("MINARI_DATASETS_PATH", str(tmp_path))
        minari_score = minari.get_normalized_score(minari.load_dataset("genpol/hopper/tiny-v0"), np.array([1617.0]))
    assert 100 * minari_score[0] == pytest.approx(d4rl_normalized_score("hopper", 1617.0), rel=1e-6)
    assert d4rl_normalized_score("hopper", 1617.0) == pytest.approx(50.3068, rel=1e-4)


def test_collect_writes_real_rollouts_in_both_formats(tmp_path, capsys):
    report = collect_main(["--policy", "random", "--env", "gym:Hopper-v5", "--steps", "300", "--num-envs", "2",
                           "--d4rl", str(tmp_path / "hopper_random-v5.hdf5"), "--minari", "genpol/hopper/random-v0",
                           "--minari-root", str(tmp_path / "minari")])
    d4rl = load_d4rl(tmp_path / "hopper_random-v5.hdf5")
    mini = load_minari("genpol/hopper/random-v0", root=tmp_path / "minari")
    n = len(mini.rewards)
    assert n == report["steps"] >= 300 and len(d4rl.rewards) >= n  # plus one cut episode in the D4RL file
    np.testing.assert_array_equal(d4rl.observations[:n], mini.observations)
    np.testing.assert_array_equal(d4rl.terminals[:n], mini.terminals)
    assert mini.terminals.sum() > 0  # random Hopper falls: real terminations from the simulator
    assert len(d4rl.episode_bounds()) == len(mini.episode_bounds()) + 1
    # the stored transitions are the simulator's: replaying an episode's actions reproduces them
    assert report["d4rl_normalized_score"] == pytest.approx(d4rl_normalized_score("hopper", report["return_mean"]))
    # both formats name their env: the Minari dataset named none, so another task's data of its sizes trained, scored
    # with this one's references (HalfCheetah's data for Walker2d, 17/6 both)
    assert mini.recorded_env() == ("gym:Hopper-v5", "its genpol_env")
    with pytest.raises(DatasetError, match=r"was recorded in gym:Hopper-v5 \(its genpol_env\), but the run's env is "
                                           r"gym:Walker2d-v5"):
        mini.check_dims(mini.obs_dim, mini.act_dim, "gym:Walker2d-v5")
    # the same Minari id again: refused before any rollout, not after (minari itself refuses at the write)
    with pytest.raises(SystemExit) as refused:
        collect_main(["--policy", "random", "--env", "gym:Hopper-v5", "--steps", "20000", "--minari",
                      "genpol/hopper/random-v0", "--minari-root", str(tmp_path / "minari")])
    assert refused.value.code == 2
    assert "the Minari dataset genpol/hopper/random-v0 already exists at" in capsys.readouterr().err
    # the same D4RL file again: refused before any rollout, the file untouched (runs may resume from it)
    before = (tmp_path / "hopper_random-v5.hdf5").read_bytes()
    with pytest.raises(SystemExit) as refused:
        collect_main(["--policy", "random", "--env", "gym:Hopper-v5", "--steps", "20000", "--seed", "1",
                      "--d4rl", str(tmp_path / "hopper_random-v5.hdf5")])
    assert refused.value.code == 2 and "hopper_random-v5.hdf5 already exists" in capsys.readouterr().err
    assert (tmp_path / "hopper_random-v5.hdf5").read_bytes() == before
    with pytest.raises(SystemExit) as refused:
        collect_main(["--policy", "random", "--env", "gym:Hopper-v5", "--steps", "0", "--d4rl", str(tmp_path / "y.hdf5")])
    assert refused.value.code == 2 and "--steps (0)" in capsys.readouterr().err
    (tmp_path / "afile.txt").write_text("mine")  # a file where a folder goes: a traceback after the collection
    for arguments, shown in ((["--d4rl", str(tmp_path / "afile.txt" / "x.hdf5")], "genpol: --d4rl: cannot write in "),
                             (["--d4rl", str(tmp_path / "w.hdf5"), "--seed", "-5"],
                              "--seed must be in [0, 2146435072) "),
                             # EnvPool's int32 assertion or dm_control's numpy error, after the policy loaded
                             (["--d4rl", str(tmp_path / "w.hdf5"), "--seed", str(2**32)], ", got 4294967296")):
        with pytest.raises(SystemExit) as refused:
            collect_main(["--policy", "random", "--env", "gym:Hopper-v5", "--steps", "20000", *arguments])
        assert refused.value.code == 2 and shown in capsys.readouterr().err
    with pytest.raises(SystemExit) as refused:  # no version: minari's int() TypeError after the collection
        collect_main(["--policy", "random", "--env", "gym:Hopper-v5", "--steps", "20000", "--minari",
                      "genpol/hopper/random", "--d4rl", str(tmp_path / "z.hdf5")])
    assert refused.value.code == 2 and "is not a Minari dataset id" in capsys.readouterr().err
    assert not (tmp_path / "z.hdf5").exists()
    with pytest.raises(DatasetError, match=r"^'genpol/hopper/random' is not a Minari dataset id"):
        load_minari("genpol/hopper/random", root=tmp_path / "minari")
    with pytest.raises(SystemExit) as refused:  # a policy that is not there: one line and exit 2, no traceback
        collect_main(["--policy", str(tmp_path / "no_run"), "--env", "gym:Hopper-v5", "--steps", "10",
                      "--d4rl", str(tmp_path / "x.hdf5")])
    assert refused.value.code == 2 and "CheckpointError:" in capsys.readouterr().err


def test_a_minari_dataset_without_episodes_is_named(tmp_path):
    """What a killed write leaves (minari writes the metadata first) and what an empty write makes."""
    import gymnasium as gym

    from genpol.data.minari_io import write_minari

    write_minari("genpol/t/empty-v0", [], gym.spaces.Box(-np.inf, np.inf, (3,), np.float64),
                 gym.spaces.Box(-1.0, 1.0, (2,), np.float32), root=tmp_path)
    with pytest.raises(DatasetError, match=r"^Minari dataset 'genpol/t/empty-v0' under .* holds no episodes"):
        load_minari("genpol/t/empty-v0", root=tmp_path)


def test_minari_episodes_of_other_shapes_are_named_or_read_flat(tmp_path):
    """Rewards written [T, 1] loaded as [N, 1] (RLPD's mixed batch then failed, an offline TD target broadcast to
    [B, B]); an episode with other observation or action sizes was numpy's concatenation error."""
    import gymnasium as gym

    from genpol.data.minari_io import write_minari

    def episode(steps, rewards_shape=None, obs_dim=3, act_dim=2):
        return {"observations": np.zeros((steps + 1, obs_dim)), "actions": np.zeros((steps, act_dim), np.float32),
                "rewards": np.ones(rewards_shape or steps), "terminations": np.zeros(steps, bool),
                "truncations": np.arange(steps) == steps - 1}

    spaces = gym.spaces.Box(-np.inf, np.inf, (3,), np.float64), gym.spaces.Box(-1.0, 1.0, (2,), np.float32)
    write_minari("genpol/t/column-v0", [episode(5, (5, 1)), episode(4, (4, 1))], *spaces, root=tmp_path)
    assert load_minari("genpol/t/column-v0", root=tmp_path).rewards.shape == (9,)
    write_minari("genpol/t/wider-v0", [episode(5), episode(4, obs_dim=4)], *spaces, root=tmp_path)
    with pytest.raises(DatasetError, match=r"^Minari dataset 'genpol/t/wider-v0', episode 1: observations of shape "
                                           r"\(5, 4\), expected \[T \+ 1, 3\] with T >= 1$"):
        load_minari("genpol/t/wider-v0", root=tmp_path)
    # so was one with other action sizes (naming neither the array nor the episode)
    write_minari("genpol/t/wider-actions-v0", [episode(5), episode(4), episode(3, act_dim=3)], *spaces, root=tmp_path)
    with pytest.raises(DatasetError, match=r"^Minari dataset 'genpol/t/wider-actions-v0', episode 2: 'actions' has "
                                           r"shape \(3, 3\), expected 2 values a row, as the episodes before it$"):
        load_minari("genpol/t/wider-actions-v0", root=tmp_path)
    # string arrays in an episode were numpy's float32 cast as a traceback
    for key, value in (("observations", np.array([[b"a"] * 3] * 5)), ("rewards", np.array([b"a"] * 4))):
        path = write_minari(f"genpol/t/str{key}-v0", [episode(5), episode(4)], *spaces, root=tmp_path)
        with h5py.File(path / "data" / "main_data.hdf5", "r+") as handle:
            del handle[f"episode_1/{key}"]
            handle[f"episode_1/{key}"] = value
        with pytest.raises(DatasetError, match=rf"'genpol/t/str{key}-v0', episode 1: '{key}' must be numeric, got "
                                               r"dtype \|S1"):
            load_minari(f"genpol/t/str{key}-v0", root=tmp_path)
    with pytest.raises(DatasetError, match=r"'rewards' must be \[N\], got shape \(2, 1\)"):
        OfflineDataset(np.zeros((2, 3), np.float32), np.zeros((2, 2), np.float32), np.zeros((2, 1), np.float32),
                       np.zeros(2, bool), np.zeros(2, bool), source="mine")


def test_a_failed_write_leaves_neither_the_file_nor_a_temporary_one(tmp_path):
    """write_d4rl (genpol.data.collect's writer) left ``.x.hdf5.tmp-<pid>`` behind when a write failed, as large
    as the data written so far; now the temporary file goes, and an earlier file at the path stays whole."""
    obs, act, rewards = tiny_d4rl(tmp_path / "data.hdf5")
    before = (tmp_path / "data.hdf5").read_bytes()
    with pytest.raises(ValueError):
        write_d4rl(tmp_path / "data.hdf5", obs, act, rewards, np.zeros(len(obs), bool), np.zeros(len(obs), bool),
                   infos={"qpos": np.array(["not a number"] * len(obs))})
    assert [path.name for path in tmp_path.iterdir()] == ["data.hdf5"]
    assert (tmp_path / "data.hdf5").read_bytes() == before


def test_bad_dataset_files_name_the_culprit(tmp_path):
    with pytest.raises(DatasetError, match=r"no D4RL dataset file at .*missing.hdf5"):
        load_d4rl(tmp_path / "missing.hdf5")
    (tmp_path / "garbage.hdf5").write_bytes(b"not hdf5 at all")
    with pytest.raises(DatasetError, match=r"garbage.hdf5 is not a readable HDF5 file"):
        load_d4rl(tmp_path / "garbage.hdf5")
    with h5py.File(tmp_path / "nokeys.hdf5", "w") as handle:
        handle["observations"] = np.zeros((3, 2))
        handle["rewards"] = np.zeros(3)
    with pytest.raises(DatasetError, match=r"lacks the D4RL key\(s\) \['actions', 'terminals'\]"):
        load_d4rl(tmp_path / "nokeys.hdf5")
    obs, act, rewards = tiny_d4rl(tmp_path / "nan.hdf5")
    with h5py.File(tmp_path / "nan.hdf5", "r+") as handle:
        data = handle["actions"][:]
        data[9, 1] = np.nan
        del handle["actions"]
        handle["actions"] = data
    with pytest.raises(DatasetError, match=r"'actions' holds NaN or inf values \(first at row 9\)"):
        load_d4rl(tmp_path / "nan.hdf5")
    tiny_d4rl(tmp_path / "next.hdf5")
    with h5py.File(tmp_path / "next.hdf5", "r+") as handle:
        handle["next_observations"] = np.zeros((len(handle["observations"]) - 1, 11), np.float32)
    with pytest.raises(DatasetError, match=r"next.hdf5: 'next_observations' has shape \(\d+, 11\), 'observations'"):
        load_d4rl(tmp_path / "next.hdf5")
    # a short 'terminals' in a file without 'timeouts' (its ends inferred from next_observations): a numpy
    # broadcasting error, from the inference that ran before the lengths were compared
    tiny_d4rl(tmp_path / "short.hdf5")
    with h5py.File(tmp_path / "short.hdf5", "r+") as handle:
        terminals, observations = handle["terminals"][:], handle["observations"][:]
        del handle["terminals"], handle["timeouts"]
        handle["terminals"] = terminals[:-1]
        handle["next_observations"] = np.roll(observations, -1, axis=0)
    with pytest.raises(DatasetError, match=r"short.hdf5: 'terminals' has 15 rows, "):
        load_d4rl(tmp_path / "short.hdf5")
    # entries of the wrong kind were numpy's TypeError / ValueError tracebacks
    for key, value, shown in [("rewards", np.float32(1.0), r"dtype float32 and shape \(\)"),
                              ("actions", np.array([[b"a"]] * 5), r"dtype \|S1 and shape \(5, 1\)")]:
        tiny_d4rl(tmp_path / f"{key}.hdf5")
        with h5py.File(tmp_path / f"{key}.hdf5", "r+") as handle:
            del handle[key]
            handle[key] = value
        with pytest.raises(DatasetError, match=rf"{key}.hdf5: '{key}' must be a numeric array with a row per "
                                               rf"transition, got {shown}"):
            load_d4rl(tmp_path / f"{key}.hdf5")
    # an empty 'rewards' and a string 'next_observations' (with and without 'timeouts') were numpy tracebacks
    tiny_d4rl(tmp_path / "norewards.hdf5")
    with h5py.File(tmp_path / "norewards.hdf5", "r+") as handle:
        del handle["rewards"]
        handle["rewards"] = np.zeros(0, np.float32)
    with pytest.raises(DatasetError, match=r"norewards.hdf5: 'rewards' has 0 rows, 'observations' has 16"):
        load_d4rl(tmp_path / "norewards.hdf5")
    for name, timeouts in (("strnext", True), ("strnext_no_timeouts", False)):
        tiny_d4rl(tmp_path / f"{name}.hdf5")
        with h5py.File(tmp_path / f"{name}.hdf5", "r+") as handle:
            handle["next_observations"] = np.array([[b"a"] * 11] * 16)
            if not timeouts:
                del handle["timeouts"]
        with pytest.raises(DatasetError, match=rf"{name}.hdf5: 'next_observations' must be a numeric array"):
            load_d4rl(tmp_path / f"{name}.hdf5")
    # metadata is read whole outside the memory check: an entry above 1 MiB is skipped, and so is every entry past
    # 8 MiB of them all (200 entries of 1 MiB, in a file of 1 MB, were read whole), named
    tiny_d4rl(tmp_path / "bomb.hdf5")
    with h5py.File(tmp_path / "bomb.hdf5", "r+") as handle:
        handle.create_dataset("metadata/blob", data=np.zeros(1 << 18, np.float64), compression="gzip")
    with pytest.warns(UserWarning, match=r"bomb.hdf5: skipped 1 metadata entries, e.g. metadata/blob \(2097152 "):
        assert "metadata/blob" not in load_d4rl(tmp_path / "bomb.hdf5").metadata
    tiny_d4rl(tmp_path / "many.hdf5")
    with h5py.File(tmp_path / "many.hdf5", "r+") as handle:
        for k in range(12):
            # 1 KiB under 1 MiB each: eight fit beside tiny_d4rl's own few bytes of metadata
            handle.create_dataset(f"metadata/part{k:02d}", data=np.zeros((1 << 17) - 128), compression="gzip")
    with pytest.warns(UserWarning, match=r"many.hdf5: skipped 4 metadata entries, e.g. metadata/part08 \(1047552 "):
        metadata = load_d4rl(tmp_path / "many.hdf5").metadata
    assert sorted(key for key in metadata if "part" in key) == [f"metadata/part{k:02d}" for k in range(8)]
    tiny_d4rl(tmp_path / "good.hdf5")
    with pytest.raises(DatasetError, match=r"observations/actions have 11/3 dims, but gym:HalfCheetah-v5 has 17/6"):
        load_d4rl(tmp_path / "good.hdf5").check_dims(17, 6, "gym:HalfCheetah-v5")
    with pytest.raises(DatasetError, match=r"no Minari dataset 'genpol/none/absent-v0' under"):
        load_dataset("genpol/none/absent-v0", minari_root=tmp_path)


def test_chunks_stay_inside_episodes_and_are_scaled(tmp_path):
    tiny_d4rl(tmp_path / "d.hdf5")
    data = load_d4rl(tmp_path / "d.hdf5")
    norm = data.normalization()
    obs, actions = data.chunks(4, norm)
    assert obs.shape == ((5 - 3) + (7 - 3) + (4 - 3), 11) and actions.shape == (7, 12)  # no window crosses an end
    assert obs.min() >= -1 and obs.max() <= 1 and actions.min() >= -1 and actions.max() <= 1
    second_episode = Normalization.scale(data.actions[5:9], norm.action_min, norm.action_max).reshape(-1)
    assert torch.allclose(actions[2], torch.as_tensor(second_episode, dtype=torch.float32))
    with pytest.raises(DatasetError, match="no episode has 8 steps"):
        data.chunks(8, norm)


def test_chunks_that_cannot_fit_are_refused_before_they_are_gathered(tmp_path, monkeypatch):
    """The pairs repeat each action horizon times (max_transitions x horizon floats): they were gathered with no
    check. 7 pairs of 4 actions: 7 x (44 + (12 + 8) x 4) + the scaled copies (16 x 44 + 16 x 12 bytes) = 1764."""
    from genpol import memory
    from genpol.errors import ConfigError

    tiny_d4rl(tmp_path / "d.hdf5")
    data = load_d4rl(tmp_path / "d.hdf5")
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1763)
    with pytest.raises(ConfigError, match=r"^dataset.max_transitions=16 needs 1.8 kB for the \(observation, 4 "
                                          r"actions\) pairs imitation trains on, but cpu has 1.8 kB available"):
        data.chunks(4, data.normalization())
    monkeypatch.setattr(memory, "available_bytes", lambda device: 1764)
    assert data.chunks(4, data.normalization())[1].shape == (7, 12)


def expert_dataset(path, episodes=64):
    """A scripted MultiGoal expert (go straight to the goal on the +x axis) rolled out in the env."""
    env = envs.make("genpol:MultiGoal", num_envs=episodes, seed=0, rescale_actions=False,
                    env_kwargs={"init_noise": 0.6})  # varied starts, so the expert's y-correction shows
    expert = lambda obs: torch.stack([torch.ones(len(obs)), -obs[:, 1].clamp(-1, 1)], dim=1)  # noqa: E731
    obs, parts = env.reset(), {k: [] for k in ("obs", "act", "rew", "term", "trunc")}
    active = torch.ones(episodes, dtype=torch.bool)
    for _ in range(30):
        action = expert(obs)
        next_obs, reward, terminated, truncated, _ = env.step(action)
        for key, value in zip(parts, (obs, action, reward, terminated, truncated)):
            parts[key].append(value[active])
        active &= ~(terminated | truncated)
        obs = next_obs
        if not active.any():
            break
    # interleaved per step; regroup per episode is not needed for BC pairs with horizon 1
    write_d4rl(path, *(torch.cat(parts[k]).numpy() for k in ("obs", "act", "rew")),
               torch.cat(parts["term"]).numpy() | True, np.zeros(sum(len(p) for p in parts["term"]), bool))
    return expert


@pytest.mark.parametrize("head_name", ["gaussian", "diffusion"])
def test_behaviour_cloning_reproduces_a_scripted_expert(tmp_path, head_name):
    from genpol.heads import DiffusionHead, GaussianHead
    from genpol.runners.bc import BCRunner

    expert = expert_dataset(tmp_path / "expert.hdf5")
    data = load_d4rl(tmp_path / "expert.hdf5")
    norm = data.normalization()
    obs, actions = data.chunks(1, norm)
    torch.manual_seed(0)
    head = (GaussianHead(2, 2, hidden_sizes=(64, 64), log_std_init=-1.0) if head_name == "gaussian" else
            DiffusionHead(2, 2, denoising_steps=10, ft_denoising_steps=10, hidden_sizes=(64, 64, 64)))
    runner = BCRunner(head, obs, actions, steps=1500, batch_size=128, lr=3e-3, min_lr=1e-4, ema_start=500,
                      ema_every=1, log_every=500)
    first = head.imitation_loss(obs, actions).item()
    runner.run()
    assert head.imitation_loss(obs, actions).item() < 0.5 * first  # the imitation loss falls
    test_obs = torch.tensor([[0.0, 0.0], [1.5, 0.4], [3.0, -0.5], [2.0, 0.0]])
    scaled_obs = torch.as_tensor(Normalization.scale(test_obs.numpy(), norm.obs_min, norm.obs_max), dtype=torch.float32)
    with torch.no_grad():
        predicted = head.act(scaled_obs, deterministic=True).numpy()
    low, high = norm.action_min, norm.action_max
    predicted = low + (predicted + 1) / 2 * (high - low + 1e-6)
    assert np.abs(predicted - expert(test_obs).numpy()).max() < 0.15


def test_a_dataset_over_max_transitions_is_refused_before_its_arrays_are_read(tmp_path, monkeypatch):
    """dataset.max_transitions bounds what genpol holds in memory: a file of 16 transitions loads under a cap
    of 16 and is refused under 15, by size alone (no array is read: reading raises here)."""
    tiny_d4rl(tmp_path / "hopper_medium-v2.hdf5")
    data = load_d4rl(tmp_path / "hopper_medium-v2.hdf5", max_transitions=16)
    assert len(data.rewards) == 16 and data.metadata["metadata/algorithm"] == b"scripted"
    with monkeypatch.context() as patch:
        def no_reads(*args, **kwargs):
            raise AssertionError("an array was read before the size check")

        patch.setattr(h5py.Dataset, "__getitem__", no_reads)
        with pytest.raises(DatasetError, match=r"hopper_medium-v2.hdf5 holds 16 transitions, more than "
                                               r"dataset.max_transitions=15"):
            load_dataset(str(tmp_path / "hopper_medium-v2.hdf5"), max_transitions=15)

    import gymnasium as gym

    episodes = [{"observations": np.zeros((t + 1, 11)), "actions": np.zeros((t, 3), np.float32), "rewards": np.zeros(t),
                 "terminations": np.arange(t) == t - 1, "truncations": np.zeros(t, bool)} for t in (5, 7)]
    write_minari("genpol/hopper/capped-v0", episodes, gym.spaces.Box(-np.inf, np.inf, (11,), np.float64),
                 gym.spaces.Box(-1, 1, (3,), np.float32), root=tmp_path)
    assert len(load_minari("genpol/hopper/capped-v0", root=tmp_path, max_transitions=12).rewards) == 12
    with pytest.raises(DatasetError, match=r"Minari dataset 'genpol/hopper/capped-v0' holds 12 transitions, more "
                                           r"than dataset.max_transitions=11"):
        load_dataset("genpol/hopper/capped-v0", minari_root=tmp_path, max_transitions=11)
    # metadata.json's total_steps is the writer's word: the rows read count too (a stale one read any size whole)
    path = write_minari("genpol/hopper/stale-v0", episodes * 4, gym.spaces.Box(-np.inf, np.inf, (11,), np.float64),
                        gym.spaces.Box(-1, 1, (3,), np.float32), root=tmp_path)
    metadata = json.loads((path / "data" / "metadata.json").read_text())
    (path / "data" / "metadata.json").write_text(json.dumps({**metadata, "total_steps": 10}))
    with pytest.raises(DatasetError, match=r"'genpol/hopper/stale-v0' holds more than dataset.max_transitions=20 "
                                           r"transitions \(24 in its first episodes\), though its metadata says 10"):
        load_minari("genpol/hopper/stale-v0", root=tmp_path, max_transitions=20)


def test_offline_to_online_end_to_end_through_the_cli(tmp_path):
    """Pretraining, then fine-tuning, through the command line; a resume onto data made again at the same
    path (another seed) is refused, naming dataset.path: the run's bounds and order belong to the old data."""
    def make_data(seed):  # made again: deleted first, as genpol.data.collect refuses an existing file
        (tmp_path / "hopper_random-v5.hdf5").unlink(missing_ok=True)
        collect_main(["--policy", "random", "--env", "gym:Hopper-v5", "--steps", "400", "--num-envs", "2",
                      "--seed", str(seed), "--d4rl", str(tmp_path / "hopper_random-v5.hdf5")])

    def train(total_steps, check=True):
        return run_cli("-m", "genpol.train", "env=hopper", "policy=diffusion", "pipeline=offline_to_online",
                       f"dataset.path={tmp_path / 'hopper_random-v5.hdf5'}", "policy.denoising_steps=4",
                       "policy.ft_denoising_steps=2", "policy.hidden_sizes=[32,32,32]", "pipeline.pretrain_steps=200",
                       "pipeline.pretrain_log_every=100", "pipeline.ema_start=50", f"total_steps={total_steps}",
                       "env.num_envs=2", "learner.rollout_steps=32", "learner.epochs=1", "pipeline.eval_episodes=2",
                       "pipeline.video=false", "logger.progress_bar=false", f"run_dir={tmp_path / 'run'}", check=check)

    make_data(0)
    train(512)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    pretrained = summary["pretrained"]
    assert pretrained["gradient_steps"] == 200 and np.isfinite(pretrained["normalized_score"])
    # two rollouts of 32 x 4 x 2 nominal env steps: episodes that end inside a chunk execute fewer
    assert np.isfinite(summary["eval_normalized_score"]) and summary["iterations"] == 2
    assert 256 < summary["env_steps"] <= 512
    assert (tmp_path / "run" / "pretrain" / "checkpoints").is_dir()
    assert list((tmp_path / "run" / "tb" / "pretrain").glob("events.*"))
    # the saved policy on a plain gymnasium Hopper: predict's chunks of 4 actions (the dataset's asymmetric
    # action range included), stepped in turn, give the run's own final evaluation, episode for episode
    import gymnasium as gym

    from genpol.api import load_policy
    from genpol.callbacks.evaluation import EVAL_SEED

    policy, returns = load_policy(tmp_path / "run"), []
    for episode in range(2):
        env = gym.make("Hopper-v5")
        obs, _ = env.reset(seed=EVAL_SEED + episode)
        total, done = 0.0, False
        while not done:
            chunk = policy.predict(obs)
            assert chunk.shape == (4, 3)
            for action in chunk:
                obs, reward, terminated, truncated, _ = env.step(action)
                total, done = total + reward, terminated or truncated
                if done:
                    break
        returns.append(total)
    assert np.mean(returns) == pytest.approx(summary["eval_return_mean"], rel=1e-6)
    make_data(1)
    refused = train(576, check=False)
    assert refused.returncode == 2
    assert "DatasetError: dataset.path: " in refused.stderr and "is not the data" in refused.stderr


def test_a_d4rl_file_without_timeouts_is_split_where_next_observations_break(tmp_path):
    """Two 3-step episodes, the first cut by a time limit, in a file without ``timeouts``: its
    ``next_observations`` say where (row 2's s' is not row 3's observation), so the episodes stay apart and row
    2 is bootstrapped from its own next observation. Without either key nothing can tell: a warning."""
    from genpol.storage.replay import offline_transitions

    observations = np.array([[0.0], [1.0], [2.0], [10.0], [11.0], [12.0]])
    next_observations = np.array([[1.0], [2.0], [3.0], [11.0], [12.0], [13.0]])
    for name, next_obs in (("with_next", next_observations), ("bare", None)):
        path = write_d4rl(tmp_path / f"{name}.hdf5", observations, np.zeros((6, 1)), np.arange(6.0),
                          np.zeros(6, bool), np.zeros(6, bool), next_observations=next_obs)
        with h5py.File(path, "r+") as handle:
            del handle["timeouts"]
    dataset = load_d4rl(tmp_path / "with_next.hdf5")
    assert dataset.episode_bounds() == [(0, 3), (3, 6)] and dataset.timeouts.tolist() == [0, 0, 1, 0, 0, 0]
    store = offline_transitions(dataset)
    batch = store.batch_at(torch.arange(len(store)))
    assert batch.next_obs[:, 0].tolist() == next_observations[:, 0].tolist() and not batch.dones.any()
    with pytest.warns(UserWarning, match=r"bare.hdf5 has neither 'timeouts' nor 'next_observations'"):
        assert load_d4rl(tmp_path / "bare.hdf5").episode_bounds() == [(0, 6)]


def test_the_dataset_score_counts_complete_task_episodes_only():
    """The offline phase's ``dataset_normalized_score`` scores the dataset's episodes with the task's reference
    returns: only episodes a flag ends count (not the file's unflagged last one), and a dataset of segments
    truncated at different lengths (goal-to-goal maze data) is not scored."""
    from genpol.data import OfflineDataset
    from genpol.pipelines.offline_to_online import _complete_episode_returns

    def dataset(terminals, timeouts):
        n = len(terminals)
        return OfflineDataset(np.zeros((n, 1), np.float32), np.zeros((n, 1), np.float32), np.ones(n, np.float32),
                              np.array(terminals, bool), np.array(timeouts, bool))

    # a fall after 2 steps, a time limit at 3, the same limit again, then 2 rows the file's end cut
    returns, task = _complete_episode_returns(dataset([0, 1, 0, 0, 0, 0, 0, 0, 0, 0], [0, 0, 0, 0, 1, 0, 0, 1, 0, 0]))
    assert returns.tolist() == [2.0, 3.0, 3.0] and task
    returns, task = _complete_episode_returns(dataset([0, 0, 0, 0, 0], [0, 1, 0, 0, 1]))  # segments of 2 and 3
    assert returns.tolist() == [2.0, 3.0] and not task


def test_a_minari_write_that_fails_midway_leaves_nothing_under_its_id(tmp_path):
    """minari writes a dataset in place: one that failed (or was killed) midway left a dataset without episodes
    under the id, which then counted as taken. genpol writes under a staging root and renames it into place."""
    import gymnasium as gym

    from genpol.data.minari_io import minari_dataset_path, write_minari

    episode = {"observations": np.zeros((6, 3)), "actions": np.zeros((5, 2)), "rewards": np.array(["a"] * 5),
               "terminations": np.zeros(5, bool), "truncations": np.arange(5) == 4}  # rewards h5py cannot store
    spaces = (gym.spaces.Box(-1, 1, (3,)), gym.spaces.Box(-1, 1, (2,)))
    with pytest.raises(TypeError, match="No conversion path"):
        write_minari("genpol/tiny/broken-v0", [episode], *spaces, root=tmp_path)
    assert not minari_dataset_path("genpol/tiny/broken-v0", tmp_path).exists()
    assert [path.name for path in tmp_path.iterdir() if path.name.startswith(".staging")] == []
    written = write_minari("genpol/tiny/broken-v0", [{**episode, "rewards": np.zeros(5)}], *spaces, root=tmp_path)
    assert written == minari_dataset_path("genpol/tiny/broken-v0", tmp_path)
    assert load_minari("genpol/tiny/broken-v0", root=tmp_path).observations.shape == (5, 3)


def test_data_of_another_task_with_the_same_sizes_is_refused(tmp_path):
    """HalfCheetah and Walker2d share their sizes (17/6): Walker2d data trained a HalfCheetah run and scored it
    against HalfCheetah's references. The data say where they were recorded (``metadata/env``, which
    genpol.data.collect writes; else a D4RL file's name); a version or backend apart is the same task."""
    rng = np.random.default_rng(0)
    arrays = dict(observations=rng.normal(size=(20, 17)), actions=rng.uniform(-1, 1, (20, 6)), rewards=np.ones(20),
                  terminals=np.zeros(20, bool), timeouts=np.arange(20) == 19)
    recorded = write_d4rl(tmp_path / "cheetah_data.hdf5", **arrays, metadata={"env": "gym:Walker2d-v5"})
    with pytest.raises(DatasetError, match=r"cheetah_data.hdf5 was recorded in gym:Walker2d-v5 \(its metadata/env\), "
                                           r"but the run's env is gym:HalfCheetah-v5"):
        load_d4rl(recorded).check_dims(17, 6, "gym:HalfCheetah-v5")
    for same_task in ("gym:Walker2d-v4", "envpool:Walker2d-v5"):
        load_d4rl(recorded).check_dims(17, 6, same_task)
    named = write_d4rl(tmp_path / "walker2d_medium-v2.hdf5", **arrays)  # no metadata: D4RL's own files
    with pytest.raises(DatasetError, match=r"walker2d_medium-v2.hdf5 is named for walker2d, but the run's env is "
                                           r"gym:HalfCheetah-v5"):
        load_d4rl(named).check_dims(17, 6, "gym:HalfCheetah-v5")
    load_d4rl(write_d4rl(tmp_path / "data.hdf5", **arrays)).check_dims(17, 6, "gym:HalfCheetah-v5")  # says nothing
    load_d4rl(recorded).check_dims(17, 6, "custom:my_pkg.sim:make_env")  # a custom simulator's id names no task


def test_the_pretrained_policys_evaluation_is_logged_once_when_its_phase_is_redone(tmp_path):
    """A run stopped after pretraining and before its first online checkpoint redoes the pretraining's end: its
    evaluation was logged to TensorBoard a second time at the same step."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.pipelines.offline_to_online import _write_summary

    cfg = validate(compose_config(["env=gym", "env.id=Pendulum-v1", "pipeline=offline_to_online", "run_dir=/tmp/x",
                                   "dataset.path=/tmp/x.hdf5"]))
    n = 4
    dataset = OfflineDataset(np.zeros((n, 3), np.float32), np.zeros((n, 1), np.float32), np.ones(n, np.float32),
                             np.zeros(n, bool), np.arange(n) == n - 1, source="mine")
    (tmp_path / "pretrain").mkdir()
    for _ in range(2):
        _write_summary(cfg, tmp_path, {"eval_return_mean": -100.0}, dataset, None, 400)
    events = EventAccumulator(str(tmp_path / "tb" / "pretrain")).Reload()
    assert [event.step for event in events.Scalars("pretrain/eval_return")] == [400]


@pytest.mark.parametrize("learner", [
    ["policy=gaussian", "learner=ppo", "learner.rollout_steps=16", "learner.minibatch_size=16"],
    ["policy=consistency", "learner=consistency_ac", "learner.batch_size=16", "learner.learning_starts=0",
     "learner.critic_hidden_sizes=[16,16]"],
], ids=["behaviour_cloning", "own_loss"])
def test_pretrain_steps_0_skips_pretraining_and_trains_online(tmp_path, learner):
    """``pipeline.pretrain_steps=0`` (documented: skip pretraining) passed validation, then the run failed
    reading the pretraining's metrics file, which no step had written; the checkpoint left behind made the same
    command fail again. It now evaluates the untrained head as the pretrained one and trains online."""
    from genpol.api import train

    data = tmp_path / "pendulum_random.hdf5"
    collect_main(["--policy", "random", "--env", "gym:Pendulum-v1", "--steps", "200", "--num-envs", "1",
                  "--d4rl", str(data)])
    summary = train("gym:Pendulum-v1", total_steps=32, run_dir=tmp_path / "run", overrides=[
        *learner, "pipeline=offline_to_online", f"dataset.path={data}", "pipeline.pretrain_steps=0",
        "policy.hidden_sizes=[16,16]", "pipeline.eval_episodes=1", "pipeline.video=false",
        "logger.progress_bar=false"])
    pretrained = summary["pretrained"]
    assert pretrained["gradient_steps"] == 0 and pretrained["final_loss"] is None
    assert np.isfinite(pretrained["eval_return_mean"]) and summary["env_steps"] >= 32


def test_d4rl_references_are_for_d4rls_tasks_only():
    """dm_control's hopper-hop (another robot, reward and scale) was scored with D4RL's Gym Hopper references,
    in the summary and in the metadata genpol.data.collect writes; gym and EnvPool ids and dataset names keep
    them, and whole words only match (antmaze is not ant)."""
    from genpol.data import D4RL_REFERENCE, reference_returns

    for env_id in ("dmc:hopper-hop", "dmc:hopper-stand", "playground:HopperHop", "genpol:multigoal",
                   "gym:AntMaze_UMaze-v5"):
        assert reference_returns({}, env_id) is None, env_id
    for env_id in ("gym:Hopper-v5", "envpool:Hopper-v4", "hopper-medium-v2"):
        assert reference_returns({}, env_id) == D4RL_REFERENCE["hopper"], env_id


def test_a_dataset_path_under_home_is_read(tmp_path, monkeypatch):
    """``dataset.path=~/data.hdf5`` was refused as missing though the file was there (dataset.minari_root and
    run_dir expand ``~``)."""
    monkeypatch.setenv("HOME", str(tmp_path))
    tiny_d4rl(tmp_path / "hopper_random.hdf5")
    assert load_dataset("~/hopper_random.hdf5").source == str(tmp_path / "hopper_random.hdf5")


def test_an_interrupted_collection_writes_the_episodes_complete_by_then(tmp_path):
    """Ctrl-C during a collection of hours discarded every episode. The rollout now stops after the current env
    step, writes the complete episodes (and the D4RL file env 0's cut one, as D4RL's files end) and exits 4."""
    import signal

    import gymnasium as gym
    from gymnasium.envs.classic_control.pendulum import PendulumEnv

    class InterruptedPendulum(PendulumEnv):
        steps = 0

        def step(self, action):
            InterruptedPendulum.steps += 1
            if InterruptedPendulum.steps == 450:  # as a user's Ctrl-C, in the middle of the third episode
                signal.raise_signal(signal.SIGINT)
            return super().step(action)

    gym.register("TestOnlyInterruptedPendulum-v0", entry_point=InterruptedPendulum, max_episode_steps=200)
    path, handler = tmp_path / "data" / "pendulum.hdf5", signal.getsignal(signal.SIGINT)
    with pytest.raises(SystemExit) as stop:
        collect_main(["--policy", "random", "--env", "gym:TestOnlyInterruptedPendulum-v0", "--steps", "100000",
                      "--num-envs", "1", "--d4rl", str(path)])
    assert stop.value.code == 4
    dataset = load_d4rl(path)
    assert len(dataset.rewards) == 450 and not dataset.terminals.any()
    assert list(np.flatnonzero(dataset.timeouts)) == [199, 399]  # the third episode, cut: no flag
    assert signal.getsignal(signal.SIGINT) is handler  # the caller's handler back


def test_a_dm_control_hopper_run_with_data_gets_no_d4rl_score(tmp_path):
    """The run's loaders passed env.id without its backend (``hopper-hop``), so dm_control's Hopper still got
    D4RL's Gym Hopper references through them (a normalized score of 0.62 in a review's run)."""
    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.runners.offpolicy import load_offline_transitions

    data = tmp_path / "hopper_hop.hdf5"
    collect_main(["--policy", "random", "--env", "dmc:hopper-hop", "--steps", "1", "--num-envs", "1",
                  "--d4rl", str(data)])
    cfg = validate(compose_config(["env=dmc", "env.id=hopper-hop", "learner=sac", "policy=tanh_gaussian",
                                   f"dataset.path={data}", "learner.offline_ratio=0.5", f"run_dir={tmp_path / 'r'}"]))
    with envs.make("dmc:hopper-hop", num_envs=1, seed=0) as env:
        _, _, normalized = load_offline_transitions(cfg, env)
    assert normalized is None
