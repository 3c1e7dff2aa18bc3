"""The consistency head's math against independent formulas and torch.distributions, its training
state, and its configuration (the contract tests are in test_heads.py; learning in
test_consistency_learning.py)."""

import io
import math

import pytest
import torch
from torch import nn

from genpol.heads import ConsistencyHead, head_from_spec
from genpol.heads.consistency import (consistency_coefficients, ct_num_scales, karras_boundaries,
                                     lognormal_level_weights, pseudo_huber)

OBS_DIM, ACT_DIM, BATCH = 4, 3, 16


def small_head(**kwargs):
    return ConsistencyHead(OBS_DIM, ACT_DIM, hidden_sizes=(32, 32), **kwargs)


def test_boundary_condition_holds_exactly():
    head = small_head()
    noisy, obs = torch.randn(BATCH, ACT_DIM) * 3, torch.randn(BATCH, OBS_DIM)
    assert torch.equal(head.consistency(noisy, torch.full((BATCH,), 0.002), obs), noisy)


def test_coefficients_match_the_formulas():
    for tau in (0.002, 0.01, 0.5, 2.0, 80.0):
        c_skip, c_out = consistency_coefficients(torch.tensor(tau, dtype=torch.float64))
        assert math.isclose(c_skip.item(), 0.25 / ((tau - 0.002) ** 2 + 0.25), rel_tol=1e-12)
        assert math.isclose(c_out.item(), 0.5 * (tau - 0.002) / math.sqrt(tau**2 + 0.25), rel_tol=1e-12, abs_tol=1e-15)


def test_karras_boundaries_and_the_ct_schedule():
    boundaries = karras_boundaries(5)
    expected = [(0.002 ** (1 / 7) + i / 4 * (80 ** (1 / 7) - 0.002 ** (1 / 7))) ** 7 for i in range(5)]
    assert torch.allclose(boundaries.double(), torch.tensor(expected, dtype=torch.float64), rtol=1e-6)
    assert boundaries[0].item() == pytest.approx(0.002) and boundaries[-1].item() == pytest.approx(80.0)
    scales = [ct_num_scales(k, 1000) for k in range(0, 1001, 50)]
    assert scales[0] == 2 and scales[-1] == 151 and scales == sorted(scales)
    # N(k) = ceil(sqrt(k/K ((s1 + 1)^2 - s0^2) + s0^2) - 1) + 1 at k = 250 of 1000
    assert ct_num_scales(250, 1000) == math.ceil(math.sqrt(0.25 * (151**2 - 4) + 4) - 1) + 1 == 76
    with pytest.raises(ValueError, match="at least 2 scales"):
        karras_boundaries(1)


class ConstantOutput(nn.Module):
    """F(noisy, tau, obs) = a fixed vector, so f is known in closed form."""

    def __init__(self, value):
        super().__init__()
        self.value = torch.tensor(value)

    def forward(self, noisy, tau, obs):
        return self.value.expand_as(noisy)


@pytest.mark.parametrize("scaled", [False, True])
def test_ct_loss_on_a_hand_case(scaled):
    head = ConsistencyHead(1, 1, hidden_sizes=(4,), ct_loss_scale=scaled)
    head.network, head.target = ConstantOutput([0.2]), ConstantOutput([-0.1])
    obs, action, noise = torch.zeros(1, 1), torch.tensor([[0.3]]), torch.tensor([[0.5]])
    tau_low, tau_high = 1.0, 80.0
    skip_high, out_high = 0.25 / (79.998**2 + 0.25), 0.5 * 79.998 / math.sqrt(80**2 + 0.25)
    skip_low, out_low = 0.25 / (0.998**2 + 0.25), 0.5 * 0.998 / math.sqrt(1 + 0.25)
    prediction = skip_high * (0.3 + 80 * 0.5) + out_high * 0.2
    target = skip_low * (0.3 + 1.0 * 0.5) + out_low * -0.1
    expected = (prediction - target) ** 2 * (100 / 79.0 if scaled else 1.0)
    loss = head.ct_loss_at(obs, action, torch.tensor([tau_low]), torch.tensor([tau_high]), noise)
    assert loss.item() == pytest.approx(expected, rel=1e-5)
    # at the smallest boundary the target is the noisy action itself: f(a + eps xi, eps) = a + eps xi
    loss = head.ct_loss_at(obs, action, torch.tensor([0.002]), torch.tensor([tau_high]), noise)
    expected = (prediction - (0.3 + 0.002 * 0.5)) ** 2 * (100 / 79.998 if scaled else 1.0)
    assert loss.item() == pytest.approx(expected, rel=1e-5)


def test_lognormal_level_pairs_follow_improved_cts_formula_and_the_loss_draws_them():
    """p(n) = (erf((log tau_{n+1} + 1.1) / (2 sqrt 2)) - erf((log tau_n + 1.1) / (2 sqrt 2))) / Z, by hand with
    math.erf; the head's CT loss draws its pairs with those frequencies (20 000 draws, within 4 standard errors)."""
    boundaries = karras_boundaries(6)
    cdf = [math.erf((math.log(tau) + 1.1) / (2.0 * math.sqrt(2.0))) for tau in boundaries.tolist()]
    expected = torch.tensor([high - low for low, high in zip(cdf[:-1], cdf[1:])])
    expected = expected / expected.sum()
    assert torch.allclose(lognormal_level_weights(boundaries), expected.float(), atol=1e-6)

    head, draws = small_head(ct_noise_sampling="lognormal"), 20_000
    seen = []
    head.ct_loss_at = lambda obs, actions, tau_low, tau_high, noise: seen.append(tau_low) or torch.zeros(())
    torch.manual_seed(0)
    head.consistency_training_loss(torch.zeros(draws, OBS_DIM), torch.zeros(draws, ACT_DIM), num_scales=6)
    counts = torch.stack([(seen[0] == tau).sum() for tau in boundaries[:-1]]).double()
    standard_error = (expected * (1 - expected) / draws).sqrt()
    assert ((counts / draws - expected).abs() <= 4 * standard_error + 1e-12).all()
    with pytest.raises(ValueError, match="policy.ct_noise_sampling must be uniform or lognormal, got 'beta'"):
        small_head(ct_noise_sampling="beta")


def test_pseudo_huber_matches_its_formula():
    difference = torch.tensor([[0.3, -0.4], [0.0, 0.0]])
    c = 0.00054 * math.sqrt(2)
    assert torch.allclose(pseudo_huber(difference), torch.tensor([math.sqrt(0.25 + c * c) - c, 0.0]))


def test_imitation_loss_counts_steps_and_keeps_the_target_on_schedule():
    head = small_head(target_start=10, target_every=5, target_decay=0.9, ct_total_steps=100)
    obs, actions = torch.randn(BATCH, OBS_DIM), torch.rand(BATCH, ACT_DIM) * 2 - 1
    optimizer = torch.optim.Adam([p for p in head.parameters() if p.requires_grad], lr=1e-2)
    before = [p.clone() for p in head.target.parameters()]
    for step in range(12):
        online = [p.detach().clone() for p in head.network.parameters()]
        target = [p.detach().clone() for p in head.target.parameters()]
        loss = head.imitation_loss(obs, actions)
        # the refresh happens at the start of steps 0, 5 (copies) and 10 (EMA), from the weights then
        if step in (0, 5):
            assert all(torch.equal(t, o) for t, o in zip(head.target.parameters(), online))
        elif step == 10:
            assert all(torch.allclose(t, 0.9 * old + 0.1 * o, atol=1e-6)
                       for t, old, o in zip(head.target.parameters(), target, online))
        else:
            assert all(torch.equal(t, old) for t, old in zip(head.target.parameters(), target))
        optimizer.zero_grad()
        loss.backward()
        assert all(p.grad is None for p in head.target.parameters())
        optimizer.step()
    assert head.ct_step == 12 and not all(torch.equal(a, b) for a, b in zip(before, head.target.parameters()))
    head.eval()
    head.imitation_loss(obs, actions)  # evaluation mode takes no step
    assert head.ct_step == 12
    buffer = io.BytesIO()
    torch.save(head.state_dict(), buffer)
    buffer.seek(0)
    rebuilt = head_from_spec(head.spec())
    rebuilt.load_state_dict(torch.load(buffer, weights_only=True))
    assert rebuilt.ct_step == 12
    assert all(torch.equal(a, b) for a, b in zip(rebuilt.target.parameters(), head.target.parameters()))


@pytest.mark.parametrize("chunk", [(1, 1), (3, 4)], ids=["single-actions", "chunks"])
def test_on_policy_log_probs_and_kl_match_torch_distributions(chunk):
    """Every transition of the chain is Gaussian; with chunks (3 actions of 1 dim executed out of 4
    predicted) the last transition counts only the executed dims (the rest is a leaf, marginalized)."""
    act_steps, horizon_steps = chunk
    head = small_head(sampling_steps=3, min_sampling_std=0.2, act_steps=act_steps, horizon_steps=horizon_steps)
    chunk_dim = horizon_steps * ACT_DIM // act_steps
    dims = [chunk_dim, chunk_dim, ACT_DIM]  # dims of each transition that enter its log-prob
    obs = torch.randn(BATCH, OBS_DIM)
    with torch.no_grad():
        action, record = head.sample(obs)
    chain = record["chain"]
    assert chain.shape == (BATCH, 4, chunk_dim) and record["log_prob"].shape == (BATCH, 3)
    assert torch.equal(action, chain[:, -1, :ACT_DIM].clamp(-1, 1))
    taus = [80.0, 41.0, 2.0]  # linspace(2, 80, 3), descending
    stds = [math.sqrt(41.0**2 - 0.002**2), math.sqrt(2.0**2 - 0.002**2), 0.2]
    assert torch.allclose(head.sampling_taus, torch.tensor(taus)) and torch.allclose(head.step_stds, torch.tensor(stds))

    def step_distributions():
        with torch.no_grad():
            means = [head.consistency(chain[:, i], torch.full((BATCH,), taus[i]), obs) for i in range(3)]
            return [torch.distributions.Normal(means[i][:, :dims[i]], stds[i]) for i in range(3)]

    old = step_distributions()
    expected_old = torch.stack([old[i].log_prob(chain[:, i + 1, :dims[i]]).sum(-1) for i in range(3)], dim=1)
    assert torch.allclose(record["log_prob"], expected_old, atol=1e-4)
    with torch.no_grad():
        for parameter in head.network.parameters():
            parameter.add_(0.05 * torch.randn_like(parameter))
    new = step_distributions()
    expected_new = torch.stack([new[i].log_prob(chain[:, i + 1, :dims[i]]).sum(-1) for i in range(3)], dim=1)
    assert torch.allclose(head.log_ratio(obs, record).log_ratio, expected_new - expected_old, atol=1e-4)
    expected_kl = torch.stack([torch.distributions.kl_divergence(old[i], new[i]).sum(-1) for i in range(3)]).mean(0)
    assert torch.allclose(head.kl(obs, record), expected_kl, rtol=1e-4, atol=1e-7)
    assert head.kl(obs, record).min() > 0


def test_rsample_and_candidates_are_differentiable_and_bounded():
    head = small_head()
    obs = torch.randn(BATCH, OBS_DIM) * 3
    actions = head.rsample(obs)
    assert actions.requires_grad and actions.abs().max() <= 1
    candidates = head.candidates(obs, 7)
    assert candidates.shape == (BATCH, 7, ACT_DIM) and candidates.requires_grad
    candidates.sum().backward()
    assert head.network.body[0].weight.grad.abs().sum() > 0
    assert not torch.equal(candidates[:, 0], candidates[:, 1])


def test_stochastic_act_is_the_reference_sampler_until_an_on_policy_learner_switches_it():
    """BC and the Q-gradient learners train and act with the reference sampler (no noise after its last
    consistency step: rsample's forward pass); an on-policy learner's ``act_as_sampled`` switches a stochastic
    act to the chain (its last step adds min_sampling_std noise), and the deterministic act stays."""
    head = small_head()
    obs = torch.randn(BATCH, OBS_DIM)
    with torch.no_grad():
        deterministic = head.act(obs)
        torch.manual_seed(3)
        reference = head.rsample(obs)
        torch.manual_seed(3)
        assert torch.equal(head.act(obs, deterministic=False), reference)
        head.act_as_sampled()
        torch.manual_seed(3)
        chain = head.act(obs, deterministic=False)
        torch.manual_seed(3)
        assert torch.equal(chain, head.sample(obs)[0]) and not torch.equal(chain, reference)
        assert torch.equal(head.act(obs), deterministic)


def test_bad_configuration_names_the_key():
    from genpol.api import compose_config
    from genpol.config import ConfigError
    from genpol.configure import validate

    base = ["env=multigoal", "policy=consistency", "learner=ppo"]
    with pytest.raises(ConfigError, match="policy.ct_distance"):
        validate(compose_config([*base, "policy.ct_distance=l1"]))
    with pytest.raises(ConfigError, match="policy.tau_min_sampling"):
        validate(compose_config([*base, "policy.tau_min_sampling=0.001"]))
    with pytest.raises(ConfigError, match="consistency head cannot be trained by learner=sac.*log-prob"):
        validate(compose_config([*base[:2], "learner=sac"]))
    config = validate(compose_config([*base, "pipeline=offline_to_online", "dataset.path=x.hdf5",
                                      "pipeline.pretrain_steps=1234"]))
    assert config.policy.ct_total_steps == 1234  # the CT schedule spans the pretraining run
    assert validate(compose_config(base)).policy.ct_total_steps == 20000
