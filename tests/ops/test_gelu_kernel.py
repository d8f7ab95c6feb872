"""The C++ GELU kernel (hyla.ops.kernels.gelu) against torch's GELU (tanh approximation) in float64:
outputs and gradients, at sizes that are not a multiple of the vector width, over the whole range
of inputs; and when `hyla.nn.feedforward.gelu_tanh` takes it (float32 CPU tensors, not with
HYLA_GELU_KERNEL=0, not in packed training)."""

import pytest
import torch
import torch.nn.functional as F
from helpers_ops import assert_close
from helpers_train import tiny_model_config

from hyla.nn.feedforward import GeluMLP, gelu_tanh
from hyla.nn.transformer import Transformer
from hyla.ops.kernels import cpp, gelu
from hyla.train.packed import vmappable_copy

pytestmark = pytest.mark.skipif(not cpp.available(), reason="the C++ kernels did not build on this machine")


def inputs(*shape: int) -> torch.Tensor:
    """float32 values over GELU's whole range: normal ones at three widths, and the extremes."""
    x = torch.randn(shape, generator=torch.Generator().manual_seed(sum(shape))).view(-1)
    x = x * torch.tensor([1.0, 4.0, 30.0])[torch.arange(x.numel()) % 3]
    extremes = torch.tensor([0.0, -0.0, 1e-30, -1e-30, 80.0, -80.0, 1e4, -1e4])[: x.numel()]
    x[: len(extremes)] = extremes
    return x.view(shape)


def reference(x: torch.Tensor, grad: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """torch's GELU and its input gradient, in float64."""
    x64 = x.detach().double().requires_grad_()
    out = F.gelu(x64, approximate="tanh")
    return out, torch.autograd.grad(out, x64, grad.double())[0]


@pytest.mark.parametrize("shape", [(1,), (7,), (3, 37, 11), (2, 16400)], ids=str)
def test_equals_torch_gelu_in_float64(shape):
    """Outputs and gradients to float32's tolerance against float64 (the last shape spans two of
    the kernel's chunks, with a tail)."""
    x = inputs(*shape).requires_grad_()
    grad = torch.randn(shape, generator=torch.Generator().manual_seed(1))
    assert gelu.takes(x)
    out = gelu.gelu_tanh_cpp(x)
    want_out, want_grad = reference(x, grad)
    assert_close(out, want_out, torch.float32, "output")
    assert_close(torch.autograd.grad(out, x, grad)[0], want_grad, torch.float32, "gradient")


def test_an_empty_tensor():
    x = torch.empty(0, 5, requires_grad=True)
    out = gelu.gelu_tanh_cpp(x)
    assert out.shape == (0, 5) and torch.autograd.grad(out.sum(), x)[0].shape == (0, 5)


def test_thread_count_does_not_change_the_result():
    x = inputs(4, 40000)
    grad = torch.randn_like(x)
    results = []
    threads = torch.get_num_threads()
    try:
        for n in (1, 2):
            torch.set_num_threads(n)
            x_ = x.clone().requires_grad_()
            out = gelu.gelu_tanh_cpp(x_)
            results.append((out, torch.autograd.grad(out, x_, grad)[0]))
    finally:
        torch.set_num_threads(threads)
    assert all(torch.equal(a, b) for a, b in zip(*results))


def test_a_non_contiguous_gradient():
    x = inputs(6, 10).requires_grad_()
    grad = torch.randn(10, 6).t()  # [6, 10], transposed
    got = torch.autograd.grad(gelu.gelu_tanh_cpp(x), x, grad)[0]
    assert_close(got, reference(x, grad)[1], torch.float32, "gradient")


@pytest.mark.parametrize(
    "what, x",
    [
        ("float64", torch.randn(4, 9, dtype=torch.float64)),
        ("bfloat16", torch.randn(4, 9).bfloat16()),
        ("non-contiguous", torch.randn(9, 4).t()),
    ],
)
def test_gelu_tanh_takes_torchs_kernel_where_the_c_kernel_does_not_apply(what, x):
    assert not gelu.takes(x)
    assert torch.equal(gelu_tanh(x), F.gelu(x, approximate="tanh")), what


@pytest.mark.parametrize("switch", [None, "0"])
def test_gelu_tanh_takes_the_kernel_unless_switched_off(set_switch, switch):
    set_switch("HYLA_GELU_KERNEL", switch)
    x = inputs(5, 33)
    kernel = gelu.gelu_tanh_cpp(x)
    assert torch.equal(gelu_tanh(x), kernel if switch is None else F.gelu(x, approximate="tanh"))
    assert torch.equal(gelu_tanh(x, kernel=False), F.gelu(x, approximate="tanh"))


def test_the_packed_copy_of_a_model_uses_torchs_gelu():
    cfg = tiny_model_config(input_dim=3, seq_len=4)
    skeleton = vmappable_copy(Transformer(cfg))
    mlps = [m for m in skeleton.modules() if isinstance(m, GeluMLP)]
    assert mlps and not any(m.gelu_kernel for m in mlps)
