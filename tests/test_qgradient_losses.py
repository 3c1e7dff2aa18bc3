"""Q-gradient actor math (Diffusion-QL / Consistency-AC) against hand computations and sampling statistics."""

import pytest
import torch

from genpol.updaters.qgradient_losses import normalized_q_loss, q_gradient_actor_loss, softmax_q_choice


def test_normalized_q_loss_on_a_hand_case_and_its_gradient():
    q = torch.tensor([[1.0, 3.0], [-2.0, 4.0]], requires_grad=True)  # critic 0: mean 2; critic 1: mean|.| 3
    seen = set()
    for seed in range(20):
        loss = normalized_q_loss(q, torch.Generator().manual_seed(seed))
        seen.add(round(loss.item(), 6))
        assert loss.item() in (pytest.approx(-2.0 / 3.0), pytest.approx(-1.0 / 2.0))  # (i, j) = (0, 1) or (1, 0)
    assert seen == {round(-2 / 3, 6), -0.5}  # both pairs are drawn
    generator = torch.Generator().manual_seed(0)
    loss = normalized_q_loss(q, generator)
    loss.backward()
    i = 0 if loss.item() == pytest.approx(-2 / 3) else 1
    expected = torch.zeros(2, 2)
    expected[i] = -1.0 / (2 * (3.0 if i == 0 else 2.0))  # d/dq_i of -mean(q_i) / c, the normalizer detached
    assert torch.allclose(q.grad, expected)
    with pytest.raises(ValueError, match=r"\[E >= 2, B\]"):
        normalized_q_loss(torch.ones(1, 4))


def test_the_normalization_makes_the_loss_reward_scale_free():
    q = torch.randn(2, 64) + 5
    first = normalized_q_loss(q, torch.Generator().manual_seed(3))
    assert normalized_q_loss(100 * q, torch.Generator().manual_seed(3)).item() == pytest.approx(first.item(), rel=1e-5)


def test_actor_loss_adds_eta_times_the_q_loss_to_the_bc_loss():
    q, bc = torch.tensor([[2.0, 2.0], [2.0, 2.0]]), torch.tensor(0.7)
    loss, named = q_gradient_actor_loss(q, eta=0.1, bc_loss=bc)
    assert loss.item() == pytest.approx(0.7 - 0.1) and named["q_loss"].item() == pytest.approx(-1.0)
    online, named = q_gradient_actor_loss(q, eta=0.5)
    assert online.item() == pytest.approx(-0.5) and "bc_loss" not in named


def test_softmax_q_choice_draws_with_softmax_probabilities():
    """50 000 draws among 4 candidates: frequencies within 4 standard errors of softmax(Q)."""
    draws, n = 50_000, 4
    q_row = torch.tensor([0.0, 1.0, 2.0, -1.0])
    candidates = torch.arange(n, dtype=torch.float32).view(1, n, 1).expand(draws, n, 1)
    chosen = softmax_q_choice(candidates, q_row.expand(draws, n), torch.Generator().manual_seed(0))
    frequencies = torch.bincount(chosen.view(-1).long(), minlength=n).float() / draws
    probabilities = torch.softmax(q_row, 0)
    standard_error = (probabilities * (1 - probabilities) / draws).sqrt()
    assert ((frequencies - probabilities).abs() < 4 * standard_error).all(), (frequencies, probabilities)
    with pytest.raises(ValueError, match="must be"):
        softmax_q_choice(torch.zeros(2, 3, 1), torch.zeros(2, 4))
