"""Runs saved by genpol before the layer change (commit f295800: heads/edit.py, heads/softmax_q.py,
SAC as the base of the off-policy learners) resume and evaluate with today's code.

``tests/data/saved_before_layers/<learner>/`` holds each run as that code left it after the
checkpoint at step 512 of 768 (``overrides.yaml``: its command line), and the policy weights of the
same run's uninterrupted final checkpoint. Resumed here, each run must end with those weights: the
refactor moved code, not numbers. They match bit for bit only on a CPU whose kernels round as the saving
machine's (an Intel one); on an AMD EPYC the same code ended up to 1.2e-7 away (GEMMs take other vector
paths), so the check is relative to how far the weights moved after the checkpoint: a resume that lost
the optimizer state or the random stream ends a sizeable fraction of that distance away.
Consistency-AC's and EXPO's checkpoints name their acting heads by the old families (``softmax_q``,
``expo``), which the heads registry still resolves.
"""

from __future__ import annotations

import os
import shutil

import pytest
import torch
import yaml

from genpol.checkpoint import list_checkpoints, load_policy_files
from genpol.configure import validate
from genpol.errors import ConfigError

from conftest import REPO, final_checkpoint
from warm_start import warm_run

SAVED = REPO / "tests" / "data" / "saved_before_layers"


@pytest.mark.parametrize("learner", ["ppo", "sac", "consistency_ac", "expo"])
def test_a_run_saved_before_the_change_resumes_to_the_same_weights_and_evaluates(tmp_path, learner):
    run_dir = tmp_path / learner
    shutil.copytree(SAVED / learner, run_dir)
    overrides = [*yaml.safe_load((run_dir / "overrides.yaml").read_text()), f"run_dir={run_dir}"]
    if learner == "expo":
        # EXPO's TD target and edits follow the authors' code since (independent subsets, no clip):
        # the old run resumes with the old settings, and without them the resume is refused naming them
        from genpol.api import compose_config
        from genpol.runners.scaffold import check_resume_config

        with pytest.raises(ConfigError, match=r"learner.clip_edits: True \(saved before the field existed\) -> "
                                              r"False, learner.critic_layer_norm_eps: 1e-05 \(saved before the field existed\) -> "
                                              r"1e-06, learner.td_subsets: 'shared' .* -> 'independent'"):
            with pytest.warns(FutureWarning):
                check_resume_config(run_dir, validate(compose_config(overrides)))
        # and eager: +experiment=expo compiles its critic step since, which changes rounding only (and costs time)
        overrides += ["learner.td_subsets=shared", "learner.clip_edits=true", "learner.critic_layer_norm_eps=1e-5",
                      "learner.compile=false"]
    # the old command line says updater=..., the saved config.yaml holds an "updater" section: both
    # are read under today's name, learner, and the old name warns naming the new one
    assert any(item.startswith("updater") for item in overrides)
    if learner == "sac":  # through the command line (a process of its own)
        result = warm_run("genpol.train", overrides, REPO, dict(os.environ), timeout=300)  # tests/warm_start.py
        assert result.returncode == 0, result.stderr[-3000:]
        assert "'updater' is now 'learner'" in result.stderr
    else:  # in this process, through the API (no interpreter start-up)
        from genpol.api import compose_config
        from genpol.train import run_training

        with pytest.warns(FutureWarning, match="'updater' is now 'learner'"):
            cfg = validate(compose_config(overrides))
        run_training(cfg, run_dir)
    name, spec, weights, _ = final_checkpoint(run_dir)
    assert name == "step_000000000768"
    expected = torch.load(SAVED / learner / "final_policy_weights.pt", weights_only=True)
    checkpoint = load_policy_files(list_checkpoints(SAVED / learner / "checkpoints")[-1])[1]
    assert_resumed_to(without_state_added_since(weights, expected), expected, checkpoint, learner)
    from genpol.api import evaluate

    assert evaluate(run_dir, episodes=1)["episodes"] == 1


# entries a head's extra state gained after these runs were saved, with the value their learners imply
ADDED_EXTRA_STATE = {"stochastic_act": "reference"}  # 2026-12-07: off-policy learners keep the reference sampler


def without_state_added_since(weights, expected):
    """``weights`` less the ``ADDED_EXTRA_STATE`` entries that ``expected`` (saved before them) lacks, each
    checked to hold the value the saved run's learner implies."""
    if not isinstance(weights, dict) or not isinstance(expected, dict):
        return weights
    kept = type(weights)()  # a state_dict stays an OrderedDict: the comparison checks the types too
    for key, value in weights.items():
        saved = expected.get(key)
        if key.endswith("_extra_state") and isinstance(value, dict) and isinstance(saved, dict):
            for added, implied in ADDED_EXTRA_STATE.items():
                if added in value and added not in saved:
                    assert value[added] == implied, (key, added, value[added])
                    value = {name: item for name, item in value.items() if name != added}
        kept[key] = without_state_added_since(value, saved)
    return kept


def _float_leaves(a, b, where: str, exact: bool = True) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Walk two nested dicts of weights together: the same keys and types everywhere and, with ``exact``,
    every non-floating leaf (counts, integer buffers, numbers) equal, as ``assert_trees_equal`` checks;
    returns the floating-point tensor pairs, in key order, for the tolerance check."""
    assert type(a) is type(b), where
    if isinstance(a, dict):
        assert sorted(a) == sorted(b), where
        return [pair for key in sorted(a) for pair in _float_leaves(a[key], b[key], f"{where}.{key}", exact)]
    if torch.is_tensor(a) and a.is_floating_point():
        assert a.dtype == b.dtype and a.shape == b.shape, where
        return [(a, b)]
    assert not exact or (torch.equal(a, b) if torch.is_tensor(a) else a == b), where
    return []


def assert_resumed_to(weights, expected, checkpoint, learner, tolerance=1e-4):
    """``weights`` (the resumed run's end) equal ``expected`` (the uninterrupted run's end) in structure and
    in every non-floating leaf, and, in the floating ones, within ``tolerance`` of the distance ``expected``
    lies from ``checkpoint`` (where the resume began). Measured on an AMD EPYC: 7e-10 (PPO) to 6e-7 (SAC)
    of it."""
    pairs = _float_leaves(weights, expected, f"{learner} policy")
    starts = _float_leaves(expected, checkpoint, f"{learner} checkpoint", exact=False)  # counts moved on
    resumed = torch.cat([ours.detach().flatten().double() for ours, _ in pairs])
    final = torch.cat([theirs.detach().flatten().double() for _, theirs in pairs])
    start = torch.cat([theirs.detach().flatten().double() for _, theirs in starts])
    travelled = (final - start).norm()
    assert travelled > 0, f"{learner}: the saved run did not move after its checkpoint"
    off = (resumed - final).norm()
    assert off <= tolerance * travelled, (f"{learner}: {off:.3g} from the saved end, {off / travelled:.3g} of the "
                                          f"{travelled:.3g} it moved")
