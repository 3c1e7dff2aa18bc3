"""Flow core and flow heads (FPO, PolicyFlow) against hand computations and analytic solutions."""

import math

import pytest
import torch

from genpol.errors import ConfigError
from genpol.heads import FPOHead, PolicyFlowHead
from genpol.heads.flow_core import (VelocityNetwork, flow_matching_loss, from_fpo_code_convention, integrate,
                                    solver_grid)
from genpol.nets import sinusoidal_time_embedding


def constant_velocity(network: VelocityNetwork, value) -> None:
    """Make ``network`` output ``output_scale * value`` whatever its input."""
    with torch.no_grad():
        for parameter in network.parameters():
            parameter.zero_()
        network.net[-1].bias.copy_(torch.tensor(value))


@pytest.mark.parametrize("method,order", [("euler", 1), ("midpoint", 2)])
def test_integrators_on_a_linear_field(method, order):
    """dx/dt = A x has x(1) = expm(A) x0. Each scheme applies its own one-step matrix n times
    (Euler: I + hA; midpoint: I + hA + (hA)^2 / 2), and the error falls as h^order."""
    a = torch.tensor([[0.0, 1.0], [-1.0, -0.3]], dtype=torch.float64)
    x0 = torch.tensor([[1.0, 0.5]], dtype=torch.float64)
    exact = x0 @ torch.linalg.matrix_exp(a).T
    errors = []
    for steps in (8, 16):
        h = 1.0 / steps
        one_step = torch.eye(2, dtype=torch.float64) + h * a + (0.5 * (h * a) @ (h * a) if method == "midpoint" else 0)
        expected = x0 @ torch.linalg.matrix_power(one_step, steps).T
        got = integrate(lambda x, t: x @ a.T, x0, steps, method)
        assert torch.allclose(got, expected, atol=1e-12)
        errors.append((got - exact).norm().item())
    assert errors[0] / errors[1] == pytest.approx(2 ** order, rel=0.15)


def test_integrator_passes_the_right_times():
    seen = []
    integrate(lambda x, t: (seen.append(t[0].item()), torch.zeros_like(x))[1], torch.zeros(1, 1), 4, "midpoint")
    assert seen == pytest.approx([0.0, 0.125, 0.25, 0.375, 0.5, 0.625, 0.75, 0.875])
    assert solver_grid(4, "midpoint").tolist() == pytest.approx(seen)
    assert solver_grid(4, "euler").tolist() == pytest.approx([0.0, 0.25, 0.5, 0.75])


def test_fpo_convention_conversion():
    t, v = from_fpo_code_convention(torch.tensor([1.0, 0.3]), torch.tensor([2.0, -1.0]))
    assert t.tolist() == pytest.approx([0.0, 0.7]) and v.tolist() == [-2.0, 1.0]


def test_fpo_ratio_by_hand():
    """A 1-D action, two (t, noise) pairs, a network with constant output 0.25 * c.
    l(t, xi) = t^2 (0.25 c - (a - xi))^2 ('eps' weighting); log r = mean l_old - mean l_new."""
    head = FPOHead(obs_dim=2, act_dim=1, hidden_sizes=(4,), n_mc=2)
    constant_velocity(head.velocity, [2.0])  # v = 0.5
    obs = torch.zeros(1, 2)
    action = torch.tensor([[0.3]])
    t = torch.tensor([[0.5, 0.9]])
    noise = torch.tensor([[[-1.0], [0.4]]])
    old = flow_matching_loss(head.velocity, obs, action, t, noise, "eps")
    # a - xi = 1.3 and -0.1: l = 0.25 * (0.5 - 1.3)^2 = 0.16 ; 0.81 * (0.5 + 0.1)^2 = 0.2916
    assert old[0].tolist() == pytest.approx([0.16, 0.2916])
    record = {"action": action, "t": t, "noise": noise, "cfm_loss": old}
    constant_velocity(head.velocity, [4.0])  # v = 1.0: l = 0.25 * 0.09 = 0.0225 ; 0.81 * 1.21 = 0.9801
    expected = (0.16 + 0.2916) / 2 - (0.0225 + 0.9801) / 2
    assert head.log_ratio(obs, record).log_ratio.item() == pytest.approx(expected)
    head.ratio_mode = "per_sample"
    assert head.log_ratio(obs, record).log_ratio[0].tolist() == pytest.approx([0.16 - 0.0225, 0.2916 - 0.9801])
    record["cfm_loss"] = old + torch.tensor([[5.0, -5.0]])  # differences beyond +-3 are clamped
    assert head.log_ratio(obs, record).log_ratio[0].tolist() == pytest.approx([3.0, -3.0])


@pytest.mark.parametrize("clamp", ["hard", "straight_through", "none"])
def test_fpo_per_sample_clamp_modes_by_hand(clamp):
    """Per-sample log r_i = l_old,i - l_theta,i held to [-3, 3]: ``hard`` (FPO's per-sample code) stops the
    gradient beyond the bound; ``straight_through`` (FPO++'s clamp_ste) keeps the clamped value and passes the
    identity's gradient; ``none`` (FPO++'s default) clamps nothing. Constant field v = 0.25 b: with 'eps'
    weighting d l_i / d b = 0.25 * 2 t_i^2 (v - (a - xi_i)), and d log r_i / d b is minus that."""
    head = FPOHead(obs_dim=2, act_dim=1, hidden_sizes=(4,), n_mc=2, ratio_mode="per_sample", log_ratio_clamp=clamp)
    constant_velocity(head.velocity, [4.0])  # v = 1.0: l_theta = 0.0225 and 0.9801 (the test above)
    obs, action = torch.zeros(1, 2), torch.tensor([[0.3]])
    t, noise = torch.tensor([[0.5, 0.9]]), torch.tensor([[[-1.0], [0.4]]])
    record = {"action": action, "t": t, "noise": noise, "cfm_loss": torch.tensor([[5.0, 0.5]])}
    log_ratio = head.log_ratio(obs, record).log_ratio[0]
    raw = [5.0 - 0.0225, 0.5 - 0.9801]  # the first beyond +3, the second inside
    assert log_ratio.tolist() == pytest.approx([raw[0] if clamp == "none" else 3.0, raw[1]])
    bias = head.velocity.net[-1].bias
    first = torch.autograd.grad(log_ratio[0], bias, retain_graph=True)[0].item()
    second = torch.autograd.grad(log_ratio[1], bias)[0].item()
    by_hand = [-0.25 * 2 * ti**2 * (1.0 - (0.3 - xi)) for ti, xi in ((0.5, -1.0), (0.9, 0.4))]
    assert second == pytest.approx(by_hand[1])
    assert first == (0.0 if clamp == "hard" else pytest.approx(by_hand[0]))
    with pytest.raises(ConfigError, match="log_ratio_clamp"):
        FPOHead(obs_dim=2, act_dim=1, hidden_sizes=(4,), log_ratio_clamp="none")  # ratio_mode=average


def test_fpo_brownian_regularizer_by_hand():
    """FPO with genpol's Brownian term, constant fields v_theta = 0.25 c_new, snapshot 0.25 c_old,
    evaluated at FPO's own flow-matching points x_t = (1 - t) noise + t a."""
    head = FPOHead(obs_dim=2, act_dim=1, hidden_sizes=(4,), n_mc=2, brownian_coef=0.5, brownian_beta=2.0)
    constant_velocity(head.velocity, [2.0])
    head.begin_update()  # snapshot: v_old = 0.5
    constant_velocity(head.velocity, [4.0])  # v_new = 1.0
    obs, action = torch.zeros(1, 2), torch.tensor([[0.3]])
    t, noise = torch.tensor([[0.5, 0.9]]), torch.tensor([[[-1.0], [0.4]]])
    record = {"action": action, "t": t, "noise": noise, "cfm_loss": torch.zeros(1, 2)}
    terms = head.log_ratio(obs, record)
    x_t = [0.5 * -1.0 + 0.5 * 0.3, 0.1 * 0.4 + 0.9 * 0.3]  # -0.35, 0.31
    per_pair = [((1 - tt) * 1.0 - 2.0 * (x - tt * 0.5)) ** 2 for tt, x in zip((0.5, 0.9), x_t)]
    assert terms.diagnostics["brownian"].item() == pytest.approx(sum(per_pair) / 2)
    assert terms.aux_loss.item() == pytest.approx(0.5 * sum(per_pair) / 2)
    head.brownian_coef = 0.0  # FPO's recipe: no term, no snapshot forward
    assert head.log_ratio(obs, record).aux_loss is None


def test_fpo_weightings_and_imitation():
    head = FPOHead(obs_dim=2, act_dim=1, hidden_sizes=(4,), n_mc=1)
    constant_velocity(head.velocity, [0.0])
    obs, action = torch.zeros(1, 2), torch.tensor([[1.0]])
    t, noise = torch.tensor([[0.5]]), torch.tensor([[[0.0]]])
    assert flow_matching_loss(head.velocity, obs, action, t, noise, "velocity").item() == pytest.approx(1.0)
    assert flow_matching_loss(head.velocity, obs, action, t, noise, "eps").item() == pytest.approx(0.25)
    # the eps weighting is the error of the noise implied by v in FPO's own convention
    tau = 1 - t
    x_tau = tau * noise[0] + (1 - tau) * action
    v_fpo = -torch.zeros(1, 1)  # genpol's v = 0
    implied_noise = x_tau + (1 - tau) * v_fpo
    assert (noise[0] - implied_noise).square().item() == pytest.approx(0.25)


def test_policyflow_ratio_and_brownian_by_hand():
    """Constant fields: v_theta = c_new, snapshot = c_old, so dv = c_new - c_old everywhere.
    log r = log N(delta; dv, sigma_new) - log N(delta; 0, sigma_old)."""
    head = PolicyFlowHead(obs_dim=2, act_dim=1, hidden_sizes=(4,), brownian_coef=0.5)
    head.time_grid = torch.tensor([0.25])  # make the random evaluation time deterministic
    constant_velocity(head.velocity, [0.4])
    head.begin_update()  # snapshot: v_old = 0.4
    obs = torch.zeros(1, 2)
    record = {"x0": torch.tensor([[1.0]]), "x1": torch.tensor([[-1.0]]), "delta": torch.tensor([[0.3]]),
              "log_std": torch.tensor([[0.0]]), "log_prob": torch.tensor([-0.5 * 0.09 - 0.5 * math.log(2 * math.pi)])}
    assert head.log_ratio(obs, record).log_ratio.item() == 0.0
    constant_velocity(head.velocity, [0.6])  # dv = 0.2
    with torch.no_grad():
        head.log_std.fill_(math.log(0.5))
    terms = head.log_ratio(obs, record)
    new = -0.5 * ((0.3 - 0.2) / 0.5) ** 2 - math.log(0.5) - 0.5 * math.log(2 * math.pi)
    old = -0.5 * 0.09 - 0.5 * math.log(2 * math.pi)
    assert terms.log_ratio.item() == pytest.approx(new - old, abs=1e-6)
    # Brownian: x_t = 0.75 * 1 + 0.25 * (-1) = 0.5 ; ((1 - t) v - beta (x_t - t v_old))^2
    brownian = (0.75 * 0.6 - (0.5 - 0.25 * 0.4)) ** 2
    assert terms.diagnostics["brownian"].item() == pytest.approx(brownian)
    assert terms.aux_loss.item() == pytest.approx(0.5 * brownian)
    assert terms.entropy[0].item() == pytest.approx(math.log(0.5) + 0.5 + 0.5 * math.log(2 * math.pi))
    # the KL of the same model: KL(N(0, 1) || N(0.2, 0.5^2))
    kl = math.log(0.5 / 1.0) + (1.0 + 0.04) / (2 * 0.25) - 0.5
    assert head.kl(obs, record).item() == pytest.approx(kl, abs=1e-6)


@pytest.mark.parametrize("make_head", [
    lambda: PolicyFlowHead(obs_dim=3, act_dim=2, hidden_sizes=(8,)),
    lambda: FPOHead(obs_dim=3, act_dim=2, hidden_sizes=(8,), brownian_coef=0.1),
], ids=["policyflow", "fpo-brownian"])
def test_flow_snapshot_is_refreshed_and_never_trained(make_head):
    torch.manual_seed(0)
    head = make_head()
    assert not any(p is q for p in head.parameters() for q in head.snapshot.parameters())
    assert "snapshot" not in "".join(head.state_dict())
    obs = torch.randn(16, 3)
    with torch.no_grad():
        _, record = head.sample(obs)
    head.begin_update()
    before = [p.clone() for p in head.snapshot.parameters()]
    optimizer = torch.optim.SGD(head.parameters(), lr=0.1)
    for _ in range(3):
        terms = head.log_ratio(obs, record)
        optimizer.zero_grad()
        (-(terms.log_ratio.mean()) + terms.aux_loss).backward()
        optimizer.step()
    assert all(torch.equal(a, b) for a, b in zip(before, head.snapshot.parameters()))  # not trained
    assert all(p.grad is None for p in head.snapshot.parameters())
    assert not all(torch.equal(a, b) for a, b in zip(head.velocity.parameters(), head.snapshot.parameters()))
    head.begin_update()  # refreshed: equal to the trained network again
    assert all(torch.equal(a, b) for a, b in zip(head.velocity.parameters(), head.snapshot.parameters()))
    # loading weights refreshes it too, and it follows the head's dtype/device moves
    fresh = make_head()
    fresh.load_state_dict(head.state_dict())
    assert all(torch.equal(a, b) for a, b in zip(head.velocity.parameters(), fresh.snapshot.parameters()))
    fresh.double()
    assert all(p.dtype == torch.float64 for p in fresh.snapshot.parameters())


def test_policyflow_degenerate_mode_is_a_gaussian_around_a_deterministic_flow():
    torch.manual_seed(0)
    head = PolicyFlowHead(obs_dim=3, act_dim=2, hidden_sizes=(8,), degenerate_to_gaussian=True, log_std_init=-1.0)
    obs = torch.randn(1, 3).expand(4000, 3)
    with torch.no_grad():
        actions, record = head.sample(obs)
    assert torch.equal(record["x0"], torch.zeros_like(record["x0"]))
    assert torch.allclose(record["x1"], record["x1"][:1].expand_as(record["x1"]))
    assert torch.allclose(actions.std(0), torch.full((2,), math.exp(-1.0)), rtol=0.05)


def test_fpo_recorded_time_embedding_is_the_one_the_network_computes():
    """FPO records its pairs' time embedding so that minibatch steps skip sin/cos; the ratio from the
    recorded embedding must be the ratio from t itself (a record written without it, as above)."""
    torch.manual_seed(0)
    head = FPOHead(obs_dim=3, act_dim=2, hidden_sizes=(16, 16), n_mc=4, t_sampling="uniform")
    obs = torch.randn(5, 3)
    with torch.no_grad():
        _, record = head.sample(obs)
    assert record["t_embed"].shape == (5, 4, 8)
    assert torch.equal(record["t_embed"], sinusoidal_time_embedding(record["t"], 8))
    with torch.no_grad():
        for parameter in head.velocity.parameters():  # a changed network: log r is not 0
            parameter.add_(0.1 * torch.randn_like(parameter))
    from_record = head.log_ratio(obs, record).log_ratio
    from_t = head.log_ratio(obs, {k: v for k, v in record.items() if k != "t_embed"}).log_ratio
    assert from_record.abs().min() > 1e-4
    torch.testing.assert_close(from_record, from_t, rtol=1e-6, atol=1e-7)
    # and the ratio is computed from the recorded embedding, not from t: another embedding moves it
    shuffled = {**record, "t_embed": record["t_embed"].roll(1, dims=1)}
    assert (head.log_ratio(obs, shuffled).log_ratio - from_record).abs().max() > 1e-4


@pytest.mark.parametrize("ratio_mode", ["average", "per_sample"])
def test_fpo_log_ratio_is_exactly_zero_on_its_own_record(ratio_mode):
    """The contract with the recorded embedding, on the grid times FPO samples by default."""
    torch.manual_seed(1)
    head = FPOHead(obs_dim=3, act_dim=2, hidden_sizes=(16, 16), n_mc=4, ratio_mode=ratio_mode)
    obs = torch.randn(6, 3)
    with torch.no_grad():
        _, record = head.sample(obs)
        log_ratio = head.log_ratio(obs, record).log_ratio
    assert log_ratio.shape == (6, 1 if ratio_mode == "average" else 4)
    assert torch.equal(log_ratio, torch.zeros_like(log_ratio))


def test_the_fpo_time_embedding_is_the_authors_formula_and_travels_with_the_head():
    """policy.time_embedding=fpo: cos and sin of 2^k (1 - t), k = 0..3, by hand at t = 0.3 (FPO's and
    GoRL's code embed their tau = 1 - t so); the head, GoRL's decoder and a rebuilt spec use it."""
    from genpol.heads import head_from_spec
    from genpol.heads.latent import LatentDecoderHead
    from genpol.nets import fpo_time_embedding

    tau = 0.7
    expected = [math.cos(tau * 2**k) for k in range(4)] + [math.sin(tau * 2**k) for k in range(4)]
    got = fpo_time_embedding(torch.tensor([0.3], dtype=torch.float64), 8)[0]
    assert torch.allclose(got, torch.tensor(expected, dtype=torch.float64), atol=1e-15)
    head = FPOHead(3, 2, hidden_sizes=(8,), time_embedding="fpo")
    t = torch.rand(5)
    assert torch.equal(head.velocity.time_embedding(t), fpo_time_embedding(t, 8))
    assert head_from_spec(head.spec()).config.time_embedding == "fpo"
    gorl = LatentDecoderHead(3, 2, hidden_sizes=(8,), decoder_hidden_sizes=(8,), time_embedding="fpo")
    assert torch.equal(gorl.decoder.time_embedding(t), fpo_time_embedding(t, 8))
    assert torch.equal(FPOHead(3, 2, hidden_sizes=(8,)).velocity.time_embedding(t), sinusoidal_time_embedding(t, 8))
