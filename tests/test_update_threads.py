"""``update_threads``: the on-policy update runs on its own torch thread count (the env workers' idle
cores), while acting keeps ``torch_threads``; the count is restored after every update, also one that fails."""

import pytest
import torch

from genpol.algorithms.onpolicy import OnPolicyAlgorithm
from genpol.api import train
from genpol.checkpoint import list_checkpoints, load_policy_files

TINY = ["env.num_envs=2", "learner.rollout_steps=32", "learner.epochs=1", "learner.minibatch_size=32",
        "pipeline.eval_episodes=1", "pipeline.video=false", "logger.progress_bar=false"]


def _record_threads(monkeypatch) -> dict[str, list[int]]:
    seen: dict[str, list[int]] = {"act": [], "update": []}
    act, update = OnPolicyAlgorithm.act, OnPolicyAlgorithm.update

    def recording_act(self, obs):
        seen["act"].append(torch.get_num_threads())
        return act(self, obs)

    def recording_update(self):
        seen["update"].append(torch.get_num_threads())
        return update(self)

    monkeypatch.setattr(OnPolicyAlgorithm, "act", recording_act)
    monkeypatch.setattr(OnPolicyAlgorithm, "update", recording_update)
    return seen


@pytest.mark.parametrize("update_threads,expected", [(0, 1), (2, 2)])
def test_updates_run_on_update_threads_and_acting_on_torch_threads(tmp_path, monkeypatch, update_threads, expected):
    seen = _record_threads(monkeypatch)
    torch.set_num_threads(3)  # the caller's count: the run uses its own, then gives the caller's back (it kept 1)
    try:
        train("pendulum", total_steps=256, run_dir=tmp_path / "run",
              overrides=[*TINY, "torch_threads=1", f"update_threads={update_threads}"])
        assert torch.get_num_threads() == 3
    finally:
        torch.set_num_threads(1)
    assert len(seen["update"]) == 4 and set(seen["update"]) == {expected}
    assert len(seen["act"]) >= 4 * 32 and set(seen["act"]) == {1}  # acting after every update is back on 1


def test_a_failing_update_restores_the_thread_count(tmp_path, monkeypatch):
    def failing_update(self):
        assert torch.get_num_threads() == 2
        raise RuntimeError("update failed")

    monkeypatch.setattr(OnPolicyAlgorithm, "update", failing_update)
    with pytest.raises(RuntimeError, match="update failed"):
        train("pendulum", total_steps=256, run_dir=tmp_path / "run",
              overrides=[*TINY, "torch_threads=1", "update_threads=2"])
    assert torch.get_num_threads() == 1


def test_two_update_threads_train_reproducibly(tmp_path):
    """Two threads split a GEMM the same way every time: a seed still fixes the run."""
    overrides = [*TINY, "update_threads=2", "policy.hidden_sizes=[256,256]", "policy.critic_hidden_sizes=[256,256]"]
    first = train("pendulum", total_steps=256, run_dir=tmp_path / "a", overrides=overrides)
    second = train("pendulum", total_steps=256, run_dir=tmp_path / "b", overrides=overrides)
    assert first["eval_return_mean"] == second["eval_return_mean"]
    weights = [load_policy_files(list_checkpoints(tmp_path / name / "checkpoints")[-1])[1] for name in ("a", "b")]
    for key, value in weights[0]["head"].items():
        assert torch.equal(value, weights[1]["head"][key]), key
