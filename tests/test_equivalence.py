"""The Algorithm-layer move changed no numbers: fixed-seed tiny runs end with the weights stored
before it (``tests/equivalence.py`` made ``tests/data/equivalence.pt`` at commit 9aa9572). One entry was
written again since, by a deliberate change: ``dppo_offline_to_online``, whose chunks an episode's end cuts
short, ran a third rollout and update past its budget until 2026-12-07; its entry now holds the two updates
its budget buys, bit-identical to the code before that change stopped after two rollouts (total_steps=480).

The tolerance is loose enough for another CPU's floating-point kernels (two updates, float32) and
tight enough to catch any change of the math: a wrong order of minibatches, a missed update or a
different seed moves weights by 1e-3 or more. On the machine that wrote the reference the match was
also checked to be bit-exact, by hand.
"""

import pytest
import torch

from conftest import REPO
from equivalence import RUNS, final_weights

REFERENCE = torch.load(REPO / "tests" / "data" / "equivalence.pt", weights_only=True)


@pytest.mark.parametrize("name", sorted(RUNS))
def test_runs_end_with_the_weights_from_before_the_move(tmp_path, name):
    weights = final_weights(name, tmp_path)
    reference = REFERENCE[name]
    assert sorted(weights) == sorted(reference)
    for key, expected in reference.items():
        torch.testing.assert_close(weights[key], expected, rtol=1e-4, atol=1e-5, msg=f"{name}: {key}")
