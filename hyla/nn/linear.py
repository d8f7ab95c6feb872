"""`Linear`: nn.Linear whose float32 CPU matmuls (forward and backward) run on oneDNN.

PyTorch's eager CPU matmul goes to MKL, which on AMD processors takes a slower path than oneDNN's
for the small shapes of these models (the measurements are in the speed ledger, docs/speed.md).
oneDNN ships inside PyTorch; this module calls it through the operator inductor uses for linear
layers (under torch.compile as an opaque custom operator).
Anywhere else (CUDA, other dtypes, a PyTorch without the operator, or HYLA_PUBLIC_OPS=1) it is
exactly nn.Linear.
Parameters, initialization and state_dict are nn.Linear's.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import nn

from hyla.ops.registration import register_operator
from hyla.ops.torch_internals import onednn_linear, onednn_linear_available


def _plain(t: torch.Tensor) -> torch.Tensor:
    """t itself if it is contiguous or the transpose of a contiguous matrix, else a contiguous copy:
    for other strides (e.g. a slice of the sequence) oneDNN takes a far slower reference kernel."""
    return t if t.is_contiguous() or t.t().is_contiguous() else t.contiguous()


def _onednn_matmul(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [N, K] @ weight[M, K]^T (+ bias [M]) -> [N, M] (contiguous), on oneDNN."""
    return onednn_linear(_plain(x), _plain(weight), bias)


# The same as an opaque operator, so that torch.compile calls it instead of lowering it (inductor's
# own lowering of mkldnn._linear_pointwise expects prepacked weights; see hyla.ops.registration).
# It needs no autograd formula: _OneDnnLinear's backward calls it too. Registered when the first
# oneDNN Linear is built.
def _register_compiled_operator() -> None:
    register_operator(
        "onednn_matmul", "(Tensor x, Tensor weight, Tensor? bias) -> Tensor", _onednn_matmul, _onednn_matmul_shape
    )


def _onednn_matmul_shape(x, weight, bias):
    return x.new_empty(x.shape[0], weight.shape[0])


def _matmul(x, weight, bias):
    return (torch.ops.hyla.onednn_matmul.default if torch.compiler.is_compiling() else _onednn_matmul)(x, weight, bias)


class _OneDnnLinear(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, weight, bias):
        x2 = _plain(x.reshape(-1, x.shape[-1]))  # [N, K]
        ctx.save_for_backward(x2, weight)
        ctx.x_shape, ctx.has_bias = x.shape, bias is not None
        y = _matmul(x2, weight, bias)
        return y.view(*x.shape[:-1], weight.shape[0])

    @staticmethod
    def backward(ctx, grad_y):
        x2, weight = ctx.saved_tensors
        # (no _plain here: every matmul below makes its operands plain itself, and PyTorch 2.6's
        # compiler cannot trace is_contiguous in a backward)
        grad_y2 = grad_y.reshape(-1, grad_y.shape[-1])  # [N, M]
        grad_x = grad_weight = grad_bias = None
        if ctx.needs_input_grad[0]:
            grad_x = _matmul(grad_y2, weight.t(), None).view(ctx.x_shape)  # [N, M] @ [M, K]
        if ctx.needs_input_grad[1]:
            # oneDNN takes the second operand transposed as it is, but copies a transposed first
            # operand (slowly): transpose the narrower of the two explicitly, which under
            # torch.compile becomes a fast generated kernel.
            if x2.shape[1] < grad_y2.shape[1]:
                grad_weight = _matmul(x2.t().contiguous(), grad_y2.t(), None).t()  # ([K, N] @ [N, M])^T
            else:
                grad_weight = _matmul(grad_y2.t().contiguous(), x2.t(), None)  # [M, N] @ [N, K]
        if ctx.has_bias and ctx.needs_input_grad[2]:
            grad_bias = grad_y2.sum(0)
        return grad_x, grad_weight, grad_bias


class Linear(nn.Linear):
    """nn.Linear with oneDNN float32 CPU matmuls (see the module docstring).

    `onednn` says whether this layer uses them: decided when it is built (False on a PyTorch without
    the operator, or with HYLA_PUBLIC_OPS=1).
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self.onednn = onednn_linear_available()
        if self.onednn:
            _register_compiled_operator()

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return _linear(x, self.weight, self.bias, self.onednn)


def _linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None, onednn: bool) -> torch.Tensor:
    # (under autocast F.linear, which autocast casts: the oneDNN operator would stay float32)
    if (
        onednn
        and x.device.type == "cpu"
        and x.dtype == torch.float32
        and weight.dtype == torch.float32
        and x.ndim >= 1
        and x.numel() > 0
        and not torch.is_autocast_enabled("cpu")
    ):
        return _OneDnnLinear.apply(x, weight, bias)
    return F.linear(x, weight, bias)


def linear_group(x: torch.Tensor, layers: list[Linear]) -> list[torch.Tensor]:
    """[layer(x) for layer in layers] as one matmul: the layers' weights stacked along the outputs
    (one call instead of several small ones, forward and backward; the gradient with respect to x
    is summed inside that matmul). Equal to the separate calls up to rounding."""
    if len(layers) == 1:
        return [layers[0](x)]
    biases = [layer.bias for layer in layers]
    if any(b is None for b in biases) and not all(b is None for b in biases):
        return [layer(x) for layer in layers]
    weight = torch.cat([layer.weight for layer in layers])  # [sum of outputs, K]
    bias = None if biases[0] is None else torch.cat(biases)
    y = _linear(x, weight, bias, all(layer.onednn for layer in layers))  # [..., sum of outputs]
    return list(y.split([layer.out_features for layer in layers], dim=-1))
