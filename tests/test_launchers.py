"""Sweeps through Hydra's launcher plugins (joblib, Ray, submitit), their run directories, the
requeue of a preempted submitit job, and ``genpol.report`` on a real sweep."""

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from conftest import REPO, assert_trees_equal, run_cli

TESTS = Path(__file__).resolve().parent

# 2 iterations of 16 envs x 16 steps; MultiGoal episodes end within 16 steps, so every iteration
# logs charts/episodic_return
TINY = ["env=multigoal", "total_steps=512", "learner.rollout_steps=16", "pipeline.video=false",
        "pipeline.eval_episodes=2", "logger.progress_bar=false"]


def lock_pid(run_dir: Path) -> int:
    """The PID that trained in ``run_dir`` (``guards.hold_run_dir`` writes it)."""
    return int((run_dir / ".genpol.lock").read_text().split()[1])


# -- run directories ---------------------------------------------------------------------------

def test_hydras_own_folder_options_claim_no_second_folder(tmp_path):
    """hydra.run.dir (hydra.sweep.dir) without run_dir: the run trained there, but the default run_dir was
    resolved too, claiming an empty runs/<date>/<time> (one per sweep job) that config.yaml named."""
    import yaml

    tiny = ["env=gym", "env.id=Pendulum-v1", "total_steps=64", "env.num_envs=1", "learner.rollout_steps=64",
            "pipeline.video=false", "pipeline.eval_episodes=1", "logger.progress_bar=false", "logger.tensorboard=false"]
    run_cli("-m", "genpol.train", "hydra.run.dir=mine", *tiny, cwd=tmp_path)
    run_cli("-m", "genpol.train", "--multirun", "hydra.sweep.dir=sweep", "seed=0,1", *tiny, cwd=tmp_path)
    assert sorted(path.name for path in tmp_path.iterdir()) == ["mine", "sweep"]  # no runs/
    assert yaml.safe_load((tmp_path / "mine" / "config.yaml").read_text())["run_dir"] == str(tmp_path / "mine")
    for job in ("0", "1"):
        saved = yaml.safe_load((tmp_path / "sweep" / job / "config.yaml").read_text())
        assert saved["run_dir"] == str(tmp_path / "sweep")


def test_the_default_run_dir_is_claimed_once_per_launch(tmp_path):
    """Two launches in the same second (here 8 threads at once, and two composes) never share a
    directory: each gets its own, created atomically."""
    from genpol.config.base import claim_new_dir

    claimed = []
    threads = [threading.Thread(target=lambda: claimed.append(claim_new_dir(str(tmp_path / "runs" / "12-00-00"))))
               for _ in range(8)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join()
    assert len(set(claimed)) == 8 and all(Path(path).is_dir() for path in claimed)
    assert sorted(claimed)[0] == str(tmp_path / "runs" / "12-00-00")

    from genpol.api import compose_config

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        first, second = compose_config([]).run_dir, compose_config([]).run_dir
    finally:
        os.chdir(cwd)
    assert first != second and (tmp_path / first).is_dir() and (tmp_path / second).is_dir()

    # a sweep's workers and a requeued job get the launching process's value with the pickled
    # config (the resolver's cache), and claim nothing new
    import cloudpickle
    from omegaconf import OmegaConf

    cwd = os.getcwd()
    os.chdir(tmp_path)
    try:
        launched = compose_config([])
        claimed = launched.run_dir
        before = sorted(tmp_path.rglob("*"))
        shipped = cloudpickle.loads(cloudpickle.dumps(launched))
        job = compose_config(["seed=1"])  # what Hydra's load_sweep_config does in the worker
        OmegaConf.copy_cache(from_config=shipped, to_config=job)
        assert shipped.run_dir == job.run_dir == claimed
        assert sorted(tmp_path.rglob("*")) == before
    finally:
        os.chdir(cwd)


# -- joblib ------------------------------------------------------------------------------------

@pytest.fixture(scope="module")
def joblib_sweep(tmp_path_factory):
    """A real joblib multirun: 2 seeds x 2 values of learner.epochs, 2 worker processes, launched
    from an empty directory with the default run_dir."""
    pytest.importorskip("hydra_plugins.hydra_joblib_launcher")
    cwd = tmp_path_factory.mktemp("joblib")
    run_cli("-m", "genpol.train", "--multirun", "launcher=joblib", "hydra.launcher.n_jobs=2", "seed=0,1",
            "learner.epochs=1,2", *TINY, cwd=cwd, timeout=240, cold=True)  # a cold start: under the warm fork the sweep hung (not investigated)
    sweeps = [path for path in (cwd / "runs").glob("*/*") if path.is_dir()]
    assert len(sweeps) == 1, sweeps  # one launch, one claimed sweep directory
    return sweeps[0]


def test_joblib_multirun_runs_each_job_in_its_own_directory_and_process(joblib_sweep):
    jobs = sorted((path for path in joblib_sweep.iterdir() if path.name.isdigit()), key=lambda p: int(p.name))
    assert [job.name for job in jobs] == ["0", "1", "2", "3"]
    summaries = [json.loads((job / "summary.json").read_text()) for job in jobs]
    assert all(summary["env_steps"] == 512 and summary["run_dir"] == str(job) for summary, job in zip(summaries, jobs))
    # Hydra's sweep order: seed outer, epochs inner
    import yaml

    configs = [yaml.safe_load((job / "config.yaml").read_text()) for job in jobs]
    assert [(c["seed"], c["learner"]["epochs"]) for c in configs] == [(0, 1), (0, 2), (1, 1), (1, 2)]
    pids = {lock_pid(job) for job in jobs}
    assert len(pids) == 2 and os.getpid() not in pids  # two loky workers, not this process


# -- the report --------------------------------------------------------------------------------

def test_report_table_matches_a_hand_computation(joblib_sweep, capsys):
    """2 configurations x 2 seeds: the median of two values is their mean, and the bootstrap of
    the median of two values puts 1/4 of its mass on each value and 1/2 on their mean, so its
    2.5 % and 97.5 % percentiles are the two values themselves."""
    from genpol.report import main

    main([str(joblib_sweep)])  # in this process: python -m genpol.report <sweep>
    report = json.loads((joblib_sweep / "report" / "report.json").read_text())
    text = (joblib_sweep / "report" / "report.md").read_text()
    assert capsys.readouterr().out.strip() == text.strip()
    assert [row["configuration"] for row in report["rows"]] == ["learner.epochs=1", "learner.epochs=2"]
    for row, jobs in zip(report["rows"], (["0", "2"], ["1", "3"])):
        values = [json.loads((joblib_sweep / job / "summary.json").read_text())["eval_return_mean"] for job in jobs]
        a, b = values
        assert row["seeds"] == [0, 1] and row["values"] == values
        assert row["median"] == pytest.approx((a + b) / 2, abs=1e-12)
        assert row["mean"] == pytest.approx((a + b) / 2, abs=1e-12)
        assert row["ci95"] == [min(a, b), max(a, b)]
        assert row["ci95_coverage"] == 0.5  # [x_(1), x_(2)] of 2 values holds the median half the time
        line = (f"| {row['configuration']} | 2 | {(a + b) / 2:.2f} | [{min(a, b):.2f}, {max(a, b):.2f}] | 50.0% | "
                f"{(a + b) / 2:.2f} | ![{row['configuration']}]({row['curve']}) |")
        assert line in text
        assert (joblib_sweep / "report" / row["curve"]).stat().st_size > 5000

    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator
    from tensorboard.plugins.hparams import plugin_data_pb2

    events = EventAccumulator(str(joblib_sweep / "report" / "tb" / "learner.epochs=2" / "seed_1"))
    events.Reload()
    contents = events.PluginTagToContent("hparams")
    sessions = [plugin_data_pb2.HParamsPluginData.FromString(c) for c in contents.values()]
    start = next(s.session_start_info for s in sessions if s.HasField("session_start_info"))
    assert start.hparams["learner.epochs"].number_value == 2 and start.hparams["seed"].number_value == 1
    metrics = {tag: events.Scalars(tag)[-1].value for tag in events.Tags()["scalars"]}
    assert metrics["hparam/eval_return_mean"] == pytest.approx(report["rows"][1]["values"][1], rel=1e-6)


def test_bootstrap_interval_of_the_median_against_the_binomial_formula():
    """The median of a resample of 7 distinct values x_(1) < ... < x_(7) is its 4th smallest draw,
    so P(median <= x_(j)) = P(Binomial(7, j/7) >= 4): the exact percentile interval, independently
    of the enumeration."""
    from scipy import stats

    from genpol.report import bootstrap_median_ci

    values = np.array([3.0, -1.0, 10.0, 4.0, 0.5, 7.0, 2.0])
    ordered = np.sort(values)
    cdf = [stats.binom.sf(3, 7, j / 7) for j in range(1, 8)]  # P(Bin >= 4)
    low = ordered[next(j for j in range(7) if cdf[j] >= 0.025)]
    high = ordered[next(j for j in range(7) if cdf[j] >= 0.975)]
    assert (low, high) == (ordered[1], ordered[5])  # narrower than [min, max] with 7 seeds
    assert bootstrap_median_ci(values) == (low, high)
    assert bootstrap_median_ci([5.0]) == (5.0, 5.0)


def test_the_intervals_coverage_by_hand_and_by_simulation():
    """The bootstrap's "95 %" interval of a median over few seeds is a pair of order statistics, which holds the
    true median less often: 3 seeds' [min, max] 3/4 of the time, 5 seeds' 15/16, 7 seeds' [x_(2), x_(6)] 7/8
    (sum of C(n, i) / 2^n for i from j to k - 1); and 20,000 draws of 3 normal values agree."""
    from genpol.report_stats import bootstrap_median_ci, median_interval_coverage

    for values, expected in (([1.0, 5.0, 3.0], 0.75), ([4.0, 1.0, 3.0, 9.0, 2.0], 15 / 16),
                             ([3.0, -1.0, 10.0, 4.0, 0.5, 7.0, 2.0], 112 / 128), ([5.0], 0.0)):
        assert median_interval_coverage(values, *bootstrap_median_ci(values)) == pytest.approx(expected, abs=1e-15)
    # 6 seeds: the percentiles are 1.5 and 5.5, between sorted values; widened to [x_(1), x_(6)], 62/64 (the inner
    # pair's 50/64 was printed for an interval that holds the median more often)
    assert bootstrap_median_ci([1.0, 2.0, 3.0, 4.0, 5.0, 6.0]) == (1.0, 6.0)
    assert median_interval_coverage([1.0, 2.0, 3.0, 4.0, 5.0, 6.0], 1.0, 6.0) == 62 / 64
    draws = np.random.default_rng(0).standard_normal((20_000, 3))
    held = np.mean((draws.min(axis=1) < 0) & (draws.max(axis=1) > 0))  # the true median is 0
    assert held == pytest.approx(0.75, abs=0.01)


def test_learning_curve_band_is_a_student_t_interval():
    from genpol.report import t_interval

    samples = np.array([[1.0, 2.0], [3.0, 6.0]])  # 2 seeds, 2 steps: s = sqrt(2), sqrt(8)
    mean, low, high = t_interval(samples)
    t = 12.706204736  # t_{0.975, 1}
    np.testing.assert_allclose(mean, [2.0, 4.0])
    np.testing.assert_allclose(high - mean, [t * np.sqrt(2) / np.sqrt(2), t * np.sqrt(8) / np.sqrt(2)], rtol=1e-8)
    np.testing.assert_allclose(mean - low, high - mean)


def test_report_names_a_directory_without_runs(tmp_path, capsys):
    """Bad input is exit 2 and one line, as at genpol's other entry points (it was exit 1)."""
    from genpol.report import main

    (tmp_path / "unfinished").mkdir()
    (tmp_path / "unfinished" / "config.yaml").write_text("seed: 0\n")
    for root, line in ((tmp_path, f"no finished run under {tmp_path} (a run directory holds config.yaml and "
                                  "summary.json)"),
                       (tmp_path / "nowhere", f"{tmp_path / 'nowhere'} is not a directory")):
        with pytest.raises(SystemExit) as refused:
            main([str(root)])
        assert refused.value.code == 2 and capsys.readouterr().err.strip().splitlines() == [f"genpol.report: {line}"]
    (tmp_path / "unfinished" / "summary.json").write_text('{"eval')  # damaged: named in one line, not two
    with pytest.raises(SystemExit):
        main([str(tmp_path)])
    skipped, refused = capsys.readouterr().err.strip().splitlines()
    assert skipped.startswith(f"genpol.report: skipping {tmp_path / 'unfinished'}: its config.yaml or summary.json "
                              "cannot be read") and refused.startswith("genpol.report: no finished run under")


def test_report_lists_runs_without_a_checkpoint_apart_and_a_single_seeds_coverage_as_na(tmp_path):
    """A start refused after its config.yaml was written (a bad env id) left a folder the report listed among the
    unfinished runs, as if a re-run would resume it; and a one-seed row printed "0.0%" for the coverage of an
    interval it does not have."""
    from genpol.report import report

    saved_run(tmp_path / "done", [], 1.0, 1.0)
    refused = saved_run(tmp_path / "refused", [], 0.0, 1.0)
    stopped = saved_run(tmp_path / "stopped", [], 0.0, 1.0)
    for run_dir in (refused, stopped):
        (run_dir / "summary.json").unlink()
    (stopped / "checkpoints" / "step_000000000016").mkdir(parents=True)
    result = report(tmp_path)
    assert result["unfinished"] == [str(stopped)] and result["not_started"] == [str(refused)]
    text = (tmp_path / "report" / "report.md").read_text()
    assert f"Unfinished (no summary.json; re-run to resume): `{stopped}`" in text
    assert f"No checkpoint (refused at the start, or stopped before the first checkpoint): `{refused}`" in text
    assert "| 1 | 1.00 | none (one seed) | n/a | 1.00 |" in text


def saved_run(run_dir: Path, overrides: list[str], value: float, curve_scale: float) -> Path:
    """A finished run's files without its training: ``config.yaml`` written by the resume check's own writer
    (what every run saves), a ``summary.json`` holding ``value`` and a ``progress.jsonl`` whose episodic return
    is ``curve_scale`` x the step."""
    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.runners.scaffold import check_resume_config

    run_dir.mkdir(parents=True)
    check_resume_config(run_dir, validate(compose_config(["env=multigoal", f"run_dir={run_dir}", *overrides])))
    (run_dir / "summary.json").write_text(json.dumps({"eval_return_mean": value}))
    (run_dir / "progress.jsonl").write_text("".join(
        json.dumps({"global_step": step, "charts/episodic_return": curve_scale * step}) + "\n" for step in (16, 32)))
    return run_dir


def test_report_names_configurations_apart_when_their_labels_share_the_first_120_characters(tmp_path):
    """Two PPO runs that differ in total_steps only, reported beside a SAC run: every learner key differs between
    the learners, so the labels list them all and the PPO rows' labels agree up to total_steps, far past 120
    characters. Each row gets its own curve and its own TensorBoard session (the names were the label cut to 120
    characters: one PNG for both rows, and their sessions merged in one folder), and keeps it in a re-run."""
    from tensorboard.backend.event_processing.event_accumulator import EventAccumulator

    from genpol.report import report

    saved_run(tmp_path / "ppo_256", ["total_steps=256"], 1.0, 1.0)
    saved_run(tmp_path / "ppo_512", ["total_steps=512"], 2.0, 2.0)
    saved_run(tmp_path / "sac", ["learner=sac", "policy=tanh_gaussian", "total_steps=512"], 3.0, 3.0)
    rows = report(tmp_path)["rows"]
    ppo_256, ppo_512, sac = rows
    assert [row["values"] for row in rows] == [[1.0], [2.0], [3.0]]
    assert ppo_256["configuration"][:120] == ppo_512["configuration"][:120] != sac["configuration"][:120]
    assert ppo_256["configuration"].endswith("total_steps=256") and ppo_512["configuration"].endswith("total_steps=512")
    # a key of SAC's alone stays missing in a PPO run (not LEGACY_VALUES' 1e-5: PPO never had it)
    assert ppo_256["settings"]["learner.critic_layer_norm_eps"] is None
    assert sac["settings"]["learner.critic_layer_norm_eps"] == 1e-5

    curves = [row["curve"] for row in rows]
    assert len(set(curves)) == 3 and all(len(Path(curve).name) <= 255 for curve in curves)
    names = sorted(Path(curve).stem for curve in curves)
    assert sorted(path.name for path in (tmp_path / "report" / "tb").iterdir()) == names
    assert sorted(path.name for path in (tmp_path / "report" / "curves").iterdir()) == [f"{name}.png" for name in names]
    for row in rows:  # each session holds its own run's metric, one session per folder
        session = tmp_path / "report" / "tb" / Path(row["curve"]).stem
        assert [path.name for path in session.iterdir()] == ["seed_0"]
        events = EventAccumulator(str(session / "seed_0"))
        events.Reload()
        assert [event.value for event in events.Scalars("hparam/eval_return_mean")] == row["values"]
    assert [row["curve"] for row in report(tmp_path)["rows"]] == curves  # stable: a re-run finds the same names


def test_report_groups_a_run_saved_before_a_key_existed_with_what_it_computed(joblib_sweep, tmp_path):
    """A run whose config.yaml predates a key (here the key deleted from one seed's file) is one configuration
    with the runs that computed the same, as the resume check decides (genpol.runners.scaffold): it split into
    ``key=keep`` and ``key=None``, one seed each."""
    import yaml

    from genpol.report import report

    # two real seeds of one configuration (learner.epochs=1), without a dataset: the missing keys are a PPO field
    # added at its default, and dataset.truncated_rows, which a run without a dataset never reads
    for job in ("0", "2"):
        shutil.copytree(joblib_sweep / job, tmp_path / "sweep" / job)
    old = tmp_path / "sweep" / "2" / "config.yaml"
    config = yaml.safe_load(old.read_text())
    del config["dataset"]["truncated_rows"], config["learner"]["advantage_std"]
    old.write_text(yaml.safe_dump(config))
    rows = report(tmp_path / "sweep")["rows"]
    assert [(row["configuration"], row["seeds"]) for row in rows] == [("all runs", [0, 1])]

    # with a dataset, a run saved before dataset.truncated_rows dropped truncated rows (LEGACY_VALUES), the default
    # now keeps them: seed 1 computed what seed 2 asked for explicitly, not what seed 0 did
    offline = ["pipeline=offline_to_online", f"dataset.path={tmp_path / 'data.hdf5'}"]
    for seed, truncated_rows in ((0, "keep"), (1, "keep"), (2, "drop")):
        saved_run(tmp_path / "offline" / str(seed),
                  [*offline, f"seed={seed}", f"dataset.truncated_rows={truncated_rows}"], float(seed), 1.0)
    old = tmp_path / "offline" / "1" / "config.yaml"
    old.write_text("".join(line for line in old.read_text().splitlines(keepends=True) if "truncated_rows" not in line))
    rows = report(tmp_path / "offline")["rows"]
    assert [(row["configuration"], row["seeds"]) for row in rows] == [
        ("dataset.truncated_rows=keep", [0]), ("dataset.truncated_rows=drop", [1, 2])]


def folder_bytes(folder: Path) -> dict[str, bytes]:
    """Every file under ``folder`` by its relative path, with its bytes."""
    return {str(path.relative_to(folder)): path.read_bytes() for path in sorted(folder.rglob("*")) if path.is_file()}


def test_report_refuses_an_out_folder_holding_runs_and_replaces_only_its_own(joblib_sweep, tmp_path, capsys):
    """``--out <a run directory>`` deleted the run's tb/ (its TensorBoard events) and wrote the report among its
    files; ``--out <the root>`` said "no finished run", which was false (the runs were skipped for lying under the
    output folder); ``--out <a run>/tb`` wrote the report's events among the run's. All, and a folder holding
    a tb/ the report did not write, are refused in one line naming --out (exit 2), and nothing there changes; a
    folder the report wrote has its curves/ replaced on a re-run."""
    from genpol.report import main

    sweep = tmp_path / "sweep"
    shutil.copytree(joblib_sweep, sweep, ignore=shutil.ignore_patterns("report"))
    assert any((sweep / "0" / "tb").rglob("events.out.tfevents.*"))  # the run's own TensorBoard events
    before = folder_bytes(sweep)
    foreign = tmp_path / "mine"
    (foreign / "tb").mkdir(parents=True)
    (foreign / "tb" / "notes.txt").write_text("not the report's")
    refusals = {sweep / "0": "is a run directory (it holds config.yaml)",
                sweep: f"holds 4 run directories ({sweep / '0'}, ...)",
                sweep / "0" / "tb": f"lies inside {sweep / '0' / 'tb'}, a folder of the run {sweep / '0'}",
                sweep / "0" / "checkpoints" / "r": f"lies inside {sweep / '0' / 'checkpoints'}, a folder of the run",
                foreign: "holds tb/ that genpol.report did not write"}
    for out, reason in refusals.items():
        with pytest.raises(SystemExit) as stop:
            main([str(sweep), "--out", str(out)])
        assert stop.value.code == 2
        error = capsys.readouterr().err
        assert error.startswith(f"genpol.report: --out {out} {reason}") and error.count("\n") == 1, error
    assert folder_bytes(sweep) == before and (foreign / "tb" / "notes.txt").read_text() == "not the report's"

    out = tmp_path / "report"
    main([str(sweep), "--out", str(out)])
    (out / "curves" / "stale.png").write_bytes(b"a curve of an earlier report")
    main([str(sweep), "--out", str(out)])
    assert sorted(path.name for path in (out / "curves").iterdir()) == ["learner.epochs=1.png", "learner.epochs=2.png"]
    assert folder_bytes(sweep) == before


# -- submitit: requeue resumes -----------------------------------------------------------------

REQUEUE = ["env=multigoal", "seed=0", "total_steps=8192", "learner.rollout_steps=16", "learner.epochs=1",
           "pipeline.video=false", "pipeline.eval_episodes=2", "logger.progress_bar=false",
           "pipeline.checkpoint_every=0", "pipeline.keep_checkpoints=3"]


def test_submitit_requeue_resumes_from_the_checkpoint_written_at_the_signal(tmp_path):
    """SIGUSR2 (SLURM's preemption / time-limit signal through submitit) to a job of a
    launcher=submitit_local sweep: the run checkpoints at the end of its iteration (checkpoint_every=0
    writes none otherwise), submitit's hook requeues the job, and the requeued job resumes from that
    checkpoint and ends with the parameters and learner state of an uninterrupted run."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    from genpol.checkpoint import list_checkpoints, load_policy_files, load_training_state

    sweep = subprocess.Popen([sys.executable, "-m", "genpol.train", "--multirun", "launcher=submitit_local", *REQUEUE,
                              f"run_dir={tmp_path / 'sweep'}"], cwd=REPO, stdout=subprocess.PIPE,
                             stderr=subprocess.STDOUT, text=True, env={**os.environ, "PYTHONWARNINGS": "ignore"})
    job = tmp_path / "sweep" / "0"
    try:
        deadline = time.time() + 120
        while time.time() < deadline and sweep.poll() is None:
            progress = job / "progress.jsonl"
            if progress.exists() and progress.read_text().count("\n") >= 1:
                break
            time.sleep(0.02)
        os.kill(lock_pid(job), signal.SIGUSR2)
        # the uninterrupted reference, in this process while the job requeues
        from genpol.api import train

        train("multigoal", seed=0, total_steps=8192, run_dir=tmp_path / "reference",
              overrides=[item for item in REQUEUE if not item.startswith(("env=", "seed=", "total_steps="))])
        output, _ = sweep.communicate(timeout=180)
    finally:
        if sweep.poll() is None:
            sweep.kill()
    assert sweep.returncode == 0, output[-3000:]
    log = "".join(path.read_text() for path in (tmp_path / "sweep" / ".submitit").rglob("*_log.*"))
    assert "Requeued job" in log and f"resuming genpol:MultiGoal from {job / 'checkpoints'}" in log

    steps = [int(path.name.split("_")[1]) for path in list_checkpoints(job / "checkpoints")]
    assert len(steps) == 2 and 0 < steps[0] < 8192 and steps[1] == 8192  # the signal's checkpoint, the end
    final = list_checkpoints(job / "checkpoints")[-1]
    expected = list_checkpoints(tmp_path / "reference" / "checkpoints")[-1]
    assert_trees_equal(load_policy_files(expected)[1], load_policy_files(final)[1], "policy")
    state, expected_state = load_training_state(final), load_training_state(expected)
    for key in ("head", "algorithm", "env", "obs", "torch_rng", "global_step", "iteration"):
        assert_trees_equal(expected_state[key], state[key], key)


# -- Ray ---------------------------------------------------------------------------------------

def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


def _listening_addresses(session: int) -> list[str]:
    """The local addresses of the TCP sockets that processes of ``session`` listen on (``ss``)."""
    pids = subprocess.run(["ps", "-o", "pid=", "-s", str(session)], capture_output=True, text=True).stdout.split()
    try:
        table = subprocess.run(["ss", "-ltnpH"], capture_output=True, text=True, timeout=30).stdout
    except FileNotFoundError:
        pytest.skip("ss (iproute2) is needed to check that the Ray head listens on loopback only")
    return [line.split()[3].rsplit(":", 1)[0].strip("[]").removeprefix("::ffff:") for line in table.splitlines()
            if any(f"pid={pid}," in line for pid in pids)]


def test_ray_sweep_against_a_local_head(tmp_path):
    """A head on the loopback address only (Ray's single-machine mode: every port it listens on is
    bound to 127.0.0.1), a 2-job sweep sent to it with launcher=ray, the head stopped: every step
    bounded in time. The jobs train the user's own batched env (``tests/custom_envs``), which neither the
    head's nor the sweep's PYTHONPATH reaches: the sweep hands it to the workers through ``ray.init``'s
    ``runtime_env`` (docs/tutorials/sweeps.md)."""
    pytest.importorskip("ray", reason="the cluster extra (pip install -e '.[cluster]') installs Ray")
    pytest.importorskip("hydra_plugins.hydra_ray_launcher")
    ray_bin = Path(sys.executable).parent / "ray"
    # Ray keeps unix sockets under its temp dir, whose paths must stay under 108 bytes
    temp_dir = Path(tempfile.mkdtemp(prefix="ray", dir="/tmp"))
    env = {**os.environ, "RAY_ENABLE_WINDOWS_OR_OSX_CLUSTER": "0", "RAY_USAGE_STATS_ENABLED": "0",
           "PYTHONWARNINGS": "ignore", "PYTHONPATH": os.pathsep.join(filter(None, [str(REPO), os.environ.get("PYTHONPATH")]))}
    port = _free_port()
    head = subprocess.Popen([str(ray_bin), "start", "--head", "--block", "--node-ip-address=127.0.0.1", f"--port={port}",
                             "--num-cpus=2", "--include-dashboard=false", "--disable-usage-stats",
                             f"--temp-dir={temp_dir}"], env=env, start_new_session=True,
                            stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)
    try:
        run_cli("-m", "genpol.train", "--multirun", "launcher=ray", f"hydra.launcher.ray.init.address=127.0.0.1:{port}",
                "seed=0,1", "learner.epochs=1", *[item for item in TINY if item != "env=multigoal"],
                "env=custom", "env.id=custom_envs.batched:make_env",
                f"+hydra.launcher.ray.init.runtime_env.env_vars.PYTHONPATH={TESTS}{os.pathsep}{REPO}",
                f"run_dir={tmp_path / 'sweep'}", env=env, timeout=180,
                cold=True)  # as joblib's: the launcher's processes are the point
        listening = _listening_addresses(head.pid)
        assert listening and all(address.endswith("127.0.0.1") for address in listening), listening
    finally:
        head.send_signal(signal.SIGTERM)  # `ray start --block` drains the node and stops its processes
        try:
            head.wait(timeout=60)
        finally:
            leftovers = subprocess.run(["ps", "-o", "pid=", "-s", str(head.pid)], capture_output=True, text=True)
            for pid in leftovers.stdout.split():
                os.kill(int(pid), signal.SIGKILL)  # processes of the session this test started
    worker_output = "".join(path.read_text(errors="replace") for path in temp_dir.glob("session_*/logs/worker-*.out"))
    shutil.rmtree(temp_dir, ignore_errors=True)
    seeds = [json.loads((tmp_path / "sweep" / job / "summary.json").read_text())["seed"] for job in ("0", "1")]
    assert seeds == [0, 1]
    for job in ("0", "1"):  # each job's summary was printed by a Ray worker
        assert f'"run_dir": "{tmp_path / "sweep" / job}"' in worker_output


def test_genpols_launchers_are_found_outside_the_checkout(tmp_path):
    """Hydra walks the hydra_plugins folders for plugins, which the editable install's import hook hides
    outside the checkout: launcher=slurm failed there as "Unknown plugin class". The CLI registers them."""
    pytest.importorskip("hydra_plugins.hydra_submitit_launcher")
    probe = ("from hydra.core.plugins import Plugins; from genpol.train import register_launchers; "
             "register_launchers(); known = Plugins.instance().class_name_to_class; "
             "print(all(f'hydra_plugins.genpol_launchers.resuming_submitit.{name}' in known "
             "for name in ('ResumingSlurmLauncher', 'ResumingLocalLauncher')))")
    environment = {key: value for key, value in os.environ.items() if key != "PYTHONPATH"}
    assert run_cli("-c", probe, cwd=tmp_path, env=environment, cold=True).stdout.strip() == "True"
