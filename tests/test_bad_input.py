"""A new user's mistakes, found by trying them (2026-12-06): each is refused with a message that names the
culprit, or warned about where it is legal, and nothing already on disk is lost. The config's own range
checks are in test_config.py, the env ids' in test_envs.py, the datasets' in test_data.py."""

from __future__ import annotations

import itertools
import json
import logging
import os
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from genpol.api import compose_config, load_policy, train
from genpol.checkpoint import resolve_checkpoint
from genpol.configure import validate
from genpol.data import load_dataset, write_d4rl
from genpol.data.dataset import DatasetError
from genpol.envs import EnvError
from genpol.errors import CheckpointError, ConfigError
from genpol.evaluate import positional_run_dir
from genpol.report import report
from genpol.report_folder import OutputFolderError

PENDULUM = ["env=gym", "env.id=Pendulum-v1"]


@pytest.mark.parametrize("overrides,message", [
    # Hydra's own advice for a misspelt key, "+learner.lrr", adds it: it used to be dropped without a word
    (["+learner.lrr=1e-3"], r"^learner.lrr is not a key of PPOConfig, so it would be ignored \(did you mean learner.lr\?\)$"),
    (["+total_step=100"], r"^total_step is not a key of TrainConfig, so it would be ignored \(did you mean total_steps\?\)$"),
    (["+learner.zzz=1"], r"^learner.zzz is not a key of PPOConfig, so it would be ignored; its keys are \['"),
    (["device=gpu0"], r"^device must be a torch device such as cpu, cuda or cuda:1, got 'gpu0'$"),
    (["seed=-1"],
     r"^seed must be in \[0, 2146435072\) \(EnvPool seeds with int32, and env i with seed \+ i\), got -1$"),
    # a numpy or EnvPool traceback once the env was built (dm_control: 2^32; torch: 2^64)
    (["seed=4294967296"], r"^seed must be in \[0, 2146435072\) .*, got 4294967296$"),
    (["run_dir="], r"^run_dir must be a directory path, got ''$"),
    # accepted, they flipped alternate denoising steps' advantages, froze the noise, or divided by zero
    (["policy=diffusion", "policy.gamma_denoising=-1"], r"^policy.gamma_denoising must be in \(0, 1\], got -1.0$"),
    (["policy=diffusion", "policy.randn_clip=-1"], r"^policy.randn_clip must be > 0 \(.inf: no clip\), got -1.0$"),
    (["policy=diffusion", "policy.denoised_clip=0"], r"^policy.denoised_clip must be > 0 \(.inf: no clip\), got 0.0$"),
    (["policy=consistency", "policy.rho=0"],
     r"^policy.rho must be > 0 \(the Karras boundaries divide by it\), got 0.0$"),
    (["policy=diffusion_ddim", "policy.ddim_steps=50"],
     r"^policy.ddim_steps must be in \[1, 20\] \(policy.denoising_steps, the chain DDIM samples from\), got 50$"),
])
def test_config_mistakes_name_the_key(overrides, message):
    with pytest.raises(ConfigError, match=message):
        validate(compose_config([*PENDULUM, "run_dir=/tmp/x", *overrides]))


def test_consistency_without_pretraining_keeps_its_schedules_default():
    """pipeline.pretrain_steps=0 (documented as "skip pretraining") made ct_total_steps 0, refused as a key the
    user never set."""
    for learner in ("ppo", "consistency_ac"):
        cfg = validate(compose_config([*PENDULUM, "run_dir=/tmp/x", "policy=consistency", f"learner={learner}",
                                       "pipeline=offline_to_online", "pipeline.pretrain_steps=0",
                                       "dataset.path=/tmp/x.hdf5"]))
        assert cfg.policy.ct_total_steps == 20000
    cfg = validate(compose_config([*PENDULUM, "run_dir=/tmp/x", "policy=consistency", "pipeline=offline_to_online",
                                   "pipeline.pretrain_steps=500", "dataset.path=/tmp/x.hdf5"]))
    assert cfg.policy.ct_total_steps == 500


def test_free_keys_and_a_real_device_pass(tmp_path):
    """The key check leaves dict-typed fields free (an env's own constructor arguments), and a device this
    machine has is accepted; one it lacks is named."""
    cfg = validate(compose_config([*PENDULUM, f"run_dir={tmp_path}", "+env.kwargs.g=9.0"]))
    assert cfg.env.kwargs == {"g": 9.0}
    if torch.cuda.is_available():
        missing = f"cuda:{torch.cuda.device_count()}"
        with pytest.raises(ConfigError, match=rf"^device={missing}: this machine has \d+ CUDA device"):
            validate(compose_config([*PENDULUM, f"run_dir={tmp_path}", f"device={missing}"]))
    else:
        with pytest.raises(ConfigError, match=r"^device=cuda: this torch has no CUDA device to use .*; use device=cpu$"):
            validate(compose_config([*PENDULUM, f"run_dir={tmp_path}", "device=cuda"]))


def test_the_api_raises_config_error_with_hydras_reason(tmp_path):
    with pytest.raises(ConfigError, match=r"total_steps=200.7: Value '200.7' of type 'float' could not be converted "
                                          r"to Integer"):
        train(env="gym:Pendulum-v1", total_steps=200.7, run_dir=tmp_path / "a")
    # a misspelt group: the choices, without the schemas' entries that Hydra lists among them
    with pytest.raises(ConfigError, match=r"Could not find 'policy/gaussain' Available options in 'policy': ") as info:
        train(env="gym:Pendulum-v1", policy="gaussain", run_dir=tmp_path / "b")
    assert " gaussian " in str(info.value) and "schema_" not in str(info.value) and "\n" not in str(info.value)
    assert str(info.value).endswith("(did you mean policy=gaussian?)")
    with pytest.raises(ConfigError, match=r"^learner=schema_sac: schema_sac is the learner group's typed schema, not "
                                          r"one of its options; choose an option \(learner=sac\?\)$"):
        compose_config(["learner=schema_sac"])
    with pytest.raises(ConfigError, match=r"^learnr is not a key of TrainConfig, so it would be ignored \(did you "
                                          r"mean learner\?\)$"):
        compose_config(["learnr=sac"])
    with pytest.raises(ConfigError, match=r"^episode is not a key of EvaluateConfig.*\(did you mean episodes\?\)$"):
        compose_config(["episode=2", "run_dir=/tmp/x"], config_name="evaluate")
    # a group named beside a bundle wins over the bundle's choice: the bundle's keys then fit no schema
    with pytest.raises(ConfigError, match=r"Key 'learning_starts' not in 'PPOConfig'.* \(the bundle \+experiment=sac "
                                          r"sets learner keys of its own learner group; a learner= given beside it "
                                          r"replaced that group: give one of the two\)$"):
        compose_config(["learner=ppo", "+experiment=sac", "run_dir=/tmp/x"])
    # a lone string is one folder (or one override), not a sequence of one-letter ones
    (tmp_path / "mine" / "experiment").mkdir(parents=True)
    (tmp_path / "mine" / "experiment" / "short.yaml").write_text("# @package _global_\ntotal_steps: 77\n")
    cfg = compose_config(["+experiment=short", "run_dir=/tmp/x"], config_dirs=str(tmp_path / "mine"))
    assert cfg.total_steps == 77
    assert compose_config("seed=3").seed == 3
    with pytest.raises(TypeError, match=r"^config_dirs must be a list, got int: 5$"):
        compose_config([], config_dirs=5)


def test_the_command_line_exits_2_for_what_hydra_cannot_compose_and_for_a_run_dir_that_is_a_file(tmp_path):
    """Exit 2 is bad input (README): Hydra reports a group option it cannot find itself, and exited 1."""
    from conftest import run_cli

    result = run_cli("-m", "genpol.train", *PENDULUM, "learner=ppo2", f"run_dir={tmp_path / 'a'}", check=False)
    assert result.returncode == 2 and "Could not find 'learner/ppo2'" in result.stderr, result.stderr[-1500:]
    assert result.stderr.strip().splitlines()[-1].endswith("(did you mean learner=ppo?)")
    # a misspelt key: one line naming it, as for genpol's own refusals (Hydra's six suggested a '+' that adds a key
    # nothing reads), before Hydra made the run's folder
    result = run_cli("-m", "genpol.train", *PENDULUM, "learner.lrr=1", f"run_dir={tmp_path / 'a'}", check=False)
    assert result.returncode == 2 and result.stderr.strip().splitlines() == [
        "genpol: ConfigError: learner.lrr is not a key of PPOConfig, so it would be ignored (did you mean learner.lr?)"
    ], result.stderr[-1500:]
    assert not (tmp_path / "a").exists()
    target = tmp_path / "notes.txt"
    target.write_text("mine")
    result = run_cli("-m", "genpol.train", *PENDULUM, f"run_dir={target}", check=False)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        f"genpol: ConfigError: run_dir={target} is a file, not a directory: pick another run_dir"), result.stderr[-1500:]
    assert target.read_text() == "mine"
    # inside another run's folders (its checkpoints/, tb/): a whole run was written there, among that run's files
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "config.yaml").write_text("seed: 0\n")
    from genpol.runners.guards import LOCK_NAME  # the name check_run_dir looks for

    (run / LOCK_NAME).touch()
    for inside in (run / "checkpoints", run / "tb" / "x"):
        result = run_cli("-m", "genpol.train", *PENDULUM, f"run_dir={inside}", check=False)
        assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
            f"genpol: ConfigError: run_dir={inside} lies inside the run {run}, among its files: pick a run_dir "
            "outside it"), result.stderr[-1500:]
    assert sorted(path.name for path in run.iterdir()) == [LOCK_NAME, "checkpoints", "config.yaml"]
    # the video folder a file: found after training, the video lost
    result = run_cli("-m", "genpol.train", *PENDULUM, f"run_dir={tmp_path / 'v'}", f"pipeline.video_dir={target}",
                     check=False)
    assert result.returncode == 2 and result.stderr.strip().splitlines()[-1] == (
        f"genpol: ConfigError: pipeline.video_dir={target} is a file, not a directory: pick another video_dir (or "
        "pipeline.video=false)"), result.stderr[-1500:]
    assert not (tmp_path / "v" / ".hydra").exists()  # Hydra's copy, written before any check (an existing run's too)
    result = run_cli("-m", "genpol.evaluate", f"run_dir={tmp_path}", "episodez=3", check=False)  # genpol-evaluate too
    assert result.returncode == 2 and "episodez" in result.stderr, result.stderr[-1500:]
    # run_dir='~/x' (the shell leaves a quoted ~ alone): Hydra made ./~/x, where evaluate("~/x") does not look
    (tmp_path / "home").mkdir()
    result = run_cli("-m", "genpol.train", *PENDULUM, "learner.lr=-1", "run_dir='~/tilde run'", check=False,
                     cwd=tmp_path, env={**os.environ, "HOME": str(tmp_path / "home")})
    assert result.returncode == 2 and "learner.lr must be > 0" in result.stderr, result.stderr[-1500:]
    assert not (tmp_path / "~").exists() and (tmp_path / "home" / "tilde run").is_dir()


def test_a_cluster_launcher_without_multirun_is_said_to_launch_nothing(tmp_path):
    """Hydra launches sweeps only: the run trains here, and says so before its (here bad) config is checked."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")  # the [cluster] extra
    from conftest import run_cli

    result = run_cli("-m", "genpol.train", *PENDULUM, "launcher=submitit_local", "seed=-1", f"run_dir={tmp_path}",
                     check=False)
    assert result.returncode == 2 and ("launcher=submitit_local sends --multirun sweeps; without --multirun this run "
                                       "trains here, in this process") in result.stdout + result.stderr


def test_a_failed_start_leaves_the_run_dir_reusable_and_a_started_run_protected(tmp_path, caplog):
    """A first start that fails before its first checkpoint (here an env argument the env does not take)
    used to leave config.yaml behind, and the corrected command was refused as "a run with a different
    config". Now it starts afresh; once a checkpoint exists, a changed config is still refused. On the way:
    the rounding of total_steps to whole rollouts is warned about and the progress bar's total is what runs,
    and a loaded policy names what it takes."""
    run_dir = tmp_path / "run"
    tiny = ["learner.rollout_steps=32", "env.num_envs=2", "learner.epochs=1", "learner.minibatch_size=32",
            "pipeline.video=false", "logger.progress_bar=false", "pipeline.eval_episodes=1"]
    with pytest.raises(EnvError, match=r"^gym:Pendulum-v1 does not take the arguments env.kwargs=\{'gravity': 9.0\}: "):
        train(env="gym:Pendulum-v1", total_steps=100, run_dir=run_dir, overrides=[*tiny, "+env.kwargs.gravity=9.0"])
    assert (run_dir / "config.yaml").exists() and not (run_dir / "checkpoints").exists()
    (run_dir / "progress.jsonl").write_text('{"global_step": 64, "charts/SPS": 1.0}\n{"global_step": 12')  # killed mid-write
    with caplog.at_level(logging.WARNING, logger="genpol.pipelines.online"):
        summary = train(env="gym:Pendulum-v1", total_steps=100, run_dir=run_dir, overrides=[*tiny, "+env.kwargs.g=9.0"])
    assert summary["env_steps"] == 128  # two rollouts of 32 x 2
    assert ("total_steps=100 is not a whole number of rollouts of 64 env steps (learner.rollout_steps=32 x "
            "env.num_envs=2): training 128 env steps") in caplog.text
    assert [row["global_step"] for row in map(json.loads, (run_dir / "progress.jsonl").read_text().splitlines())] == [64, 128]
    with pytest.raises(ConfigError, match=r"holds a run with a different config \(env.kwargs.g: 9.0 -> 10.0\)"):
        train(env="gym:Pendulum-v1", total_steps=100, run_dir=run_dir, overrides=[*tiny, "+env.kwargs.g=10.0"])

    policy = load_policy(run_dir)
    assert policy.predict(np.zeros(3)).shape == (1,) and policy.predict(np.zeros((2, 4, 3))).shape == (2, 4, 1)
    with pytest.raises(ValueError, match=r"^TrainedPolicy.predict: observations must be \[D\] or \[\.\.\., D\] with "
                                         r"D = 3 \(gym:Pendulum-v1\), got shape \(5,\)$"):
        policy.predict(np.zeros(5))
    with pytest.raises(ValueError, match=r"got shape \(\)$"):
        policy.predict(np.float32(1.0))
    with pytest.raises(ValueError, match=r"^TrainedPolicy.predict: an empty batch of observations, shape \(0, 3\)$"):
        policy.predict(np.zeros((0, 3)))  # was torch's reshape error from inside the head
    assert load_policy(run_dir / "checkpoints").source == policy.source  # the run's checkpoints folder: its latest
    with pytest.raises(TypeError, match=r"^TrainedPolicy.act takes a torch tensor of normalized observations \[B, 3\]"):
        policy.act(np.zeros((1, 3)))
    with pytest.raises(ValueError, match=r"with D = 3 \(gym:Pendulum-v1\), got shape \(2, 7\)$"):
        policy.act(torch.zeros(2, 7))
    assert torch.equal(policy.act(torch.zeros(2, 3, dtype=torch.float64)), policy.act(torch.zeros(2, 3)))


def test_the_rounding_of_total_steps_counts_action_chunks(tmp_path, caplog):
    """A diffusion head acting in chunks of 4 env steps: a rollout of 8 agent steps on 2 envs is 64 env steps."""
    from genpol.envs import make
    from genpol.pipelines.online import steps_trained

    cfg = validate(compose_config([*PENDULUM, f"run_dir={tmp_path}", "policy=diffusion", "policy.ft_denoising_steps=20",
                                   "learner.rollout_steps=8", "learner.minibatch_size=16",
                                   "env.num_envs=2", "total_steps=40"]))
    env = make("gym:Pendulum-v1", num_envs=2)
    try:
        with caplog.at_level(logging.WARNING, logger="genpol.pipelines.online"):
            assert steps_trained(cfg, env, on_policy=True, action_chunk=cfg.policy.act_steps) == 64
    finally:
        env.close()
    assert ("total_steps=40 is not a whole number of rollouts of 64 env steps (learner.rollout_steps=8 x "
            "policy.act_steps=4 x env.num_envs=2): training about 64 env steps") in caplog.text


def test_a_short_off_policy_run_inside_its_warm_up_is_warned_about(tmp_path, caplog):
    with caplog.at_level(logging.WARNING, logger="genpol.pipelines.online"):
        summary = train(env="gym:Pendulum-v1", learner="sac", policy="tanh_gaussian", total_steps=64,
                        run_dir=tmp_path / "sac", overrides=["learner.learning_starts=100", "pipeline.video=false",
                                                             "logger.progress_bar=false", "pipeline.eval_episodes=1",
                                                             "policy.hidden_sizes=[8,8]", "learner.critic_hidden_sizes=[8,8]"])
    assert summary["env_steps"] == 64
    assert ("learner.learning_starts=100 >= total_steps=64: the run acts at random throughout and takes no "
            "gradient step") in caplog.text


def test_evaluate_and_load_name_what_is_missing(tmp_path, monkeypatch):
    assert positional_run_dir([str(tmp_path), "episodes=2"]) == [f"run_dir='{tmp_path}'", "episodes=2"]
    (tmp_path / "lr=0.1").mkdir()  # a sweep's folder, relative: it was read as the override lr=0.1
    monkeypatch.chdir(tmp_path)
    assert positional_run_dir(["lr=0.1"]) == ["run_dir='lr=0.1'"]
    assert positional_run_dir(["run_dir=x", "episodes=2"]) == ["run_dir=x", "episodes=2"]
    assert positional_run_dir(["--help"]) == ["--help"]
    with pytest.raises(CheckpointError, match=r"absent does not exist: expected a run directory or one of its checkpoints$"):
        resolve_checkpoint(tmp_path / "absent")
    with pytest.raises(TypeError, match=r"^expected a run or checkpoint directory \(a str or Path\), got None$"):
        load_policy(None)


def test_datasets_that_hold_nothing_or_are_another_format_are_named(tmp_path):
    empty = write_d4rl(tmp_path / "empty.hdf5", np.zeros((0, 3)), np.zeros((0, 1)), np.zeros(0), np.zeros(0, bool),
                       np.zeros(0, bool))
    with pytest.raises(DatasetError, match=r"empty.hdf5 holds no transitions \('observations' has shape \(0, 3\)\)$"):
        load_dataset(str(empty))
    table = tmp_path / "data.csv"
    table.write_text("obs,act\n")
    with pytest.raises(DatasetError, match=r"^dataset.path=.*data.csv is a file but not a D4RL file \(.hdf5 or .h5\)"):
        load_dataset(str(table))
    # a mistyped file name was read as a Minari id ("no Minari dataset 'empty.hdf'")
    with pytest.raises(DatasetError,
                       match=rf"^dataset.path=.*empty.hdf: no such file; did you mean {tmp_path / 'empty.hdf5'}\?$"):
        load_dataset(str(tmp_path / "empty.hdf"))
    with pytest.raises(DatasetError, match=r"^dataset.path=.*other.hdf: no such file \(genpol reads D4RL files"):
        load_dataset(str(tmp_path / "other.hdf"))


def test_report_skips_a_damaged_run_naming_it_and_says_when_a_curve_field_is_absent(tmp_path):
    """Two finished runs in the report's real files (config.yaml, summary.json, progress.jsonl); a third
    whose summary.json was cut short is named and listed, not a traceback."""
    for seed in (0, 1):
        run = tmp_path / f"run{seed}"
        run.mkdir()
        (run / "config.yaml").write_text(f"seed: {seed}\nlearner:\n  lr: 0.001\n")
        (run / "summary.json").write_text(json.dumps({"eval_return_mean": 10.0 + seed}))
        (run / "progress.jsonl").write_text("".join(json.dumps({"global_step": step, "charts/episodic_return": step})
                                                    + "\n" for step in (1, 2)))
    shutil.copytree(tmp_path / "run1", tmp_path / "run2")
    (tmp_path / "run2" / "summary.json").write_text('{"eval_return_mean": 1')
    damaged = rf"^genpol.report: skipping {tmp_path / 'run2'}: its config.yaml or summary.json cannot be read \(JSONDecodeError"
    with pytest.warns(RuntimeWarning, match=damaged):
        result = report(tmp_path, curve_metric="charts/nope")
    assert result["rows"][0]["values"] == [10.0, 11.0] and result["damaged"] == [str(tmp_path / "run2")]
    assert result["unfinished"] == []
    assert result["curve_missing"] == (f"no run under {tmp_path} logged 'charts/nope' in its progress.jsonl, so no "
                                       "curves were drawn; its fields include ['charts/episodic_return']")
    with pytest.warns(RuntimeWarning, match=damaged):
        assert report(tmp_path)["curve_missing"] is None
    # a finished run without the metric is left out of its row, and the row's seeds stay paired with its values
    run = tmp_path / "run3"
    shutil.copytree(tmp_path / "run0", run)
    (run / "config.yaml").write_text("seed: 3\nlearner:\n  lr: 0.001\n")
    (run / "summary.json").write_text(json.dumps({"eval_return_mean": None}))
    with pytest.warns(RuntimeWarning, match=damaged):
        result = report(tmp_path)
    row = result["rows"][0]
    assert row["seeds"] == [0, 1] and row["values"] == [10.0, 11.0], row
    # ... and named (it vanished from every list)
    assert result["without_metric"] == [str(run)]
    assert f"Finished without a finite `eval_return_mean` in summary.json (absent, null, non-finite or not a " \
           f"number; not counted): `{run}`" in (tmp_path / "report" / "report.md").read_text()
    # a NaN made the row's median, interval and mean NaN (report.json then not JSON), a string a traceback; and
    # seed 0's copy with the metric (run0b, after a copy without it) was dropped with it
    for name, seed, summary in (("run4", 4, '{"eval_return_mean": NaN}'), ("run5", 5, '{"eval_return_mean": "n/a"}'),
                                ("run0a", 0, '{"eval_return_mean": null}'), ("run0b", 0, '{"eval_return_mean": 99.0}')):
        shutil.copytree(tmp_path / "run0", tmp_path / name)
        (tmp_path / name / "config.yaml").write_text(f"seed: {seed}\nlearner:\n  lr: 0.001\n")
        (tmp_path / name / "summary.json").write_text(summary)
    shutil.rmtree(tmp_path / "run0")
    # parsed but not a run's: each failed with a traceback (exit 1)
    for name, config, summary in (("odd1", "seed: 1\n", "null"), ("odd2", "- a\n", "{}"),
                                  ("odd3", "seed: null\n", "{}")):
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.yaml").write_text(config)
        (tmp_path / name / "summary.json").write_text(summary)
    with pytest.warns(RuntimeWarning):
        result = report(tmp_path)
    assert result["rows"][0]["seeds"] == [0, 1] and result["rows"][0]["values"] == [99.0, 11.0]
    assert sorted(Path(path).name for path in result["without_metric"]) == ["run0a", "run3", "run4", "run5"]
    assert sorted(Path(path).name for path in result["damaged"]) == ["odd1", "odd2", "odd3", "run2"]
    json.loads((tmp_path / "report" / "report.json").read_text(), parse_constant=pytest.fail)


def test_report_curves_start_where_every_seed_has_logged(tmp_path):
    """A seed whose first logged step is 6000 was held at its first value before it (np.interp), so the mean at
    step 1000 averaged seed 0's 100 with an invented 600: the grid starts at the latest first step."""
    from types import SimpleNamespace

    from genpol.report import seed_curves

    runs = []
    for name, steps in (("a", range(1000, 11000, 1000)), ("b", range(6000, 11000, 1000))):
        (tmp_path / name).mkdir()
        (tmp_path / name / "progress.jsonl").write_text("".join(
            json.dumps({"global_step": step, "charts/episodic_return": step / 10}) + "\n" for step in steps))
        runs.append(SimpleNamespace(directory=tmp_path / name))
    grid, values = seed_curves(runs, "charts/episodic_return")
    assert grid.tolist() == [6000, 7000, 8000, 9000, 10000]
    assert values.tolist() == [[600, 700, 800, 900, 1000]] * 2


def test_report_of_one_run_writes_its_own_folder_there_and_refuses_the_runs_tb(tmp_path):
    """The root may be one run: the default ``<run>/report`` is a new folder the report owns (a re-run replaces
    it); ``out_dir=<run>/tb`` put the report's TensorBoard events among the run's, which TensorBoard then read
    as the run's: refused, naming the run's folder, and nothing of the run changes."""
    run = tmp_path / "run"
    (run / "tb").mkdir(parents=True)
    (run / "tb" / "events.out.tfevents.1.host").write_bytes(b"the run's events")
    (run / "config.yaml").write_text("seed: 0\nlearner:\n  lr: 0.001\n")
    (run / "summary.json").write_text(json.dumps({"eval_return_mean": 10.0}))
    (run / "progress.jsonl").write_text(json.dumps({"global_step": 1, "charts/episodic_return": 1.0}) + "\n")
    for _ in range(2):
        assert report(run)["rows"][0]["values"] == [10.0]
    assert (run / "report" / "report.md").is_file()
    with pytest.raises(OutputFolderError, match=rf"^--out {run / 'tb' / 'r'} lies inside {run / 'tb'}, a folder "
                                                rf"of the run {run};"):
        report(run, run / "tb" / "r")
    assert [path.name for path in (run / "tb").iterdir()] == ["events.out.tfevents.1.host"]


def test_report_counts_a_seed_once_and_does_not_split_rows_by_threads_or_workers(tmp_path):
    """A sweep over seeds 0-2 launched twice into one folder holds each seed twice: one sample each, the repeats
    named in a warning (counted twice, five seeds' interval narrowed from (100, 500) to (150, 400) in the
    review's case). Runs that differ in thread or worker counts only are one configuration."""
    for copy, seed, threads in ((0, 0, 1), (0, 1, 2), (0, 2, 1), (1, 0, 2), (1, 1, 1), (1, 2, 2)):
        run = tmp_path / str(copy) / str(seed)
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(f"seed: {seed}\nupdate_threads: {threads}\nenv:\n  workers: {threads}\n"
                                         "learner:\n  lr: 0.001\n")
        (run / "summary.json").write_text(json.dumps({"eval_return_mean": 100.0 * (seed + 1) + copy}))
    with pytest.warns(UserWarning) as repeats:
        rows = report(tmp_path)["rows"]
    assert [str(warning.message) for warning in repeats] == [
        f"genpol.report: {tmp_path / '1' / str(seed)} repeats seed {seed} of {tmp_path / '0' / str(seed)} (all runs); "
        "counted once" for seed in (0, 1, 2)]
    assert len(rows) == 1 and rows[0]["seeds"] == [0, 1, 2] and rows[0]["values"] == [100.0, 200.0, 300.0]


def test_report_does_not_split_rows_by_video_size_or_evaluation_cadence_but_for_gorl(tmp_path):
    """Runs that differ only in their video's size or how often they evaluate trained the same and end on the same
    final evaluation (a review measured -968.08 at eval_every 1 and 0): two rows each before. GoRL's stages build on
    the encoder their evaluations pick, so there eval_every stays a configuration."""
    for seed, (width, every) in enumerate(((256, 1), (128, 0), (64, 5))):
        run = tmp_path / "online" / str(seed)
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(f"seed: {seed}\nenv:\n  render_width: {width}\n  render_height: {width}\n"
                                         f"pipeline:\n  name: online\n  eval_every: {every}\n")
        (run / "summary.json").write_text(json.dumps({"eval_return_mean": 100.0 * seed}))
    rows = report(tmp_path / "online")["rows"]
    assert len(rows) == 1 and rows[0]["seeds"] == [0, 1, 2]
    for seed, every in enumerate((1, 5)):
        run = tmp_path / "gorl" / str(seed)
        run.mkdir(parents=True)
        (run / "config.yaml").write_text(f"seed: {seed}\npipeline:\n  name: gorl\n  eval_every: {every}\n")
        (run / "summary.json").write_text(json.dumps({"eval_return_mean": 100.0 * seed}))
    assert len(report(tmp_path / "gorl")["rows"]) == 2
    # decided run by run: a GoRL run beside them left every online run a row of its own
    shutil.copytree(tmp_path / "gorl" / "0", tmp_path / "online" / "gorl")
    assert sorted(row["seeds"] for row in report(tmp_path / "online")["rows"]) == [[0], [0, 1, 2]]


def test_report_names_a_run_that_repeats_a_seed_in_report_md_and_report_json(tmp_path):
    """A run that repeats a seed of its configuration (here it differs only in torch_threads) was counted once and
    named only on stderr: report.md said "4 finished runs in 1 configurations" over a row of 3 seeds, and neither
    report.md nor report.json named the run left out. It is listed as the runs without the metric are."""
    for seed in (0, 1, 2):
        run = tmp_path / str(seed)
        run.mkdir()
        (run / "config.yaml").write_text(f"seed: {seed}\ntorch_threads: 1\nlearner:\n  lr: 0.001\n")
        (run / "summary.json").write_text(json.dumps({"eval_return_mean": 10.0 * (seed + 1)}))
    shutil.copytree(tmp_path / "0", tmp_path / "dup")
    (tmp_path / "dup" / "config.yaml").write_text("seed: 0\ntorch_threads: 4\nlearner:\n  lr: 0.001\n")
    (tmp_path / "dup" / "summary.json").write_text(json.dumps({"eval_return_mean": 99.0}))
    shutil.copytree(tmp_path / "1", tmp_path / "nometric")
    (tmp_path / "nometric" / "config.yaml").write_text("seed: 5\ntorch_threads: 1\nlearner:\n  lr: 0.001\n")
    (tmp_path / "nometric" / "summary.json").write_text("{}")
    with pytest.warns(UserWarning, match=rf"^genpol.report: {tmp_path / 'dup'} repeats seed 0 of {tmp_path / '0'} "
                                         r"\(all runs\); counted once$"):
        result = report(tmp_path)
    assert result["rows"][0]["seeds"] == [0, 1, 2] and result["rows"][0]["values"] == [10.0, 20.0, 30.0]
    assert result["duplicates"] == [{"run": str(tmp_path / "dup"), "repeats": str(tmp_path / "0"), "seed": 0}]
    assert json.loads((tmp_path / "report" / "report.json").read_text())["duplicates"] == result["duplicates"]
    text = (tmp_path / "report" / "report.md").read_text()
    # the header's 5 runs: 3 in the row, and the two named below it
    assert "5 finished runs in 1 configurations; 3 counted in the table, not counted (named below): 1 without the " \
           "metric, 1 repeating a seed already counted in its configuration. " in text
    assert "\nRepeating a seed already counted in its configuration (a run launched twice, or runs that differ only " \
           "in keys that do not separate configurations, such as threads or device; not counted): " \
           f"`{tmp_path / 'dup'}` (repeats seed 0 of `{tmp_path / '0'}`)\n" in text
    assert f"not counted): `{tmp_path / 'nometric'}`\n" in text


class EndlessDrift:
    """A gymnasium env that never ends an episode, registered without a time limit (a user's first env)."""

    def __new__(cls, **kwargs):
        import gymnasium as gym

        class Drift(gym.Env):
            observation_space = gym.spaces.Box(-np.inf, np.inf, (2,), np.float32)
            action_space = gym.spaces.Box(-1.0, 1.0, (1,), np.float32)

            def reset(self, seed=None, options=None):
                super().reset(seed=seed)
                self.x = np.zeros(2, np.float32)
                return self.x.copy(), {}

            def step(self, action):
                self.x[0] += 0.01 * float(action[0])
                return self.x.copy(), -abs(float(self.x[0])), False, False, {}

        return Drift()


def test_an_env_without_a_time_limit_is_warned_about_and_its_evaluation_and_collection_end(caplog):
    """Evaluation runs each episode to its end: with an env that never ends one it looped forever (SIGTERM,
    handled between iterations, did not stop it). The run now says so at the start, and evaluation cuts
    the episodes at ``STEPS_WITHOUT_TIME_LIMIT`` steps, saying so again. Dataset collection, which counts
    complete episodes, cuts them there too, flagged as truncations."""
    import gymnasium as gym

    from genpol.build import make_env
    from genpol.data.collect import collect_episodes
    from genpol.policy import STEPS_WITHOUT_TIME_LIMIT, evaluate_episodes

    gym.register("TestOnlyEndlessDrift-v0", entry_point=EndlessDrift)
    cfg = validate(compose_config(["env=gym", "env.id=TestOnlyEndlessDrift-v0", "env.num_envs=2"]))
    with caplog.at_level(logging.WARNING):
        make_env(cfg.env, gamma=0.99, seed=0).close()  # the training env warns
        with make_env(cfg.env, gamma=0.99, seed=0, training=False) as env:
            results = evaluate_episodes(env, lambda obs: torch.ones(obs.shape[0], 1), seed=0)
    assert (results.lengths == STEPS_WITHOUT_TIME_LIMIT).all()
    # every step's reward counts: -0.01 (1 + 2 + ... + 10000)
    np.testing.assert_allclose(results.returns, -0.01 * STEPS_WITHOUT_TIME_LIMIT * (STEPS_WITHOUT_TIME_LIMIT + 1) / 2,
                               rtol=1e-4)
    messages = [record.getMessage() for record in caplog.records]
    assert ("gym:TestOnlyEndlessDrift-v0 declares no time limit (max_episode_steps is None): its episodes end only "
            "when it ends them, and evaluation cuts an episode at 10000 steps; set env.max_episode_steps to give it "
            "one") in messages
    assert (f"gym:TestOnlyEndlessDrift-v0: 2 of 2 evaluation episodes had not ended after {STEPS_WITHOUT_TIME_LIMIT} "
            "steps and were cut there: the env declares no time limit (max_episode_steps is None); set "
            "env.max_episode_steps to give it one") in messages
    caplog.clear()
    with caplog.at_level(logging.WARNING):
        episodes, unfinished, env, _ = collect_episodes("gym:TestOnlyEndlessDrift-v0", "random", steps=1, num_envs=1)
        env.close()
    assert [len(episode["actions"]) for episode in episodes] == [STEPS_WITHOUT_TIME_LIMIT] and unfinished is None
    assert episodes[0]["truncations"][-1] and not episodes[0]["truncations"][:-1].any()
    assert not episodes[0]["terminations"].any() and len(episodes[0]["observations"]) == STEPS_WITHOUT_TIME_LIMIT + 1
    assert [record.getMessage() for record in caplog.records] == [
        "gym:TestOnlyEndlessDrift-v0 declares no time limit (max_episode_steps is None): episodes are cut every "
        f"{STEPS_WITHOUT_TIME_LIMIT} steps and flagged as truncated"]


def test_an_evaluation_episode_is_not_spoilt_by_what_its_env_does_after_it_ended():
    """Env 0 ends its episode (return 2) at step 2; its auto-reset next episode then returns NaN rewards,
    which NaN x 0 carried into the finished episode's return."""
    from genpol.envs import VectorEnv
    from genpol.policy import evaluate_episodes

    class NaNAfterItsEpisode(VectorEnv):
        num_envs, obs_dim, act_dim, device, max_episode_steps = 2, 1, 1, torch.device("cpu"), 4
        action_low, action_high = -torch.ones(1), torch.ones(1)

        def reset(self, seed=None):
            self.t = 0
            return torch.zeros(2, 1)

        def step(self, actions):
            self.t += 1
            reward = torch.tensor([float("nan") if self.t > 2 else 1.0, 1.0])
            ended = torch.tensor([self.t == 2, self.t == 4])
            return torch.zeros(2, 1), reward, ended, torch.zeros(2, dtype=torch.bool), {"final_obs": torch.zeros(2, 1)}

    results = evaluate_episodes(NaNAfterItsEpisode(), lambda obs: torch.zeros(2, 1), seed=0)
    assert results.returns.tolist() == [2.0, 4.0] and results.lengths.tolist() == [2, 4]


def test_a_dataset_an_online_learner_would_never_sample_is_refused_before_it_is_read(tmp_path, hopper_dataset):
    """``pipeline=online`` with ``dataset.path`` mixes the data into off-policy batches at
    ``learner.offline_ratio``: at 0 (SAC's default) the file would be read, held and never sampled. Refused,
    naming both keys, before the env is built."""
    dataset = [f"dataset.path={hopper_dataset}", "total_steps=10"]
    with pytest.raises(ConfigError, match=r"learner.offline_ratio=0 mixes none of it into the batches of learner=sac"):
        train(env="hopper", policy="tanh_gaussian", learner="sac", run_dir=tmp_path / "sac", overrides=dataset)
    assert not (tmp_path / "sac" / "checkpoints").exists()


@pytest.mark.parametrize("overrides, message", [
    (["learner=ppo", "dataset.path=data.hdf5"], r"dataset.path is set, but learner=ppo learns on-policy"),
    (["learner=sac", "policy=tanh_gaussian", "dataset.path=data.hdf5"], r"learner.offline_ratio=0 mixes none"),
    (["learner=sac", "policy=tanh_gaussian", "learner.offline_ratio=0.5"],
     r"learner.offline_ratio=0.5 draws that share of every batch from offline data, but dataset.path is not set"),
    (["+experiment=rlpd"], r"learner.offline_ratio=0.5 draws .* dataset.path is not set"),
    (["+experiment=expo"], r"learner.offline_ratio=0.5 draws .* dataset.path is not set"),
])
def test_validate_refuses_a_dataset_and_an_offline_ratio_that_disagree(overrides, message):
    """validate() (the config checks every entry point runs first) took these: the online pipeline refused the
    first two only after making the run's folder, and a ratio with no data failed when the learner was built."""
    with pytest.raises(ConfigError, match=message):
        validate(compose_config(["env=hopper", "run_dir=/tmp/unused", *overrides]))
    if "+experiment=rlpd" in overrides:  # what the bundle needs, given: it validates
        validate(compose_config(["env=hopper", "run_dir=/tmp/unused", *overrides, "dataset.path=data.hdf5"]))


def test_a_sweep_over_learners_imports_each_option_of_the_users_own(tmp_path):
    """``--multirun learner=td3,sac`` (or ``choice(...)``): every option is looked up in the config dirs and its
    module imported before Hydra composes the jobs (the comma list was looked up as one file, so the user's
    learner was never registered and the sweep failed with a schema it could not load). A module that does not
    import is named."""
    from genpol.configure import import_learner_modules

    (tmp_path / "learner").mkdir()
    (tmp_path / "learner" / "mine.yaml").write_text("module: no_such_module_of_mine\n")
    for value in ("sac,mine", "choice(sac, mine)", "[mine]"):
        with pytest.raises(ConfigError, match="no_such_module_of_mine"):
            import_learner_modules([f"learner={value}"], [tmp_path])
    import_learner_modules(["learner=sac,ppo"], [tmp_path])  # genpol's own: nothing to import


def test_a_sweep_with_a_bad_job_is_refused_before_any_job_starts(tmp_path):
    """``--multirun learner.lr=1e-3,-1 seed=0,1``: job 2 of 4 is bad. Hydra composes a job only when it starts,
    so the refusal came after jobs 0 and 1 had trained (hours, at real budgets), and it ended the sweep. Every job
    is now validated first: exit 2, the job and its value named, and no job's folder made."""
    from conftest import run_cli

    sweep = tmp_path / "sweep"
    result = run_cli("-m", "genpol.train", "--multirun", *PENDULUM, "total_steps=64", "learner.lr=1e-3,-1", "seed=0,1",
                     f"hydra.sweep.dir={sweep}", check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    assert "sweep job 2 of 4 (learner.lr=-1 seed=0)" in result.stderr and "learner.lr must be > 0" in result.stderr
    assert not sweep.exists()


def test_the_sweep_check_expands_as_hydras_basic_sweeper_and_leaves_what_it_cannot_follow_to_the_jobs(tmp_path):
    """Comma lists and range() expand to their product, a key given twice keeps its last value, hydra.* overrides
    go to every job. Left to the jobs (0 checked, nothing refused): a sweeper of another kind, a launcher that runs
    the jobs elsewhere (set by an experiment of the user's, whose device=cuda this machine may lack), and
    hydra.sweeper.params."""
    from genpol.sweep_check import check_sweep, sweep_axes
    from genpol.train import hydra_overrides

    argv = ["--multirun", "-cd", "mine", "env=gym,hopper", "seed=range(2)", "seed=0,1,2", "hydra.sweep.dir=x"]
    overrides, config_name = hydra_overrides(argv)
    assert overrides == ["env=gym,hopper", "seed=range(2)", "seed=0,1,2", "hydra.sweep.dir=x"] and config_name is None
    assert hydra_overrides(["-m", "--config-name", "mine", "a=1"]) == (["a=1"], "mine")
    # Hydra's other way to ask for a sweep: the single-run check (which refuses seed=0,1) must not take it
    from genpol.sweep_check import is_multirun

    assert is_multirun(["hydra.mode=MULTIRUN", "seed=0,1"]) and is_multirun(["--multirun"])
    assert not is_multirun(["hydra.mode=RUN", "seed=0"])
    assert sweep_axes(overrides) == ([["env=gym", "env=hopper"], ["seed=0", "seed=1", "seed=2"]], ["hydra.sweep.dir=x"])
    assert sweep_axes(["hydra/sweeper=optuna", "learner.lr=interval(1e-4, 1e-2)"]) is None
    assert check_sweep([*PENDULUM, "seed=0,1", "launcher=joblib"]) == 2
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "cluster.yaml").write_text(
        "# @package _global_\ndefaults:\n  - override /launcher: slurm\nlearner:\n  lr: -1\n")
    (tmp_path / "experiment" / "grid.yaml").write_text(
        "# @package _global_\nhydra:\n  sweeper:\n    params:\n      learner.lr: -1,1\n")
    for experiment in ("cluster", "grid"):
        assert check_sweep([*PENDULUM, f"+experiment={experiment}", "seed=0,1"], [str(tmp_path)]) == 0
    with pytest.raises(ConfigError, match=r"sweep job 0 of 2 \(seed=0\): learner.lr must be > 0"):
        check_sweep([*PENDULUM, "+experiment=cluster", "seed=0,1", "launcher=local"], [str(tmp_path)])


TINY_SWEEP = [*PENDULUM, "total_steps=64", "env.num_envs=1", "learner.rollout_steps=64", "pipeline.video=false",
              "pipeline.eval_episodes=1", "logger.progress_bar=false", "logger.tensorboard=false"]


@pytest.fixture(scope="module")
def finished_sweep(tmp_path_factory):
    """``--multirun run_dir=<it> seed=0``: a finished sweep of one tiny job, in ``<it>/0``."""
    from conftest import run_cli

    sweep = tmp_path_factory.mktemp("finished") / "sweep"
    run_cli("-m", "genpol.train", "--multirun", *TINY_SWEEP, f"run_dir={sweep}", "seed=0")
    assert (sweep / "0" / "summary.json").is_file()
    return sweep


def test_a_sweep_that_would_not_resume_a_saved_job_is_refused_before_any_job_starts(finished_sweep, tmp_path):
    """``seed=1,0`` into the run_dir of a ``seed=0`` sweep: job 0 (seed=1) found job 0's saved run (seed=0) only when it
    started, refused it and ended the sweep, so job 1 never ran. The check compares each job with the run saved in
    its folder, as the resume does, and names the job; the same sweep again (and more seeds) passes."""
    from conftest import run_cli

    from genpol.sweep_check import check_sweep

    before = sorted(path.name for path in finished_sweep.iterdir())
    result = run_cli("-m", "genpol.train", "--multirun", *TINY_SWEEP, f"run_dir={finished_sweep}", "seed=1,0",
                     check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    assert (f"sweep job 0 of 2 (seed=1): {finished_sweep / '0'} holds a run with a different config (seed: 0 -> 1)"
            in result.stderr), result.stderr[-2000:]
    assert sorted(path.name for path in finished_sweep.iterdir()) == before  # no job started
    assert check_sweep([*TINY_SWEEP, f"run_dir={finished_sweep}", "seed=0,1"]) == 2  # a resume, and a new job
    # a run_dir set by an experiment of the user's, not the command line: the check looked in a scratch folder
    (tmp_path / "experiment").mkdir()
    (tmp_path / "experiment" / "into_finished.yaml").write_text(f"# @package _global_\nrun_dir: {finished_sweep}\n")
    with pytest.raises(ConfigError, match=r"sweep job 0 of 2 \(seed=1\): .* holds a run with a different config"):
        check_sweep([*TINY_SWEEP, "+experiment=into_finished", "seed=1,0"], [str(tmp_path)])


def test_a_sweep_into_a_runs_own_folder_is_refused_before_any_job_starts(finished_sweep, tmp_path):
    """A finished run's folder given as a sweep's run_dir: job 0 trained in ``<run>/0``, among the run's files (a
    single run there is refused by check_run_dir). Each job's folder is checked the same way before launch, and
    again by the job when it starts (for launchers whose jobs run elsewhere)."""
    from conftest import run_cli

    run = tmp_path / "E_run"
    shutil.copytree(finished_sweep / "0", run)
    result = run_cli("-m", "genpol.train", "--multirun", *TINY_SWEEP, f"run_dir={run}", "seed=0", check=False)
    assert result.returncode == 2, result.stderr[-2000:]
    assert (f"sweep job 0 of 1 (its overrides): run_dir={run / '0'} lies inside the run {run}, among its files"
            in result.stderr), result.stderr[-2000:]
    assert not (run / "0").exists()


def test_a_key_given_twice_keeps_its_first_place_in_the_sweep_as_in_hydras(tmp_path):
    """``seed=0,1 learner.lr=1e-3,-1 seed=2,3``: Hydra's basic sweeper keeps seed first (with 2,3), so its job 1 is
    ``seed=2 learner.lr=-1``; the check moved seed last and named job 2, whose folder holds another job."""
    from hydra._internal.core_plugins.basic_sweeper import BasicSweeper
    from hydra.core.override_parser.overrides_parser import OverridesParser

    from genpol.sweep_check import check_sweep, sweep_axes

    overrides = ["seed=0,1", "learner.lr=1e-3,-1", "env=gym", "seed=2,3", "env.id=Pendulum-v1", "env=gym"]
    axes, _ = sweep_axes(overrides)
    hydras = BasicSweeper.split_arguments(OverridesParser.create().parse_overrides(overrides), None)[0]
    assert [list(job) for job in itertools.product(*axes)] == hydras
    with pytest.raises(ConfigError, match=r"^sweep job 1 of 4 \(seed=2 learner.lr=-1\): learner.lr must be > 0"):
        check_sweep([*overrides, f"run_dir={tmp_path}"])


def test_a_collection_that_cannot_fit_is_refused_before_the_rollout(tmp_path, capsys):
    """``genpol.data.collect --steps`` had no memory check: a collection larger than the memory ran for hours and
    then failed. Refused at the start (exit 2) naming --steps, with the bytes of the episodes and their D4RL copy,
    by hand: Pendulum's (3 x 3 + 2 x 1) x 4 + 20 = 64 bytes a transition over steps + num_envs x 200.
    The output folders, made before collecting to try writing there, do not outlive the refusal (they did);
    a folder that was there before stays."""
    import re

    from genpol.data.collect import collection_bytes, main

    assert collection_bytes(1000, 2, 200, 3, 1) == (1000 + 2 * 200) * 64
    (tmp_path / "mine").mkdir()
    with pytest.raises(SystemExit) as stopped:  # ghost/../mine is mine, which was there: it stays
        main(["--policy", "random", "--env", "gym:Pendulum-v1", "--steps", str(10**13), "--num-envs", "2",
              "--d4rl", str(tmp_path / "ghost" / ".." / "mine" / "data" / "pendulum.hdf5"),
              "--minari-root", str(tmp_path / "m")])
    assert stopped.value.code == 2
    assert re.search(r"genpol: ConfigError: --steps=10000000000000 needs 640\.0 TB for the collected episodes and "
                     r"their D4RL or Minari copy, but cpu has .* available: lower --steps", capsys.readouterr().err)
    assert sorted(path.name for path in tmp_path.rglob("*")) == ["mine"]
