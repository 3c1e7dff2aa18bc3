"""The learning-parity harness's own logic (``bench/run_reference.py``, ``bench/learning_parity.py``,
``bench/claims.py``'s verdicts): the
gymnasium 0.29 vector contract the authors' scripts are run under, the episode log, the metric and the
verdict's bootstrap interval, on hand cases. The harness's runs themselves are benchmarks, not CI."""

import itertools
import sys
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

REPO = Path(__file__).resolve().parent.parent
if str(REPO / "bench") not in sys.path:  # the harness imports bench/common as a script would
    sys.path.insert(0, str(REPO / "bench"))

import claims  # noqa: E402
import learning_parity  # noqa: E402
import run_reference  # noqa: E402


def test_gym029_vector_env_resets_in_the_same_step_and_reports_as_029(tmp_path):
    """Two Pendulum envs cut at 3 and 5 steps: a finished env resets inside the step that ended it, the
    step reports its last observation and info (returns as 1-element arrays) under final_observation /
    final_info, None for the other env, and the log records each episode at the step count that ended it."""
    log = run_reference.EpisodeLog(tmp_path / "episodes.jsonl")
    vector_env = run_reference.make_gym029_vector_env(gym, log)

    def make(limit):
        return lambda: gym.wrappers.RecordEpisodeStatistics(gym.make("Pendulum-v1", max_episode_steps=limit))

    envs = vector_env([make(3), make(5)])
    obs, _ = envs.reset(seed=4)
    assert obs.shape == (2, 3) and envs.single_action_space.shape == (1,)
    reference = gym.make("Pendulum-v1")
    np.testing.assert_allclose(obs[1], reference.reset(seed=5)[0])  # sub-env i seeded with seed + i
    ended = {}
    for step in range(1, 6):
        obs, rewards, terminated, truncated, infos = envs.step(np.zeros((2, 1), dtype=np.float32))
        assert rewards.shape == (2,) and not terminated.any()
        if truncated.any():
            assert list(infos["_final_info"]) == list(truncated)
            for index in np.flatnonzero(truncated):
                assert infos["final_info"][index]["episode"]["r"].shape == (1,)
                assert infos["final_observation"][index].shape == (3,)
                assert not np.allclose(infos["final_observation"][index], obs[index])  # obs is the reset one
                ended[index] = step
            assert all(infos["final_info"][i] is None for i in np.flatnonzero(~truncated))
        else:
            assert infos == {}
    assert ended == {0: 3, 1: 5}
    log.file.close()
    lines = (tmp_path / "episodes.jsonl").read_text().splitlines()
    assert [line.split(",")[0] for line in lines] == ['{"step": 6', '{"step": 10']  # 2 envs x 3, 2 envs x 5


def test_gym029_vector_env_takes_a_seed_per_sub_env(tmp_path):
    """0.29's reset also takes one seed per sub-env (MEow's toy evaluation passes ``seed=range(n)``)."""
    vector_env = run_reference.make_gym029_vector_env(gym, run_reference.EpisodeLog(tmp_path / "episodes.jsonl"))
    envs = vector_env([lambda: gym.make("Pendulum-v1") for _ in range(2)])
    obs, _ = envs.reset(seed=range(7, 9))
    for index, seed in enumerate((7, 8)):
        np.testing.assert_allclose(obs[index], gym.make("Pendulum-v1").reset(seed=seed)[0])
    obs_numpy_seed, _ = envs.reset(seed=np.int64(7))  # a numpy integer is one seed, as an int
    np.testing.assert_allclose(obs_numpy_seed, obs)
    with pytest.raises(ValueError, match="3 seeds for 2 envs"):
        envs.reset(seed=[1, 2, 3])


def test_transform_observation_takes_029s_two_arguments(monkeypatch):
    for module, name in ((gym.vector, "SyncVectorEnv"), (gym.vector, "AsyncVectorEnv"),
                         (gym.wrappers, "TransformObservation")):
        monkeypatch.setattr(module, name, getattr(module, name))  # restored after the test: the shims are global
    run_reference.install_shims(run_reference.EpisodeLog(Path("/dev/null")))
    assert gym.vector.AsyncVectorEnv is gym.vector.SyncVectorEnv
    env = gym.wrappers.TransformObservation(gym.make("Pendulum-v1"), lambda o: np.clip(o, -0.5, 0.5))
    obs, _ = env.reset(seed=0)
    assert np.abs(obs).max() <= 0.5


def test_metric_averages_rollout_means_over_the_last_tenth():
    """20 rollouts of 100 steps: the last 2 count. Episodes ending at steps 1850 and 1890 (rollout 18)
    average to 15, one at 2000 (rollout 19) is 40: the metric is (15 + 40) / 2."""
    episodes = [(50, 1000.0), (1850, 10.0), (1890, 20.0), (2000, 40.0)]
    means = learning_parity.episode_means(episodes, 100)
    assert means == {0: 1000.0, 18: 15.0, 19: 40.0}
    assert learning_parity.last_rollouts_mean(means, 2000, 100) == 27.5
    with pytest.raises(RuntimeError, match="no episode ended"):
        learning_parity.last_rollouts_mean({0: 1.0}, 2000, 100)


def test_median_difference_interval_by_hand():
    """Against constant zeros the interval is that of median([1, 2, 3]) over its 27 resamples: median 1 in
    7 of them (two or three 1s), 3 in 7, so the 2.5 % and 97.5 % points are 1 and 3, and 0 is outside."""
    assert learning_parity.median_difference_ci([1.0, 2.0, 3.0], [0.0, 0.0, 0.0]) == (1.0, 3.0)
    assert learning_parity.median_difference_ci([-1.0, 0.0, 1.0], [0.0, 0.0, 0.0]) == (-1.0, 1.0)
    # counted, not listed: the same type-1 quantiles as numpy's over the full table of every pair of resamples
    # (4^4 x 5^5 here), ties included; and 6 seeds a side (46656^2 pairs, 16 GiB as a table) in memory
    ours, theirs = np.array([2.0, 2.0, 5.0, 1.0]), np.array([0.0, 3.0, 3.0, 1.5, 0.0])

    def every_median(values):
        n = len(values)
        return np.median(values[np.array(list(itertools.product(range(n), repeat=n)))], axis=1)

    table = (every_median(ours)[:, None] - every_median(theirs)[None, :]).ravel()
    expected = tuple(float(q) for q in np.quantile(table, [0.025, 0.975], method="inverted_cdf"))
    assert learning_parity.median_difference_ci(ours, theirs) == expected
    assert learning_parity.median_difference_ci(range(6), range(6)) == (-2.5, 2.5)


def test_the_rlpd_reference_loop_samples_whole_transitions():
    """``bench/run_reference_rlpd.py`` draws one index array for every key, as their replay buffer does:
    with an index per key (the first version), a batch paired observations with other transitions'
    rewards and next observations, and their learner's critic loss grew to 504 within 7k steps of training."""
    import numpy as np
    import run_reference_rlpd

    buffer = {"observations": np.arange(50.0)[:, None].repeat(3, 1), "rewards": np.arange(50.0),
              "masks": np.arange(50.0), "next_observations": np.arange(50.0)[:, None] + 1}
    batch = run_reference_rlpd.sample(buffer, 40, 256, np.random.default_rng(0))
    assert batch["rewards"].max() < 40  # only the filled rows
    for key in ("observations", "masks", "next_observations"):
        assert np.array_equal(batch[key].reshape(256, -1)[:, 0] - (key == "next_observations"), batch["rewards"])
    merged = run_reference_rlpd.combine(batch, run_reference_rlpd.sample(buffer, 50, 256, np.random.default_rng(1)))
    assert np.array_equal(merged["rewards"][0::2], batch["rewards"]) and len(merged["rewards"]) == 512


def test_the_expo_reference_loop_stores_episodes_at_their_end_with_time_limits_as_terminations():
    """``bench/run_reference_expo.py`` fills the replay as their ``train_finetuning.py`` does: a transition
    is sampled only once its episode has ended, the mask is 0 wherever an episode ended (a time limit
    too: their ``mask = 1 - done``), and the batch sizes round as their script's two ``int()``."""
    import run_reference_expo

    replay = run_reference_expo.EpisodeReplay(capacity=10, obs_dim=2, act_dim=1)
    for t, done in enumerate([False, False, True, False]):  # an episode of 3 steps, then one running
        replay.add(np.full(2, t), np.full(1, 0.5 + t), float(t), np.full(2, t + 1), done)
        assert replay.size == (3 if t >= 2 else 0)
    np.testing.assert_array_equal(replay.data["masks"][:3], [1.0, 1.0, 0.0])
    np.testing.assert_array_equal(replay.data["rewards"][:3], [0.0, 1.0, 2.0])
    np.testing.assert_array_equal(replay.data["actions"][:3, 0], [0.5, 1.5, 2.5])  # stored unclipped, as given
    np.testing.assert_array_equal(replay.data["next_observations"][:3, 0], [1.0, 2.0, 3.0])
    assert len(replay.trajectory) == 1
    assert run_reference_expo.batch_sizes(128, 1, 0.5) == (64, 64)
    assert run_reference_expo.batch_sizes(256, 20, 0.3) == (3584, 1536)
    empty = {key: value[:0] for key, value in replay.data.items()}
    assert run_reference_expo.mix(replay.data, empty) is replay.data


def test_the_dppo_reference_envs_step_chunks_as_genpols_stack():
    """``bench/run_reference_dppo.py`` writes out DPPO's ``MujocoLocomotionLowdimWrapper`` + ``MultiStep``; on the
    same Hopper seed and actions it must give what genpol's ``ActionChunking`` gives (summed rewards, the
    chunk cut at the termination, observations min-max scaled), so the dppo pair differs only in the learner."""
    import run_reference_dppo

    from envs.chunking import ActionChunking
    from genpol.data.dataset import Normalization

    rng = np.random.default_rng(0)
    norm = Normalization(obs_min=-rng.uniform(1, 3, 11), obs_max=rng.uniform(1, 3, 11),
                         action_min=-np.full(3, 0.9), action_max=np.full(3, 0.95))
    episodes = []
    theirs = run_reference_dppo.TheirChunkedEnvs("Hopper-v5", 1, seed=3, norm=norm,
                                                 on_episode=lambda *row: episodes.append(row))
    ours = ActionChunking(gym.make("Hopper-v5"), steps=4)
    raw, _ = ours.reset(seed=3000)  # TheirChunkedEnvs seeds env i with seed * 1000 + i
    assert np.allclose(theirs.obs[0, 0], Normalization.scale(raw, norm.obs_min, norm.obs_max))
    executed, total = 0, 0.0
    for _ in range(200):
        chunk = rng.uniform(-1, 1, (1, 4, 3))
        obs, reward, terminated, truncated = theirs.step(chunk)
        raw, our_reward, our_terminated, our_truncated, info = ours.step(theirs.unscale(chunk[0]).reshape(-1))
        executed, total = executed + info["env_steps"], total + our_reward
        assert reward[0] == pytest.approx(our_reward) and (terminated[0], truncated[0]) == (our_terminated, our_truncated)
        assert theirs.env_steps == executed
        if our_terminated or our_truncated:
            break
        assert np.allclose(obs[0, 0], Normalization.scale(raw, norm.obs_min, norm.obs_max))
    assert our_terminated, "random actions end a Hopper episode within 200 chunks"
    assert episodes == [(executed, pytest.approx(total), executed)]


def test_the_offline_consistency_reference_trains_on_genpols_transitions(tmp_path):
    """``bench/run_reference_consistency_ac_offline.py`` builds ``d4rl.qlearning_dataset``'s transitions for the
    authors' ``Data_Sampler``; genpol's ``offline_transitions`` builds its own from the same file. A file with a
    terminal episode, a timed-out one and one cut by the end of the file: the same transitions, in order, on
    both sides (the terminal's s' differs and is never bootstrapped from)."""
    import run_reference_consistency_ac_offline as reference

    from genpol.data.d4rl import load_d4rl, write_d4rl
    from genpol.storage.replay import offline_transitions

    rng = np.random.default_rng(0)
    rows = 3 + 4 + 3  # episodes of 3 (terminal), 4 (time limit), 3 (cut by the file's end)
    terminals, timeouts = np.zeros(rows, bool), np.zeros(rows, bool)
    terminals[2], timeouts[6] = True, True
    path = write_d4rl(tmp_path / "hopper_medium-v5.hdf5", observations=rng.normal(size=(rows, 11)),
                      actions=rng.uniform(-0.9, 0.9, (rows, 3)), rewards=rng.normal(size=rows),
                      terminals=terminals, timeouts=timeouts)
    theirs = reference.qlearning_dataset(path)
    ours = offline_transitions(load_d4rl(path))
    kept = [0, 1, 2, 3, 4, 5, 7, 8]  # row 6 timed out, row 9 ends the file
    assert len(ours) == len(theirs["rewards"]) == len(kept)
    batch = ours.batch_at(torch.arange(len(ours)))
    np.testing.assert_array_equal(batch.obs.numpy(), theirs["observations"])
    np.testing.assert_array_equal(batch.actions.numpy(), theirs["actions"])
    np.testing.assert_array_equal(batch.rewards.numpy(), theirs["rewards"])
    np.testing.assert_array_equal(batch.dones.numpy(), theirs["terminals"])
    assert theirs["terminals"].tolist() == [0, 0, 1, 0, 0, 0, 0, 0]
    bootstrapped = theirs["terminals"] == 0
    np.testing.assert_array_equal(batch.next_obs.numpy()[bootstrapped], theirs["next_observations"][bootstrapped])


def test_the_rlpd_and_expo_references_read_the_dataset_as_qlearning_dataset_and_genpols_drop_does_too(tmp_path):
    """Their ``D4RLDataset`` calls ``d4rl.qlearning_dataset``: rows 0 .. N - 2 without a timeout, s' from the file's
    ``next_observations``. ``bench/run_reference_rlpd.load_d4rl`` (RLPD's and EXPO's reference runs) reads them
    so, and genpol's side of those pairs (``dataset.truncated_rows=drop``) trains on the same transitions."""
    import run_reference_rlpd

    from genpol.data.d4rl import load_d4rl, write_d4rl
    from genpol.storage.replay import offline_transitions

    rng = np.random.default_rng(1)
    rows = 3 + 4 + 3  # episodes of 3 (terminal), 4 (time limit), 3 (cut by the file's end)
    terminals, timeouts = np.zeros(rows, bool), np.zeros(rows, bool)
    terminals[2], timeouts[6] = True, True
    observations = rng.normal(size=(rows + 1, 11))
    path = write_d4rl(tmp_path / "hopper_medium-v5.hdf5", observations=observations[:-1],
                      actions=rng.uniform(-0.9, 0.9, (rows, 3)), rewards=rng.normal(size=rows), terminals=terminals,
                      timeouts=timeouts, next_observations=observations[1:])
    theirs = run_reference_rlpd.load_d4rl(path)
    ours = offline_transitions(load_d4rl(path), truncated_rows="drop")
    assert len(ours) == len(theirs["rewards"]) == 8  # row 6 timed out, row 9 ends the file
    batch = ours.batch_at(torch.arange(len(ours)))
    for key, value in (("observations", batch.obs), ("actions", batch.actions), ("rewards", batch.rewards),
                       ("masks", 1 - batch.dones)):
        np.testing.assert_allclose(value.numpy(), theirs[key], rtol=0, atol=1e-6)
    bootstrapped = theirs["masks"] == 1
    np.testing.assert_array_equal(batch.next_obs.numpy()[bootstrapped], theirs["next_observations"][bootstrapped])
    for pair in ("rlpd", "expo", "consistency_ac_offline", "consistency_ac_o2o"):
        assert "dataset.truncated_rows=drop" in learning_parity.dataset_overrides(pair, str(path))
    assert learning_parity.dataset_overrides("ppo", str(path)) == []


def test_the_o2o_consistency_pair_runs_their_offline_options_and_their_online_loop():
    """The consistency_ac_o2o pair's genpol run, composed and validated as ``genpol.train`` does it: every
    option of their offline phase wins over the experiment; where their online phase differs (eta, BC, actor
    lr, sampling steps: exactly the four the pair lists) genpol's learner and head take their online values at
    the switch, and their reload into a new agent is ``pipeline.online_reset``; their online loop's settings
    (3 envs, 1/12 UTD, epsilon 1 to 0.01 over 10 %, no offline data online, time limits as terminations)
    replace the experiment's."""
    from genpol.api import compose_config
    from genpol.configure import validate

    assert sorted(learning_parity.CONSISTENCY_AC_O2O_ONLINE_CHANGES) == sorted(
        ["policy.sampling_steps=5", "learner.bc_coef=0", "learner.eta=1.0", "learner.lr=1e-5"])
    overrides = learning_parity.pair_settings("consistency_ac_o2o")["genpol"]
    keys = [learning_parity._option_key(option) for option in overrides]
    assert len(keys) == len(set(keys))
    cfg = validate(compose_config([*overrides, "dataset.path=unused.hdf5", "total_steps=150000", "run_dir=unused"]))
    policy, learner, pipeline = cfg.policy, cfg.learner, cfg.pipeline
    assert (policy.sampling_steps, learner.eta, learner.bc_coef, learner.lr, learner.critic_lr) == (
        2, 0.1, 1.0, 3e-4, 3e-4)
    assert pipeline.online_learner == {"eta": 1.0, "bc_coef": 0, "lr": 1e-5}
    assert pipeline.online_policy == {"sampling_steps": 5}
    assert pipeline.online_reset == ["optimizers", "targets", "step_counts"]
    assert (pipeline.name, pipeline.pretrain_steps, policy.ct_total_steps, pipeline.pretrain_batch_size) == (
        "offline_to_online", 20_000, 20_000, 256)
    assert (cfg.env.num_envs, learner.offline_ratio, learner.learning_starts, learner.bootstrap_truncation) == (
        3, 0.0, 0, False)
    assert (learner.explore_initial, learner.explore_final, learner.explore_fraction) == (1.0, 0.01, 0.1)
    assert (learner.batch_size, learner.buffer_size, learner.max_grad_norm) == (256, 100_000, 9.0)
    assert learner.utd == pytest.approx(1 / 12)


def test_claim_verdicts_follow_the_interval_of_the_difference():
    """5 seeds a side. Separated samples: the interval of the difference is the gap between the sides'
    order statistics (above: +6 to +14, all of it > 0); overlapping ones straddle 0. An "above" claim holds,
    is contradicted or is not shown; a "matches" claim shows no difference only when the interval contains 0."""
    above, matches = claims.CLAIMS["dppo"], claims.CLAIMS["consistency_bc"]
    low = [1.0, 2.0, 3.0, 4.0, 5.0]
    high = [11.0, 12.0, 13.0, 14.0, 15.0]
    result = claims.verdict(above, high, low)
    assert result["difference_of_medians"] == 10.0 and result["verdict"] == "holds"
    assert result["difference_ci95"][0] > 0 and result["seeds"] == [5, 5]
    assert claims.verdict(above, low, high)["verdict"] == "contradicted"
    assert claims.verdict(above, low, [1.5, 2.5, 3.5, 4.5, 5.5])["verdict"] == "not shown"
    assert claims.verdict(matches, low, [1.5, 2.5, 3.5, 4.5, 5.5])["verdict"] == "no difference shown"
    assert claims.verdict(matches, low, high)["verdict"] == "method below"
    assert claims.verdict(matches, high, low)["verdict"] == "method above"


def test_learning_suites_merge_seeds_and_judge_against_sac_as_issue_30_says():
    """``bench/learning_rows.py``: a job's seeds run in two invocations (seed 0, then 2 and 1) are one row, in seed
    order, every per-seed list merged alike and the median recomputed; a row at another budget is not merged.
    The verdict against SAC on hand values: with 3 seeds the exact bootstrap interval of SAC's median is its
    [min, max], so a median of 3050 is inside [3000, 3500] and one of 2990 is below it."""
    import learning_rows

    first = {"overrides": ["a"], "steps": 300, "seeds": [0], "final_returns": [3050.0], "wall_time_s": [10.0],
             "sps": [5.0], "eval_curves": [[[100, 1.0]]], "median_final_return": 3050.0, "sps_median": 5.0}
    second = {"overrides": ["a"], "steps": 300, "seeds": [2, 1], "final_returns": [2900.0, 3600.0],
              "wall_time_s": [30.0, 20.0], "sps": [7.0, 6.0], "eval_curves": [[[100, 3.0]], [[100, 2.0]]],
              "median_final_return": 3250.0, "sps_median": 6.5}
    row = learning_rows.merge_seeds(first, second)
    assert row["seeds"] == [0, 1, 2] and row["overrides"] == ["a"]
    assert row["final_returns"] == [3050.0, 3600.0, 2900.0] and row["wall_time_s"] == [10.0, 20.0, 30.0]
    assert row["eval_curves"] == [[[100, 1.0]], [[100, 2.0]], [[100, 3.0]]]
    assert row["median_final_return"] == 3050.0 and row["sps_median"] == 6.0
    assert learning_rows.merge_seeds({**first, "steps": 100}, second) == second
    without_sps = learning_rows.merge_seeds({key: value for key, value in first.items() if key != "sps"}, second)
    assert "sps" not in without_sps and without_sps["seeds"] == [0, 1, 2]  # a list that cannot line up is dropped
    # spo_deep's pooled ratio deviation: seed 0 (2 iterations, mean 0.1) with seed 1 (1 iteration, 0.4) pools to
    # 0.2; it was seed 1's 0.4 alone, under the merged row's three seeds
    deviations = {"overrides": ["a"], "steps": 300, "final_returns": [1.0], "median_final_return": 1.0}
    pooled = learning_rows.merge_seeds(
        {**deviations, "seeds": [0], "ratio_deviation_means": [0.1], "ratio_deviation_counts": [2]},
        {**deviations, "seeds": [1], "ratio_deviation_means": [0.4], "ratio_deviation_counts": [1],
         "ratio_deviation_mean": 0.4})
    assert pooled["ratio_deviation_mean"] == pytest.approx(0.2)
    older = learning_rows.merge_seeds({**deviations, "seeds": [0], "ratio_deviation_mean": 0.1},
                                      {**deviations, "seeds": [1], "ratio_deviation_means": [0.4],
                                       "ratio_deviation_counts": [1], "ratio_deviation_mean": 0.4})
    assert "ratio_deviation_mean" not in older  # seed 0's iterations are unknown: no pooled mean, not seed 1's

    sac = {"hopper-sac": {"steps": 300, "seeds": [0, 1, 2], "final_returns": [3500.0, 3000.0, 3200.0]}}
    table = {"hopper-flow-sac": row, "hopper-meow": {**row, "seeds": [0, 1, 2], "final_returns": [2990.0] * 3,
                                                     "median_final_return": 2990.0},
             "hopper-other": {**row, "steps": 100}}
    learning_rows.against_sac(table, sac)
    verdict = table["hopper-flow-sac"]["against_sac"]
    assert verdict["sac_median"] == 3200.0 and verdict["sac_ci95"] == [3000.0, 3500.0]
    assert verdict["sac_ci95_coverage"] == 0.75  # 3 seeds' [min, max]
    assert verdict["verdict"] == "inside SAC's 95 % interval" and verdict["met"]
    assert table["hopper-meow"]["against_sac"]["verdict"] == "below SAC's 95 % interval"
    assert not table["hopper-meow"]["against_sac"]["met"] and "against_sac" not in table["hopper-other"]


def test_learning_status_reads_where_each_run_stands(tmp_path, capsys):
    """``bench/learning.py --status``: a finished run, one resumable from its latest checkpoint, one recorded in
    the results file whose directory is elsewhere, and one not started, each read from disk."""
    import json

    import learning_rows

    done, resumable = tmp_path / "done", tmp_path / "resumable"
    done.mkdir()
    (done / "summary.json").write_text(json.dumps({"env_steps": 300, "eval_return_mean": 3123.4}))
    for step in (100, 200):
        (resumable / "checkpoints" / f"step_{step:012d}").mkdir(parents=True)
    results = {"jobs": {"elsewhere": {"steps": 300, "seeds": [0, 2], "final_returns": [1.0, 2516.0]}}}
    learning_rows.print_status({("a", 0): done, ("b", 1): resumable, ("elsewhere", 2): tmp_path / "gone",
                                ("c", 0): tmp_path / "never"}, 300, results)
    lines = capsys.readouterr().out.splitlines()[1:]
    assert lines[0].split() == ["a", "0", "done:", "final", "evaluation", "3123"]
    assert lines[1].endswith("resumes from step 200 of 300")
    assert "in the results file only: final evaluation 2516" in lines[2] and lines[3].endswith("not started")


def test_learning_collation_keeps_every_row_and_names_what_it_cannot_judge(tmp_path, monkeypatch, capsys):
    """``bench/learning.py maxent`` collating without training (fabricated summaries): a run whose final
    evaluation failed (``eval_return_mean`` None) crashed the whole collation after every job had trained; a seed
    repeated in ``--seeds`` counted one run twice; a stale SAC row in the maxent file outranked the sac suite's;
    and the collation reads and writes the results file under its lock (``common.update_results``)."""
    import json
    import sys

    import common
    import learning

    monkeypatch.setattr(common, "RESULTS", tmp_path / "results")
    monkeypatch.setattr(common, "RUNS", tmp_path / "runs")
    finals = {("hopper-maxentdp-cpu", 0): 3100.0, ("hopper-maxentdp-cpu", 1): None, ("hopper-maxentdp-cpu", 2): 3300.0}

    def fabricated_run(run_dir, overrides, seed, steps, common_arguments=None):
        run_dir.mkdir(parents=True, exist_ok=True)
        final = finals[(run_dir.name.rsplit("-", 2)[0], seed)]
        (run_dir / "progress.jsonl").write_text(json.dumps({"global_step": steps, "eval/episodic_return": final,
                                                            "charts/episodic_return": 1.0}))
        return {"eval_return_mean": final, "sps": 10.0, "wall_time_s": 1.0, "env_steps": steps}

    monkeypatch.setattr(learning, "run_job", fabricated_run)
    sac_row = {"steps": 300, "seeds": [0, 1, 2], "final_returns": [3000.0, 3200.0, 3500.0], "overrides": [],
               "median_final_return": 3200.0, "sps_median": 10.0}
    common.write_results("learning_sac.json", {"jobs": {"hopper-sac": sac_row}})
    common.write_results("learning_maxent.json", {"jobs": {"hopper-sac": {**sac_row, "seeds": [0],
                                                                           "final_returns": [9000.0]}}})
    for seeds in (["0", "0"], ["0", "1", "2"]):
        monkeypatch.setattr(sys, "argv", ["learning.py", "maxent", "--steps", "300", "--jobs", "hopper-maxentdp-cpu",
                                          "--seeds", *seeds])
        if seeds == ["0", "0"]:
            with pytest.raises(SystemExit):
                learning.main()
            assert "--seeds repeats a seed: [0, 0]" in capsys.readouterr().err
        else:
            learning.main()
    jobs = common.read_results("learning_maxent.json")["jobs"]
    row = jobs["hopper-maxentdp-cpu"]
    assert row["final_returns"] == [3100.0, None, 3300.0] and row["median_final_return"] == 3200.0
    assert row["against_sac"] == {"verdict": "not judged: a seed without a finite final return", "met": False}
    assert "hopper-sac" in jobs  # the other rows of the file are kept
    finals[("hopper-maxentdp-cpu", 1)] = 2900.0  # the sac suite's row (median 3200), not the stale copy's 9000
    assert learning_rows_verdict(jobs, sac_row, [3100.0, 2900.0, 3300.0]) == ("inside SAC's 95 % interval", 3200.0)
    assert (tmp_path / "results" / "learning_maxent.lock").exists()


def learning_rows_verdict(jobs: dict, sac_row: dict, final_returns: list) -> tuple:
    import learning_rows

    table = {**jobs, "hopper-maxentdp-cpu": {**jobs["hopper-maxentdp-cpu"], "final_returns": final_returns,
                                             "median_final_return": learning_rows.finite_median(final_returns)}}
    learning_rows.against_sac(table, {"hopper-sac": sac_row})
    verdict = table["hopper-maxentdp-cpu"]["against_sac"]
    return verdict["verdict"], verdict["sac_median"]


def test_a_finished_bench_run_is_reused_only_under_its_own_config(tmp_path):
    """train_once returned a finished run's summary whatever the job's overrides had become (an edited bundle, an
    added override), and the results filed the old run's numbers under the new settings: the saved config is
    compared first, as a resume would be."""
    import common

    from genpol.api import train
    from genpol.errors import ConfigError

    overrides = ["env=pendulum", "total_steps=64", "env.num_envs=2", "learner.rollout_steps=32", "learner.epochs=1",
                 "learner.minibatch_size=32", "pipeline.video=false", "pipeline.eval_episodes=1",
                 "logger.progress_bar=false"]
    train(run_dir=tmp_path / "run", overrides=overrides)
    assert common.train_once(tmp_path / "run", overrides, steps=64)["env_steps"] == 64  # the same job: reused
    with pytest.raises(ConfigError, match=r"holds a run with a different config \(learner.lr: 0.0003 -> 0.001\)"):
        common.train_once(tmp_path / "run", [*overrides, "learner.lr=1e-3"], steps=64)


def test_the_stability_suite_judges_the_evaluation_at_300k_and_says_when_it_cannot(tmp_path):
    """An evaluation falling from 3100 to 200 exactly at step 300000 was skipped (a strict >), and a run with no
    evaluation after 300k read "collapsed: False" (NaN < 0.5): now True, and None where nothing could be judged."""
    import json

    import learning

    for name, curve in (("fell", [(100_000, 3100.0), (300_000, 200.0)]), ("short", [(100_000, 3100.0)])):
        run = tmp_path / name
        run.mkdir()
        rows = [{"global_step": step, "eval/episodic_return": value, "losses/clipfrac": 0.1, "losses/approx_kl": 0.01}
                for step, value in curve]
        (run / "progress.jsonl").write_text("".join(json.dumps(row) + "\n" for row in rows))
        (run / "summary.json").write_text(json.dumps({"env_steps": curve[-1][0], "eval_return_mean": curve[-1][1]}))
    result = learning.stability([tmp_path / "fell", tmp_path / "short"])
    assert result["collapsed"] == [True, None]
    assert result["worst_eval_after_300k_over_best_before"][0] == pytest.approx(200 / 3100)
