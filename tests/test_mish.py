"""genpol.mish.Mish: the function and its first and second derivatives against torch's Mish on each
path (torch's kernel for small tensors, eager ops, the compiled loop for large ones, one formula inside
compiled graphs), results of the eager ops that do not depend on an element's position in the tensor,
and torch.func (vmap, grad, jvp, batched gradients), also for networks with oneDNN layers."""

import pytest
import torch
import torch.nn.functional as F

from genpol.mish import Mish
from genpol.nets import ACTIVATIONS, MLP


def relative_errors(ours_x: torch.Tensor, ours: torch.Tensor) -> tuple[float, float]:
    """Largest relative errors of Mish's value and gradient (``ours_x.grad`` after ``ours.sum()``'s
    backward) against float64 ``F.mish`` at the same inputs; gradients where |f'| > 1e-3 (near the
    derivative's root at x = -1.19 every float32 evaluation, torch's too, loses relative accuracy)."""
    ours.backward(torch.ones_like(ours))  # a contiguous gradient (sum's is broadcast): the compiled loop's path
    x = ours_x.detach().double().requires_grad_(True)
    reference = F.mish(x)
    reference.sum().backward()
    value = ((ours.detach().double() - reference.detach()).abs() / reference.detach().abs())[reference != 0]
    mask = x.grad.abs() > 1e-3
    gradient = ((ours_x.grad.double() - x.grad).abs() / x.grad.abs())[mask]
    return value.max().item(), gradient.max().item()


@pytest.mark.parametrize("elements", [20_001, 70_001], ids=["eager ops", "compiled loop"])
def test_mish_matches_float64_mish_to_a_few_ulps_over_the_whole_normal_range(elements):
    """Relative errors, very negative inputs included: there 1 - 2 / ((1 + e^x)^2 + 1) cancels (33 %
    off at x = -10, exactly 0 below -16.6, as the first version did); n / (n + 2) does not. torch's own
    float32 F.mish: value 2.4e-7, gradient 1.3e-5 on the same inputs."""
    x = torch.linspace(-85.0, 100.0, elements).requires_grad_(True)  # float32 normals: e^x > 1e-37
    value, gradient = relative_errors(x, Mish()(x))
    assert value < 1e-6 and gradient < 1e-4, (value, gradient)
    x64 = torch.linspace(-700.0, 700.0, elements, dtype=torch.float64).requires_grad_(True)
    value, gradient = relative_errors(x64, Mish()(x64))
    assert value < 1e-13 and gradient < 1e-10, (value, gradient)


def test_mish_at_the_extremes_small_tensors_and_other_dtypes():
    from genpol.mish import _MishFunction

    x = torch.tensor([-1e4, -200.0, -1e-30, 0.0, 1e-30, 88.5, 1e4, float("inf")], requires_grad=True)
    y = _MishFunction.apply(x)  # genpol's formulas (a tensor this small would take torch's kernel)
    y.sum().backward()
    torch.testing.assert_close(y, F.mish(x.detach()))
    assert torch.isfinite(x.grad[:-1]).all() and x.grad[-2] == 1.0
    # far past the clamp the gradient stays 1 (with the unclamped x in its x (1 - t) term: 2.7 at 1e17
    # and 1700 at 1e20 in float32, 1.17 at 1e16 in float64); on both the eager and the compiled path
    for dtype in (torch.float32, torch.float64):
        for size in (8, 70_000):
            big = torch.logspace(16, 30, size, dtype=dtype).requires_grad_(True)
            _MishFunction.apply(big).backward(torch.ones(size, dtype=dtype))  # contiguous: the compiled loop
            torch.testing.assert_close(big.grad, torch.ones_like(big.grad), rtol=1e-15, atol=0)
    # torch's kernel, bit for bit: small tensors (acting on a few envs: one call instead of eight ops),
    # with or without gradients (sampling and its recomputed log-prob must run the same function), and
    # other dtypes
    for other in (torch.randn(16, 256), torch.randn(16, 256, requires_grad=True),
                  torch.linspace(-8, 8, 10_001).to(torch.bfloat16)):
        assert torch.equal(Mish()(other), F.mish(other))


def test_large_tensors_take_the_compiled_loop(monkeypatch):
    """With the eager ops made to fail, a large tensor's forward and backward still run: through the
    compiled loops (and a failed compile would have set ``_Fused.failed`` and fallen back to them)."""
    from genpol import mish

    def eager_must_not_run(*tensors: torch.Tensor) -> torch.Tensor:
        raise AssertionError("the eager ops ran on a tensor of the compiled loop's size")

    monkeypatch.setattr(mish, "_mish_eager", eager_must_not_run)
    monkeypatch.setattr(mish, "_mish_derivative_eager", eager_must_not_run)
    x = torch.randn(300, 256).requires_grad_(True)
    assert x.numel() >= mish.FUSED_MIN_ELEMENTS
    weights = torch.randn(300, 256)  # a contiguous gradient, as a loss's usually is
    y = Mish()(x)
    (y * weights).sum().backward()
    assert not mish._Fused.failed
    reference = x.detach().clone().requires_grad_(True)
    (F.mish(reference) * weights).sum().backward()
    torch.testing.assert_close(y, F.mish(reference.detach()), rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(x.grad, reference.grad, rtol=1e-4, atol=1e-5)


def test_mish_second_derivatives_are_exact():
    """TRPO's Fisher-vector products differentiate the gradient again (create_graph)."""
    from genpol.mish import _MishFunction

    x = torch.randn(16, 5, dtype=torch.float64, requires_grad=True) * 4
    assert torch.autograd.gradcheck(_MishFunction.apply, (x,), check_forward_ad=True)
    assert torch.autograd.gradgradcheck(_MishFunction.apply, (x,))


def test_mish_of_an_element_does_not_depend_on_its_position():
    """torch's sigmoid and F.mish differ by an ulp between the vectorized body and the scalar tail of
    their kernels; the eager ops (8192 to 65535 elements) use exp, products and quotients, which do not."""
    torch.manual_seed(0)
    x = torch.randn(20_003, requires_grad=True)  # the eager ops' range
    tail = x[3:].detach().clone().requires_grad_(True)
    whole, part = Mish()(x), Mish()(tail)
    assert torch.equal(whole[3:], part)
    (whole_grad,) = torch.autograd.grad(whole.sum(), x)
    (part_grad,) = torch.autograd.grad(part.sum(), tail)
    assert torch.equal(whole_grad[3:], part_grad)


def test_networks_built_with_mish_use_it_and_keep_nn_mish_state_dicts():
    assert ACTIVATIONS["mish"] is Mish
    net = MLP(3, (8, 8), 2, activation="mish")
    assert sum(isinstance(module, Mish) for module in net) == 2
    reference = torch.nn.Sequential(torch.nn.Linear(3, 8), torch.nn.Mish(), torch.nn.Linear(8, 8), torch.nn.Mish(),
                                    torch.nn.Linear(8, 2))
    reference.load_state_dict(net.state_dict())  # parameter-free: old checkpoints load unchanged
    x = torch.randn(4, 3)
    torch.testing.assert_close(net(x), reference(x))


def test_mish_runs_under_torch_func_as_the_func_q_ensemble_uses_it():
    """QEnsemble(impl="func") vmaps functional_call over its heads: an autograd.Function needs
    setup_context and a vmap rule there (this one failed before it had them)."""
    from genpol.qensemble import QEnsemble

    results = {}
    for impl in ("func", "batched"):
        torch.manual_seed(0)
        # 70 x 128 per head: genpol's formulas under vmap (func), its eager ops on [3, 70, 128] (batched)
        critic = QEnsemble(5, 2, num_qs=3, hidden_sizes=(128, 128), activation="mish", impl=impl)
        torch.manual_seed(1)
        q = critic(torch.randn(70, 5), torch.randn(70, 2))
        q.square().sum().backward()
        results[impl] = (q.detach(), [p.grad for p in critic.parameters() if p.grad is not None])
    torch.testing.assert_close(results["func"][0], results["batched"][0])
    for func_grad, batched_grad in zip(results["func"][1], results["batched"][1], strict=True):
        torch.testing.assert_close(func_grad, batched_grad, rtol=1e-4, atol=1e-5)
    for x in (torch.randn(4, 40, 256), torch.randn(2, 300, 256)):  # the eager ops; the compiled loop's size
        torch.testing.assert_close(torch.vmap(Mish())(x), F.mish(x))
        (grad,) = torch.func.grad(lambda t: Mish()(t).sum(), argnums=(0,))(x[0])
        torch.testing.assert_close(grad, torch.func.grad(lambda t: F.mish(t).sum())(x[0]))
        tangent = torch.randn_like(x[0])  # forward mode
        torch.testing.assert_close(torch.func.jvp(Mish(), (x[0],), (tangent,)),
                                   torch.func.jvp(F.mish, (x[0],), (tangent,)), rtol=1e-5, atol=1e-6)
        # batched gradients (autograd.functional.jacobian's vectorize=True): grad_outputs carry a batch dim
        inputs = x[0].clone().requires_grad_(True)
        (ours,) = torch.autograd.grad(Mish()(inputs), inputs, torch.ones(2, *inputs.shape), is_grads_batched=True)
        (theirs,) = torch.autograd.grad(F.mish(inputs), inputs, torch.ones(2, *inputs.shape), is_grads_batched=True)
        torch.testing.assert_close(ours, theirs, rtol=1e-4, atol=1e-6)


def test_networks_with_onednn_layers_run_under_vmap_and_jacrev(one_thread, onednn_preferred):
    """OneDNNLinear's autograd.Function has no vmap rule: under torch.func its layers run F.linear."""
    torch.manual_seed(0)
    net = MLP(256, (256, 256), 4, activation="mish")
    assert all(layer.use_onednn for layer in list(net)[:-1:2])  # the wide layers would run oneDNN outside torch.func
    x = torch.randn(400, 256)  # 100 rows a sample: at or above MIN_ROWS, where the oneDNN path would apply
    torch.testing.assert_close(torch.vmap(net)(x.view(4, 100, 256)).reshape(400, 4), net(x), rtol=1e-5, atol=1e-5)
    plain = MLP(256, (256, 256), 4, activation="mish")
    plain.load_state_dict(net.state_dict())
    for layer in list(plain)[::2]:
        layer.use_onednn = False
    torch.testing.assert_close(torch.func.jacrev(net)(x[:70]), torch.func.jacrev(plain)(x[:70]))


def test_mish_inside_a_compiled_graph_is_one_fused_formula_with_its_gradient():
    x = torch.linspace(-30.0, 30.0, 20_001).requires_grad_(True)  # above torch's kernel's range
    reference = x.detach().clone().requires_grad_(True)
    compiled = torch.compile(Mish(), fullgraph=True)(x)  # fullgraph: no break at the autograd.Function
    weights = torch.randn_like(compiled)
    (compiled * weights).sum().backward()
    (F.mish(reference) * weights).sum().backward()
    torch.testing.assert_close(compiled, F.mish(reference.detach()), rtol=1e-6, atol=1e-6)
    torch.testing.assert_close(x.grad, reference.grad, rtol=1e-4, atol=1e-6)
