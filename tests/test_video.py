"""Videos: the mp4 stream (``genpol.envs.video``) and the recorder that writes one per episode of env 0."""

import os
import warnings

import numpy as np
import pytest
import torch

from genpol import envs
from genpol.envs import EnvError
from genpol.envs.video import Mp4Stream

from conftest import needs


def frames_of(path):
    import imageio.v3 as iio

    return iio.imread(path)


def moving_square(count, height, width):
    """``count`` frames ``[H, W, 3]`` uint8 of a white square moving right on a dark ground."""
    frames = np.full((count, height, width, 3), 30, dtype=np.uint8)
    for k in range(count):
        frames[k, height // 4: height // 2, k: k + width // 4] = 255
    return frames


def test_the_stream_publishes_the_file_only_when_it_is_finished(tmp_path):
    path = tmp_path / "clips" / "a.mp4"
    stream = Mp4Stream(path, fps=20)
    for frame in moving_square(12, 32, 48):
        stream.append(frame)
    assert not path.exists(), "a video being written is visible under its final name"
    assert stream.finish() == path
    assert not stream.partial.exists()
    decoded = frames_of(path)
    assert decoded.shape == (12, 32, 48, 3)
    # the square moves: its column of greatest brightness walks right, one pixel a frame
    columns = decoded[:, 8:16].astype(float).mean(axis=(1, 3)).argmax(axis=1)
    assert (np.diff(columns) >= 0).all() and columns[-1] - columns[0] >= 8


def test_an_aborted_stream_leaves_nothing(tmp_path):
    path = tmp_path / "b.mp4"
    stream = Mp4Stream(path)
    for frame in moving_square(5, 16, 16):
        stream.append(frame)
    stream.abort()
    assert stream._process.returncode is not None  # ffmpeg is gone, and so is what it wrote
    assert list(tmp_path.iterdir()) == []


def test_odd_sides_are_padded_and_float_frames_read_as_zero_to_one(tmp_path):
    path = tmp_path / "odd.mp4"
    with Mp4Stream(path) as stream:
        for frame in moving_square(4, 33, 47):
            stream.append(frame.astype(np.float32) / 255.0)
    decoded = frames_of(path)
    assert decoded.shape == (4, 34, 48, 3)  # yuv420p needs even sides: one black row and column added
    assert abs(float(decoded[0, :33, :47].mean()) - float(moving_square(1, 33, 47).mean())) < 4


def test_a_frame_of_another_size_or_shape_is_named(tmp_path):
    stream = Mp4Stream(tmp_path / "c.mp4")
    stream.append(np.zeros((16, 16, 3), np.uint8))
    with pytest.raises(ValueError, match=r"c\.mp4: frame 1 is \(16, 8\), the video's frames are \(16, 16\)"):
        stream.append(np.zeros((16, 8, 3), np.uint8))
    with pytest.raises(ValueError, match=r"RGB \[H, W, 3\].*\(16, 16\)"):
        stream.append(np.zeros((16, 16), np.uint8))
    stream.abort()
    with pytest.raises(ValueError, match="frames must be RGB"):
        with Mp4Stream(tmp_path / "d.mp4") as bad:
            bad.append(np.zeros((4,), np.uint8))
    assert list(tmp_path.iterdir()) == []


def test_an_episode_cut_short_by_reset_or_close_leaves_no_file(tmp_path):
    with envs.make("genpol:MultiGoal", num_envs=1, seed=0, max_episode_steps=6, video_dir=tmp_path,
                   video_prefix="t") as env:
        env.reset()
        env.step(torch.zeros(1, env.act_dim))
        env.reset()  # the first episode is dropped, not written
        for _ in range(6):
            env.step(torch.zeros(1, env.act_dim))
        env.step(torch.zeros(1, env.act_dim))  # the third episode is open when the env closes
        recorder = env.find(envs.VideoRecorder)
    assert [p.name for p in recorder.paths] == ["t-episode0.mp4"]
    assert sorted(p.name for p in tmp_path.iterdir()) == ["t-episode0.mp4"]
    assert frames_of(recorder.paths[0]).shape[0] == 7  # the reset frame and 6 steps, the last from final_frame


def test_a_chunked_policys_video_keeps_the_env_steps_pace(tmp_path):
    """A frame per agent step of 3 env steps: at 30 fps the film ran 3x fast (a 200-step DPPO episode in 1.7 s)."""
    import imageio.v3 as iio

    with envs.make("genpol:MultiGoal", num_envs=1, seed=0, max_episode_steps=12, action_chunk=3, video_dir=tmp_path,
                   video_prefix="c") as env:
        env.reset()
        for _ in range(4):
            env.step(torch.zeros(1, env.act_dim))
        recorder = env.find(envs.VideoRecorder)
    # 5 frames for 4 agent steps: the reset state, then each step's, the last one the episode's final state (the
    # frame drawn before the auto-reset, info["final_frame"]); 4 frames missed that last state
    assert frames_of(recorder.paths[0]).shape[0] == 5 and iio.immeta(recorder.paths[0])["fps"] == 10


FINAL_STATE_CASES = [  # (env_id, action_chunk, workers): an episode of 5 control steps
    ("gym:Hopper-v5", 1, 1),
    ("gym:Hopper-v5", 2, 1),  # chunks of 2, 2, then 1: the time limit ends the episode inside the third chunk
    ("gym:Hopper-v5", 1, 2),  # env 0 steps in this process, env 1 in a worker
    ("dmc:walker-walk", 1, 1),
    ("dmc:walker-walk", 2, 1),
]


def _run_to_the_next_episode(env, steps):
    """``steps`` agent steps of a constant action (env 0's first episode ends at the last), then one more; the
    ending step's ``info`` and ``render()`` after it (the next episode's first state)."""
    action = torch.full((env.num_envs, env.act_dim), 0.5)
    env.reset()
    for _ in range(steps - 1):
        env.step(action)
    _, _, terminated, truncated, info = env.step(action)
    assert bool(terminated[0] | truncated[0])
    next_first = env.render()
    env.step(action)
    return info, next_first


@pytest.mark.parametrize(("env_id", "action_chunk", "workers"), FINAL_STATE_CASES)
def test_the_final_frame_draws_the_episodes_last_state_before_the_auto_reset(env_id, action_chunk, workers):
    """At the step that ends env 0's episode, ``render()`` draws the next episode (the backend reset env 0 inside
    the step); ``info["final_frame"]`` is env 0's last state, drawn before that reset: pixel for pixel the frame of
    the same state in an env whose time limit has not cut the episode there."""
    steps = -(-5 // action_chunk)
    with envs.make(env_id, num_envs=workers, seed=0, max_episode_steps=5, render=True, render_size=(48, 48),
                   action_chunk=action_chunk, workers=workers) as env:
        info, next_first = _run_to_the_next_episode(env, steps)
    with envs.make(env_id, num_envs=1, seed=0, max_episode_steps=20, render=True, render_size=(48, 48)) as reference:
        reference.reset()
        for _ in range(5):
            reference.step(torch.full((1, reference.act_dim), 0.5))
        last_state = reference.render()
    assert info["final_frame"].shape == (48, 48, 3) and info["final_frame"].dtype == np.uint8
    assert np.array_equal(info["final_frame"], last_state)
    assert not np.array_equal(info["final_frame"], next_first)


@pytest.mark.parametrize(("env_id", "action_chunk", "workers"), FINAL_STATE_CASES)
def test_an_episode_of_t_steps_gives_a_video_of_t_plus_1_frames_ending_in_its_last_state(
        tmp_path, env_id, action_chunk, workers):
    """As gymnasium's RecordVideo: the reset frame and a frame after each step, the last one ``info["final_frame"]``
    (its pixels are checked above; the mp4's are lossy). The last frame was missing: the recorder rendered after
    the step, when the backend had already reset env 0 (a Hopper's fall never showed)."""
    steps = -(-5 // action_chunk)
    with envs.make(env_id, num_envs=workers, seed=0, max_episode_steps=5, render_size=(48, 48),
                   action_chunk=action_chunk, workers=workers, video_dir=tmp_path, video_prefix="f") as env:
        _run_to_the_next_episode(env, steps)
        (path,) = env.find(envs.VideoRecorder).paths
    assert frames_of(path).shape[0] == steps + 1


def test_a_custom_env_without_a_final_frame_films_its_episodes_as_before(tmp_path):
    """``info["final_frame"]`` is optional: an env without it films T frames for T steps."""
    recorder = envs.VideoRecorder(FirstEpisodeOfOneStep(), tmp_path, prefix="custom", max_episodes=2)
    recorder.reset()
    for _ in range(5):  # env 0's episodes of 1, then 4 steps
        recorder.step(torch.zeros(2, 1))
    (path,) = recorder.paths
    assert path.name == "custom-episode1.mp4" and frames_of(path).shape[0] == 4


@pytest.mark.parametrize(("env_id", "action_chunk", "fps"), [
    ("gym:Hopper-v5", 1, 125),  # dt = 0.002 s x 4 frames: a fixed 30 fps played it at 0.24x
    ("gym:HalfCheetah-v5", 1, 20),  # dt = 0.01 s x 5: at 30 fps, 1.5x
    ("dmc:walker-walk", 1, 40),  # control_timestep 0.025 s (10 physics steps of 0.0025 s): at 30 fps, 0.75x
    ("gym:HalfCheetah-v5", 2, 10),  # a frame per agent step of 2 control steps
    ("dmc:walker-walk", 4, 10),
])
def test_the_video_plays_in_real_time_at_the_simulators_control_rate(tmp_path, env_id, action_chunk, fps):
    """The mp4's frame rate is the simulator's control steps per second over the action chunk; every video
    played at 30 frames a second, whatever the task's time step."""
    import imageio.v3 as iio

    with envs.make(env_id, num_envs=1, seed=0, max_episode_steps=3 * action_chunk, render_size=(32, 32),
                   action_chunk=action_chunk, video_dir=tmp_path, video_prefix="r") as env:
        env.reset()
        for _ in range(3):
            env.step(torch.zeros(1, env.act_dim))
        (path,) = env.find(envs.VideoRecorder).paths
    assert iio.immeta(path)["fps"] == pytest.approx(fps)


def test_the_control_rate_comes_from_the_simulators_own_time_step():
    """``render_fps`` of each backend, through the wrappers: gymnasium's ``1 / dt`` rather than its declared
    ``render_fps`` (Humanoid-v5 rounds it to 67, PointMaze declares 50 for its point env's 0.01 s step),
    dm_control's control step, and 30 where the env has no time step."""
    from dm_control import suite

    def rate(env_id, **kwargs):
        with envs.make(env_id, num_envs=1, normalize_obs=True, normalize_reward=True, **kwargs) as env:
            return env.render_fps

    assert rate("gym:Humanoid-v5") == pytest.approx(1 / 0.015)
    assert rate("gym:PointMaze_UMaze-v3") == pytest.approx(100)
    assert rate("gym:Pendulum-v1") == pytest.approx(20)  # dt 0.05 s, where it declares render_fps 30
    assert rate("gym:MountainCarContinuous-v0") == 30  # no dt: the render_fps it declares
    assert rate("dmc:cheetah-run") == pytest.approx(1 / suite.load("cheetah", "run").control_timestep()) == 100
    assert rate("genpol:MultiGoal") == envs.core.DEFAULT_RENDER_FPS == 30


@needs("envpool", "the envpool extra is not installed")
# EnvPool's classic-control Pendulum declares float64 bounds, which gymnasium's Box warns about as it casts them
@pytest.mark.filterwarnings("ignore:.*precision lowered by casting to float32:UserWarning")
def test_envpool_tasks_play_at_the_rate_of_the_model_they_load():
    """EnvPool gives no time step: its model's timestep times its frame_skip, as gymnasium's and dm_control's
    twins of the task (checked against every shared dm_control task when written); 30 for other families."""
    for task, fps in (("Hopper-v5", 125), ("HalfCheetah-v5", 20), ("Swimmer-v5", 25), ("WalkerWalk-v1", 40),
                      ("HumanoidCMURun-v1", 50), ("CheetahRun-v1", 100), ("Pendulum-v1", 30)):
        with envs.make_backend(f"envpool:{task}", num_envs=1) as env:
            assert env.render_fps == pytest.approx(fps), task
    with envs.make_backend("envpool:Hopper-v5", num_envs=1, env_kwargs={"frame_skip": 2}) as env:
        assert env.render_fps == pytest.approx(250)


class DeclaresItsRate(envs.VectorEnv):
    """A user's simulator of one env that declares its control rate (or a bad one)."""

    num_envs, device, obs_dim, act_dim = 1, torch.device("cpu"), 1, 1
    action_low, action_high = -torch.ones(1), torch.ones(1)

    def __init__(self, render_fps):
        self.render_fps = render_fps

    def reset(self, seed=None):
        return torch.zeros(1, 1)

    def step(self, actions):
        ended = torch.ones(1, dtype=torch.bool)
        return torch.zeros(1, 1), torch.zeros(1), ended, ~ended, {"final_obs": torch.zeros(1, 1)}


def test_a_custom_simulator_declares_its_own_rate_and_a_bad_one_is_named(tmp_path):
    from genpol.envs.custom import CustomVectorEnv

    assert CustomVectorEnv(DeclaresItsRate(500), "custom:t:make", 1, torch.device("cpu")).render_fps == 500.0
    recorder = envs.VideoRecorder(CustomVectorEnv(DeclaresItsRate(500), "custom:t:make", 1, torch.device("cpu")),
                                  tmp_path)
    assert recorder.fps == 500.0
    for bad in (0, -1.0, float("nan"), "fast", True):
        with pytest.raises(EnvError, match=r"render_fps must be a positive number \(control steps per second\)"):
            CustomVectorEnv(DeclaresItsRate(bad), "custom:t:make", 1, torch.device("cpu"))


def test_an_env_that_gives_no_frame_is_named_with_both_causes(tmp_path):
    """The message blamed render=True alone; a simulator of the user's that had been made with it, but
    implements no render() (VectorEnv's returns None), was told to do what it had done."""
    with envs.make("genpol:MultiGoal", num_envs=1, seed=0, max_episode_steps=6) as env:
        recorder = envs.VideoRecorder(env, tmp_path)  # MultiGoal made without render=True gives no frame
        with pytest.raises(RuntimeError, match=r"genpol:MultiGoal: render\(\) returned no frame: a video needs an env "
                                               r"made with render=True whose render\(\) returns env 0's RGB frame"):
            recorder.reset()  # the first frame is the reset's
    assert not list(tmp_path.iterdir())


def test_videos_of_a_process_running_playground_fork_no_python_code(tmp_path, monkeypatch):
    """JAX warns at every fork of a process whose backends run: a forked child that runs Python next to
    JAX's threads may deadlock. imageio-ffmpeg starts ffmpeg with a ``preexec_fn`` (every video of a
    Playground run warned); the stream starts it without one."""
    monkeypatch.delenv("IMAGEIO_FFMPEG_NO_PREVENT_SIGINT", raising=False)  # conftest's, for the tests' reads
    jax = pytest.importorskip("jax")
    jax.numpy.zeros(1).block_until_ready()  # JAX's backends run, as in a Playground run
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        with envs.make("genpol:MultiGoal", num_envs=1, seed=0, max_episode_steps=4, video_dir=tmp_path,
                       video_prefix="t") as env:
            env.reset()
            for _ in range(4):
                env.step(torch.zeros(1, env.act_dim))
            (path,) = env.find(envs.VideoRecorder).paths
    assert not [str(w.message) for w in caught if "fork" in str(w.message)]
    monkeypatch.setenv("IMAGEIO_FFMPEG_NO_PREVENT_SIGINT", "1")
    assert frames_of(path).shape[0] == 5  # the reset frame and 4 steps


@pytest.fixture
def failing_ffmpeg(tmp_path, monkeypatch):
    """An ``ffmpeg`` that fails as a real one does on a full disk or a bad codec: it writes a message to
    stderr and exits 3, after reading ``bytes_read`` bytes of its input (all of it: -1)."""
    import imageio_ffmpeg

    def install(bytes_read: int):
        script = tmp_path / "ffmpeg"
        reading = "cat > /dev/null" if bytes_read < 0 else f"head -c {bytes_read} > /dev/null"
        script.write_text(f"#!/bin/sh\n{reading}\necho 'x264: No space left on device' >&2\nexit 3\n")
        script.chmod(0o755)
        monkeypatch.setattr(imageio_ffmpeg, "get_ffmpeg_exe", lambda: str(script))

    return install


@pytest.mark.parametrize("bytes_read", [-1, 100], ids=["at-the-end", "mid-episode"])
def test_an_ffmpeg_failure_is_named_with_its_message_and_leaves_nothing(tmp_path, failing_ffmpeg, bytes_read):
    """ffmpeg exits 3 after the last frame (the stream's finish) or while frames still come (an append):
    the error carries its exit status and stderr, and no process, partial file or published video is left."""
    failing_ffmpeg(bytes_read)
    videos = tmp_path / "videos"
    stream = Mp4Stream(videos / "e.mp4")
    with pytest.raises(RuntimeError, match=r"ffmpeg (failed|stopped) writing .*e\.mp4 \(exit status 3\): "
                                           r"x264: No space left on device"):
        for frame in moving_square(60, 256, 256):  # 196 kB a frame: more than a pipe holds
            stream.append(frame)
        stream.finish()
    assert stream._process.returncode == 3 and stream._errors.closed
    assert list(videos.iterdir()) == []


def test_an_evaluation_cut_short_publishes_env_0s_video_up_to_the_cut(tmp_path, caplog):
    """``evaluate_episodes`` cuts episodes that outlast its step bound (an env without a time limit):
    env 0's video ends there instead of vanishing with the env."""
    from genpol.policy import evaluate_episodes

    with envs.make("genpol:MultiGoal", num_envs=2, seed=0, video_dir=tmp_path, video_prefix="cut") as env:
        results = evaluate_episodes(env, lambda obs: torch.zeros(obs.shape[0], env.act_dim), seed=0, max_steps=5)
        (path,) = env.find(envs.VideoRecorder).paths
    assert list(results.lengths) == [5, 5] and "2 of 2 evaluation episodes had not ended after 5 steps" in caplog.text
    assert path.name == "cut-episode0.mp4" and frames_of(path).shape[0] == 6  # the reset frame and 5 steps


class FirstEpisodeOfOneStep(envs.VectorEnv):
    """Two envs: env 0's episodes last 1, then 4 steps; env 1's last 6. Env 0's frames are 40 in its first
    episode, 140 in its second."""

    num_envs, device, obs_dim, act_dim, env_id = 2, torch.device("cpu"), 1, 1, "first-episode-of-one-step"
    action_low, action_high = -torch.ones(1), torch.ones(1)

    def reset(self, seed=None):
        self.t, self.episode = [0, 0], [0, 0]
        return torch.zeros(2, 1)

    def step(self, actions):
        ended = torch.zeros(2, dtype=torch.bool)
        for i, lengths in enumerate(([1, 4], [6])):
            self.t[i] += 1
            if self.t[i] >= lengths[min(self.episode[i], len(lengths) - 1)]:
                ended[i], self.t[i], self.episode[i] = True, 0, self.episode[i] + 1
        no_truncation = torch.zeros(2, dtype=torch.bool)
        return torch.zeros(2, 1), torch.ones(2), ended, no_truncation, {"final_obs": torch.zeros(2, 1)}

    def render(self):
        return np.full((16, 16, 3), 40 + 100 * self.episode[0], np.uint8)


def test_an_evaluated_episode_too_short_for_a_video_leaves_none_not_the_next_ones(tmp_path):
    """Evaluation films env 0's first episode (max_episodes=1). One too short for a file (one frame) left the
    count of files at 0, so the recorder went on to film env 0's second episode, which no evaluation counted,
    and published it as episode 0."""
    from genpol.policy import evaluate_episodes

    recorder = envs.VideoRecorder(FirstEpisodeOfOneStep(), tmp_path, prefix="deterministic", max_episodes=1)
    results = evaluate_episodes(recorder, lambda obs: torch.zeros(obs.shape[0], 1), seed=0)
    assert list(results.lengths) == [1, 6]
    assert recorder.paths == [] and not list(tmp_path.iterdir()) and recorder.episodes_ended == 1


def test_runs_named_alike_get_their_own_video_folder_and_find_it_again(tmp_path):
    """``runs/ppo/seed0`` and ``runs/sac/seed0`` both file videos as ``seed0``: the second run to ask gets
    the name with a digest of its directory; each finds its own folder again (a resume, genpol.evaluate)."""
    from genpol.runners.scaffold import VIDEO_OWNER, video_folder

    root = tmp_path / "videos"
    ppo, sac, sweep_job = tmp_path / "runs" / "ppo" / "seed0", tmp_path / "runs" / "sac" / "seed0", tmp_path / "sweep" / "3"
    first = video_folder(root, ppo)
    second = video_folder(root, sac)
    assert first == root / "seed0" and second.parent == root and second.name.startswith("seed0-") and second != first
    assert (first / VIDEO_OWNER).read_text().strip() == str(ppo.resolve())
    assert (second / VIDEO_OWNER).read_text().strip() == str(sac.resolve())
    assert video_folder(root, sac) == second and video_folder(root, ppo) == first
    assert video_folder(root, sweep_job) == root / "sweep_3"
    legacy = root / "old_run"  # a folder from before the markers: the first run that asks claims it
    legacy.mkdir()
    assert video_folder(root, tmp_path / "old_run") == legacy
    assert video_folder(root, tmp_path / "elsewhere" / "old_run") != legacy


def test_a_partial_file_of_a_killed_writer_is_removed_and_a_live_ones_kept(tmp_path):
    """Partial files carry their writer's pid (two evaluations of one run must not share one): a writer killed
    mid-video leaves its partial behind, which the next stream of that name removes; a live writer's stays."""
    import subprocess
    import sys

    finished = subprocess.Popen([sys.executable, "-c", "pass"])
    finished.wait()
    dead = tmp_path / f".a.mp4.{finished.pid}.partial"
    alive = tmp_path / f".a.mp4.{os.getppid()}.partial"
    dead.write_bytes(b"frames of a killed run"), alive.write_bytes(b"frames being written")
    stream = Mp4Stream(tmp_path / "a.mp4")
    assert not dead.exists() and alive.read_bytes() == b"frames being written"
    stream.abort()
