"""``python -m <module> <args>`` in a forked process whose imports are already done.

Why: a cold ``python -m genpol.train`` spends ~3.3 CPU-seconds importing before its first step (torch
0.9 s; torch._dynamo 1.5 s, which ``torch.optim`` imports at the first ``step``; Hydra, gymnasium,
tensorboard, matplotlib), and the suite starts about a hundred of them (kills and resumes, the CLI,
launchers, the crash harness): that was a third of its CPU time. Here a multiprocessing forkserver
imports those libraries and genpol's lower layers once per pytest worker, and every command is a fork
of it.

What the child is: its own process (pid, signals, exit code, working directory, environment, stdout and
stderr redirected at the file-descriptor level), running the module as ``__main__`` through ``runpy``,
as ``python -m`` does, with the working directory first on ``sys.path`` and ``PYTHONPATH``'s entries
after it. The entry modules themselves (``genpol.train``, ``genpol.evaluate``, ...) are not preloaded, so
they execute once, as ``__main__``, exactly as from a shell. What it does not exercise is the
interpreter's own start and the import of genpol from the working directory; the packaging tests, the
README's script and a CLI test start cold processes for that (``run_cli(..., cold=True)``).
"""

from __future__ import annotations

import atexit
import multiprocessing
import os
import runpy
import signal
import sys
import shutil
import tempfile
import warnings
import weakref
from pathlib import Path

# Imported once in the server (not the entry modules, which must execute as __main__); MPLBACKEND keeps
# pyplot's backend choice what genpol's own matplotlib.use("Agg") makes it.
PRELOAD = ["torch", "torch._dynamo", "torch.utils.tensorboard", "matplotlib.pyplot", "hydra", "omegaconf",
           "gymnasium", "genpol.configure", "genpol.pipelines", "genpol.callbacks", "genpol.checkpoint"]

_context = None
# the path and environment as conftest imports this module, before any test patches them: the server starts
# with these, whichever test first asks for it (a child's own cwd, PYTHONPATH and env are set per command)
_CLEAN_SYS_PATH = list(sys.path)
_CLEAN_ENVIRON = dict(os.environ)


def context() -> multiprocessing.context.ForkServerContext:
    global _context
    if _context is None:
        from multiprocessing import forkserver

        _context = multiprocessing.get_context("forkserver")
        _context.set_forkserver_preload(PRELOAD)
        saved_path, saved_environ = list(sys.path), dict(os.environ)
        sys.path[:] = _CLEAN_SYS_PATH
        os.environ.clear()
        os.environ.update({**_CLEAN_ENVIRON, "MPLBACKEND": _CLEAN_ENVIRON.get("MPLBACKEND", "Agg")})
        try:
            forkserver.ensure_running()  # the server takes this process's sys.path and environment now
        finally:
            sys.path[:] = saved_path
            os.environ.clear()
            os.environ.update(saved_environ)
    return _context


def _child(module: str, args: list[str], cwd: str, env: dict[str, str], stdout: str, stderr: str) -> None:
    """The forked process: ``python -m module *args`` from ``cwd`` with ``env``."""
    os.chdir(cwd)
    os.environ.clear()
    os.environ.update(env)
    if env.get("PYTHONWARNINGS"):  # read by the interpreter at its start: apply it as a cold start would
        warnings._processoptions(env["PYTHONWARNINGS"].split(","))  # type: ignore[attr-defined]
    for fd, path in ((1, stdout), (2, stderr)):
        if fd == 2 and path == stdout:  # one log for both, as stderr=subprocess.STDOUT
            os.dup2(1, 2)
            continue
        target = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o644)
        os.dup2(target, fd)
        os.close(target)
    sys.stdout = open(1, "w", buffering=1, closefd=False)
    sys.stderr = open(2, "w", buffering=1, closefd=False)
    extra = [path for path in env.get("PYTHONPATH", "").split(os.pathsep) if path]
    sys.path[:] = [cwd, *extra, *sys.path[1:]]
    sys.argv = [module, *args]
    # a top-level process, as from a shell: code that asks multiprocessing whether it runs in a child
    # (an env worker) must hear "no" here (multiprocessing keeps this state in private attributes)
    from multiprocessing import process as mp_process

    mp_process._parent_process = None  # type: ignore[attr-defined]
    multiprocessing.current_process().name = "MainProcess"
    signal.signal(signal.SIGTERM, signal.SIG_DFL)
    signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        runpy.run_module(module, run_name="__main__", alter_sys=True)
    finally:
        atexit._run_exitfuncs()  # a multiprocessing child leaves by os._exit: run what a real exit runs
        sys.stdout.flush()
        sys.stderr.flush()


class WarmProcess:
    """The part of ``subprocess.Popen`` the tests use, for a command forked from the warm server.

    ``stdout`` / ``stderr`` are files the child writes; ``communicate`` and the ``stderr`` reader return
    their text once the child has ended."""

    def __init__(self, module: str, args: list[str], cwd: Path, env: dict[str, str], log: Path | None = None):
        """``log``: stdout and stderr both to this file (``stderr=subprocess.STDOUT``)."""
        self._outdir = tempfile.mkdtemp(prefix="genpol-warm-")
        weakref.finalize(self, shutil.rmtree, self._outdir, True)  # the captured output goes with the object
        self.stdout_path = str(log) if log else os.path.join(self._outdir, "stdout")
        self.stderr_path = str(log) if log else os.path.join(self._outdir, "stderr")
        self.args = [module, *args]
        for path in {self.stdout_path, self.stderr_path}:  # empty, not missing, if the child dies before writing
            Path(path).write_text("")
        self._process = context().Process(target=_child, args=(module, list(args), str(cwd), dict(env),
                                                              self.stdout_path, self.stderr_path))
        self._process.start()
        self.pid = self._process.pid
        self.returncode: int | None = None
        self.stderr = _Reader(self.stderr_path)

    def poll(self) -> int | None:
        if self.returncode is None and not self._process.is_alive():
            self._process.join()
            self.returncode = self._process.exitcode
        return self.returncode

    def wait(self, timeout: float | None = None) -> int:
        self._process.join(timeout)
        if self._process.exitcode is None:
            import subprocess

            raise subprocess.TimeoutExpired(self.args, timeout)
        self.returncode = self._process.exitcode
        return self.returncode

    def send_signal(self, sig: int) -> None:
        if self.poll() is None:
            os.kill(self.pid, sig)

    def terminate(self) -> None:
        self.send_signal(signal.SIGTERM)

    def kill(self) -> None:
        self.send_signal(signal.SIGKILL)

    def communicate(self, timeout: float | None = None) -> tuple[str, str]:
        self.wait(timeout)
        return Path(self.stdout_path).read_text(errors="replace"), Path(self.stderr_path).read_text(errors="replace")


class _Reader:
    def __init__(self, path: str):
        self.path = path

    def read(self) -> str:
        return Path(self.path).read_text(errors="replace")


def warm_run(module: str, args: list[str], cwd: Path, env: dict[str, str], timeout: float | None = None):
    """``subprocess.run([python, -m, module, *args], capture_output=True, text=True)``, forked warm."""
    import subprocess

    process = WarmProcess(module, args, cwd, env)
    try:
        stdout, stderr = process.communicate(timeout)
    except subprocess.TimeoutExpired:
        process.kill()
        process.wait()
        raise
    return subprocess.CompletedProcess([sys.executable, "-m", module, *args], process.returncode, stdout, stderr)
