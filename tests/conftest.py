"""Shared test setup: headless rendering, one torch thread, quiet MuJoCo warnings."""

import importlib.util
import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("MUJOCO_GL", "egl")
os.environ.setdefault("PYOPENGL_PLATFORM", os.environ["MUJOCO_GL"])
# The tests decode videos with imageio, which starts ffmpeg through a preexec_fn unless this is set: Python
# run in a forked child, which JAX warns about in the worker that runs Playground (genpol writes without one).
os.environ.setdefault("IMAGEIO_FFMPEG_NO_PREVENT_SIGINT", "1")

import pytest  # noqa: E402
import torch  # noqa: E402
from warm_start import WarmProcess, warm_run  # noqa: E402

torch.set_num_threads(1)
REPO = Path(__file__).resolve().parent.parent
EXAMPLES = REPO / "docs" / "examples"


def needs(module: str, reason: str | None = None) -> pytest.MarkDecorator:
    """Skip where ``module`` is not installed, found without importing it: ``pytest.importorskip`` at a test
    file's top imports the package at collection, in every worker (Playground's JAX 2.6 s, EnvPool 2.4 s),
    whether or not the worker runs those tests."""
    return pytest.mark.skipif(importlib.util.find_spec(module) is None, reason=reason or f"{module} is not installed")


@pytest.fixture
def onednn_preferred(monkeypatch):
    """Layers built in the test take oneDNN's path where this build has it, whatever the CPU
    (``genpol.onednn.ONEDNN_PREFERRED`` is true only on CPUs where oneDNN was measured faster): for the
    tests of that path."""
    from genpol import onednn

    monkeypatch.setattr(onednn, "ONEDNN_PREFERRED", onednn.ONEDNN_AVAILABLE)


@pytest.fixture
def examples_on_path(monkeypatch):
    """The docs' example modules (the tutorial head and learner) importable here and in subprocesses."""
    monkeypatch.syspath_prepend(str(EXAMPLES))
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(EXAMPLES), os.environ.get("PYTHONPATH")])))


def run_cli(*args: str, cwd: Path | None = None, check: bool = True, timeout: float = 300,
            env: dict[str, str] | None = None, cold: bool = False) -> subprocess.CompletedProcess:
    """Run ``python -m <args>`` in a subprocess from the repository root (or ``cwd``), with
    ``os.environ`` (or ``env``). A ``-m`` command is forked from the warm server (``warm_start``: the
    same module run as ``__main__`` in its own process, without ~3 s of imports); ``cold=True`` starts a
    fresh interpreter, for tests of the interpreter's start itself."""
    environment = {**(env or os.environ), "PYTHONWARNINGS": "ignore"}
    if not cold and len(args) >= 2 and args[0] == "-m":
        result = warm_run(args[1], list(args[2:]), cwd or REPO, environment, timeout)
    else:
        result = subprocess.run([sys.executable, *args], cwd=cwd or REPO, capture_output=True, text=True,
                                timeout=timeout, env=environment)
    if check and result.returncode != 0:
        raise AssertionError(f"command failed ({result.returncode}):\n{result.stdout[-3000:]}\n{result.stderr[-3000:]}")
    return result


def start_training(run_dir: Path, *overrides: str) -> WarmProcess:
    """``python -m genpol.train <overrides> run_dir=<run_dir>`` started in the background (for kill and
    resume tests), forked from the warm server; ``.stderr.read()`` once it has ended."""
    return WarmProcess("genpol.train", [*overrides, f"run_dir={run_dir}"], REPO,
                       {**os.environ, "PYTHONWARNINGS": "ignore"})


def rewound_copy(run_dir: Path, copy_dir: Path, later_checkpoints: list[str]) -> None:
    """``copy_dir``: a copy of the finished run ``run_dir`` as it stood before ``later_checkpoints`` were
    written (those and the summary removed), so that training it again resumes from the one before."""
    import shutil

    shutil.copytree(run_dir, copy_dir)
    for name in later_checkpoints:
        shutil.rmtree(Path(copy_dir) / "checkpoints" / name)
    (Path(copy_dir) / "summary.json").unlink()


def final_checkpoint(run_dir: Path) -> tuple:
    """``(name, policy spec, policy weights, training state)`` of a run's latest checkpoint."""
    from genpol.checkpoint import list_checkpoints, load_policy_files, load_training_state

    path = list_checkpoints(Path(run_dir) / "checkpoints")[-1]
    spec, weights = load_policy_files(path)
    return path.name, spec, weights, load_training_state(path)


@pytest.fixture(autouse=True)
def _seed():
    torch.manual_seed(0)


@pytest.fixture(autouse=True)
def _work_in_tmp(tmp_path, monkeypatch):
    """A config composed without ``run_dir`` claims ``runs/<date>/<time>`` under the working
    directory (the default's resolver creates it): keep those out of the checkout. Subprocesses
    run from ``REPO`` (``run_cli``), so only in-process work moves."""
    monkeypatch.chdir(tmp_path)


@pytest.fixture
def one_thread():
    """One torch thread for the test (oneDNN layers decide at construction, on one thread), then back."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture(scope="session")
def random_dataset(tmp_path_factory):
    """``random_dataset("Walker2d")``: a D4RL file of >= 600 random-policy ``<task>-v5`` transitions in
    complete episodes, made by rolling out the real simulator once per session and task."""
    from genpol.data.collect import main as collect_main

    made = {}

    def make(task):
        if task not in made:
            path = tmp_path_factory.mktemp("data") / f"{task.lower()}_random-v5.hdf5"
            collect_main(["--policy", "random", "--env", f"gym:{task}-v5", "--steps", "600", "--num-envs", "2",
                          "--d4rl", str(path)])
            made[task] = path
        return made[task]

    return make


@pytest.fixture(scope="session")
def hopper_dataset(random_dataset):
    """Random-policy Hopper-v5 data (shared by the off-policy and smoke tests)."""
    return random_dataset("Hopper")


def assert_nonblank_mp4(path, size=None):
    """The mp4 decodes to more than 2 RGB frames (of ``size`` (H, W) when given) that are not blank."""
    import imageio.v3 as iio

    frames = iio.imread(path)
    assert frames.ndim == 4 and frames.shape[0] > 2 and frames.shape[-1] == 3, path
    if size is not None:
        assert frames.shape[1:3] == tuple(size), (path, frames.shape)
    assert frames.std() > 5, f"{path} is blank"


def assert_trees_equal(a, b, where=""):
    """Nested dicts / lists of tensors and numbers are equal, bit for bit."""
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), where
        for key in a:
            assert_trees_equal(a[key], b[key], f"{where}.{key}")
    elif isinstance(a, (list, tuple)):
        assert len(a) == len(b), where
        for i, (x, y) in enumerate(zip(a, b)):
            assert_trees_equal(x, y, f"{where}[{i}]")
    elif isinstance(a, torch.Tensor):
        assert a.dtype == b.dtype and torch.equal(a, b), where
    else:
        assert a == b, where


# The files whose tests take longest (``--durations=60`` on 2026-12-02: several seconds each), collected
# first: the two xdist workers then end on short tests instead of one idling while the other finishes a
# long one (longest-first scheduling). The order inside a file and of every other file is kept.
LONGEST_FIRST = ("test_launchers.py", "test_distributed.py", "test_packaging.py", "test_learning.py",
                 "test_consistency_learning.py", "test_crash.py", "test_sac.py", "test_layers.py", "test_smoke.py",
                 "test_expo.py", "test_subproc.py", "test_custom_envs.py")


def pytest_collection_modifyitems(config, items):
    """Longest files first; the tests that share a module-scoped fixture (a trained run, a sweep, a
    wheel) in one xdist group, so that the fixture is made once, not once per worker; and every test
    that builds a Playground env in one group of its own (``_builds_playground_envs``)."""
    for item in items:
        if _builds_playground_envs(item):  # test_playground.py's module fixture is then on that one worker too
            item.add_marker(pytest.mark.xdist_group("playground"))
        else:
            for name in item.fixturenames:
                definitions = item._fixtureinfo.name2fixturedefs.get(name)
                if definitions and definitions[-1].scope == "module":
                    item.add_marker(pytest.mark.xdist_group(f"{item.path.stem}.{name}"))
        if hasattr(config, "workerinput") and config.getvalue("loadgroup"):
            _add_group_to_node_id(item)
    rank = {name: index for index, name in enumerate(LONGEST_FIRST)}
    items.sort(key=lambda item: rank.get(item.path.name, len(rank)))


def _builds_playground_envs(item) -> bool:
    """The tests of ``test_playground.py`` and every case whose id names Playground (``test_envs.py``'s
    backends, the smoke test's ``env-playground``). Run one after another on one worker, only the first
    of them compiles CartpoleBalance's jitted reset and step: JAX's persistent compilation cache
    (``envs/playground_backend.py``) serves the rest, and Playground is imported once. Spread over both
    workers, each compiled its own (51.7 s of the cold suite's 2026-12-04 run against 20 s warm)."""
    return item.path.name == "test_playground.py" or "playground" in item.nodeid.partition("::")[2]


def _add_group_to_node_id(item) -> None:
    """``<nodeid>@<group>``, which ``--dist loadgroup`` sends to one worker. pytest-xdist 3.8 writes the
    suffix to ``item._nodeid``, which pytest 9 no longer reads (the id lives in ``item._id``), so every
    ``xdist_group`` was silently ignored: this writes it where pytest 9 reads it."""
    groups = sorted({str(mark.args[0] if mark.args else mark.kwargs.get("name", "default"))
                     for mark in item.iter_markers("xdist_group")})
    if not groups or "@" in item.nodeid:
        return  # none, or xdist's own suffix took (pytest 8, which reads item._nodeid)
    try:
        from _pytest.nodeid import coerce_node_id
    except ImportError:  # a pytest without NodeId keeps the id in item._nodeid, where xdist wrote it
        return
    item._id = coerce_node_id(f"{item.nodeid}@{'_'.join(groups)}")
