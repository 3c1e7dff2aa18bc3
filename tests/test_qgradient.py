"""The Q-gradient learner (Consistency-AC): its TD target, actor loss, EMA actor, exploration
schedule and checkpoint state against independent computations, and a short MultiGoal run."""

import io
import json

import numpy as np
import pytest
import torch

from genpol.algorithms.qgradient import QGradientActor
from genpol.config.offpolicy import QGradientConfig
from genpol.heads import ConsistencyHead
from tests.conftest import assert_trees_equal

OBS_DIM, ACT_DIM, N = 3, 2, 4


def make(seed=0, **overrides):
    torch.manual_seed(seed)
    cfg = QGradientConfig(batch_size=8, learning_starts=0, critic_hidden_sizes=[16], eta=0.5, bc_coef=2.0,
                          actor_ema_start=2, actor_ema_every=1, actor_ema_decay=0.9, act_candidates=5,
                          explore_fraction=0.5, **overrides)
    head = ConsistencyHead(OBS_DIM, ACT_DIM, hidden_sizes=(16, 16))
    algorithm = QGradientActor(head, cfg, total_steps=400, num_envs=N, obs_dim=OBS_DIM, act_dim=ACT_DIM,
                               capacity=64, device=torch.device("cpu"), seed=seed)
    for _ in range(8):
        obs = torch.randn(N, OBS_DIM)
        algorithm.process_env_step(obs, torch.rand(N, ACT_DIM) * 2 - 1, torch.randn(N),
                                   (torch.rand(N) < 0.2).float(), {"final_obs": torch.randn(N, OBS_DIM)})
    return algorithm


def test_td_target_comes_from_the_ema_actor_without_entropy():
    algorithm = make()
    with torch.no_grad():  # the online head moves away: the target must follow the EMA copy
        for parameter in algorithm.head.network.parameters():
            parameter.add_(0.5)
    batch = algorithm.sampler.sample(8)
    torch.manual_seed(1)
    _, _, target = algorithm._critic_loss_eager(batch, torch.zeros(()), None)
    torch.manual_seed(1)
    with torch.no_grad():
        next_q = algorithm.critic_target(batch.next_obs, algorithm.ema_head.rsample(batch.next_obs)).min(0).values
    assert torch.allclose(target, batch.rewards + 0.99 * (1 - batch.dones) * next_q)
    torch.manual_seed(1)
    with torch.no_grad():
        online_q = algorithm.critic_target(batch.next_obs, algorithm.head.rsample(batch.next_obs)).min(0).values
    assert not torch.allclose(target, batch.rewards + 0.99 * (1 - batch.dones) * online_q)


def test_actor_loss_is_bc_plus_eta_times_the_normalized_q_loss():
    algorithm = make()
    algorithm.head.eval()  # the CT loss without advancing the head's CT step, so it can be redrawn
    batch = algorithm.sampler.sample(8)
    pair_state = algorithm.pair_generator.get_state()
    torch.manual_seed(2)
    loss, named = algorithm.actor_loss(batch)
    torch.manual_seed(2)
    q = algorithm.critic(batch.obs, algorithm.head.rsample(batch.obs))
    bc = algorithm.head.imitation_loss(batch.obs, batch.actions)
    i, j = torch.randperm(2, generator=torch.Generator().set_state(pair_state)).tolist()
    expected = 2.0 * bc + 0.5 * (-q[i].mean() / q[j].abs().mean())
    assert loss.item() == pytest.approx(expected.item(), rel=1e-5)
    assert named["bc_loss"].item() == pytest.approx(2.0 * bc.item(), rel=1e-5)
    loss.backward()
    assert all(p.grad is None for p in algorithm.critic.parameters())  # the critics get no actor gradient
    assert algorithm.head.network.body[0].weight.grad.abs().sum() > 0


def test_ema_actor_copies_then_averages_and_exploration_decays():
    algorithm = make()
    algorithm.gradient_step()  # actor step 1 < start 2: a copy
    assert all(torch.equal(e, p) for e, p in zip(algorithm.ema_head.parameters(), algorithm.head.parameters()))
    algorithm.gradient_step()  # actor step 2: the copy of step 1's weights averaged with step 2's
    before = [p.detach().clone() for p in algorithm.ema_head.parameters()]
    algorithm.gradient_step()
    assert all(torch.allclose(e, 0.9 * b + 0.1 * p, atol=1e-6)
               for e, b, p in zip(algorithm.ema_head.parameters(), before, algorithm.head.parameters()))
    algorithm.env_steps = 0
    assert algorithm.epsilon() == pytest.approx(1.0)
    algorithm.env_steps = 100  # a half of the 200-step exploration horizon
    assert algorithm.epsilon() == pytest.approx(1.0 + 0.5 * (0.01 - 1.0))
    algorithm.env_steps = 10_000
    assert algorithm.epsilon() == pytest.approx(0.01)
    actions = algorithm.act(torch.randn(N, OBS_DIM))
    assert actions.shape == (N, ACT_DIM) and actions.abs().max() <= 1


def test_state_round_trip_through_weights_only_load():
    algorithm = make()
    for _ in range(3):
        algorithm.gradient_step()
    buffer = io.BytesIO()
    torch.save(algorithm.state_dict(), buffer)
    buffer.seek(0)
    rebuilt = make(seed=1)
    rebuilt.load_state_dict(torch.load(buffer, weights_only=True))
    rebuilt.head.load_state_dict(algorithm.head.state_dict())
    assert_trees_equal(rebuilt.state_dict(), algorithm.state_dict())
    torch.manual_seed(3)
    expected = algorithm.gradient_step()
    torch.manual_seed(3)
    assert torch.equal(rebuilt.gradient_step()["value"], expected["value"])


def test_config_refuses_what_this_learner_cannot_do():
    from genpol.api import compose_config
    from genpol.config import ConfigError
    from genpol.configure import validate

    with pytest.raises(ConfigError, match="learner.ent_coef"):
        validate(compose_config(["env=multigoal", "policy=consistency", "learner=consistency_ac", "learner.ent_coef=auto"]))
    # one critic: L_Q pairs two, and the run failed at its first actor step, after learning_starts env steps
    with pytest.raises(ConfigError, match=r"^learner.num_qs must be >= 2 with eta > 0 \(L_Q pairs two critics\)"):
        validate(compose_config(["env=multigoal", "policy=consistency", "learner=consistency_ac", "learner.num_qs=1"]))
    with pytest.raises(ConfigError, match="gaussian head cannot be trained by learner=consistency_ac.*reparameterized.*; "
                                          "the heads that have what it needs: policy=diffusion, policy=tanh_gaussian, "):
        validate(compose_config(["env=multigoal", "policy=gaussian", "learner=consistency_ac"]))


def test_q_loss_only_from_scratch_learns_multigoal(tmp_path):
    """8.4's online recipe: Q-loss only (bc_coef 0), epsilon-random exploration from 1.0. (With the CT
    term, bc_coef 1, over 3000 steps: bench/learning_checks.py, which left CI for time.) 1500 env steps,
    4 envs, 32-wide networks (measured 12-18 s on a loaded 2-core CPU). The last 500 steps' training
    episodes returned 6.5, 14.5 and 3.1 (seeds 0, 1, 2; a random policy: 2.98). With torch's clamp
    (policy.clamp_gradient=zero) or a plain straight-through clamp the same runs freeze at a corner of
    the action box from the second iteration on and return -4.06 (seeds 0, 1; seed 0), since a saturated
    action gets no gradient back (zero) or drifts outward (straight-through)."""
    from genpol.api import train

    train(env="multigoal", policy="consistency", learner="consistency_ac", total_steps=1500, run_dir=tmp_path / "run",
          seed=0, overrides=["pipeline.video=false", "logger.progress_bar=false", "pipeline.eval_episodes=2",
                             "policy.hidden_sizes=[32,32,32]", "learner.critic_hidden_sizes=[32,32]",
                             "learner.bc_coef=0", "learner.lr=1e-3", "learner.learning_starts=100",
                             "learner.iteration_steps=500", "learner.batch_size=64", "learner.act_candidates=10",
                             "env.num_envs=4"])
    rows = [json.loads(line) for line in (tmp_path / "run" / "progress.jsonl").read_text().splitlines()]
    returns = [row["charts/episodic_return"] for row in rows]
    assert "losses/bc_loss" not in rows[-1] and np.isfinite(rows[-1]["losses/q_loss"])
    assert returns[-1] > 3.0 and returns[-1] > returns[0] + 3.0, returns


def test_the_same_learner_trains_a_diffusion_head_as_diffusion_ql():
    """DPPO's head with 5 DDPM steps has reparameterized sampling: the Q-loss reaches every denoising step."""
    from genpol.heads import DiffusionHead

    torch.manual_seed(0)
    head = DiffusionHead(OBS_DIM, ACT_DIM, denoising_steps=5, ft_denoising_steps=5, hidden_sizes=(16, 16, 16))
    cfg = QGradientConfig(batch_size=8, learning_starts=0, critic_hidden_sizes=[16], act_candidates=3)
    algorithm = QGradientActor(head, cfg, total_steps=100, num_envs=N, obs_dim=OBS_DIM, act_dim=ACT_DIM,
                               capacity=64, device=torch.device("cpu"))
    for _ in range(4):
        algorithm.process_env_step(torch.randn(N, OBS_DIM), torch.rand(N, ACT_DIM) * 2 - 1, torch.randn(N),
                                   torch.zeros(N), {"final_obs": torch.randn(N, OBS_DIM)})
    loss, _ = algorithm.actor_loss(algorithm.sampler.sample(8))
    loss.backward()
    assert head.denoiser.body.input.weight.grad.abs().sum() > 0
    before = [p.detach().clone() for p in head.parameters()]
    named = algorithm.gradient_step()
    assert np.isfinite(float(named["q_loss"])) and any(not torch.equal(b, p) for b, p in zip(before, head.parameters()))
    assert algorithm.act(torch.randn(N, OBS_DIM)).shape == (N, ACT_DIM)
