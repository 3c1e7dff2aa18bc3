"""One run over two processes: ``torchrun`` (``torch.distributed.run``) with gloo on the CPU.

* A 2-process update equals the 1-process update over the same data: each rank's loss is the mean
  over its half of the batch, so the averaged gradient is the full batch's (PPO with a norm clip and
  a KL-adaptive rate, TRPO's natural-gradient step, the observation normalizer's statistics).
* ``genpol.train``'s pipeline on 2 ranks ends with the same parameters and statistics on both.
* A run resumed under torchrun from its first checkpoint ends where the uninterrupted run ends,
  bit for bit.
"""

import os
import shutil
import subprocess
import sys

import pytest
import torch

from conftest import REPO
from dist_worker import updates
from genpol import distributed
from genpol.checkpoint import CheckpointError, load_latest
from genpol.config import ConfigError
from genpol.errors import SEED_LIMIT

TINY = ["env=pendulum", "env.num_envs=2", "learner.rollout_steps=32", "learner.epochs=2", "learner.minibatch_size=32",
        "pipeline.video=false", "pipeline.eval_episodes=1", "logger.progress_bar=false", "logger.tensorboard=false",
        "pipeline.checkpoint_every=1", "env.max_episode_steps=50"]


def torchrun(*args: str) -> None:
    """``torchrun --standalone --nproc_per_node=2 <args>`` from this venv, on a free local port, with
    this checkout's ``genpol`` first on the path (also for the worker script)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "PYTHONWARNINGS": "ignore"}
    command = [sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2", *args]
    result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    for _ in range(2):
        if result.returncode == 0 or "terminate called without an active exception" not in result.stderr:
            break
        # torch's gloo backend sometimes aborts a rank this way at teardown (std::terminate from a C++
        # thread, after the process group was destroyed): in CI once on 2026-11-30 and twice in a row on
        # 2026-12-01 (load 2+, the ranks next to pytest), in none of 20 launches on a quieter machine.
        # Up to two more runs; any other failure, a third abort, or a wrong result still fails.
        result = subprocess.run(command, cwd=REPO, env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, f"torchrun {args} failed:\n{result.stdout[-2000:]}\n{result.stderr[-4000:]}"


def load(path):
    return torch.load(path, weights_only=True)


def test_two_process_update_equals_the_full_batch_update(tmp_path):
    torchrun(str(REPO / "tests" / "dist_worker.py"), "update", str(tmp_path))
    ranks = [load(tmp_path / f"update_rank{r}.pt") for r in (0, 1)]
    reference = updates(0, 1)
    for key, expected in reference.items():
        if isinstance(expected, torch.Tensor):  # parameters after PPO and after TRPO
            assert torch.equal(ranks[0][key], ranks[1][key]), key
            torch.testing.assert_close(ranks[0][key], expected, rtol=1e-5, atol=1e-6, msg=key)
    # the averaged diagnostics are the full batch's: the KL that adapts the rate, the clip fraction
    for step, expected in zip(ranks[0]["ppo_steps"], reference["ppo_steps"]):
        assert step.keys() == expected.keys()
        for key in expected:
            assert step[key] == pytest.approx(expected[key], rel=1e-5, abs=1e-7), key
    assert reference["ppo_steps"][1]["kl"] > 2e-4  # the adaptive rate did change between steps
    # the 4th step: one half's approx-KL passes 1.5 x target_kl, the mean does not; both ranks step
    threshold = 1.5 * reference["target_kl"]
    assert max(reference["half_kls"]) > threshold > sum(reference["half_kls"]) / 2
    assert reference["stepped"] and ranks[0]["stepped"] and ranks[1]["stepped"]
    for key in ("kl", "policy", "step_size", "gradient_norm", "approx_kl"):
        assert ranks[0]["trpo"][key] == pytest.approx(reference["trpo"][key], rel=1e-5), key
    assert reference["trpo"]["line_search_success"] == ranks[0]["trpo"]["line_search_success"] == 1.0
    for key in ("mean", "var"):
        torch.testing.assert_close(ranks[0]["normalizer"][key], reference["normalizer"][key], rtol=1e-12, atol=1e-12)
    assert ranks[0]["normalizer"]["count"] == pytest.approx(reference["normalizer"]["count"])


@pytest.fixture(scope="module")
def two_rank_run(tmp_path_factory):
    """The training pipeline on 2 ranks for 2 iterations (256 env steps over both), a checkpoint
    after each."""
    out = tmp_path_factory.mktemp("dist_train")
    torchrun(str(REPO / "tests" / "dist_worker.py"), "train", str(out), *TINY, "total_steps=256")
    return out


def test_both_ranks_end_with_identical_parameters_and_statistics(two_rank_run):
    ranks = [load(two_rank_run / f"train_rank{r}.pt") for r in (0, 1)]
    assert ranks[0]["seed"] == 0 and ranks[1]["seed"] == distributed.rank_seed(0, 1) != 0
    # every rank's seed passes the seed check (a 32-bit hash failed it once seeds were bounded)
    assert all(distributed.rank_seed(seed, r) < SEED_LIMIT for seed in range(50) for r in range(1, 9))
    assert ranks[0]["global_step"] == ranks[1]["global_step"] == 256  # both ranks' env steps
    for part in ("head", "critic", "obs_stats"):
        for key, value in ranks[0][part].items():
            if isinstance(value, torch.Tensor):
                assert torch.equal(value, ranks[1][part][key]), f"{part}.{key}"
    # each rank's 2 envs ended an episode at step 50: all 4 are in both ranks' statistics
    assert len(ranks[0]["recent_returns"]) == 4 and ranks[0]["recent_returns"] == ranks[1]["recent_returns"]
    assert len(set(ranks[0]["recent_returns"])) == 4
    # 2 ranks x 2 envs x (1 reset + 64 steps) observations went into the shared statistics
    assert ranks[0]["obs_stats"]["count"] == pytest.approx(2 * 2 * 65, abs=1e-3)
    assert not torch.equal(ranks[0]["head"]["log_std"], torch.zeros_like(ranks[0]["head"]["log_std"]))
    # rank 0 alone wrote the run; its checkpoint keeps both ranks' own envs and random streams
    run_dir = two_rank_run / "run"
    assert (run_dir / "summary.json").exists() and (run_dir / "config.yaml").exists()
    state = load_latest(run_dir / "checkpoints")[2]
    assert state["distributed"]["world_size"] == 2
    first, second = state["distributed"]["ranks"]
    assert not torch.equal(first["obs"], second["obs"])  # each rank has its own envs


def test_resume_under_torchrun_matches_the_uninterrupted_run(two_rank_run, tmp_path):
    # the run as a crash after its first checkpoint leaves it, resumed by the command line
    run_dir = tmp_path / "resumed"
    shutil.copytree(two_rank_run / "run", run_dir)
    shutil.rmtree(run_dir / "checkpoints" / "step_000000000256")
    assert [p.name for p in sorted((run_dir / "checkpoints").iterdir())] == ["step_000000000128"]
    torchrun("-m", "genpol.train", *TINY, "total_steps=256", f"run_dir={run_dir}")
    _, weights, state = load_latest(run_dir / "checkpoints")
    _, expected_weights, expected_state = load_latest(two_rank_run / "run" / "checkpoints")
    assert int(state["global_step"]) == 256
    for key, value in expected_weights["head"].items():
        assert torch.equal(weights["head"][key], value), key
    for key, value in expected_state["algorithm"]["critic"].items():
        assert torch.equal(state["algorithm"]["critic"][key], value), key
    for rank_state, expected in zip(state["distributed"]["ranks"], expected_state["distributed"]["ranks"]):
        assert torch.equal(rank_state["obs"], expected["obs"])
        assert torch.equal(rank_state["torch_rng"], expected["torch_rng"])


def test_a_resume_that_starts_new_episodes_keeps_the_ranks_statistics_equal(tmp_path):
    """An env whose state a checkpoint cannot hold (tests/custom_envs/reach.py's MyReachPrivate) starts new
    episodes on a resume, and each rank folds their first observations into its normalizer. Folded before the
    statistics were synchronized, the ranks' means differed in the 3rd digit from then on."""
    private = ["env=gym", "env.id=custom_envs.reach:MyReachPrivate-v0", "env.normalize_obs=true",
               *(item for item in TINY if not item.startswith("env=")), "policy.hidden_sizes=[16,16]",
               "policy.critic_hidden_sizes=[16,16]", f"run_dir={tmp_path / 'run'}"]
    worker = str(REPO / "tests" / "dist_worker.py")
    torchrun(worker, "train", str(tmp_path), *private, "total_steps=128")
    torchrun(worker, "train", str(tmp_path), *private, "total_steps=256")  # resumes from step 128
    ranks = [load(tmp_path / f"train_rank{r}.pt") for r in (0, 1)]
    assert ranks[0]["global_step"] == ranks[1]["global_step"] == 256
    for key in ("mean", "var", "count"):
        assert torch.equal(torch.as_tensor(ranks[0]["obs_stats"][key]), torch.as_tensor(ranks[1]["obs_stats"][key]))
    # 2 ranks x 2 envs x (1 reset + 64 steps), and the resume's new episodes: 2 x 2 first observations
    assert ranks[0]["obs_stats"]["count"] == pytest.approx(2 * 2 * 65 + 2 * 2, abs=1e-3)


def test_with_one_process_every_collective_returns_its_input():
    """The module's promise, which a learner of the user's may rely on: without a process group each collective
    is the identity (four of them called torch.distributed and raised "Default process group has not been
    initialized")."""
    from genpol import collectives
    from genpol.updaters.losses import normalize_advantages

    assert not torch.distributed.is_initialized() and collectives.world_size() == 1
    layer = torch.nn.Linear(3, 2)
    layer(torch.randn(4, 3)).sum().backward()
    grads = [p.grad.clone() for p in layer.parameters()]
    stats = collectives.average_gradients(list(layer.parameters()), {"loss": torch.tensor(1.5, requires_grad=True)})
    assert all(torch.equal(p.grad, g) for p, g in zip(layer.parameters(), grads))
    assert float(stats["loss"]) == 1.5 and not stats["loss"].requires_grad
    assert collectives.all_episodes([1.0, 2.0], [10, 20]) == ([1.0, 2.0], [10, 20])
    weights = [p.detach().clone() for p in layer.parameters()]
    collectives.broadcast_modules({"layer": layer})
    assert all(torch.equal(p, w) for p, w in zip(layer.parameters(), weights))
    advantages = torch.tensor([1.0, 2.0, 3.0, 6.0], dtype=torch.float64)
    for std in ("unbiased", "population"):
        torch.testing.assert_close(collectives.normalize_advantages(advantages, std),
                                   normalize_advantages(advantages, std), rtol=1e-14, atol=0)
    one = torch.tensor([2.5], dtype=torch.float64)
    assert torch.equal(collectives.normalize_advantages(one), normalize_advantages(one))


def test_a_checkpoint_of_two_ranks_refuses_another_number_of_processes():
    state = {"distributed": {"world_size": 2, "ranks": [{}, {}]}}
    with pytest.raises(CheckpointError, match="written by 2 process.*this run has 1.*nproc_per_node=2"):
        distributed.load_rank_state(object(), state)


def test_what_is_not_distributed_yet_fails_at_the_start():
    from hydra import compose, initialize_config_dir

    from genpol.configure import register_configs, validate

    register_configs()
    with initialize_config_dir(str(REPO / "configs"), version_base="1.3"):
        sac = validate(compose("config", overrides=["env=pendulum", "learner=sac", "policy=tanh_gaussian"]))
        compiled = validate(compose("config", overrides=["env=pendulum", "learner.compile=true"]))
    with pytest.raises(ConfigError, match="learner=sac under torchrun: distributed training covers ppo, spo, aspo, trpo for now"):
        distributed.check_supported(sac)
    with pytest.raises(ConfigError, match="learner.compile=true under torchrun"):
        distributed.check_supported(compiled)


def test_a_busy_run_dir_stops_every_rank_before_it_touches_the_run(tmp_path):
    """Rank 0 alone takes the run directory's lock; refused, it stopped, but rank 1 went on and cleared the live
    run's checkpoint in the making (``.tmp-*``) from its checkpoints folder. Every rank now stops with the lock's
    error, and the live run's files stay."""
    from genpol.runners.guards import hold_run_dir

    run_dir = tmp_path / "run"
    (run_dir / "checkpoints" / ".tmp-step_000000000999-4242").mkdir(parents=True)  # the live run's save
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), os.environ.get("PYTHONPATH", "")]),
           "PYTHONWARNINGS": "ignore"}
    with hold_run_dir(run_dir):  # the live run
        result = subprocess.run([sys.executable, "-m", "torch.distributed.run", "--standalone", "--nproc_per_node=2",
                                 "-m", "genpol.train", *TINY, "total_steps=256", f"run_dir={run_dir}"], cwd=REPO,
                                env=env, capture_output=True, text=True, timeout=120)
    assert result.returncode != 0 and result.stderr.count("genpol: RunDirBusyError:") == 2, result.stderr[-3000:]
    assert (run_dir / "checkpoints" / ".tmp-step_000000000999-4242").is_dir()
