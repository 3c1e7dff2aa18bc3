"""Every updater clearly learns MultiGoal with a Gaussian head: far above what a random policy reaches."""

import numpy as np
import pytest
import torch

from genpol import envs
from genpol.policy import run_episodes

THRESHOLD = 10.0  # reaching a goal pays 10 on top of ~4.5 of progress; see envs/multigoal.py


def test_random_policy_stays_far_below_the_threshold():
    """Measured: mean 2.98 over 1000 episodes (a random walk reaches a goal 15% of the time)."""
    env = envs.make("genpol:MultiGoal", num_envs=1000)
    generator = torch.Generator().manual_seed(0)
    returns, _ = run_episodes(env, lambda obs: torch.rand(obs.shape[0], 2, generator=generator) * 2 - 1, seed=0)
    assert returns.mean() < 4.0, returns.mean()


def test_lobe_fraction_by_hand():
    """Directions 0, 90, 174.3, 45 and -73.3 degrees: four within 25 degrees of an axis; a uniform
    spread of directions scores 8 x 25 / 360."""
    from genpol.multigoal_analysis import lobe_fraction

    actions = torch.tensor([[1.0, 0.0], [0.0, 1.0], [-1.0, 0.1], [1.0, 1.0], [0.3, -1.0]])
    assert lobe_fraction(actions) == pytest.approx(0.8)
    assert lobe_fraction(torch.randn(200_000, 2, generator=torch.Generator().manual_seed(0))) == pytest.approx(
        8 * 25 / 360, abs=0.005)


# The CI budgets are the fast halves of bench/learning_checks.py's checks (the same runs at the budgets
# these tests had until 2026-12-02, over 3 seeds); each fast threshold holds on seeds 0-2 at its budget
# (measured 2026-12-02, values in the docstrings), seed 0 runs here.


@pytest.mark.parametrize("updater,extra", [
    ("ppo", ["learner.minibatch_size=256"]),
    ("ppo", ["learner.minibatch_size=256", "learner.lr_schedule=adaptive"]),
    ("spo", ["learner.minibatch_size=256"]),
    ("aspo", ["learner.minibatch_size=256"]),
    ("trpo", []),
], ids=["ppo", "ppo-adaptive-lr", "spo", "aspo", "trpo"])
def test_every_updater_learns_multigoal_with_a_gaussian(tmp_path, updater, extra):
    """20 480 env steps. Seeds 0-2 of the five rows: deterministic evaluation 14.37-14.77, the training
    episodes 10.35-14.22 (ASPO seed 0 the lowest). At 40 960 steps both pass 10:
    ``bench/learning_checks.py``, checks ``updaters_multigoal-<learner>``."""
    from genpol.api import train

    summary = train(env="multigoal", learner=updater, total_steps=20_480, run_dir=tmp_path / "run", seed=0,
                    overrides=["learner.rollout_steps=128", "pipeline.video=false", "logger.progress_bar=false",
                               "pipeline.eval_episodes=50", *extra])
    assert summary["eval_return_mean"] > THRESHOLD, summary
    assert summary["episodic_return_mean"] > 8.0, summary
    assert np.isfinite(summary["sps"])


@pytest.mark.parametrize("policy,extra,steps", [
    ("fpo", ["learner.minibatch_size=256"], 20_480),
    ("fpo", ["learner.minibatch_size=256", "policy.ratio_mode=per_sample", "learner=aspo"], 30_720),
], ids=["fpo", "fpo++-aspo"])  # PolicyFlow: test_flow_heads_reach_at_least_three_goals, which also asks for the return
def test_flow_heads_learn_multigoal(tmp_path, policy, extra, steps):
    """Deterministic evaluation above 10 on seeds 0-2: FPO at 20 480 steps 14.35-14.72, FPO++ at 30 720
    14.42-14.63 (at 20 480 FPO++ seed 1 scored 3.66). The 40 960-step runs: ``bench/learning_checks.py``."""
    from genpol.api import train

    summary = train(env="multigoal", policy=policy, total_steps=steps, run_dir=tmp_path / "run", seed=0,
                    overrides=["learner.rollout_steps=128", "pipeline.video=false", "logger.progress_bar=false",
                               "pipeline.eval_episodes=50", *extra])
    assert summary["eval_return_mean"] > THRESHOLD, summary


@pytest.mark.parametrize("policy,extra,min_return", [
    ("policyflow", ["+experiment=policyflow", "policy.brownian_coef=0.05"], THRESHOLD),
    # FPO++ with the regularizer at 0.1 (>= 3 goals, return > 6) left CI for time: bench/learning_checks.py
], ids=["policyflow"])
def test_flow_heads_reach_at_least_three_goals(tmp_path, policy, extra, min_return):
    """The multimodality claim at CI budget: 100 stochastic episodes of a trained flow head end at
    >= 3 distinct goals (each in >= 2 % of the episodes), with the Brownian regularizer keeping the
    modes. 30 720 steps: seeds 0-2 reached 3, 4 and 3 goals, mean return 12.6-13.6 (the 61 440-step run:
    ``bench/learning_checks.py --checks policyflow_goals``). Without the regularizer FPO and FPO++ end at
    1-2 goals on seeds 0-3, PolicyFlow (0.01) at 3 on seed 0 and 2 on seeds 1-3, a Gaussian at 1-2
    (bench/results/multigoal.json)."""
    from genpol.api import load_policy, train
    from genpol.multigoal_analysis import goal_coverage

    train(env="multigoal", policy=policy, total_steps=30_720, run_dir=tmp_path / "run", seed=0,
          overrides=["learner.rollout_steps=128", "pipeline.video=false", "logger.progress_bar=false",
                     "pipeline.eval_episodes=10", *extra])
    coverage = goal_coverage(load_policy(tmp_path / "run"), episodes=100, seed=0)
    assert coverage.goals_covered(0.02) >= 3, coverage.goal_counts
    assert coverage.mean_return > min_return, coverage.mean_return
