"""EXPO: candidate selection (hand case), the edit loss against torch.distributions, the EMA, no
Q-gradient into the base policy, the batched on-the-fly policy, the capability check, and the
offline-to-online CLI end to end with evaluation from the checkpoint."""

import json
import math

import numpy as np
import pytest
import torch

from genpol.algorithms.expo import EXPO
from genpol.api import compose_config
from genpol.config import ConfigError
from genpol.configure import validate
from genpol.heads import DiffusionHead, GaussianHead, head_from_spec
from genpol.heads.base import Capability
from genpol.algorithms.edit import EditPolicy, OnTheFlyPolicy, edit_loss, on_the_fly_actions, select_by_q
from genpol.qensemble import QEnsemble, critic_mlp

from conftest import run_cli

OBS_DIM, ACT_DIM = 3, 2


def hand_critic() -> QEnsemble:
    """Three heads on (s, a) with s, a 1-D: Q_0 = a + 1, Q_1 = 1 - a, Q_2 = 5 (for a in [-1, 1])."""
    heads = []
    for scale, shift in ((1.0, 0.0), (-1.0, 2.0), (0.0, 5.0)):
        head = critic_mlp(2, (1,), "relu")
        with torch.no_grad():
            head[0].weight.copy_(torch.tensor([[0.0, 1.0]]))  # hidden = relu(a + 1) = a + 1
            head[0].bias.fill_(1.0)
            head[2].weight.fill_(scale)
            head[2].bias.fill_(shift)
        heads.append(head)
    return QEnsemble.from_modules(heads, obs_dim=1)


def test_candidate_selection_is_the_argmax_of_the_subset_min_hand_case():
    critic = hand_critic()
    obs = torch.zeros(2, 1)
    candidates = torch.tensor([[[-0.8], [0.1], [0.6], [-0.05]],
                               [[0.9], [-0.3], [0.2], [-1.0]]])
    # heads {0, 1}: min(a + 1, 1 - a) peaks at a = 0 -> -0.05 (0.95) and 0.2 (0.8)
    best, q = select_by_q(obs, candidates, critic, torch.tensor([0, 1]))
    assert torch.allclose(best, torch.tensor([[-0.05], [0.2]])) and torch.allclose(q, torch.tensor([0.95, 0.8]))
    # heads {0, 2}: min(a + 1, 5) = a + 1 -> the largest action
    best, q = select_by_q(obs, candidates, critic, torch.tensor([2, 0]))
    assert torch.allclose(best, torch.tensor([[0.6], [0.9]])) and torch.allclose(q, torch.tensor([1.6, 1.9]))
    # head {1} alone: 1 - a -> the smallest action; None: all three heads, as {0, 1}
    best, _ = select_by_q(obs, candidates, critic, torch.tensor([1]))
    assert torch.allclose(best, torch.tensor([[-0.8], [-1.0]]))
    best, _ = select_by_q(obs, candidates, critic, None)
    assert torch.allclose(best, torch.tensor([[-0.05], [0.2]]))


def test_the_td_target_values_the_winner_with_a_second_independent_subset_hand_case():
    """EXPO's code ranks the next candidates by one subset's minimum and values the winner by another
    subset's (learner.td_subsets=independent); one subset for both (shared) is the maximum of the very
    minimum that ranked, never below the independent value. Q_0 = a + 1, Q_1 = 1 - a, Q_2 = 5."""
    critic = hand_critic()
    obs = torch.zeros(2, 1)
    candidates = torch.tensor([[[-0.8], [0.1], [0.6], [-0.05]],
                               [[0.9], [-0.3], [0.2], [-1.0]]])
    # ranked by {0, 2}: min(a + 1, 5) -> 0.6 and 0.9; valued by {1}: 1 - a -> 0.4 and 0.1
    best, value = select_by_q(obs, candidates, critic, torch.tensor([0, 2]), torch.tensor([1]))
    assert torch.allclose(best, torch.tensor([[0.6], [0.9]])) and torch.allclose(value, torch.tensor([0.4, 0.1]))
    _, shared = select_by_q(obs, candidates, critic, torch.tensor([0, 2]))
    assert torch.allclose(shared, torch.tensor([1.6, 1.9])) and (shared >= value).all()
    # valued by {0, 1} at the winner of {0, 2}: min(1.6, 0.4), min(1.9, 0.1)
    _, value = select_by_q(obs, candidates, critic, torch.tensor([0, 2]), torch.tensor([0, 1]))
    assert torch.allclose(value, torch.tensor([0.4, 0.1]))


def test_expo_draws_the_ranking_subset_then_an_independent_valuing_subset():
    """learner.td_subsets=independent: two randperms from the subset generator per critic step, the
    ranking one first; shared: one, as before."""
    independent, shared = tiny_expo(num_min_qs=2), tiny_expo(num_min_qs=2, td_subsets="shared")
    generator = torch.Generator().set_state(independent.subset_generator.get_state())
    expected = torch.stack([torch.randperm(4, generator=generator)[:2], torch.randperm(4, generator=generator)[:2]])
    assert torch.equal(independent._subset_heads(), expected)
    generator = torch.Generator().set_state(shared.subset_generator.get_state())
    assert torch.equal(shared._subset_heads(), torch.randperm(4, generator=generator)[:2])
    independent.update()  # the TD target takes the stacked subsets through the critic step
    assert independent.critic_steps == 2


def test_edits_are_unclipped_where_ranked_valued_and_trained_unless_clip_edits():
    """a' = a + beta u: EXPO's code leaves it unclipped (clip_edits=false, the default); clipped to
    [-1, 1] with clip_edits=true (genpol before 2026-12-02, and edit specs saved then). Acting still
    executes an action in the box."""
    actions, u = torch.tensor([[0.99, -0.2]]), torch.tensor([[1.0, -1.0]])
    unclipped = EditPolicy(OBS_DIM, ACT_DIM, hidden_sizes=(8,), edit_scale=0.05, clip=False)
    clipped = EditPolicy(OBS_DIM, ACT_DIM, hidden_sizes=(8,), edit_scale=0.05)
    assert torch.allclose(unclipped.edit(None, actions, u), torch.tensor([[1.04, -0.25]]))
    assert torch.allclose(clipped.edit(None, actions, u), torch.tensor([[1.0, -0.25]]))
    assert clipped.spec_kwargs["clip"] and EditPolicy(OBS_DIM, ACT_DIM, hidden_sizes=(8,)).clip  # old specs: clip
    algorithm = tiny_expo()
    assert not algorithm.edit.clip and algorithm.actor.edit is algorithm.edit
    torch.manual_seed(0)
    near_bound = torch.full((64, OBS_DIM), 3.0)
    assert algorithm.actor.act(near_bound, deterministic=False).abs().max() <= 1.0


def test_edit_loss_matches_torch_distributions():
    """a' = clip(a + beta u), log pi_e(a') = log pi(u) - d log beta with pi a tanh-Gaussian (checked
    with torch.distributions' TanhTransform), loss = mean(alpha log pi_e - mean_i Q_i(s, a'))."""
    torch.manual_seed(3)
    edit = EditPolicy(OBS_DIM, ACT_DIM, hidden_sizes=(16,), edit_scale=0.05)
    critic = QEnsemble(OBS_DIM, ACT_DIM, num_qs=4, hidden_sizes=(8,), layer_norm=True)
    obs, actions = torch.randn(6, OBS_DIM), torch.rand(6, ACT_DIM) * 1.8 - 0.9
    alpha = torch.tensor([0.3])

    torch.manual_seed(11)
    edited, log_prob = edit.rsample_edit(obs, actions)
    loss = edit_loss(log_prob, critic(obs, edited), alpha)

    mean, log_std = edit.gaussian.distribution(torch.cat([obs, actions], dim=-1))
    torch.manual_seed(11)
    noise = torch.randn_like(mean)
    pre_tanh = mean + noise * log_std.exp()
    u = torch.tanh(pre_tanh)
    squashed = torch.distributions.TransformedDistribution(
        torch.distributions.Independent(torch.distributions.Normal(mean, log_std.exp()), 1),
        [torch.distributions.TanhTransform()])
    expected_log_prob = squashed.log_prob(u) - ACT_DIM * math.log(0.05)
    expected_edited = (actions + 0.05 * u).clamp(-1, 1)
    expected_loss = (0.3 * expected_log_prob - critic(obs, expected_edited).mean(dim=0)).mean()
    assert torch.allclose(edited, expected_edited, atol=1e-6)
    assert torch.allclose(log_prob, expected_log_prob, atol=1e-4)
    assert torch.allclose(loss, expected_loss, atol=1e-4)
    # an edit moves each action dimension by less than beta
    assert (edited - actions).abs().max() < 0.05
    # alpha is a constant in the loss: the gradient reaches the edit policy only
    loss.backward()
    assert all(p.grad is not None for p in edit.parameters())


def tiny_expo(head=None, **overrides) -> EXPO:
    cfg = validate(compose_config(["learner=expo", "policy=gaussian", "run_dir=/tmp/unused", "learner.offline_ratio=0",
                                   "learner.num_qs=4", "learner.utd=2", "learner.batch_size=8",
                                   "learner.critic_hidden_sizes=[16,16]", "learner.edit_hidden_sizes=[16]",
                                   "learner.num_samples=3", "learner.n_edit=2", "learner.offline_ratio=0",
                                   "learner.learning_starts=0", *[f"learner.{k}={v}" for k, v in overrides.items()]]))
    head = head or GaussianHead(OBS_DIM, ACT_DIM, hidden_sizes=(16,))
    algorithm = EXPO(head, cfg.learner, num_envs=1, obs_dim=OBS_DIM, act_dim=ACT_DIM, capacity=256,
                     device=torch.device("cpu"), seed=0)
    for _ in range(40):
        obs = torch.randn(1, OBS_DIM)
        algorithm.process_env_step(obs, torch.rand(1, ACT_DIM) * 2 - 1, torch.randn(1), torch.zeros(1),
                                   {"final_obs": torch.randn(1, OBS_DIM)})
    return algorithm


def test_ema_base_moves_by_tau_after_each_base_step():
    algorithm = tiny_expo(base_ema_tau=0.25)
    with torch.no_grad():  # set the EMA apart from the online base, so that the update shows
        for parameter in algorithm.ema_base.parameters():
            parameter.add_(1.0)
    before = [p.clone() for p in algorithm.ema_base.parameters()]
    algorithm.base_step(algorithm.sampler.sample(8))
    for old, new, online in zip(before, algorithm.ema_base.parameters(), algorithm.head.parameters()):
        assert torch.allclose(new, 0.75 * old + 0.25 * online.detach(), atol=1e-6)
    assert not any(p.requires_grad for p in algorithm.ema_base.parameters())
    # the acting head holds the EMA copy, not the online base
    assert algorithm.acting_head().base is algorithm.ema_base


def test_the_base_and_edit_learning_rates_follow_expos_cosine_decay_and_stay_at_zero():
    algorithm = tiny_expo(lr=3e-4, base_lr_decay_steps=4)
    # optax.cosine_decay_schedule(3e-4, 4): 3e-4 * (1 + cos(pi k / 4)) / 2 for k = 0..4, then 0
    expected = [3e-4, 3e-4 * (1 + 2 ** -0.5) / 2, 1.5e-4, 3e-4 * (1 - 2 ** -0.5) / 2, 0.0, 0.0]
    alpha = torch.ones(())
    for step, lr in enumerate(expected):  # EXPO's actor_lr schedule serves the base and the edit policy
        batch = algorithm.sampler.sample(8)
        algorithm.base_step(batch)
        algorithm.edit_step(batch, alpha)
        assert algorithm.actor_optimizer.param_groups[0]["lr"] == pytest.approx(lr, abs=1e-12), step
        assert algorithm.edit_optimizer.param_groups[0]["lr"] == pytest.approx(lr, abs=1e-12), step
    assert algorithm.base_steps == algorithm.actor_steps == len(expected)
    assert tiny_expo(lr=3e-4, base_lr_decay_steps="null").policy_lr(10**9) == 3e-4
    with pytest.raises(ConfigError, match="learner.base_lr_decay_steps"):
        tiny_expo(base_lr_decay_steps=0)


def test_the_temperature_target_lies_within_reach_of_an_edit_of_scale_beta():
    """log pi_e(a') = log pi(u) - |A| log beta, so the edited action's entropy is at most |A| (log 2 +
    log beta) (u uniform on (-1, 1)^A). |A| = 2, beta 0.05 by hand: the adjusted target -1 + 2 log 0.05 =
    -6.99 lies below that maximum (-4.61); EXPO's unadjusted -1 lies above it, so its temperature can
    only grow: over 50 temperature steps alpha falls with the adjusted target and rises without it."""
    largest = ACT_DIM * (math.log(2.0) + math.log(0.05))
    adjusted, legacy = tiny_expo(), tiny_expo(adjust_target_entropy=False)
    assert adjusted.target_entropy == pytest.approx(-1.0 + 2 * math.log(0.05))
    assert adjusted.target_entropy < largest
    assert legacy.target_entropy == pytest.approx(-1.0) and legacy.target_entropy > largest
    for algorithm in (adjusted, legacy):
        batch = algorithm.sampler.sample(8)
        for _ in range(50):
            with torch.no_grad():
                _, log_prob = algorithm.edit.rsample_edit(batch.obs, batch.actions)
            algorithm.temperature_step(log_prob)
    assert float(adjusted.alpha) < 1.0 < float(legacy.alpha)


def test_no_q_gradient_reaches_the_base_policy():
    """Over whole rounds (critic steps with on-the-fly targets, base step, edit step, temperature),
    every gradient computed for a base parameter comes from its one imitation step per round; the
    critic and edit losses do not depend on the base's parameters at all."""
    algorithm = tiny_expo()
    calls = {name: 0 for name, _ in algorithm.head.named_parameters()}
    for name, parameter in algorithm.head.named_parameters():
        parameter.register_hook(lambda grad, name=name: calls.__setitem__(name, calls[name] + 1))
    for _ in range(3):
        algorithm.rlpd_round()
    assert set(calls.values()) == {3}, calls
    batch = algorithm.sampler.sample(8)
    loss, _, _ = algorithm._critic_loss_eager(batch, algorithm.alpha, algorithm._subset_heads())
    edited, log_prob = algorithm.edit.rsample_edit(batch.obs, batch.actions)
    edit = edit_loss(log_prob, algorithm.critic(batch.obs, edited), algorithm.alpha)
    for value in (loss, edit):
        grads = torch.autograd.grad(value, list(algorithm.head.parameters()), allow_unused=True, retain_graph=True)
        assert all(g is None for g in grads)


def test_the_td_target_draws_candidates_for_all_next_states_in_one_call(monkeypatch):
    algorithm = tiny_expo()
    calls = []
    original = algorithm.head.candidates
    monkeypatch.setattr(algorithm.head, "candidates", lambda obs, n: calls.append((obs.shape[0], n)) or original(obs, n))
    algorithm.critic_step(algorithm.sampler.sample(8), algorithm.alpha)
    assert calls == [(8, 3)]


def test_on_the_fly_actions_edit_the_first_n_edit_samples_and_pick_among_all():
    torch.manual_seed(0)
    base = GaussianHead(OBS_DIM, ACT_DIM, hidden_sizes=(8,))
    edit = EditPolicy(OBS_DIM, ACT_DIM, hidden_sizes=(8,))
    critic = QEnsemble(OBS_DIM, ACT_DIM, num_qs=3, hidden_sizes=(8,))
    obs = torch.randn(5, OBS_DIM)
    torch.manual_seed(1)
    actions, q = on_the_fly_actions(obs, base, edit, critic, num_samples=4, n_edit=2, subset_heads=None)
    torch.manual_seed(1)
    base_actions = base.candidates(obs, 4).clamp(-1, 1)
    edited = edit.edit_candidates(obs, base_actions[:, :2])
    candidates = torch.cat([base_actions, edited], dim=1)  # [5, 6, A]
    for b in range(5):  # the oracle: a plain loop over states and candidates
        values = [critic(obs[b:b + 1], candidates[b, k:k + 1]).min().item() for k in range(6)]
        best = int(np.argmax(values))
        assert torch.allclose(actions[b], candidates[b, best]) and q[b].item() == pytest.approx(values[best], abs=1e-5)
    assert (edited - base_actions[:, :2]).abs().max() <= 0.05 + 1e-6


def test_the_on_the_fly_policy_rebuilds_from_its_spec_and_acts_deterministically():
    torch.manual_seed(0)
    base = DiffusionHead(OBS_DIM, ACT_DIM, denoising_steps=4, ft_denoising_steps=4, hidden_sizes=(16, 16),
                         min_sampling_std=0.0)
    policy = OnTheFlyPolicy(OBS_DIM, ACT_DIM, base, EditPolicy(OBS_DIM, ACT_DIM, hidden_sizes=(8,)),
                            QEnsemble(OBS_DIM, ACT_DIM, num_qs=4, hidden_sizes=(8,), layer_norm=True), 5, 3, 2)
    rebuilt = head_from_spec(json.loads(json.dumps(policy.spec())))
    rebuilt.load_state_dict(policy.state_dict())
    obs = torch.randn(7, OBS_DIM)
    state = torch.get_rng_state()
    action = policy.act(obs, deterministic=True)
    assert torch.equal(torch.get_rng_state(), state)  # deterministic acting leaves the caller's RNG alone
    assert torch.equal(action, rebuilt.act(obs, deterministic=True)) and action.shape == (7, ACT_DIM)
    assert policy.act(obs, deterministic=False).shape == (7, ACT_DIM)
    # a function of the state: the same alone as fifth in the batch (the subset, base samples and edits
    # of a state were drawn from one stream reseeded per batch, so they moved with B and with its place)
    assert torch.equal(action[4:5], policy.act(obs[4:5], deterministic=True))


@pytest.mark.parametrize("family", ["fpo", "policyflow", "diffusion", "consistency"])
def test_flow_diffusion_and_consistency_bases_train_and_act(family):
    from genpol.heads import build_head

    kwargs = {"fpo": {"hidden_sizes": (16,)}, "policyflow": {"hidden_sizes": (16,)},
              "diffusion": {"denoising_steps": 4, "ft_denoising_steps": 4, "hidden_sizes": (16, 16)},
              "consistency": {"hidden_sizes": (16, 16)}}[family]
    algorithm = tiny_expo(head=build_head(family, OBS_DIM, ACT_DIM, **kwargs))
    named = algorithm.rlpd_round()
    assert all(torch.isfinite(value).all() for value in named.values()) and algorithm.base_steps == 1
    actions = algorithm.act(torch.randn(5, OBS_DIM))
    assert actions.shape == (5, ACT_DIM) and actions.abs().max() <= 1.0


def test_the_compiled_critic_step_matches_the_eager_one():
    """learner.compile=true (+experiment=expo's setting) compiles the critic loss with its TD target: the
    diffusion base's whole sampling chain, the edits and the target critics' ranking. Its draws come from torch's
    generator in eager's order (inductor's fallback_random), so from one seed the compiled step gives eager's
    targets and critics."""
    from genpol.build import make_head

    policy = validate(compose_config(["+experiment=expo", "run_dir=/tmp/unused", "learner.offline_ratio=0",
                                      "policy.hidden_sizes=[16]",
                                      "policy.denoising_steps=2", "policy.ft_denoising_steps=2"])).policy
    results = []
    for compiled in (False, True):
        torch.manual_seed(0)  # the same base weights and the same replay in both
        algorithm = tiny_expo(head=make_head(policy, OBS_DIM, ACT_DIM), compile=str(compiled).lower())
        batch = algorithm.sampler.sample(8)
        torch.manual_seed(1)
        named = [algorithm.critic_step(batch, algorithm.alpha) for _ in range(2)]  # the second: a warm graph
        results.append((named, [p.detach().clone() for p in algorithm.critic.parameters()]))
    (eager, eager_critic), (compiled, compiled_critic) = results
    for eager_step, compiled_step in zip(eager, compiled):
        torch.testing.assert_close(compiled_step["target"], eager_step["target"], rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(compiled_step["value"], eager_step["value"], rtol=1e-5, atol=1e-5)
    for before, after in zip(eager_critic, compiled_critic):
        torch.testing.assert_close(after, before, rtol=1e-5, atol=1e-6)
    assert not torch.equal(eager[0]["target"], eager[1]["target"])  # the draws differ between steps


class NoCandidates(GaussianHead):
    capabilities = frozenset({Capability.ON_POLICY_RATIO, Capability.IMITATION})


def test_a_base_without_candidates_fails_at_validation_naming_head_learner_and_capability(monkeypatch):
    from genpol import heads

    monkeypatch.setitem(heads.HEADS, "gaussian", NoCandidates)
    with pytest.raises(ConfigError) as error:
        validate(compose_config(["+experiment=expo", "policy=gaussian", "run_dir=/tmp/unused",
                                 "learner.offline_ratio=0"]))
    message = str(error.value)
    assert "policy=gaussian" in message and "learner=expo" in message and "batched candidates" in message


def test_a_chunked_base_is_refused_with_the_keys_to_change():
    head = DiffusionHead(OBS_DIM, 2 * ACT_DIM, act_steps=2, horizon_steps=2, denoising_steps=4,
                         ft_denoising_steps=4, hidden_sizes=(8, 8))
    with pytest.raises(ConfigError, match="policy.act_steps=1"):
        tiny_expo(head=head)


TINY_EXPO = ["learner.learning_starts=128", "learner.num_qs=3", "learner.utd=2", "learner.iteration_steps=128",
             "learner.batch_size=16", "learner.num_samples=3", "learner.n_edit=2", "policy.hidden_sizes=[32,32]",
             "policy.denoising_steps=4", "policy.ft_denoising_steps=4", "learner.critic_hidden_sizes=[32,32]",
             "learner.edit_hidden_sizes=[32]", "pipeline.eval_episodes=2", "logger.progress_bar=false",
             "learner.compile=false"]  # the compiled step: test_the_compiled_critic_step_matches_the_eager_one


def test_offline_to_online_cli_pretrains_the_base_then_runs_expo_and_evaluates(tmp_path, hopper_dataset):
    run_dir = tmp_path / "run"
    run_cli("-m", "genpol.train", "+experiment=expo", "env=hopper", "pipeline=offline_to_online",
            f"dataset.path={hopper_dataset}", "total_steps=192", "pipeline.pretrain_steps=40",
            "pipeline.pretrain_log_every=20", "pipeline.video=false", *TINY_EXPO, f"run_dir={run_dir}",
            # the bundle evaluates with fresh draws (the authors'); the deterministic one is what a checkpoint reproduces
            "pipeline.eval_deterministic=true")
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["learner"] == "expo" and summary["pretrained"]["gradient_steps"] == 40
    from genpol.checkpoint import load_training_state, resolve_checkpoint

    state = load_training_state(resolve_checkpoint(run_dir))["algorithm"]
    # 64 learning env steps, each one round: 2 critic minibatches, one base and one edit step
    assert state["critic_steps"] == 64 * 2 and state["base_steps"] == 64 and state["actor_steps"] == 64
    assert state["replay"]["offline"]["fingerprint"]["transitions"] > 500
    result = run_cli("-m", "genpol.evaluate", f"run_dir={run_dir}", "episodes=2", "video=false")
    evaluation = json.loads(result.stdout[result.stdout.index("{"):])
    # the checkpoint's policy/ rebuilds the on-the-fly policy (EMA base, edit, critics): same return
    assert evaluation["deterministic_return_mean"] == pytest.approx(summary["eval_return_mean"], rel=1e-6)
    from genpol.api import load_policy

    policy = load_policy(run_dir)
    assert isinstance(policy.head, OnTheFlyPolicy) and policy.head.base.family == "diffusion"
    action = policy.predict(np.zeros(11))
    assert action.shape == (3,) and np.all(np.abs(action) <= 1.0)


def test_resume_after_a_kill_is_bit_identical(tmp_path, hopper_dataset):
    """SIGKILL an EXPO run (offline data mixed in) after its 3rd checkpoint (step 192; it learns from
    step 128 on) and re-run it: the policy (EMA base, edit policy, target critics), the base, the learner's whole state (critics, optimizers,
    temperature, replay, generators), the env and torch's RNG equal an uninterrupted run's."""
    import signal
    import time

    from genpol.checkpoint import list_checkpoints

    from conftest import assert_trees_equal, final_checkpoint, start_training

    def start(run_dir):
        return start_training(run_dir, "+experiment=expo", "env=hopper", "env.num_envs=2",
                              f"dataset.path={hopper_dataset}", "total_steps=256", "pipeline.checkpoint_every=1",
                              "pipeline.video=false", "learner.iteration_steps=64",
                              *[arg for arg in TINY_EXPO if not arg.startswith("learner.iteration_steps")])

    reference = start(tmp_path / "reference")
    assert reference.wait(timeout=300) == 0, reference.stderr.read()
    interrupted = start(tmp_path / "interrupted")
    marker = tmp_path / "interrupted" / "checkpoints" / "step_000000000192"
    deadline = time.time() + 300
    while not marker.exists() and time.time() < deadline and interrupted.poll() is None:
        time.sleep(0.01)
    interrupted.send_signal(signal.SIGKILL)
    interrupted.wait(timeout=60)
    assert interrupted.returncode == -signal.SIGKILL, "the run ended before it could be killed"
    assert "step_000000000256" not in {p.name for p in list_checkpoints(tmp_path / "interrupted" / "checkpoints")}
    resumed = start(tmp_path / "interrupted")
    assert resumed.wait(timeout=300) == 0, resumed.stderr.read()

    name_a, _, weights_a, state_a = final_checkpoint(tmp_path / "reference")
    name_b, _, weights_b, state_b = final_checkpoint(tmp_path / "interrupted")
    assert name_a == name_b == "step_000000000256"
    assert_trees_equal(weights_a, weights_b, "policy")
    for key in ("head", "algorithm", "env", "obs", "torch_rng", "global_step", "iteration"):
        assert_trees_equal(state_a[key], state_b[key], key)
    assert state_a["algorithm"]["base_steps"] == (256 - 128) and "edit_optimizer" in state_a["algorithm"]


def contextual_bandit_run(iterations: int = 100):
    """EXPO on a one-step task: s ~ U[-1, 1]^2, reward -||a - a*(s)||^2 with a*(s) = 0.8 (s_1, -s_0), every
    step terminal (so Q is the reward), 8 states per step, a Gaussian base. Returns the mean true reward
    on 512 fresh states of the on-the-fly policy and of uniform actions, and the mean true-reward gain
    of the (mean) edit over the EMA base's samples."""
    torch.manual_seed(0)
    cfg = validate(compose_config(["learner=expo", "policy=gaussian", "run_dir=/tmp/unused", "learner.offline_ratio=0",
                                   "learner.num_qs=4",
                                   "learner.utd=2", "learner.batch_size=64", "learner.critic_hidden_sizes=[64,64]",
                                   "learner.edit_hidden_sizes=[64,64]", "learner.num_samples=4", "learner.n_edit=4",
                                   "learner.offline_ratio=0", "learner.learning_starts=256", "learner.edit_scale=0.2",
                                   "learner.lr=1e-3", "learner.base_ema_tau=0.01"]))
    algorithm = EXPO(GaussianHead(2, 2, hidden_sizes=(64,)), cfg.learner, num_envs=8, obs_dim=2, act_dim=2,
                     capacity=4096, device=torch.device("cpu"), seed=0)

    def reward(obs, actions):
        return -(actions - 0.8 * torch.stack([obs[:, 1], -obs[:, 0]], dim=1)).square().sum(dim=1)

    generator = torch.Generator().manual_seed(1)
    for _ in range(iterations):
        obs = torch.rand(8, 2, generator=generator) * 2 - 1
        actions = algorithm.act(obs)
        algorithm.process_env_step(obs, actions, reward(obs, actions.clamp(-1, 1)), torch.ones(8), {"final_obs": obs})
        if algorithm.ready():
            algorithm.update()
    obs = torch.rand(512, 2, generator=generator) * 2 - 1
    with torch.no_grad():
        on_the_fly = reward(obs, algorithm.actor.act(obs, deterministic=False)).mean()
        uniform = reward(obs, torch.rand(512, 2, generator=generator) * 2 - 1).mean()
        base = algorithm.ema_base.candidates(obs, 1).clamp(-1, 1)
        edited = algorithm.edit.edit_candidates(obs, base, deterministic=True)
        gain = (reward(obs, edited[:, 0]) - reward(obs, base[:, 0])).mean()
    return float(on_the_fly), float(uniform), float(gain)


def test_expo_learns_a_contextual_bandit_through_argmax_q_and_its_edits():
    """Measured (seed 0): on-the-fly -0.17, uniform actions -1.08, edit gain +0.068 (+0.024 with EXPO's
    unadjusted temperature target, under which alpha only grows). With the argmax replaced by an argmin
    the on-the-fly policy scores -2.78 (the first assertion fails); with the edit loss's Q negated it
    still scores -0.19 through the base samples, but the edit gain is -0.053 (the second fails)."""
    on_the_fly, uniform, gain = contextual_bandit_run()
    assert on_the_fly > 0.5 * uniform, (on_the_fly, uniform)
    assert gain > 0.01, gain
