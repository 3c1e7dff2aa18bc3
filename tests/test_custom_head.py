"""A head from the user's own package: the docs tutorial's Laplace head, one file and one yaml
(``--config-dir docs/examples/configs policy=laplace``), trains, checkpoints, evaluates and reloads by
its ``module:ClassName``; its Config types and checks its keys; ``policy=custom`` still passes
constructor arguments untyped; bad names fail at validation."""

import json
import os
import sys

import pytest

from conftest import EXAMPLES, run_cli

HEAD = ["--config-dir", str(EXAMPLES / "configs"), "policy=laplace", "policy.hidden=16"]


def test_the_tutorial_head_trains_evaluates_and_reloads_from_its_own_yaml(tmp_path, examples_on_path):
    from genpol.api import load_policy

    run_dir = tmp_path / "laplace"
    run_cli("-m", "genpol.train", *HEAD, "env=multigoal", "total_steps=1024", "learner.rollout_steps=64",
            "learner.minibatch_size=256", "learner.epochs=2", "pipeline.eval_episodes=2", "pipeline.video=false",
            f"run_dir={run_dir}")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["env_steps"] == 1024 and summary["policy"] == "laplace_head:LaplaceHead"
    spec = json.loads((run_dir / "checkpoints" / "step_000000001024" / "policy" / "policy.json").read_text())
    assert spec["head"]["family"] == "laplace_head:LaplaceHead" and spec["head"]["kwargs"]["hidden"] == 16
    result = run_cli("-m", "genpol.evaluate", f"run_dir={run_dir}", "episodes=2", "video=false")
    assert '"deterministic_return_mean"' in result.stdout
    policy = load_policy(run_dir)
    assert type(policy.head).__name__ == "LaplaceHead" and policy.head.mean_net[0].out_features == 16
    # where its module is not importable: one line naming it, exit 2 (a Hydra traceback and exit 1)
    elsewhere = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = run_cli("-m", "genpol.evaluate", f"run_dir={run_dir}", "episodes=1", check=False, cwd=tmp_path,
                     env=elsewhere, cold=True)
    assert result.returncode == 2 and "Traceback" not in result.stderr, result.stderr[-2000:]
    assert result.stderr.strip().splitlines()[-1].startswith(
        f"genpol: CheckpointError: {run_dir / 'checkpoints' / 'step_000000001024'}: its policy head cannot be "
        "rebuilt: policy head 'laplace_head:LaplaceHead': cannot import module 'laplace_head'")


def test_the_head_config_types_the_yaml_and_policy_custom_still_passes_kwargs(examples_on_path):
    from genpol.api import compose_config
    from genpol.build import make_head
    from genpol.configure import validate
    from genpol.errors import ConfigError

    dirs = [EXAMPLES / "configs"]
    config = validate(compose_config(["env=multigoal", "policy=laplace", "policy.hidden=8"], config_dirs=dirs))
    assert type(config.policy).__name__ == "LaplaceConfig" and config.policy.head_kwargs() == {
        "hidden": 8, "log_scale_init": -0.5}
    with pytest.raises(ConfigError, match=r"policy.hidden must be >= 1, got 0"):  # the Config's own check
        validate(compose_config(["env=multigoal", "policy=laplace", "policy.hidden=0"], config_dirs=dirs))
    with pytest.raises(ConfigError, match=r"policy.hiden: LaplaceHead's LaplaceConfig: has no such field; its fields "
                                          r"are \['critic_activation', 'critic_hidden_sizes', 'critic_residual', 'family', 'hidden'"):
        validate(compose_config(["env=multigoal", "policy=laplace", "+policy.hiden=3"], config_dirs=dirs))
    custom = validate(compose_config(["env=multigoal", "policy=custom", "policy.family=laplace_head:LaplaceHead",
                                      "+policy.kwargs.hidden=12"]))
    head = make_head(custom.policy, obs_dim=2, act_dim=2)
    assert head.config.hidden == 12 and head.spec()["kwargs"] == {"hidden": 12, "log_scale_init": -0.5}
    with pytest.raises(ConfigError, match=r"policy.hidden must be >= 1, got -1"):  # checked there too
        make_head(validate(compose_config(
            ["env=multigoal", "policy=custom", "policy.family=laplace_head:LaplaceHead", "+policy.kwargs.hidden=-1"])
        ).policy, obs_dim=2, act_dim=2)


@pytest.mark.parametrize("family, message", [
    ("laplace", r"policy.family must be 'module:ClassName'"),
    ("no_such_module_xyz:Head", r"cannot import module 'no_such_module_xyz'"),
    ("laplace_head:NoSuchHead", r"'NoSuchHead' in module 'laplace_head' is not found"),
    ("laplace_head:Laplace", r"'Laplace' in module 'laplace_head' is torch.distributions.laplace.Laplace, "
                             r"not a PolicyHead subclass"),
    ("laplace_head:__doc__", r"'__doc__' in module 'laplace_head' is a str, not a PolicyHead subclass"),
])
def test_a_bad_head_name_is_a_config_error_naming_it(family, message, examples_on_path):
    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.config.base import ConfigError

    with pytest.raises(ConfigError, match=message):
        validate(compose_config(["policy=custom", f"policy.family={family}"]))


def test_a_learner_the_custom_head_cannot_serve_names_head_and_capability(examples_on_path):
    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.config.base import ConfigError

    with pytest.raises(ConfigError, match=r"the laplace head cannot be trained by learner=sac: it lacks "
                                          r"reparameterized sampling, log-prob of its own samples"):
        validate(compose_config(["policy=custom", "policy.family=laplace_head:LaplaceHead", "learner=sac"]))
    assert "laplace_head" in sys.modules
