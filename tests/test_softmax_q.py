"""Consistency-AC's acting head (``SoftmaxQPolicy``): the softmax-Q choice on a hand critic against
independent math, its distribution, the deterministic seeded draw, the spec round trip, the learner
acting with it, and the run's final evaluation reproduced from the checkpoint by the CLI."""

import io
import json

import numpy as np
import pytest
import torch

from genpol.heads import ConsistencyHead, TanhGaussianHead, head_from_spec
from genpol.heads.base import Capability, HeadCapabilityError
from genpol.algorithms.softmax_q import SoftmaxQPolicy
from genpol.qensemble import QEnsemble, critic_mlp

from conftest import run_cli

N = 7  # candidates per state


def hand_critic(scale: float) -> QEnsemble:
    """Two heads on (s, a) with s, a 1-D: Q_0 = scale (a + 1), Q_1 = scale (1 - a), so for a in [-1, 1]
    min Q = scale (1 - |a|)."""
    heads = []
    for out_weight, out_bias in ((1.0, 0.0), (-1.0, 2.0)):
        head = critic_mlp(2, (1,), "relu")
        with torch.no_grad():
            head[0].weight.copy_(torch.tensor([[0.0, 1.0]]))  # hidden = relu(a + 1) = a + 1
            head[0].bias.fill_(1.0)
            head[2].weight.fill_(scale * out_weight)
            head[2].bias.fill_(scale * out_bias)
        heads.append(head)
    return QEnsemble.from_modules(heads, obs_dim=1)


def hand_policy(scale: float = 3.0) -> SoftmaxQPolicy:
    torch.manual_seed(0)  # a tanh-Gaussian actor: candidates spread over (-1, 1)
    actor = TanhGaussianHead(1, 1, hidden_sizes=(8,))
    return SoftmaxQPolicy(1, 1, actor, hand_critic(scale), num_candidates=N)


def expected_q(candidates: torch.Tensor, scale: float) -> torch.Tensor:
    return scale * (1 - candidates.abs())


def test_the_action_is_a_candidate_drawn_by_softmax_of_the_min_q_hand_case():
    policy = hand_policy()
    obs = torch.randn(5, 1)
    torch.manual_seed(3)
    action = policy.act(obs, deterministic=False)
    torch.manual_seed(3)  # the same draws, recomputed: one candidates call, then one multinomial
    candidates = policy.actor.candidates(obs, N)  # [5, N, 1]
    probabilities = torch.softmax(expected_q(candidates.squeeze(-1), 3.0), dim=-1)
    index = torch.multinomial(probabilities, 1).squeeze(-1)
    assert torch.equal(action, candidates[torch.arange(5), index])
    assert candidates.std() > 0.3  # the hand case discriminates: candidates are far apart


def test_the_choice_follows_softmax_probabilities_not_the_argmax_or_uniform():
    """Over 20 000 states, the mean min-Q of the chosen candidate matches sum_k softmax_k q_k within 4
    standard errors, and is far from the argmax's and from a uniform choice's."""
    policy = hand_policy(scale=3.0)
    obs = torch.randn(20_000, 1)
    torch.manual_seed(4)
    chosen = expected_q(policy.act(obs, deterministic=False).squeeze(-1), 3.0)
    torch.manual_seed(4)
    q = expected_q(policy.actor.candidates(obs, N).squeeze(-1), 3.0)  # the same candidates
    expected = (torch.softmax(q, dim=-1) * q).sum(-1)
    error = 4 * chosen.std() / len(chosen) ** 0.5
    assert abs(chosen.mean() - expected.mean()) < error
    assert q.max(-1).values.mean() - expected.mean() > 10 * error
    assert expected.mean() - q.mean() > 10 * error


def seeded_per_state(act, obs):
    """Each state's action from torch's RNG seeded with 0 just before it: what deterministic acting is."""
    rows = []
    for state in obs.split(1):
        torch.manual_seed(0)
        rows.append(act(state))
    return torch.cat(rows)


def test_deterministic_acting_is_a_seeded_draw_per_state_that_leaves_the_callers_rng_alone():
    policy = hand_policy()
    obs = torch.randn(6, 1)
    state = torch.get_rng_state()
    action = policy.act(obs, deterministic=True)
    assert torch.equal(torch.get_rng_state(), state) and torch.equal(action, policy.act(obs, deterministic=True))
    assert torch.equal(action, seeded_per_state(lambda s: policy.act(s, deterministic=False), obs))
    # a function of the state: the same alone as in the batch (one reseeded stream for the batch made the
    # candidates of state b depend on B and b)
    assert torch.equal(action[3:4], policy.act(obs[3:4], deterministic=True))
    # a steep critic makes the softmax the argmax: the candidate nearest 0 wins
    steep = SoftmaxQPolicy(1, 1, policy.actor, hand_critic(1e4), num_candidates=N)
    candidates = seeded_per_state(lambda s: policy.actor.candidates(s, N), obs).squeeze(-1)
    nearest = candidates.gather(1, candidates.abs().argmin(1, keepdim=True))
    assert torch.equal(steep.act(obs, deterministic=True), nearest)


def test_the_spec_rebuilds_the_policy_and_weights_round_trip_weights_only():
    torch.manual_seed(0)
    actor = ConsistencyHead(3, 2, hidden_sizes=(16, 16))
    policy = SoftmaxQPolicy(3, 2, actor, QEnsemble(3, 2, num_qs=2, hidden_sizes=(8,), activation="mish"), 5)
    spec = json.loads(json.dumps(policy.spec()))
    assert spec["family"] == "softmax_q" and spec["kwargs"]["actor"]["family"] == "consistency"
    buffer = io.BytesIO()
    torch.save(policy.state_dict(), buffer)
    buffer.seek(0)
    rebuilt = head_from_spec(spec)
    rebuilt.load_state_dict(torch.load(buffer, weights_only=True))
    obs = torch.randn(4, 3)
    assert torch.equal(rebuilt.act(obs), policy.act(obs)) and rebuilt.act(obs).shape == (4, 2)
    with pytest.raises(HeadCapabilityError, match="softmax_q head .* only acts"):
        rebuilt.sample(obs)
    with pytest.raises(HeadCapabilityError, match="not trained by imitation; its actor is"):
        rebuilt.imitation_loss(obs, torch.zeros(4, 2))


class NoCandidates(TanhGaussianHead):
    capabilities = TanhGaussianHead.capabilities - {Capability.CANDIDATES}


def test_an_actor_without_candidates_is_refused_naming_it():
    with pytest.raises(HeadCapabilityError, match="tanh_gaussian head has none"):
        SoftmaxQPolicy(1, 1, NoCandidates(1, 1, hidden_sizes=(4,)), hand_critic(1.0))


def test_the_learner_acts_and_evaluates_with_its_online_head_and_target_critics():
    from genpol.algorithms.qgradient import QGradientActor
    from genpol.config.offpolicy import QGradientConfig

    def learner(candidates):
        cfg = QGradientConfig(batch_size=8, learning_starts=0, critic_hidden_sizes=[16], act_candidates=candidates,
                              explore_initial=0.0, explore_final=0.0)
        return QGradientActor(ConsistencyHead(3, 2, hidden_sizes=(16,)), cfg, total_steps=100, num_envs=2,
                              obs_dim=3, act_dim=2, capacity=16, device=torch.device("cpu"))

    algorithm = learner(5)
    acting = algorithm.acting_head()
    assert isinstance(acting, SoftmaxQPolicy) and acting.num_candidates == 5
    assert acting.actor is algorithm.head and acting.critic is algorithm.critic_target
    obs = torch.randn(4, 3)
    torch.manual_seed(1)
    action = algorithm.act(obs)  # epsilon 0: the softmax-Q draw itself
    torch.manual_seed(1)
    assert torch.equal(action, acting.act(obs, deterministic=False))
    assert learner(1).acting_head().family == "consistency"  # one candidate: the head's own sample


TINY_CAC = ["learner.learning_starts=64", "learner.batch_size=16", "learner.iteration_steps=64",
            "learner.act_candidates=6", "learner.critic_hidden_sizes=[32,32]", "policy.hidden_sizes=[32,32]",
            "pipeline.eval_episodes=2", "logger.progress_bar=false", "pipeline.video=false"]


def test_offline_to_online_cli_evaluation_is_reproduced_from_the_checkpoint(tmp_path, hopper_dataset):
    run_dir = tmp_path / "run"
    # the bundle evaluates with fresh draws (Ding & Jin's); the deterministic evaluation is the one a checkpoint reproduces
    run_cli("-m", "genpol.train", "+experiment=consistency_ac", f"dataset.path={hopper_dataset}", "total_steps=128",
            "pipeline.eval_deterministic=true",
            "pipeline.pretrain_steps=20", "pipeline.pretrain_log_every=10", *TINY_CAC, f"run_dir={run_dir}")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["learner"] == "consistency_ac" and summary["pretrained"]["gradient_steps"] == 20
    result = run_cli("-m", "genpol.evaluate", f"run_dir={run_dir}", "episodes=2", "video=false")
    evaluation = json.loads(result.stdout[result.stdout.index("{"):])
    # policy/ rebuilds the softmax-Q policy (online head, target critics): the same deterministic return
    assert evaluation["deterministic_return_mean"] == pytest.approx(summary["eval_return_mean"], rel=1e-6)
    from genpol.api import load_policy

    policy = load_policy(run_dir)
    assert isinstance(policy.head, SoftmaxQPolicy) and policy.head.actor.family == "consistency"
    assert policy.head.num_candidates == 6
    action = policy.predict(np.zeros(11))
    assert action.shape == (3,) and np.all(np.abs(action) <= 1.0)
    assert np.array_equal(action, policy.predict(np.zeros(11)))  # deterministic: a seeded draw
