"""Structured configs: documented fields, and bad values caught before training, naming the key."""

import ast
import inspect
import textwrap
from pathlib import Path

import pytest
from hydra.errors import ConfigCompositionException

from genpol.api import compose_config
from genpol.config import ALL_SCHEMAS, ConfigError, validate

from conftest import run_cli


def test_every_config_field_has_a_docstring():
    missing = []
    for schema in ALL_SCHEMAS:
        body = ast.parse(textwrap.dedent(inspect.getsource(schema))).body[0].body
        for i, node in enumerate(body):
            if isinstance(node, ast.AnnAssign) and "ClassVar" not in ast.unparse(node.annotation):
                following = body[i + 1] if i + 1 < len(body) else None
                documented = (isinstance(following, ast.Expr) and isinstance(following.value, ast.Constant)
                              and isinstance(following.value.value, str) and following.value.value.strip())
                if not documented:
                    missing.append(f"{schema.__name__}.{node.target.id}")
    assert not missing, f"fields without a docstring: {missing}"


def test_default_config_composes_and_validates():
    cfg = validate(compose_config(["run_dir=/tmp/x"]))
    assert cfg.env.full_id == "gym:HalfCheetah-v5" and cfg.policy.family == "gaussian"
    assert cfg.updater.name == "ppo" and cfg.updater.minibatch_size == 64


EXPERIMENTS = sorted(path.stem for path in (Path(__file__).parent.parent / "configs" / "experiment").glob("*.yaml"))


@pytest.mark.parametrize("experiment", EXPERIMENTS)
def test_every_experiment_bundle_composes_and_validates(experiment):
    """The README and bench scripts point users at these bundles: each must compose into a valid config."""
    extra = ["dataset.path=data/hopper_medium-v5.hdf5"] if experiment == "dppo_hopper" else []  # it names no default
    cfg = validate(compose_config([f"+experiment={experiment}", "run_dir=/tmp/x", *extra]))
    assert cfg.total_steps > 0
    if experiment == "fpo":
        assert cfg.policy.family == "fpo" and cfg.updater.clip_range == 0.05
    if experiment == "default":  # the measured make-train run: HalfCheetah at the zoo's initial std e^-2
        assert cfg.env.id == "HalfCheetah-v5" and cfg.policy.log_std_init == -2.0


@pytest.mark.parametrize("override,message", [
    ("updater.clip_range=1.5", r"updater.clip_range must be in \(0, 1\), got 1.5"),
    ("env.num_envs=0", r"env.num_envs must be >= 1, got 0"),
    ("updater.lr_schedule=cosine", r"updater.lr_schedule must be constant, linear or adaptive, got 'cosine'"),
    ("updater=trpo updater.line_search_shrink=1.5", r"updater.line_search_shrink must be in \(0, 1\)"),
    ("policy.activation=sigmoid", r"policy.activation must be one of"),
    ("total_steps=-5", r"total_steps must be >= 1, got -5"),
])
def test_out_of_range_values_name_the_key(override, message):
    with pytest.raises(ConfigError, match=message):
        validate(compose_config(["run_dir=/tmp/x", *override.split()]))


@pytest.mark.parametrize("override,key", [
    ("updater.lrr=0.1", "lrr"),  # misspelt key
    ("updater.lr=fast", "updater.lr"),  # wrong type
    ("env.num_envs=2.5", "env.num_envs"),
    ("policy.hidden_sizes=abc", "policy.hidden_sizes"),
])
def test_misspelt_keys_and_wrong_types_fail_at_composition(override, key):
    with pytest.raises(ConfigCompositionException) as info:
        compose_config(["run_dir=/tmp/x", override])
    assert key in str(info.value) or key in str(info.value.__cause__)


def test_cli_rejects_bad_input_before_training(tmp_path):
    result = run_cli("-m", "genpol.train", "updater.lrr=0.1", f"run_dir={tmp_path}/a", check=False)
    assert result.returncode != 0 and "lrr" in result.stderr
    result = run_cli("-m", "genpol.train", "updater.clip_range=2", f"run_dir={tmp_path}/b", check=False)
    assert result.returncode == 2 and "updater.clip_range must be in (0, 1), got 2.0" in result.stderr
    result = run_cli("-m", "genpol.train", "env=gym", "env.id=HalfChetah-v5", f"run_dir={tmp_path}/c", check=False)
    assert result.returncode == 2 and "Did you mean gym:HalfCheetah-v5" in result.stderr
    for name in "abc":
        assert not (tmp_path / name / "checkpoints").exists()
