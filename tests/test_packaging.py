"""genpol as a user installs it: a wheel built from this repository, in a fresh venv, used from a
directory that holds its own ``envs/`` and ``configs/`` (research repositories often do).

The venv reuses this environment's packages (torch and the rest) through a path entry, so nothing is
downloaded; genpol itself comes only from the wheel. The user's ``envs`` and ``configs`` raise on
import: genpol must neither import them nor hide them from the user.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import sysconfig
import tomllib
from pathlib import Path

import pytest

REPO = Path(__file__).resolve().parent.parent
TINY = ["total_steps=512", "env.num_envs=2", "learner.rollout_steps=128", "learner.minibatch_size=64",
        "learner.epochs=1", "logger.progress_bar=false", "pipeline.eval_episodes=1", "pipeline.video=false"]


def test_the_package_list_names_every_package_folder():
    """pyproject lists packages by hand (find cannot map ``envs/`` to ``genpol.envs``): a new folder
    left off the list would be missing from the wheel."""
    listed = set(tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["packages"])
    folders = {".".join(path.parent.relative_to(REPO).parts) for path in (REPO / "genpol").rglob("__init__.py")}
    folders |= {"genpol.envs", "genpol.configs", "hydra_plugins.genpol_launchers"}
    folders |= {f"genpol.configs.{group.name}" for group in (REPO / "configs").iterdir() if any(group.glob("*.yaml"))}
    assert folders == listed, f"add to / remove from pyproject's packages: {sorted(folders ^ listed)}"
    data = tomllib.loads((REPO / "pyproject.toml").read_text())["tool"]["setuptools"]["package-data"]
    groups = {name for name in listed if name.startswith("genpol.configs")}
    assert set(data) == groups, f"package-data must list the yaml of {sorted(groups ^ set(data))}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory) -> dict[str, Path]:
    """A wheel of this checkout, installed alone into a fresh venv that sees this env's other packages."""
    root = tmp_path_factory.mktemp("wheel")
    # built from a copy: setuptools leaves build/ in the source tree and never deletes a stale file
    # there, so a module moved away would still ship in the next wheel built from the checkout
    source = root / "source"
    shutil.copytree(REPO, source, ignore=shutil.ignore_patterns(
        ".git", ".venv", "build", "*.egg-info", "__pycache__", "runs", "outputs", "multirun", "site", "videos"))
    subprocess.run([sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w",
                    str(root / "dist"), str(source)], check=True, capture_output=True)
    wheel = next((root / "dist").glob("genpol-*.whl"))
    venv = root / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    python = venv / "bin" / "python"
    site = subprocess.run([python, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                          check=True, capture_output=True, text=True).stdout.strip()
    # a path entry, not a site dir: this env's .pth files (the editable genpol's finder) are not run
    (Path(site) / "reuse_test_env.pth").write_text(sysconfig.get_paths()["purelib"] + "\n")
    subprocess.run([python, "-m", "pip", "install", "-q", "--no-deps", "--no-index", str(wheel)], check=True,
                   capture_output=True)
    user = root / "user_project"
    for folder in ("envs", "configs"):
        (user / folder).mkdir(parents=True)
        (user / folder / "__init__.py").write_text(f"raise RuntimeError('the user\\'s {folder} was imported')\n")
    (user / "configs" / "experiment").mkdir()
    (user / "configs" / "experiment" / "my_pendulum.yaml").write_text(
        "# @package _global_\nenv:\n  id: Pendulum-v1\nlearner:\n  lr: 0.0007\n")
    return {"python": python, "bin": venv / "bin", "user": user}


def run(args: list, cwd: Path) -> subprocess.CompletedProcess:
    env = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    result = subprocess.run([str(arg) for arg in args], cwd=cwd, env=env, capture_output=True, text=True,
                            timeout=300)
    assert result.returncode == 0, f"{args[0]} failed:\n{result.stdout[-2000:]}\n{result.stderr[-3000:]}"
    return result


def test_the_wheel_trains_evaluates_and_reports_from_a_directory_with_its_own_envs_and_configs(installed):
    python, user = installed["python"], installed["user"]
    where = run([python, "-c", "import genpol, genpol.envs, genpol.configs; print(genpol.__file__); "
                 "print(genpol.envs.__file__)"], user).stdout.split()
    assert all("site-packages" in path and str(REPO) not in path for path in where), where
    # the console script, then python -m with the same run: the second resumes and finishes at once
    run([installed["bin"] / "genpol-train", "env=gym", "env.id=Pendulum-v1", "run_dir=runs/cli", *TINY], user)
    run([python, "-m", "genpol.train", "env=gym", "env.id=Pendulum-v1", "run_dir=runs/cli", *TINY], user)
    summary = json.loads((user / "runs" / "cli" / "summary.json").read_text())
    assert summary["env_steps"] >= 512
    evaluation = run([installed["bin"] / "genpol-evaluate", "run_dir=runs/cli", "episodes=1", "video=true",
                      "video_dir=videos"], user)
    results = json.loads(evaluation.stdout[evaluation.stdout.index("{"):])
    assert results["videos"] and all((user / path).stat().st_size > 0 for path in results["videos"])
    report = run([installed["bin"] / "genpol-report", "runs"], user)
    assert re.search(r"1 finished runs", report.stdout), report.stdout


def test_the_api_composes_the_users_config_folder_on_top_of_genpols(installed):
    """``config_dirs`` adds the user's groups; their experiment sets env.id and lr."""
    python, user = installed["python"], installed["user"]
    code = ("from genpol.api import compose_config, train\n"
            "cfg = compose_config(['+experiment=my_pendulum', 'env=gym'], config_dirs=['configs'])\n"
            "print(cfg.env.id, cfg.learner.lr)\n"
            f"summary = train(env='gym:Pendulum-v1', run_dir='runs/api', overrides={TINY!r})\n"
            "print(summary['env_steps'])\n")
    lines = run([python, "-c", code], user).stdout.split("\n")
    assert lines[0] == "Pendulum-v1 0.0007", lines
    assert int(lines[-2]) >= 512


def test_a_bare_checkout_on_the_path_maps_envs_and_configs_as_the_build_does(installed):
    """``PYTHONPATH=<checkout>`` with nothing installed from it (bench/gpu_check.sh on a lent GPU
    does this): genpol comes from the checkout, and genpol.envs and genpol.configs are its folders."""
    code = ("import genpol, genpol.envs, genpol.configs\n"
            "from genpol.api import compose_config\n"
            "print(genpol.__file__, genpol.envs.__file__, compose_config(['env=pendulum']).env.id)\n")
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    result = subprocess.run([str(installed["python"]), "-c", code], cwd=installed["user"], env=env,
                            capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr[-3000:]
    package, envs_init, env_id = result.stdout.split()
    assert package == str(REPO / "genpol" / "__init__.py") and envs_init == str(REPO / "envs" / "__init__.py")
    assert env_id == "Pendulum-v1"
