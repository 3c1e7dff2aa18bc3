"""oneDNN GEMMs for the CPU: where this torch build has them, where they are the faster choice, and a
drop-in ``nn.Linear`` that uses them.

Which library is faster depends on the CPU's vector unit, measured one thread, fp32, torch 2.13:

* an AMD CPU whose AVX-512 unit is full width (the 2026-11-30 machine): MKL's GEMM takes its generic
  AVX2 path (~107 GFLOP/s a core) while oneDNN's reaches ~190-225 GFLOP/s on the same 256 x 256
  products (``bench/sac_throughput.py``). That is twice the 256-bit peak, which only a full-width
  512-bit unit gives: Zen 5, CPU family 26 (the family was not recorded then; the rate places it);
* an AMD EPYC Zen 4 (family 25 model 17, 2026-12-04), which runs each 512-bit operation as two 256-bit
  halves: MKL 100-101 GFLOP/s, oneDNN 105-112 on 256-2560 x 256 -> 256, but 1.29x and 2.56x MKL's
  time on the input (23 -> 256) and output (256 -> 1) layers, where its per-call set-up dominates.
  genpol's SAC step with the critics in oneDNN ran 12.42 ms per env step against 11.44 in MKL;
* an Intel Xeon (AVX-512, 2026-12-02): even (oneDNN / MKL time 0.89-1.15 on the critics' shapes),
  and genpol's SAC step at CleanRL's settings took 14.5 ms with MKL against 18.0 ms with oneDNN
  (compiled, one thread; eager 15.7 against 20.2).

So oneDNN is *preferred* (``ONEDNN_PREFERRED``) only where it was measured faster, AMD from family 26
(``ONEDNN_FASTER_FROM_FAMILY``), and torch's default (MKL on x86) everywhere else; ``GENPOL_GEMM=onednn``
or ``mkl`` overrides the choice (read at import). The choice is fixed per machine: a run and its resume
use the same kernels (a run started on a Zen 4 before this rule, which preferred oneDNN on every
non-Intel CPU, resumes bit for bit with ``GENPOL_GEMM=onednn``). torch's eager ``nn.Linear`` calls MKL;
inductor calls oneDNN only for frozen (constant) weights, never for weights being trained.
``QEnsemble(impl="onednn")`` routes the critics' hidden layers through oneDNN; ``OneDNNLinear`` does
the same for one plain layer (the SAC actor's 256 x 256).
"""

from __future__ import annotations

import contextlib
import os
import platform
from typing import Any, Iterator

import torch
import torch.nn.functional as F
from torch import nn


def _onednn_gemm_works() -> bool:
    """Whether this build has oneDNN's dense-tensor GEMM (``mkldnn::_linear_pointwise``, the op inductor
    itself emits) and it computes ``x @ W.T + b`` on strided views."""
    if not torch.backends.mkldnn.is_available():
        return False
    try:
        inputs, weight, bias = torch.randn(8, 6), torch.randn(6, 5), torch.randn(5)
        result = torch.ops.mkldnn._linear_pointwise(inputs, weight.t(), bias, "none", [], "")
        return torch.allclose(result, inputs @ weight + bias, rtol=1e-4, atol=1e-5)
    except (AttributeError, RuntimeError, NotImplementedError):
        return False


ONEDNN_AVAILABLE = _onednn_gemm_works()


def cpu_identity(cpuinfo_path: str = "/proc/cpuinfo") -> dict[str, Any]:
    """The first processor's ``vendor`` (``GenuineIntel``, ``AuthenticAMD``), ``family`` and ``model``
    (ints: AMD family 25 is Zen 3 and Zen 4, 26 Zen 5) and ``isa``, the widest vector extension it lists
    (``avx512f``, ``avx2`` or ``other``), from /proc/cpuinfo. Where that file is missing: the vendor is
    ``platform.processor()``, family and model None, isa ``other``."""
    fields: dict[str, str] = {}
    try:
        with open(cpuinfo_path) as cpuinfo:
            for line in cpuinfo:
                key, _, value = line.partition(":")
                if not key.strip():
                    break  # the first processor's block is enough
                fields.setdefault(key.strip(), value.strip())
    except OSError:
        pass
    flags = set(fields.get("flags", "").split())

    def number(key: str) -> int | None:
        return int(fields[key]) if fields.get(key, "").isdigit() else None

    return {"vendor": fields.get("vendor_id", platform.processor()), "family": number("cpu family"),
            "model": number("model"), "isa": next((isa for isa in ("avx512f", "avx2") if isa in flags), "other")}


# vendor -> the first CPU family whose AVX-512 unit is full width, where oneDNN's GEMMs were measured
# faster than MKL's (the module docstring)
ONEDNN_FASTER_FROM_FAMILY = {"AuthenticAMD": 26}


def _onednn_preferred(choice: str, cpu: dict[str, Any]) -> bool:
    """``GENPOL_GEMM``'s ``choice`` (``auto``, ``onednn`` or ``mkl``) on ``cpu`` (``cpu_identity()``):
    oneDNN where it works and is asked for, or, under ``auto``, on the CPUs where it was measured faster
    (the module docstring)."""
    if choice not in ("auto", "onednn", "mkl"):
        raise ValueError(f"GENPOL_GEMM={choice!r}: expected auto, onednn or mkl")
    if not ONEDNN_AVAILABLE or choice == "mkl":
        return False
    if choice == "onednn":
        return True
    first_family = ONEDNN_FASTER_FROM_FAMILY.get(cpu["vendor"])
    return (first_family is not None and cpu["family"] is not None and cpu["family"] >= first_family
            and cpu["isa"] == "avx512f")


ONEDNN_PREFERRED = _onednn_preferred(os.environ.get("GENPOL_GEMM", "auto"), cpu_identity())


def is_functorch_wrapped(tensor: torch.Tensor) -> bool:
    """Whether a torch.func transform (vmap, grad, jvp, ...) has wrapped ``tensor`` (eager only: the
    check cannot be traced, so callers skip it while ``torch.compiler.is_compiling()``)."""
    check = getattr(torch._C._functorch, "is_functorch_wrapped_tensor", None)
    return check is not None and check(tensor)


# True while torch.func.grad is traced or run by torch.compile (``plain_linear_layers``): there every layer
# runs ``F.linear``. Measured with torch 2.13: an autograd.Function under torch.func.grad inside dynamo
# gets ``needs_input_grad`` False for the parameters (their gradients came out zero), fails to trace when
# a layer's input is data rather than an intermediate, and a custom op's registered autograd is no
# more functorch-compatible. Plain autograd under torch.compile (the off-policy steps) is unaffected.
# The flag is process-wide (a module global, which a compiled graph can guard on): no genpol code runs
# networks on several Python threads at once, and one that did would see F.linear in all of them.
_PLAIN_LINEAR = False


@contextlib.contextmanager
def plain_linear_layers() -> Iterator[None]:
    """Run every ``OneDNNLinear`` as ``F.linear`` inside the block (a compiled graph reads the flag when
    traced and guards on it, so set it around every call of such a graph too)."""
    global _PLAIN_LINEAR
    previous, _PLAIN_LINEAR = _PLAIN_LINEAR, True
    try:
        yield
    finally:
        _PLAIN_LINEAR = previous


# A layer narrower than this on either side stays in MKL: oneDNN's advantage is in the wide products
# (the actor's 17 -> 256 input layer and 256 -> 6 heads gain nothing measurable).
MIN_WIDTH = 128
# Below ~64 rows oneDNN's per-call set-up costs more than its faster GEMM saves (one 256 x 256 layer, one
# thread: 59 us against MKL's 25 us at 8 rows, 106 against 118 at 64, 156 against 236 at 128), so acting
# on a few envs stays in MKL.
MIN_ROWS = 64


@torch.library.custom_op("genpol::onednn_linear", mutates_args=())
def _onednn_linear_op(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """``inputs [M, K] @ weight[N, K].T (+ bias [N]) -> [M, N]`` as one opaque op for torch.compile
    (inductor lowers ``_linear_pointwise`` only for frozen weights)."""
    return torch.ops.mkldnn._linear_pointwise(inputs, weight, bias, "none", [], "")


@_onednn_linear_op.register_fake
def _onednn_linear_shape(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    return inputs.new_empty((inputs.shape[0], weight.shape[0]))


def _onednn_linear(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    # the custom op only where a graph is traced: in eager its dispatch costs ~20 us a call
    if torch.compiler.is_compiling():
        return _onednn_linear_op(inputs, weight, bias)
    return torch.ops.mkldnn._linear_pointwise(inputs, weight, bias, "none", [], "")


class _OneDNNLinearFunction(torch.autograd.Function):
    """``inputs [M, K] @ weight [N, K].T + bias [N] -> [M, N]`` with both gradients as oneDNN GEMMs too.
    The backward is built from this same function, so it is itself differentiable: double backward
    (TRPO's Fisher-vector products, gradient penalties) works as through ``F.linear``."""

    @staticmethod
    def forward(inputs: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
        return _onednn_linear(inputs, weight, bias)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        layer_inputs, weight, _ = inputs
        ctx.save_for_backward(layer_inputs, weight)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        layer_inputs, weight = ctx.saved_tensors
        # a broadcast gradient (that of a plain sum: stride 0) sends oneDNN to a ~1000x slower kernel
        grad_output = grad_output.contiguous()
        grad_inputs = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:  # [M, N] @ [N, K]
            grad_inputs = _OneDNNLinearFunction.apply(grad_output, weight.t(), None)
        if ctx.needs_input_grad[1]:  # [N, M] @ [M, K]
            grad_weight = _OneDNNLinearFunction.apply(grad_output.t(), layer_inputs.t(), None)
        if ctx.needs_input_grad[2]:
            grad_bias = grad_output.sum(dim=0)
        return grad_inputs, grad_weight, grad_bias


class OneDNNLinear(nn.Linear):
    """``nn.Linear`` (same parameters, state_dict and init) whose GEMMs run in oneDNN where that is faster:
    CPU float32 on one torch thread where oneDNN is preferred (``ONEDNN_PREFERRED``; decided at
    construction, as ``QEnsemble``'s ``default_impl``: on two threads MKL's GEMM parallelizes better) for
    layers at least ``MIN_WIDTH`` wide on both sides, on batches of at least ``MIN_ROWS`` rows.
    Elsewhere, on another device or dtype, it is exactly ``F.linear``. Any leading batch shape works."""

    def __init__(self, in_features: int, out_features: int, bias: bool = True, **kwargs: Any):
        super().__init__(in_features, out_features, bias, **kwargs)
        self.use_onednn = (ONEDNN_PREFERRED and torch.get_num_threads() == 1
                           and min(in_features, out_features) >= MIN_WIDTH)

    def forward(self, inputs: torch.Tensor) -> torch.Tensor:
        if not (self.use_onednn and not _PLAIN_LINEAR and inputs.device.type == "cpu"
                and inputs.dtype == torch.float32
                and self.weight.dtype == torch.float32 and inputs.numel() > 0):
            return F.linear(inputs, self.weight, self.bias)
        flat = inputs.reshape(-1, self.in_features)
        # the autograd.Function has no vmap rule: under torch.func (vmap, jacrev, ...) F.linear serves
        if flat.shape[0] < MIN_ROWS or (not torch.compiler.is_compiling()
                                        and (is_functorch_wrapped(inputs) or is_functorch_wrapped(self.weight))):
            return F.linear(inputs, self.weight, self.bias)
        output = _OneDNNLinearFunction.apply(flat, self.weight, self.bias)
        return output.reshape(*inputs.shape[:-1], self.out_features)
