"""GELU (tanh approximation) on the CPU as one C++ pass each way (`gelu_cpu.cpp`).

`F.gelu(x, approximate="tanh")` on a CPU without AVX-512 spends most of its time in the vector
tanh (several times a sigmoid); the GELU-MLP of the paper's models runs it forward and backward on
every hidden unit of every token. The kernel computes the same function as x * sigmoid(2z), one
exponential per element, forward and backward (the formulas: gelu_cpu.cpp), float32 only; its
results equal torch's up to float32 rounding (tests/ops/test_gelu_kernel.py compares both with
float64). What it gains: docs/speed.md, row `gelu_kernel`.

Eager only (under torch.compile `hyla.nn.feedforward.gelu_tanh` has its own form); it is built in
one library with the C++ HYLA kernel (hyla.ops.kernels.cpp) and falls back to torch's GELU where
that library is unavailable, for other dtypes or devices, and with HYLA_GELU_KERNEL=0.
"""

from __future__ import annotations

import torch

from hyla.ops.kernels import cpp
from hyla.ops.torch_internals import switched_off


def takes(x: torch.Tensor) -> bool:
    """Whether `gelu_tanh_cpp` runs for x (compiling the library on the first call)."""
    return (
        x.device.type == "cpu"
        and x.dtype == torch.float32
        and x.is_contiguous()
        and not switched_off("gelu_kernel")
        and cpp.available()
    )


def gelu_tanh_cpp(x: torch.Tensor) -> torch.Tensor:
    """GELU, tanh approximation, of a contiguous float32 CPU tensor (`takes(x)`), differentiable."""
    return _CppGelu.apply(x)


def _forward(x: torch.Tensor) -> torch.Tensor:
    y = torch.empty_like(x)
    cpp.library().gelu_tanh_forward_f32(x.data_ptr(), y.data_ptr(), x.numel(), torch.get_num_threads())
    return y


def _backward(x: torch.Tensor, grad_y: torch.Tensor) -> torch.Tensor:
    grad_y = grad_y.contiguous()
    grad_x = torch.empty_like(x)
    cpp.library().gelu_tanh_backward_f32(
        x.data_ptr(), grad_y.data_ptr(), grad_x.data_ptr(), x.numel(), torch.get_num_threads()
    )
    return grad_x


class _CppGelu(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x):
        ctx.save_for_backward(x)
        return _forward(x)

    @staticmethod
    def backward(ctx, grad_y):
        (x,) = ctx.saved_tensors
        return _backward(x, grad_y)
