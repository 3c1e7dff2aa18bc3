"""One minibatch step - loss, gradient, per-module norm clip, Adam - as a single compiled function.

Why: with small minibatches the update is bound by per-operation overhead, not arithmetic. On this
project's 2-core CPU an eager PPO step for two 64-64 MLPs on 64 samples costs about 2-3 ms, of
which under 10% is matrix work; autograd's engine, the optimizer and ~150 tiny kernel launches are
the rest. ``torch.func.grad`` turns the step into a pure function of the parameters, so
``torch.compile`` can trace forward, backward, clipping and Adam into one graph (about 5x fewer
milliseconds per step; numbers in bench/results/throughput.json).

The math is ``torch.optim.Adam``'s and ``clip_grad_norm_``'s, written out because the fused
optimizer kernel cannot be traced; the Adam state lives in the same ``torch.optim.Adam`` object as
in eager mode, so checkpoints are interchangeable between the two paths.
"""

from __future__ import annotations

from typing import Any, Callable

import torch
from torch import nn
from torch.func import functional_call, grad

from genpol.onednn import plain_linear_layers


class _LossModule(nn.Module):
    """Holds the trained modules so that ``functional_call`` can swap their parameters."""

    def __init__(self, modules: dict[str, nn.Module], loss_fn: Callable[..., tuple[torch.Tensor, dict]]):
        super().__init__()
        self.parts = nn.ModuleDict(modules)
        self.loss_fn = loss_fn

    def forward(self, *batch: Any) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        return self.loss_fn(*batch)


class CompiledAdamStep:
    """``step(*batch) -> diagnostics``: one Adam step of ``optimizer`` on ``loss_fn(*batch)``.

    Args:
        modules: name -> module whose trainable parameters the optimizer holds (e.g. head, critic).
        loss_fn: ``(*batch) -> (loss, diagnostics)``, computed with those modules.
        optimizer: a ``torch.optim.Adam`` over exactly those parameters (its lr and betas are used).
        max_grad_norm: norm clip applied to each module's gradient on its own (as the eager
            ``MinibatchUpdater`` path: one network's gradient never rescales another's), or None.
        joint_clip: clip all modules' gradients as one vector instead (``learner.grad_clip=joint``).
        clip_eps: the epsilon of the clip factor ``max_norm / (norm + clip_eps)`` (torch's 1e-6).

    A parameter group's ``weight_decay`` is applied decoupled, as the eager optimizer's
    (``decoupled_weight_decay``, AdamW): ``p <- p (1 - lr wd)`` before the Adam step.
    """

    def __init__(self, modules: dict[str, nn.Module], loss_fn: Callable[..., tuple[torch.Tensor, dict]],
                 optimizer: torch.optim.Adam, max_grad_norm: float | None, joint_clip: bool = False,
                 clip_eps: float = 1e-6):
        self.module = _LossModule(modules, loss_fn)
        self.optimizer = optimizer
        self.max_grad_norm = max_grad_norm
        self.clip_eps = clip_eps
        by_id = {id(p): name for name, p in self.module.named_parameters()}
        self.entries: list[tuple[str, nn.Parameter, int]] = []  # (name, parameter, param-group index)
        # betas and eps are read here, once: inside the compiled function, reading a param group
        # would make dynamo guard on the whole dict, its changing lr included, and recompile.
        self.hyper: list[tuple[float, float, float, float]] = []  # (beta1, beta2, eps, weight decay)
        for index, group in enumerate(optimizer.param_groups):
            for parameter in group["params"]:
                if id(parameter) not in by_id:
                    raise ValueError("the optimizer holds a parameter outside the compiled modules")
                self.entries.append((by_id[id(parameter)], parameter, index))
                if group["weight_decay"] and not group.get("decoupled_weight_decay", False):
                    raise ValueError("the compiled step applies weight decay decoupled (AdamW) only")
                self.hyper.append((*group["betas"], group["eps"], group["weight_decay"]))
        # the parameter names of each module (``parts.<module>.<...>``): the groups clipped separately
        self.clip_groups = [[name for name, _, _ in self.entries if name.startswith(f"parts.{key}.")]
                            for key in modules]
        self.clip_groups = [names for names in self.clip_groups if names]
        if joint_clip:  # one norm over every module's gradient
            self.clip_groups = [[name for names in self.clip_groups for name in names]]
        self._lrs = torch.zeros(len(optimizer.param_groups), device=self.entries[0][1].device)
        self._compiled = torch.compile(self._step, fullgraph=True, dynamic=False)

    def _state(self, parameter: nn.Parameter) -> dict[str, torch.Tensor]:
        state = self.optimizer.state[parameter]
        if not state:
            state["step"] = torch.zeros((), dtype=torch.float32, device=parameter.device)
            state["exp_avg"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
            state["exp_avg_sq"] = torch.zeros_like(parameter, memory_format=torch.preserve_format)
        return state

    def _step(self, params: dict[str, torch.Tensor], states: list[dict[str, torch.Tensor]],
              lrs: torch.Tensor, *batch: Any) -> dict[str, torch.Tensor]:
        def loss(p: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
            return functional_call(self.module, p, batch, strict=False)

        grads, diagnostics = grad(loss, has_aux=True)(params)
        if self.max_grad_norm is not None:
            clipped = {}
            for names in self.clip_groups:  # clip_grad_norm_'s rule, per module
                norm = torch.linalg.vector_norm(torch.stack([torch.linalg.vector_norm(grads[n]) for n in names]))
                coef = torch.clamp(self.max_grad_norm / (norm + self.clip_eps), max=1.0)
                clipped.update({n: grads[n] * coef for n in names})
            grads = clipped
        with torch.no_grad():
            for (name, parameter, group_index), (beta1, beta2, eps, weight_decay), state in zip(
                    self.entries, self.hyper, states):
                gradient = grads[name]
                if weight_decay:  # a constant of the trace: no operation at genpol's default 0
                    parameter.mul_(1 - lrs[group_index] * weight_decay)
                state["step"].add_(1)
                state["exp_avg"].lerp_(gradient, 1 - beta1)
                state["exp_avg_sq"].mul_(beta2).addcmul_(gradient, gradient, value=1 - beta2)
                bias_correction1 = 1 - beta1 ** state["step"]
                bias_correction2_sqrt = (1 - beta2 ** state["step"]).sqrt()
                denom = (state["exp_avg_sq"].sqrt() / bias_correction2_sqrt).add_(eps)
                parameter.sub_(lrs[group_index] / bias_correction1 * state["exp_avg"] / denom)
        return diagnostics

    def __call__(self, *batch: Any) -> dict[str, torch.Tensor]:
        for index, group in enumerate(self.optimizer.param_groups):
            self._lrs[index] = group["lr"]  # a tensor input: a new lr does not recompile
        params = {name: parameter for name, parameter, _ in self.entries}
        states = [self._state(parameter) for _, parameter, _ in self.entries]
        with plain_linear_layers():  # oneDNN's autograd.Function breaks under torch.func.grad when compiled
            return self._compiled(params, states, self._lrs, *batch)
