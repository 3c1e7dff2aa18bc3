"""Mish, ``x tanh(softplus(x))`` (Misra 2019), fast on the CPU.

Why not ``nn.Mish``: torch's CPU Mish kernels are scalar. Here (2560 x 256 float32, one thread) its
forward and backward take 1.9 and 2.4 ms; the eager ops below take ~1.0 and ~1.7 ms, and the same
formulas compiled by inductor into one vectorized loop per direction ~0.26 and ~0.43 ms. Mish was a third
of DPPO's update (``bench/dppo_profile.py``): DPPO's ratio step on a minibatch of 256 (2560 denoiser rows)
takes ~23 ms with the compiled loops against ~32 ms with eager ops.

The formulas, with ``e = exp(min(x, 20))`` and ``n = e (e + 2)`` (so ``(1 + e)^2 = n + 1``):
``tanh(softplus(x)) = n / (n + 2)``, ``1 - tanh(softplus(x)) = 2 / (n + 2)`` and ``sigmoid(x) = e / (1 + e)``.
Only products and quotients, no differences of nearly equal numbers, so the relative error stays at a
few ulps for every x, very negative ones included (where ``1 - 2 / ((1 + e)^2 + 1)`` would cancel). Past
x = 20 every factor is 1 in float32 and float64, so clamping there loses nothing and avoids inf / inf;
the derivative's ``x (1 - t)`` term takes the clamped x as well (below 1e-15 there: with x itself, 1 - t
frozen at its x = 20 value would let the term grow with x, to 2.7 at x = 1e17).

* float32 and float64 on the CPU. Tensors below ``TORCH_KERNEL_MAX_ELEMENTS`` (acting on a few envs),
  other dtypes and devices use ``F.mish``: one call is cheaper there, bfloat16 intermediates would lose
  more than torch's kernel does, and on a GPU it is one launch.
* Contiguous float32 tensors of at least ``FUSED_MIN_ELEMENTS`` use the compiled loops (compiled on first
  use, for any shape), except on tensors a torch.func transform has wrapped; inside a graph being
  traced the module is ``mish_reference`` itself, which inductor fuses and differentiates. If the
  compiled loop fails (no C++ compiler), a warning says so once and the eager ops serve from then on.
* The eager ops build every value from ``exp``, products and quotients, whose results do not depend on an
  element's position in the tensor (torch's ``sigmoid`` and ``F.mish`` differ by an ulp between their
  vectorized body and scalar tail).
* The paths agree to float rounding (~1e-6 relative), not bitwise, so results change slightly when a
  tensor crosses a threshold (a TRPO batch against its chunks). The choice depends on the tensor alone,
  never on grad mode, so sampling and the log-prob recomputed from its record run the same function.
* The backward saves only ``x``; under ``create_graph`` (TRPO's Fisher-vector products) it runs the same
  formulas in differentiable ops, so second derivatives are exact. Forward-mode AD (``jvp``) and vmap work.
"""

from __future__ import annotations

import logging
from typing import Any, Callable

import torch
from torch import nn

from genpol.onednn import is_functorch_wrapped

log = logging.getLogger(__name__)

FUSED_MIN_ELEMENTS = 65_536  # 256 rows of a 256-wide layer: below, the call overhead eats the gain
# Below this torch's kernel is faster: one call of ~2 us at 256 elements (acting on one env) where the
# autograd.Function and its eight ops cost ~27 us; they win from ~8k elements (16k: 36 against 52 us).
TORCH_KERNEL_MAX_ELEMENTS = 8_192
CLAMP = 20.0  # past it tanh(softplus(x)) and sigmoid(x) round to 1 in float32 and float64


def mish_reference(x: torch.Tensor) -> torch.Tensor:
    """``x n / (n + 2)``, ``n = e (e + 2)``, ``e = exp(min(x, 20))``, in out-of-place differentiable ops."""
    e = torch.exp(torch.clamp(x, max=CLAMP))
    n = e * (e + 2.0)
    return x * (n / (n + 2.0))


def mish_derivative(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """``grad (t + x (1 - t) (1 + t) sigmoid(x))``, ``t = tanh(softplus(x)) = n / (n + 2)``,
    ``1 - t = 2 / (n + 2)``, ``sigmoid(x) = e / (1 + e)``; out-of-place differentiable ops."""
    clamped = torch.clamp(x, max=CLAMP)
    e = torch.exp(clamped)
    n = e * (e + 2.0)
    inverse = 1.0 / (n + 2.0)
    t = n * inverse
    return grad * (t + clamped * (2.0 * inverse) * (1.0 + t) * (e / (1.0 + e)))


def _mish_eager(x: torch.Tensor) -> torch.Tensor:
    """``mish_reference`` with in-place ops on fresh buffers."""
    e = x.clamp(max=CLAMP).exp_()
    n = (e + 2.0).mul_(e)
    return n.div_(n + 2.0).mul_(x)


def _mish_derivative_eager(x: torch.Tensor, grad: torch.Tensor) -> torch.Tensor:
    """``mish_derivative`` with in-place ops on fresh buffers (``grad`` is read, never written)."""
    clamped = x.clamp(max=CLAMP)
    e = clamped.exp()
    sigmoid = e / (e + 1.0)
    n = (e + 2.0).mul_(e)
    inverse = n.add(2.0).reciprocal_()
    t = n.mul_(inverse)
    # t + x (1 - t)(1 + t) sigmoid, with 1 - t = 2 inverse; the last product out of place (grad may be batched)
    return inverse.mul_(2.0).mul_(t + 1.0).mul_(sigmoid).mul_(clamped).add_(t) * grad


class _Fused:
    """The compiled loops, built on first use; ``failed`` after a compile error (then never retried)."""

    kernels: dict[str, Callable[..., torch.Tensor]] = {}
    failed = False


def _fused(name: str, function: Callable[..., torch.Tensor], *tensors: torch.Tensor) -> torch.Tensor | None:
    """``function(*tensors)`` through its compiled loop when that applies, else None."""
    if (_Fused.failed or tensors[0].numel() < FUSED_MIN_ELEMENTS or torch.compiler.is_compiling()
            or any(t.dtype != torch.float32 or not t.is_contiguous() or is_functorch_wrapped(t) for t in tensors)):
        return None
    if name not in _Fused.kernels:
        _Fused.kernels[name] = torch.compile(function, dynamic=True)
    try:
        return _Fused.kernels[name](*tensors)
    except (torch.OutOfMemoryError, torch._dynamo.exc.RecompileError):
        raise  # memory, or a caller that forbids recompiles (error_on_recompile): not the loop's failure
    except Exception as error:  # e.g. no C++ compiler for inductor: the eager ops still work
        _Fused.failed = True
        log.warning("genpol Mish: the compiled CPU loop failed (%s: %s); using eager ops from now on",
                    type(error).__name__, error)
        return None


class _MishFunction(torch.autograd.Function):
    generate_vmap_rule = True  # elementwise torch ops: torch.func (vmap, grad) runs the functions as they are

    @staticmethod
    def forward(x: torch.Tensor) -> torch.Tensor:
        fused = _fused("forward", mish_reference, x)
        return fused if fused is not None else _mish_eager(x)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor], output: torch.Tensor) -> None:
        ctx.save_for_backward(inputs[0])
        ctx.save_for_forward(inputs[0])

    @staticmethod
    def backward(ctx: Any, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        if torch.is_grad_enabled():  # a double backward: the same formulas, differentiable
            return mish_derivative(x, grad)
        fused = _fused("backward", mish_derivative, x, grad)
        return fused if fused is not None else _mish_derivative_eager(x, grad)

    @staticmethod
    def jvp(ctx: Any, tangent: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        return mish_derivative(x, tangent)


class Mish(nn.Module):
    """``x tanh(softplus(x))``, as ``nn.Mish`` computes it to a few ulps, faster on the CPU."""

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        # the choice depends on the tensor alone, never on grad mode: sampling and the log-prob recomputed
        # from its record must run the same function (log-ratio exactly 0 right after sampling)
        if (x.device.type != "cpu" or x.dtype not in (torch.float32, torch.float64)
                or x.numel() < TORCH_KERNEL_MAX_ELEMENTS):
            return nn.functional.mish(x)
        if torch.compiler.is_compiling():  # inductor fuses the formula and derives its backward itself
            return mish_reference(x)  # (and dynamo cannot trace an autograd.Function with a custom jvp)
        return _MishFunction.apply(x)
