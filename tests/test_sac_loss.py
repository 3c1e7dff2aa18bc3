"""SAC / RLPD losses and the tanh-Gaussian head against stable-baselines3's SAC as the oracle.

Weight mapping (``TanhGaussianHead.load_sb3_actor``): SB3's ``model.actor`` state dict
(``latent_pi.0``, ``latent_pi.2``, ``mu``, ``log_std``) loads one to one into the head. The critics
stay SB3's own modules; ``ensemble_q`` only stacks their outputs to genpol's ``q [E, B]``.
With E = 2 the "sb3" and "mean" critic reductions coincide, so the RLPD forms get a 3-head hand case.
"""

import copy
import math

import pytest
import torch
import torch.nn.functional as F
from stable_baselines3 import SAC
from stable_baselines3.common.logger import Logger
from stable_baselines3.common.type_aliases import ReplayBufferSamples

from genpol.heads import GaussianHead, TanhGaussianHead
from genpol.heads.base import Capability, HeadCapabilityError, PolicyHead, check_capabilities
from genpol.heads.tanh_gaussian import tanh_gaussian_log_prob, tanh_log_abs_det_jacobian
from genpol.qensemble import subset_min
from genpol.updaters.sac_losses import actor_loss, critic_loss, td_target, temperature_loss

BATCH = 32
LOG_ALPHA = math.log(0.3)  # alpha != 1, so a dropped or misplaced alpha changes the numbers


def make_sb3():
    model = SAC("MlpPolicy", "Pendulum-v1", learning_starts=0, seed=0)
    with torch.no_grad():
        model.log_ent_coef.fill_(LOG_ALPHA)
    return model


def head_like(model):
    head = TanhGaussianHead(3, 1)  # SB3's defaults: [256, 256] ReLU, eps 1e-6
    head.load_sb3_actor(model.actor)
    return head


def make_batch(seed=0):
    """Pendulum-shaped transitions: obs (cos, sin, thetadot), actions in [-1, 1], rewards in [-16, 0]."""
    generator = torch.Generator().manual_seed(seed)

    def observations():
        angle = (torch.rand(BATCH, generator=generator) * 2 - 1) * math.pi
        speed = (torch.rand(BATCH, generator=generator) * 2 - 1) * 8
        return torch.stack([angle.cos(), angle.sin(), speed], dim=1)

    dones = (torch.rand(BATCH, generator=generator) < 0.25).float()
    dones[:2] = torch.tensor([1.0, 0.0])  # at least one termination and one bootstrap
    return {"obs": observations(), "next_obs": observations(), "dones": dones,
            "actions": torch.rand(BATCH, 1, generator=generator) * 2 - 1,
            "rewards": -16 * torch.rand(BATCH, generator=generator)}


def ensemble_q(critic, obs, actions):
    """SB3's tuple of ``[B, 1]`` critic outputs -> genpol's ``q [E, B]``."""
    return torch.cat(critic(obs, actions), dim=1).T


def assert_grads_equal(grads, expected, atol=1e-6):
    for grad, reference in zip(grads, expected, strict=True):
        torch.testing.assert_close(grad, reference, rtol=1e-5, atol=atol)


def test_actor_sample_log_prob_and_mode_match_sb3():
    model, batch = make_sb3(), make_batch()
    head, obs, actions = head_like(model), batch["obs"], batch["actions"]
    with torch.no_grad():
        torch.manual_seed(3)
        sb3_action, sb3_log_prob = model.actor.action_log_prob(obs)
        torch.manual_seed(3)
        action, log_prob = head.rsample_log_prob(obs)
        torch.testing.assert_close(action, sb3_action, rtol=0, atol=1e-5)
        torch.testing.assert_close(log_prob, sb3_log_prob, rtol=0, atol=1e-5)
        assert not torch.allclose(action, head.act(obs), atol=1e-3)  # the draw matters
        torch.testing.assert_close(head.act(obs), model.actor(obs, deterministic=True), rtol=0, atol=1e-6)
        # log-probs of given (buffer) actions, through SB3's own distribution and its atanh
        mean, log_std, _ = model.actor.get_action_dist_params(obs)
        sb3_given = model.actor.action_dist.proba_distribution(mean, log_std).log_prob(actions)
        torch.testing.assert_close(head.log_prob(obs, actions), sb3_given, rtol=0, atol=1e-5)
        torch.testing.assert_close(head.imitation_loss(obs, actions), -sb3_given.mean(), rtol=0, atol=1e-5)


def test_losses_and_gradients_match_sb3_formulas_on_one_batch():
    """SAC.train's formulas with SB3's modules vs genpol's loss functions on the same q values."""
    model, batch = make_sb3(), make_batch()
    head = head_like(model)
    obs, next_obs, actions = batch["obs"], batch["next_obs"], batch["actions"]
    rewards, dones = batch["rewards"].unsqueeze(1), batch["dones"].unsqueeze(1)
    alpha = torch.exp(model.log_ent_coef.detach())

    torch.manual_seed(11)  # SB3, as SAC.train writes it
    actions_pi, log_prob = model.actor.action_log_prob(obs)
    log_prob = log_prob.reshape(-1, 1)
    sb3_temperature = -(model.log_ent_coef * (log_prob + model.target_entropy).detach()).mean()
    with torch.no_grad():
        next_actions, next_log_prob = model.actor.action_log_prob(next_obs)
        next_q, _ = torch.min(torch.cat(model.critic_target(next_obs, next_actions), dim=1), dim=1, keepdim=True)
        next_q = next_q - alpha * next_log_prob.reshape(-1, 1)
        sb3_target = rewards + (1 - dones) * model.gamma * next_q
    sb3_critic = 0.5 * sum(F.mse_loss(current_q, sb3_target) for current_q in model.critic(obs, actions))
    min_q_pi, _ = torch.min(torch.cat(model.critic(obs, actions_pi), dim=1), dim=1, keepdim=True)
    sb3_actor = (alpha * log_prob - min_q_pi).mean()

    torch.manual_seed(11)  # genpol: the head draws the same noise in the same order
    action, head_log_prob = head.rsample_log_prob(obs)
    with torch.no_grad():
        next_action, next_head_log_prob = head.rsample_log_prob(next_obs)
        next_q_heads = ensemble_q(model.critic_target, next_obs, next_action)
    target = td_target(batch["rewards"], batch["dones"], next_q_heads.min(dim=0).values, next_head_log_prob,
                       alpha, model.gamma)
    critic = critic_loss(ensemble_q(model.critic, obs, actions), target, reduction="sb3")
    q_pi = ensemble_q(model.critic, obs, action)
    actor = actor_loss(head_log_prob, q_pi, alpha, q_reduction="min")
    temperature = temperature_loss(model.log_ent_coef, head_log_prob, model.target_entropy, form="log_alpha")

    torch.testing.assert_close(target, sb3_target.squeeze(1), rtol=1e-6, atol=1e-6)
    for ours, theirs in ((critic, sb3_critic), (actor, sb3_actor), (temperature, sb3_temperature)):
        torch.testing.assert_close(ours, theirs, rtol=1e-6, atol=1e-6)
    critic_params = list(model.critic.parameters())
    assert_grads_equal(torch.autograd.grad(critic, critic_params), torch.autograd.grad(sb3_critic, critic_params))
    assert_grads_equal(torch.autograd.grad(temperature, model.log_ent_coef),
                       torch.autograd.grad(sb3_temperature, model.log_ent_coef))
    head_names = [name for name, _ in head.named_parameters()]
    assert head_names == [name for name, _ in model.actor.named_parameters()]
    assert_grads_equal(torch.autograd.grad(actor, list(head.parameters()), retain_graph=True),
                       torch.autograd.grad(sb3_actor, list(model.actor.parameters())))
    # controls: the other published forms give different numbers on this batch
    assert not torch.allclose(actor_loss(head_log_prob, q_pi, alpha, q_reduction="mean"), sb3_actor, atol=1e-4)
    alpha_form = temperature_loss(model.log_ent_coef, head_log_prob, model.target_entropy, form="alpha")
    assert not torch.allclose(alpha_form, sb3_temperature, atol=1e-4)


def test_one_sb3_train_step_equals_a_manual_step_with_genpol_losses():
    model, batch = make_sb3(), make_batch(seed=1)
    model.set_logger(Logger(folder=None, output_formats=[]))
    obs, next_obs = batch["obs"], batch["next_obs"]
    samples = ReplayBufferSamples(obs, batch["actions"], next_obs, batch["dones"].unsqueeze(1),
                                  batch["rewards"].unsqueeze(1))
    model.replay_buffer.sample = lambda batch_size, env=None: samples  # SB3 trains on exactly this batch
    head = head_like(model)
    critic, critic_target = copy.deepcopy(model.critic), copy.deepcopy(model.critic_target)
    log_alpha = model.log_ent_coef.detach().clone().requires_grad_(True)
    before = copy.deepcopy(head.state_dict())
    lr = model.lr_schedule(1.0)
    actor_optimizer = torch.optim.Adam(head.parameters(), lr=lr)
    critic_optimizer = torch.optim.Adam(critic.parameters(), lr=lr)
    alpha_optimizer = torch.optim.Adam([log_alpha], lr=lr)

    torch.manual_seed(5)
    model.train(gradient_steps=1, batch_size=BATCH)

    torch.manual_seed(5)  # genpol's step, in SB3's order (ALGORITHMS.md 12a)
    action, log_prob = head.rsample_log_prob(obs)
    alpha = log_alpha.detach().exp()  # read before the temperature step
    alpha_optimizer.zero_grad()
    temperature_loss(log_alpha, log_prob, model.target_entropy, form="log_alpha").backward()
    alpha_optimizer.step()
    with torch.no_grad():
        next_action, next_log_prob = head.rsample_log_prob(next_obs)
        next_q = ensemble_q(critic_target, next_obs, next_action).min(dim=0).values
        target = td_target(batch["rewards"], batch["dones"], next_q, next_log_prob, alpha, model.gamma)
    critic_optimizer.zero_grad()
    critic_loss(ensemble_q(critic, obs, batch["actions"]), target, reduction="sb3").backward()
    critic_optimizer.step()
    actor_optimizer.zero_grad()
    actor_loss(log_prob, ensemble_q(critic, obs, action), alpha, q_reduction="min").backward()
    actor_optimizer.step()
    with torch.no_grad():
        for parameter, target_parameter in zip(critic.parameters(), critic_target.parameters(), strict=True):
            target_parameter.mul_(1 - model.tau).add_(parameter, alpha=model.tau)

    assert not torch.equal(head.state_dict()["mu.weight"], before["mu.weight"])  # the step moved the actor
    # SB3 leaves each module's last gradients in .grad (the critics': critic loss + actor loss), so
    # do we; they agree tightly. Adam's first step moves an element by ~lr g / (|g| + 1e-8): where g is
    # below Adam's eps (a few actor weights here, g ~ 3e-9), the rounding of the two log-prob formulas
    # (~2e-10 in g) grows to ~1e-6 in the parameter, hence the actor's looser parameter tolerance.
    pairs = ((head, model.actor, 1e-5), (critic, model.critic, 1e-6), (critic_target, model.critic_target, 1e-6))
    for ours, theirs, parameter_atol in pairs:
        named = zip(ours.named_parameters(), theirs.named_parameters(), strict=True)
        for (name, value), (sb3_name, sb3_value) in named:
            assert name == sb3_name
            if ours is not critic_target:
                torch.testing.assert_close(value.grad, sb3_value.grad, rtol=1e-4, atol=1e-7, msg=f"grad {name}")
            torch.testing.assert_close(value, sb3_value, rtol=0, atol=parameter_atol, msg=name)
    assert log_alpha.item() != LOG_ALPHA
    torch.testing.assert_close(log_alpha.grad, model.log_ent_coef.grad, rtol=1e-6, atol=1e-7)
    torch.testing.assert_close(log_alpha.detach(), model.log_ent_coef.detach(), rtol=0, atol=1e-7)


def test_td_target_by_hand_with_and_without_entropy_backup():
    rewards, dones = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.0, 0.0, 1.0])
    next_q, next_log_prob = torch.tensor([10.0, 20.0, 30.0], requires_grad=True), torch.tensor([-1.0, 0.5, 2.0])
    alpha, gamma = torch.tensor(0.2), 0.9
    with_backup = td_target(rewards, dones, next_q, next_log_prob, alpha, gamma)
    # 1 + 0.9 (10 + 0.2), 2 + 0.9 (20 - 0.1), 3 (terminal: no bootstrap)
    torch.testing.assert_close(with_backup, torch.tensor([10.18, 19.91, 3.0]))
    torch.testing.assert_close(td_target(rewards, dones, next_q, None, alpha, gamma), torch.tensor([10.0, 20.0, 3.0]))
    assert not with_backup.requires_grad


def test_rlpd_forms_by_hand_on_three_heads_two_samples():
    q = torch.tensor([[1.0, 2.0], [3.0, 5.0], [0.0, -1.0]], requires_grad=True)
    target = torch.tensor([2.0, 1.0])
    # squared errors: head 0 (1, 1), head 1 (1, 16), head 2 (4, 4)
    torch.testing.assert_close(critic_loss(q, target, reduction="mean"), torch.tensor(27.0 / 6))
    torch.testing.assert_close(critic_loss(q, target, reduction="sb3"), torch.tensor(0.5 * (1 + 8.5 + 4)))
    log_prob, alpha = torch.tensor([-1.0, 0.5]), torch.tensor(0.5)
    # head means 4/3 and 2: mean(-0.5 - 4/3, 0.25 - 2); head minima 0 and -1: mean(-0.5, 1.25)
    rlpd_actor = actor_loss(log_prob, q, alpha, q_reduction="mean")
    torch.testing.assert_close(rlpd_actor, torch.tensor((-0.5 - 4 / 3 - 1.75) / 2))
    torch.testing.assert_close(actor_loss(log_prob, q, alpha, q_reduction="min"), torch.tensor(0.375))
    log_alpha = torch.tensor(math.log(0.5), requires_grad=True)
    rlpd = temperature_loss(log_alpha, log_prob, target_entropy=-0.5, form="alpha")  # H = 0.25
    torch.testing.assert_close(rlpd, torch.tensor(0.5 * (0.25 + 0.5)))
    torch.testing.assert_close(torch.autograd.grad(rlpd, log_alpha)[0], torch.tensor(0.375))
    sb3 = temperature_loss(log_alpha, log_prob, target_entropy=-0.5, form="log_alpha")
    torch.testing.assert_close(sb3, torch.tensor(0.75 * math.log(0.5)))
    torch.testing.assert_close(torch.autograd.grad(sb3, log_alpha)[0], torch.tensor(0.75))


def test_subset_min_takes_the_min_over_a_random_subset_of_heads():
    q = torch.tensor([[3.0, 0.0], [1.0, 5.0], [2.0, -4.0], [7.0, 7.0]])
    torch.testing.assert_close(subset_min(q, 4), torch.tensor([1.0, -4.0]))
    heads = torch.randperm(4, generator=torch.Generator().manual_seed(3))[:2]
    torch.testing.assert_close(subset_min(q, 2, torch.Generator().manual_seed(3)), q[heads].min(dim=0).values)
    singles = {tuple(subset_min(q, 1).tolist()) for _ in range(50)}
    assert singles == {tuple(row) for row in q.tolist()}  # every head gets drawn
    with pytest.raises(ValueError):
        subset_min(q, 5)


def test_exact_tanh_log_prob_matches_torch_and_stays_finite():
    generator = torch.Generator().manual_seed(0)
    mean, log_std = torch.randn(64, 3, generator=generator), 0.3 * torch.randn(64, 3, generator=generator)
    pre_tanh = mean + torch.randn(64, 3, generator=generator) * log_std.exp()
    transform = torch.distributions.transforms.TanhTransform(cache_size=1)
    normal = torch.distributions.Normal(mean, log_std.exp())
    reference = torch.distributions.TransformedDistribution(normal, [transform])
    expected = reference.log_prob(transform(pre_tanh)).sum(-1)  # the cache hands back u, no atanh
    torch.testing.assert_close(tanh_gaussian_log_prob(pre_tanh, mean, log_std, 0.0), expected, rtol=0, atol=1e-5)
    assert not torch.allclose(tanh_gaussian_log_prob(pre_tanh, mean, log_std, 1e-6), expected, atol=1e-5)
    extreme = torch.tensor([[20.0, -20.0]])
    exact = tanh_log_abs_det_jacobian(extreme, 0.0)
    torch.testing.assert_close(exact, torch.tensor([4 * (math.log(2) - 20)]))  # log(1 - tanh^2) -> 2 (log 2 - |u|)
    assert torch.isfinite(tanh_log_abs_det_jacobian(extreme, 1e-6)).all()
    assert torch.isfinite(tanh_gaussian_log_prob(extreme, torch.zeros(1, 2), torch.zeros(1, 2), 0.0)).all()


def test_head_ratio_entropy_candidates_and_capabilities():
    torch.manual_seed(0)
    head = TanhGaussianHead(4, 2, hidden_sizes=(16,))
    obs = torch.randn(8, 4)
    with torch.no_grad():
        _, record = head.sample(obs)
        head.mu.bias.add_(0.3)
        head.log_std.bias.sub_(0.2)
        mean, log_std = head.distribution(obs)
    # the tanh Jacobian cancels: the ratio is exact without it
    exact = tanh_gaussian_log_prob(record["pre_tanh"], mean, log_std, 1e-6) - record["log_prob"]
    torch.testing.assert_close(head.log_ratio(obs, record).log_ratio.squeeze(1), exact, rtol=0, atol=1e-5)
    # the entropy estimate averages to -E[log pi] (one state, many draws)
    many = obs[:1].expand(20000, 4)
    with torch.no_grad():
        _, many_record = head.sample(many)
        entropy = head.log_ratio(many, many_record).entropy.mean()
        _, fresh_log_prob = head.rsample_log_prob(many)
    assert abs(entropy.item() + fresh_log_prob.mean().item()) < 0.05
    torch.manual_seed(9)
    fast = head.candidates(obs, 5)
    torch.manual_seed(9)
    torch.testing.assert_close(fast, PolicyHead.candidates(head, obs, 5), rtol=0, atol=1e-6)
    check_capabilities(head, "SAC", {Capability.REPARAMETERIZED, Capability.LOG_PROB, Capability.CANDIDATES})
    with pytest.raises(HeadCapabilityError, match="gaussian head cannot be trained by SAC"):
        check_capabilities(GaussianHead(4, 2), "SAC", {Capability.LOG_PROB})


def test_two_steps_of_the_sac_algorithm_equal_two_of_stable_baselines3():
    """The tests above wire genpol's losses by hand; this runs genpol's ``SAC`` class itself (its
    ``sb3_gradient_step``: temperature, target, critics, actor on the updated critics, Polyak) against SB3's
    ``SAC.train`` on the same batch and draws, twice, so the second step reads the targets the first moved."""
    from genpol.algorithms.sac import SAC as GenpolSAC
    from genpol.config.offpolicy import SACConfig
    from genpol.storage.replay import ReplayBatch

    model, batch = make_sb3(), make_batch(seed=2)
    model.set_logger(Logger(folder=None, output_formats=[]))
    obs, actions, next_obs = batch["obs"], batch["actions"], batch["next_obs"]
    rewards, dones = batch["rewards"], batch["dones"]
    model.replay_buffer.sample = lambda batch_size, env=None: ReplayBufferSamples(obs, actions, next_obs, dones[:, None],
                                                                                  rewards[:, None])
    algorithm = GenpolSAC(head_like(model), SACConfig(batch_size=BATCH, buffer_size=100), num_envs=1, obs_dim=3,
                          act_dim=1, capacity=100, device=torch.device("cpu"))
    algorithm.critic.load_heads(list(model.critic.q_networks))
    algorithm.critic_target.load_heads(list(model.critic_target.q_networks))
    with torch.no_grad():
        algorithm.log_alpha.fill_(LOG_ALPHA)
    algorithm.sampler.sample = lambda n: ReplayBatch(obs, actions, rewards, next_obs, dones)
    for step in range(2):
        torch.manual_seed(5 + step)
        model.train(gradient_steps=1, batch_size=BATCH)
        torch.manual_seed(5 + step)
        algorithm.sb3_gradient_step()
    for ours, theirs in zip(algorithm.head.parameters(), model.actor.parameters()):
        torch.testing.assert_close(ours, theirs, rtol=0, atol=1e-6)
    for critic, sb3_critic in ((algorithm.critic, model.critic), (algorithm.critic_target, model.critic_target)):
        ours = [p for i in range(2) for p in critic.head_module(i).parameters()]
        theirs = [p for network in sb3_critic.q_networks for p in network.parameters()]
        for a, b in zip(ours, theirs, strict=True):
            torch.testing.assert_close(a, b, rtol=0, atol=1e-6)
    assert algorithm.log_alpha.item() == pytest.approx(model.log_ent_coef.item(), abs=1e-7)
