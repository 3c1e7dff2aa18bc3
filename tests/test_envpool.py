"""The EnvPool backend against raw EnvPool: genpol's same-step auto-reset and true final observations
are EnvPool's next-step reset moved forward, nothing else; its resume is inexact and says so."""

import numpy as np
import pytest
import torch

from genpol import envs
from genpol.envs import EnvError

from conftest import needs

pytestmark = needs("envpool", "the envpool extra is not installed")


@pytest.mark.parametrize("task", ["Hopper-v5", "CheetahRun-v1"])
def test_steps_match_raw_envpool_with_the_reset_moved_into_the_ending_step(task):
    import envpool

    limit, num_envs = 4, 3
    raw = envpool.make(task, env_type="gymnasium", num_envs=num_envs, seed=7, max_episode_steps=limit)
    ours = envs.make_backend(f"envpool:{task}", num_envs=num_envs, seed=7, max_episode_steps=limit)

    def flat(obs):
        return np.concatenate([obs[k].reshape(num_envs, -1) for k in ours.observation_keys], 1) \
            if ours.observation_keys else obs

    raw_obs = flat(raw.reset()[0])
    assert np.allclose(ours.reset().numpy(), raw_obs, atol=1e-6)
    actions = np.random.default_rng(0).uniform(-1, 1, (3 * limit, num_envs, ours.act_dim))
    for t in range(3 * limit):
        raw_obs, raw_reward, raw_term, raw_trunc, _ = raw.step(actions[t])
        obs, reward, terminated, truncated, info = ours.step(torch.as_tensor(actions[t], dtype=torch.float32))
        assert np.allclose(reward.numpy(), raw_reward, atol=1e-5)
        assert np.array_equal(truncated.numpy(), raw_trunc) and np.array_equal(terminated.numpy(), raw_term)
        assert np.allclose(info["final_obs"].numpy(), flat(raw_obs), atol=1e-5)
        if (raw_term | raw_trunc).all():  # every env ends together at the time limit: EnvPool resets them next
            raw_obs = raw.step(np.zeros_like(actions[t]))[0]
        assert np.allclose(obs.numpy(), flat(raw_obs), atol=1e-5)
    raw.close(), ours.close()


def test_a_fall_on_the_time_limits_step_is_reported_truncated_only():
    """The backend's documented exception: EnvPool's state cannot tell a fall on the limit's step from a
    time-out, so both come back truncated. If EnvPool learns to, this fails and the docstring must change."""
    import envpool

    actions = np.random.default_rng(0).uniform(-1, 1, (200, 1, 3))
    raw = envpool.make("Hopper-v5", env_type="gymnasium", num_envs=1, seed=3)
    raw.reset()
    fall = next(t + 1 for t in range(200) if raw.step(actions[t])[2][0])  # the step on which it falls, no limit
    raw.close()
    with envs.make_backend("envpool:Hopper-v5", num_envs=1, seed=3, max_episode_steps=fall) as env:
        env.reset()
        for t in range(fall):
            _, _, terminated, truncated, _ = env.step(torch.as_tensor(actions[t], dtype=torch.float32))
        assert truncated.tolist() == [True] and terminated.tolist() == [False]


def test_dm_control_observations_flatten_in_the_spaces_key_order():
    with envs.make_backend("envpool:CheetahRun-v1", num_envs=1, seed=0) as env:
        assert env.observation_keys == ["position", "velocity"] and env.obs_dim == 8 + 9
        assert env.max_episode_steps == 1000


def test_unknown_task_names_the_culprit_and_suggests():
    with pytest.raises(EnvError, match=r"unknown EnvPool task 'envpool:HalfChetah-v5'.*envpool:HalfCheetah-v5"):
        envs.make("envpool:HalfChetah-v5")
    with pytest.raises(EnvError, match=r"action chunks are not supported by the EnvPool backend"):
        envs.make("envpool:Hopper-v5", action_chunk=2)


def test_resume_resets_repeatably_with_a_warning():
    with envs.make("envpool:Hopper-v5", num_envs=2, seed=3) as env:
        env.reset()
        for _ in range(5):
            env.step(torch.zeros(2, 3))
        state = env.state_dict()

    def resumed_obs():
        with envs.make("envpool:Hopper-v5", num_envs=2) as fresh, \
                pytest.warns(RuntimeWarning, match="EnvPool exposes no simulator state.*reset \\(seed 8\\)"):
            fresh.load_state_dict(state)
            return fresh.step(torch.zeros(2, 3))[0]

    assert torch.equal(resumed_obs(), resumed_obs())
