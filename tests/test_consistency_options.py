"""The options that reproduce the consistency references' code (Ding & Jin's, CPQL's) where genpol's defaults
differ (docs/fidelity.md, Departures): each against values computed by hand or recorded from their code,
and each default against genpol's earlier behaviour."""

import math

import pytest
import torch

from genpol.algorithms.qgradient import QGradientActor
from genpol.config.offpolicy import QGradientConfig
from genpol.errors import ConfigError
from genpol.heads import ConsistencyHead, head_from_spec
from genpol.heads.consistency import ct_num_scales, ema_update_due, karras_boundaries
from genpol.heads.consistency_training import pseudo_huber_per_dim
from genpol.nets import sinusoidal_time_embedding
from genpol.runners.offline_rl import OfflineRLRunner
from genpol.storage.replay import OfflineReplay, ReplayBatch
from genpol.updaters.sac_losses import critic_loss

OBS_DIM, ACT_DIM = 3, 2


def make_learner(**overrides):
    torch.manual_seed(0)
    cfg = QGradientConfig(batch_size=4, learning_starts=0, critic_hidden_sizes=[8], act_candidates=2, **overrides)
    head = ConsistencyHead(OBS_DIM, ACT_DIM, hidden_sizes=(8,))
    return QGradientActor(head, cfg, total_steps=100, num_envs=1, obs_dim=OBS_DIM, act_dim=ACT_DIM, capacity=16,
                          device=torch.device("cpu"))


# --------------------------------------------------------------------------- time input of F_theta
def test_the_references_time_inputs_are_their_embeddings_by_hand():
    """Transformer frequencies for dim 8: 10000^(-k/3), k = 0..3; Ding & Jin embed tau itself, CPQL
    250 log tau; genpol's default stays sin/cos(2^k pi u) of the log-scaled level."""
    frequencies = [1.0, 10000 ** (-1 / 3), 10000 ** (-2 / 3), 1e-4]
    tau = torch.tensor([0.5, 2.0], dtype=torch.float64)
    heads = {name: ConsistencyHead(OBS_DIM, ACT_DIM, hidden_sizes=(8,), time_dim=8, time_input=name).double()
             for name in ("genpol", "ding_jin", "cpql")}
    for name, scalar in (("ding_jin", [0.5, 2.0]), ("cpql", [250 * math.log(0.5), 250 * math.log(2.0)])):
        expected = torch.tensor([[math.sin(x * f) for f in frequencies] + [math.cos(x * f) for f in frequencies]
                                 for x in scalar], dtype=torch.float64)
        assert torch.allclose(heads[name].network.time_embedding(tau), expected, rtol=0, atol=1e-12)
    u = torch.log(tau / 0.002) / math.log(80.0 / 0.002)
    assert torch.equal(heads["genpol"].network.time_embedding(tau), sinusoidal_time_embedding(u, 8))
    assert ConsistencyHead(OBS_DIM, ACT_DIM).config.time_input == "genpol"
    assert head_from_spec(heads["cpql"].spec()).network.time_input == "cpql"  # saved with the policy
    # no parameters of its own: the same state dict under every input, so weights move between them
    assert heads["ding_jin"].state_dict().keys() == heads["genpol"].state_dict().keys()
    with pytest.raises(ConfigError, match="policy.time_input"):
        ConsistencyHead(OBS_DIM, ACT_DIM, time_input="raw")


# --------------------------------------------------------------------------- critic loss scale
def test_the_summed_critic_loss_is_twice_sb3s():
    """q = [[1, 2], [3, 5]], y = [0, 1]: MSE_1 = (1 + 1) / 2 = 1, MSE_2 = (9 + 16) / 2 = 12.5."""
    q, target = torch.tensor([[1.0, 2.0], [3.0, 5.0]]), torch.tensor([0.0, 1.0])
    assert critic_loss(q, target, "sum").item() == 13.5
    assert critic_loss(q, target, "sb3").item() == 6.75
    assert QGradientConfig(critic_reduction="sum").critic_reduction == "sum"
    assert QGradientConfig().critic_reduction == "sb3"


# --------------------------------------------------------------------------- EMA before its start
def test_ema_update_due_by_hand():
    """every 5, start 1000. genpol (copy): a copy at 5, 10, ..., 995, the average from 1000 on. The
    references' step_ema checks its count before incrementing it: their counter is steps - 1, and nothing
    happens before their counter reaches 1000, so the first average follows the 1001st update."""
    copy = {steps: ema_update_due(steps, 5, 1000, "copy") for steps in (0, 1, 5, 995, 1000, 1001, 1005)}
    assert copy == {0: "copy", 1: None, 5: "copy", 995: "copy", 1000: "average", 1001: None, 1005: "average"}
    hold = {steps: ema_update_due(steps, 5, 1000, "hold") for steps in (0, 1, 5, 6, 1000, 1001, 1005, 1006)}
    assert hold == {0: None, 1: None, 5: None, 6: None, 1000: None, 1001: "average", 1005: None, 1006: "average"}
    assert [ema_update_due(steps, 5, 0, "hold") for steps in (1, 2, 6)] == ["average", None, "average"]


def test_the_held_ct_target_keeps_its_initial_weights_until_the_start():
    """Online weights all 3, target all 1, decay 0.9, every step, start 2. hold: untouched by the CT
    steps at counts 0, 1, 2 (their counter -1, 0, 1), then 0.9 * 1 + 0.1 * 3 = 1.2. copy: 3 at once."""
    for warmup, after_three, after_four in (("hold", 1.0, 1.2), ("copy", 3.0, 3.0)):
        head = ConsistencyHead(OBS_DIM, ACT_DIM, hidden_sizes=(8,), target_warmup=warmup, target_start=2,
                               target_every=1, target_decay=0.9)
        with torch.no_grad():
            for online, target in zip(head.network.parameters(), head.target.parameters()):
                online.fill_(3.0)
                target.fill_(1.0)
        obs, actions = torch.randn(4, OBS_DIM), torch.rand(4, ACT_DIM) * 2 - 1
        for _ in range(3):
            head.imitation_loss(obs, actions)
        assert all(torch.all(t == after_three) for t in head.target.parameters()), warmup
        head.imitation_loss(obs, actions)
        assert all(torch.allclose(t, torch.full_like(t, after_four)) for t in head.target.parameters()), warmup


def test_the_held_ema_actor_keeps_the_initial_actor_until_the_start():
    """Three gradient steps with actor_ema_start 2, every step, decay 0.9: hold leaves the EMA actor at the
    initial actor after steps 1 and 2 and averages after step 3 (their counter 2); copy follows the actor."""
    algorithm = make_learner(actor_ema_warmup="hold", actor_ema_start=2, actor_ema_every=1, actor_ema_decay=0.9)
    initial = [p.detach().clone() for p in algorithm.ema_head.parameters()]
    batch = ReplayBatch(torch.randn(4, OBS_DIM), torch.rand(4, ACT_DIM) * 2 - 1, torch.randn(4),
                        torch.randn(4, OBS_DIM), torch.zeros(4))
    for _ in range(2):
        algorithm.gradient_step(batch)
    assert all(torch.equal(e, p) for e, p in zip(algorithm.ema_head.parameters(), initial))
    algorithm.gradient_step(batch)
    assert all(torch.allclose(e, 0.9 * p0 + 0.1 * p, atol=1e-7)
               for e, p0, p in zip(algorithm.ema_head.parameters(), initial, algorithm.head.parameters()))
    copying = make_learner(actor_ema_start=2, actor_ema_every=1, actor_ema_decay=0.9)
    copying.gradient_step(batch)
    assert all(torch.equal(e, p) for e, p in zip(copying.ema_head.parameters(), copying.head.parameters()))


# --------------------------------------------------------------------------- N(k) schedule
def scales_drawn(head, steps):
    drawn = []
    head.consistency_training_loss = lambda obs, actions, num_scales: drawn.append(num_scales) or torch.zeros(())
    for _ in range(steps):
        head.imitation_loss(torch.zeros(2, OBS_DIM), torch.zeros(2, ACT_DIM))
    return drawn


def test_the_repeating_ct_schedule_restarts_every_period_from_step_zero():
    """s0 = 2, ct_final_scales 3 (their final_timesteps 4), K = 4: N(j) = ceil(sqrt(j / 4 (16 - 4) + 4) - 1) + 1
    = 2, 3, 4, 4 for j = 0..3, then again (Ding & Jin's timesteps_schedule(itr, iterations) per train call).
    genpol's default counts from 1 and stays at the last value: 3, 4, 4, 4, 4, ..."""
    options = dict(hidden_sizes=(8,), ct_initial_scales=2, ct_final_scales=3, ct_total_steps=4)
    assert scales_drawn(ConsistencyHead(OBS_DIM, ACT_DIM, ct_schedule_repeats=True, **options), 8) == \
        [2, 3, 4, 4, 2, 3, 4, 4]
    assert scales_drawn(ConsistencyHead(OBS_DIM, ACT_DIM, **options), 8) == [3, 4, 4, 4, 4, 4, 4, 4]
    # their N at itr 1, 100, 25000, 49999 of a 50 000-step call (recorded from their code by
    # bench/parity/consistency_ac.py): genpol's formula with final 149 (their 150 enters as 150^2)
    assert [ct_num_scales(k, 50_000, 2, 149) for k in (0, 1, 100, 25_000, 49_999)] == [2, 3, 7, 107, 150]


# --------------------------------------------------------------------------- TD target options
class FixedCritic(torch.nn.Module):
    """Returns ``values [E, rows]`` and records the observations it was asked about."""

    def __init__(self, values):
        super().__init__()
        self.values, self.seen = values, []

    def forward(self, obs, actions, heads=None):
        self.seen.append(obs.clone())
        return self.values


def td_target_with(algorithm, values, rewards, dones, next_obs):
    critic = FixedCritic(values)
    algorithm.critic_target.forward = critic.forward
    algorithm.ema_head.rsample = lambda obs: torch.zeros(obs.shape[0], ACT_DIM)
    batch = ReplayBatch(torch.zeros(len(rewards), OBS_DIM), torch.zeros(len(rewards), ACT_DIM), rewards, next_obs,
                        dones)
    return algorithm._td_target(batch, torch.zeros(()), None), critic.seen


def test_q_norm_divides_the_target_by_its_unbiased_std():
    """min over heads [2, 2, 6]; y = [1 + 0.5 2, 2 + 0.5 2, 3 + 0] = [2, 3, 3]; unbiased std sqrt(1/3)."""
    values = torch.tensor([[2.0, 4.0, 6.0], [4.0, 2.0, 8.0]])
    rewards, dones = torch.tensor([1.0, 2.0, 3.0]), torch.tensor([0.0, 0.0, 1.0])
    plain, _ = td_target_with(make_learner(gamma=0.5), values, rewards, dones, torch.zeros(3, OBS_DIM))
    assert plain.tolist() == [2.0, 3.0, 3.0]
    normed, _ = td_target_with(make_learner(gamma=0.5, q_norm=True), values, rewards, dones, torch.zeros(3, OBS_DIM))
    scale = math.sqrt(1 / 3) + 1e-6
    assert torch.allclose(normed, torch.tensor([2 / scale, 3 / scale, 3 / scale]), rtol=1e-6)


def test_max_q_backup_takes_each_critics_max_over_samples_then_the_min():
    """2 samples per next state, rows s0, s0, s1, s1: head 0 [1, 5 | 2, 0] -> max [5, 2], head 1 [3, 4 | 7, 1]
    -> [4, 7]; min [4, 2]; y = r + 0.5 (1 - d) [4, 2] = [1 + 2, 1 + 1]."""
    values = torch.tensor([[1.0, 5.0, 2.0, 0.0], [3.0, 4.0, 7.0, 1.0]])
    next_obs = torch.tensor([[1.0, 1.0, 1.0], [2.0, 2.0, 2.0]])
    target, seen = td_target_with(make_learner(gamma=0.5, max_q_backup_samples=2), values, torch.ones(2),
                                  torch.zeros(2), next_obs)
    assert target.tolist() == [3.0, 2.0]
    assert torch.equal(seen[0][:, 0], torch.tensor([1.0, 1.0, 2.0, 2.0]))


# --------------------------------------------------------------------------- learning rates
def test_the_critic_learning_rate_is_its_own_and_decays_from_it():
    algorithm = make_learner(lr=3e-5, critic_lr=3e-4)
    assert algorithm.actor_optimizer.param_groups[0]["lr"] == 3e-5
    assert algorithm.critic_optimizer.param_groups[0]["lr"] == 3e-4
    default = make_learner(lr=3e-5)
    assert default.critic_optimizer.param_groups[0]["lr"] == 3e-5
    rows = torch.arange(8)
    offline = OfflineReplay(torch.randn(9, OBS_DIM), torch.rand(9, ACT_DIM) * 2 - 1, torch.randn(9),
                            torch.zeros(9, dtype=torch.bool), rows, rows + 1, checksum=1, seed=0)
    runner = OfflineRLRunner(make_learner(lr=3e-5, critic_lr=3e-4, offline_lr_decay=True), offline, steps=2,
                             batch_size=4)
    runner.train_step()
    runner.train_step()  # at step 1 of 2: (1 + cos(pi / 2)) / 2 = 0.5 of each rate
    algorithm = runner.algorithm
    assert algorithm.actor_optimizer.param_groups[0]["lr"] == pytest.approx(1.5e-5, rel=1e-12)
    assert algorithm.critic_optimizer.param_groups[0]["lr"] == pytest.approx(1.5e-4, rel=1e-12)


def test_the_stepped_lr_decay_moves_once_per_block_over_its_own_horizon():
    """every 5, horizon 4: steps 0-4 at lr, 5-9 at lr (1 + cos(pi / 4)) / 2. Ding & Jin's offline.py
    (a scheduler step per 50 000-step train call, T_max 2000): after 2M steps, 40 scheduler steps, their
    CosineAnnealingLR reads 2.997040092642405e-4 from 3e-4 (recorded by bench/parity/consistency_ac.py)."""
    rows = torch.arange(8)
    offline = OfflineReplay(torch.randn(9, OBS_DIM), torch.rand(9, ACT_DIM) * 2 - 1, torch.randn(9),
                            torch.zeros(9, dtype=torch.bool), rows, rows + 1, checksum=1, seed=0)
    learner = make_learner(lr=1e-3, offline_lr_decay=True, offline_lr_decay_every=5, offline_lr_decay_horizon=4)
    runner = OfflineRLRunner(learner, offline, steps=10, batch_size=4)
    rates = []
    for step in range(10):
        learner.offline_steps = step
        rates.append(runner.decayed_lr(1e-3))
    assert rates[:5] == [1e-3] * 5
    assert rates[5:] == pytest.approx([1e-3 * (1 + math.cos(math.pi / 4)) / 2] * 5, rel=1e-12)
    theirs = make_learner(lr=3e-4, offline_lr_decay=True, offline_lr_decay_every=50_000,
                          offline_lr_decay_horizon=2000)
    their_runner = OfflineRLRunner(theirs, offline, steps=2_000_000, batch_size=4)
    theirs.offline_steps = 2_000_000
    assert their_runner.decayed_lr(3e-4) == pytest.approx(2.997040092642405e-4, rel=1e-12)
    default = OfflineRLRunner(make_learner(lr=1e-3, offline_lr_decay=True), offline, steps=10, batch_size=4)
    default.algorithm.offline_steps = 3
    assert default.decayed_lr(1e-3) == 1e-3 * (1 + math.cos(math.pi * 3 / 10)) / 2  # genpol's: every step


# --------------------------------------------------------------------------- CT distance, level dtype
def test_the_per_dim_pseudo_huber_and_the_levels_dtype():
    """d = [0.003, 0.004], c = 0.00054 sqrt(2): mean of sqrt(d_i^2 + c^2) - c (Ding & Jin's improved-CT
    distance); the Karras levels come back in the dtype asked for, float32 by default as before."""
    c = 0.00054 * math.sqrt(2)
    expected = ((math.sqrt(0.003**2 + c * c) - c) + (math.sqrt(0.004**2 + c * c) - c)) / 2
    got = pseudo_huber_per_dim(torch.tensor([[0.003, 0.004]], dtype=torch.float64))
    assert got.item() == pytest.approx(expected, rel=1e-12)
    assert ConsistencyHead(OBS_DIM, ACT_DIM, ct_distance="pseudo_huber_per_dim").config.ct_distance == \
        "pseudo_huber_per_dim"
    levels = karras_boundaries(3, dtype=torch.float64)
    middle = (0.002 ** (1 / 7) + 0.5 * (80 ** (1 / 7) - 0.002 ** (1 / 7))) ** 7
    assert levels.dtype == torch.float64 and levels[1].item() == pytest.approx(middle, rel=1e-15)
    assert karras_boundaries(3).dtype == torch.float32
    assert torch.equal(karras_boundaries(3), levels.float())
