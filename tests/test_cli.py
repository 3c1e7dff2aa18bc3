"""The command line and the Python API, end to end with tiny budgets."""

import json
import shutil
from pathlib import Path

import numpy as np
import pytest
import torch

from conftest import assert_nonblank_mp4, run_cli

MULTIGOAL_TINY = ["env=multigoal", "total_steps=4096", "learner.rollout_steps=64", "learner.minibatch_size=256",
                  "learner.epochs=2", "pipeline.eval_episodes=4", "pipeline.checkpoint_every=2"]




@pytest.fixture(scope="module")
def trained_run(tmp_path_factory):
    root = tmp_path_factory.mktemp("cli")
    run_dir = root / "tiny"
    # a cold interpreter: the CLI exactly as from a shell (the suite's other runs fork a warm one)
    result = run_cli("-m", "genpol.train", *MULTIGOAL_TINY, f"run_dir={run_dir}",
                     f"pipeline.video_dir={root / 'videos'}", cold=True)
    return root, run_dir, result


def test_train_leaves_summary_checkpoint_logs_curve_and_video(trained_run):
    root, run_dir, result = trained_run
    summary = json.loads((run_dir / "summary.json").read_text())
    for key in ("env_steps", "episodic_return_mean", "sps", "wall_time_s", "checkpoint", "eval_return_mean"):
        assert summary[key] is not None, key
    assert summary["env_steps"] == 4096
    assert (run_dir / "checkpoints").is_dir() and summary["checkpoint"].endswith("step_000000004096")
    assert list((run_dir / "tb").glob("events.out.tfevents.*"))
    assert (run_dir / "learning_curve.png").stat().st_size > 5000
    assert (run_dir / "config.yaml").exists()
    assert summary["video"] == str(root / "videos" / "tiny" / "final-episode0.mp4")
    assert_nonblank_mp4(summary["video"])
    assert '"env_steps": 4096' in result.stdout


def test_tensorboard_uses_the_standard_names(trained_run):
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    _, run_dir, _ = trained_run
    events = EventAccumulator(str(run_dir / "tb"))
    events.Reload()
    tags = set(events.Tags()["scalars"])
    for name in ("charts/episodic_return", "charts/SPS", "losses/policy", "losses/value", "losses/approx_kl",
                 "losses/clipfrac", "losses/explained_variance", "losses/ratio_deviation", "head/std"):
        assert name in tags, name


def test_evaluate_reports_both_modes_and_writes_videos(trained_run):
    root, run_dir, _ = trained_run
    result = run_cli("-m", "genpol.evaluate", f"run_dir={run_dir}", "episodes=3", "video=true",
                     f"video_dir={root / 'eval_videos'}")
    report = json.loads(result.stdout[result.stdout.index("{"):])
    assert set(report) >= {"deterministic_return_mean", "stochastic_return_mean", "checkpoint", "videos"}
    assert report["episodes"] == 3
    names = sorted(p.split("/")[-1] for p in report["videos"])
    checkpoint = Path(report["checkpoint"]).name  # evaluating another checkpoint keeps this one's videos
    assert names == [f"deterministic-{checkpoint}-episode0.mp4", f"stochastic-{checkpoint}-episode0.mp4"]
    for path in report["videos"]:
        assert_nonblank_mp4(path)
    assert json.loads((run_dir / "evaluation.json").read_text()) == report


def test_evaluate_defaults_agree_between_the_command_line_and_the_api():
    """The command line recorded videos unless told not to (into ./videos of any folder), the API did not."""
    import inspect

    from genpol.api import evaluate
    from genpol.config import EvaluateConfig

    for name, parameter in inspect.signature(evaluate).parameters.items():
        if parameter.default is not inspect.Parameter.empty and name != "checkpoint":
            assert getattr(EvaluateConfig, name) == parameter.default, name


def test_a_refused_command_leaves_no_run_folder(tmp_path):
    """Hydra makes the CLI's default run folder (runs/<date>/<time>) before genpol validates the config: each
    refused command left one behind, holding an empty train.log (the API's call already removed its own). A
    day's folder that holds other runs stays."""
    (tmp_path / "runs" / "2026-01-01" / "12-00-00").mkdir(parents=True)
    result = run_cli("-m", "genpol.train", "env=pendulum", "learner.lr=-1", cwd=tmp_path, check=False)
    assert result.returncode == 2 and "learner.lr must be > 0, got -1.0" in result.stderr
    # refused after the run began in it (config.yaml, the lock): the env cannot be made
    result = run_cli("-m", "genpol.train", "env=gym", "env.id=NoSuchEnv-v0", cwd=tmp_path, check=False)
    assert result.returncode == 2 and "unknown gymnasium id 'gym:NoSuchEnv-v0'" in result.stderr
    # a folder the user named is not genpol's to remove, even empty (Hydra's log of the refusal stays in it)
    (tmp_path / "mine").mkdir()
    result = run_cli("-m", "genpol.train", "hydra.run.dir=mine", "learner.lr=-1", cwd=tmp_path, check=False)
    assert result.returncode == 2
    assert [path.relative_to(tmp_path).as_posix() for path in sorted(tmp_path.rglob("*"))] == [
        "mine", "mine/train.log", "runs", "runs/2026-01-01", "runs/2026-01-01/12-00-00"]


def test_evaluate_names_a_missing_run(tmp_path):
    result = run_cli("-m", "genpol.evaluate", f"run_dir={tmp_path / 'nothing'}", check=False)
    assert result.returncode == 2 and "nothing does not exist: expected a run directory" in result.stderr
    (tmp_path / "empty").mkdir()  # a directory, given as genpol-report takes its folder: no checkpoint there
    result = run_cli("-m", "genpol.evaluate", str(tmp_path / "empty"), check=False)
    assert result.returncode == 2 and f"no checkpoint in {tmp_path / 'empty'}" in result.stderr


def test_help_lists_each_groups_options_and_not_their_schemas():
    """Hydra's --help listed the typed schemas (schema_ppo, ...) among each group's options; choosing one is
    refused, so they are left out."""
    result = run_cli("-m", "genpol.train", "--help")
    listed = result.stdout.split("== Config ==")[0]  # the groups, before the composed config
    groups = dict(line.split(": ", 1) for line in listed.splitlines() if line.split(":")[0] in ("learner", "policy",
                                                                                                  "pipeline"))
    assert groups["learner"].split(", ") == ["aspo", "consistency_ac", "expo", "maxentdp", "meow", "ppo", "sac", "spo",
                                             "trpo"]
    assert groups["pipeline"] == "gorl, offline_to_online, online" and "gaussian" in groups["policy"].split(", ")
    assert "schema_" not in result.stdout and "== Config ==" in result.stdout


def test_any_gymnasium_id_and_a_multirun_sweep(tmp_path):
    run_cli("-m", "genpol.train", "--multirun", "env=gym", "env.id=Pendulum-v1", "seed=0,1", "total_steps=512",
            "learner.rollout_steps=128", "env.num_envs=2", "learner.epochs=1", "pipeline.video=false",
            "pipeline.eval_episodes=1", "logger.progress_bar=false", f"run_dir={tmp_path / 'sweep'}")
    seeds = [json.loads((tmp_path / "sweep" / str(job) / "summary.json").read_text())["seed"] for job in (0, 1)]
    assert seeds == [0, 1]


def test_python_api_trains_evaluates_and_predicts(tmp_path):
    """Also: evaluate() takes the command line's device and torch_threads; predict takes a big-endian or read-only
    array (HDF5, MATLAB, a ROS buffer: torch refused the one and warned on the other); load_policy takes a
    checkpoint's policy/ folder, and names what is missing where that folder was copied alone."""
    import shutil
    import warnings

    from genpol.api import evaluate, load_policy, train
    from genpol.errors import CheckpointError

    summary = train(env="genpol:MultiGoal", total_steps=2048, run_dir=tmp_path / "api",
                    overrides=["learner.rollout_steps=64", "learner.epochs=1", "pipeline.video=false",
                               "logger.progress_bar=false", "pipeline.eval_episodes=2"])
    assert summary["env_steps"] == 2048 and summary["env"] == "genpol:MultiGoal"
    results = evaluate(tmp_path / "api", episodes=2)
    assert np.isfinite(results["deterministic_return_mean"])
    assert evaluate(tmp_path / "api", episodes=2, device="cpu", torch_threads=2) == results
    policy = load_policy(tmp_path / "api")
    action = policy.predict(np.zeros(2))
    assert action.shape == (2,) and np.all(np.abs(action) <= 1)
    # close, not equal: a batch of 3 and a single row may take different GEMM kernels (an Intel Xeon's differ in
    # the last bits of float32, 2026-12-07; an AMD EPYC's did not)
    torch.testing.assert_close(torch.as_tensor(policy.predict(np.zeros((3, 2)))[0]), torch.as_tensor(action))
    obs = np.array([0.3, -1.2])
    read_only = np.frombuffer(obs.tobytes(), dtype=np.float64)
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        assert np.array_equal(policy.predict(obs.astype(">f8")), policy.predict(obs))
        assert np.array_equal(policy.predict(read_only), policy.predict(obs))
    checkpoint = sorted((tmp_path / "api" / "checkpoints").glob("step_*"))[-1]
    assert np.array_equal(load_policy(checkpoint / "policy").predict(obs), policy.predict(obs))
    shutil.copytree(checkpoint / "policy", tmp_path / "deployed" / "policy")
    with pytest.raises(CheckpointError, match=r"holds a policy's files without the checkpoint around them"):
        load_policy(tmp_path / "deployed" / "policy")


def test_evaluate_repeats_the_runs_own_evaluation_wherever_it_is_pointed(tmp_path):
    """genpol.evaluate of a run that evaluates stochastically (EXPO's and Consistency-AC's bundles) gives the
    run's own number (its draws were unseeded), in a folder a sweep would name (Hydra syntax in the path),
    leaving the caller's thread count; pointed at a checkpoint it files its results with the run, not in
    the checkpoint, and an earlier checkpoint's apart from the final one's; a video that cannot render leaves the
    returns; a bad device is named as such; loading leaves the caller's random draws."""
    from genpol.api import evaluate, load_policy, train
    from genpol.errors import CheckpointError, ConfigError

    run = tmp_path / "seed=1,lr=3e-4"
    summary = train(env="hopper", total_steps=256, run_dir=run,
                    overrides=["env.num_envs=2", "learner.rollout_steps=64", "learner.epochs=1",
                               "pipeline.checkpoint_every=1", "policy.hidden_sizes=[16,16]",
                               "pipeline.eval_deterministic=false",
                               "pipeline.eval_episodes=2", "pipeline.video=false", "logger.progress_bar=false"])
    torch.set_num_threads(2)
    try:
        assert evaluate(run, episodes=2)["stochastic_return_mean"] == summary["eval_return_mean"]
        assert torch.get_num_threads() == 2
    finally:
        torch.set_num_threads(1)
    (run / "evaluation.json").unlink()
    checkpoint = sorted((run / "checkpoints").glob("step_*"))[-1]
    evaluate(checkpoint, episodes=1)
    assert (run / "evaluation.json").is_file() and not (checkpoint / "evaluation.json").exists()
    # relative to the run (it was resolved against the working directory and refused as another run's)
    assert evaluate(run, episodes=1, checkpoint=f"checkpoints/{checkpoint.name}")["checkpoint"] == str(checkpoint)
    # an earlier checkpoint's evaluation overwrote the final one's evaluation.json: it has a file of its own
    final = json.loads((run / "evaluation.json").read_text())
    earlier = sorted((run / "checkpoints").glob("step_*"))[0]
    assert earlier != checkpoint and evaluate(run, episodes=1, checkpoint=str(earlier))["checkpoint"] == str(earlier)
    assert json.loads((run / "evaluation.json").read_text()) == final
    assert json.loads((run / f"evaluation-checkpoints-{earlier.name}.json").read_text())["checkpoint"] == str(earlier)
    # a checkpoint copied into a project with a config.yaml of its own: the project's evaluation.json was replaced
    project = tmp_path / "project"
    shutil.copytree(checkpoint, project / "exported" / checkpoint.name)
    (project / "config.yaml").write_text("mine: true\n")
    (project / "evaluation.json").write_text("the project's own")
    evaluate(project / "exported" / checkpoint.name, episodes=1)
    assert (project / "evaluation.json").read_text() == "the project's own"
    # a mistyped step: named as missing, with the run's checkpoints (it was called another run's checkpoint)
    with pytest.raises(CheckpointError, match=r"checkpoint=checkpoints/step_nope does not exist \(looked at .*\); "
                                              r"run_dir=.* holds checkpoints/step_\d+"):
        evaluate(run, episodes=1, checkpoint="checkpoints/step_nope")
    # a checkpoint of another folder beside a run_dir: the run_dir was ignored
    with pytest.raises(ConfigError, match=r"checkpoint=.*exported/step_\d+ is not a checkpoint of run_dir="):
        evaluate(run, episodes=1, checkpoint=str(project / "exported" / checkpoint.name))
    (tmp_path / "not_a_folder").write_text("")  # a video that cannot be written
    result = run_cli("-m", "genpol.evaluate", str(run), "episodes=1", "video=true",
                     f"video_dir={tmp_path / 'not_a_folder'}")
    assert "video failed" in result.stderr and "evaluating without video" in result.stderr
    assert np.isfinite(json.loads((run / "evaluation.json").read_text())["deterministic_return_mean"])
    with pytest.raises(ConfigError, match=r"device must be a torch device such as cpu, cuda or cuda:1, got .cdua."):
        load_policy(run, device="cdua")
    # the head's initialization before its weights load drew from the caller's generator, moving later draws
    torch.manual_seed(5)
    expected = torch.rand(3)
    torch.manual_seed(5)
    load_policy(run)
    assert torch.equal(torch.rand(3), expected)


def test_python_api_takes_a_bundles_groups_unless_it_names_its_own(tmp_path, monkeypatch):
    """train() with no env, policy or learner trains what an +experiment= bundle selects (it used to force
    halfcheetah, gaussian and ppo over it, as a command-line env=... would: +experiment=rlpd then failed to
    compose); a group named in the call wins over the bundle's, and with no bundle the defaults hold."""
    import genpol.train
    from genpol.api import train

    monkeypatch.setattr(genpol.train, "run_training", lambda cfg, run_dir: cfg)  # the composed config, untrained
    bundle = train(run_dir=tmp_path / "a", overrides=["+experiment=meow_multigoal"])
    assert (bundle.env.kwargs["reward"], bundle.policy.family, bundle.learner.name) == ("softlearning", "energy_flow", "meow")
    named = train("pendulum", run_dir=tmp_path / "b", overrides=["+experiment=meow_multigoal"])
    assert (named.env.id, named.learner.name) == ("Pendulum-v1", "meow")
    default = train(run_dir=tmp_path / "c")
    assert (default.env.id, default.policy.family, default.learner.name) == ("HalfCheetah-v5", "gaussian", "ppo")


def test_python_api_trains_in_the_run_dir_its_config_records(tmp_path, monkeypatch):
    """An override's run_dir is Hydra syntax: quoted (run_dir='...') it trained in a folder whose name kept the
    quotes, interpolated in one named by the raw text, while the config recorded the resolved folder.
    train(run_dir="") trained into the working directory (Path("") is "."), which the command line refuses;
    learner= and updater= (its old name) given both kept updater silently."""
    import genpol.train
    from genpol.api import train
    from genpol.errors import ConfigError

    monkeypatch.setattr(genpol.train, "run_training", lambda cfg, run_dir: (cfg, Path(run_dir)))
    target = tmp_path / "quoted folder"
    for given in ({"overrides": [f"run_dir='{target}'"]}, {"run_dir": target, "overrides": [f"run_dir='{target}'"]}):
        cfg, used = train(**given)
        assert used == target and cfg.run_dir == str(target)
    monkeypatch.setenv("GENPOL_TEST_RUNS", str(tmp_path))
    cfg, used = train(overrides=["run_dir=${oc.env:GENPOL_TEST_RUNS}/x"])
    assert used == tmp_path / "x" and cfg.run_dir == str(tmp_path / "x")
    with pytest.raises(ConfigError, match="run_dir=.*differ: give one"):
        train(run_dir=tmp_path / "other", overrides=[f"run_dir='{target}'"])
    for given in ({"run_dir": ""}, {"run_dir": " "}, {"overrides": ["run_dir="]}):
        with pytest.raises(ConfigError, match="run_dir must be a directory path"):
            train(**given)
    with pytest.raises(ConfigError, match="learner=sac and updater=ppo .its old name. differ"):
        train(learner="sac", updater="ppo")
    assert not (tmp_path / "runs").exists()  # the default folder is claimed after the arguments' checks
    with pytest.warns(FutureWarning, match="now train.learner"):
        cfg, _ = train(policy="tanh_gaussian", learner="sac", updater="sac", run_dir=tmp_path / "z")
    assert cfg.learner.name == "sac"


def test_cluster_launchers(tmp_path):
    """launcher=slurm composes (submitit's SLURM launcher), and launcher=submitit_local runs a sweep
    as separate processes through the same job packaging."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from hydra import compose, initialize_config_module

    from genpol.configure import register_configs

    register_configs()
    with initialize_config_module("genpol.configs", version_base="1.3"):
        cfg = compose("config", overrides=["launcher=slurm", "run_dir=/tmp/x"], return_hydra_config=True)
    assert cfg.hydra.launcher._target_.endswith("SlurmLauncher") and cfg.hydra.launcher.cpus_per_task == 4
    run_cli("-m", "genpol.train", "--multirun", "launcher=submitit_local", "env=multigoal", "seed=0,1",
            "total_steps=512", "learner.rollout_steps=32", "learner.epochs=1", "pipeline.video=false",
            "pipeline.eval_episodes=2", "pipeline.eval_deterministic=false", "logger.progress_bar=false",
            f"run_dir={tmp_path / 'sweep'}")
    summaries = [json.loads((tmp_path / "sweep" / str(job) / "summary.json").read_text()) for job in (0, 1)]
    assert sorted(summary["seed"] for summary in summaries) == [0, 1]
    assert [summary["eval_deterministic"] for summary in summaries] == [False, False]  # every job's own override


def test_evaluating_a_checkpoint_reproduces_the_runs_own_evaluation(tmp_path):
    """The checkpoint carries everything evaluation needs: with running observation normalization,
    `genpol.evaluate` on the saved policy gives the training run's final evaluation return exactly
    (same reset seeds, same deterministic policy, frozen statistics)."""
    run_cli("-m", "genpol.train", "env=pendulum", "env.num_envs=2", "total_steps=1024", "learner.rollout_steps=128",
            "learner.epochs=2", "pipeline.eval_episodes=3", "pipeline.video=false", "logger.progress_bar=false",
            f"run_dir={tmp_path / 'run'}")
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    result = run_cli("-m", "genpol.evaluate", f"run_dir={tmp_path / 'run'}", "episodes=3", "video=false")
    report = json.loads(result.stdout[result.stdout.index("{"):])
    assert report["deterministic_return_mean"] == pytest.approx(summary["eval_return_mean"], rel=1e-6)
    assert summary["eval_deterministic"] is True


def test_the_evaluation_draws_fresh_actions_when_asked():
    """``pipeline.eval_deterministic=false`` (how Ding & Jin's consistency code evaluates): the evaluation acts
    as in training, with fresh draws every step, where the default acts deterministically."""
    from types import SimpleNamespace

    from genpol import envs
    from genpol.callbacks.evaluation import EVAL_SEED, Evaluation
    from genpol.heads.gaussian import GaussianHead
    from genpol.policy import evaluate_episodes

    torch.manual_seed(0)
    runner = SimpleNamespace(head=GaussianHead(3, 1, hidden_sizes=(8,)))  # all the callback reads of its runner

    def make_env(episodes, video_dir, prefix):
        return envs.make("gym:Pendulum-v1", num_envs=episodes, max_episode_steps=50)

    returns = {}
    for deterministic in (True, False):
        torch.manual_seed(3)
        returns[deterministic] = Evaluation(make_env, 3, deterministic=deterministic).evaluate(runner)[0].returns
    for deterministic in (True, False):
        torch.manual_seed(EVAL_SEED)  # the evaluation's own draws: torch's generator forked and seeded so
        expected = evaluate_episodes(make_env(3, None, ""), lambda obs: runner.head.act(obs, deterministic),
                                     EVAL_SEED).returns
        assert np.array_equal(returns[deterministic], expected)
    assert not np.allclose(returns[False], returns[True])
