"""The package's layers point one way, and every module imports on its own.

The order (DESIGN.md "Layers"), lowest first. A module may import its own layer and those below it:

    0  errors, files, allocator, envs (genpol.envs imports nothing of genpol but itself), configs
    1  networks and kernels, torch-only collectives, the config schema
    2  heads
    3  storage, losses (genpol.updaters), dataset formats, checkpoint files
    4  the trained policy (load a checkpoint, act, evaluate episodes)
    5  algorithms (and their learner table), building envs and heads, callbacks
    6  validation against the learner table, launch and per-rank state of torchrun runs
    7  loops (genpol.runners)
    8  pipelines (genpol.pipelines: online, offline-to-online, GoRL's stages)
    9  entry points: the CLI modules, the API, reports, dataset generation

An import inside a function is the same dependency as one at the top, only later, so both count;
so do imports under ``if TYPE_CHECKING:`` (a lower layer that needs a higher one's type describes
it with a Protocol instead). A new module must be placed in ``LAYERS``: the test fails on one it
does not know.
"""

from __future__ import annotations

import ast
import importlib.util
import subprocess
import sys
import textwrap
from pathlib import Path

from conftest import REPO, needs

LAYERS: dict[str, int] = {
    "genpol": 0, "genpol.errors": 0, "genpol.fields": 0, "genpol.files": 0, "genpol.allocator": 0, "genpol.envs": 0,
    "genpol.configs": 0,
    "genpol.onednn": 1, "genpol.mish": 1, "genpol.nets": 1, "genpol.qensemble": 1, "genpol.collectives": 1,
    "genpol.memory": 1,
    "genpol.heads": 2,
    "genpol.config": 3, "genpol.storage": 3, "genpol.updaters": 3, "genpol.data": 3, "genpol.checkpoint": 3,
    "genpol.policy": 4,
    "genpol.algorithms": 5, "genpol.build": 5, "genpol.callbacks": 5,
    "genpol.configure": 6, "genpol.distributed": 6, "genpol.unread": 6,
    "genpol.runners": 7,
    "genpol.pipelines": 8,
    "genpol.train": 9, "genpol.evaluate": 9, "genpol.api": 9, "genpol.report": 9, "genpol.report_folder": 9,
    "genpol.report_stats": 9, "genpol.multigoal_analysis": 9, "genpol.sweep_check": 9,
    "genpol.data.collect": 9, "genpol.data.maze_dataset": 9, "genpol.data.maze_planner": 9,
}


def package_modules() -> dict[str, Path]:
    """Every module of genpol (genpol.envs and genpol.configs included, wherever the install maps
    them) by dotted name."""
    modules = {}
    for package in ("genpol", "genpol.envs", "genpol.configs"):
        root = Path(importlib.util.find_spec(package).submodule_search_locations[0])
        for path in root.rglob("*.py"):
            parts = path.relative_to(root).with_suffix("").parts
            if parts[-1] == "__init__":
                parts = parts[:-1]
            name = ".".join((package, *parts))
            if package == "genpol" and name.split(".")[:2] in (["genpol", "envs"], ["genpol", "configs"]):
                continue
            modules[name] = path
    return modules


def layer_of(module: str) -> int | None:
    """The layer of the longest ``LAYERS`` key that is ``module`` or a package above it."""
    parts = module.split(".")
    for end in range(len(parts), 0, -1):
        if ".".join(parts[:end]) in LAYERS:
            return LAYERS[".".join(parts[:end])]
    return None


def imported_modules(module: str, path: Path, known: set[str]) -> list[tuple[int, str]]:
    """``(line, module)`` for every genpol module ``module``'s source imports, at any depth."""
    is_package = path.name == "__init__.py"
    found = []
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            if node.level:
                base = module.split(".")[: len(module.split(".")) - node.level + (1 if is_package else 0)]
                stem = ".".join(base + ([node.module] if node.module else []))
            else:
                stem = node.module or ""
            # "from genpol import envs" imports the module genpol.envs; "from x import name" the module x
            targets = [f"{stem}.{alias.name}" if f"{stem}.{alias.name}" in known else stem for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition(".")[0]
            if target and target != module:
                found.append((node.lineno, target))
    return found


def test_every_import_points_down_the_layers():
    modules = package_modules()
    unplaced = sorted(name for name in modules if layer_of(name) is None)
    assert not unplaced, f"place these modules in LAYERS: {unplaced}"
    upward = []
    for name, path in sorted(modules.items()):
        for line, target in imported_modules(name, path, set(modules)):
            if name.startswith("genpol.envs") and not target.startswith("genpol.envs"):
                upward.append(f"{path}:{line}: {name} imports {target} (genpol.envs imports only itself)")
            elif layer_of(target) > layer_of(name):
                upward.append(f"{path}:{line}: {name} (layer {layer_of(name)}) imports {target} "
                              f"(layer {layer_of(target)})")
    assert not upward, "imports that point up:\n" + "\n".join(upward)


def test_the_layer_check_sees_function_level_and_relative_imports(tmp_path):
    """The checker itself: an upward import inside a function, and a relative one, are found."""
    source = tmp_path / "nets.py"
    source.write_text(textwrap.dedent("""
        from . import errors
        def f():
            from genpol.runners import base
    """))
    known = {"genpol", "genpol.errors", "genpol.nets", "genpol.runners", "genpol.runners.base"}
    assert imported_modules("genpol.nets", source, known) == [(2, "genpol.errors"), (4, "genpol.runners.base")]


# Fresh interpreters, one per module, would take minutes (torch alone imports in about a second).
# The child below starts from a process that has imported the heavy third-party packages and no
# genpol module at all, and forks once per module: each fork imports one genpol module first, as a
# fresh interpreter would, so an import cycle cannot hide behind another module imported earlier.
IMPORT_EACH = textwrap.dedent("""
    import importlib, os, sys, traceback
    import numpy, torch, omegaconf, hydra  # third-party only: preloaded for speed
    assert not any(name == "genpol" or name.startswith("genpol.") for name in sys.modules)
    failures = []
    for module in sys.argv[1:]:
        read, write = os.pipe()
        pid = os.fork()
        if pid == 0:
            os.close(read)
            try:
                importlib.import_module(module)
                code = 0
            except BaseException:
                os.write(write, traceback.format_exc()[-1500:].encode())
                code = 1
            os._exit(code)
        os.close(write)
        with os.fdopen(read) as pipe:
            message = pipe.read()
        _, status = os.waitpid(pid, 0)
        if status != 0:
            failures.append(f"{module}: {message or status}")
    print("\\n".join(failures))
    sys.exit(1 if failures else 0)
""")


def test_every_module_imports_on_its_own():
    modules = sorted(package_modules())
    result = subprocess.run([sys.executable, "-c", IMPORT_EACH, *modules], capture_output=True, text=True,
                            timeout=600)
    assert result.returncode == 0, f"modules that fail to import alone:\n{result.stdout}\n{result.stderr[-3000:]}"


@needs("ruff", "the test extra's ruff is not installed")
def test_no_undefined_names_unused_imports_or_unused_variables():
    """pyflakes' rules (ruff's F) over the package, the envs, the tests and bench/: an undefined name is a
    crash waiting in a branch no test takes; an unused import often a layer edge nobody meant to keep."""
    result = subprocess.run([sys.executable, "-m", "ruff", "check", "--select", "F", "--no-cache",
                             "--output-format", "concise", "genpol", "envs", "tests", "bench"],
                            cwd=REPO, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stdout[-3000:] + result.stderr[-1000:]
