"""QEnsemble (batched weights and torch.func), subset_min, polyak_update and make_target against
independent computations: stable-baselines3's SAC critic, hand-built nn.Sequential heads, and
torch.randperm draws from an identically seeded generator."""

import math

import pytest
import torch
from torch import nn

from genpol.qensemble import IMPLEMENTATIONS, QEnsemble, make_target, polyak_update, subset_min

OBS_DIM, ACT_DIM, BATCH = 5, 3, 7


def perturbed_ensemble(num_qs: int = 3, layer_norm: bool = False, hidden_sizes=(16, 12)) -> QEnsemble:
    """An ensemble whose parameters (LayerNorm scales and shifts included) are all distinct random values,
    so a swapped scale and shift, or a head read from the wrong slice, changes the output."""
    ensemble = QEnsemble(OBS_DIM, ACT_DIM, num_qs, hidden_sizes, layer_norm=layer_norm)
    with torch.no_grad():
        for parameter in ensemble.parameters():
            parameter.add_(0.3 * torch.randn_like(parameter))
    return ensemble


def batch(leading: tuple[int, ...] = ()) -> tuple[torch.Tensor, torch.Tensor]:
    return torch.randn(*leading, BATCH, OBS_DIM), torch.randn(*leading, BATCH, ACT_DIM)


@pytest.mark.parametrize("layer_norm", [False, True])
def test_batched_and_func_agree_on_the_same_weights(layer_norm):
    ensemble = perturbed_ensemble(layer_norm=layer_norm)
    obs, actions = batch()
    outputs, gradients = {}, {}
    for impl in IMPLEMENTATIONS:
        ensemble.impl = impl
        ensemble.zero_grad()
        outputs[impl] = ensemble(obs, actions)
        outputs[impl].square().sum().backward()
        gradients[impl] = [parameter.grad.clone() for parameter in ensemble.parameters()]
    assert outputs["batched"].shape == (3, BATCH)
    assert outputs["batched"].abs().max() > 0.1  # not a trivially small output
    # Different GEMM kernels round differently: equal to float32 precision, not bit for bit.
    torch.testing.assert_close(outputs["func"], outputs["batched"], rtol=1e-5, atol=1e-6)
    for func_grad, batched_grad in zip(gradients["func"], gradients["batched"]):
        torch.testing.assert_close(func_grad, batched_grad, rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("layer_norm", [False, True])
def test_per_head_inputs_match_each_head_alone(impl, layer_norm):
    ensemble = perturbed_ensemble(layer_norm=layer_norm)
    ensemble.impl = impl
    obs, actions = batch((3,))
    shared_obs = obs[0]
    q = ensemble(obs, actions)
    q_shared_obs = ensemble(shared_obs, actions)  # [B, D] broadcast against per-head actions [E, B, A]
    for index in range(3):
        head = ensemble.head_module(index)
        torch.testing.assert_close(q[index], head(torch.cat([obs[index], actions[index]], -1)).squeeze(-1))
        torch.testing.assert_close(q_shared_obs[index],
                                   head(torch.cat([shared_obs, actions[index]], -1)).squeeze(-1))
    with pytest.raises(ValueError, match="expected obs"):
        ensemble(obs[:2], actions[:2])  # 2 per-head slices for 3 heads


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("layer_norm", [False, True])
def test_evaluating_a_subset_of_heads_equals_those_rows_of_all_heads(impl, layer_norm):
    """``heads=[2, 0]`` evaluates only those heads, in that order, with the numbers every head gives
    (exactly: each head's GEMMs are the same); per-head inputs then come per evaluated head."""
    ensemble = perturbed_ensemble(layer_norm=layer_norm)
    ensemble.impl = impl
    obs, actions = batch(())
    heads = torch.tensor([2, 0])
    every = ensemble(obs, actions)
    assert torch.equal(ensemble(obs, actions, heads=heads), every.index_select(0, heads))
    per_head_actions = actions.expand(2, *actions.shape) + torch.tensor([[[0.0]], [[0.1]]])
    q = ensemble(obs, per_head_actions, heads=heads)
    torch.testing.assert_close(q[1], ensemble.head_module(0)(torch.cat([obs, per_head_actions[1]], -1)).squeeze(-1))
    with pytest.raises(ValueError, match=r"or with a leading \[2\]"):
        ensemble(obs, actions.expand(3, *actions.shape), heads=heads)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_from_modules_matches_stable_baselines3_sac_critic(impl):
    from stable_baselines3 import SAC

    model = SAC("MlpPolicy", "Pendulum-v1", learning_starts=0, device="cpu", seed=0)
    critic = model.critic
    ensemble = QEnsemble.from_modules(critic.q_networks, obs_dim=3, impl=impl)
    assert (ensemble.num_qs, ensemble.act_dim, ensemble.hidden_sizes, ensemble.layer_norm) == (2, 1, (256, 256), False)
    for _ in range(3):
        obs, actions = torch.randn(64, 3), torch.rand(64, 1) * 4 - 2
        with torch.no_grad():
            expected = torch.stack(critic(obs, actions)).squeeze(-1)
            q = ensemble(obs, actions)
        assert not torch.allclose(expected[0], expected[1])  # the two SB3 critics differ: a head swap would show
        torch.testing.assert_close(q, expected, rtol=0, atol=1e-6)


def test_from_modules_rejects_heads_that_differ():
    relu_head = nn.Sequential(nn.Linear(8, 4), nn.ReLU(), nn.Linear(4, 1))
    tanh_head = nn.Sequential(nn.Linear(8, 4), nn.Tanh(), nn.Linear(4, 1))
    wider_head = nn.Sequential(nn.Linear(8, 6), nn.ReLU(), nn.Linear(6, 1))
    for other in (tanh_head, wider_head):
        with pytest.raises(ValueError, match="head 1 does not match"):
            QEnsemble.from_modules([relu_head, other], obs_dim=5)
    with pytest.raises(ValueError, match="not a critic MLP"):
        QEnsemble.from_modules([nn.Sequential(nn.Linear(8, 1), nn.Softplus())], obs_dim=5)


def test_from_modules_takes_heads_of_torch_mish_and_of_genpols_mlp():
    """torch's nn.Mish heads and genpol MLPs (OneDNNLinear layers, genpol's Mish) load as critic_mlp heads:
    the ensemble's Q equals each head's own output."""
    from genpol.nets import MLP

    torch.manual_seed(0)
    torch_heads = [nn.Sequential(nn.Linear(8, 16), nn.Mish(), nn.Linear(16, 16), nn.Mish(), nn.Linear(16, 1))
                   for _ in range(2)]
    genpol_heads = [MLP(8, [16, 16], 1, activation="mish") for _ in range(2)]
    obs, actions = torch.randn(5, 5), torch.randn(5, 3)
    for heads in (torch_heads, genpol_heads):
        ensemble = QEnsemble.from_modules(heads, obs_dim=5, impl="batched")
        assert ensemble.activation_name == "mish" and ensemble.hidden_sizes == (16, 16)
        expected = torch.stack([head(torch.cat([obs, actions], -1)).squeeze(-1) for head in heads])
        torch.testing.assert_close(ensemble(obs, actions), expected)


def hand_built_head(ensemble: QEnsemble, index: int) -> nn.Sequential:
    """Head ``index`` rebuilt layer by layer from the stacked tensors, independently of head_module."""
    widths = [ensemble.in_dim, *ensemble.hidden_sizes]
    layers: list[nn.Module] = []
    with torch.no_grad():
        for layer, (fan_in, fan_out) in enumerate(zip(widths[:-1], widths[1:])):
            linear, norm = nn.Linear(fan_in, fan_out), nn.LayerNorm(fan_out)
            linear.weight.copy_(ensemble.weights[layer][index].T)
            linear.bias.copy_(ensemble.biases[layer][index, 0])
            norm.weight.copy_(ensemble.ln_scales[layer][index, 0])
            norm.bias.copy_(ensemble.ln_shifts[layer][index, 0])
            layers += [linear, norm, nn.ReLU()]
        output = nn.Linear(widths[-1], 1)
        output.weight.copy_(ensemble.weights[-1][index].T)
        output.bias.copy_(ensemble.biases[-1][index, 0])
    return nn.Sequential(*layers, output)


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
def test_layer_norm_is_per_head(impl):
    ensemble = perturbed_ensemble(num_qs=2, layer_norm=True)
    ensemble.impl = impl
    obs, actions = batch()
    inputs = torch.cat([obs, actions], -1)
    with torch.no_grad():
        before = ensemble(obs, actions)
        for index in range(2):
            torch.testing.assert_close(before[index], hand_built_head(ensemble, index)(inputs).squeeze(-1))
        ensemble.ln_scales[0][0].mul_(3.0)  # head 0's first LayerNorm scale only
        ensemble.ln_shifts[1][0].add_(0.5)  # and its second shift
        after = ensemble(obs, actions)
        assert torch.equal(after[1], before[1])
        assert (after[0] - before[0]).abs().min() > 1e-4
        torch.testing.assert_close(after[0], hand_built_head(ensemble, 0)(inputs).squeeze(-1))


@pytest.mark.parametrize("impl", IMPLEMENTATIONS)
@pytest.mark.parametrize("layer_norm", [False, True])
def test_a_head_loss_moves_only_that_heads_parameters(impl, layer_norm):
    ensemble = perturbed_ensemble(num_qs=3, layer_norm=layer_norm)
    ensemble.impl = impl
    obs, actions = batch()
    for index in range(3):
        ensemble.zero_grad()
        ensemble(obs, actions)[index].square().mean().backward()
        for name, parameter in ensemble.named_parameters():
            for other in range(3):
                if other != index:
                    assert torch.count_nonzero(parameter.grad[other]) == 0, (name, index, other)
            assert torch.count_nonzero(parameter.grad[index]) > 0, (name, index)


def test_init_schemes():
    xavier = QEnsemble(OBS_DIM, ACT_DIM, 4, (64, 32), init="xavier", layer_norm=True)
    torch_init = QEnsemble(OBS_DIM, ACT_DIM, 4, (64, 32), init="torch")
    for weight, bias in zip(xavier.weights, xavier.biases):
        fan_in, fan_out = weight.shape[1:]
        assert weight.abs().max() <= math.sqrt(6 / (fan_in + fan_out)) and weight.std() > 0
        assert torch.count_nonzero(bias) == 0
    assert all(torch.equal(scale, torch.ones_like(scale)) for scale in xavier.ln_scales)
    assert all(torch.count_nonzero(shift) == 0 for shift in xavier.ln_shifts)
    for weight, bias in zip(torch_init.weights, torch_init.biases):
        bound = 1 / math.sqrt(weight.shape[1])  # nn.Linear's default: U(-1/sqrt(fan_in), 1/sqrt(fan_in))
        assert weight.abs().max() <= bound and bias.abs().max() <= bound
        assert bias.abs().max() > 0.5 * bound
        assert not torch.equal(weight[0], weight[1])  # each head drawn independently
    with pytest.raises(ValueError, match="unknown init"):
        QEnsemble(OBS_DIM, ACT_DIM, init="orthogonal")


def test_subset_min_draws_heads_without_replacement():
    q = torch.randn(10, 6)
    generator, replay = torch.Generator().manual_seed(3), torch.Generator().manual_seed(3)
    for _ in range(3):  # successive calls make fresh draws, in the generator's order
        heads = torch.randperm(10, generator=replay)[:2]
        expected = torch.minimum(q[heads[0]], q[heads[1]])
        assert torch.equal(subset_min(q, 2, generator), expected)
    head = torch.randperm(10, generator=replay)[0]
    assert torch.equal(subset_min(q, 1, generator), q[head])
    state = generator.get_state()
    assert torch.equal(subset_min(q, 10, generator), q.min(dim=0).values)
    assert torch.equal(generator.get_state(), state)  # the plain min draws nothing
    for bad in (0, 11):
        with pytest.raises(ValueError, match="num_min"):
            subset_min(q, bad, generator)


def test_polyak_update_matches_hand_computation_without_tracking_gradients():
    target = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    online = nn.Sequential(nn.Linear(3, 2), nn.BatchNorm1d(2))
    online.train()(torch.randn(8, 3))  # moves online's running statistics away from target's
    online[0].weight.sum().backward()
    online_grad = online[0].weight.grad.clone()
    expected = [(0.9 * t + 0.1 * o).detach() for t, o in zip(target.parameters(), online.parameters())]
    polyak_update(target, online, tau=0.1)  # target's parameters require grad: no_grad must be in force
    for parameter, value in zip(target.parameters(), expected):
        torch.testing.assert_close(parameter, value, rtol=1e-6, atol=1e-7)
        assert parameter.grad_fn is None and parameter.grad is None
    for target_buffer, online_buffer in zip(target.buffers(), online.buffers()):
        assert torch.equal(target_buffer, online_buffer)
    assert torch.equal(online[0].weight.grad, online_grad)
    tensors, sources = [torch.zeros(4), torch.ones(2, 2)], [torch.ones(4), torch.zeros(2, 2)]
    polyak_update(tensors, sources, tau=0.25)
    assert torch.equal(tensors[0], torch.full((4,), 0.25)) and torch.equal(tensors[1], torch.full((2, 2), 0.75))
    with pytest.raises(ValueError, match="shape mismatch"):
        polyak_update([torch.zeros(3)], [torch.zeros(4)], tau=0.1)


def test_make_target_is_a_frozen_independent_copy():
    online = perturbed_ensemble(layer_norm=True)
    target = make_target(online)
    obs, actions = batch()
    assert not any(parameter.requires_grad for parameter in target.parameters())
    assert torch.equal(target(obs, actions), online(obs, actions).detach())
    with torch.no_grad():
        online.weights[1].add_(1.0)
    assert not torch.equal(target(obs, actions), online(obs, actions).detach())
    polyak_update(target, online, tau=1.0)
    assert torch.equal(target(obs, actions), online(obs, actions).detach())
