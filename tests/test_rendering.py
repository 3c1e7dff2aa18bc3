"""Evaluation videos keep a textured floor under a robot that runs far (``genpol.envs.rendering``)."""

import dataclasses

import mujoco
import numpy as np
import pytest
import torch

from genpol import envs
from genpol.envs.rendering import FloorFollowingRenderer, find_floors, floor_shift

# Open-loop gaits a_j(t) = sin(2 pi f t + phase_j), found by random search over (f, phases): the
# first runs gymnasium's HalfCheetah about 100 m forward in 1000 steps (its floor ends at 40 m), the
# second runs dm_control's cheetah about 12 m backward (its floor strip ends 2 m behind the start).
GAITS = {
    "gym:HalfCheetah-v5": dict(dt=0.05, frequency=3.3, phases=[0.16, 1.4, 3.96, 0.83, 2.64, 1.87],
                               camera="track", min_distance=60.0),
    "dmc:cheetah-run": dict(dt=0.01, frequency=3.867, phases=[0.37, 1.31, 3.54, 4.84, 0.4, 1.16],
                            camera=0, min_distance=8.0),
}
SIZE = (128, 128)


def simulation(env):
    """(model, data) of env 0 of a gym or dm_control backend."""
    inner = envs.innermost(env)
    if env.env_id.startswith("gym:"):
        unwrapped = inner._envs.envs[0].unwrapped
        return unwrapped.model, unwrapped.data
    physics = inner._envs[0].physics
    return physics.model.ptr, physics.data.ptr


def floor_fraction(renderer, data, floor_id):
    """Fraction of the frame's pixels that show the floor geom."""
    segments = renderer.segment(data)
    return float(((segments[..., 0] == floor_id) & (segments[..., 1] == mujoco.mjtObj.mjOBJ_GEOM)).mean())


def checker_contrast(frame):
    """Mean absolute difference of neighbouring pixels in the bottom fifth: high on a checker floor,
    low on the smooth sky gradient a robot sees once it has run off the drawn floor."""
    bottom = frame[int(0.8 * frame.shape[0]):].astype(float)
    return np.abs(np.diff(bottom, axis=1)).mean() + np.abs(np.diff(bottom, axis=0)).mean()


@pytest.mark.parametrize("env_id", list(GAITS))
def test_the_floor_stays_in_view_for_a_long_run(env_id):
    gait = GAITS[env_id]
    phases = torch.tensor(gait["phases"])
    env = envs.make(env_id, num_envs=1, seed=0, render=True, render_size=SIZE, max_episode_steps=2000)
    env.reset()
    model, data = simulation(env)
    (floor,) = find_floors(model)
    following = FloorFollowingRenderer(model, *SIZE, camera=gait["camera"])
    fixed = FloorFollowingRenderer(model, *SIZE, camera=gait["camera"], follow_floor=False)
    try:
        first_frame, first_floor = env.render(), floor_fraction(following, data, floor.geom_id)
        start = float(data.qpos[0])
        for t in range(1000):
            env.step(torch.sin(2 * np.pi * gait["frequency"] * t * gait["dt"] + phases)[None].float())
        assert abs(float(data.qpos[0]) - start) > gait["min_distance"], "the gait no longer runs far"
        last_frame = env.render()
        assert first_floor > 0.05
        assert floor_fraction(following, data, floor.geom_id) > 0.5 * first_floor
        # the model's own floor rectangle is out of view by now: the check can fail
        assert floor_fraction(fixed, data, floor.geom_id) < 0.01
        if env_id.startswith("gym:"):  # a black and light-green checker; dm_control's is dark blue on a dark blue sky
            assert checker_contrast(last_frame) > 0.5 * checker_contrast(first_frame)
            assert checker_contrast(fixed.render(data)) < 0.3 * checker_contrast(first_frame)
    finally:
        following.close()
        fixed.close()
        env.close()


@pytest.mark.parametrize("env_id", list(GAITS))
def test_rendering_leaves_the_physics_unchanged(env_id):
    """The same seeded rollout with a frame rendered after every step and without rendering."""
    rollouts = []
    for render in (True, False):
        env = envs.make(env_id, num_envs=1, seed=3, render=render, render_size=(64, 64))
        model, _ = simulation(env)
        before = (model.geom_size.copy(), model.geom_pos.copy(), model.mat_texrepeat.copy())
        generator = torch.Generator().manual_seed(0)
        steps = [env.reset()]
        for _ in range(100):
            obs, reward, terminated, truncated, _ = env.step(torch.rand(1, env.act_dim, generator=generator) * 2 - 1)
            steps += [obs, reward, terminated, truncated]
            if render:
                assert env.render().shape == (64, 64, 3)
        after = (model.geom_size, model.geom_pos, model.mat_texrepeat)
        assert all(np.array_equal(b, a) for b, a in zip(before, after)), "rendering edited the model"
        env.close()
        rollouts.append(steps)
    assert all(torch.equal(a, b) for a, b in zip(*rollouts))


def test_texture_periods_follow_mujocos_plane_mapping():
    """Non-uniform checker: 2 * half-size / texrepeat (HalfCheetah: 80 m / 60); uniform: 2 / texrepeat
    (dm_control's grid, texrepeat 1). A shift by whole periods leaves the anchor within half a period."""
    import gymnasium as gym
    from dm_control import suite

    (cheetah_floor,) = find_floors(gym.make("HalfCheetah-v5").unwrapped.model)
    np.testing.assert_allclose(cheetah_floor.period, [80 / 60, 80 / 60])
    (dmc_floor,) = find_floors(suite.load("cheetah", "run").physics.model.ptr)
    np.testing.assert_allclose(dmc_floor.period, [2.0, 2.0])
    np.testing.assert_allclose(dmc_floor.center, [98.0, 0.0, 0.0])
    # by hand: 100.3 m / (4/3 m) = 75.2 -> 75 periods = 100 m; 0.2 m -> 0 periods
    np.testing.assert_allclose(floor_shift(cheetah_floor, np.array([100.3, 0.2, 0.5])), [100.0, 0.0, 0.0], atol=1e-9)
    # dm_control's strip, centred at x = 98: -3.1 - 98 = -101.1 m -> -51 periods of 2 m = -102 m
    np.testing.assert_allclose(floor_shift(dmc_floor, np.array([-3.1, 0.0, 0.3])), [-102.0, 0.0, 0.0], atol=1e-9)


def test_a_whole_period_shift_leaves_the_checker_in_place():
    """Against the real texture mapping: moving the drawn floor by one computed period changes the
    frame's floor by a rounding error, by half a period it swaps black and light squares."""
    import gymnasium as gym

    env = gym.make("HalfCheetah-v5").unwrapped
    env.reset(seed=0)
    renderer = FloorFollowingRenderer(env.model, *SIZE, camera="track")
    try:
        (floor,) = renderer.floors.values()
        frames = []
        for offset in (0.0, floor.period[0], floor.period[0] / 2):
            moved = dataclasses.replace(floor, center=floor.center + np.array([offset, 0.0, 0.0]))
            renderer.floors = {floor.geom_id: moved}
            frames.append(renderer.render(env.data)[int(0.8 * SIZE[1]):].astype(float))
    finally:
        renderer.close()
        env.close()
    assert np.abs(frames[1] - frames[0]).mean() < 2.0
    assert np.abs(frames[2] - frames[0]).mean() > 30.0


def test_every_frame_of_a_long_halfcheetah_video_shows_the_floor(tmp_path):
    """The mp4 that ``VideoRecorder`` writes for a whole 600-step episode (a time limit ends it; the
    cheetah is past the drawn floor's 40 m edge for its last ~150 frames): the bottom of every decoded
    frame keeps the checker contrast of the first."""
    import imageio.v3 as iio

    gait = GAITS["gym:HalfCheetah-v5"]
    phases = torch.tensor(gait["phases"])
    with envs.make("gym:HalfCheetah-v5", num_envs=1, seed=0, video_dir=tmp_path, video_prefix="run",
                   render_size=(48, 48), max_episode_steps=600) as env:
        env.reset()
        _, data = simulation(env)
        for t in range(600):
            if t == 599:  # before the last step, which resets the episode
                assert float(data.qpos[0]) > 50.0, "the gait no longer runs far"
            env.step(torch.sin(2 * np.pi * gait["frequency"] * t * gait["dt"] + phases)[None].float())
        (path,) = env.find(envs.VideoRecorder).paths
    frames = iio.imread(path)
    assert frames.shape == (601, 48, 48, 3)  # the reset state and the state after each of the 600 steps
    contrast = np.array([checker_contrast(frame) for frame in frames])
    assert contrast.min() > 0.5 * contrast[0], f"frame {contrast.argmin()} lost the floor"


@pytest.mark.parametrize("step_groups", [0, 2])
def test_envpool_halfcheetah_frames_keep_the_floor_and_follow_env0_across_resets(step_groups):
    """EnvPool's HalfCheetah is drawn from a gymnasium twin (``genpol.envs.envpool_render``): the last frame of a
    1000-step run ~100 m past the start still shows the checker, and after env 0's episode ends the
    frame shows the new episode's pose, not the old one. Env 1 stands still (zero actions), so drawing
    env 1 instead of env 0 fails the distance check; with two step groups env 0 is group 0's."""
    pytest.importorskip("envpool", reason="the envpool extra is not installed")
    gait = GAITS["gym:HalfCheetah-v5"]
    phases = torch.tensor(gait["phases"])

    def gait_actions(t):
        running = torch.sin(2 * np.pi * gait["frequency"] * t * gait["dt"] + phases)[None].float()
        return torch.cat([running, torch.zeros_like(running)])

    with envs.make_backend("envpool:HalfCheetah-v5", num_envs=2, seed=0, render=True, render_size=SIZE,
                           max_episode_steps=1000, step_groups=step_groups) as env:
        twin = env._twin
        assert twin is not None, "HalfCheetah-v5 should be drawn by the twin"
        with pytest.raises(envs.EnvError, match="render.. before reset"):
            env.render()
        env.reset()
        first_frame = env.render()
        for t in range(999):
            env.step(gait_actions(t))
        last_frame = env.render()
        assert float(twin.data.qpos[0]) > gait["min_distance"], "the gait no longer runs far (or env 1 is drawn)"
        fixed = FloorFollowingRenderer(twin.model, *SIZE, camera="track", follow_floor=False)
        try:  # where the model puts its floor, it is out of view by now: the check can fail
            assert checker_contrast(fixed.render(twin.data)) < 0.3 * checker_contrast(first_frame)
        finally:
            fixed.close()
        assert checker_contrast(last_frame) > 0.5 * checker_contrast(first_frame)
        env.step(gait_actions(999))  # the time limit ends both episodes; the frame is the new episode's
        env.render()
        assert abs(float(twin.data.qpos[0])) < 1.0


def test_envpool_keeps_its_own_renderer_when_the_twin_would_misread_the_observation():
    """With x in EnvPool's observation (exclude_current_positions_from_observation=False) the twin's
    default layout would shift the pose by one coordinate, so EnvPool draws the frames itself."""
    pytest.importorskip("envpool", reason="the envpool extra is not installed")
    with envs.make_backend("envpool:Hopper-v5", num_envs=1, seed=0, render=True, render_size=SIZE,
                           env_kwargs={"exclude_current_positions_from_observation": False}) as env:
        assert env.obs_dim == 12 and env._twin is None
        env.reset()
        assert env.render().shape == (*SIZE[::-1], 3)
