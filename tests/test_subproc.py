"""Env worker processes (``genpol.envs.subproc``): the same results as one process, state that moves
between worker counts, and clear errors."""

import os
import signal
import time

import numpy as np
import pytest
import torch

from genpol import envs
from genpol.envs import EnvError
from genpol.envs.subproc import SubprocVectorEnv
from genpol.api import compose_config, train
from genpol.checkpoint import list_checkpoints, load_policy_files
from genpol.config import ConfigError
from genpol.configure import validate


def random_actions(steps, num_envs, act_dim, seed=0):
    return torch.rand(steps, num_envs, act_dim, generator=torch.Generator().manual_seed(seed)) * 2 - 1


def assert_same_steps(env_a, env_b, actions):
    for action in actions:
        a, b = env_a.step(action), env_b.step(action)
        for x, y in zip(a[:4], b[:4]):
            assert torch.equal(x, y)
        assert a[4].keys() == b[4].keys()
        for key in a[4]:
            assert torch.equal(a[4][key], b[4][key]), key


@pytest.mark.parametrize("env_id,num_envs,workers", [
    pytest.param("gym:HalfCheetah-v5", 5, 2, id="gym-halfcheetah"),
    pytest.param("dmc:cartpole-balance", 3, 3, id="dmc-cartpole",  # two worker processes, on 2 cores
                 marks=pytest.mark.filterwarnings("ignore:.*env workers on:RuntimeWarning")),
])
def test_workers_step_exactly_like_one_process(env_id, num_envs, workers):
    """Uneven slices, seeds seed + i, time-limit truncation with final observations, wrappers."""
    kwargs = dict(num_envs=num_envs, seed=3, max_episode_steps=7, normalize_obs=True, normalize_reward=True)
    with envs.make(env_id, **kwargs) as single, envs.make(env_id, workers=workers, **kwargs) as split:
        assert torch.equal(single.reset(), split.reset())
        assert (single.obs_dim, single.act_dim) == (split.obs_dim, split.act_dim)
        assert torch.equal(single.action_low, split.action_low) and single.max_episode_steps == split.max_episode_steps
        assert_same_steps(single, split, random_actions(20, num_envs, single.act_dim))


def test_action_chunks_report_env_steps_through_workers():
    kwargs = dict(num_envs=4, seed=0, max_episode_steps=5, action_chunk=3)
    with envs.make("gym:Hopper-v5", **kwargs) as single, envs.make("gym:Hopper-v5", workers=2, **kwargs) as split:
        single.reset(), split.reset()
        actions = random_actions(6, 4, single.act_dim)
        assert_same_steps(single, split, actions)


def test_state_moves_between_worker_counts():
    """A state saved with 2 workers restores into 1 process and vice versa, mid-episode."""
    kwargs = dict(num_envs=5, max_episode_steps=9)
    actions = random_actions(12, 5, 6, seed=1)
    with envs.make_backend("gym:HalfCheetah-v5", seed=0, **kwargs) as single, \
            SubprocVectorEnv("gym:HalfCheetah-v5", workers=2, seed=0, **kwargs) as split:
        unstarted = split.state_dict()  # before the first reset: the pending seed is saved
        assert unstarted["seed"] == 0 and len(unstarted["envs"]) == 5
        single.reset(), split.reset()
        for action in actions[:4]:
            single.step(action), split.step(action)
        from_single, from_split = single.state_dict(), split.state_dict()
        assert from_single.keys() == from_split.keys()
        single.load_state_dict(from_split)
        split.load_state_dict(from_single)
        assert_same_steps(single, split, actions[4:])
        with pytest.raises(EnvError, match="holds 4 envs"):
            split.load_state_dict({**from_single, "envs": from_single["envs"][:4]})


def test_render_comes_from_worker_zero():
    with envs.make("gym:HalfCheetah-v5", num_envs=2, workers=2, seed=0, render=True, render_size=(64, 48)) as env:
        env.reset()
        frame = env.render()
    assert frame.shape == (48, 64, 3) and frame.dtype == np.uint8 and frame.std() > 5


def test_errors_name_the_culprit():
    with pytest.raises(EnvError, match="unknown gymnasium id 'gym:HalfCheetah-v9'. Did you mean gym:HalfCheetah-v5"):  # raised inside a worker
        envs.make("gym:HalfCheetah-v9", num_envs=2, workers=2)
    with pytest.raises(EnvError, match="unknown env id 'gmy:Hopper-v5'"):
        envs.make("gmy:Hopper-v5", num_envs=2, workers=2)
    with pytest.raises(EnvError, match="workers > 1 needs a CPU backend"):
        envs.make("genpol:MultiGoal", num_envs=2, workers=2)
    with pytest.raises(EnvError, match=r"workers must be in \[2, num_envs=2\]"):
        SubprocVectorEnv("gym:Hopper-v5", num_envs=2, workers=3)
    with envs.make("gym:Hopper-v5", num_envs=2, workers=2, seed=0) as env:
        env.reset()
        with pytest.raises(EnvError, match=r"expects actions of shape \[num_envs, act_dim\] = \[2, 3\]"):
            env.step(torch.zeros(2, 4))
        # Ctrl-C and a scheduler's SIGTERM reach the whole process group: they killed the worker, and the
        # parent's stop could not save the env state; the worker ignores them (the parent stops the run)
        worker = env.find(SubprocVectorEnv)._processes[0]
        for stop in (signal.SIGINT, signal.SIGTERM):
            os.kill(worker.pid, stop)
            time.sleep(0.2)
            assert env.step(torch.zeros(2, 3))[0].shape == (2, 11) and worker.is_alive()
        os.kill(worker.pid, signal.SIGKILL)
        with pytest.raises(EnvError, match=r"^env worker 1 exited unexpectedly \(exit code -9: killed by SIGKILL"):
            env.step(torch.zeros(2, 3))
    with pytest.raises(ConfigError, match=r"env.workers must be in \[1, num_envs=2\], got 3"):
        validate(compose_config(["run_dir=/tmp/x", "env.num_envs=2", "env.workers=3"]))
    with pytest.raises(ConfigError, match=r"env.workers must be 1 unless env.backend is one of \('gym', 'dmc'\)"):
        validate(compose_config(["run_dir=/tmp/x", "env=multigoal", "env.workers=2"]))


def test_training_with_workers_gives_the_same_parameters(tmp_path):
    """The runner cannot tell: PPO on Pendulum with 2 env workers ends with the same weights as
    with one process, bit for bit."""
    overrides = ["env.num_envs=4", "learner.rollout_steps=32", "learner.minibatch_size=64", "learner.epochs=2",
                 "pipeline.eval_episodes=1", "pipeline.video=false", "logger.progress_bar=false"]

    def final_weights(name, workers):
        train("gym:Pendulum-v1", total_steps=256, run_dir=tmp_path / name, overrides=[*overrides, f"env.workers={workers}"])
        return load_policy_files(list_checkpoints(tmp_path / name / "checkpoints")[-1])[1]

    one, two = final_weights("one", 1), final_weights("two", 2)
    for key, value in one["head"].items():
        assert torch.equal(value, two["head"][key]), key
    assert torch.equal(one["obs_normalizer"]["stats"]["mean"], two["obs_normalizer"]["stats"]["mean"])


def test_an_exception_in_a_worker_comes_back_and_the_worker_keeps_serving():
    with SubprocVectorEnv("gym:Hopper-v5", num_envs=2, workers=2, seed=0) as env:
        env.reset()
        state = env.state_dict()
        state["envs"][1]["mujoco"] = torch.zeros(3, dtype=torch.float64)  # env 1 lives in worker 1
        with pytest.raises(RuntimeError, match="(?s)env worker 1 failed:.*Traceback"):
            env.load_state_dict(state)
        obs = env.step(torch.zeros(2, 3))[0]
    assert obs.shape == (2, 11) and torch.isfinite(obs).all()


@pytest.mark.parametrize("env_name,message", [("UnpicklableError-v0", "JointDiverged: joint knee diverged to nan"),
                                               ("LockedError-v0", "RuntimeError: solver diverged at step 3")])
def test_a_worker_exception_that_does_not_pickle_still_reaches_the_parent(env_name, message):
    """An exception whose __init__ takes other arguments reached the parent as an unrelated TypeError from
    unpickling; one holding a lock killed the worker (blamed on a missing __main__ guard)."""
    with SubprocVectorEnv(f"gym:custom_envs.faulty:{env_name}", num_envs=2, workers=2, seed=0) as env:
        env.reset()
        env.step(torch.zeros(2, 1)), env.step(torch.zeros(2, 1))
        with pytest.raises(RuntimeError, match=f"(?s)env worker 1 failed:.*Traceback.*{message}"):
            env.step(torch.zeros(2, 1))
        assert env.step(torch.zeros(2, 1))[0].flatten().tolist() == [4.0, 4.0]  # the worker keeps serving


@pytest.mark.filterwarnings("ignore:.*env workers on:RuntimeWarning")
def test_every_worker_is_awaited_after_one_step_fails():
    """Worker 1 fails at step 3 and worker 2 answers late: the step stopped awaiting at worker 1, and worker 2's
    rows lagged one step behind for the rest of the run."""
    with SubprocVectorEnv("gym:custom_envs.faulty:Counter-v0", num_envs=3, workers=3, seed=0) as env:
        env.reset()
        env.step(torch.zeros(3, 1)), env.step(torch.zeros(3, 1))
        with pytest.raises(RuntimeError, match="worker 1 blew up at step 3"):
            env.step(torch.zeros(3, 1))
        for t in (4, 5):
            assert env.step(torch.zeros(3, 1))[0].flatten().tolist() == [t, t, t]


def test_a_dict_observation_layout_crosses_the_workers():
    """Policies record the env's observation layout for predict() on raw dicts: with workers it was None."""
    with envs.make_backend("dmc:cartpole-balance", num_envs=2) as single, \
            SubprocVectorEnv("dmc:cartpole-balance", num_envs=2, workers=2) as split:
        assert split.observation_layout == single.observation_layout == [("position", (3,)), ("velocity", (2,))]


def test_a_failed_reset_here_leaves_no_worker_reply_behind():
    """This process's envs refuse a negative seed, worker 1's take theirs: the worker's reply stayed on its pipe
    and answered the next command (a later reset's rows stale, state_dict a crash)."""
    with SubprocVectorEnv("gym:Pendulum-v1", num_envs=4, workers=2) as env, \
            envs.make_backend("gym:Pendulum-v1", num_envs=4) as reference:
        with pytest.raises(Exception, match="Seed must be greater or equal to zero"):
            env.reset(seed=-2)  # envs 0 and 1 get -2 and -1, envs 2 and 3 (worker 1) 0 and 1
        assert torch.equal(env.reset(seed=10), reference.reset(seed=10))
        assert len(env.state_dict()["envs"]) == 4


def test_a_script_read_from_standard_input_is_told_why_workers_fail():
    """``python - < script.py`` (a notebook-like heredoc): spawn cannot re-import a main script named '<stdin>',
    and the error said to add the ``__main__`` guard (the script had one) after a worker error about building
    the env (a built-in one). It names the cause and the ways out."""
    import subprocess
    import sys

    script = ("from genpol import envs\n"
              "if __name__ == '__main__':\n"
              "    envs.make('gym:Pendulum-v1', num_envs=2, workers=2)\n")
    result = subprocess.run([sys.executable, "-"], input=script, capture_output=True, text=True, timeout=120,
                            env={**os.environ, "PYTHONWARNINGS": "ignore"})
    assert result.returncode == 1
    assert ("env worker 1 exited unexpectedly (exit code 1; its traceback is on stderr). Workers start with 'spawn', "
            "which re-imports the main script, and <stdin> is not a file: save the script to a file, run it with "
            "python -c, or use env.workers=1") in result.stderr, result.stderr[-2000:]
