"""PointMaze through the envs protocol, and the maze dataset generator (genpol.data.maze_dataset)."""

import json
import os

import gymnasium as gym
import numpy as np
import pytest
import torch

from genpol import envs
from genpol.envs.goal_envs import remove_generated_model_file
from genpol.envs.testing import check_vector_env
from genpol.data import DatasetError, load_dataset, reference_returns
from genpol.data.maze_dataset import MAZE_REFERENCE, collect_segments, eval_maze_map, evaluate_controller
from genpol.data.maze_dataset import main as maze_main
from genpol.data.maze_planner import GOAL, BatchController, MazeGrid, maze_map_of
from genpol.policy import evaluate_episodes
from genpol.storage.replay import offline_transitions
from tests.conftest import needs, run_cli

pytestmark = needs("gymnasium_robotics")


def test_pointmaze_passes_the_protocol_suite_with_its_success_flag():
    checked = check_vector_env("gym:PointMaze_Medium-v3", num_envs=2, max_episode_steps=40, steps=90)
    assert {"exact resume", "success flag", "time limit", "final observation"} <= set(checked)


def test_dict_observations_flatten_as_observation_achieved_desired():
    env = envs.make_backend("gym:PointMaze_UMaze-v3", num_envs=2, max_episode_steps=5)
    reference = gym.make("PointMaze_UMaze-v3", max_episode_steps=5)
    remove_generated_model_file(reference.unwrapped)  # gymnasium-robotics leaves its model file in /tmp
    try:
        obs = env.reset(seed=3)
        for i in range(2):  # env i is seeded with 3 + i
            raw, _ = reference.reset(seed=3 + i)
            expected = np.concatenate([raw["observation"], raw["achieved_goal"], raw["desired_goal"]])
            np.testing.assert_array_equal(obs[i].numpy(), expected.astype(np.float32))
        assert env.obs_dim == 8 and env.reports_success
        assert env.imports == ("gymnasium_robotics.envs.maze.point_maze",)  # env workers register the id
        action = torch.tensor([[0.3, -0.2], [0.3, -0.2]])
        for _ in range(5):
            raw, *_ = reference.step(action[1].numpy())
            obs, _, terminated, truncated, info = env.step(action)
        # registered default continuing_task=True: the time limit truncates, nothing terminates
        assert truncated.all() and not terminated.any()
        expected = np.concatenate([raw["observation"], raw["achieved_goal"], raw["desired_goal"]])
        np.testing.assert_allclose(info["final_obs"][1].numpy(), expected, rtol=1e-6)
    finally:
        env.close()
        reference.close()


def test_the_mazes_generated_model_file_is_removed_and_the_env_still_steps_and_renders():
    """gymnasium-robotics writes each maze's MJCF into the temp directory and leaves it there."""
    env = envs.make_backend("gym:PointMaze_UMaze-v3", num_envs=2, max_episode_steps=5, render=True,
                            render_size=(32, 32))
    try:
        paths = [inner.unwrapped.tmp_xml_file_path for inner in env._envs.envs]
        assert len(set(paths)) == 2 and all(path.endswith(".xml") for path in paths)
        assert not any(os.path.exists(path) for path in paths), paths
        env.reset(seed=0)
        for _ in range(6):  # through an autoreset
            env.step(torch.full((2, 2), 0.5))
        assert env.render().std() > 0
    finally:
        env.close()


def test_success_flag_terminates_episodic_mazes_and_reaches_episode_stats_and_evaluation():
    """continuing_task=False: the step that reaches the goal terminates with reward 1 and success."""
    grid = MazeGrid(maze_map_of("PointMaze_UMaze-v3"))
    env = envs.make("gym:PointMaze_UMaze-v3", num_envs=3, rescale_actions=False,
                    env_kwargs={"continuing_task": False})
    try:
        controller = BatchController(grid, 3, seed=0)
        obs = env.reset(seed=0)
        ended = torch.zeros(3, dtype=torch.bool)
        for _ in range(300):
            obs, reward, terminated, truncated, info = env.step(
                torch.as_tensor(controller.act(obs.double().numpy())[0], dtype=torch.float32))
            assert torch.equal(info["success"], terminated)  # episodic: success <=> termination
            assert torch.equal(reward, info["success"].float())  # sparse reward 1 exactly there
            assert torch.equal(info["episode_success"], terminated[terminated | truncated])
            ended |= terminated | truncated
            if ended.all():
                break
        assert ended.all()
        reached = evaluate_episodes(env, lambda o: torch.as_tensor(controller.act(o.double().numpy())[0],
                                                                    dtype=torch.float32), seed=1)
        assert reached.success.all() and (reached.lengths < 300).all()
        standing = evaluate_episodes(env, lambda o: torch.zeros(3, 2), seed=1)
        assert not standing.success.any() and (standing.lengths == 300).all()  # truncated, never successful
    finally:
        env.close()


def test_envs_without_success_report_none():
    env = envs.make("gym:Pendulum-v1", num_envs=2, max_episode_steps=5)
    try:
        assert not env.reports_success
        results = evaluate_episodes(env, lambda o: torch.zeros(2, 1), seed=0)
        assert results.success is None and "success" not in env.step(torch.zeros(2, 1))[4]
    finally:
        env.close()


def test_bfs_path_is_shortest_dfs_is_minaris_and_walls_are_refused():
    grid = MazeGrid(maze_map_of("PointMaze_Medium-v3"))
    path = grid.path((1, 1), (6, 6))
    assert path[0] == (1, 1) and path[-1] == (6, 6)
    assert all(grid.free[cell] for cell in path)
    assert all(abs(a[0] - b[0]) + abs(a[1] - b[1]) == 1 for a, b in zip(path, path[1:]))
    # by hand on the map: (1,1) (1,2) (2,2) (3,2) (3,3) (3,4) (4,4) (4,5) (4,6) (5,6) (6,6), the Manhattan
    # distance 10 plus one: no shorter path exists
    assert len(path) == 11
    # Minari's DFS (stack; neighbours right, left, up, down; marked when pushed), traced by hand: it
    # dives down the left corridor first
    assert grid.path((1, 1), (6, 6), "dfs") == [(1, 1), (2, 1), (2, 2), (3, 2), (4, 2), (4, 1), (5, 1), (6, 1),
                                                (6, 2), (6, 3), (5, 3), (5, 4), (4, 4), (4, 5), (4, 6), (5, 6), (6, 6)]
    open_grid = MazeGrid(maze_map_of("PointMaze_Open-v3"))
    assert len(open_grid.path((1, 1), (3, 5))) == 1 + 2 + 4  # Manhattan distance without walls
    with pytest.raises(ValueError, match="wall"):
        grid.path((0, 0), (6, 6))
    with pytest.raises(ValueError, match="unknown maze solver"):
        grid.path((1, 1), (6, 6), "astar")
    np.testing.assert_allclose(grid.center((6, 6)), [2.5, -2.5])
    assert grid.cell_of(np.array([2.3, -2.7])) == (6, 6)


def test_the_noisy_controller_reaches_its_goals():
    segments, stats = collect_segments("PointMaze_UMaze-v3", steps=2500, num_envs=2, seed=1, noise_std=0.5,
                                       max_segment_steps=600)
    assert stats["segments"] >= 15 and stats["success_rate"] == 1.0
    # the clipped fraction counts the stored actions alone (it had counted unfinished segments' too: 1.03 once);
    # a clipped action has a component at exactly +-1, which an unclipped noisy one has with probability 0
    stored = np.concatenate([segment["actions"] for segment in segments])
    assert stats["clipped_action_fraction"] == np.any(np.abs(stored) == 1.0, axis=1).mean() > 0
    for segment in segments:
        # one reward, at the success step; the goal is fixed within a segment
        assert segment["rewards"].sum() == 1.0 and segment["rewards"][-1] == 1.0
        goals = segment["observations"][:, GOAL]
        assert np.abs(goals - goals[0]).max() == 0.0
        assert np.linalg.norm(segment["observations"][-1, :2] - goals[0]) <= 0.45
    for before, after in zip(segments, segments[1:]):  # a stream: each segment starts where one ended
        if np.array_equal(before["observations"][-1, :4], after["observations"][0, :4]):
            assert not np.array_equal(before["observations"][-1, GOAL], after["observations"][0, GOAL])


def test_noise_free_controller_scores_near_minaris_reference_max():
    evaluation = evaluate_controller("PointMaze_Medium-v3", episodes=4)
    low, high = MAZE_REFERENCE[("Medium", "sparse")]
    assert evaluation["controller_success_rate"] == 1.0
    # BFS paths are shorter than the DFS ones behind Minari's max: at least the max, well above the min
    assert evaluation["controller_return_mean"] > 0.95 * high > 10 * low
    assert eval_maze_map("PointMaze_Medium-v3")[6][6] == "g"


def test_settings_that_would_fail_after_the_collection_are_refused_before_it(tmp_path, capsys):
    """An Open maze has no single-goal evaluation map and an existing Minari id cannot be written: both used to
    fail after the whole collection. A Diverse id is evaluated on its plain maze's single-goal map."""
    with pytest.raises(SystemExit) as refused:
        maze_main(["--env", "PointMaze_Open-v3", "--d4rl", str(tmp_path / "open.hdf5")])
    assert refused.value.code == 2 and "no single-goal evaluation map for the Open maze" in capsys.readouterr().err
    assert not (tmp_path / "open.hdf5").exists()
    (tmp_path / "minari" / "genpol" / "pointmaze" / "taken-v0").mkdir(parents=True)
    with pytest.raises(SystemExit) as refused:
        maze_main(["--env", "PointMaze_UMaze-v3", "--minari", "genpol/pointmaze/taken-v0",
                   "--minari-root", str(tmp_path / "minari")])
    assert refused.value.code == 2 and "genpol/pointmaze/taken-v0 already exists" in capsys.readouterr().err
    # an existing D4RL file was silently replaced, stranding the runs that resume from it; a Minari id without
    # its version failed inside minari after the collection (and after the D4RL file was written)
    (tmp_path / "taken.hdf5").write_bytes(b"a dataset")
    for outputs, shown in ((["--d4rl", str(tmp_path / "taken.hdf5")], "taken.hdf5 already exists"),
                           (["--minari", "genpol/pointmaze/umaze"], "'genpol/pointmaze/umaze' is not a Minari "
                                                                    "dataset id: it must read (namespace/)name-v<N>")):
        with pytest.raises(SystemExit) as refused:
            maze_main(["--env", "PointMaze_UMaze-v3", *outputs, "--minari-root", str(tmp_path / "minari")])
        assert refused.value.code == 2 and shown in capsys.readouterr().err
    assert (tmp_path / "taken.hdf5").read_bytes() == b"a dataset"
    with pytest.raises(SystemExit) as refused:  # the folder made to try writing there went with the refusal (it stayed)
        maze_main(["--env", "PointMaze_UMaze-v3", "--d4rl", str(tmp_path / "new" / "x.hdf5"), "--minari",
                   "genpol/pointmaze/umaze"])
    assert refused.value.code == 2 and "is not a Minari dataset id" in capsys.readouterr().err
    assert not (tmp_path / "new").exists()
    for seed in ("-1", str(2**32)):  # numpy's traceback, after the maze was read
        with pytest.raises(SystemExit) as refused:
            maze_main(["--env", "PointMaze_UMaze-v3", "--d4rl", str(tmp_path / "s.hdf5"), "--seed", seed])
        assert refused.value.code == 2 and "--seed must be in [0, 2146435072) " in capsys.readouterr().err
    diverse = eval_maze_map("PointMaze_Medium_Diverse_G-v3")
    assert sum(cell == "g" for row in diverse for cell in row) == 1 and diverse[6][6] == "g"
    assert not any(cell in ("c", "r") for row in diverse for cell in row)


def test_written_dataset_round_trips_through_both_readers(tmp_path, capsys, monkeypatch):
    d4rl_path = tmp_path / "maze.hdf5"
    monkeypatch.chdir(tmp_path)  # a relative Minari root (minari 0.5.4 mishandles one unless made absolute)
    report = maze_main(["--env", "PointMaze_UMaze-v3", "--steps", "1200", "--num-envs", "2", "--eval-episodes", "0",
                        "--d4rl", str(d4rl_path), "--minari", "genpol/pointmaze/umaze-v0", "--minari-root", "minari"])
    assert "controller success rate 1.000" in capsys.readouterr().out
    d4rl = load_dataset(str(d4rl_path))
    minari = load_dataset("genpol/pointmaze/umaze-v0", minari_root=tmp_path / "minari")
    for dataset in (d4rl, minari):
        assert dataset.observations.shape == (report["transitions"], 8)
        assert len(dataset.episode_bounds()) == report["segments"]
        assert not dataset.terminals.any()  # segment ends are truncations: the point mass goes on
        assert reference_returns(dataset.metadata, "gym:PointMaze_UMaze-v3") == MAZE_REFERENCE[("UMaze", "sparse")]
    # stored ones that are no scores: a bare ValueError at the run's start, or an inf normalized score
    for low, high in ((b"n/a", 5.0), (5.0, 5.0)):
        with pytest.raises(DatasetError, match=r"^mine: metadata/ref_min_score / metadata/ref_max_score must be "
                                               r"finite numbers, min below max"):
            reference_returns({"metadata/ref_min_score": low, "metadata/ref_max_score": high}, "gym:Hopper-v5",
                              "mine")
    for name in ("observations", "actions", "rewards", "timeouts", "end_rows", "end_next_observations"):
        np.testing.assert_array_equal(getattr(d4rl, name), getattr(minari, name))
    # the sparse reward is paid at the success step, which ends its segment as a truncation: kept, every
    # segment's reward is in the transitions, each bootstrapped from the point mass at its goal; dropped
    # (D4RL's qlearning_dataset), the data hold no reward at all
    for dataset in (d4rl, minari):
        kept = offline_transitions(dataset)
        batch = kept.batch_at(torch.arange(len(kept)))
        assert len(kept) == report["transitions"] and batch.rewards.sum() == report["segments"]
        paid = batch.rewards == 1
        goals = batch.next_obs[paid][:, GOAL]
        assert not batch.dones.any() and (torch.linalg.norm(batch.next_obs[paid][:, :2] - goals, dim=1) <= 0.45).all()
        dropped = offline_transitions(dataset, truncated_rows="drop")
        assert len(dropped) == report["transitions"] - report["segments"]
        assert dropped.batch_at(torch.arange(len(dropped))).rewards.sum() == 0


def test_pointmaze_training_reports_success_in_summary_and_video(tmp_path):
    run_cli("-m", "genpol.train", "env=pointmaze_medium", "env.num_envs=2", "env.max_episode_steps=64",
            "total_steps=256", "learner.rollout_steps=128", "learner.epochs=1", "pipeline.eval_episodes=2",
            "logger.progress_bar=false", f"pipeline.video_dir={tmp_path / 'videos'}", f"run_dir={tmp_path / 'run'}")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["eval_success_rate"] in (0.0, 0.5, 1.0) and summary["success_rate"] is not None
    from tests.conftest import assert_nonblank_mp4

    assert_nonblank_mp4(summary["video"], size=(256, 256))


def test_env_workers_carry_the_success_flag():
    """workers=2 steps a slice in another process: the same flags, observations and episode successes."""
    grid = MazeGrid(maze_map_of("PointMaze_UMaze-v3"))
    runs = []
    for workers in (1, 2):
        env = envs.make("gym:PointMaze_UMaze-v3", num_envs=2, workers=workers, rescale_actions=False,
                        env_kwargs={"continuing_task": False}, max_episode_steps=150)
        try:
            assert env.reports_success
            controller = BatchController(grid, 2, seed=0)
            obs, flags, episode_success = env.reset(seed=4), [], []
            for _ in range(150):
                obs, _, _, _, info = env.step(torch.as_tensor(controller.act(obs.double().numpy())[0],
                                                              dtype=torch.float32))
                flags.append(info["success"].clone())
                episode_success.append(info["episode_success"].clone())
            runs.append((obs, torch.stack(flags), torch.cat(episode_success)))
        finally:
            env.close()
    assert runs[0][1].any() and runs[0][2].all()
    for single, split in zip(*runs):
        assert torch.equal(single, split)


def test_episode_success_survives_a_checkpoint_of_the_wrapper_stack(tmp_path):
    """EpisodeStats' per-env "succeeded so far" travels in state_dict (torch.load weights_only)."""
    grid = MazeGrid(maze_map_of("PointMaze_UMaze-v3"))

    def make():
        return envs.make("gym:PointMaze_UMaze-v3", num_envs=2, max_episode_steps=280, rescale_actions=False)

    def act(controller, obs):
        return torch.as_tensor(controller.act(obs.double().numpy())[0], dtype=torch.float32)

    env, controller = make(), BatchController(grid, 2, seed=0)
    obs, seen = env.reset(seed=2), torch.zeros(2, dtype=torch.bool)
    for _ in range(250):  # continuing maze: the goal is reached (and held) before the time limit
        obs, *_, info = env.step(act(controller, obs))
        seen |= info["success"]
    assert seen.all()
    torch.save(env.state_dict(), tmp_path / "env.pt")
    resumed = make()
    resumed.load_state_dict(torch.load(tmp_path / "env.pt", weights_only=True))
    # the ball may still sit in the goal after the restore, so compare the running flag itself too
    assert resumed.find(envs.EpisodeStats)._succeeded.all()
    outcomes = []
    for stack in (env, resumed):
        current = obs
        for _ in range(30):  # standing still; the time limit ends both episodes at step 280
            current, _, _, truncated, info = stack.step(torch.zeros(2, 2))
        assert truncated.all()
        outcomes.append(info["episode_success"])
    assert outcomes[0].all() and torch.equal(outcomes[0], outcomes[1])
    env.close()
    resumed.close()


@pytest.mark.parametrize("env_id", ["gym:PointMaze_UMaze-v3", "dmc:cartpole-balance"])
def test_predict_flattens_a_dict_observation_as_training_did(tmp_path, env_id):
    """A goal env's or dm_control's raw observation is a dict; predict refused it, and gymnasium's
    FlattenObservation gives a vector of the right size in sorted key order (achieved_goal first), whose actions
    were silently wrong. The checkpoint records the layout, and predict flattens a dict, one or a batch, in it."""
    from genpol.api import load_policy, train
    from genpol.envs.goal_envs import FlattenGoalObservation

    train(env=env_id, total_steps=64, run_dir=tmp_path / "run",
          overrides=["env.num_envs=2", "learner.rollout_steps=32", "learner.epochs=1", "pipeline.video=false",
                     "pipeline.eval_episodes=1", "logger.progress_bar=false", "env.max_episode_steps=20"])
    policy = load_policy(tmp_path / "run")
    if env_id.startswith("gym:"):
        raw_env = gym.make("PointMaze_UMaze-v3")
        remove_generated_model_file(raw_env.unwrapped)
        observations = [raw_env.reset(seed=seed)[0] for seed in (0, 1)]
        flat = [FlattenGoalObservation(raw_env).observation(obs) for obs in observations]
        assert list(observations[0]) == ["observation", "achieved_goal", "desired_goal"]
    else:
        from dm_control import suite

        raw_env = suite.load("cartpole", "balance", task_kwargs={"random": 0})
        observations = [dict(raw_env.reset().observation) for _ in range(2)]
        flat = [np.concatenate([np.ravel(obs[key]) for key in obs]) for obs in observations]
    assert np.array_equal(policy.predict(observations[0]), policy.predict(flat[0]))
    batch = {key: np.stack([obs[key] for obs in observations]) for key in observations[0]}
    assert np.array_equal(policy.predict(batch), policy.predict(np.stack(flat)))
    key = next(iter(observations[0]))
    with pytest.raises(ValueError, match=rf"the dict observation has keys .*; {env_id}'s are"):
        policy.predict({name: value for name, value in observations[0].items() if name != key})
    with pytest.raises(ValueError, match=rf"observation\['{key}'\] has shape"):
        policy.predict({**observations[0], key: np.zeros(7)})
