"""genpol.onednn.OneDNNLinear: the same function, gradients and second derivatives as nn.Linear."""

import pytest
import torch
from torch import nn

from genpol import onednn
from genpol.onednn import ONEDNN_AVAILABLE, OneDNNLinear

pytestmark = [pytest.mark.skipif(not ONEDNN_AVAILABLE, reason="this torch build has no oneDNN GEMM"),
              pytest.mark.usefixtures("onednn_preferred")]


def twin_layers(in_features: int = 256, out_features: int = 256) -> tuple[OneDNNLinear, nn.Linear]:
    torch.manual_seed(0)
    fast = OneDNNLinear(in_features, out_features)
    plain = nn.Linear(in_features, out_features)
    plain.load_state_dict(fast.state_dict())  # same keys and shapes: checkpoints do not depend on the kernel
    return fast, plain


def test_matches_linear_with_gradients_and_double_backward(one_thread):
    fast, plain = twin_layers()
    assert fast.use_onednn
    inputs = torch.randn(3, 100, 256, requires_grad=True)  # a leading batch shape, 300 rows
    fast_out, plain_out = fast(inputs), plain(inputs)
    assert fast_out.shape == (3, 100, 256)
    torch.testing.assert_close(fast_out, plain_out, rtol=1e-5, atol=1e-5)

    def grads(layer, output):
        return torch.autograd.grad(output.pow(2).sum(), [inputs, layer.weight, layer.bias], create_graph=True)

    fast_grads, plain_grads = grads(fast, fast_out), grads(plain, plain_out)
    for fast_grad, plain_grad in zip(fast_grads, plain_grads):
        torch.testing.assert_close(fast_grad, plain_grad, rtol=1e-4, atol=1e-3)
    # second derivatives (what TRPO's Fisher-vector products take through a head)
    fast_second = torch.autograd.grad(sum(g.pow(2).sum() for g in fast_grads), [inputs, fast.weight])
    plain_second = torch.autograd.grad(sum(g.pow(2).sum() for g in plain_grads), [inputs, plain.weight])
    for fast_grad, plain_grad in zip(fast_second, plain_second):
        torch.testing.assert_close(fast_grad, plain_grad, rtol=1e-4, atol=1e-3 * plain_grad.abs().max().item())


def test_dispatches_to_onednn_only_for_wide_layers_big_batches_one_thread_and_float32(one_thread, monkeypatch):
    calls = []
    monkeypatch.setattr(onednn._OneDNNLinearFunction, "apply",
                        lambda *args: calls.append(args[0].shape) or nn.functional.linear(*args))
    fast, _ = twin_layers()
    fast(torch.randn(onednn.MIN_ROWS - 1, 256))  # acting on a few envs: MKL
    assert calls == []
    fast(torch.randn(onednn.MIN_ROWS, 256))
    assert calls == [(onednn.MIN_ROWS, 256)]
    narrow = OneDNNLinear(17, 256)  # the input layer: MKL
    assert not narrow.use_onednn
    torch.set_num_threads(2)
    assert not OneDNNLinear(256, 256).use_onednn  # two threads: MKL parallelizes better
    with torch.no_grad():
        fast.double()(torch.randn(100, 256, dtype=torch.float64))  # float64: F.linear
    assert len(calls) == 1


def test_compiled_step_matches_eager(one_thread):
    fast, plain = twin_layers()
    inputs = torch.randn(128, 256)

    def loss(layer: nn.Module) -> torch.Tensor:
        return torch.tanh(layer(inputs)).square().mean()

    compiled_loss = torch.compile(loss, fullgraph=True)
    compiled_value = compiled_loss(fast)
    compiled_value.backward()
    plain_value = loss(plain)
    plain_value.backward()
    torch.testing.assert_close(compiled_value, plain_value, rtol=1e-5, atol=1e-6)
    torch.testing.assert_close(fast.weight.grad, plain.weight.grad, rtol=1e-4, atol=1e-6)
    torch.testing.assert_close(fast.bias.grad, plain.bias.grad, rtol=1e-4, atol=1e-6)


def test_the_compiled_on_policy_step_trains_onednn_layers_as_eager_adam_does(one_thread):
    """``CompiledAdamStep`` (learner.compile=true on-policy) traces torch.func.grad: there an
    autograd.Function lost the oneDNN layers' parameter gradients (zeros) and failed to trace a layer
    whose input is data. The step runs them as F.linear; after three steps it matches eager Adam."""
    import copy

    from genpol.updaters.compiled import CompiledAdamStep

    torch.manual_seed(0)
    net = nn.Sequential(OneDNNLinear(256, 256), nn.Tanh(), OneDNNLinear(256, 256), nn.Tanh(), nn.Linear(256, 1))
    assert net[0].use_onednn and net[2].use_onednn  # the first one's input is data
    twin = copy.deepcopy(net)
    eager_optimizer = torch.optim.Adam(net.parameters(), lr=1e-3)

    def loss_of(module: nn.Module):
        def loss(inputs: torch.Tensor, targets: torch.Tensor) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            value = (module(inputs).squeeze(-1) - targets).square().mean()
            return value, {"loss": value.detach()}
        return loss

    step = CompiledAdamStep({"net": twin}, loss_of(twin), torch.optim.Adam(twin.parameters(), lr=1e-3), None)
    for _ in range(3):
        inputs, targets = torch.randn(128, 256), torch.randn(128)
        eager_loss, _ = loss_of(net)(inputs, targets)
        eager_optimizer.zero_grad()
        eager_loss.backward()
        eager_optimizer.step()
        compiled = step(inputs, targets)
        assert float(compiled["loss"]) == pytest.approx(float(eager_loss.detach()), rel=1e-5)
    for ours, theirs in zip(net.parameters(), twin.parameters()):
        torch.testing.assert_close(theirs, ours, rtol=1e-4, atol=1e-5)


def test_onednn_is_preferred_where_it_was_measured_faster_unless_asked(tmp_path, monkeypatch):
    """``GENPOL_GEMM``: ``auto`` prefers oneDNN only on AMD CPUs with a full-width AVX-512 unit (Zen 5,
    family 26 on), keeps MKL on Zen 4 (family 25, AVX-512 in two halves: even GEMMs, oneDNN slower on
    small layers), Intel and anything unrecognized; ``onednn`` and ``mkl`` force the choice; anything else
    is refused, naming the variable. The CPU is read from the first block of /proc/cpuinfo."""
    monkeypatch.setattr(onednn, "ONEDNN_AVAILABLE", True)  # the rule, whatever this build has
    zen5 = {"vendor": "AuthenticAMD", "family": 26, "model": 2, "isa": "avx512f"}
    zen4 = {"vendor": "AuthenticAMD", "family": 25, "model": 17, "isa": "avx512f"}
    xeon = {"vendor": "GenuineIntel", "family": 6, "model": 143, "isa": "avx512f"}
    unknown = {"vendor": "", "family": None, "model": None, "isa": "other"}
    assert onednn._onednn_preferred("auto", zen5)
    assert not onednn._onednn_preferred("auto", zen4)
    assert not onednn._onednn_preferred("auto", {**zen5, "isa": "avx2"})
    assert not onednn._onednn_preferred("auto", xeon) and not onednn._onednn_preferred("auto", unknown)
    assert onednn._onednn_preferred("onednn", xeon)
    assert not onednn._onednn_preferred("mkl", zen5)
    with pytest.raises(ValueError, match="GENPOL_GEMM='fast'"):
        onednn._onednn_preferred("fast", zen5)
    cpuinfo = tmp_path / "cpuinfo"
    cpuinfo.write_text("processor\t: 0\nvendor_id\t: AuthenticAMD\ncpu family\t: 25\nmodel\t\t: 17\n"
                       "model name\t: AMD EPYC\nflags\t\t: fpu sse2 avx2 avx512f\n\n"
                       "processor\t: 1\nvendor_id\t: GenuineIntel\ncpu family\t: 6\nflags\t\t: fpu\n")
    assert onednn.cpu_identity(str(cpuinfo)) == zen4
    cpuinfo.write_text("vendor_id\t: GenuineIntel\ncpu family\t: 6\nmodel\t\t: 143\nflags\t\t: sse2 avx2\n")
    assert onednn.cpu_identity(str(cpuinfo))["isa"] == "avx2"
    assert onednn.cpu_identity()["vendor"]  # a non-empty vendor string on this machine
