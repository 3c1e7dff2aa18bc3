"""Nothing lost when something fails: failures at the end of training cost their artifact alone,
non-finite values stop training without a bad checkpoint, a failed checkpoint write keeps the
previous one, and one run directory has one writer."""

import dataclasses
import errno
import json
import math
import os
import time
from pathlib import Path

import gymnasium as gym
import numpy as np
import pytest
import torch

from genpol.api import load_policy, train
from genpol.checkpoint import CheckpointError, list_checkpoints, load_policy_files
from genpol.runners.guards import NonFiniteError, RunDirBusyError, hold_run_dir

from conftest import REPO
from warm_start import WarmProcess, warm_run

# 4 iterations of 2 x 64 steps on Pendulum, a checkpoint after each
TINY = ["env.num_envs=2", "learner.rollout_steps=64", "learner.epochs=1", "pipeline.checkpoint_every=1",
        "pipeline.eval_episodes=1", "logger.progress_bar=false", "env.max_episode_steps=64"]


def tiny_run(tmp_path, **kwargs):
    overrides = [*TINY, f"pipeline.video_dir={tmp_path / 'videos'}", *kwargs.pop("overrides", [])]
    return train("pendulum", total_steps=kwargs.pop("total_steps", 512), run_dir=tmp_path / "run",
                 overrides=overrides, **kwargs)


def all_finite_checkpoints(run_dir):
    paths = list_checkpoints(run_dir / "checkpoints")
    for path in paths:
        _, weights = load_policy_files(path)
        assert all(torch.isfinite(value).all() for value in weights["head"].values()), path
    return paths


# ---------------------------------------------------------------- failures at the end of training
def test_a_failing_evaluation_costs_the_evaluation_only(tmp_path, monkeypatch, caplog):
    from genpol.callbacks.evaluation import Evaluation

    def broken(self, runner, video_dir=None):
        raise RuntimeError("simulated evaluation crash")

    monkeypatch.setattr(Evaluation, "evaluate", broken)
    summary = tiny_run(tmp_path)
    assert "simulated evaluation crash" in summary["missing"]["Evaluation"]
    assert summary["checkpoint"].endswith("step_000000000512") and summary["eval_return_mean"] is None
    load_policy(tmp_path / "run")  # the weights are safe
    assert any("checkpoint is saved" in record.message for record in caplog.records)


def test_a_failing_video_keeps_the_evaluation(tmp_path, monkeypatch):
    from genpol import envs

    def broken(self, *args, **kwargs):
        raise RuntimeError("EGL: simulated render failure")

    monkeypatch.setattr(envs.VideoRecorder, "_capture", broken)
    summary = tiny_run(tmp_path)
    assert "MUJOCO_GL" in summary["missing"]["video"]  # the one-line fix
    assert summary["video"] is None and math.isfinite(summary["eval_return_mean"])
    assert list_checkpoints(tmp_path / "run" / "checkpoints")


def test_a_failing_callback_costs_its_artifact_only(tmp_path, monkeypatch):
    import genpol.callbacks.summary as summary_module

    def broken(*args, **kwargs):
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(summary_module, "plot_learning_curve", broken)
    summary = tiny_run(tmp_path)
    assert "No space left" in summary["missing"]["learning_curve"] and summary["learning_curve"] is None
    assert (tmp_path / "run" / "summary.json").exists()


def test_a_finished_run_trained_on_sets_its_summary_aside_until_the_new_end(tmp_path):
    """Resumed with a larger total_steps, a finished run's summary.json described the old budget until the new
    end replaced it; a stop in between left it there, and genpol.report counted the run as finished with the
    old numbers. It moves to summary-<env_steps>.json as training resumes, and the new end writes its own."""
    import json

    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.report import find_runs
    from genpol.runners.scaffold import check_resume_config

    tiny_run(tmp_path, overrides=["pipeline.video=false"])
    run_dir = tmp_path / "run"
    again = validate(compose_config(["env=pendulum", "total_steps=512", f"run_dir={run_dir}", *TINY,
                                     "pipeline.video=false", f"pipeline.video_dir={tmp_path / 'videos'}"]))
    check_resume_config(run_dir, again)  # the same budget (a re-evaluation): the summary stays
    assert (run_dir / "summary.json").exists()
    # a chunked head's run ends a few env steps short of its budget (478 of 480 with act_steps=3): run again with
    # the same budget, its summary was moved aside as if it trained on
    summary = json.loads((run_dir / "summary.json").read_text())
    (run_dir / "summary.json").write_text(json.dumps({**summary, "env_steps": 510}))
    check_resume_config(run_dir, again)
    assert (run_dir / "summary.json").exists()
    (run_dir / "summary.json").write_text(json.dumps(summary))
    check_resume_config(run_dir, dataclasses.replace(again, total_steps=1024))  # as a resume to 1024 starts
    assert not (run_dir / "summary.json").exists()
    assert json.loads((run_dir / "summary-512.json").read_text())["env_steps"] == 512
    finished, unfinished = find_runs(tmp_path)[:2]
    assert not finished and unfinished == [run_dir]  # stopped here, it is listed as unfinished
    tiny_run(tmp_path, total_steps=1024, overrides=["pipeline.video=false"])
    assert json.loads((run_dir / "summary.json").read_text())["env_steps"] == 1024


def test_a_chunked_run_stops_after_its_budgets_rollouts_and_an_off_policy_one_says_it_rounds_up(tmp_path, caplog):
    """DPPO's chunks of 4 on MultiGoal, whose 30-step episodes cut a chunk at each end: two rollouts of 1024
    nominal env steps execute fewer, and counting the steps executed ran a third rollout and update (2891 env
    steps for total_steps=2048). SAC steps its 16 envs at once: total_steps=250 trains 256, now said."""
    from genpol.api import train

    quiet = ["logger.progress_bar=false", "pipeline.video=false", "pipeline.eval_episodes=2"]
    chunked = train(env="genpol:MultiGoal", total_steps=2048, run_dir=tmp_path / "chunked", overrides=[
        "policy=diffusion", "policy.denoising_steps=2", "policy.ft_denoising_steps=2", "policy.hidden_sizes=[32,32]",
        "env.num_envs=16", "learner.rollout_steps=16", "learner.minibatch_size=128", "learner.epochs=1", *quiet])
    assert chunked["iterations"] == 2 and 1024 < chunked["env_steps"] < 2048
    off_policy = train(env="genpol:MultiGoal", total_steps=250, run_dir=tmp_path / "sac", overrides=[
        "policy=tanh_gaussian", "learner=sac", "env.num_envs=16", "learner.learning_starts=50",
        "learner.batch_size=32", "learner.buffer_size=5000", *quiet])
    assert off_policy["env_steps"] == 256
    said = "total_steps=250 is not a multiple of the 16 envs stepped at once (env.num_envs=16): training 256"
    assert said in caplog.text


def test_the_final_evaluation_at_a_periodic_ones_step_is_not_run_again(tmp_path, monkeypatch):
    """Without a video to record, the final evaluation at the step the last periodic one ran is the same
    episodes of the same weights from the same seed: it ran a second time (evaluations at 512, 1024, 1024)."""
    from genpol.api import train
    from genpol.callbacks.evaluation import Evaluation

    steps, evaluate = [], Evaluation.evaluate

    def counted(self, runner, video_dir=None):
        steps.append(runner.global_step)
        return evaluate(self, runner, video_dir)

    monkeypatch.setattr(Evaluation, "evaluate", counted)
    summary = train(env="genpol:MultiGoal", total_steps=1024, run_dir=tmp_path / "run", overrides=[
        "logger.progress_bar=false", "pipeline.video=false", "learner.rollout_steps=16", "learner.minibatch_size=128",
        "learner.epochs=1", "pipeline.eval_every=2", "pipeline.eval_episodes=2", "logger.tensorboard=false"])
    rows = [json.loads(line) for line in (tmp_path / "run" / "progress.jsonl").read_text().splitlines()]
    periodic = [row["eval/episodic_return"] for row in rows if "eval/episodic_return" in row]
    assert steps == [512, 1024] and summary["eval_return_mean"] == periodic[-1]


def test_a_stop_at_a_checkpoint_iteration_writes_that_checkpoint_once(tmp_path, monkeypatch):
    """SIGTERM in an iteration that checkpoints: the stop wrote the same step again (the re-save path, twice the
    stop's time and I/O where torchrun gives 30 s). One write, and the stop names it."""
    import genpol.callbacks.checkpointing as checkpointing
    from genpol.errors import TrainingInterrupted
    from genpol.runners import guards

    written = []

    def counting(directory, step, *args, **kwargs):
        written.append(step)
        if step == 256:  # as a signal arriving during the second iteration
            guards.request_stop("SIGTERM")
        return checkpointing_save(directory, step, *args, **kwargs)

    checkpointing_save = checkpointing.save_checkpoint
    monkeypatch.setattr(checkpointing, "save_checkpoint", counting)
    with pytest.raises(TrainingInterrupted, match=r"SIGTERM received: stopped at step 256 after writing .*"
                                                  r"step_000000000256"):
        tiny_run(tmp_path, overrides=["pipeline.video=false"])
    assert written == [128, 256]


def test_an_off_policy_stop_cuts_its_iteration_and_the_resume_completes_it(tmp_path, monkeypatch):
    """SIGTERM in an off-policy iteration stops after the current env step and its updates (the iteration of
    RLPD's or MaxEntDP's lasts minutes on a CPU, past a scheduler's grace before SIGKILL), checkpointed there; the
    resume completes that iteration (with the losses and the episodes of its first part), and ends bit-identical
    to the uninterrupted run, logging the same values."""
    from conftest import assert_trees_equal, final_checkpoint
    from genpol.algorithms.offpolicy import OffPolicyAlgorithm
    from genpol.errors import TrainingInterrupted
    from genpol.runners import guards

    tiny = ["learner.learning_starts=32", "learner.iteration_steps=64", "learner.batch_size=16", "env.num_envs=2",
            "policy.hidden_sizes=[16,16]", "learner.critic_hidden_sizes=[16,16]", "pipeline.eval_episodes=1",
            "env.max_episode_steps=50", "pipeline.checkpoint_every=1", "pipeline.video=false",
            "logger.progress_bar=false"]
    train("pendulum", "tanh_gaussian", "sac", total_steps=256, run_dir=tmp_path / "whole", overrides=tiny)

    original, stored = OffPolicyAlgorithm.process_env_step, {"rows": 0}

    def signalled(self, *args, **kwargs):  # as SIGTERM arriving at env step 208, after two episodes ended (200)
        original(self, *args, **kwargs)
        stored["rows"] += 2
        if stored["rows"] == 208:
            guards.request_stop("SIGTERM")

    monkeypatch.setattr(OffPolicyAlgorithm, "process_env_step", signalled)
    with pytest.raises(TrainingInterrupted, match=r"SIGTERM received: stopped at step 208 after writing .*"
                                                  r"step_000000000208"):
        train("pendulum", "tanh_gaussian", "sac", total_steps=256, run_dir=tmp_path / "cut", overrides=tiny)
    guards.STOP.signal_name = None
    cut = final_checkpoint(tmp_path / "cut")[3]
    assert cut["steps_into_iteration"] == 8 and len(cut["iteration_episodes"]["returns"]) == 2  # of the 4th's 32
    monkeypatch.setattr(OffPolicyAlgorithm, "process_env_step", original)
    train("pendulum", "tanh_gaussian", "sac", total_steps=256, run_dir=tmp_path / "cut", overrides=tiny)
    steps = [path.name for path in list_checkpoints(tmp_path / "cut" / "checkpoints")]
    # the stop's checkpoint, and the iterations' ends where the whole run's are
    assert steps[-3:] == ["step_000000000192", "step_000000000208", "step_000000000256"]
    name_a, _, weights_a, state_a = final_checkpoint(tmp_path / "whole")
    name_b, _, weights_b, state_b = final_checkpoint(tmp_path / "cut")
    assert name_a == name_b and state_b["steps_into_iteration"] == 0
    assert_trees_equal(weights_a, weights_b, "policy")
    for key in ("head", "algorithm", "env", "obs", "torch_rng", "global_step", "iteration", "recent_returns"):
        assert_trees_equal(state_a[key], state_b[key], key)
    timing = ("wall_time", "charts/SPS")
    rows = [[{key: value for key, value in json.loads(line).items() if not key.startswith(("time/", *timing))}
             for line in (run / "progress.jsonl").read_text().splitlines()]
            for run in (tmp_path / "whole", tmp_path / "cut")]
    assert rows[0] == rows[1] and "charts/episodic_return" in rows[1][-1]


def test_a_restart_before_the_first_checkpoint_shows_one_curve_in_tensorboard(tmp_path, monkeypatch):
    """A run killed before its first checkpoint (checkpoint_every=0 checkpoints only at the end) starts over: its
    progress.jsonl did, but TensorBoard kept the killed attempt's events beside the new ones, every step twice."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from genpol.algorithms.onpolicy import OnPolicyAlgorithm

    original, calls = OnPolicyAlgorithm.update, {"n": 0}

    def dies_at_the_third(self):
        calls["n"] += 1
        if calls["n"] == 3:
            raise RuntimeError("killed")
        return original(self)

    monkeypatch.setattr(OnPolicyAlgorithm, "update", dies_at_the_third)
    with pytest.raises(RuntimeError, match="killed"):  # iterations at 128 and 256 logged, no checkpoint
        tiny_run(tmp_path, overrides=["pipeline.video=false", "pipeline.checkpoint_every=0"])
    monkeypatch.setattr(OnPolicyAlgorithm, "update", original)
    tiny_run(tmp_path, overrides=["pipeline.video=false", "pipeline.checkpoint_every=0"])
    events = EventAccumulator(str(tmp_path / "run" / "tb"))
    events.Reload()
    assert [event.step for event in events.Scalars("losses/policy")] == [128, 256, 384, 512]


# ---------------------------------------------------------------- non-finite values
class NaNAfter(gym.Wrapper):
    """Pendulum whose observations turn NaN from its 200th step on."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = 0

    def step(self, action):
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.steps += 1
        return (obs * np.nan if self.steps >= 200 else obs), reward, terminated, truncated, info


gym.register("NaNPendulum-v0", entry_point=lambda **kwargs: NaNAfter(gym.make("Pendulum-v1", **kwargs)),
             max_episode_steps=64)


def assert_stopped_with_last_good_checkpoint(error, run_dir, where):
    message = str(error.value)
    paths = all_finite_checkpoints(run_dir)
    assert where in message and "at iteration" in message
    assert str(paths[-1]) in message, (message, paths)


def test_nan_observation_stops_training_and_keeps_the_last_good_checkpoint(tmp_path):
    """The policy acts on the NaN observation at once: the env refuses its NaN action (it used to step it, and the
    NaN rewards filled the reward normalizer), a non-finite stop naming the observations it acted on and the
    envs, with the last good checkpoint."""
    with pytest.raises(NonFiniteError) as error:
        train("gym:NaNPendulum-v0", total_steps=1024, run_dir=tmp_path / "run",
              overrides=[*TINY, "env.normalize_obs=false", "pipeline.video=false"])
    # 64 steps per env and iteration: each env's 200th step comes in iteration 4
    assert "env data 'observations'" in str(error.value) and "iteration 4" in str(error.value)
    assert ("actions (gym:NaNPendulum-v0: a non-finite action (NaN or inf) for env(s) [0, 1] in action dimension(s) "
            "[0]") in str(error.value)
    assert_stopped_with_last_good_checkpoint(error, tmp_path / "run", "observations")


class NaNAtTimeLimit(gym.Wrapper):
    """Pendulum cut at its 40th step, whose final observation there is NaN (and no other observation)."""

    def __init__(self, env):
        super().__init__(env)
        self.steps = 0

    def reset(self, **kwargs):
        self.steps = 0
        return self.env.reset(**kwargs)

    def step(self, action):
        obs, reward, terminated, _, info = self.env.step(action)
        self.steps += 1
        cut = self.steps == 40
        return (obs * np.nan if cut else obs), reward, terminated, cut, info


gym.register("NaNFinalPendulum-v0", entry_point=lambda **kwargs: NaNAtTimeLimit(gym.make("Pendulum-v1", **kwargs)))


def test_a_nan_final_observation_is_named_as_env_data(tmp_path):
    """Its value bootstraps the cut episode: the check named the policy's loss and parameters instead (it read
    the final observations' values after the update had zeroed them)."""
    with pytest.raises(NonFiniteError) as error:
        train("gym:NaNFinalPendulum-v0", total_steps=256, run_dir=tmp_path / "run",
              overrides=[*TINY, "env.normalize_obs=false", "pipeline.video=false", "env.max_episode_steps=null"])
    assert "env data 'final observations' values'" in str(error.value) and "iteration 1" in str(error.value)


def test_nan_loss_stops_training(tmp_path, monkeypatch):
    from genpol.heads.gaussian import GaussianHead

    original, calls = GaussianHead.log_ratio, {"n": 0}

    def poisoned(self, obs, record):
        calls["n"] += 1
        terms = original(self, obs, record)
        if calls["n"] > 4:  # from the third update on (2 minibatches per update)
            terms.log_ratio = terms.log_ratio * float("nan")
        return terms

    monkeypatch.setattr(GaussianHead, "log_ratio", poisoned)
    with pytest.raises(NonFiniteError) as error:
        tiny_run(tmp_path, overrides=["learner.minibatch_size=64", "pipeline.video=false"])
    assert "iteration 3" in str(error.value)
    assert_stopped_with_last_good_checkpoint(error, tmp_path / "run", "losses/")
    assert [p.name for p in list_checkpoints(tmp_path / "run" / "checkpoints")][-1] == "step_000000000256"


def test_nan_parameter_stops_training(tmp_path, monkeypatch):
    from genpol.algorithms.onpolicy import OnPolicyAlgorithm

    original, calls = OnPolicyAlgorithm.update, {"n": 0}

    def poisoned(self):
        stats = original(self)
        calls["n"] += 1
        if calls["n"] == 2:
            with torch.no_grad():
                self.critic.net[0].weight[0, 0] = float("inf")
        return stats

    monkeypatch.setattr(OnPolicyAlgorithm, "update", poisoned)
    with pytest.raises(NonFiniteError) as error:
        tiny_run(tmp_path, overrides=["pipeline.video=false"])
    assert "parameter 'critic.net.0.weight'" in str(error.value) and "iteration 2" in str(error.value)
    assert_stopped_with_last_good_checkpoint(error, tmp_path / "run", "critic")


def test_a_non_finite_optimizer_moment_stops_training_with_exit_3s_error(tmp_path, monkeypatch):
    """Adam's moments are not parameters: an overflowing second moment (a critic lr of 1e3 under SAC) passed the
    guard and the checkpoint's refusal said CheckpointError (exit 2, the code of a bad disk); it is a NonFiniteError
    (exit 3), and the previous checkpoint stays the last."""
    from genpol.algorithms.onpolicy import OnPolicyAlgorithm

    original, calls = OnPolicyAlgorithm.update, {"n": 0}

    def poisoned(self):
        stats = original(self)
        calls["n"] += 1
        if calls["n"] == 2:
            next(iter(self.updater.optimizer.state.values()))["exp_avg_sq"].fill_(float("inf"))
        return stats

    monkeypatch.setattr(OnPolicyAlgorithm, "update", poisoned)
    with pytest.raises(NonFiniteError, match=r"refusing to write a checkpoint at step 256: .*optimizer.* holds NaN or "
                                             r"inf; training stopped. The last good checkpoint is .*step_000000000128"):
        tiny_run(tmp_path, overrides=["pipeline.video=false"])
    assert [p.name for p in list_checkpoints(tmp_path / "run" / "checkpoints")] == ["step_000000000128"]


def test_a_policy_that_diverges_mid_iteration_is_named_beside_the_data_it_then_collected(tmp_path, monkeypatch):
    """SAC acts and updates within an iteration: once its actor turns NaN, so do its actions. Only the observations
    they led to were named (the env blamed for the policy's actions); the env now refuses the first NaN action,
    and the error names it with the parameter that made it."""
    from genpol.algorithms.sac import SAC

    original, calls = SAC.actor_step, {"n": 0}

    def poisoned(self, *args, **kwargs):
        stats = original(self, *args, **kwargs)
        calls["n"] += 1
        if calls["n"] == 40:
            with torch.no_grad():
                next(self.head.parameters()).fill_(float("nan"))
        return stats

    monkeypatch.setattr(SAC, "actor_step", poisoned)
    with pytest.raises(NonFiniteError) as error:
        train("pendulum", total_steps=512, run_dir=tmp_path / "run",
              overrides=["learner=sac", "policy=tanh_gaussian", "learner.learning_starts=64", "pipeline.video=false",
                         "learner.iteration_steps=128", "pipeline.eval_episodes=1", "logger.progress_bar=false",
                         "learner.batch_size=32", "policy.hidden_sizes=[16,16]", "learner.critic_hidden_sizes=[16,16]"])
    message = str(error.value)
    assert "actions (gym:Pendulum-v1: a non-finite action (NaN or inf) for env(s) [0, 1, 2, 3, 4, 5, 6, 7]" in message
    assert "parameter '" in message and "iteration 1" in message, message


# ---------------------------------------------------------------- checkpoint writes
@pytest.mark.parametrize("failing", ["policy.json", "weights.pt", "state.pt", "manifest.json"])
def test_a_full_disk_at_any_file_of_a_checkpoint_keeps_the_previous_one(tmp_path, monkeypatch, failing):
    """ENOSPC while the third checkpoint writes ``failing`` (each of its four files in turn): the
    run stops with a message that names the cause and the intact previous checkpoint, no half-written
    directory is left, and the run's policy still loads."""
    import genpol.checkpoint as checkpoint_module

    save, write_text, written = checkpoint_module.torch.save, Path.write_text, {"n": 0}

    def full_at(path) -> None:
        if Path(path).name == failing:
            written["n"] += 1
            if written["n"] > 2:  # the third checkpoint finds the disk full
                raise OSError(errno.ENOSPC, "No space left on device")

    def filling_save(obj, path, *args, **kwargs):
        full_at(path)
        return save(obj, path, *args, **kwargs)

    def filling_write_text(self, *args, **kwargs):
        full_at(self)
        return write_text(self, *args, **kwargs)

    monkeypatch.setattr(checkpoint_module.torch, "save", filling_save)
    monkeypatch.setattr(Path, "write_text", filling_write_text)
    with pytest.raises(CheckpointError) as error:
        tiny_run(tmp_path, overrides=["pipeline.video=false"])
    message = str(error.value)
    assert "No space left on device" in message and "step_000000000256 is intact" in message
    checkpoints = tmp_path / "run" / "checkpoints"
    assert [p.name for p in list_checkpoints(checkpoints)] == ["step_000000000128", "step_000000000256"]
    assert not [p for p in checkpoints.iterdir() if p.name.startswith(".tmp")]  # no half-written leftovers
    monkeypatch.undo()
    load_policy(tmp_path / "run")


def test_a_checkpoint_that_cannot_fit_on_the_disk_is_not_started(tmp_path, monkeypatch):
    """Before writing, the checkpoint's tensor bytes are checked against the free disk: with too
    little free the run stops naming both sizes and the intact previous checkpoint, and writes nothing."""
    import collections
    import shutil as shutil_module

    import genpol.checkpoint as checkpoint_module

    usage, calls = shutil_module.disk_usage, {"n": 0}

    def shrinking(path):
        calls["n"] += 1
        total, used, free = usage(path)
        return collections.namedtuple("usage", "total used free")(total, used, free if calls["n"] <= 2 else 1000)

    monkeypatch.setattr(checkpoint_module.shutil, "disk_usage", shrinking)
    with pytest.raises(CheckpointError, match=r"needs about [0-9.]+ [kMG]?B and .* has 1.0 kB free; the previous "
                                              r"checkpoint .*step_000000000256 is intact"):
        tiny_run(tmp_path, overrides=["pipeline.video=false"])
    checkpoints = tmp_path / "run" / "checkpoints"
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_000000000128", "step_000000000256"]


def test_a_disk_that_cannot_hold_keep_checkpoints_is_found_at_the_first_one(tmp_path, monkeypatch):
    """pipeline.keep_checkpoints=3 holds 3 checkpoints and writes a 4th beside them: with room for 3.5
    (each counted as 1 MB) the first checkpoint already refuses, naming the key and the sizes, and
    nothing is written; keep_checkpoints=2 (3 at the peak) fits and trains."""
    import collections

    import genpol.checkpoint as checkpoint_module

    usage = checkpoint_module.shutil.disk_usage
    monkeypatch.setattr(checkpoint_module, "tensor_bytes", lambda tree: 500_000)  # policy + state: 1 MB
    monkeypatch.setattr(checkpoint_module.shutil, "disk_usage",
                        lambda path: collections.namedtuple("usage", "total used free")(*usage(path)[:2], 3_500_000))
    with pytest.raises(CheckpointError, match=r"pipeline.keep_checkpoints=3: the run will hold 3 checkpoints of about "
                                              r"1.0 MB and write one more beside them, 4.0 MB more than now, but .* "
                                              r"has 3.5 MB free; no earlier checkpoint exists. Lower "
                                              r"pipeline.keep_checkpoints"):
        tiny_run(tmp_path, overrides=["pipeline.video=false", "pipeline.keep_checkpoints=3"])
    assert not list(checkpoint_module.list_checkpoints(tmp_path / "run" / "checkpoints"))
    tiny_run(tmp_path / "two", overrides=["pipeline.video=false", "pipeline.keep_checkpoints=2"])


# ---------------------------------------------------------------- one writer per run directory
def test_a_held_run_dir_is_refused_at_once_naming_the_holder(tmp_path):
    with hold_run_dir(tmp_path / "run"):
        with pytest.raises(RunDirBusyError, match=f"pid {os.getpid()} on host"):
            tiny_run(tmp_path)
    tiny_run(tmp_path, overrides=["pipeline.video=false"])  # released: the same run starts


def test_a_second_process_fails_and_the_first_is_untouched(tmp_path):
    command = ["env=pendulum", *TINY, "total_steps=20480", "pipeline.video=false", f"run_dir={tmp_path / 'run'}"]
    environment = {**os.environ, "PYTHONWARNINGS": "ignore"}
    first = WarmProcess("genpol.train", command, REPO, environment)  # both forked warm: tests/warm_start.py
    deadline = time.time() + 120
    while not list_checkpoints(tmp_path / "run" / "checkpoints") and time.time() < deadline:
        time.sleep(0.05)
    second = warm_run("genpol.train", command, REPO, environment, timeout=120)
    assert second.returncode == 2 and f"pid {first.pid} on host" in second.stderr, second.stderr
    assert first.wait(timeout=300) == 0, first.stderr.read()
    rows = (tmp_path / "run" / "progress.jsonl").read_text().splitlines()
    assert len(rows) == 20480 // 128  # every iteration once: the second process wrote nothing
