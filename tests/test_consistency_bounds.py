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
