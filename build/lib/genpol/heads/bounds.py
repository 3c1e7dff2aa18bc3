"""Clamping a reparameterized sample to the action box [-1, 1] without killing the Q-gradient.

A Q-gradient actor (Consistency-AC, Diffusion-QL) maximizes Q(s, clamp(x_theta(s))). The clamp's own
derivative is 0 outside the box, so once the sampler's pre-clamp output leaves the box for every
noise draw of a state, that state's actor gradient is exactly 0 and the actor can never come back,
whatever the critic later says. Learning from scratch with the Q-loss alone (no BC term pulling the
samples back to data) drives the samples there: the critic's gradient points outward early on, and
the actions freeze at a corner of the box (on MultiGoal: return -4, a random policy gets 3).

The references (``agents/consistency.py`` of Ding & Jin, Diffusion-QL's ``p_sample_loop``) clamp in
place and live with it, with a small online learning rate (1e-5). genpol's fix keeps the forward
value exactly the clamp (the executed actions, the BC samples and the softmax-Q candidates are the
references'), and changes only the backward pass:

* ``zero``: torch's clamp (the references'): gradient 1 inside the box, 0 outside.
* ``straight_through``: gradient 1 everywhere (Bengio et al. 2013's estimator). An outward gradient
  then keeps pushing the pre-clamp value away from the box without changing the action, and the
  way back takes as long as the drift did.
* ``inward`` (genpol's default): gradient 1 inside; outside, the gradient passes only where a
  descent step moves the value back toward the box (x > 1 with dL/da > 0, x < -1 with dL/da < 0),
  and is 0 where it would push it further out. So a saturated action returns as soon as the critic
  prefers a value inside, and never drifts. Inside the box every mode is the identity.

tanh squashing (SAC's) would keep the gradient too, but it changes the forward value: a BC-trained
sampler's output a ~ a_data would execute tanh(a) != a_data, unless consistency training moved to
atanh space, where actions at the bounds of a dataset go to infinity.
"""

from __future__ import annotations

import torch

CLAMP_GRADIENTS = ("inward", "straight_through", "zero")


class _InwardClamp(torch.autograd.Function):
    """clamp(x, -1, 1) whose gradient passes inside the box and, outside it, where descent points inward."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        ctx.save_for_backward(x)
        return x.clamp(-1.0, 1.0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        (x,) = ctx.saved_tensors
        # a descent step x <- x - lr grad moves x toward the box: grad > 0 above it, grad < 0 below it
        passes = ((x >= -1.0) & (x <= 1.0)) | ((x > 1.0) & (grad > 0)) | ((x < -1.0) & (grad < 0))
        return grad * passes


class _StraightThroughClamp(torch.autograd.Function):
    """clamp(x, -1, 1) with the identity's gradient."""

    @staticmethod
    def forward(ctx, x: torch.Tensor) -> torch.Tensor:
        return x.clamp(-1.0, 1.0)

    @staticmethod
    def backward(ctx, grad: torch.Tensor) -> torch.Tensor:
        return grad


def clamp_to_box(x: torch.Tensor, gradient: str = "inward") -> torch.Tensor:
    """``x [...]`` -> ``clamp(x, -1, 1) [...]``, with the backward pass ``gradient`` names (see the module)."""
    if gradient == "inward":
        return _InwardClamp.apply(x)
    if gradient == "straight_through":
        return _StraightThroughClamp.apply(x)
    if gradient == "zero":
        return x.clamp(-1.0, 1.0)
    raise ValueError(f"clamp gradient must be one of {CLAMP_GRADIENTS}, got '{gradient}'")
