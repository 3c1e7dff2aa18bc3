"""The crash harness's CI part (``bench/crash.py``): two SIGKILLs at random moments of a PPO and a SAC
run, each resumed until it finishes, end bit for bit where the uninterrupted run ends. The seed is in
every failure message: ``python bench/crash.py --configs <name> --trials 2 --seed <seed>`` replays it.
The benchmark runs 20 and more per configuration."""

from __future__ import annotations

import importlib.util
import os
import sys

import pytest

from conftest import REPO
from warm_start import WarmProcess

SEED = int(os.environ.get("GENPOL_CRASH_SEED", "0"))


def load_harness():
    if str(REPO / "bench") not in sys.path:  # the harness imports bench/common as a script would
        sys.path.insert(0, str(REPO / "bench"))
    spec = importlib.util.spec_from_file_location("bench_crash", REPO / "bench" / "crash.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["ppo", "sac"])
def test_two_random_kills_resume_bit_identically(tmp_path, name):
    harness = load_harness()
    # every run forked from the warm server (tests/warm_start.py): the same processes, signals and files,
    # without ~3 s of imports each; the benchmark's own runs start cold
    result = harness.crash_test(name, trials=2, seed=SEED, workdir=tmp_path,
                                start=lambda module, arguments, env: WarmProcess(module, arguments, REPO, env))
    replay = f"replay: python bench/crash.py --configs {name} --trials 2 --seed {SEED}"
    assert result["identical"] == 2, f"{result['mismatches']} ({replay})"


def test_the_comparison_names_the_first_differing_tensor():
    import torch

    harness = load_harness()
    a = {"policy": {"head": {"w": torch.zeros(2)}}, "training_state": {"step": 3, "rng": torch.ones(1)}}
    b = {"policy": {"head": {"w": torch.zeros(2)}}, "training_state": {"step": 3, "rng": torch.ones(1)}}
    assert harness.first_difference(a, b) is None
    b["training_state"]["rng"] = torch.tensor([1.0 + 1e-7])
    assert harness.first_difference(a, b) == "/training_state/rng"
    b["policy"]["head"]["w"] = torch.zeros(2, dtype=torch.float64)
    assert harness.first_difference(a, b) == "/policy/head/w"
