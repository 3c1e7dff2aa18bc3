"""The vector-env protocol, run against every backend, and the wrappers against independent math."""

import importlib.util

import numpy as np
import pytest
import torch

from genpol import envs
from genpol.envs import (ActionRescale, EnvError, EpisodeStats, ObservationNormalizer, RewardScaler,
                         RunningMeanStd)
from conftest import assert_trees_equal

NEEDS_ENVPOOL = pytest.mark.skipif(importlib.util.find_spec("envpool") is None,
                                   reason="the envpool extra is not installed")

# The protocol conformance suite runs against every backend. Playground keeps 4 envs throughout,
# so that its jitted functions compile once per (size, time limit).
BACKENDS = [
    pytest.param("gym:Hopper-v5", 3, id="gym-hopper"),
    pytest.param("gym:Pendulum-v1", 2, id="gym-pendulum"),
    pytest.param("dmc:cartpole-balance", 2, id="dmc-cartpole"),
    pytest.param("playground:CartpoleBalance", 4, id="playground-cartpole"),
    pytest.param("genpol:MultiGoal", 4, id="genpol-multigoal"),
    pytest.param("envpool:Hopper-v5", 3, id="envpool-hopper", marks=NEEDS_ENVPOOL),
    pytest.param("envpool:CheetahRun-v1", 2, id="envpool-dmc-cheetah", marks=NEEDS_ENVPOOL),
]


def rollout(env, steps, seed_actions=0):
    """Step with seeded random actions; return the list of step results."""
    generator = torch.Generator().manual_seed(seed_actions)
    results = []
    for _ in range(steps):
        actions = torch.rand(env.num_envs, env.act_dim, generator=generator) * 2 - 1
        results.append(env.step(actions))
    return results


@pytest.mark.parametrize("env_id,num_envs", BACKENDS)
def test_protocol_shapes_dtypes_device(env_id, num_envs):
    with envs.make(env_id, num_envs=num_envs, seed=0) as env:
        obs = env.reset()
        assert obs.shape == (num_envs, env.obs_dim) and obs.dtype == torch.float32
        assert obs.device == env.device == torch.device("cpu")
        assert env.action_low.shape == env.action_high.shape == (env.act_dim,)
        obs, reward, terminated, truncated, info = env.step(torch.zeros(num_envs, env.act_dim))
        assert obs.shape == (num_envs, env.obs_dim) and obs.dtype == torch.float32
        assert reward.shape == (num_envs,) and reward.dtype == torch.float32
        assert terminated.dtype == truncated.dtype == torch.bool
        assert terminated.shape == truncated.shape == (num_envs,)
        assert info["final_obs"].shape == (num_envs, env.obs_dim)


@pytest.mark.parametrize("env_id,num_envs", BACKENDS)
def test_reset_is_deterministic_under_a_seed(env_id, num_envs):
    def trajectory(seed):
        with envs.make(env_id, num_envs=num_envs) as env:
            first = env.reset(seed=seed)
            return [first] + [step[0] for step in rollout(env, 40)] + [step[1] for step in rollout(env, 40)]

    a, b, c = trajectory(3), trajectory(3), trajectory(4)
    assert all(torch.equal(x, y) for x, y in zip(a, b))
    if env_id != "genpol:MultiGoal":  # MultiGoal always starts at the origin
        assert not torch.equal(a[0], c[0])


def test_dm_controls_final_obs_is_the_new_obs_for_envs_whose_episode_goes_on():
    """Episodes that end at different steps (the protocol test's all end together): only the env that ended
    gets its last observation in final_obs; the others' rows are this step's observation, which the
    off-policy learners store as s'. dm_control's backend copied the rows of the envs after the first one
    that ended from the step before."""
    with envs.make_backend("dmc:cartpole-balance", num_envs=3, seed=0, max_episode_steps=5) as env:
        env.reset()
        env.step(torch.zeros(3, 1))
        env._steps[1] = 4  # env 1 alone reaches its limit at the next step
        obs, _, terminated, truncated, info = env.step(torch.full((3, 1), 0.5))
    assert truncated.tolist() == [False, True, False] and not terminated.any()
    assert torch.equal(info["final_obs"][[0, 2]], obs[[0, 2]])
    assert not torch.equal(info["final_obs"][1], obs[1])


@pytest.mark.parametrize("env_id,num_envs", BACKENDS)
def test_time_limit_truncates_with_true_final_obs_and_episode_stats(env_id, num_envs):
    limit = 40  # test_smoke.py's: Playground's jitted step, which holds the limit, compiles once for both
    with envs.make(env_id, num_envs=num_envs, seed=1, max_episode_steps=limit) as env:
        env.reset()
        total = torch.zeros(num_envs, dtype=torch.float64)
        length = torch.zeros(num_envs, dtype=torch.int64)
        saw_end = False
        for step in range(3 * limit):
            actions = torch.full((num_envs, env.act_dim), 0.3)
            next_obs, reward, terminated, truncated, info = env.step(actions)
            total += reward
            length += 1
            ended = terminated | truncated
            assert not (terminated & truncated).any()
            assert ended[length >= limit].all()  # every episode at the limit ends here
            assert not truncated[length < limit].any()  # and no earlier one is truncated
            if ended.any():
                saw_end = True
                # the final obs differs from the reset obs returned in its place
                assert not torch.allclose(info["final_obs"][ended], next_obs[ended])
                assert torch.allclose(info["episode_return"], total[ended].float(), atol=1e-4)
                assert torch.equal(info["episode_length"], length[ended])
                total[ended] = 0
                length[ended] = 0
            assert torch.equal(info["final_obs"][~ended], next_obs[~ended])
        assert saw_end


def test_termination_is_not_truncation():
    """Hopper falls over (terminated) long before its 1000-step limit (truncated)."""
    with envs.make("gym:Hopper-v5", num_envs=2, seed=0) as env:
        env.reset()
        terminated_any = truncated_any = False
        for _ in rollout(env, 200):
            terminated_any |= bool(_[2].any())
            truncated_any |= bool(_[3].any())
        assert terminated_any and not truncated_any


def test_unknown_ids_name_the_culprit_and_suggest():
    with pytest.raises(EnvError, match=r"gym:, dmc:, playground:, envpool:, genpol:.*Did you mean .gym:HalfCheetah-v5."):
        envs.make("HalfCheetah-v5")
    with pytest.raises(EnvError, match=r"unknown gymnasium id 'gym:HalfChetah-v5'.*gym:HalfCheetah-v5"):
        envs.make("gym:HalfChetah-v5")
    with pytest.raises(EnvError, match=r"known prefixes|backend prefix"):
        envs.make("mjx:Whatever")
    with pytest.raises(EnvError, match="genpol:MultiGoal"):
        envs.make("genpol:MultiGoals")
    # registered but not buildable (D4RL's mujoco-py era; a missing extra): one EnvError, not the package's traceback
    with pytest.raises(EnvError, match=r"^gym:Hopper-v3 is registered but cannot be built: .* Use gym:Hopper-v5\.$"), \
            pytest.warns(DeprecationWarning, match="Hopper-v3 is out of date"):  # gymnasium's own, at the make
        envs.make("gym:Hopper-v3")


def test_multigoal_softlearning_reward_by_hand():
    """env=multigoal_softlearning's task (soft Q-learning's MultiGoalEnv): from the origin, (1, 0) costs
    30 + (5 - 1)^2 = 46, the corner (1, 1) 60 + 4^2 + 1 = 77, staying 25; within 1 of a goal the episode ends
    with +10 (from (3.5, 0), (1, 0) lands 0.5 away: -30 - 0.25 + 10); positions stop at +-7; an unknown reward
    is named; the yaml holds those settings. genpol's default progress reward pays (1, 0) and (1, 1) nearly
    alike (1 - 0.05 and 5 - sqrt(17) - 0.1 = 0.777)."""
    import math

    from genpol.api import compose_config
    from genpol.envs.multigoal import MultiGoal

    kwargs = dict(compose_config(["run_dir=/tmp/x", "env=multigoal_softlearning"]).env.kwargs)
    assert kwargs == dict(reward="softlearning", actuation_cost=30.0, distance_cost=1.0, goal_radius=1.0,
                          init_noise=0.1, bound=7.0)
    env = MultiGoal(num_envs=5, seed=0, **kwargs)  # unwrapped, to place the agents
    start = env.reset()
    assert 0 < start.abs().max() < 0.5  # N(0, 0.1^2)
    env.position = torch.tensor([[0.0, 0.0], [0.0, 0.0], [0.0, 0.0], [3.5, 0.0], [6.5, 6.5]])
    _, reward, terminated, _, info = env.step(torch.tensor([[1.0, 0.0], [1.0, 1.0], [0.0, 0.0], [1.0, 0.0], [1.0, 1.0]]))
    torch.testing.assert_close(reward[:4], torch.tensor([-46.0, -77.0, -25.0, -30.0 - 0.25 + 10.0]))
    assert terminated.tolist() == [False, False, False, True, False]
    assert info["final_obs"][4].tolist() == [7.0, 7.0]
    progress = MultiGoal(num_envs=2, seed=0)
    progress.reset()
    _, reward, _, _, _ = progress.step(torch.tensor([[1.0, 0.0], [1.0, 1.0]]))
    torch.testing.assert_close(reward, torch.tensor([0.95, 5 - math.sqrt(17) - 0.1]))
    with pytest.raises(ValueError, match="MultiGoal reward must be one of"):
        envs.make("genpol:MultiGoal", env_kwargs={"reward": "sql"})


def test_discrete_action_space_is_refused():
    with pytest.raises(EnvError, match="1-D Box action space"):
        envs.make("gym:CartPole-v1")


@pytest.mark.parametrize("env_id", ["dmc:cheetah-run", "gym:Pendulum-v1", "genpol:MultiGoal",
                                    pytest.param("envpool:Hopper-v5", marks=NEEDS_ENVPOOL)])
@pytest.mark.parametrize("argument,value", [("num_envs", 0), ("num_envs", True), ("num_envs", 2.0),
                                            ("max_episode_steps", 0), ("max_episode_steps", -3)])
def test_bad_counts_are_env_errors_naming_the_argument(env_id, argument, value):
    """The Python API skips the config's checks: num_envs=0 was an IndexError (dm_control) or a bare
    AssertionError (EnvPool), and dm_control read max_episode_steps=0 as unset after lifting the suite's limit,
    so the task ran with no time limit at all."""
    for make in (envs.make, envs.make_backend):
        with pytest.raises(EnvError, match=rf"^{env_id}: {argument} must be .*an int >= 1, got {value!r}$"):
            make(env_id, **{argument: value}).close()  # close: an env that is (wrongly) built


def test_multigoal_resume_with_start_noise_is_exact():
    """The start generator is in the state: a restored MultiGoal draws the same starts as the saved one."""
    kwargs = dict(num_envs=4, max_episode_steps=5, env_kwargs={"init_noise": 0.5})
    with envs.make("genpol:MultiGoal", seed=5, **kwargs) as env:
        env.reset()
        rollout(env, 13, seed_actions=1)
        state = env.state_dict()
        expected = rollout(env, 20, seed_actions=2)
    with envs.make("genpol:MultiGoal", seed=99, **kwargs) as fresh:
        fresh.reset()
        fresh.load_state_dict(state)
        got = rollout(fresh, 20, seed_actions=2)
    for (o1, r1, te1, tr1, _), (o2, r2, te2, tr2, _) in zip(expected, got):
        assert torch.equal(o1, o2) and torch.equal(r1, r2) and torch.equal(te1, te2) and torch.equal(tr1, tr2)


@pytest.mark.parametrize("env_id", ["gym:HalfCheetah-v5", "genpol:MultiGoal"])
def test_wrong_action_shape_is_a_clear_error(env_id):
    with envs.make(env_id, num_envs=2, seed=0) as env:
        env.reset()
        with pytest.raises(EnvError, match=r"expects actions of shape \[num_envs, act_dim\] = \[2, \d\], got \[2, 1\]"):
            env.step(torch.zeros(2, 1))


@pytest.mark.parametrize("env_id,kwargs", [
    ("gym:Hopper-v5", {}), ("gym:Hopper-v5", {"workers": 2}), ("dmc:cartpole-balance", {}), ("genpol:MultiGoal", {}),
    pytest.param("envpool:Hopper-v5", {}, marks=NEEDS_ENVPOOL),
    pytest.param("envpool:Hopper-v5", {"step_groups": 3}, marks=NEEDS_ENVPOOL),
], ids=["gym", "gym-workers", "dmc", "multigoal", "envpool", "envpool-groups"])
def test_a_non_finite_action_names_its_env_and_dimension(env_id, kwargs):
    """MuJoCo stepped a NaN action with one warning, and the NaN rewards then poisoned a reward normalizer's
    statistics for good; dm_control's PhysicsError named neither env nor action. The env (by its global index,
    also behind worker processes and step groups) and the dimension are named, and the envs step on."""
    with envs.make(env_id, num_envs=3, seed=0, **kwargs) as env:
        env.reset()
        actions = torch.zeros(3, env.act_dim)
        actions[2, env.act_dim - 1] = float("nan")
        with pytest.raises(EnvError, match=rf"^{env_id}: a non-finite action \(NaN or inf\) for env\(s\) \[2\] in "
                                           rf"action dimension\(s\) \[{env.act_dim - 1}\]"):
            env.step(actions)
        assert torch.isfinite(env.step(torch.zeros(3, env.act_dim))[1]).all()


def test_running_mean_std_matches_numpy_on_the_concatenated_stream():
    rng = np.random.default_rng(0)
    batches = [rng.normal(3.0, 2.0, size=(n, 5)) for n in (1, 7, 16, 3)]
    stats = RunningMeanStd((5,), torch.device("cpu"))
    for batch in batches:
        stats.update(torch.from_numpy(batch))
    data = np.concatenate(batches)
    # count starts at 1e-4 with mean 0 and var 1: a prior worth 1e-4 samples, negligible here
    np.testing.assert_allclose(stats.mean.numpy(), data.mean(0), rtol=1e-5)
    np.testing.assert_allclose(stats.var.numpy(), data.var(0), rtol=1e-4)
    assert stats.count == pytest.approx(len(data) + 1e-4)


def test_action_rescale_maps_unit_box_to_bounds_and_clips():
    with envs.make("gym:Pendulum-v1", num_envs=1, seed=0, rescale_actions=False) as raw:
        assert raw.action_high.tolist() == [2.0]
    env = envs.make("gym:Pendulum-v1", num_envs=3, seed=0)
    rescale = env.find(ActionRescale)
    assert rescale.action_low.tolist() == [-1.0] and rescale.action_high.tolist() == [1.0]
    seen = []
    inner_step = rescale.env.step
    rescale.env.step = lambda a: (seen.append(a.clone()), inner_step(a))[1]
    env.reset()
    env.step(torch.tensor([[-1.0], [0.25], [7.0]]))
    assert torch.allclose(seen[0], torch.tensor([[-2.0], [0.5], [2.0]]))
    env.close()
    # bounds given low above high mirrored that dimension without a word (gymnasium's rescale_box refuses them)
    with pytest.raises(ValueError, match=r"action bounds must have low <= high, got 1.0 > -1.0 in dimension 0$"):
        envs.make("gym:Pendulum-v1", num_envs=1, action_bounds=(torch.tensor([1.0]), torch.tensor([-1.0])))


def test_observation_normalizer_statistics_and_freezing():
    env = ObservationNormalizer(EpisodeStats(envs.make_backend("gym:Hopper-v5", num_envs=4, seed=0)))
    raw_obs = [env.env.reset(seed=0)]
    env.stats.update(raw_obs[0])
    normalized = env.normalize(raw_obs[0])
    expected = ((raw_obs[0].double() - env.stats.mean) / torch.sqrt(env.stats.var + 1e-8)).clamp(-10, 10)
    assert torch.allclose(normalized, expected.float())
    env.frozen = True
    before = env.stats.state_dict()
    env.step(torch.zeros(4, 3))
    assert torch.equal(before["mean"], env.stats.mean) and before["count"] == env.stats.count
    env.frozen = False
    env.step(torch.zeros(4, 3))
    assert env.stats.count > before["count"]
    env.close()


def test_reward_scaler_divides_by_running_return_std():
    """r / sqrt(Var[R] + eps) with R <- gamma R + r, Var over every R seen so far (plus the
    RunningMeanStd prior: mean 0, var 1, weight 1e-4), R restarting at episode ends."""
    raw = envs.make("genpol:MultiGoal", num_envs=3, seed=0, max_episode_steps=5)
    scaled = RewardScaler(envs.make("genpol:MultiGoal", num_envs=3, seed=0, max_episode_steps=5),
                          gamma=0.9, clip=100.0)
    raw.reset(), scaled.reset()
    generator = torch.Generator().manual_seed(0)
    discounted = torch.zeros(3, dtype=torch.float64)
    seen = []
    for _ in range(12):
        actions = torch.rand(3, 2, generator=generator) * 2 - 1
        _, reward, terminated, truncated, _ = raw.step(actions)
        _, reward_scaled, _, _, _ = scaled.step(actions)
        discounted = discounted * 0.9 + reward.double()
        seen.append(discounted.clone())
        data = torch.cat(seen)
        n, prior = len(data), 1e-4
        var = (prior * 1.0 + n * data.var(correction=0) + prior * n / (n + prior) * data.mean() ** 2) / (n + prior)
        expected = reward.double() / torch.sqrt(var + 1e-8)
        assert torch.allclose(reward_scaled.double(), expected, rtol=1e-5, atol=1e-6)
        discounted[terminated | truncated] = 0
    raw.close(), scaled.close()


@pytest.mark.parametrize("env_id", ["gym:Hopper-v5", "gym:Ant-v5", "gym:Pendulum-v1", "dmc:cheetah-run",
                                    "dmc:reacher-easy", "dmc:quadruped-escape", "dmc:point_mass-hard",
                                    "dmc:lqr-lqr_2_1", "playground:CartpoleBalance", "genpol:MultiGoal",
                                    "gym:AdroitHandPen-v1"])
def test_state_dict_continues_the_episode_exactly(env_id):
    """Saving mid-episode and restoring into a fresh env reproduces the rest bit for bit (Ant's reward
    reads derived body positions; reacher's target lives in the model, drawn at reset; quadruped-escape's
    terrain and point_mass-hard's gains too, and lqr builds its model from the seed it is loaded with; the Adroit
    pen's target orientation is drawn into the model at reset: its resume was 0.7 off, marked exact)."""
    env = envs.make(env_id, num_envs=4, seed=5, normalize_obs=True, normalize_reward=True)
    env.reset()
    rollout(env, 25, seed_actions=1)
    state = env.state_dict()
    expected = rollout(env, 60, seed_actions=2)
    env.close()
    fresh = envs.make(env_id, num_envs=4, seed=99, normalize_obs=True, normalize_reward=True)
    fresh.reset()
    fresh.load_state_dict(state)
    got = rollout(fresh, 60, seed_actions=2)
    fresh.close()
    for (o1, r1, te1, tr1, _), (o2, r2, te2, tr2, _) in zip(expected, got):
        assert torch.equal(o1, o2) and torch.equal(r1, r2) and torch.equal(te1, te2) and torch.equal(tr1, tr2)


def test_a_state_of_another_env_count_is_named_before_any_wrapper_loads():
    """4 envs' state into 3: the reward scaler's copy_ failed first, with a shape error, its statistics already
    replaced; the backend names the culprit."""
    with envs.make("gym:Pendulum-v1", num_envs=4, seed=0, normalize_obs=True, normalize_reward=True) as env:
        env.reset()
        rollout(env, 3)
        state = env.state_dict()
    with envs.make("gym:Pendulum-v1", num_envs=3, seed=0, normalize_obs=True, normalize_reward=True) as other:
        other.reset()
        before = other.find(envs.RewardScaler).own_state()
        with pytest.raises(envs.EnvError, match="saved state holds 4 envs, this env has 3"):
            other.load_state_dict(state)
        assert_trees_equal(other.find(envs.RewardScaler).own_state(), before)


@pytest.mark.parametrize("env_id", ["gym:HalfCheetah-v5", "dmc:cheetah-run", "genpol:MultiGoal",
                                    pytest.param("envpool:HalfCheetah-v5", marks=NEEDS_ENVPOOL)])
def test_video_recorder_writes_a_decodable_nonblank_mp4(tmp_path, env_id):
    import imageio.v3 as iio

    with envs.make(env_id, num_envs=2, seed=0, max_episode_steps=20, video_dir=tmp_path, video_prefix="t") as env:
        env.reset()
        rollout(env, 20)
        paths = env.find(envs.VideoRecorder).paths
    assert [p.name for p in paths] == ["t-episode0.mp4"]
    frames = iio.imread(paths[0])
    # the reset frame and the states after steps 1..20, the last drawn by the backend before its auto-reset
    # (info["final_frame"]; render() after the step shows the next episode's first state)
    assert frames.shape[0] == 21 and frames.shape[-1] == 3
    assert frames.std() > 10, "frames are blank"
    assert np.abs(frames[0].astype(float) - frames[-1].astype(float)).mean() > 0.5, "nothing moves"


def test_dm_control_flattens_observations_in_spec_order_and_names_unknown_tasks():
    from dm_control import suite

    with envs.make_backend("dmc:cheetah-run", num_envs=1, seed=0) as env:
        assert env.observation_keys == ["position", "velocity"] and env.obs_dim == 8 + 9
        obs = env.reset(seed=3)
        reference = suite.load("cheetah", "run", task_kwargs={"random": 3}).reset().observation
        assert torch.allclose(obs[0].double(), torch.from_numpy(np.concatenate(
            [reference["position"], reference["velocity"]])), atol=1e-6)
    with pytest.raises(EnvError, match=r"unknown dm_control task 'dmc:cheetah-runn'.*dmc:cheetah-run"):
        envs.make("dmc:cheetah-runn")


def test_dm_control_time_limit_truncates():
    with envs.make("dmc:cartpole-balance", num_envs=1, seed=0) as env:
        env.reset()
        for step in range(1000):
            _, _, terminated, truncated, _ = env.step(torch.zeros(1, 1))
        assert truncated.item() and not terminated.item() and env.max_episode_steps == 1000


@pytest.mark.parametrize("env_id", ["gym:Hopper-v5", "dmc:cartpole-balance", "genpol:MultiGoal"])
def test_action_chunks_sum_rewards_and_stop_at_the_episode_end(env_id):
    """A 6-step time limit and chunks of 4: the first agent step runs 4 env steps, the second only 2
    (the episode ends inside the chunk, the rest of the chunk is dropped), with the same rewards and
    final observation as stepping the unchunked env."""
    plain = envs.make(env_id, num_envs=1, seed=3, max_episode_steps=6)
    chunked = envs.make(env_id, num_envs=1, seed=3, max_episode_steps=6, action_chunk=4)
    assert chunked.act_dim == 4 * plain.act_dim
    assert torch.equal(chunked.action_low, plain.action_low.repeat(4))
    plain.reset(), chunked.reset()
    actions = torch.rand(8, plain.act_dim, generator=torch.Generator().manual_seed(0)) * 1.6 - 0.8
    rewards, final = [], None
    for t in range(6):
        _, reward, terminated, truncated, info = plain.step(actions[t:t + 1])
        rewards.append(reward.item())
        final = info["final_obs"]
    assert truncated.item()
    _, reward1, term1, trunc1, info1 = chunked.step(actions[0:4].reshape(1, -1))
    assert info1["env_steps"].tolist() == [4] and not (term1 | trunc1).item()
    assert reward1.item() == pytest.approx(sum(rewards[:4]), rel=1e-5)
    _, reward2, term2, trunc2, info2 = chunked.step(actions[4:8].reshape(1, -1))
    assert info2["env_steps"].tolist() == [2] and trunc2.item() and not term2.item()
    assert reward2.item() == pytest.approx(sum(rewards[4:6]), rel=1e-5)
    assert torch.allclose(info2["final_obs"], final)
    assert info2["episode_length"].tolist() == [6]  # episode statistics count env steps
    assert info2["episode_return"].item() == pytest.approx(sum(rewards), rel=1e-5)
    # and so do evaluation's lengths (they counted the 2 agent steps)
    from genpol.policy import evaluate_episodes

    results = evaluate_episodes(chunked, lambda obs: torch.zeros(1, chunked.act_dim), seed=3)
    assert results.lengths.tolist() == [6]
    plain.close(), chunked.close()


def test_returned_observations_are_not_overwritten_by_the_next_step():
    """gymnasium reuses its observation buffer; float32 observation spaces (Pendulum) must still
    hand out tensors that the next step leaves alone."""
    with envs.make_backend("gym:Pendulum-v1", num_envs=2, seed=0) as env:
        first = env.reset()
        kept = first.clone()
        second = env.step(torch.ones(2, 1))[0]
        assert torch.equal(first, kept) and first.data_ptr() != second.data_ptr()
