"""The clamp of the Q-gradient sampler (``genpol.heads.bounds``): exact forward values, and a gradient
that reaches the actor from outside the action box when it points back in (hand-computed cases)."""

import pytest
import torch

from genpol.heads import ConsistencyHead
from genpol.heads.bounds import clamp_to_box
from genpol.heads.consistency import consistency_coefficients

X = torch.tensor([-2.0, -2.0, -0.5, 0.5, 2.0, 2.0, 1.0, -1.0])
UPSTREAM = torch.tensor([-1.0, 1.0, 3.0, -3.0, 1.0, -1.0, 2.0, 2.0])  # dL/da
EXPECTED = {
    # outside the box the gradient passes where a descent step (x - lr dL/da) moves x back in
    "inward": [-1.0, 0.0, 3.0, -3.0, 1.0, 0.0, 2.0, 2.0],
    "straight_through": UPSTREAM.tolist(),
    "zero": [0.0, 0.0, 3.0, -3.0, 0.0, 0.0, 2.0, 2.0],  # torch's clamp (gradient 1 on the bounds)
}


@pytest.mark.parametrize("mode", list(EXPECTED))
def test_forward_is_the_clamp_and_the_gradient_follows_the_rule(mode):
    x = X.clone().requires_grad_(True)
    y = clamp_to_box(x, mode)
    assert torch.equal(y, X.clamp(-1, 1))
    y.backward(UPSTREAM)
    assert x.grad.tolist() == EXPECTED[mode]
    with pytest.raises(ValueError, match="clamp gradient must be one of"):
        clamp_to_box(X, "tanh")


def saturated_head(clamp_gradient):
    """One sampling step, a = f(x, 80) = c_skip(80) x + c_out(80) F; F's output bias at +20 puts every
    pre-clamp sample far above the box (|c_skip(80) x| ~ 1e-3, c_out(80) F ~ 10)."""
    torch.manual_seed(0)
    head = ConsistencyHead(3, 2, hidden_sizes=(8,), sampling_steps=1, clamp_gradient=clamp_gradient)
    with torch.no_grad():
        head.network.body[-1].weight.zero_()
        head.network.body[-1].bias.fill_(20.0)
    return head


@pytest.mark.parametrize("mode", ["inward", "zero"])
def test_the_q_gradient_reaches_a_saturated_actor_when_it_points_back_into_the_box(mode):
    """a = c_skip x + c_out (W h + b) with W = 0: da/db = c_out(80) per element, so a loss L = sum(a)
    (a critic preferring smaller actions) gives dL/db = B c_out(80) under ``inward``, 0 under torch's clamp."""
    head, obs = saturated_head(mode), torch.randn(5, 3)
    actions = head.rsample(obs)
    assert torch.equal(actions, torch.ones(5, 2))
    actions.sum().backward()
    bias_grad = head.network.body[-1].bias.grad
    _, c_out = consistency_coefficients(torch.tensor(80.0))
    expected = 5 * c_out.item() if mode == "inward" else 0.0
    assert bias_grad.tolist() == pytest.approx([expected, expected], rel=1e-6, abs=0)
    # a critic preferring larger actions pushes outward: no gradient, so no drift away from the box
    head.zero_grad()
    (-head.rsample(obs).sum()).backward()
    assert torch.equal(head.network.body[-1].bias.grad, torch.zeros(2))



@pytest.mark.parametrize("mode", ["inward", "zero"])
def test_the_diffusion_chain_passes_the_q_gradient_of_a_saturated_action_back_in(mode):
    """Diffusion-QL (the diffusion head's ``rsample``): the last step's clamp follows ``clamp_gradient``.
    One DDPM step (K = 1: alpha_bar_prev = 1, so the action is the clamp of x0_hat = (x - sqrt(1 - abar) eps) /
    sqrt(abar), no noise), eps_theta's last layer W = 0 and bias b = -20, every x0_hat far above 1 and
    unclipped (denoised_clip 1e6): da/db = -coef_x0 sqrt(1 - abar) / sqrt(abar) per element before the clamp.
    A loss sum(a) (a critic preferring smaller actions) gets 4x that under ``inward``, 0 under torch's clamp;
    the outward loss -sum(a) gets 0 in both."""
    from genpol.heads import DiffusionHead

    torch.manual_seed(0)
    head = DiffusionHead(3, 2, denoising_steps=1, ft_denoising_steps=1, hidden_sizes=(8,), min_sampling_std=0.0,
                         denoised_clip=1e6, clamp_gradient=mode)
    last_layer = head.denoiser.body.output[-1]
    with torch.no_grad():
        last_layer.weight.zero_()
        last_layer.bias.fill_(-20.0)
    obs = torch.randn(4, 3)
    actions = head.rsample(obs)
    assert torch.equal(actions, torch.ones(4, 2))
    assert torch.equal(head.act(obs), actions)  # the same values outside rsample
    actions.sum().backward()
    alpha_bar = head.alpha_bar[0].item()
    per_element = -head.coef_x0[0].item() * (1 - alpha_bar) ** 0.5 / alpha_bar**0.5
    expected = 4 * per_element if mode == "inward" else 0.0
    assert per_element != 0.0
    assert last_layer.bias.grad.tolist() == pytest.approx([expected, expected], rel=1e-5, abs=0)
    head.zero_grad()
    (-head.rsample(obs).sum()).backward()
    assert torch.equal(last_layer.bias.grad, torch.zeros(2))
