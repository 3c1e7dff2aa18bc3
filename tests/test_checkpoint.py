"""Checkpoints: atomic, weights-only, damage detected and named; resume after SIGTERM bit-identical
(after SIGKILL: tests/test_crash.py)."""

import json
import re
import signal
import time

import pytest
import torch

from genpol.checkpoint import (CheckpointError, list_checkpoints, load_policy_files, load_training_state,
                               remove_temporary, save_checkpoint)
from genpol.config import ConfigError
from genpol.policy import TrainedPolicy
from genpol.runners.scaffold import holds_progress

from conftest import assert_trees_equal, final_checkpoint, start_training

SPEC = {"format": 1, "note": "test"}


def make_checkpoint(tmp_path, step=10):
    weights = {"head": {"w": torch.randn(4, 3)}, "obs_normalizer": None}
    state = {"global_step": step, "rng": torch.get_rng_state(), "big_int": 2**100, "nested": {"x": [1, 2.5]}}
    return save_checkpoint(tmp_path / "checkpoints", step, SPEC, weights, state, keep=2), weights, state


def test_round_trip_with_weights_only_loading(tmp_path):
    path, weights, state = make_checkpoint(tmp_path)
    spec, loaded = load_policy_files(path)
    assert spec == SPEC and torch.equal(loaded["head"]["w"], weights["head"]["w"])
    restored = load_training_state(path)
    assert restored["big_int"] == 2**100 and torch.equal(restored["rng"], state["rng"])
    # the files themselves load with the safe unpickler
    torch.load(path / "training_state" / "state.pt", weights_only=True)


def test_keeps_the_newest_and_ignores_unfinished_temporaries(tmp_path):
    for step in (1, 2, 3):
        make_checkpoint(tmp_path, step)
    leftover = tmp_path / "checkpoints" / ".tmp-step_000000000004-999"
    leftover.mkdir()
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["step_000000000002", "step_000000000003"]
    remove_temporary(tmp_path / "checkpoints")
    assert not leftover.exists()


def test_a_resave_killed_between_its_renames_gets_its_old_copy_back(tmp_path):
    """Saving a step again moves the old copy aside, then renames the new one in. Killed in between, the
    step's directory is missing and both copies are leftovers: the old one (complete) is moved back, the
    new one (maybe incomplete) removed; an old copy whose step exists again is only a leftover."""
    checkpoints = tmp_path / "checkpoints"
    path, weights, _ = make_checkpoint(tmp_path, 5)
    make_checkpoint(tmp_path, 6)
    path.rename(checkpoints / f".old-{path.name}-4242")
    (checkpoints / f".tmp-{path.name}-4242").mkdir()
    (checkpoints / ".old-step_000000000006-4242").mkdir()  # step 6 exists: this one is a leftover
    only_old = tmp_path / "alone"
    (only_old / "checkpoints").mkdir(parents=True)
    (only_old / "checkpoints" / ".old-step_000000000005-4242").mkdir()
    assert holds_progress(only_old)  # such a run_dir is a run to resume (its config is checked), not a failed start
    remove_temporary(checkpoints)
    assert sorted(p.name for p in checkpoints.iterdir()) == ["step_000000000005", "step_000000000006"]
    assert torch.equal(load_policy_files(path)[1]["head"]["w"], weights["head"]["w"])


def test_truncated_file_is_named(tmp_path):
    path, _, _ = make_checkpoint(tmp_path)
    target = path / "policy" / "weights.pt"
    target.write_bytes(target.read_bytes()[:50])
    with pytest.raises(CheckpointError, match=r"policy/weights.pt is truncated or corrupted"):
        load_policy_files(path)
    with pytest.raises(CheckpointError, match="weights.pt"):
        TrainedPolicy.load(tmp_path)


def test_flipped_byte_is_caught_by_the_manifest(tmp_path):
    path, _, _ = make_checkpoint(tmp_path)
    target = path / "training_state" / "state.pt"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.raises(CheckpointError, match=r"state.pt is corrupted: its sha256 does not match"):
        load_training_state(path)


def test_a_damaged_newer_checkpoint_is_kept_aside_once_an_earlier_one_resumes(tmp_path):
    """Steps 100, 200, 300 with 300 damaged: the run resumes from 200. Left under its name, 300 sorted above the
    resumed run's saves (250, 260), and keep=1 pruned the checkpoint just written and the one resumed from."""
    from genpol.checkpoint import load_latest

    weights = {"head": {"w": torch.ones(2)}, "obs_normalizer": None}
    for step in (100, 200, 300):
        save_checkpoint(tmp_path / "checkpoints", step, SPEC, weights, {"global_step": step}, keep=3)
    target = tmp_path / "checkpoints" / "step_000000000300" / "training_state" / "state.pt"
    data = bytearray(target.read_bytes())
    data[len(data) // 2] ^= 0xFF
    target.write_bytes(bytes(data))
    with pytest.warns(RuntimeWarning, match="skipping damaged checkpoint: .*step_000000000300"):
        path, _, state = load_latest(tmp_path / "checkpoints")
    assert path.name == "step_000000000200" and state["global_step"] == 200
    assert (tmp_path / "checkpoints" / "damaged-step_000000000300").is_dir()  # kept, for a look
    for step in (250, 260):
        written = save_checkpoint(tmp_path / "checkpoints", step, SPEC, weights, {"global_step": step}, keep=1)
    assert [p.name for p in list_checkpoints(tmp_path / "checkpoints")] == ["step_000000000260"] == [written.name]


def test_a_run_named_like_a_checkpoint_resolves_to_its_latest_checkpoint(tmp_path):
    """run_dir=step_lr0.1 (a sweep's name): its name made it a checkpoint, and loading it said the checkpoint
    had no manifest. A step_* folder without a manifest and without checkpoints/ is still named incomplete."""
    from genpol.checkpoint import resolve_checkpoint

    path, _, _ = make_checkpoint(tmp_path / "step_lr0.1")
    assert resolve_checkpoint(tmp_path / "step_lr0.1") == path == resolve_checkpoint(path)
    (path / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="has no manifest.json"):
        load_policy_files(resolve_checkpoint(path))


def test_missing_pieces_are_named(tmp_path):
    path, _, _ = make_checkpoint(tmp_path)
    (path / "manifest.json").unlink()
    with pytest.raises(CheckpointError, match="has no manifest.json"):
        load_policy_files(path)
    with pytest.raises(CheckpointError, match="nowhere does not exist: expected a run directory"):
        TrainedPolicy.load(tmp_path / "nowhere")
    (tmp_path / "empty").mkdir()
    with pytest.raises(CheckpointError, match="no checkpoint in"):
        TrainedPolicy.load(tmp_path / "empty")
    (tmp_path / "notes.txt").write_text("mine")  # was "no checkpoint in notes.txt: expected notes.txt/checkpoints/"
    with pytest.raises(CheckpointError, match=r"notes.txt is a file: expected a run directory or one of its"):
        TrainedPolicy.load(tmp_path / "notes.txt")


TRAIN_ARGS = ["env=hopper", "env.num_envs=2", "pipeline.checkpoint_every=1",
              "pipeline.video=false", "pipeline.eval_episodes=1", "logger.progress_bar=false"]
# the kill comes after the 4th checkpoint (step 1024), the run ends at total_steps
LEARNERS = {"ppo": ["total_steps=2560", "learner.rollout_steps=128", "learner.epochs=2"]}


def train_process(run_dir, *extra):
    return start_training(run_dir, *TRAIN_ARGS, *extra)


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """``uninterrupted(learner)``: the directory of that learner's uninterrupted run, trained once per
    module (the xdist group keeps its users on one worker)."""
    runs = {}

    def run(learner):
        if learner not in runs:
            run_dir = tmp_path_factory.mktemp(f"uninterrupted_{learner}")
            process = train_process(run_dir, *LEARNERS[learner])
            assert process.wait(timeout=300) == 0, process.stderr.read()
            runs[learner] = run_dir
        return runs[learner]

    return run


@pytest.mark.xdist_group("uninterrupted_runs")
@pytest.mark.parametrize("learner", ["ppo"])
def test_resume_after_sigterm_is_bit_identical(tmp_path, uninterrupted, learner):
    """Stop a run after its 4th checkpoint with SIGTERM, on which it checkpoints at the end of the
    iteration and exits 4, unfinished, and re-run the same command: the final parameters, the learner's
    whole state (critics, targets, optimizers, replay buffer, generators), the normalizer and the env
    state equal those of an uninterrupted run. SIGKILL at random moments of the same two learners is
    tests/test_crash.py (the crash harness's CI part), which compares the same state and metrics rows."""
    reference_dir = uninterrupted(learner)
    total_steps = next(int(item.split("=")[1]) for item in LEARNERS[learner] if item.startswith("total_steps="))
    final = f"step_{total_steps:012d}"

    interrupted = train_process(tmp_path / "interrupted", *LEARNERS[learner])
    marker = tmp_path / "interrupted" / "checkpoints" / "step_000000001024"
    deadline = time.time() + 300
    while not marker.exists() and time.time() < deadline and interrupted.poll() is None:
        time.sleep(0.02)
    interrupted.send_signal(signal.SIGTERM)
    interrupted.wait(timeout=120)
    # not finished: exit 4 (EXIT_STOPPED), not the 0 of a finished run, and no summary.json
    assert interrupted.returncode == 4 and "SIGTERM received: stopped at step" in interrupted.stderr.read()
    assert not (tmp_path / "interrupted" / "summary.json").exists()
    steps_at_kill = {p.name for p in list_checkpoints(tmp_path / "interrupted" / "checkpoints")}
    assert final not in steps_at_kill

    resumed = train_process(tmp_path / "interrupted", *LEARNERS[learner])
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()

    name_a, _, weights_a, state_a = final_checkpoint(reference_dir)
    name_b, _, weights_b, state_b = final_checkpoint(tmp_path / "interrupted")
    assert name_a == name_b == final
    assert_trees_equal(weights_a, weights_b, "policy")
    for key in ("head", "algorithm", "env", "obs", "torch_rng", "global_step", "iteration"):
        assert_trees_equal(state_a[key], state_b[key], key)
    rows_a = [json.loads(l)["global_step"] for l in (reference_dir / "progress.jsonl").read_text().splitlines()]
    rows_b = [json.loads(l)["global_step"] for l in (tmp_path / "interrupted" / "progress.jsonl").read_text().splitlines()]
    assert rows_a == rows_b  # the metrics file has no duplicated iterations after the resume


def test_resuming_with_a_different_config_is_refused(tmp_path):
    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.runners.scaffold import check_resume_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    check_resume_config(run_dir, validate(compose_config([f"run_dir={run_dir}"])))
    # no checkpoint yet (the first start failed before one): a corrected config starts afresh
    check_resume_config(run_dir, validate(compose_config([f"run_dir={run_dir}", "learner.lr=1e-3"])))
    check_resume_config(run_dir, validate(compose_config([f"run_dir={run_dir}"])))
    make_checkpoint(run_dir)  # from here on the run has progress a resume would continue
    check_resume_config(run_dir, validate(compose_config([f"run_dir={run_dir}", "total_steps=50"])))  # allowed
    check_resume_config(run_dir, validate(compose_config([f"run_dir={run_dir}", "learner.compile=true"])))
    check_resume_config(run_dir, validate(compose_config([f"run_dir={run_dir}", "update_threads=2"])))
    with pytest.raises(ConfigError, match=r"learner.lr: 0.0003 -> 0.001"):
        check_resume_config(run_dir, validate(compose_config([f"run_dir={run_dir}", "learner.lr=1e-3"])))
    # how often pretraining saves, as how often the online phase does (was refused: 1 -> 5)
    offline = [f"run_dir={tmp_path / 'o2o'}", "pipeline=offline_to_online", "dataset.path=/tmp/never-read.hdf5"]
    (tmp_path / "o2o").mkdir()
    check_resume_config(tmp_path / "o2o", validate(compose_config(offline)))
    make_checkpoint(tmp_path / "o2o")
    check_resume_config(tmp_path / "o2o", validate(compose_config([*offline, "pipeline.pretrain_checkpoint_every=5"])))


def test_a_run_saved_before_a_config_field_existed_resumes_at_that_fields_default(tmp_path):
    """A field genpol added later is absent from an old run's config.yaml: at its default the run
    computes what it always did and resumes; set to anything else, it is a changed run."""
    import yaml

    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.runners.scaffold import check_resume_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    check_resume_config(run_dir, validate(compose_config([f"run_dir={run_dir}"])))
    make_checkpoint(run_dir)
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    del saved["dataset"]["format"], saved["learner"]["adam_eps"]
    (run_dir / "config.yaml").write_text(yaml.safe_dump(saved))
    with pytest.raises(ConfigError, match=r"learner.adam_eps: None -> 0.001"):
        check_resume_config(run_dir, validate(compose_config([f"run_dir={run_dir}", "learner.adam_eps=1e-3"])))
    check_resume_config(run_dir, validate(compose_config([f"run_dir={run_dir}"])))
    # the resume wrote the fields' values down: the file now names the default the run computed with
    with pytest.raises(ConfigError, match=r"learner.adam_eps: 1e-05 -> 0.001"):
        check_resume_config(run_dir, validate(compose_config([f"run_dir={run_dir}", "learner.adam_eps=1e-3"])))


def test_a_run_saved_before_a_field_that_changed_behaviour_resumes_only_with_the_old_value(tmp_path):
    """learner.adjust_target_entropy (EXPO) was added with a default that computes something new: an
    EXPO run saved before it existed computed the legacy value (false), so the default is a changed run
    and the error says which value continues it."""
    import yaml

    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.runners.scaffold import check_resume_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    expo = [f"run_dir={run_dir}", "learner=expo", "policy=diffusion_expo", "learner.offline_ratio=0"]
    check_resume_config(run_dir, validate(compose_config(expo)))
    make_checkpoint(run_dir)
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    del saved["learner"]["adjust_target_entropy"]
    (run_dir / "config.yaml").write_text(yaml.safe_dump(saved))
    with pytest.raises(ConfigError,
                       match=r"adjust_target_entropy: False \(saved before the field existed\) -> True"):
        check_resume_config(run_dir, validate(compose_config(expo)))
    check_resume_config(run_dir, validate(compose_config([*expo, "learner.adjust_target_entropy=false"])))


def test_a_resume_records_what_it_changed_in_config_yaml(tmp_path):
    """A resume may change the budget, the evaluation and the worker count; ``config.yaml`` then says what the
    run does now, since genpol.report groups runs by it (a run extended to 1M steps stayed at 100k there)."""
    import yaml

    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.runners.scaffold import check_resume_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    check_resume_config(run_dir, validate(compose_config([f"run_dir={run_dir}", "total_steps=100000"])))
    make_checkpoint(run_dir)
    check_resume_config(run_dir, validate(compose_config([f"run_dir={run_dir}", "total_steps=1000000",
                                                          "pipeline.eval_episodes=50", "env.workers=2"])))
    saved = yaml.safe_load((run_dir / "config.yaml").read_text())
    assert (saved["total_steps"], saved["pipeline"]["eval_episodes"], saved["env"]["workers"]) == (1000000, 50, 2)


def test_a_resume_below_the_steps_already_trained_is_refused(tmp_path):
    """A budget below what the run has trained would end it at once and leave ``config.yaml`` (what genpol.report
    groups runs by) saying the smaller number: refused, naming both, and the file keeps the true budget."""
    import yaml

    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.runners.scaffold import check_resume_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    check_resume_config(run_dir, validate(compose_config([f"run_dir={run_dir}", "total_steps=2048"])))
    make_checkpoint(run_dir, step=1024)  # in progress: 1024 of 2048 trained
    with pytest.raises(ConfigError, match=r"has trained 1024 env steps \(total_steps=2048\): total_steps=512 is below "
                                          r"that; resume with total_steps >= 1024"):
        check_resume_config(run_dir, validate(compose_config([f"run_dir={run_dir}", "total_steps=512"])))
    assert yaml.safe_load((run_dir / "config.yaml").read_text())["total_steps"] == 2048
    check_resume_config(run_dir, validate(compose_config([f"run_dir={run_dir}", "total_steps=1500"])))  # still ahead
    # an on-policy run rounds its budget up to whole rollouts: the saved budget again is not a cut
    rounded = tmp_path / "rounded"
    rounded.mkdir()
    check_resume_config(rounded, validate(compose_config([f"run_dir={rounded}", "total_steps=1000"])))
    make_checkpoint(rounded, step=1024)
    check_resume_config(rounded, validate(compose_config([f"run_dir={rounded}", "total_steps=1000"])))


def test_a_linear_learning_rate_refuses_another_budget_on_resume(tmp_path):
    """``learner.lr_schedule=linear`` decays the rate to 0 at total_steps: a resume that changes total_steps would
    re-time every update left (a run extended from 128 to 192 steps ran 1.5e-4, 0, 0 where the straight run ran
    2e-4, 1e-4, 0), so it is refused; a constant rate may be extended."""
    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.runners.scaffold import check_resume_config

    for schedule in ("linear", "constant"):
        run_dir = tmp_path / schedule
        run_dir.mkdir()
        command = [f"run_dir={run_dir}", f"learner.lr_schedule={schedule}"]
        check_resume_config(run_dir, validate(compose_config([*command, "total_steps=128"])))
        make_checkpoint(run_dir)
        extended = validate(compose_config([*command, "total_steps=192"]))
        if schedule == "linear":
            with pytest.raises(ConfigError, match=r"decays its learning rate linearly over total_steps=128 "
                                                  r"\(learner.lr_schedule=linear\): resuming with total_steps=192"):
                check_resume_config(run_dir, extended)
        else:
            check_resume_config(run_dir, extended)


def test_an_exploration_schedule_over_total_steps_refuses_another_budget_until_it_ends(tmp_path):
    """Consistency-AC's epsilon decays over explore_fraction x total_steps: a run of 100k steps resumed at step
    5000 with total_steps=1M took epsilon from 0.505 to 0.951, silently. Refused while the decay is under way;
    once it has ended under both budgets (10k of 100k, 10k of 20k) the run may be extended; a constant
    epsilon may always be."""
    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.runners.scaffold import check_resume_config

    base = ["env=multigoal", "policy=consistency", "learner=consistency_ac"]
    for name, extra, step, new_total, refused in [("decaying", [], 5000, 1_000_000, True),
                                                  ("ended", [], 10_000, 20_000, False),
                                                  ("ended-not-under-the-new", [], 10_000, 1_000_000, True),
                                                  ("constant", ["learner.explore_initial=0.01"], 5000, 1_000_000,
                                                   False)]:
        run_dir = tmp_path / name
        run_dir.mkdir()
        command = [*base, f"run_dir={run_dir}", *extra]
        check_resume_config(run_dir, validate(compose_config([*command, "total_steps=100000"])))
        make_checkpoint(run_dir, step=step)
        extended = validate(compose_config([*command, f"total_steps={new_total}"]))
        if refused:
            with pytest.raises(ConfigError, match=rf"^{run_dir} decays its exploration epsilon from 1.0 to 0.01 over "
                                                  rf"learner.explore_fraction=0.1 of total_steps=100000: resuming "
                                                  rf"with total_steps={new_total} would change the epsilon"):
                check_resume_config(run_dir, extended)
        else:
            check_resume_config(run_dir, extended)


def test_a_resumed_phase_frees_the_loaded_checkpoint_before_it_runs(tmp_path):
    """run_phase kept the loaded checkpoint in scope through the whole run: a resumed off-policy run held a
    second copy of its replay (measured with a weakref on the loaded rows) past what its memory check allowed.
    The runner copies what it needs in ``load``; by ``run`` the loaded tensors are gone."""
    import gc
    import weakref

    from genpol.runners.scaffold import Phase, run_phase

    weights = {"head": {"w": torch.randn(4, 3)}, "obs_normalizer": None}
    save_checkpoint(tmp_path / "checkpoints", 10, SPEC, weights, {"replay": torch.randn(1000, 3)}, keep=1)

    class Runner:
        def load(self, loaded_weights, state):
            self.replay = state["replay"].clone()
            self.loaded = weakref.ref(state["replay"])

        def run(self):
            gc.collect()
            self.alive_while_running = self.loaded() is not None

    runner = Runner()
    run_phase(runner, Phase(tmp_path, None, None, "online", 0, 1, SPEC), "cpu")
    assert runner.replay.shape == (1000, 3) and not runner.alive_while_running


def test_the_disk_check_counts_the_replay_at_its_capacity(tmp_path, monkeypatch):
    """A replay saves its filled rows, so the first checkpoint of an off-policy run is its smallest: the check of
    keep_checkpoints took it as the size of every later one (Humanoid, 1M buffer: 123 MB asked, 12.3 GB
    needed once full). A buffer of 1000 rows filled to 100: 900 rows more to come, of 105 bytes each
    (observation and next observation 2 x 44, actions 12, reward 4, done 1)."""
    import collections

    import genpol.checkpoint as checkpoint_module
    from genpol.checkpoint import replay_growth_bytes
    from genpol.storage.replay import ReplayBuffer

    replay = ReplayBuffer(1000, 11, 3)
    for _ in range(100):
        replay.add(torch.zeros(1, 11), torch.zeros(1, 3), torch.zeros(1), torch.zeros(1, 11),
                   torch.zeros(1, dtype=torch.bool))
    state = {"algorithm": {"replay": {"online": replay.state_dict()}}}
    saved = state["algorithm"]["replay"]["online"]
    row = sum(value[0].nelement() * value.element_size() for key, value in saved.items()
              if key != "generator" and isinstance(value, torch.Tensor) and value.ndim)
    assert row == 105 and replay_growth_bytes(state) == 900 * 105 and replay_growth_bytes({"x": torch.zeros(5)}) == 0
    weights = {"head": {"w": torch.zeros(4, 3)}}
    full = checkpoint_module.tensor_bytes(weights) + checkpoint_module.tensor_bytes(state) + 900 * row
    usage = checkpoint_module.shutil.disk_usage
    monkeypatch.setattr(checkpoint_module.shutil, "disk_usage",
                        lambda path: collections.namedtuple("usage", "total used free")(*usage(path)[:2], 3 * full - 1))
    with pytest.raises(CheckpointError, match=r"keep_checkpoints=2: the run will hold 2 checkpoints of about .* \(its "
                                              r"replay full\) and write one more beside them"):
        save_checkpoint(tmp_path / "checkpoints", 100, SPEC, weights, state, keep=2)
    save_checkpoint(tmp_path / "checkpoints", 100, SPEC, weights, state, keep=1)


def test_the_api_trains_in_the_run_dir_its_overrides_name(tmp_path, monkeypatch):
    """``train(overrides=["run_dir=..."])``, as on the command line, trains there (the config recorded it while
    the run went to a new folder); a different ``run_dir`` argument beside it is refused."""
    import genpol.train
    from genpol.api import train

    calls = []
    monkeypatch.setattr(genpol.train, "run_training", lambda cfg, run_dir: calls.append((cfg.run_dir, run_dir)))
    train(overrides=[f"run_dir={tmp_path / 'mine'}", "total_steps=10"])
    assert calls == [(str(tmp_path / "mine"), tmp_path / "mine")]
    with pytest.raises(ConfigError, match=r"train\(\): run_dir=.*other and the override run_dir=.*mine differ"):
        train(run_dir=tmp_path / "other", overrides=[f"run_dir={tmp_path / 'mine'}"])


def test_dataset_truncated_rows_legacy_value_binds_runs_with_a_dataset_only(tmp_path):
    """Runs saved before ``dataset.truncated_rows`` dropped truncated episode ends (``drop``): one with a dataset
    resumes with drop and is refused with today's keep, naming the old value; one without a dataset reads
    none of dataset.* and resumes unchanged."""
    import yaml

    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.runners.scaffold import check_resume_config

    runs = {"rlpd": ["+experiment=rlpd", "dataset.path=hopper_medium-v5.hdf5"],
            "sac": ["learner=sac", "policy=tanh_gaussian"],
            "sac_o2o": ["learner=sac", "policy=tanh_gaussian", "pipeline=offline_to_online",
                        "dataset.path=hopper_medium-v5.hdf5", "dataset.truncated_rows=drop"]}
    for name, overrides in runs.items():
        run_dir = tmp_path / name
        run_dir.mkdir()
        command = [f"run_dir={run_dir}", *overrides]
        check_resume_config(run_dir, validate(compose_config(command)))
        make_checkpoint(run_dir)
        saved = yaml.safe_load((run_dir / "config.yaml").read_text())
        del saved["dataset"]["truncated_rows"], saved["dataset"]["actions"]
        (run_dir / "config.yaml").write_text(yaml.safe_dump(saved))
        if name == "rlpd":  # dataset.actions only matters offline-to-online
            with pytest.raises(ConfigError,
                               match=r"dataset.truncated_rows: 'drop' \(saved before the field existed\) -> 'keep'"):
                check_resume_config(run_dir, validate(compose_config(command)))
            command.append("dataset.truncated_rows=drop")
        if name == "sac_o2o":  # actions mapped onto the dataset's range before dataset.actions existed
            with pytest.raises(ConfigError,
                               match=r"dataset.actions: 'min_max' \(saved before the field existed\) -> 'env'"):
                check_resume_config(run_dir, validate(compose_config(command)))
            command.append("dataset.actions=min_max")
        check_resume_config(run_dir, validate(compose_config(command)))


def test_a_metrics_line_cut_off_mid_write_neither_stops_the_resume_nor_the_reader(tmp_path, caplog):
    """A kill or a full disk can leave half a line at the end of ``progress.jsonl`` (and a reader can race
    the writer): the resume drops it with a warning and replaces the file whole; ``read_metrics`` leaves a
    cut last line out silently and warns about a damaged line elsewhere."""
    from types import SimpleNamespace

    from genpol.callbacks.logging import MetricsFile, read_metrics

    path = tmp_path / "progress.jsonl"
    rows = [{"global_step": 100 * k, "iteration": k, "wall_time": 0.5 * k, "charts/SPS": float("nan")}
            for k in range(1, 5)]
    whole = [json.dumps(row) for row in rows]
    path.write_text("\n".join(whole) + "\n" + whole[0][:17])
    with caplog.at_level("WARNING"):
        assert [row["global_step"] for row in read_metrics(path)] == [100, 200, 300, 400]
    assert not caplog.records  # a cut last line is a run being written: nothing to warn about
    path.write_text(whole[0] + "\n{\"global_st\n" + "\n".join(whole[1:]) + "\n" + whole[0][:17])
    with caplog.at_level("WARNING"):
        assert [row["global_step"] for row in read_metrics(path)] == [100, 200, 300, 400]
    assert [record.getMessage() for record in caplog.records] == [f"{path}: skipping line(s) 2, which do not parse"]
    caplog.clear()
    with caplog.at_level("WARNING"):
        MetricsFile(path).on_train_start(SimpleNamespace(global_step=300))
    assert [record.getMessage() for record in caplog.records] == [
        f"{path}: dropping line(s) 2, 6, which do not parse (cut off mid-write)"]
    assert path.read_text() == "\n".join(whole[:3]) + "\n"
    assert not list(tmp_path.glob(".tmp-*"))


def test_the_metrics_file_reaches_the_disk_before_the_checkpoint_that_covers_it(tmp_path, monkeypatch):
    """A power cut can lose what the page cache held: the rows a resume keeps (those up to the checkpoint's
    step) are fsynced before the checkpoint is written, and the checkpoint's own files after them."""
    import os
    from types import SimpleNamespace

    from genpol import files
    from genpol.callbacks.checkpointing import Checkpointer

    metrics = tmp_path / "progress.jsonl"
    metrics.write_text('{"global_step": 8}\n')
    synced = []
    real_fsync = os.fsync

    def recording_fsync(descriptor):
        synced.append(os.readlink(f"/proc/self/fd/{descriptor}"))
        real_fsync(descriptor)

    monkeypatch.setattr(files.os, "fsync", recording_fsync)  # genpol.files.fsync_path serves every fsync
    runner = SimpleNamespace(global_step=8, policy_weights=lambda: {"head": {"w": torch.zeros(2)}},
                             training_state=lambda: {"global_step": 8})
    path = Checkpointer(tmp_path / "checkpoints", SPEC, every=1, keep=2, synced_first=[metrics]).save(runner)
    # then the checkpoint's files (under their temporary name, before the rename that publishes them)
    assert synced[0] == str(metrics) and path.exists(), synced
    assert len(synced) > 1 and all(entry.startswith(str(tmp_path / "checkpoints")) for entry in synced[1:]), synced


def test_a_run_with_nothing_left_to_train_does_not_write_its_last_checkpoint_again(tmp_path):
    """A finished run run again resumes at its last step and trains nothing: its end used to save that step
    once more (the replay with it, moved aside and replaced); the loaded checkpoint is the run's last."""
    from types import SimpleNamespace

    from genpol.callbacks.checkpointing import Checkpointer

    path, _, _ = make_checkpoint(tmp_path, 8)
    written = (path / "training_state" / "state.pt").stat().st_mtime_ns
    runner = SimpleNamespace(global_step=8, policy_weights=lambda: {"head": {"w": torch.ones(2)}},
                             training_state=lambda: {"global_step": 8})
    checkpointer = Checkpointer(tmp_path / "checkpoints", SPEC, every=1, keep=2)
    checkpointer.on_train_start(runner)
    checkpointer.on_train_end(runner)
    assert checkpointer.last_path == path and (path / "training_state" / "state.pt").stat().st_mtime_ns == written
    fresh = SimpleNamespace(global_step=0, policy_weights=runner.policy_weights, training_state=runner.training_state)
    checkpointer = Checkpointer(tmp_path / "fresh", SPEC, every=1, keep=2)
    checkpointer.on_train_start(fresh)
    checkpointer.on_train_end(fresh)  # a run of 0 steps still ends with its checkpoint
    assert checkpointer.last_path == tmp_path / "fresh" / "step_000000000000"


def test_a_resume_without_a_readable_config_yaml_is_refused_naming_the_file(tmp_path):
    """A hand edit that breaks config.yaml raised yaml's own traceback (exit 1); a deleted one let the run resume
    with any config (a new learning rate silently; new network sizes as a size-mismatch traceback)."""
    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.runners.scaffold import check_resume_config

    run_dir = tmp_path / "run"
    run_dir.mkdir()
    cfg = validate(compose_config([f"run_dir={run_dir}"]))
    check_resume_config(run_dir, cfg)
    make_checkpoint(run_dir)
    (run_dir / "config.yaml").write_text("learner:\n  lr: [0.001\n")
    with pytest.raises(ConfigError, match=rf"^{re.escape(str(run_dir / 'config.yaml'))} cannot be read \(.*\); fix the "
                                          r"file, or start anew in another run_dir$"):
        check_resume_config(run_dir, cfg)
    (run_dir / "config.yaml").unlink()
    with pytest.raises(ConfigError, match=r"holds checkpoints but no config.yaml"):
        check_resume_config(run_dir, cfg)
    assert not (run_dir / "config.yaml").exists()


@pytest.mark.parametrize("arguments, override, given", [
    ({"seed": 5}, "seed=7", "seed=5"), ({"total_steps": 512}, "total_steps=1024", "total_steps=512"),
    ({"env": "pendulum"}, "env=gym", "env=pendulum"), ({"policy": "gaussian"}, "policy=fpo", "policy=gaussian"),
    ({"learner": "ppo"}, "learner=sac", "learner=ppo"), ({"learner": "ppo"}, "updater=sac", "learner=ppo"),
    ({"env": "dmc:cheetah-run"}, "env.id=walker-walk", "env.id=cheetah-run"),
    ({"env": "gym:Pendulum-v1"}, "env.backend=dmc", "env.backend=gym")])
def test_the_api_refuses_an_argument_and_an_override_that_differ(tmp_path, arguments, override, given):
    """``train(seed=5, overrides=["seed=7"])`` trained seed 7 (and a total_steps argument beat its override), and
    ``train(env="pendulum", overrides=["env=gym", ...])`` trained the override's env, as did
    ``train(env="dmc:cheetah-run", overrides=["env.id=walker-walk"])``: one of the two was dropped without a
    word. Given alike, or once, they are used."""
    from genpol.api import train

    key, value = override.split("=")
    shown = f"{given.split('=')[0]}={value}"  # updater= is named as learner=
    with pytest.raises(ConfigError, match=rf"^train\(\): {re.escape(given)} \(from the arguments\) and the override "
                                          rf"{re.escape(shown)} differ: give one$"):
        train(**{"env": "pendulum", **arguments}, overrides=[override], run_dir=tmp_path / "run")
    assert not (tmp_path / "run").exists()


TINY_API = ["learner.rollout_steps=32", "env.num_envs=2", "learner.epochs=1", "learner.minibatch_size=32",
            "pipeline.video=false", "pipeline.eval_episodes=1", "logger.progress_bar=false"]


def test_the_api_leaves_no_folder_for_a_failed_config_and_expands_home(tmp_path, monkeypatch):
    """A call that claimed a new run folder and then failed its config left it behind (five typos: five empty
    runs/<date>/<time>); run_dir="~/x" made a folder named ~ in the working directory."""
    from genpol.api import train

    monkeypatch.chdir(tmp_path)
    with pytest.raises(ConfigError):
        train("pendulum", overrides=["learner.lr=-1"])
    assert not (tmp_path / "runs").exists() or not any((tmp_path / "runs").iterdir())
    summary = train("pendulum", total_steps=64, overrides=TINY_API)  # the default folder: the CLI's runs/<date>/<time>
    (made,) = (tmp_path / "runs").glob("*/*")
    assert re.fullmatch(r"\d{4}-\d\d-\d\d/\d\d-\d\d-\d\d", f"{made.parent.name}/{made.name}")
    assert summary["tensorboard"] == str(made / "tb")
    monkeypatch.setenv("HOME", str(tmp_path / "home"))  # "~/x" made a folder named ~ in the working directory
    train("pendulum", total_steps=64, run_dir="~/x", overrides=TINY_API)
    assert (tmp_path / "home" / "x" / "summary.json").is_file() and not (tmp_path / "~").exists()
