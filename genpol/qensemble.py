"""Q-ensembles: E critics ``Q_i(s, a)`` evaluated in one batched call (SAC's twin critics, RLPD's ten).

Every head is an MLP on ``concat(s, a)``. All heads live in one set of stacked parameters, the layout of
CORL's ``VectorizedLinear``: ``weights[k] [E, in, out]``, ``biases[k] [E, 1, out]`` and, with
``layer_norm``, a per-head LayerNorm scale and shift ``[E, 1, H]`` (a plain ``nn.LayerNorm`` would share
them across heads). Two implementations read those same tensors, so ``state_dict``, optimizer state and
checkpoints do not depend on which one runs, and ``impl`` can be switched on a live module:

* ``"batched"``: one ``torch.baddbmm`` per hidden layer over all heads (the 1-wide output layer as a
  dot product, see ``_forward_batched``);
* ``"func"``: ``torch.vmap`` of ``torch.func.functional_call`` on a meta-device plain head, fed views of
  the stacked parameters in ``nn.Linear`` / ``nn.LayerNorm`` layout;
* ``"onednn"``: ``"batched"`` with each hidden layer as one oneDNN GEMM per head (forward and both
  gradients). CPU float32 only; elsewhere it runs ``"batched"``.

``bench/ensemble.py`` measures ``batched`` against ``func`` (``bench/results/ensemble.json``) and
``bench/sac_throughput.py`` ``onednn`` against ``batched`` (``bench/results/sac_throughput.json``);
an ensemble built without ``impl`` takes the winner for the torch thread count it is built at
(``default_impl``): ``"onednn"`` on one thread where oneDNN is preferred (``genpol.onednn``: not on Intel
CPUs, whose MKL is as fast), else ``"batched"``.
"""

from __future__ import annotations

import copy
from typing import Any, Sequence, TypeVar

import torch
import torch.nn.functional as F
from torch import nn

from genpol.nets import ACTIVATIONS, activation_class
from genpol.onednn import ONEDNN_AVAILABLE, ONEDNN_PREFERRED

IMPLEMENTATIONS = ("batched", "func", "onednn")


# bench/ensemble.py, one thread on this CPU (E = 2 and 10, with and without LayerNorm): eager "batched"
# costs the same as the bare baddbmm floor and "func" 1.13x more (vmap's overhead, 1.2x at E = 2);
# compiled, "func" is 2.3x slower, because inductor saves the vmapped ReLUs' backward masks as bool
# tensors, which its kernels write ~40x slower than floats here. Hence "batched".
# All of that is MKL's GEMM, which on this AMD CPU takes its generic AVX2 path (~107 GFLOP/s a core);
# oneDNN's AVX-512 GEMM does the same products at ~190-225 GFLOP/s. bench/sac_throughput.py, one
# thread: an E = 10 LayerNorm update takes 13.4 ms with "onednn" against 17.6 ms "batched" (1.31x),
# genpol's twin-critic SAC update 7.1 ms against 8.9. A second thread speeds the bare baddbmm SAC step
# up 1.7x and the oneDNN one 1.3x (MKL's batched GEMM hands each thread whole heads, oneDNN splits each
# 256 x 256 GEMM): on two threads the two are even, "batched" 2-3% ahead in an interleaved A/B.
# On an Intel Xeon MKL is not crippled and "batched" wins on one thread too (genpol.onednn's docstring).
DEFAULT_IMPL = "onednn" if ONEDNN_PREFERRED else "batched"  # the one-thread winner


def default_impl() -> str:
    """The faster implementation at the current torch thread count (see above)."""
    return DEFAULT_IMPL if torch.get_num_threads() == 1 else "batched"
INITS = ("torch", "xavier")
ModuleT = TypeVar("ModuleT", bound=nn.Module)


def _layer_kind(layer: nn.Module) -> type[nn.Module]:
    """A head layer's role: every ``nn.Linear`` (genpol's ``OneDNNLinear`` included) is one, and torch's
    ``nn.Mish`` is genpol's Mish (the same function), so heads built either way load alike."""
    if isinstance(layer, nn.Linear):
        return nn.Linear
    if isinstance(layer, nn.Mish):
        return ACTIVATIONS["mish"]
    return type(layer)


def critic_mlp(in_dim: int, hidden_sizes: Sequence[int], activation: str = "relu", layer_norm: bool = False,
               layer_norm_eps: float = 1e-5) -> nn.Sequential:
    """One plain critic head ``in_dim -> hidden_sizes -> 1``: [Linear, (LayerNorm), activation] per hidden
    layer, then Linear. With ``layer_norm`` it is RLPD's critic (Dense -> LayerNorm -> ReLU); without, SB3's."""
    sizes = [in_dim, *hidden_sizes]
    layers: list[nn.Module] = []
    for fan_in, fan_out in zip(sizes[:-1], sizes[1:]):
        layers.append(nn.Linear(fan_in, fan_out))
        if layer_norm:
            layers.append(nn.LayerNorm(fan_out, eps=layer_norm_eps))
        layers.append(activation_class(activation)())
    layers.append(nn.Linear(sizes[-1], 1))
    return nn.Sequential(*layers)


class QEnsemble(nn.Module):
    """``num_qs`` critics evaluated together: ``forward(obs [B, D], actions [B, A]) -> q [E, B]``.

    ``init="torch"`` gives every head ``nn.Linear``'s default init, drawn independently per head (what
    stable-baselines3 does); ``"xavier"`` xavier-uniform weights and zero biases (RLPD). LayerNorm scales
    start at 1 and shifts at 0. ``layer_norm_eps`` is torch's default 1e-5 (flax, hence RLPD, uses 1e-6).
    ``impl`` None takes ``default_impl()``, the faster one at the torch thread count of construction.
    """

    def __init__(self, obs_dim: int, act_dim: int, num_qs: int = 2, hidden_sizes: Sequence[int] = (256, 256),
                 activation: str = "relu", layer_norm: bool = False, init: str = "torch", impl: str | None = None,
                 layer_norm_eps: float = 1e-5):
        super().__init__()
        if init not in INITS:
            raise ValueError(f"unknown init '{init}'; choose one of {list(INITS)}")
        if num_qs < 1 or obs_dim < 1 or act_dim < 1:
            raise ValueError(f"need num_qs, obs_dim, act_dim >= 1, got {num_qs}, {obs_dim}, {act_dim}")
        self.obs_dim, self.act_dim, self.num_qs = obs_dim, act_dim, num_qs
        self.hidden_sizes = tuple(int(size) for size in hidden_sizes)
        self.activation_name, self.layer_norm, self.layer_norm_eps = activation, layer_norm, layer_norm_eps
        self.impl = impl if impl is not None else default_impl()
        self.activation = activation_class(activation)()
        sizes = [obs_dim + act_dim, *self.hidden_sizes, 1]
        self.weights = nn.ParameterList(nn.Parameter(torch.empty(num_qs, fan_in, fan_out))
                                        for fan_in, fan_out in zip(sizes[:-1], sizes[1:]))
        self.biases = nn.ParameterList(nn.Parameter(torch.empty(num_qs, 1, fan_out)) for fan_out in sizes[1:])
        norm_sizes = self.hidden_sizes if layer_norm else ()
        self.ln_scales = nn.ParameterList(nn.Parameter(torch.ones(num_qs, 1, size)) for size in norm_sizes)
        self.ln_shifts = nn.ParameterList(nn.Parameter(torch.zeros(num_qs, 1, size)) for size in norm_sizes)
        with torch.device("meta"):
            base = critic_mlp(sizes[0], self.hidden_sizes, activation, layer_norm, layer_norm_eps)
        # Kept out of the module tree: its meta parameters must not show up in parameters() or state_dict().
        self.__dict__["_func_base"] = base
        heads = [critic_mlp(sizes[0], self.hidden_sizes, activation, layer_norm, layer_norm_eps)
                 for _ in range(num_qs)]
        if init == "xavier":
            for linear in (layer for head in heads for layer in head if isinstance(layer, nn.Linear)):
                nn.init.xavier_uniform_(linear.weight)
                nn.init.zeros_(linear.bias)
        self.load_heads(heads)

    @property
    def impl(self) -> str:
        return self._impl

    @impl.setter
    def impl(self, value: str) -> None:
        if value not in IMPLEMENTATIONS:
            raise ValueError(f"unknown impl '{value}'; choose one of {list(IMPLEMENTATIONS)}")
        self._impl = value

    @property
    def in_dim(self) -> int:
        return self.obs_dim + self.act_dim

    def extra_repr(self) -> str:
        return (f"obs_dim={self.obs_dim}, act_dim={self.act_dim}, num_qs={self.num_qs}, "
                f"hidden_sizes={self.hidden_sizes}, activation={self.activation_name}, "
                f"layer_norm={self.layer_norm}, impl={self.impl}")

    @classmethod
    def from_modules(cls, heads: Sequence[nn.Sequential], obs_dim: int, impl: str | None = None) -> "QEnsemble":
        """An ensemble holding copies of E plain critic heads, e.g. stable-baselines3's SAC
        ``critic.q_networks``. Hidden sizes, activation and LayerNorm are read from the heads, which must
        all be ``critic_mlp``-shaped and alike; ``obs_dim`` splits their input width into obs and action."""
        heads = list(heads)
        if not heads:
            raise ValueError("from_modules needs at least one head")
        # Read the architecture off head 0; load_heads then checks every head against it layer by layer.
        linears = [layer for layer in heads[0] if isinstance(layer, nn.Linear)]
        norms = [layer for layer in heads[0] if isinstance(layer, nn.LayerNorm)]
        others = [_layer_kind(layer) for layer in heads[0] if not isinstance(layer, (nn.Linear, nn.LayerNorm))]
        names = [name for name, module_class in ACTIVATIONS.items() if others and module_class is others[0]]
        if not linears or not names:
            raise ValueError(f"head 0 is not a critic MLP of Linear layers and one of {sorted(ACTIVATIONS)}: {heads[0]}")
        if not 0 < obs_dim < linears[0].in_features:
            raise ValueError(f"obs_dim {obs_dim} must be below the heads' input width {linears[0].in_features}")
        ensemble = cls(obs_dim, linears[0].in_features - obs_dim, len(heads),
                       [linear.out_features for linear in linears[:-1]], names[0], layer_norm=bool(norms),
                       impl=impl, layer_norm_eps=norms[0].eps if norms else 1e-5)
        ensemble.load_heads(heads)
        return ensemble

    def _head_parameters(self) -> dict[str, torch.Tensor]:
        """The stacked parameters as views ``[E, ...]`` named and laid out as in one ``critic_mlp`` head
        (``nn.Linear``'s weight is ``[out, in]``): what ``functional_call`` takes, and what heads load into."""
        views: dict[str, torch.Tensor] = {}
        position = 0
        for layer, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            views[f"{position}.weight"], views[f"{position}.bias"] = weight.mT, bias.squeeze(1)
            position += 1
            if layer < len(self.hidden_sizes) and self.layer_norm:
                views[f"{position}.weight"] = self.ln_scales[layer].squeeze(1)
                views[f"{position}.bias"] = self.ln_shifts[layer].squeeze(1)
                position += 1
            position += 1  # the activation
        return views

    @torch.no_grad()
    def load_heads(self, heads: Sequence[nn.Module]) -> None:
        """Copy E plain heads (``critic_mlp``-shaped, same sizes as this ensemble) into the stacked parameters."""
        heads = list(heads)
        if len(heads) != self.num_qs:
            raise ValueError(f"expected {self.num_qs} heads, got {len(heads)}")
        expected = [(_layer_kind(layer), getattr(layer, "eps", None)) for layer in self._func_base]
        expected_shapes = {name: p.shape for name, p in self._func_base.named_parameters()}
        for index, head in enumerate(heads):
            layers = [(_layer_kind(layer), getattr(layer, "eps", None)) for layer in head]
            shapes = {name: p.shape for name, p in head.named_parameters()}
            if layers != expected or shapes != expected_shapes:
                raise ValueError(f"head {index} does not match this ensemble's head {self._func_base}:\n{head}")
        stacked, _ = torch.func.stack_module_state(heads)
        for name, view in self._head_parameters().items():
            view.copy_(stacked[name])

    def head_module(self, index: int) -> nn.Sequential:
        """A standalone copy of head ``index`` as a plain ``critic_mlp`` (the inverse of ``load_heads``)."""
        head = critic_mlp(self.in_dim, self.hidden_sizes, self.activation_name, self.layer_norm, self.layer_norm_eps)
        head.to(device=self.weights[0].device, dtype=self.weights[0].dtype)
        head.load_state_dict({name: view[index] for name, view in self._head_parameters().items()})
        return head

    def forward(self, obs: torch.Tensor, actions: torch.Tensor, heads: torch.Tensor | None = None) -> torch.Tensor:
        """``obs [B, D], actions [B, A] -> q [E, B]``: every head on the same batch. Either input may instead
        be per head, ``[E, B, D]`` / ``[E, B, A]`` (head i sees slice i); the other is then broadcast.

        ``heads [M]``: evaluate only those heads, ``q [M, B]`` in that order (a subset-min needs no other:
        EXPO's ranking of 2 of 10 target critics costs a fifth of all ten)."""
        count = self.num_qs if heads is None else int(heads.shape[0])
        if obs.dim() == 2 and actions.dim() == 3:
            obs = obs.expand(actions.shape[0], *obs.shape)
        elif obs.dim() == 3 and actions.dim() == 2:
            actions = actions.expand(obs.shape[0], *actions.shape)
        inputs = torch.cat([obs, actions], dim=-1)
        if inputs.shape[-1] != self.in_dim or inputs.dim() not in (2, 3) or \
                (inputs.dim() == 3 and inputs.shape[0] != count):
            raise ValueError(f"expected obs [B, {self.obs_dim}] and actions [B, {self.act_dim}] (or with a "
                             f"leading [{count}]), got {list(obs.shape)} and {list(actions.shape)}")
        if self.impl == "func":
            return self._forward_func(inputs, heads)
        onednn = (self.impl == "onednn" and ONEDNN_AVAILABLE and inputs.device.type == "cpu"
                  and inputs.dtype == torch.float32)
        return self._forward_batched(inputs, onednn, heads)

    def _forward_batched(self, inputs: torch.Tensor, onednn: bool = False, heads: torch.Tensor | None = None
                         ) -> torch.Tensor:
        """``inputs [B, in]`` or ``[E, B, in] -> q [E, B]``: each hidden layer as one ``baddbmm``, or with
        ``onednn`` one oneDNN GEMM per head; the 1-wide output layer as ``_HeadwiseOutput`` (a ``baddbmm``
        with one output column runs MKL's slow path: at E = 10 its forward takes 0.46 ms against 0.11 ms,
        forward and gradients 1.5 ms against 0.7 ms; at E = 2 0.31 against 0.19 ms)."""
        def of_heads(stacked: torch.Tensor) -> torch.Tensor:  # [E, ...] -> the evaluated heads' [M, ...]
            return stacked if heads is None else stacked.index_select(0, heads)

        count = self.num_qs if heads is None else int(heads.shape[0])
        hidden = inputs if inputs.dim() == 3 else inputs.expand(count, *inputs.shape)
        last = len(self.weights) - 1
        # Without LayerNorm a ReLU follows the GEMM directly: oneDNN applies it in the GEMM's epilogue,
        # and its gradient is masked by the saved output (compiled, inductor would otherwise save the
        # mask as a bool tensor, whose CPU stores run ~40x slower than float ones). One difference from
        # torch.relu: the epilogue maps NaN (and inf - inf) to 0, so a non-finite input row gives finite Q
        # values here where the other impls give NaN (Intel oneDNN, 2026-12-07). Kept: a NaN reaches a critic's
        # input only from a non-finite observation or policy, and the runners' guards stop a run on those
        # (observations, parameters, losses); the gradients of such a row stay NaN.
        fused_relu = onednn and not self.layer_norm and self.activation_name == "relu"
        for layer, (weight, bias) in enumerate(zip(self.weights, self.biases)):
            weight, bias = of_heads(weight), of_heads(bias)
            if layer == last:
                hidden = _HeadwiseOutput.apply(hidden, weight, bias)
            elif onednn:
                hidden = _HeadwiseOneDNNLinear.apply(hidden, weight, bias, fused_relu)
            else:
                hidden = torch.baddbmm(bias, hidden, weight)
            if layer < last and not fused_relu:
                if self.layer_norm:
                    # F.layer_norm only takes a [H] affine; normalize bare, then apply the per-head [E, 1, H] one.
                    normalized = F.layer_norm(hidden, hidden.shape[-1:], eps=self.layer_norm_eps)
                    hidden = torch.addcmul(of_heads(self.ln_shifts[layer]), normalized, of_heads(self.ln_scales[layer]))
                if self.activation_name == "relu":
                    hidden = _ReLU.apply(hidden)  # the same ReLU, its gradient without a bool mask when compiled
                else:
                    hidden = self.activation(hidden)
        return hidden.squeeze(-1)

    def _forward_func(self, inputs: torch.Tensor, heads: torch.Tensor | None = None) -> torch.Tensor:
        """``inputs [B, in]`` or ``[E, B, in] -> q [E, B]``: ``vmap`` of one plain head over the stacked
        parameters (of ``heads`` only, when given)."""
        def one_head(parameters: dict[str, torch.Tensor], head_inputs: torch.Tensor) -> torch.Tensor:
            return torch.func.functional_call(self._func_base, parameters, (head_inputs,))

        parameters = self._head_parameters()
        if heads is not None:
            parameters = {name: value.index_select(0, heads) for name, value in parameters.items()}
        input_dim = 0 if inputs.dim() == 3 else None
        return torch.vmap(one_head, in_dims=(0, input_dim))(parameters, inputs).squeeze(-1)


def _headwise_gemm_eager(left: torch.Tensor, right: torch.Tensor, bias: torch.Tensor | None, relu: bool) -> torch.Tensor:
    """``left [E, M, K] @ right [E, K, N] (+ bias [E, 1, N]) -> [E, M, N]``, one oneDNN GEMM per head
    (``mkldnn::_linear_pointwise``, the op inductor emits for frozen linears), ReLU in its epilogue with
    ``relu``. Both operands may be strided views (transposes, an ``expand`` over the heads): no copies.
    A zero stride inside one head's matrix is another matter (see ``_HeadwiseOneDNNLinear.backward``)."""
    epilogue = "relu" if relu else "none"
    return torch.stack([
        torch.ops.mkldnn._linear_pointwise(left[head], right[head].t(), None if bias is None else bias[head, 0],
                                           epilogue, [], "")
        for head in range(right.shape[0])])


@torch.library.custom_op("genpol::headwise_gemm", mutates_args=())
def _headwise_gemm_op(left: torch.Tensor, right: torch.Tensor, bias: torch.Tensor | None, relu: bool) -> torch.Tensor:
    """``_headwise_gemm_eager`` as one opaque op for torch.compile: inductor lowers ``_linear_pointwise``
    only for frozen (constant) weights, and trained weights are graph inputs."""
    return _headwise_gemm_eager(left, right, bias, relu)


@_headwise_gemm_op.register_fake
def _headwise_gemm_shape(left: torch.Tensor, right: torch.Tensor, bias: torch.Tensor | None, relu: bool) -> torch.Tensor:
    return left.new_empty((right.shape[0], left.shape[1], right.shape[2]))


@torch.library.custom_op("genpol::relu_backward", mutates_args=())
def _relu_backward_op(grad_output: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    """ReLU's gradient from its float output, opaque to torch.compile: traced, the partitioner saves
    the mask ``output <= 0`` as a bool tensor instead, and inductor's CPU kernels store bools ~40x
    slower than floats (~1 ms for a [2, 256, 256] mask here, more than the GEMM that made it)."""
    return torch.ops.aten.threshold_backward(grad_output, output, 0)


@_relu_backward_op.register_fake
def _relu_backward_shape(grad_output: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    return torch.empty_like(grad_output)


def _headwise_gemm(left: torch.Tensor, right: torch.Tensor, bias: torch.Tensor | None = None,
                   relu: bool = False) -> torch.Tensor:
    # the custom op only where a graph is traced: in eager its dispatch costs ~20 us a call
    if torch.compiler.is_compiling():
        return _headwise_gemm_op(left, right, bias, relu)
    return _headwise_gemm_eager(left, right, bias, relu)


def _relu_backward(grad_output: torch.Tensor, output: torch.Tensor) -> torch.Tensor:
    if torch.compiler.is_compiling():
        return _relu_backward_op(grad_output, output)
    return torch.ops.aten.threshold_backward(grad_output, output, 0)


class _HeadwiseOneDNNLinear(torch.autograd.Function):
    """``hidden [E, B, in] @ weight [E, in, out] + bias [E, 1, out] -> [E, B, out]`` (then ReLU with
    ``relu``), what one ``baddbmm`` computes, as E oneDNN GEMMs forward and E for each gradient.
    ``hidden`` may be an ``expand`` of one ``[B, in]`` batch (autograd then sums its gradient over the heads)."""

    @staticmethod
    def forward(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, relu: bool) -> torch.Tensor:
        return _headwise_gemm(hidden, weight, bias, relu)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[Any, ...], output: torch.Tensor) -> None:
        hidden, weight, _, ctx.relu = inputs
        ctx.save_for_backward(hidden, weight, output if ctx.relu else None)

    @staticmethod
    @torch.autograd.function.once_differentiable
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hidden, weight, output = ctx.saved_tensors
        # a broadcast gradient (that of a plain sum: stride 0) sends oneDNN to a ~1000x slower kernel
        grad_output = grad_output.contiguous()
        if ctx.relu:  # relu(x) > 0 exactly where x > 0, so the output masks the gradient
            grad_output = _relu_backward(grad_output, output)
        grad_hidden = _headwise_gemm(grad_output, weight.mT) if ctx.needs_input_grad[0] else None
        grad_weight = _headwise_gemm(hidden.mT, grad_output) if ctx.needs_input_grad[1] else None
        grad_bias = grad_output.sum(dim=1, keepdim=True) if ctx.needs_input_grad[2] else None
        return grad_hidden, grad_weight, grad_bias, None


class _ReLU(torch.autograd.Function):
    """``relu``, with the gradient masked by the saved output through ``_relu_backward`` (compiled, a
    traced ReLU's mask would be saved as a bool tensor; see ``_relu_backward_op``). Its backward, like
    ``_HeadwiseOutput``'s, is made of differentiable ops: ``create_graph`` still works through
    ``impl="batched"`` (``"onednn"``'s GEMMs have no second derivative)."""

    @staticmethod
    def forward(hidden: torch.Tensor) -> torch.Tensor:
        return torch.relu(hidden)

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor], output: torch.Tensor) -> None:
        ctx.save_for_backward(output)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> torch.Tensor:
        (output,) = ctx.saved_tensors
        return _relu_backward(grad_output, output)


class _HeadwiseOutput(torch.autograd.Function):
    """The 1-wide output layer, ``hidden [E, B, H] @ weight [E, H, 1] + bias [E, 1, 1] -> [E, B, 1]``, as a
    dot product along H. Autograd's own gradient of that product is slow (at E = 10 it reduces a
    broadcast [E, B, H] product over B: 2.2 ms); written out, the gradients are an outer product and
    one ``bmm`` (one thread, E = 10: 0.7 ms for forward and gradients, a ``baddbmm`` 1.5 ms)."""

    @staticmethod
    def forward(hidden: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor) -> torch.Tensor:
        return torch.linalg.vecdot(hidden, weight.mT).unsqueeze(-1) + bias

    @staticmethod
    def setup_context(ctx: Any, inputs: tuple[torch.Tensor, ...], output: torch.Tensor) -> None:
        hidden, weight, _ = inputs
        ctx.save_for_backward(hidden, weight)

    @staticmethod
    def backward(ctx: Any, grad_output: torch.Tensor) -> tuple[torch.Tensor | None, ...]:
        hidden, weight = ctx.saved_tensors
        grad_hidden = grad_output * weight.mT if ctx.needs_input_grad[0] else None
        grad_weight = torch.bmm(hidden.mT, grad_output) if ctx.needs_input_grad[1] else None
        grad_bias = grad_output.sum(dim=1, keepdim=True) if ctx.needs_input_grad[2] else None
        return grad_hidden, grad_weight, grad_bias


def subset_min(q: torch.Tensor, num_min: int, generator: torch.Generator | None = None) -> torch.Tensor:
    """``q [E, B] -> [B]``: the minimum over ``num_min`` heads drawn without replacement,
    ``torch.randperm(E, generator=generator)[:num_min]`` (RLPD's ``subsample_ensemble``), a fresh draw per call.

    ``num_min == E`` is the plain minimum and draws nothing, so the generator is left untouched.
    """
    num_heads = q.shape[0]
    if not 1 <= num_min <= num_heads:
        raise ValueError(f"num_min must be in [1, {num_heads}], got {num_min}")
    if num_min == num_heads:
        return q.min(dim=0).values
    device = generator.device if generator is not None else q.device
    heads = torch.randperm(num_heads, generator=generator, device=device)[:num_min].to(q.device)
    return q.index_select(0, heads).min(dim=0).values


def _tensors(source: nn.Module | Sequence[torch.Tensor]) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
    if isinstance(source, nn.Module):
        return list(source.parameters()), list(source.buffers())
    return list(source), []


@torch.no_grad()
def polyak_update(target: nn.Module | Sequence[torch.Tensor], online: nn.Module | Sequence[torch.Tensor],
                  tau: float) -> None:
    """``target <- (1 - tau) * target + tau * online`` for every parameter, in one ``_foreach_lerp_``;
    buffers (modules only) are copied. Runs under ``no_grad``: a target holding ``requires_grad`` leaves is fine."""
    if not 0.0 <= tau <= 1.0:
        raise ValueError(f"tau must be in [0, 1], got {tau}")
    target_parameters, target_buffers = _tensors(target)
    online_parameters, online_buffers = _tensors(online)
    if len(target_parameters) != len(online_parameters) or len(target_buffers) != len(online_buffers):
        raise ValueError(f"target has {len(target_parameters)} parameters / {len(target_buffers)} buffers, "
                         f"online {len(online_parameters)} / {len(online_buffers)}")
    for target_tensor, online_tensor in zip(target_parameters + target_buffers, online_parameters + online_buffers):
        if target_tensor.shape != online_tensor.shape:
            raise ValueError(f"shape mismatch: target {list(target_tensor.shape)}, online {list(online_tensor.shape)}")
    if target_parameters:
        torch._foreach_lerp_(target_parameters, online_parameters, tau)
    if target_buffers:
        torch._foreach_copy_(target_buffers, online_buffers)


def make_target(online: ModuleT) -> ModuleT:
    """A frozen copy of ``online`` (parameters with ``requires_grad=False``), for ``polyak_update``."""
    target = copy.deepcopy(online)
    target.requires_grad_(False)
    return target
