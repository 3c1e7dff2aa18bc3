"""MaxEntDP (genpol/algorithms/maxentdp.py, heads/vp_diffusion.py, heads/vp_schedule.py,
updaters/maxentdp_losses.py), each piece against math written out here independently: the log-prob
estimate on Gaussians with a known density, the truncated-normal sampler against scipy, the QNE target,
the DDPM sampler, the TD target and critic loss in float64 plain loops, the temperature's Adam step, and a
short training run whose resume reproduces the uninterrupted run bit for bit."""

from __future__ import annotations

import copy
import json
import math

import numpy as np
import pytest
import torch
from omegaconf import OmegaConf

from conftest import assert_trees_equal, final_checkpoint, rewound_copy

from genpol.algorithms.maxentdp import MaxEntDP, MaxQPolicy
from genpol.config.base import flatten_keys as flatten
from genpol.config.maxentdp import MaxEntDPConfig
from genpol.errors import ConfigError
from genpol.heads import VPDiffusionHead
from genpol.heads.vp_schedule import estimate_log_prob, log_prob_ceiling
from genpol.storage.replay import ReplayBatch
from genpol.updaters.maxentdp_losses import effective_sample_size, qne_candidates, truncated_standard_normal

T_MIN, T_MAX, S = 1e-3, 0.9946, 0.008


def abar_by_hand(t: float) -> float:
    """The VP cosine schedule, from its definition."""
    return (math.cos((t + S) / (1 + S) * math.pi / 2) / math.cos(S / (1 + S) * math.pi / 2)) ** 2


def gaussian_denoiser(mean: torch.Tensor, std: float):
    """The exact noise predictor E[xi | a_t] of actions ~ N(mean, std^2 I): with v = ab std^2 + 1 - ab,
    E[xi | a_t] = sqrt(1 - ab) (a_t - sqrt(ab) mean) / v; ab = sigmoid(lambda)."""
    def predict(obs, noisy, log_snr):
        ab = torch.sigmoid(log_snr)
        return (1 - ab).sqrt() * (noisy - ab.sqrt() * mean) / (ab * std**2 + 1 - ab)
    return predict


def riemann_expectation(action: np.ndarray, mean: np.ndarray, std: float, levels: int) -> float:
    """The estimate's expectation for N(mean, std^2 I) at ``action`` in closed form: per level
    E||eps_hat - xi||^2 = sum_d (ab (1 - ab) (a - m)^2 + ab^2 std^4) / v^2, on the estimate's grid."""
    grid = [abar_by_hand(t) for t in np.linspace(T_MIN, T_MAX, levels + 1)]
    total = 0.0
    for previous, ab in zip(grid[:-1], grid[1:]):
        v = ab * std**2 + 1 - ab
        error = np.sum((ab * (1 - ab) * (action - mean) ** 2 + ab**2 * std**4) / v**2)
        total += (previous - ab) / (2 * ab * (1 - ab)) * (ab * action.size - error)
    return total - 0.5 * action.size * math.log(2 * math.pi * math.e)


def estimate_copies(mean, std, action, levels, draws, copies, clip, seed=0):
    """``copies`` independent estimates at one action (float64): their mean and standard error."""
    torch.manual_seed(seed)
    actions = torch.tensor(action, dtype=torch.float64).expand(copies, -1).contiguous()
    obs = torch.zeros(copies, 1, dtype=torch.float64)
    values = estimate_log_prob(gaussian_denoiser(torch.tensor(mean, dtype=torch.float64), std), obs, actions,
                               levels, draws, clip=clip)
    return float(values.mean()), float(values.std() / math.sqrt(copies))


def test_log_prob_estimate_of_the_standard_normal_is_its_log_density():
    """N(0, I) (x0 unclipped: its mass leaves the box): the expected integrand is (d - |a|^2) / 2, constant
    in alpha_bar, so only the truncation to [alpha_bar(0.9946), alpha_bar(1e-3)] = [7.1e-5, 0.99996] biases
    the 20-level sum, by (d - |a|^2) / 2 x 1.1e-4 < 2e-4 here. Tolerance: that plus 5 standard errors."""
    action = np.array([0.3, -0.5])
    estimate, error = estimate_copies(np.zeros(2), 1.0, action, levels=20, draws=128, copies=256, clip=False)
    true = -math.log(2 * math.pi) - 0.5 * float(action @ action)
    assert error < 0.01
    assert abs(estimate - true) < 2e-4 + 5 * error, (estimate, true, error)


def test_log_prob_estimate_of_a_narrow_gaussian_in_the_box():
    """N(m, 0.1^2 I) well inside the box, with the sampler's x0 clipping on (the exact denoiser's x0 stays
    within ~0.3 of m, so the clip never binds). 20 levels: the estimate matches its closed-form expectation
    within 5 standard errors, and that expectation lies 1.0-1.5 nats below the true log density (the
    20-point sum's known bias for narrow densities, ALGORITHMS.md 14c). 2000 levels: within 0.05 + 5 SE
    of the true log density (the closed form's own bias there: -0.02)."""
    from scipy import stats  # here: scipy.stats takes ~0.9 s to import at collection
    mean, std, action = np.array([0.2, -0.3]), 0.1, np.array([0.25, -0.28])
    true = float(stats.norm(mean, std).logpdf(action).sum())
    coarse, coarse_error = estimate_copies(mean, std, action, levels=20, draws=64, copies=64, clip=True)
    expected = riemann_expectation(action, mean, std, 20)
    assert abs(coarse - expected) < 5 * coarse_error + 1e-6, (coarse, expected, coarse_error)
    assert -1.5 < expected - true < -1.0
    fine, fine_error = estimate_copies(mean, std, action, levels=2000, draws=4, copies=32, clip=True, seed=1)
    assert abs(riemann_expectation(action, mean, std, 2000) - true) < 0.05
    assert abs(fine - true) < 0.05 + 5 * fine_error, (fine, true, fine_error)


@pytest.mark.parametrize("levels,closed_form_bias", [(20, -0.414), (5, -1.089)])
def test_log_prob_bias_over_the_policys_own_samples(levels, closed_form_bias):
    """What the backup sees: the estimate's error averaged over actions drawn from the policy itself, a 1-D
    N(0.2, 0.1^2) with its exact denoiser. In closed form the average error is sum_k w_k (ab_k - ab_k std^2 / v_k)
    - log(2 pi e) / 2 plus the entropy (E||eps_hat - xi||^2 = ab std^2 / v averaged over a): -0.41 nats at the authors' 20 levels, -1.09 at the CPU-sized 5
    (docs/concepts/maxentdp.md's table). genpol's estimator on 512 sampled actions agrees within 5 SE."""
    from scipy import stats  # here: scipy.stats takes ~0.9 s to import at collection
    mean, std = 0.2, 0.1
    grid = [abar_by_hand(t) for t in np.linspace(T_MIN, T_MAX, levels + 1)]
    mean_estimate = sum((previous - ab) / (2 * ab * (1 - ab)) * (ab - ab * std**2 / (ab * std**2 + 1 - ab))
                        for previous, ab in zip(grid[:-1], grid[1:])) - 0.5 * math.log(2 * math.pi * math.e)
    closed_form = mean_estimate + float(stats.norm(mean, std).entropy())  # the mean log density is -entropy
    assert abs(closed_form - closed_form_bias) < 5e-4, closed_form
    torch.manual_seed(0)
    actions = (mean + std * torch.randn(512, 1, dtype=torch.float64)).clamp(-1, 1)
    estimates = estimate_log_prob(gaussian_denoiser(torch.tensor([mean], dtype=torch.float64), std),
                                  torch.zeros(512, 1, dtype=torch.float64), actions, levels, 32, clip=True)
    errors = estimates.numpy() - stats.norm(mean, std).logpdf(actions.numpy()[:, 0])
    standard_error = errors.std() / math.sqrt(errors.size)
    assert abs(errors.mean() - closed_form_bias) < 5 * standard_error + 1e-3, (errors.mean(), standard_error)


def test_log_prob_estimate_does_not_depend_on_the_chunk_size():
    torch.manual_seed(0)
    head = VPDiffusionHead(4, 2, hidden_sizes=[16, 16], time_hidden_sizes=[8], time_dim=8)
    obs, actions = torch.randn(5, 4), torch.rand(5, 2) * 2 - 1
    noise = torch.randn(5, 3, 4, 2)
    whole = estimate_log_prob(head.predict_noise, obs, actions, 4, 3, noise=noise)
    chunked = estimate_log_prob(head.predict_noise, obs, actions, 4, 3, noise=noise, chunk_rows=7)
    torch.testing.assert_close(chunked, whole, rtol=0, atol=1e-5)


# ----------------------------------------------------------------------------------- truncated normal
@pytest.mark.parametrize("lower,upper", [(-0.5, 2.0), (1.5, 3.0), (-300.0, -2.0), (3.0, 1e3), (-1e3, 1e3), (5.0, 5.5), (9.0, 10.0)])
def test_truncated_normal_respects_bounds_and_has_the_truncated_normal_law(lower, upper):
    """KS test of 20 000 draws (fixed seed) against scipy's truncnorm CDF; intervals on both sides of 0
    (the mirrored branch), reaching into far tails, and nearly degenerate."""
    from scipy import stats  # here: scipy.stats takes ~0.9 s to import at collection
    uniform = torch.rand(20_000, dtype=torch.float64, generator=torch.Generator().manual_seed(3))
    draws = truncated_standard_normal(torch.tensor(lower), torch.tensor(upper), uniform)
    assert draws.dtype == torch.float64 and torch.isfinite(draws).all()
    assert draws.min() >= lower and draws.max() <= upper
    assert stats.kstest(draws.numpy(), stats.truncnorm(lower, upper).cdf).pvalue > 1e-3


def test_truncated_normal_beyond_float64_takes_the_bound_nearer_zero():
    uniform = torch.tensor([0.0, 0.5, 0.999], dtype=torch.float64)
    torch.testing.assert_close(truncated_standard_normal(torch.tensor(-41.0), torch.tensor(-40.0), uniform),
                               torch.full((3,), -40.0, dtype=torch.float64))
    torch.testing.assert_close(truncated_standard_normal(torch.tensor(40.0), torch.tensor(41.0), uniform),
                               torch.full((3,), 40.0, dtype=torch.float64))


def test_qne_candidates_lie_in_the_box_and_map_back_to_the_noisy_action():
    """a0_k = a_t / sqrt(ab) + sqrt((1 - ab) / ab) e_k in [-1, 1], so sqrt(ab) a0_k - sqrt(1 - ab) e_k = a_t:
    the noise that maps each candidate to a_t is -e_k. Checked at noise levels from t = 1e-3 to 0.9946."""
    generator = torch.Generator().manual_seed(0)
    t = torch.linspace(T_MIN, T_MAX, 8, dtype=torch.float64)
    abar = torch.tensor([abar_by_hand(float(x)) for x in t], dtype=torch.float64).unsqueeze(-1)
    actions = torch.rand(8, 3, generator=generator, dtype=torch.float64) * 2 - 1
    actions[0] = 1.0  # a replay action on the edge of the box
    noisy = abar.sqrt() * actions + (1 - abar).sqrt() * torch.randn(8, 3, generator=generator, dtype=torch.float64)
    clean, noise = qne_candidates(noisy, abar, torch.rand(8, 200, 3, generator=generator, dtype=torch.float64))
    assert clean.abs().max() <= 1.0 and torch.isfinite(noise).all()
    torch.testing.assert_close(abar.sqrt().unsqueeze(1) * clean - (1 - abar).sqrt().unsqueeze(1) * noise,
                               noisy.unsqueeze(1).expand_as(clean), rtol=0, atol=1e-9)


def test_a_head_built_in_float64_samples_on_the_float64_schedule():
    """Built with float64 as the default dtype (as the parity harness builds it), the head's tables are the
    schedule's float64 values and it samples. They were float32 whatever the dtype: its first network call
    failed on a float32 log-SNR against float64 weights, and ``.double()`` kept the float32 roundings (1e-8)."""
    previous = torch.get_default_dtype()
    torch.set_default_dtype(torch.float64)
    try:
        head = VPDiffusionHead(3, 2, sampling_steps=5, hidden_sizes=[8], time_hidden_sizes=[8], time_dim=8)
        action = head.act(torch.randn(4, 3), deterministic=False)
    finally:
        torch.set_default_dtype(previous)
    assert action.dtype == torch.float64 and action.shape == (4, 2)
    grid = [abar_by_hand(float(t)) for t in np.linspace(T_MIN, T_MAX, 6)]
    beta = [1 - ab / previous_ab for previous_ab, ab in zip(grid[:-1], grid[1:])]
    assert head.alpha_bar.dtype == head.beta.dtype == torch.float64
    np.testing.assert_allclose(head.alpha_bar.numpy(), grid[1:], rtol=1e-13, atol=0)
    np.testing.assert_allclose(head.beta.numpy(), beta, rtol=1e-12, atol=0)
    np.testing.assert_allclose(head.log_snr.numpy(), [math.log(ab / (1 - ab)) for ab in grid[1:]], rtol=1e-13, atol=0)
    float32_head = VPDiffusionHead(3, 2, sampling_steps=5, hidden_sizes=[8], time_hidden_sizes=[8], time_dim=8)
    assert float32_head.alpha_bar.dtype == torch.float32  # a float32 head keeps float32 tables


# ----------------------------------------------------------------------------------- the learner's losses
OBS_DIM, ACT_DIM = 3, 2


def tiny_learner(**overrides) -> MaxEntDP:
    torch.manual_seed(0)
    head = VPDiffusionHead(OBS_DIM, ACT_DIM, sampling_steps=3, hidden_sizes=[16, 16], time_hidden_sizes=[8], time_dim=8)
    cfg = MaxEntDPConfig(**{"candidates": 6, "log_prob_levels": 3, "log_prob_draws": 4, "critic_hidden_sizes": [8],
                            "batch_size": 3, "buffer_size": 64, "learning_starts": 0, **overrides})
    learner = MaxEntDP(head, cfg, temperature=cfg.temperature("Hopper-v5"), num_envs=1, obs_dim=OBS_DIM,
                       act_dim=ACT_DIM, capacity=64, device=torch.device("cpu"))
    with torch.no_grad():  # targets unlike the online critics, with values spread enough to weight candidates
        for parameter in learner.critic_target.parameters():
            parameter.normal_(0.0, 1.0)
    return learner


def fixed_batch() -> ReplayBatch:
    generator = torch.Generator().manual_seed(11)
    return ReplayBatch(obs=torch.randn(3, OBS_DIM, generator=generator),
                       actions=torch.rand(3, ACT_DIM, generator=generator) * 2 - 1,
                       rewards=torch.randn(3, generator=generator), next_obs=torch.randn(3, OBS_DIM, generator=generator),
                       dones=torch.tensor([0.0, 1.0, 0.0]))


def q_by_hand(critic, obs: np.ndarray, action: np.ndarray) -> np.ndarray:
    """Each critic of a ``QEnsemble`` from its weights, in float64: ReLU layers x W + b."""
    values = []
    for head in range(critic.num_qs):
        hidden = np.concatenate([obs, action])
        for layer, (weight, bias) in enumerate(zip(critic.weights, critic.biases)):
            hidden = hidden @ weight[head].double().detach().numpy() + bias[head, 0].double().detach().numpy()
            if layer < len(critic.weights) - 1:
                hidden = np.maximum(hidden, 0.0)
        values.append(float(hidden[0]))
    return np.array(values)


def test_qne_target_matches_a_float64_loop_over_candidates():
    from scipy import stats  # here: scipy.stats takes ~0.9 s to import at collection
    learner = tiny_learner()
    batch, alpha = fixed_batch(), torch.tensor([0.5])
    t, xi, uniform = learner.draw_qne(3)
    problem = learner.qne_target(batch.obs, batch.actions, t, xi, uniform, alpha)
    for b in range(3):
        ab = abar_by_hand(float(t[b]))
        noisy = math.sqrt(ab) * batch.actions[b].double().numpy() + math.sqrt(1 - ab) * xi[b].double().numpy()
        center, scale = noisy / math.sqrt(ab), math.sqrt((1 - ab) / ab)
        noises, values = [], []
        for k in range(6):  # one candidate at a time
            e = np.array([stats.truncnorm.ppf(float(uniform[b, k, d]), (-1 - center[d]) / scale, (1 - center[d]) / scale)
                          for d in range(ACT_DIM)])
            noises.append(e)
            values.append(q_by_hand(learner.critic_target, batch.obs[b].double().numpy(), center + scale * e).min())
        values = np.array(values) / 0.5
        weights = np.exp(values - values.max()) / np.exp(values - values.max()).sum()
        target = -sum(w * e for w, e in zip(weights, noises))
        np.testing.assert_allclose(problem["noisy"][b].numpy(), noisy, atol=1e-6)
        np.testing.assert_allclose(problem["weights"][b].double().numpy(), weights, atol=2e-5)
        np.testing.assert_allclose(problem["target"][b].double().numpy(), target, atol=2e-5)
        assert abs(float(problem["log_snr"][b]) - math.log(ab / (1 - ab))) < 1e-4
    ess = effective_sample_size(problem["weights"])
    torch.testing.assert_close(ess, 1 / problem["weights"].square().sum(dim=1))
    assert (ess < 5.9).any()  # the weights are not uniform: the test sees the softmax
    chunked = copy.copy(learner)
    chunked.cfg = MaxEntDPConfig(**{**vars(learner.cfg), "chunk_rows": 4})
    torch.testing.assert_close(chunked.qne_target(batch.obs, batch.actions, t, xi, uniform, alpha)["target"],
                               problem["target"], rtol=0, atol=1e-6)


def test_actor_step_regresses_the_noise_network_on_the_qne_target():
    """The actor loss is mean (eps_theta(s, a_t, lambda) - eps*)^2 on the draws of ``draw_qne``, and the
    step runs at the cosine-decayed learning rate of the actor step count."""
    learner = tiny_learner(actor_lr_decay_steps=10)
    learner.actor_steps = 4
    batch, alpha = fixed_batch(), torch.tensor([0.5])
    state = torch.get_rng_state()
    problem = learner.qne_target(batch.obs, batch.actions, *learner.draw_qne(3), alpha)
    with torch.no_grad():
        expected = (learner.head.predict_noise(batch.obs, problem["noisy"], problem["log_snr"]) - problem["target"]
                    ).square().mean()
    torch.set_rng_state(state)
    before = [p.detach().clone() for p in learner.head.parameters()]
    named = learner.actor_step(batch, alpha)
    torch.testing.assert_close(named["policy"], expected)
    assert float(named["actor_lr"]) == pytest.approx(3e-4 * 0.5 * (1 + math.cos(math.pi * 4 / 10)))
    assert learner.actor_steps == 5 and any(not torch.equal(p, q) for p, q in zip(before, learner.head.parameters()))


def sample_by_hand(network, obs: torch.Tensor, draws: list[torch.Tensor], steps: int) -> torch.Tensor:
    """MaxEntDP's DDPM sampler in float64: steps on t = linspace(1e-3, 0.9946, T + 1), x0 clipped, posterior
    mean, noise of std sqrt(beta_k) except at the last step, the action clipped."""
    grid = [abar_by_hand(t) for t in np.linspace(T_MIN, T_MAX, steps + 1)]
    x = draws[0].double()
    for position, k in enumerate(range(steps - 1, -1, -1)):
        ab, previous = grid[k + 1], grid[k]
        beta = 1 - ab / previous
        level = torch.full((x.shape[0], 1), math.log(ab / (1 - ab)), dtype=torch.float64)
        x0 = ((x - math.sqrt(1 - ab) * network(obs.double(), x, level)) / math.sqrt(ab)).clamp(-1, 1)
        x = math.sqrt(previous) * beta / (1 - ab) * x0 + math.sqrt(1 - beta) * (1 - previous) / (1 - ab) * x
        if k > 0:
            x = x + math.sqrt(beta) * draws[position + 1].double()
    return x.clamp(-1, 1)


def test_td_target_and_critic_loss_match_a_float64_hand_computation():
    """y = r + gamma (1 - done) (min_i Q'_i(s', a') - alpha log pi_hat(a'|s')), a' from the sampler and
    log pi_hat a plain loop over actions, levels and draws; loss = sum_i mean_b (Q_i(s, a) - y)^2. The
    draws are torch's, replayed from the same generator state."""
    learner = tiny_learner()
    batch, alpha = fixed_batch(), torch.tensor([0.05])
    assert float(learner.alpha) == pytest.approx(0.05)  # Hopper's temperature (the authors' run.sh)
    state = torch.get_rng_state()
    with torch.no_grad():
        loss, q, target = learner._critic_loss_eager(batch, alpha, None)
    torch.set_rng_state(state)
    draws = [torch.randn(3, ACT_DIM) for _ in range(3)]  # x_T, then the noise of steps 2 and 1
    noise = torch.randn(3, 4, 3, ACT_DIM)  # the estimate's [B, N, T_lp, A]
    network = copy.deepcopy(learner.head.network).double()
    with torch.no_grad():
        next_actions = sample_by_hand(network, batch.next_obs, draws, steps=3)
        grid = [abar_by_hand(t) for t in np.linspace(T_MIN, T_MAX, 4)]
        expected = []
        for b in range(3):
            log_prob = -0.5 * ACT_DIM * math.log(2 * math.pi * math.e)
            for level in range(3):
                ab, previous = grid[level + 1], grid[level]
                errors = []
                for n in range(4):
                    xi = noise[b, n, level].double()
                    noisy = math.sqrt(ab) * next_actions[b] + math.sqrt(1 - ab) * xi
                    eps = network(batch.next_obs[b:b + 1].double(), noisy[None],
                                  torch.tensor([[math.log(ab / (1 - ab))]], dtype=torch.float64))[0]
                    x0 = ((noisy - math.sqrt(1 - ab) * eps) / math.sqrt(ab)).clamp(-1, 1)
                    eps = (noisy - math.sqrt(ab) * x0) / math.sqrt(1 - ab)
                    errors.append(float((eps - xi).square().sum()))
                log_prob += (previous - ab) / (2 * ab * (1 - ab)) * (ab * ACT_DIM - np.mean(errors))
            next_q = q_by_hand(learner.critic_target, batch.next_obs[b].double().numpy(), next_actions[b].numpy()).min()
            expected.append(float(batch.rewards[b]) + 0.99 * (1 - float(batch.dones[b])) * (next_q - 0.05 * log_prob))
    np.testing.assert_allclose(target.double().numpy(), expected, rtol=1e-4, atol=1e-4)
    online = np.array([q_by_hand(learner.critic, batch.obs[b].double().numpy(), batch.actions[b].double().numpy())
                       for b in range(3)])  # [B, E]
    hand_loss = sum(np.mean((online[:, i] - np.array(expected)) ** 2) for i in range(2))
    assert float(loss) == pytest.approx(hand_loss, rel=1e-4, abs=1e-4)
    np.testing.assert_allclose(q.double().numpy(), online.T, atol=1e-5)


def test_automatic_temperature_takes_sacs_adam_step_on_the_estimated_log_prob():
    """ent_coef=auto: loss -log alpha (log pi_hat + H_target), gradient g = -mean(log pi_hat + H_target);
    Adam's first step moves log alpha by -lr g / (|g| + 1e-8). The TD target uses alpha before the step."""
    learner = tiny_learner(ent_coef="auto")
    assert learner.alpha_optimizer is not None and float(learner.alpha) == pytest.approx(0.05)
    start = float(learner.log_alpha.detach())
    critic = learner.critic_step(fixed_batch(), learner.alpha)
    log_prob = learner._next_log_prob.double()
    gradient = float(-(log_prob + learner.target_entropy).mean())
    learner.temperature_step()
    assert float(learner.log_alpha.detach()) == pytest.approx(start - 3e-4 * gradient / (abs(gradient) + 1e-8), abs=1e-7)
    assert torch.isfinite(critic["target"]).all()
    fixed = tiny_learner(ent_coef="0.3")
    assert fixed.alpha_optimizer is None and float(fixed.alpha) == pytest.approx(0.3)
    fixed.critic_step(fixed_batch(), fixed.alpha)
    assert float(fixed.temperature_step()) == 0.0 and float(fixed.alpha) == pytest.approx(0.3)


@pytest.mark.parametrize("levels", [1, 3, 5, 20])
def test_log_prob_ceiling_is_the_estimate_of_a_perfect_point_mass_denoiser(levels):
    """No squared error at any level: the estimate is sum_k w_k ab_k - log(2 pi e) / 2 per dimension, its
    largest value (every weight is positive), summed here on the schedule written out above."""
    grid = [abar_by_hand(t) for t in np.linspace(T_MIN, T_MAX, levels + 1)]
    by_hand = sum((previous - ab) / (2 * ab * (1 - ab)) * ab for previous, ab in zip(grid[:-1], grid[1:]))
    by_hand -= 0.5 * math.log(2 * math.pi * math.e)
    assert log_prob_ceiling(levels) == pytest.approx(by_hand, rel=1e-12)
    actions = torch.tensor([[0.3, -0.9], [0.0, 1.0]], dtype=torch.float64)

    def exact_noise(obs, noisy, log_snr):  # the noise that made a_t from the row's own action
        ab = torch.sigmoid(log_snr)
        return (noisy - ab.sqrt() * obs) / (1 - ab).sqrt()

    estimate = estimate_log_prob(exact_noise, actions, actions, levels, draws=3, clip=True)
    np.testing.assert_allclose(estimate.numpy(), 2 * by_hand, rtol=1e-9)


def test_automatic_temperature_refuses_a_target_entropy_the_estimate_cannot_reach():
    """SAC's -|A| lies below the estimate's floor at every level count: alpha would fall every step until
    q / alpha overflowed. The floor is -0.93 nats per dimension at 20 levels and +0.14 at 5."""

    with pytest.raises(ConfigError, match=r"target_entropy_scale must be above -0\.927.*20-level"):
        MaxEntDPConfig(ent_coef="auto", target_entropy_scale=-1.0)
    with pytest.raises(ConfigError, match=r"above 0\.145"):
        MaxEntDPConfig(ent_coef="auto", log_prob_levels=5, target_entropy_scale=0.1)
    MaxEntDPConfig(ent_coef="auto", log_prob_levels=5, target_entropy_scale=0.2)
    MaxEntDPConfig(ent_coef="auto")  # the default target is reachable at the default levels
    MaxEntDPConfig(ent_coef="0.3", target_entropy_scale=-1.0)  # unused with a fixed temperature


def test_a_run_saved_with_the_old_target_entropy_default_resumes_and_reports_with_new_ones(tmp_path):
    """target_entropy_scale's default moved from -1 to 0.5; a fixed-temperature run never reads it, so a run saved
    before (the 300k bench runs among them) resumes and groups with new ones. Under ent_coef=auto it is read: a
    changed value is refused as any other."""
    import yaml

    from genpol.api import compose_config
    from genpol.configure import validate
    from genpol.report import computed_config
    from genpol.runners.scaffold import check_resume_config

    def saved_with_old_default(run_dir, *overrides):
        cfg = validate(compose_config(["+experiment=maxentdp", "env=pendulum", f"run_dir={run_dir}", *overrides]))
        run_dir.mkdir()
        check_resume_config(run_dir, cfg)
        saved = yaml.safe_load((run_dir / "config.yaml").read_text())
        saved["learner"]["target_entropy_scale"] = -1.0
        (run_dir / "config.yaml").write_text(yaml.safe_dump(saved))
        (run_dir / "checkpoints" / "step_000000001000").mkdir(parents=True)
        return cfg, saved

    cfg, saved = saved_with_old_default(tmp_path / "per_env")
    check_resume_config(tmp_path / "per_env", cfg)  # resumes
    old, new = (computed_config(flatten(config), ["learner.target_entropy_scale"])["learner.target_entropy_scale"]
                for config in (saved, OmegaConf.to_container(OmegaConf.structured(cfg))))
    assert old == new == 0.5
    cfg, _ = saved_with_old_default(tmp_path / "auto", "learner.ent_coef=auto", "learner.log_prob_levels=50")
    with pytest.raises(ConfigError, match=r"learner.target_entropy_scale: -1.0 -> 0.5"):
        check_resume_config(tmp_path / "auto", cfg)


def test_per_env_temperatures_are_the_authors():
    cfg = MaxEntDPConfig()
    assert [cfg.temperature(env) for env in ("HalfCheetah-v5", "Hopper-v5", "Walker2d-v5", "Ant-v5", "MultiGoal")] \
        == [0.2, 0.05, 0.01, 0.05, 0.1]
    # a key of the user's in another case than the task is refused (it trained at the authors' value); the
    # authors' own keys are not, whatever an env of the user's is called
    assert cfg.temperature("hopper-v0") == cfg.default_temperature
    with pytest.raises(ConfigError, match=r"^learner.per_env_temperatures.hopper is not env.id=Hopper-v5's task"):
        MaxEntDPConfig(per_env_temperatures={**cfg.per_env_temperatures, "hopper": 0.3}).temperature("Hopper-v5")


def test_evaluation_takes_the_candidate_with_the_largest_min_target_q():
    learner = tiny_learner()
    policy = learner.acting_head()
    assert isinstance(policy, MaxQPolicy) and policy.num_candidates == 10
    obs = torch.randn(4, OBS_DIM)
    with torch.random.fork_rng(), torch.no_grad():
        candidates = []
        for state in obs.split(1):
            torch.manual_seed(0)  # what CandidatePolicy.act seeds each state's deterministic choice with
            candidates.append(learner.head.candidates(state, 10))
        candidates = torch.cat(candidates)
    chosen = policy.act(obs, deterministic=True)
    for b in range(4):
        values = [q_by_hand(learner.critic_target, obs[b].double().numpy(), c.double().numpy()).min()
                  for c in candidates[b]]
        torch.testing.assert_close(chosen[b], candidates[b, int(np.argmax(values))])


def test_a_head_without_a_noise_network_is_refused_at_validation():
    from genpol.api import compose_config
    from genpol.configure import validate

    with pytest.raises(ConfigError, match="continuous-noise epsilon network"):
        validate(compose_config(["+experiment=maxentdp", "policy=diffusion", "policy.act_steps=1",
                                 "policy.horizon_steps=1", "policy.ft_denoising_steps=20", "run_dir=/tmp/x"]))


# ----------------------------------------------------------------------------------- a real run
TINY = ["env.num_envs=2", "learner.learning_starts=64",
        "learner.iteration_steps=64", "learner.batch_size=16", "learner.candidates=8", "learner.log_prob_levels=3",
        "learner.log_prob_draws=2", "learner.eval_candidates=3", "policy.sampling_steps=3", "policy.hidden_sizes=[16,16]",
        "policy.time_hidden_sizes=[8]", "policy.time_dim=8", "learner.critic_hidden_sizes=[16,16]",
        "pipeline.video=false", "logger.progress_bar=false", "pipeline.eval_episodes=1", "pipeline.eval_every=0",
        "pipeline.checkpoint_every=1"]


def test_a_short_run_has_finite_losses_and_resumes_to_the_uninterrupted_runs_state(tmp_path):
    """Pendulum, 2 envs, 256 steps (192 gradient steps of 2 per vector step): every logged loss is finite;
    stopped at step 128 and resumed, every weight, optimizer, generator and the replay equal the
    uninterrupted run's; the checkpoint's policy (argmax-Q over the target critics) reloads and acts."""
    from genpol.api import load_policy, train

    summary = train(env="pendulum", policy="vp_diffusion", learner="maxentdp", total_steps=256, run_dir=tmp_path / "whole",
                    overrides=TINY)
    assert summary["learner"] == "maxentdp" and summary["policy"] == "vp_diffusion"
    rows = [json.loads(line) for line in (tmp_path / "whole" / "progress.jsonl").read_text().splitlines()]
    losses = {key: row[key] for row in rows for key in row if key.startswith("losses/")}
    assert {"losses/value", "losses/policy", "losses/next_log_prob", "losses/qne_ess"} <= set(losses)
    assert all(math.isfinite(value) for value in losses.values()), losses
    rewound_copy(tmp_path / "whole", tmp_path / "resumed", ["step_000000000192", "step_000000000256"])
    train(env="pendulum", policy="vp_diffusion", learner="maxentdp", total_steps=256, run_dir=tmp_path / "resumed",
          overrides=TINY)
    name_a, spec, weights_a, state_a = final_checkpoint(tmp_path / "whole")
    name_b, _, weights_b, state_b = final_checkpoint(tmp_path / "resumed")
    assert name_a == name_b == "step_000000000256" and spec["head"]["family"] == "max_q"
    assert state_a["algorithm"]["actor_steps"] == state_a["algorithm"]["critic_steps"] == 192
    assert_trees_equal(weights_a, weights_b, "policy")
    assert_trees_equal(state_a["algorithm"], state_b["algorithm"], "algorithm")
    policy = load_policy(tmp_path / "resumed")
    obs = torch.randn(5, 3)
    assert torch.equal(policy.act(obs), policy.act(obs)) and policy.act(obs).abs().max() <= 1.0
