"""Your own task: a gymnasium env and a batched torch simulator from the user's own package
(``tests/custom_envs``, reached through PYTHONPATH as a user's would be). Through the command line:
training with video (the gym env with 2 env workers), SIGKILL mid-run and a resume that ends
bit-identical to an uninterrupted run (the gym env's with 1 worker and the other id form), evaluation
with video and dataset collection in fresh processes. The conformance suite on the batched env and
on broken copies of it; bad inputs, each a one-line error naming the culprit."""

import json
import os
import signal
import subprocess
import sys
import warnings
from pathlib import Path

import h5py
import pytest
import torch

from genpol import envs
from custom_envs import SIGKILL_ENV
from genpol.envs import EnvError
from genpol.envs.testing import ProtocolViolation, check_vector_env
from genpol.api import compose_config
from genpol.checkpoint import list_checkpoints
from genpol.config import ConfigError
from genpol.configure import validate
from genpol.heads import build_head
from genpol.policy import TrainedPolicy, make_policy_spec

from conftest import REPO, assert_nonblank_mp4, assert_trees_equal, final_checkpoint
from warm_start import WarmProcess

TESTS = Path(__file__).resolve().parent
# 4 iterations of 2 envs x 32 steps, a checkpoint after each; episodes of 20 steps
TINY = ["env.num_envs=2", "env.max_episode_steps=20", "env.render_width=64", "env.render_height=64",
        "total_steps=256", "learner.rollout_steps=32", "learner.minibatch_size=64", "learner.epochs=2",
        "policy.hidden_sizes=[32,32]", "pipeline.checkpoint_every=1", "pipeline.eval_episodes=1",
        "logger.progress_bar=false", "logger.tensorboard=false"]
KILL_AT_ENV_STEP = 80  # in the 3rd iteration (env steps 65-96 of each env): checkpoints 64 and 128 exist
GYM_BY_ID = ["env=gym", "env.id=custom_envs.reach:MyReach-v0"]
GYM_BY_IMPORTS_TWO_WORKERS = ["env=gym", "env.id=MyReach-v0", "env.imports=[custom_envs.reach]", "env.workers=2"]
BATCHED = ["env=custom", "env.id=custom_envs.batched:make_env"]


def launch(tmp_path, name, *args, sigkill_at=None):
    """``python <args>`` from the repository root with the test package on PYTHONPATH (as a user's
    own package), output in ``tmp_path/<name>.log``; optionally SIGKILLed at an env step."""
    env = {**os.environ, "PYTHONWARNINGS": "ignore",
           "PYTHONPATH": os.pathsep.join(filter(None, [str(TESTS), os.environ.get("PYTHONPATH")]))}
    env.pop(SIGKILL_ENV, None)
    if sigkill_at is not None:
        env[SIGKILL_ENV] = str(sigkill_at)
    log_path = tmp_path / f"{name}.log"
    if args[0] == "-m":  # forked from the warm server (tests/warm_start.py)
        process = WarmProcess(args[1], list(args[2:]), REPO, env, log=log_path)
    else:
        with open(log_path, "w") as log:
            process = subprocess.Popen([sys.executable, *args], cwd=REPO, env=env, stdout=log, stderr=subprocess.STDOUT)
    process.log_path = log_path
    return process


def finish(process, expect=0):
    """Wait for ``process``; assert its exit code; return its output."""
    returncode = process.wait(timeout=300)
    output = process.log_path.read_text()
    assert returncode == expect, f"exit code {returncode}, expected {expect}:\n{output[-3000:]}"
    return output


def train(tmp_path, name, *args, sigkill_at=None):
    return launch(tmp_path, name, "-m", "genpol.train", *TINY, *args, f"run_dir={tmp_path / name}",
                  f"pipeline.video_dir={tmp_path / 'videos'}", sigkill_at=sigkill_at)








def train_here(root, name, *args):
    """The same run as ``train`` would start, in this process (where torch and genpol are already
    imported: a process costs ~3 s of imports on these machines); its summary."""
    from genpol.train import run_training

    run_dir = root / name
    cfg = validate(compose_config([*TINY, *args, f"run_dir={run_dir}", f"pipeline.video_dir={root / 'videos'}"]))
    return run_training(cfg, run_dir)


@pytest.fixture(scope="module")
def first_runs(tmp_path_factory):
    """For each env, a CLI run SIGKILLed mid-run, and meanwhile its uninterrupted reference, trained
    in this process with the same overrides but the other id form and worker count (gym: the
    ``<module>:<id>`` form with 1 worker against ``env.imports`` with 2). ``{env: (directory, killed
    process, reference summary)}``."""
    started = {}
    for env, killed_args in (("gym", GYM_BY_IMPORTS_TWO_WORKERS), ("batched", BATCHED)):
        root = tmp_path_factory.mktemp(env)
        started[env] = (root, train(root, "killed", *killed_args, sigkill_at=KILL_AT_ENV_STEP))
    try:
        runs = {env: (root, killed, train_here(root, "reference", *(GYM_BY_ID if env == "gym" else BATCHED)))
                for env, (root, killed) in started.items()}
        yield runs
    finally:
        for _, killed in started.values():
            if killed.poll() is None:  # a test failed before waiting for it
                killed.kill()
                killed.wait()


def check_killed_and_resumed(root, killed, killed_args):
    """``killed`` died by SIGKILL mid-run; re-running its command ends bit-identical to the reference."""
    finish(killed, expect=-signal.SIGKILL)
    steps_at_kill = [p.name for p in list_checkpoints(root / "killed" / "checkpoints")]
    assert steps_at_kill[-1] == "step_000000000128", steps_at_kill
    finish(train(root, "killed", *killed_args))
    name_a, _, weights_a, state_a = final_checkpoint(root / "reference")
    name_b, spec_b, weights_b, state_b = final_checkpoint(root / "killed")
    assert name_a == name_b == "step_000000000256"
    assert_trees_equal(weights_a, weights_b, "policy")
    for key in ("head", "algorithm", "env", "obs", "torch_rng", "global_step"):
        assert_trees_equal(state_a[key], state_b[key], key)
    return spec_b


def evaluate_and_collect(tmp_path, name, env_id):
    """``genpol.evaluate`` with video and ``genpol.data.collect`` on run ``name``, each in a fresh
    process that has to import the user's module from what the checkpoint records."""
    dataset = tmp_path / f"{name}.hdf5"
    evaluation = launch(tmp_path, f"{name}-evaluate", "-m", "genpol.evaluate", f"run_dir={tmp_path / name}",
                        "episodes=2", "video=true", f"video_dir={tmp_path / 'videos'}")
    collection = launch(tmp_path, f"{name}-collect", "-m", "genpol.data.collect", "--policy", str(tmp_path / name),
                        "--env", env_id, "--steps", "40", "--num-envs", "2", "--d4rl", str(dataset))
    finish(evaluation), finish(collection)
    results = json.loads((tmp_path / name / "evaluation.json").read_text())
    assert results["env"] == env_id and results["deterministic_length_mean"] == 20
    checkpoint = Path(results["checkpoint"]).name
    assert [Path(p).name for p in results["videos"]] == [f"deterministic-{checkpoint}-episode0.mp4",
                                                         f"stochastic-{checkpoint}-episode0.mp4"]
    for path in results["videos"]:
        assert_nonblank_mp4(path, size=(64, 64))
    with h5py.File(dataset) as data:
        assert data["observations"].shape[0] >= 40 and data["observations"].shape[1] == 4
        return data["actions"][:]


def test_gymnasium_env_of_a_user_module_from_the_cli(first_runs):
    """``env.imports=[<module>]`` with 2 workers on the command line, killed by SIGKILL mid-run and
    resumed, ends bit-identical to the ``env.id=<module>:<id>`` run with 1 worker; evaluation with
    video and collection, each in a fresh process, rebuild the env from the module the checkpoint
    records."""
    root, killed, reference = first_runs["gym"]
    spec = check_killed_and_resumed(root, killed, GYM_BY_IMPORTS_TWO_WORKERS)
    assert spec["env"]["id"] == "gym:MyReach-v0" and spec["env"]["imports"] == ["custom_envs.reach"]
    _, reference_spec, _, _ = final_checkpoint(root / "reference")
    assert reference_spec["env"]["id"] == "gym:custom_envs.reach:MyReach-v0" and reference_spec["env"]["imports"] == []
    assert_nonblank_mp4(reference["video"], size=(64, 64))
    assert_nonblank_mp4(json.loads((root / "killed" / "summary.json").read_text())["video"])
    evaluate_and_collect(root, "killed", "gym:MyReach-v0")


def test_batched_simulator_of_a_user_module_from_the_cli(first_runs):
    """``env=custom env.id=<module>:<factory>``: trains with video, resumes bit-identically after
    SIGKILL (its state_dict), evaluates with video and collects raw actions in its own bounds."""
    root, killed, _ = first_runs["batched"]
    spec = check_killed_and_resumed(root, killed, BATCHED)
    assert spec["env"]["id"] == "custom:custom_envs.batched:make_env"
    assert_nonblank_mp4(json.loads((root / "killed" / "summary.json").read_text())["video"])
    actions = evaluate_and_collect(root, "killed", "custom:custom_envs.batched:make_env")
    assert abs(actions).max() > 1.0 and abs(actions).max() <= 2.0  # the env's own [-2, 2], not [-1, 1]


def test_cli_errors_are_one_line_and_name_the_module(tmp_path):
    """A module of the user's that raises on import stops training with exit 2 and one line."""
    process = launch(tmp_path, "raises", "-m", "genpol.train", *TINY, "env=gym",
                     "env.id=custom_envs.raises_on_import:MyReach-v0", f"run_dir={tmp_path / 'run'}")
    output = finish(process, expect=2).strip()
    assert output.splitlines()[-1] == (
        "genpol: EnvError: module 'custom_envs.raises_on_import' (named by gym:custom_envs.raises_on_import:"
        "MyReach-v0) failed to import: RuntimeError: calibration file robot.yaml not found")
    assert "Traceback" not in output


def test_custom_backend_with_workers_is_a_config_error():
    with pytest.raises(ConfigError, match=r"env.workers must be 1 for env.backend=custom .*got 2"):
        validate(compose_config(["run_dir=/tmp/x", *BATCHED, "env.num_envs=2", "env.workers=2"]))
    with pytest.raises(EnvError, match="do not apply to a custom backend"):
        envs.make("custom:custom_envs.batched:make_env", num_envs=2, workers=2)
    with pytest.raises(ConfigError, match=r"env.imports must be a list of module names .*got \['my-pkg'\]"):
        validate(compose_config(["run_dir=/tmp/x", "env.imports=[my-pkg]"]))


def test_workers_import_the_module_of_an_id_registered_in_this_process():
    """The issue's case: ``import my_robot_env`` then ``gym:MyReach-v0`` with 2 workers. The id's
    entry-point module goes to the workers; an id whose registering module cannot be told from its
    entry point fails with a message about worker processes, not a wrong 'Did you mean'."""
    import gymnasium as gym

    import custom_envs.reach  # noqa: F401 - registers MyReach-v0 here, as the user's `import my_robot_env`

    with envs.make("gym:MyReach-v0", num_envs=2, workers=2, seed=0) as env:
        assert env.imports == ("custom_envs.reach",)
        assert env.reset().shape == (2, 4) and env.step(torch.zeros(2, 2))[0].shape == (2, 4)
    gym.register("TestOnlyPendulum-v0", entry_point="gymnasium.envs.classic_control.pendulum:PendulumEnv")
    try:
        with pytest.raises(EnvError, match=r"env worker 1 could not build gym:TestOnlyPendulum-v0, which this "
                                           r"process built: env workers start fresh \(spawn\)"):
            envs.make("gym:TestOnlyPendulum-v0", num_envs=2, workers=2)
    finally:
        gym.registry.pop("TestOnlyPendulum-v0")


@pytest.mark.parametrize("env_id,options", [
    pytest.param("custom:custom_envs.batched:make_env", {}, id="batched"),
    pytest.param("gym:custom_envs.reach:MyReach-v0", {}, id="gym-module-id"),
    pytest.param("genpol:MultiGoal", {"distinct_seeds": False}, id="genpol-multigoal"),
    # chunks of 3 env steps reach the limit of 8 at the third step, which runs 2: the suite counted agent steps
    pytest.param("genpol:MultiGoal", {"distinct_seeds": False, "action_chunk": 3}, id="genpol-multigoal-chunked"),
])
def test_conformance_suite_passes_on_working_envs(env_id, options):
    checked = check_vector_env(env_id, num_envs=3, max_episode_steps=8, **options)
    assert checked == ["attributes", "reset returns obs", "step returns the 5-tuple", "returned tensors are fresh",
                       "final observation", "time limit", "seeded reset", "exact resume"]


@pytest.mark.parametrize("broken,message", [
    ("NoFinalObsOnTruncation", r"rule 'final observation' .*missing final observation on truncation"),
    ("ReusesObservationBuffer", r"rule 'returned tensors are fresh' .*step 0's obs changed when step 1 ran"),
    ("IgnoresSeed", r"rule 'seeded reset' .*seeds 0 and 1 give identical episodes"),
    ("StateMissesGenerator", r"rule 'exact resume' .*does not continue the same episodes"),
    ("RewardWithExtraAxis", r"rule 'step returns the 5-tuple' .*reward must be \[3\] torch.float32 on cpu, got \[3, 1\]"),
    ("LateTimeLimit", r"rule 'time limit' .*reached max_episode_steps=8 at step 7 without ending"),
])
def test_conformance_suite_names_the_broken_rule(broken, message):
    from custom_envs import broken as broken_envs

    env_class = getattr(broken_envs, broken)
    with pytest.raises(ProtocolViolation, match=message):
        check_vector_env(lambda: env_class(num_envs=3, device=torch.device("cpu"), max_episode_steps=8))


@pytest.mark.parametrize("factory", ["make_env_without_state", "make_duck_typed_env"])
def test_without_state_dict_resume_is_inexact_and_says_so(factory):
    """A simulator without state_dict (a VectorEnv subclass, or a duck-typed class): it trains, the
    suite skips exact resume (or fails when it is demanded), and a resume resets every env with a
    seed derived from the saved step count, with a warning."""
    env_id = f"custom:custom_envs.batched:{factory}"
    assert "exact resume" not in check_vector_env(env_id, num_envs=2, max_episode_steps=8)
    with pytest.raises(ProtocolViolation, match="rule 'exact resume' .*no state_dict"):
        check_vector_env(env_id, num_envs=2, max_episode_steps=8, exact_resume=True)
    with envs.make(env_id, num_envs=2, seed=3) as env:
        env.reset()
        for _ in range(5):
            env.step(torch.zeros(2, 2))
        state = env.state_dict()
    assert state["inner"]["inner"] == {"exact": False, "reset_seed": 3 + 5}  # below EpisodeStats and ActionRescale

    def resumed_obs():
        with envs.make(env_id, num_envs=2) as fresh, pytest.warns(RuntimeWarning, match="has no state_dict.*reset"):
            fresh.load_state_dict(state)
            return fresh.step(torch.zeros(2, 2))[0]

    assert torch.equal(resumed_obs(), resumed_obs())
    # the episodes restart, and so do their statistics: the first episode after the resume is the new one's
    # 8 steps, not the saved 5 plus 8 (EpisodeStats kept its sums when the backend reset)
    with envs.make(env_id, num_envs=2, max_episode_steps=8) as fresh, pytest.warns(RuntimeWarning, match="reset"):
        fresh.load_state_dict(state)
        lengths = [fresh.step(torch.zeros(2, 2))[4]["episode_length"] for _ in range(8)]
    assert torch.cat(lengths).tolist() == [8, 8]


def test_an_inexact_resume_acts_from_the_new_episodes_first_observations(tmp_path, monkeypatch):
    """A resume that resets every env (no state_dict) must not choose its first action from the saved
    observation, which belongs to an episode the simulator no longer runs: the runner's observation after
    the resume is the new episodes' first one, the reset with the state's seed, through the wrappers."""
    from genpol.api import train
    from genpol.runners.base import EnvRunner

    loaded, original_load = [], EnvRunner.load

    def load(self, *args):
        original_load(self, *args)
        loaded.append((self.obs.clone(), self.env.state_dict()))

    monkeypatch.setattr(EnvRunner, "load", load)
    env_id = "custom:custom_envs.batched:make_env_without_state"
    overrides = [*TINY, "env=custom", "env.id=custom_envs.batched:make_env_without_state", "env.normalize_obs=false",
                 "env.normalize_reward=false", "pipeline.video=false"]
    train(overrides=[*overrides, "total_steps=64"], run_dir=tmp_path / "run")
    with pytest.warns(RuntimeWarning, match="has no state_dict"):
        train(overrides=[*overrides, "total_steps=128"], run_dir=tmp_path / "run")
    (obs, state), = loaded
    seed = state["inner"]["inner"]["reset_seed"]
    with envs.make(env_id, num_envs=2, max_episode_steps=20) as env:
        assert torch.equal(obs, env.reset(seed=seed))


def test_a_gym_env_whose_state_cannot_be_saved_resumes_inexactly_and_repeatably(tmp_path, monkeypatch):
    """A gymnasium env with its state out of genpol's reach (as Box2D's): its checkpoint says inexact, so the
    episode statistics restart, and two resumes from one checkpoint act from the same new episodes (the
    reset seeded from the run's seed and step), not from whatever an unseeded reset drew."""
    import shutil

    from genpol.api import train
    from genpol.runners.base import EnvRunner

    loaded, original_load = [], EnvRunner.load

    def load(self, *args):
        original_load(self, *args)
        loaded.append(self.obs.clone())

    monkeypatch.setattr(EnvRunner, "load", load)
    overrides = [*TINY, "env=gym", "env.id=custom_envs.reach:MyReachPrivate-v0", "env.normalize_obs=false",
                 "env.normalize_reward=false", "pipeline.video=false", "seed=5"]
    train(overrides=[*overrides, "total_steps=64"], run_dir=tmp_path / "a")
    shutil.copytree(tmp_path / "a", tmp_path / "b")
    for run in ("a", "b"):
        with pytest.warns(RuntimeWarning, match="state cannot be saved.*every env starts a new one"):
            train(overrides=[*overrides, "total_steps=128"], run_dir=tmp_path / run)
    with envs.make("gym:custom_envs.reach:MyReachPrivate-v0", num_envs=2, max_episode_steps=20) as env:
        env.reset(seed=0)
        assert env.state_dict()["inner"]["inner"]["exact"] is False
        expected = env.reset(seed=5 + 64)  # the run's seed plus the saved step count
    assert torch.equal(loaded[0], expected) and torch.equal(loaded[1], expected)


def test_a_custom_env_reports_success_flags_both_ends_and_keeps_its_action_chunk():
    """What the protocol asks of a custom env reaches the stack: ``reports_success`` (episode success in the
    statistics, the success rule checked), an end both terminated and truncated (gymnasium's TimeLimit on a
    terminal step: the conformance suite accepts it), and the ``action_chunk`` the factory was built with
    (what a saved policy's spec records) when the env sets no attribute of its own."""
    env_id = "custom:custom_envs.batched:make_goal_env"
    # tolerance 0.5 with a limit of 2: many episodes end at the target on the limit step
    checked = check_vector_env(env_id, num_envs=8, max_episode_steps=2, env_kwargs={"tolerance": 0.5})
    assert "success flag" in checked and "time limit" in checked
    with envs.make(env_id, num_envs=64, seed=0, max_episode_steps=2, env_kwargs={"tolerance": 0.5}) as env:
        assert env.reports_success
        env.reset()
        generator, both = torch.Generator().manual_seed(0), 0
        for _ in range(10):
            _, _, terminated, truncated, info = env.step(torch.rand(64, 2, generator=generator) * 4 - 2)
            both += int((terminated & truncated).sum())
            assert info["episode_success"].dtype == torch.bool
            assert info["episode_success"].tolist() == terminated[terminated | truncated].tolist()
        assert both > 0
    from genpol.envs.custom import make_custom

    with make_custom("custom_envs.batched:make_goal_env", num_envs=2, action_chunk=3) as env:
        assert env.action_chunk == 3
    with pytest.raises(EnvError, match=r"provides_episode_stats is set, but info has no episode_return / "
                                       r"episode_length \(at every step"):
        with make_custom("custom_envs.batched:make_goal_env", num_envs=2) as env:
            env.provides_episode_stats = True
            env.reset()
            env.step(torch.zeros(2, 2))
    # a success flag of another dtype failed deep in the episode statistics; a chunked env without env_steps
    # counted its episode lengths in chunks, silently
    for tamper, message in ((lambda info: info.update(success=info["success"].float()),
                             r"info\['success'\] must be \[2\] torch.bool on cpu, got \[2\] torch.float32"),
                            (lambda info: info.pop("success"), r"reports_success is set, but info has no 'success'"),
                            (None, r"the env executes action chunks, but info has no 'env_steps' \(\[N\] torch.int64")):
        with make_custom("custom_envs.batched:make_goal_env", num_envs=2, action_chunk=1 if tamper else 3) as env:
            if tamper is not None:
                env.env.step = tampered(env.env.step, tamper)
            env.reset()
            with pytest.raises(EnvError, match=message):
                env.step(torch.zeros(2, 2))
    with make_custom("custom_envs.batched:make_env_with_numpy_dims", num_envs=2) as env:  # policy.json's json.dumps
        assert type(env.obs_dim) is int and type(env.act_dim) is int


def tampered(step, tamper):
    """``step`` whose info ``tamper`` changes in place."""
    def tampered_step(actions):
        result = step(actions)
        tamper(result[4])
        return result
    return tampered_step


def test_old_policy_specs_without_imports_still_build_their_env():
    env = envs.make("gym:custom_envs.reach:MyReach-v0", num_envs=1)
    head = build_head("gaussian", env.obs_dim, env.act_dim)
    spec = make_policy_spec(head, env, "gym:custom_envs.reach:MyReach-v0", {}, 20, (64, 64))
    env.close()
    assert spec["env"]["imports"] == []
    del spec["env"]["imports"]  # as written before the field existed
    policy = TrainedPolicy(head, spec, None)
    assert policy.imports == []
    with policy.make_env(num_envs=2, seed=0) as rebuilt:
        assert rebuilt.reset().shape == (2, 4)


@pytest.mark.parametrize("normalization", ["running", "minmax"])
def test_a_policy_whose_env_changed_dims_is_refused_before_its_statistics_are_loaded(normalization):
    """A policy trained on a 4-dim simulator whose env now has 3 (Pendulum under its id): the saved
    observation statistics met the new env first and failed with a shape error that named neither (exit 1),
    which ``genpol-evaluate video=true`` reported as a failed video."""
    from genpol.errors import CheckpointError

    with envs.make("custom:custom_envs.batched:make_env", num_envs=1, normalize_obs=normalization == "running",
                   obs_bounds=(-torch.ones(4), torch.ones(4)) if normalization == "minmax" else None) as env:
        head = build_head("gaussian", env.obs_dim, env.act_dim)
        spec = make_policy_spec(head, env, "gym:Pendulum-v1", {}, 20, (64, 64))
        state = (env.find(envs.ObservationNormalizer) or env.find(envs.ObservationScaler)).own_state()
    assert spec["obs_normalization"] == normalization and spec["env"]["obs_dim"] == 4
    policy = TrainedPolicy(head, spec, state, source=Path("run/checkpoints/step_000000000064"))
    with pytest.raises(CheckpointError, match=r"^gym:Pendulum-v1 now has obs/act dims 3/1, 4/2 were asked for: the "
                                              r"policy was trained with 4/2 \(run/checkpoints/step_000000000064\)$"):
        policy.make_env(num_envs=1)


@pytest.mark.parametrize("make,message", [
    pytest.param(lambda: envs.make("gym:no_such_robot_pkg:MyReach-v0"),
                 r"^cannot import module 'no_such_robot_pkg' \(named by gym:no_such_robot_pkg:MyReach-v0\): "
                 r"ModuleNotFoundError: No module named 'no_such_robot_pkg'; is it installed, or its directory on "
                 r"PYTHONPATH\?$", id="missing-module-in-id"),
    pytest.param(lambda: envs.make("gym:Pendulum-v1", imports=["no_such_robot_pkg.envs"]),
                 r"^cannot import module 'no_such_robot_pkg.envs' \(named by imports: env.imports, or --import",
                 id="missing-module-in-imports"),
    pytest.param(lambda: envs.make("custom:custom_envs.raises_on_import:make_env"),
                 r"^module 'custom_envs.raises_on_import' \(named by custom:custom_envs.raises_on_import:make_env\) "
                 r"failed to import: RuntimeError: calibration file robot.yaml not found$", id="module-raises"),
    pytest.param(lambda: envs.make("gym:custom_envs.reach:MyReacher-v0"),
                 r"^module 'custom_envs.reach' registers no gymnasium id 'MyReacher-v0' .*the ids it registers: "
                 r"MyReach-v0, MyReachPrivate-v0. Did you mean gym:custom_envs.reach:MyReach-v0\?$", id="id-not-registered"),
    pytest.param(lambda: envs.make("custom:custom_envs.batched:make_not_an_env"),
                 r"^custom:custom_envs.batched:make_not_an_env returned a gymnasium.wrappers.common.TimeLimit, not a "
                 r"vector env: it lacks num_envs, device, obs_dim, act_dim, action_low, action_high",
                 id="factory-returns-no-vector-env"),
    pytest.param(lambda: envs.make("custom:custom_envs.batched:make_environment"),
                 r"^custom:custom_envs.batched:make_environment: module 'custom_envs.batched' has no "
                 r"'make_environment'.*Did you mean custom:custom_envs.batched:make_env\?$", id="factory-missing"),
    pytest.param(lambda: envs.make("custom:custom_envs.batched:make_env_without_state", render=True),
                 r"the factory takes no 'render' argument, which a video .* needs", id="factory-cannot-render"),
    pytest.param(lambda: envs.make("custom:custom_envs.batched"),
                 r"a custom env id is 'custom:<module>:<factory>'", id="custom-id-without-factory"),
    # a misspelt task argument was a TypeError traceback (dm_control's naming its suite's run())
    pytest.param(lambda: envs.make("dmc:cartpole-swingup", env_kwargs={"tim_limit": 5}),
                 r"^dmc:cartpole-swingup does not take the arguments env.kwargs=\{'tim_limit': 5\}: ",
                 id="dmc-kwargs-typo"),
    pytest.param(lambda: envs.make("genpol:MultiGoal", env_kwargs={"goal_dist": 5}),
                 r"^genpol:MultiGoal does not take the arguments env.kwargs=\{'goal_dist': 5\}: ",
                 id="genpol-kwargs-typo"),
    # a custom factory called with what it cannot take was a TypeError traceback too (exit 1)
    pytest.param(lambda: envs.make("custom:custom_envs.batched:make_env_without_state", env_kwargs={"goal_radus": 1}),
                 r"^custom:custom_envs.batched:make_env_without_state does not take the arguments "
                 r"env.kwargs=\{'goal_radus': 1\}: ", id="custom-kwargs-typo"),
    pytest.param(lambda: envs.make("custom:custom_envs.batched:make_env", env_kwargs={"goal_radus": 1}),
                 r"^custom:custom_envs.batched:make_env does not take the arguments env.kwargs=\{'goal_radus': 1\}: "
                 r".*unexpected keyword argument 'goal_radus'", id="custom-kwargs-typo-forwarded"),
    pytest.param(lambda: envs.make("custom:custom_envs.batched:make_env_without_seed"),
                 r"^custom:custom_envs.batched:make_env_without_seed: the factory cannot be called as genpol calls it, "
                 r"with \['device', 'num_envs', 'seed'\]: got an unexpected keyword argument 'seed'",
                 id="custom-factory-without-seed"),
    pytest.param(lambda: envs.make("custom:custom_envs.batched:make_env_without_seed", env_kwargs={"widht": 2}),
                 r"^custom:custom_envs.batched:make_env_without_seed: the factory cannot be called as genpol calls it",
                 id="custom-factory-without-seed-and-a-kwarg"),  # not blamed on the user's key
    pytest.param(lambda: envs.make("custom:custom_envs.batched:make_env_with_required_width"),
                 r"^custom:custom_envs.batched:make_env_with_required_width: the factory requires \['width'\], which "
                 r"genpol does not pass: set them as env.kwargs \(\+env.kwargs.width=...\)$",
                 id="custom-required-kwarg"),
    pytest.param(lambda: envs.make("genpol:MultiGoal", env_kwargs={"seed": 5}),
                 r"^genpol:MultiGoal: env.kwargs may not set \['seed'\]", id="genpol-kwargs-seed"),
    pytest.param(lambda: envs.make("custom:custom_envs.batched:make_env_with_reversed_bounds"),
                 r"action_low must be below action_high in every dimension, got 2.0 >= -2.0 in dimension 1$",
                 id="reversed-action-bounds"),
])
def test_bad_inputs_give_one_line_errors_naming_the_culprit(make, message):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # gymnasium's own warnings about Pendulum made by the bad factory
        with pytest.raises(EnvError, match=message) as error:
            make()
    assert "\n" not in str(error.value)


def test_collect_imports_named_modules_and_exits_with_one_line(tmp_path, capsys):
    from genpol.data.collect import main as collect_main

    with pytest.raises(SystemExit) as stop:
        collect_main(["--policy", "random", "--env", "gym:Pendulum-v1", "--import", "no_such_robot_pkg",
                      "--steps", "10", "--d4rl", str(tmp_path / "never.hdf5")])
    assert stop.value.code == 2
    assert capsys.readouterr().err == ("genpol: EnvError: cannot import module 'no_such_robot_pkg' (named by imports: "
                                       "env.imports, or --import of genpol.data.collect): ModuleNotFoundError: No "
                                       "module named 'no_such_robot_pkg'; is it installed, or its directory on "
                                       "PYTHONPATH?\n")
    report = collect_main(["--policy", "random", "--env", "gym:MyReach-v0", "--import", "custom_envs.reach",
                           "--steps", "40", "--num-envs", "2", "--d4rl", str(tmp_path / "reach.hdf5")])
    assert report["steps"] >= 40 and (tmp_path / "reach.hdf5").exists()
