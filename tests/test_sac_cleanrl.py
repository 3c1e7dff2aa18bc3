"""SAC at CleanRL's settings (``learner.batching=cleanrl``, ``actor_update_interval``, ``critic_lr``,
``temperature_lr``, ``policy.log_std_bound=tanh``) against CleanRL's ``sac_continuous_action.py`` update
written out here with plain torch: the same weights, batches and noise, compared after four env steps.

The written-out update is CleanRL's loop body (commit fe8d8a0): per step a critic step on
``sum_i MSE(Q_i, y)`` with ``y = r + gamma (1 - d) (min Q'_i(s', a') - alpha log pi(a'|s'))``; at every
``policy_frequency``-th step, that many rounds of an actor step on ``mean(alpha log pi - min Q)`` and a
temperature step on ``-log_alpha.exp() (log pi + H)`` with a fresh no-grad sample; then the Polyak
update. Its actor squashes the log-std as ``-5 + 3.5 (tanh(x) + 1)``.
"""

import copy

import pytest
import torch
from torch.distributions import Normal

from genpol.algorithms.sac import SAC
from genpol.config.offpolicy import SACConfig
from genpol.errors import ConfigError
from genpol.heads import TanhGaussianHead
from genpol.storage.replay import ReplayBatch

OBS_DIM, ACT_DIM, BATCH = 3, 2, 8
GAMMA, TAU, POLICY_LR, Q_LR, INTERVAL = 0.99, 0.005, 3e-4, 1e-3, 2


def cleanrl_config(**overrides):
    settings = dict(batching="cleanrl", actor_update_interval=INTERVAL, lr=POLICY_LR, critic_lr=Q_LR,
                    temperature_lr=Q_LR, critic_reduction="sum", temperature_loss="alpha", learning_starts=0,
                    critic_hidden_sizes=[16, 16], batch_size=BATCH, buffer_size=64, gamma=GAMMA, tau=TAU)
    settings.update(overrides)
    return SACConfig(**settings)


def make_batches(count):
    generator = torch.Generator().manual_seed(7)
    return [ReplayBatch(obs=torch.randn(BATCH, OBS_DIM, generator=generator),
                        actions=torch.rand(BATCH, ACT_DIM, generator=generator) * 2 - 1,
                        rewards=torch.randn(BATCH, generator=generator),
                        next_obs=torch.randn(BATCH, OBS_DIM, generator=generator),
                        dones=(torch.rand(BATCH, generator=generator) < 0.3).float())
            for _ in range(count)]


def cleanrl_get_action(actor, obs):
    """CleanRL's ``Actor.get_action`` (log-std bounds -5 and 2, eps 1e-6) on the head's layers."""
    latent = actor.latent_pi(obs)
    mean, log_std = actor.mu(latent), torch.tanh(actor.log_std(latent))
    log_std = -5 + 0.5 * (2 - (-5)) * (log_std + 1)
    normal = Normal(mean, log_std.exp())
    x_t = normal.rsample()
    y_t = torch.tanh(x_t)
    log_prob = (normal.log_prob(x_t) - torch.log(1 - y_t.pow(2) + 1e-6)).sum(1)
    return y_t, log_prob


def cleanrl_steps(actor, q_nets, q_targets, batches):
    """CleanRL's loop body for ``len(batches)`` steps after learning starts (global_step 1, 2, ...)."""
    q_params = [p for q in q_nets for p in q.parameters()]
    q_optimizer = torch.optim.Adam(q_params, lr=Q_LR)
    actor_optimizer = torch.optim.Adam(list(actor.parameters()), lr=POLICY_LR)
    target_entropy = -float(ACT_DIM)
    log_alpha = torch.zeros(1, requires_grad=True)
    alpha = log_alpha.exp().item()
    a_optimizer = torch.optim.Adam([log_alpha], lr=Q_LR)

    def q_min(nets, obs, actions):
        inputs = torch.cat([obs, actions], 1)
        return torch.min(nets[0](inputs), nets[1](inputs)).view(-1)

    for global_step, data in enumerate(batches, start=1):
        with torch.no_grad():
            next_actions, next_log_pi = cleanrl_get_action(actor, data.next_obs)
            min_next = q_min(q_targets, data.next_obs, next_actions) - alpha * next_log_pi
            next_q_value = data.rewards + (1 - data.dones) * GAMMA * min_next
        inputs = torch.cat([data.obs, data.actions], 1)
        qf_loss = sum(torch.nn.functional.mse_loss(q(inputs).view(-1), next_q_value) for q in q_nets)
        q_optimizer.zero_grad()
        qf_loss.backward()
        q_optimizer.step()
        if global_step % INTERVAL == 0:
            for _ in range(INTERVAL):
                pi, log_pi = cleanrl_get_action(actor, data.obs)
                actor_loss = (alpha * log_pi - q_min(q_nets, data.obs, pi)).mean()
                actor_optimizer.zero_grad()
                actor_loss.backward()
                actor_optimizer.step()
                with torch.no_grad():
                    _, log_pi = cleanrl_get_action(actor, data.obs)
                alpha_loss = (-log_alpha.exp() * (log_pi + target_entropy)).mean()
                a_optimizer.zero_grad()
                alpha_loss.backward()
                a_optimizer.step()
                alpha = log_alpha.exp().item()
        with torch.no_grad():
            for q, target in zip(q_nets, q_targets):
                for param, target_param in zip(q.parameters(), target.parameters()):
                    target_param.copy_(TAU * param + (1 - TAU) * target_param)
    return log_alpha.detach()


def test_log_std_bound_tanh_by_hand():
    """``tanh``: min + (max - min)(tanh(x) + 1)/2 of the layer's output x; ``clamp`` clips x."""
    raw = torch.tensor([-3.0, 0.4])
    for bound, expected in (("tanh", -5 + 3.5 * (torch.tanh(raw) + 1)), ("clamp", torch.tensor([-3.0, 0.4]))):
        head = TanhGaussianHead(OBS_DIM, ACT_DIM, hidden_sizes=[4], log_std_min=-5.0, log_std_max=2.0,
                                log_std_bound=bound)
        with torch.no_grad():
            head.log_std.weight.zero_()
            head.log_std.bias.copy_(raw)
        _, log_std = head.distribution(torch.randn(5, OBS_DIM))
        torch.testing.assert_close(log_std, expected.expand(5, ACT_DIM), rtol=0, atol=1e-6)
    with pytest.raises(ConfigError, match="policy.log_std_bound"):
        TanhGaussianHead(OBS_DIM, ACT_DIM, log_std_bound="sigmoid")


def test_cleanrl_batching_equals_cleanrl_update_written_out():
    torch.manual_seed(0)
    head = TanhGaussianHead(OBS_DIM, ACT_DIM, hidden_sizes=[16, 16], log_std_min=-5.0, log_std_max=2.0,
                            log_std_bound="tanh")
    sac = SAC(head, cleanrl_config(), num_envs=1, obs_dim=OBS_DIM, act_dim=ACT_DIM, capacity=64,
              device=torch.device("cpu"), seed=0)
    actor = copy.deepcopy(head)
    q_nets = [copy.deepcopy(sac.critic.head_module(i)) for i in range(2)]
    q_targets = [copy.deepcopy(sac.critic_target.head_module(i)) for i in range(2)]
    batches = make_batches(4)
    feed = iter(batches)
    sac.sampler.sample = lambda size: next(feed)

    torch.manual_seed(11)
    logged = [sac.update() for _ in batches]
    torch.manual_seed(11)
    log_alpha = cleanrl_steps(actor, q_nets, q_targets, batches)

    assert sac.critic_steps == 4 and sac.actor_steps == 4  # two rounds of two actor steps
    assert "policy" not in logged[0] and "policy" in logged[1]  # a critic-only step logs no actor loss
    for ours, theirs in zip(head.parameters(), actor.parameters(), strict=True):
        torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    for index in range(2):
        for ours, theirs in zip(sac.critic.head_module(index).parameters(), q_nets[index].parameters(), strict=True):
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
        for ours, theirs in zip(sac.critic_target.head_module(index).parameters(), q_targets[index].parameters(),
                                strict=True):
            torch.testing.assert_close(ours, theirs, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(sac.log_alpha.detach(), log_alpha, rtol=1e-5, atol=1e-7)
    assert sac.critic_optimizer.param_groups[0]["lr"] == Q_LR
    assert sac.alpha_optimizer.param_groups[0]["lr"] == Q_LR
    assert sac.actor_optimizer.param_groups[0]["lr"] == POLICY_LR
    assert not torch.allclose(log_alpha, torch.zeros(1))  # the temperature moved


def test_actor_update_interval_needs_cleanrl_batching():
    with pytest.raises(ConfigError, match="learner.batching"):
        SACConfig(actor_update_interval=2)
    with pytest.raises(ConfigError, match="learner.actor_update_interval"):
        SACConfig(batching="cleanrl", actor_update_interval=0)
    with pytest.raises(ConfigError, match="learner.temperature_lr"):
        SACConfig(temperature_lr=0.0)


def test_cleanrl_settings_train_through_the_api(tmp_path):
    """The pair's settings (bench/learning_parity.py) end to end on Pendulum: 100 random steps, then
    critic steps every env step and two-step actor rounds every second one (eager; the pair compiles)."""
    from genpol.api import train

    summary = train(env="pendulum", learner="sac", policy="tanh_gaussian", total_steps=300, seed=0,
                    run_dir=tmp_path / "run",
                    overrides=["env.num_envs=1", "learner.batching=cleanrl", "learner.actor_update_interval=2",
                               "learner.critic_lr=1e-3", "learner.temperature_lr=1e-3", "learner.critic_reduction=sum",
                               "learner.temperature_loss=alpha", "learner.learning_starts=100",
                               "learner.iteration_steps=100", "learner.batch_size=32", "policy.log_std_min=-5",
                               "policy.log_std_bound=tanh", "learner.critic_hidden_sizes=[32,32]",
                               "policy.hidden_sizes=[32,32]", "pipeline.video=false", "logger.progress_bar=false",
                               "pipeline.eval_episodes=1"])
    assert summary["env_steps"] == 300
    rows = (tmp_path / "run" / "progress.jsonl").read_text().splitlines()
    assert '"losses/policy"' in rows[-1] and '"losses/value"' in rows[-1]
