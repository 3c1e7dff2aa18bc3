"""A learner of the user's own: the tutorial's TD3 (``docs/examples/td3.py`` and its yaml under
``docs/examples/configs/learner/``) trains through the command line and the API with nothing of
genpol edited, resumes exactly, evaluates, and computes its TD target as the paper writes it."""

from __future__ import annotations

import json
import shutil

import pytest
import torch

from conftest import EXAMPLES, assert_trees_equal, final_checkpoint, run_cli

CONFIGS = EXAMPLES / "configs"
TINY = ["policy=tanh_gaussian", "env=pendulum", "env.num_envs=2", "learner.learning_starts=128",
        "learner.iteration_steps=128", "learner.batch_size=32", "policy.hidden_sizes=[32,32]",
        "learner.critic_hidden_sizes=[32,32]", "pipeline.video=false", "logger.progress_bar=false",
        "pipeline.eval_episodes=1"]


def test_td3_trains_and_evaluates_from_the_command_line(tmp_path, examples_on_path):
    run_dir = tmp_path / "td3"
    run_cli("-m", "genpol.train", "--config-dir", str(CONFIGS), "learner=td3", *TINY, "total_steps=512",
            "learner.policy_delay=3", f"run_dir={run_dir}")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["learner"] == "td3" and summary["env_steps"] == 512
    _, _, _, state = final_checkpoint(run_dir)
    algorithm = state["algorithm"]
    # (512 - 128) env steps of 2 envs -> 384 critic steps; an actor step after every third
    assert algorithm["critic_steps"] == 384 and algorithm["actor_steps"] == 128 and "actor_target" in algorithm
    result = run_cli("-m", "genpol.evaluate", f"run_dir={run_dir}", "episodes=1", "video=false")
    assert '"deterministic_return_mean"' in result.stdout
    bad = run_cli("-m", "genpol.train", "--config-dir", str(CONFIGS), "learner=td3", *TINY, "learner.policy_dealy=2",
                  f"run_dir={tmp_path / 'bad'}", check=False)
    assert bad.returncode != 0 and "policy_dealy" in bad.stderr


def test_td3_through_the_api_resumes_to_the_uninterrupted_runs_state(tmp_path, examples_on_path):
    """Trained once to 512 steps, and once stopped at the checkpoint of step 256 (its later
    checkpoints removed) and resumed: every weight, optimizer, generator and the replay agree."""
    from genpol.api import evaluate, train

    overrides = [*TINY, "pipeline.checkpoint_every=1"]
    train(learner="td3", total_steps=512, run_dir=tmp_path / "whole", overrides=overrides, config_dirs=[CONFIGS])
    shutil.copytree(tmp_path / "whole", tmp_path / "resumed")
    for later in ("step_000000000384", "step_000000000512"):
        shutil.rmtree(tmp_path / "resumed" / "checkpoints" / later)
    (tmp_path / "resumed" / "summary.json").unlink()
    summary = train(learner="td3", total_steps=512, run_dir=tmp_path / "resumed", overrides=overrides,
                    config_dirs=[CONFIGS])
    assert summary["learner"] == "td3"
    name_a, _, weights_a, state_a = final_checkpoint(tmp_path / "whole")
    name_b, _, weights_b, state_b = final_checkpoint(tmp_path / "resumed")
    assert name_a == name_b == "step_000000000512"
    assert_trees_equal(weights_a, weights_b, "policy")
    assert_trees_equal(state_a["algorithm"], state_b["algorithm"], "algorithm")
    assert evaluate(tmp_path / "resumed", episodes=1)["episodes"] == 1


def test_td3_target_is_the_smoothed_clipped_double_q_target(examples_on_path):
    """y = r + gamma (1 - done) min_i Q'_i(s', clip(mu'(s') + clip(0.2 eps, -0.5, 0.5), -1, 1)),
    the noise drawn from the learner's own smoothing generator: recomputed here by hand."""
    from td3 import TD3, TD3Config

    from genpol.heads import TanhGaussianHead
    from genpol.storage.replay import ReplayBatch

    torch.manual_seed(0)
    head = TanhGaussianHead(3, 2, hidden_sizes=(8,))
    td3 = TD3(head, TD3Config(critic_hidden_sizes=[8]), num_envs=1, obs_dim=3, act_dim=2, capacity=64,
              device=torch.device("cpu"), seed=4)
    batch = ReplayBatch(obs=torch.randn(5, 3), actions=torch.rand(5, 2) * 2 - 1, rewards=torch.randn(5),
                        next_obs=torch.randn(5, 3), dones=torch.tensor([0.0, 1.0, 0.0, 0.0, 1.0]))
    state = td3.smoothing_generator.get_state()
    target = td3._td_target(batch, torch.zeros(()), None)
    eps = torch.randn(5, 2, generator=torch.Generator().set_state(state))
    with torch.no_grad():
        mean, _ = td3.actor_target.distribution(batch.next_obs)
        next_actions = (torch.tanh(mean) + (0.2 * eps).clamp(-0.5, 0.5)).clamp(-1, 1)
        next_q = torch.minimum(*td3.critic_target(batch.next_obs, next_actions))
    expected = batch.rewards + 0.99 * (1 - batch.dones) * next_q
    torch.testing.assert_close(target, expected, rtol=0, atol=1e-6)


def test_a_misspelt_config_dir_is_named(tmp_path):
    """Hydra searched the missing folder in vain and blamed the option it lacked ("Could not find
    'learner/td3'"); the command line's --config-dir names the folder, and so does the API now."""
    from genpol.api import compose_config
    from genpol.errors import ConfigError

    with pytest.raises(ConfigError, match=rf"^config_dirs: {tmp_path / 'cofnigs'} is not a directory"):
        compose_config(["learner=td3"], config_dirs=[tmp_path / "cofnigs"])


def test_a_bundle_of_the_users_own_registers_the_learner_it_picks(tmp_path, examples_on_path):
    """An ``+experiment=`` bundle in the user's config folder that picks their learner in its defaults list, given
    as ``~/...``: the learner's module was imported only for ``learner=<name>`` among the overrides, and its folder
    looked up without expanding ``~``, so the learner's yaml had no schema. A fresh interpreter: this process may
    hold TD3's registration from another test."""
    import os
    import subprocess
    import sys

    home = tmp_path / "home"
    shutil.copytree(CONFIGS, home / "mine")
    (home / "mine" / "experiment").mkdir()
    (home / "mine" / "experiment" / "td3_pendulum.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /learner: td3\n  - override /policy: tanh_gaussian\n"
        "  - override /env: pendulum\nlearner:\n  policy_delay: 3\n")
    script = ("from genpol.api import compose_config; from genpol.configure import validate; "
              "cfg = validate(compose_config(['+experiment=td3_pendulum', 'run_dir=/tmp/unused'], "
              "config_dirs=['~/mine'])); print(cfg.learner.name, cfg.learner.policy_delay, cfg.env.id)")
    result = subprocess.run([sys.executable, "-c", script], env={**os.environ, "HOME": str(home)},
                            capture_output=True, text=True, timeout=120)
    assert result.stdout.split() == ["td3", "3", "Pendulum-v1"], result.stderr[-2000:]


def test_a_bundle_that_is_not_a_mapping_is_hydras_error(tmp_path):
    """A user's bundle file holding a list: looking for the learner it picks raised omegaconf's own error
    (a traceback, exit 1) before Hydra could refuse the file, naming it, as a ConfigError."""
    from genpol.api import compose_config
    from genpol.errors import ConfigError

    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "listed.yaml").write_text("- learner: td3\n")
    with pytest.raises(ConfigError, match="experiment/listed"):
        compose_config(["+experiment=listed", "run_dir=/tmp/unused"], config_dirs=[tmp_path])
