"""Grouped EnvPool stepping and pipelined on-policy collection: the same transitions as plain stepping
and synchronous collection (exactly, where the design promises it), truncation through the split
path, determinism where it differs, and the shipped config end to end on the command line."""

import json

import pytest
import torch

from genpol import envs
from genpol.envs import EnvError
from genpol.envs.testing import check_vector_env
from genpol.algorithms import make_algorithm
from genpol.api import compose_config
from genpol.build import env_stack, make_env, make_head
from genpol.configure import validate
from genpol.runners.onpolicy import OnPolicyRunner
from genpol.train import run_training

from conftest import needs, run_cli

pytestmark = needs("envpool", "the envpool extra is not installed")


def test_grouped_steps_equal_plain_steps_env_by_env_with_truncation_and_episode_stats():
    """Hopper with a 4-step limit: truncations (and the reset moved into the ending step) and
    terminations go through send_group / recv_group, two groups of 2 envs, one EnvPool each."""
    kwargs = dict(num_envs=4, seed=5, max_episode_steps=4, normalize_obs=False, normalize_reward=False)
    plain, grouped = envs.make("envpool:Hopper-v5", **kwargs), envs.make("envpool:Hopper-v5", step_groups=2, **kwargs)
    assert plain.step_groups == 0 and grouped.step_groups == 2
    assert torch.equal(plain.reset(), grouped.reset())
    actions = torch.rand(10, 4, 3, generator=torch.Generator().manual_seed(0)) * 2 - 1
    truncations = 0
    for t in range(10):
        expected = plain.step(actions[t])
        grouped.send_group(0, actions[t, :2])
        grouped.send_group(1, actions[t, 2:])
        second, first = grouped.recv_group(1), grouped.recv_group(0)  # either order
        got = envs.core.concat_steps([first, second])
        for k in range(4):
            assert torch.equal(got[k], expected[k]), (t, k)
        assert got[4].keys() == expected[4].keys()
        for key in expected[4]:
            assert torch.equal(got[4][key], expected[4][key]), (t, key)
        truncated = expected[3]
        if truncated.any():  # the true last observation, not the next episode's first
            truncations += int(truncated.sum())
            assert not torch.equal(got[4]["final_obs"][truncated], got[0][truncated])
            ended = expected[2] | truncated
            assert (got[4]["episode_length"][truncated[ended]] == 4).all()
    assert truncations >= 4
    with pytest.raises(EnvError, match=r"recv_group\(0\) without a send_group\(0\)"):
        grouped.recv_group(0)
    with pytest.raises(EnvError, match="cannot step env groups"):
        plain.send_group(0, actions[0, :2])
    plain.close(), grouped.close()


def test_grouped_envpool_passes_the_conformance_checker():
    """Plain ``step`` over two pools: seeding, auto-reset, final observations, resume rules."""
    checked = check_vector_env("envpool:Hopper-v5", num_envs=4, step_groups=2, max_episode_steps=8, steps=30)
    assert {"final observation", "time limit", "seeded reset"} <= set(checked), checked


def _runner(step_groups: int, normalize: bool) -> OnPolicyRunner:
    flag = str(normalize).lower()
    cfg = validate(compose_config([
        "run_dir=/tmp/unused", "env=envpool", "env.id=HalfCheetah-v5", "env.num_envs=16",
        f"env.step_groups={step_groups}", "env.max_episode_steps=5", f"env.normalize_obs={flag}",
        f"env.normalize_reward={flag}", "learner.rollout_steps=8", "learner.minibatch_size=64", "learner.epochs=1"]))
    torch.manual_seed(0)
    env = make_env(cfg.env, gamma=cfg.learner.gamma, seed=0, device="cpu", stack=env_stack(cfg.policy))
    head = make_head(cfg.policy, env.obs_dim, env.act_dim)
    return OnPolicyRunner(env, make_algorithm(cfg, head, env), total_steps=10**6)


def _rollouts(runner: OnPolicyRunner) -> list[dict[str, torch.Tensor]]:
    """Two rollouts (an update between them), each as the storage's tensors."""
    runner.obs = runner.env.reset(seed=0)
    rollouts = []
    for _ in range(2):
        runner.collect()
        storage = runner.algorithm.storage
        rollouts.append({"obs": storage.obs.clone(), "values": storage.values.clone(),
                         "rewards": storage.rewards.clone(), "truncated": storage.truncated.clone(),
                         "truncation_values": storage.truncation_values.clone(),
                         "advantages": storage.advantages.clone(),
                         **{f"record/{k}": v.clone() for k, v in storage.records.items()}})
        runner.algorithm.update()
    runner.env.close()
    return rollouts


def test_pipelined_collection_equals_synchronous_collection_without_normalization():
    """8 envs x 6 action dims per group: the Gaussian head's noise for the two groups is the same
    draws as one batch's (torch fills normals in blocks of 16), so every tensor matches exactly."""
    synchronous = _rollouts(_runner(0, normalize=False))
    for groups in (1, 2):
        pipelined = _rollouts(_runner(groups, normalize=False))
        for sync_rollout, pipe_rollout in zip(synchronous, pipelined):
            assert sync_rollout["truncated"].any()
            for key, value in sync_rollout.items():
                assert torch.equal(pipe_rollout[key], value), (groups, key)


def test_with_normalization_one_group_equals_synchronous_and_two_groups_are_deterministic():
    synchronous = _rollouts(_runner(0, normalize=True))
    one_group = _rollouts(_runner(1, normalize=True))
    for sync_rollout, pipe_rollout in zip(synchronous, one_group):
        for key, value in sync_rollout.items():
            assert torch.equal(pipe_rollout[key], value), key
    first, second = _rollouts(_runner(2, normalize=True)), _rollouts(_runner(2, normalize=True))
    for a, b in zip(first, second):
        for key in a:
            assert torch.equal(a[key], b[key]), key
    # the second group normalizes with statistics that already hold the first group's step: not sync
    assert not torch.equal(first[0]["obs"], synchronous[0]["obs"])


def test_config_checks_name_the_key():
    from genpol.config import ConfigError

    with pytest.raises(ConfigError, match="env.step_groups"):
        validate(compose_config(["run_dir=/tmp/unused", "env=envpool", "env.id=Hopper-v5", "env.num_envs=6",
                                 "env.step_groups=4"]))
    with pytest.raises(ConfigError, match="env.step_groups.*envpool"):
        validate(compose_config(["run_dir=/tmp/unused", "env=halfcheetah", "env.step_groups=2"]))
    with pytest.raises(ConfigError, match="env.step_groups=2 pipelines on-policy collection only; learner=sac"):
        validate(compose_config(["run_dir=/tmp/unused", "env=envpool", "env.id=Hopper-v5", "env.num_envs=2",
                                 "env.step_groups=2", "+experiment=sac"]))


def test_ppo_fast_envpool_trains_from_the_command_line_and_resumes(tmp_path):
    run_dir = tmp_path / "run"
    overrides = ["+experiment=ppo_fast_envpool", "env.num_envs=4", "env.max_episode_steps=20",
                 "learner.rollout_steps=8", "learner.minibatch_size=16", "learner.epochs=1", "learner.compile=false",
                 "pipeline.eval_episodes=1", "pipeline.video=false", "logger.progress_bar=false",
                 "logger.tensorboard=false", f"run_dir={run_dir}"]
    run_cli("-m", "genpol.train", *overrides, "total_steps=64")
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] == 64
    with pytest.warns(RuntimeWarning, match="EnvPool exposes no simulator state"):  # resumes with fresh episodes
        summary = run_training(validate(compose_config([*overrides, "total_steps=128"])), run_dir)
    assert summary["env"] == "envpool:HalfCheetah-v5" and summary["env_steps"] == 128
    progress = [json.loads(line) for line in (run_dir / "progress.jsonl").read_text().splitlines()]
    assert len(progress) == 128 // 32  # 2 iterations, then 2 more after the resume: none repeated
