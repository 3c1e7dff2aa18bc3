"""A CPU backend's envs split over processes, exchanging step results through shared memory.

``SubprocVectorEnv("gym:HalfCheetah-v5", num_envs=32, workers=2)`` behaves like the single-process
backend with the same envs (env i is seeded with ``seed + i``; bit-identical observations and
rewards), but the envs are split into ``workers`` contiguous slices that step at the same time:
this process steps slice 0 itself and one worker process steps each other slice.

Why not gymnasium's ``AsyncVectorEnv``: it runs one process per env and pickles every step's
results through a pipe; on two cores that measured 2.5x slower than one process (see
``genpol.envs.gym_backend``). Here a process owns many envs (a whole backend of its slice), the step
results go through preallocated shared-memory tensors, and a step is signalled with semaphores that
both sides first poll for a moment before they sleep: a sleeping process took so long to wake on
this machine's VM that a pipe-signalled version with two worker processes ran at 4.5-5.7k env-steps/s
against 7.0-7.6k for one process (HalfCheetah, 8 envs). The state dict keeps the single-process
format (one entry per env), so checkpoints move between worker counts.
"""

from __future__ import annotations

import os
import pickle
import signal
import sys
import time
import traceback
import warnings
import weakref
from typing import Any, Sequence

import numpy as np
import torch
import torch.multiprocessing as mp

from .core import EnvError, StepResult, VectorEnv


class WorkerDied(EnvError):
    """An env worker process ended without answering (its own cause, apart from an env it could not build)."""


SEED_KEYS = ("seed", "pending_seed")  # the gym / dm_control backends' "seed of the next reset"
SPLITTABLE_BACKENDS = ("gym", "dmc")  # backends whose state is a list with one entry per env
# How long a waiting process polls its semaphore before it sleeps: longer than the policy's forward
# pass between two steps (0.3-0.6 ms). Polling costs when trainings share the cores (two on two
# cores, 2 workers each: 15-23 % slower than 1 each), and 0.3 ms measured no better there.
SPIN_SECONDS = 0.002
_yield = getattr(os, "sched_yield", lambda: time.sleep(0))
METADATA = ("obs_dim", "act_dim", "action_low", "action_high", "max_episode_steps", "render_fps", "env_id",
            "action_chunk", "imports", "reports_success", "observation_layout")


def _poll(semaphore: Any, seconds: float) -> bool:
    """Try to take ``semaphore`` without sleeping for up to ``seconds``; True once taken.

    Each miss yields the core to any other process that is ready to run.
    """
    deadline = time.perf_counter() + seconds
    while time.perf_counter() < deadline:
        if semaphore.acquire(False):
            return True
        _yield()
    return False


def _error_reply(error: Exception) -> tuple[str, Exception | None, str]:
    """The reply that carries a worker's exception to the parent: the exception itself where it survives a
    pickle round trip, else None, and always its formatted traceback. An exception whose ``__init__`` takes
    other arguments than its message does not unpickle, and one holding a lock does not pickle: sent as it
    was, the first reached the parent as an unrelated TypeError and the second killed the worker."""
    try:
        pickle.loads(pickle.dumps(error))
    except Exception:  # noqa: BLE001 - any failure means: send the text alone
        return ("error", None, _formatted(error))
    return ("error", error, _formatted(error))


def _formatted(error: Exception) -> str:
    return "".join(traceback.format_exception(type(error), error, error.__traceback__))


def _write_step(buffers: dict[str, torch.Tensor], rows: slice, result: StepResult) -> None:
    obs, reward, terminated, truncated, info = result
    buffers["obs"][rows] = obs
    buffers["reward"][rows] = reward
    buffers["terminated"][rows] = terminated
    buffers["truncated"][rows] = truncated
    buffers["final_obs"][rows] = info["final_obs"]
    if "env_steps" in info:
        buffers["env_steps"][rows] = info["env_steps"]
    if "success" in info:
        buffers["success"][rows] = info["success"]


def _worker(conn: Any, go: Any, done: Any, env_id: str, first: int, count: int, kwargs: dict[str, Any],
            buffers: dict[str, torch.Tensor], parent_pid: int) -> None:
    """Step the slice ``[first, first + count)`` each time ``go`` is released, until told to close.

    ``kwargs`` carries the parent's ``imports``: a spawned process starts with none of the parent's
    modules, so the user's modules that register the env are imported before the slice is built.

    A release with a message waiting on ``conn`` is a command (reset, state dict, close), answered
    on ``conn``; a release without one is a step, written into ``buffers`` and answered by
    releasing ``done`` (after sending the exception on ``conn`` if the step failed).
    """
    from . import make_backend  # the package imports this module: import it at use

    # Ctrl-C in a terminal and a scheduler's SIGTERM reach the whole process group: a worker they killed
    # took the env state with it, and the parent's stop could write no checkpoint. The parent handles the
    # stop and closes the workers (SIGKILL if they do not answer); a parent that dies is noticed below.
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    signal.signal(signal.SIGTERM, signal.SIG_IGN)
    torch.set_num_threads(1)
    rows = slice(first, first + count)
    try:
        env = make_backend(env_id, num_envs=count, device="cpu", seed=None, **kwargs)
        conn.send(("ok", None))
    except Exception as error:  # noqa: BLE001 - sent to the parent, which re-raises it
        conn.send(_error_reply(error))
        return
    while True:
        if not _poll(go, SPIN_SECONDS):
            while not go.acquire(timeout=1.0):
                if os.getppid() != parent_pid:  # the parent died without closing us (e.g. SIGKILL)
                    return
        if not conn.poll():
            try:
                _write_step(buffers, rows, env.step(buffers["actions"][rows]))
            except Exception as error:  # noqa: BLE001 - sent to the parent, which re-raises it
                conn.send(_error_reply(error))
            done.release()
            continue
        command, argument = conn.recv()
        try:
            result = None
            if command == "reset":
                buffers["obs"][rows] = env.reset(argument)
            elif command == "state_dict":
                result = env.state_dict()
            elif command == "load_state_dict":
                env.load_state_dict(argument)
            elif command == "close":
                env.close()
                conn.send(("ok", None))
                return
            conn.send(("ok", result))
        except Exception as error:  # noqa: BLE001 - sent to the parent, which re-raises it
            conn.send(_error_reply(error))


def _stop(processes: list[Any], connections: list[Any], gos: list[Any]) -> None:
    """Ask the workers to close, then make sure they are gone (also run at garbage collection)."""
    for conn, go in zip(connections, gos):
        try:
            conn.send(("close", None))
            go.release()
        except (BrokenPipeError, OSError):
            pass
    for process in processes:
        process.join(timeout=5)
        if process.is_alive():
            process.kill()
            process.join()
    for conn in connections:
        conn.close()


class SubprocVectorEnv(VectorEnv):
    """``num_envs`` envs of a CPU backend in ``workers`` slices stepped at the same time.

    Args:
        env_id: ``"gym:<id>"`` or ``"dmc:<domain>-<task>"``.
        num_envs: total envs; slice w is contiguous and sizes differ by at most one.
        workers: processes that step envs, this one included (so ``workers - 1`` are started);
            2 <= workers <= num_envs. More workers than free cores is slower: waiting processes
            poll for a moment before they sleep.
        device: where the returned tensors live (the envs always compute on the CPU).
        seed: seed of the first ``reset()`` called without one; env i gets ``seed + i``.
        render: make env 0 (in this process) renderable.
        **kwargs: the backend's own arguments (``render_size``, ``max_episode_steps``,
            ``env_kwargs``, ``action_chunk``).
    """

    def __init__(self, env_id: str, num_envs: int, workers: int, device: str | torch.device = "cpu",
                 seed: int | None = None, render: bool = False, imports: Sequence[str] = (), **kwargs: Any):
        from . import backend_prefix, make_backend  # the package imports this module

        if backend_prefix(env_id) == "custom":
            raise EnvError(f"{env_id}: env workers > 1 do not apply to a custom backend, which steps its envs "
                           "batched itself; use workers=1 and as many envs as the simulator takes")
        if backend_prefix(env_id) not in SPLITTABLE_BACKENDS:
            raise EnvError(f"{env_id}: env workers > 1 needs a CPU backend with per-env state "
                           f"({', '.join(p + ':' for p in SPLITTABLE_BACKENDS)}); use workers=1")
        if not 2 <= workers <= num_envs:
            raise EnvError(f"{env_id}: workers must be in [2, num_envs={num_envs}], got {workers}")
        cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
        if workers > cores:
            warnings.warn(f"{env_id}: {workers} env workers on {cores} core(s) is slower than fewer workers",
                          RuntimeWarning, stacklevel=2)
        self.num_envs = num_envs
        self.device = torch.device(device)
        self._seed = seed
        sizes = [len(part) for part in np.array_split(np.arange(num_envs), workers)]
        self._slices = [(sum(sizes[:w]), size) for w, size in enumerate(sizes)]
        self._local = make_backend(env_id, num_envs=sizes[0], device="cpu", seed=None, render=render,
                                   imports=imports, **kwargs)
        for name in METADATA:
            setattr(self, name, getattr(self._local, name))
        self.action_low, self.action_high = self.action_low.to(self.device), self.action_high.to(self.device)
        self._buffers = self._allocate()

        context = mp.get_context("spawn")  # fork would copy the parent's threads and compiled state
        self._processes: list[Any] = []
        self._connections: list[Any] = []
        self._go: list[Any] = []
        self._done: list[Any] = []
        self._finalizer = weakref.finalize(self, _stop, self._processes, self._connections, self._go)
        try:
            for first, count in self._slices[1:]:
                parent, child = context.Pipe()
                go, done = context.Semaphore(0), context.Semaphore(0)
                worker_kwargs = {**kwargs, "imports": self.imports}  # what the local slice needed, inferred ones too
                process = context.Process(
                    target=_worker, args=(child, go, done, env_id, first, count, worker_kwargs, self._buffers,
                                          os.getpid()),
                    daemon=True, name=f"genpol-env-{len(self._processes) + 1}")
                process.start()
                child.close()
                self._processes.append(process)
                self._connections.append(parent)
                self._go.append(go)
                self._done.append(done)
            for w in range(len(self._processes)):
                try:
                    self._receive(w)
                except WorkerDied:
                    raise
                except EnvError as error:
                    # this process built its own slice, so the worker lacks something this process has
                    raise EnvError(
                        f"env worker {w + 1} could not build {env_id}, which this process built: env workers "
                        f"start fresh (spawn) and import only {list(self.imports) or 'no modules of yours'}; name "
                        "the module that registers the env in the id (gym:<module>:<id>) or in imports (config: "
                        f"env.imports=[<module>]). The worker's error: {error}") from None
        except BaseException:
            self.close()
            raise

    def _allocate(self) -> dict[str, torch.Tensor]:
        """Shared-memory tensors that every slice writes its rows of step results into."""
        n = self.num_envs
        shapes = {"actions": ((n, self.act_dim), torch.float32), "obs": ((n, self.obs_dim), torch.float32),
                  "final_obs": ((n, self.obs_dim), torch.float32), "reward": ((n,), torch.float32),
                  "terminated": ((n,), torch.bool), "truncated": ((n,), torch.bool),
                  "env_steps": ((n,), torch.int64), "success": ((n,), torch.bool)}
        return {name: torch.zeros(shape, dtype=dtype).share_memory_() for name, (shape, dtype) in shapes.items()}

    def _dead(self, w: int) -> EnvError:
        self._processes[w].join(timeout=1)
        code = self._processes[w].exitcode
        said = f"env worker {w + 1} exited unexpectedly (exit code {code}"
        if code is not None and code < 0:
            return WorkerDied(f"{said}: killed by {signal.Signals(-code).name}, which workers do not ignore (they "
                              "ignore SIGINT and SIGTERM: the main process stops the run); the out-of-memory "
                              "killer or a kill aimed at the worker, say")
        main_file = getattr(sys.modules.get("__main__"), "__file__", None)
        if main_file is not None and not os.path.exists(main_file):  # python - < script.py: '<stdin>'
            return WorkerDied(f"{said}; its traceback is on stderr). Workers start with 'spawn', which re-imports "
                              f"the main script, and {main_file} is not a file: save the script to a file, run "
                              "it with python -c, or use env.workers=1")
        return WorkerDied(f"{said}; its traceback is on stderr). Workers start with 'spawn', which re-imports the "
                          "main script: a script must create envs under `if __name__ == '__main__':`")

    def _receive(self, w: int) -> Any:
        """Worker w's reply on its pipe; its exception re-raised here."""
        try:
            reply = self._connections[w].recv()
        except (EOFError, ConnectionResetError):
            raise self._dead(w) from None
        if reply[0] == "error":
            _, error, formatted = reply
            if isinstance(error, EnvError):
                raise error
            raise RuntimeError(f"env worker {w + 1} failed:\n{formatted}") from error  # error None: text alone
        return reply[1]

    def _command(self, command: str, arguments: list[Any]) -> list[Any]:
        """Send ``command`` with ``arguments[w + 1]`` to each worker; their replies, in order."""
        for conn, go, argument in zip(self._connections, self._go, arguments[1:]):
            conn.send((command, argument))
            go.release()
        return self._receive_all()

    def _receive_all(self) -> list[Any]:
        """Every worker's reply, in order; the first error raised once all are read. Raised at the first, it
        left the later workers' replies on their pipes, each then answering the next command (a reset's rows
        stale, a state_dict's a crash)."""
        replies, first_error = [], None
        for w in range(len(self._processes)):
            try:
                replies.append(self._receive(w))
            except Exception as error:  # noqa: BLE001 - re-raised below, after the other replies
                replies.append(None)
                first_error = first_error or error
        if first_error is not None:
            raise first_error
        return replies

    def _await_step(self, w: int) -> None:
        done = self._done[w]
        if not _poll(done, SPIN_SECONDS):
            while not done.acquire(timeout=1.0):
                if not self._processes[w].is_alive():
                    raise self._dead(w)
        if self._connections[w].poll():  # the step raised
            self._receive(w)

    def reset(self, seed: int | None = None) -> torch.Tensor:
        seed = self._seed if seed is None else seed
        self._seed = None
        seeds = [None if seed is None else seed + first for first, _ in self._slices]
        for conn, go, worker_seed in zip(self._connections, self._go, seeds[1:]):
            conn.send(("reset", worker_seed))
            go.release()
        try:
            self._buffers["obs"][: self._slices[0][1]] = self._local.reset(seeds[0])
        except Exception:
            try:  # the workers' replies read before this process's error goes up: else they answer the next command
                self._receive_all()
            except Exception:  # noqa: BLE001 - this process's error is the one to report
                pass
            raise
        self._receive_all()
        return self._buffers["obs"].to(self.device, copy=True)

    def step(self, actions: torch.Tensor) -> StepResult:
        self.check_actions(actions)
        buffers = self._buffers
        buffers["actions"].copy_(actions.detach())
        self.check_finite_actions(buffers["actions"].numpy())  # here, with the envs' global indices, not a worker's
        for go in self._go:
            go.release()
        local_rows = slice(0, self._slices[0][1])
        first_error: BaseException | None = None
        local_info: dict[str, Any] = {}
        try:
            local = self._local.step(buffers["actions"][local_rows])
            _write_step(buffers, local_rows, local)
            local_info = local[4]
        except BaseException as error:  # noqa: BLE001 - raised below, once every worker has answered
            first_error = error
        # every worker awaited, even after slice 0 or an earlier worker failed: a step left unawaited answered
        # the next one, whose rows of that worker then lagged one step behind for the rest of the run
        for w in range(len(self._processes)):
            try:
                self._await_step(w)
            except BaseException as error:  # noqa: BLE001 - the first error is the one raised
                first_error = first_error or error
        if first_error is not None:
            raise first_error
        info: dict[str, Any] = {"final_obs": buffers["final_obs"].to(self.device, copy=True)}
        if self.action_chunk > 1:
            info["env_steps"] = buffers["env_steps"].to(self.device, copy=True)
        if self.reports_success:
            info["success"] = buffers["success"].to(self.device, copy=True)
        if "final_frame" in local_info:  # env 0 (the rendered one) steps in this process, in slice 0
            info["final_frame"] = local_info["final_frame"]
        return (buffers["obs"].to(self.device, copy=True), buffers["reward"].to(self.device, copy=True),
                buffers["terminated"].to(self.device, copy=True), buffers["truncated"].to(self.device, copy=True),
                info)

    def render(self) -> np.ndarray | None:
        return self._local.render()

    def state_dict(self) -> dict[str, Any]:
        parts = [self._local.state_dict(), *self._command("state_dict", [None] * len(self._slices))]
        state = {**parts[0], "envs": [env for part in parts for env in part["envs"]]}
        for key in SEED_KEYS:
            if key in state:
                state[key] = self._seed
        return state

    def load_state_dict(self, state: dict[str, Any]) -> None:
        if len(state["envs"]) != self.num_envs:
            raise EnvError(f"{self.env_id}: saved state holds {len(state['envs'])} envs, this env has {self.num_envs}")
        self._seed = next((state[key] for key in SEED_KEYS if key in state), None)
        no_seed = {key: None for key in SEED_KEYS if key in state}
        parts = [{**state, "envs": state["envs"][first:first + count], **no_seed} for first, count in self._slices]
        self._local.load_state_dict(parts[0])
        self._command("load_state_dict", parts)

    def close(self) -> None:
        self._finalizer()
        if hasattr(self, "_local"):
            self._local.close()
