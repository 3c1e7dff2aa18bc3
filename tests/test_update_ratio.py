"""learner.utd below 1 or fractional: the off-policy learners accrue num_envs x utd gradient steps per vector
step as an exact fraction and take the whole ones (SB3's train_freq, Ding & Jin's one step every 4th vector
step of 3 envs); the remainder is part of the training state, so a resumed run takes its steps on the same
vector steps. Also what a time limit stores (learner.bootstrap_truncation), the other setting the Consistency-AC
learning pair needs for Ding & Jin's loop."""

import pytest
import torch

from genpol.algorithms.sac import SAC
from genpol.config.offpolicy import SACConfig
from genpol.errors import ConfigError
from genpol.heads import TanhGaussianHead
from genpol.storage.replay import ReplayBatch

OBS_DIM, ACT_DIM, BATCH = 3, 2, 8


def make_sac(utd: float, num_envs: int) -> SAC:
    torch.manual_seed(0)
    head = TanhGaussianHead(OBS_DIM, ACT_DIM, hidden_sizes=[8, 8])
    cfg = SACConfig(utd=utd, learning_starts=0, batch_size=BATCH, buffer_size=64, critic_hidden_sizes=[8, 8])
    sac = SAC(head, cfg, num_envs=num_envs, obs_dim=OBS_DIM, act_dim=ACT_DIM, capacity=64,
              device=torch.device("cpu"), seed=0)
    generator = torch.Generator().manual_seed(1)
    batch = ReplayBatch(obs=torch.randn(BATCH, OBS_DIM, generator=generator),
                        actions=torch.rand(BATCH, ACT_DIM, generator=generator) * 2 - 1,
                        rewards=torch.randn(BATCH, generator=generator),
                        next_obs=torch.randn(BATCH, OBS_DIM, generator=generator), dones=torch.zeros(BATCH))
    sac.sampler.sample = lambda size: batch
    return sac


def critic_steps_after_each_update(sac: SAC, calls: int) -> list[int]:
    steps, before = [], sac.critic_steps
    for _ in range(calls):
        named = sac.update()
        assert bool(named) == (sac.critic_steps > before)  # diagnostics only from a call that stepped
        before = sac.critic_steps
        steps.append(before)
    return steps


def test_one_twelfth_with_three_envs_steps_on_every_fourth_vector_step():
    """Ding & Jin's online loop: one gradient step every 4th vector step of 3 envs."""
    sac = make_sac(1 / 12, num_envs=3)
    assert critic_steps_after_each_update(sac, 12) == [0, 0, 0, 1, 1, 1, 1, 2, 2, 2, 2, 3]


def test_a_tenth_steps_on_the_tenth_transition_where_a_float_sum_would_not():
    assert sum([0.1] * 10) < 1  # why the ratio is accrued as a fraction
    assert critic_steps_after_each_update(make_sac(0.1, num_envs=1), 20) == [0] * 9 + [1] * 10 + [2]


def test_a_whole_utd_stays_an_int_for_learners_that_loop_over_it():
    """A learner written before fractions (docs/examples/td3.py: range(num_envs * cfg.utd)) keeps working."""
    assert isinstance(SACConfig(utd=2.0).utd, int) and isinstance(SACConfig().utd, int)
    assert SACConfig(utd=0.25).utd == 0.25


def test_a_whole_utd_takes_num_envs_x_utd_steps_per_vector_step():
    assert critic_steps_after_each_update(make_sac(3, num_envs=2), 3) == [6, 12, 18]
    assert critic_steps_after_each_update(make_sac(1.5, num_envs=1), 4) == [1, 3, 4, 6]


def test_the_accrued_fraction_resumes():
    sac = make_sac(0.25, num_envs=1)
    sac.update(), sac.update()  # half a step accrued
    state = sac.state_dict()
    assert state["steps_accrued"] == [1, 2]
    resumed = make_sac(0.25, num_envs=1)
    resumed.load_state_dict(state)
    assert critic_steps_after_each_update(resumed, 2) == [0, 1]
    legacy = {key: value for key, value in state.items() if key != "steps_accrued"}  # saved before the key
    resumed.load_state_dict(legacy)
    assert resumed.steps_accrued == 0


@pytest.mark.parametrize("settings,message", [(dict(utd=0), "learner.utd"),
                                              (dict(utd=float("inf")), "learner.utd.*finite"),
                                              (dict(utd=0.0004), "learner.utd.*no gradient steps at all"),
                                              (dict(utd=0.5, batching="rlpd"), "whole number with batching=rlpd")])
def test_a_ratio_the_learner_cannot_take_is_refused(settings, message):
    """0.0004 is read as the nearest fraction with a denominator up to 1000: 0, which never steps."""
    with pytest.raises(ConfigError, match=message):
        SACConfig(**settings)
    assert SACConfig(utd=0.001).utd == 0.001  # 1/1000, the smallest ratio taken


@pytest.mark.parametrize("bootstrap", [True, False])
def test_a_time_limit_is_stored_done_only_without_truncation_bootstrap(bootstrap):
    """learner.bootstrap_truncation=false (Ding & Jin's online code) stores a time limit as done; genpol's
    default stores it not done, so the target bootstraps from Q(final observation). Pendulum only truncates
    (at 200 steps): 2 envs x 200 vector steps end with one truncation per env, in the last two rows. Run with
    learner.utd=0.25 through the runner: 400 transitions, 100 gradient steps."""
    from genpol import envs
    from genpol.algorithms import make_algorithm
    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.heads import build_head
    from genpol.runners.offpolicy import OffPolicyRunner

    cfg = validate(compose_config(["env=pendulum", "learner=sac", "policy=tanh_gaussian", "run_dir=/tmp/unused",
                                   "learner.learning_starts=0", "learner.utd=0.25", "learner.batch_size=32",
                                   f"learner.bootstrap_truncation={bootstrap}"]))
    env = envs.make("gym:Pendulum-v1", num_envs=2)
    head = build_head(cfg.policy.family, env.obs_dim, env.act_dim, **cfg.policy.head_kwargs())
    algorithm = make_algorithm(cfg, head, env)
    OffPolicyRunner(env, algorithm, total_steps=400, iteration_steps=400).run()
    env.close()
    stored = algorithm.replay.terminated[:algorithm.replay.size]
    assert len(stored) == 400
    assert stored[:-2].sum() == 0 and bool(stored[-2:].all()) == (not bootstrap)
    assert algorithm.critic_steps == 100


def test_the_progress_bar_moves_with_every_env_step_of_an_off_policy_iteration():
    """An off-policy iteration (learner.iteration_steps, 1000 by default) lasts minutes at RLPD's or MaxEntDP's
    sizes on a CPU: the bar, moved only at iterations' ends, stood at 0 through the first (a user saw 0/300 for
    2 min 24 s). It follows global_step after each vector step now."""
    from genpol import envs
    from genpol.algorithms import make_algorithm
    from genpol.api import compose_config
    from genpol.callbacks import Callback, ProgressBar
    from genpol.configure import validate
    from genpol.heads import build_head
    from genpol.runners.offpolicy import OffPolicyRunner

    cfg = validate(compose_config(["env=pendulum", "learner=sac", "policy=tanh_gaussian", "run_dir=/tmp/unused",
                                   "learner.learning_starts=64"]))
    env = envs.make("gym:Pendulum-v1", num_envs=2)
    head = build_head(cfg.policy.family, env.obs_dim, env.act_dim, **cfg.policy.head_kwargs())
    bar = ProgressBar(100, "sac")
    seen = []

    class Probe(Callback):
        def on_env_step(self, runner):
            seen.append((runner.global_step, bar.bar.n))

    OffPolicyRunner(env, make_algorithm(cfg, head, env), total_steps=100, iteration_steps=1000,
                    callbacks=[bar, Probe()]).run()
    env.close()
    assert seen == [(step, step) for step in range(2, 101, 2)]  # one iteration of 50 vector steps, in step
