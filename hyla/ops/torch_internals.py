"""The private PyTorch operators behind hyla's CPU fast paths, in one place.

hyla runs on any PyTorch from 2.6 on. Each private operator here is detected on first use (nothing
runs at import) and has a public fallback that gives the same values up to float rounding:

    oneDNN linear   torch.ops.mkldnn._linear_pointwise   ->  F.linear          (hyla.nn.Linear)
    softmax grad    torch._softmax_backward_data         ->  p * (g - sum(g p))  (hyla_fused)
    ReLU grad       torch.ops.aten.threshold_backward    ->  g where u > 0       (hyla_fused)
    fused AdamW     torch._fused_adamw_                  ->  torch.optim.AdamW.step  (hyla.train.optim)

and one private mark, `constant_under_compile` (torch.compiler.assume_constant_result without its
import of torch._dynamo).

Set the environment variable HYLA_PUBLIC_OPS=1 to use only public operators (the tests run both
ways). `hyla.nn.Linear` reads it when a layer is built; the attention backward on every call.
"""

from __future__ import annotations

import functools
import os

import torch

PUBLIC_OPS_ENV = "HYLA_PUBLIC_OPS"


def public_ops_only() -> bool:
    """True when HYLA_PUBLIC_OPS is set (to anything but "" or "0")."""
    return os.environ.get(PUBLIC_OPS_ENV, "") not in ("", "0")


def onednn_linear(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """x [N, K] @ weight[M, K]^T (+ bias [M]) -> [N, M] on oneDNN (the operator inductor uses for
    linear layers); only call it where `onednn_linear_available()`."""
    return torch.ops.mkldnn._linear_pointwise(x, weight, bias, "none", [], "")


@functools.cache
def _onednn_linear_works() -> bool:
    try:
        x, w = torch.ones(2, 3), torch.ones(4, 3)
        return torch.equal(onednn_linear(x, w, None), x @ w.t())
    except (AttributeError, RuntimeError, NotImplementedError, TypeError):  # absent, or another signature
        return False


def onednn_linear_available() -> bool:
    """Whether this PyTorch has a working oneDNN linear operator and private operators are allowed."""
    return not public_ops_only() and _onednn_linear_works()


@functools.cache
def _softmax_backward_works() -> bool:
    try:
        p, g = torch.tensor([[0.25, 0.75]]), torch.tensor([[1.0, -1.0]])
        return torch.allclose(torch._softmax_backward_data(g, p, -1, p.dtype), _softmax_backward_public(g, p))
    except (AttributeError, RuntimeError, TypeError):
        return False


def _softmax_backward_public(grad_p: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    return p * (grad_p - (grad_p * p).sum(-1, keepdim=True))


def softmax_backward(grad_p: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """The gradient of the scores s given that of p = softmax(s, dim=-1)."""
    if not public_ops_only() and _softmax_backward_works():
        return torch._softmax_backward_data(grad_p, p, -1, p.dtype)  # one fused pass instead of three
    return _softmax_backward_public(grad_p, p)


@functools.cache
def _threshold_backward_works() -> bool:
    try:
        u, g = torch.tensor([0.0, 2.0]), torch.tensor([3.0, 4.0])
        return torch.equal(torch.ops.aten.threshold_backward(g, u, 0), torch.tensor([0.0, 4.0]))
    except (AttributeError, RuntimeError, TypeError):
        return False


def relu_backward(grad_u: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The gradient of z given that of u = relu(z) (from u: u > 0 exactly where z > 0)."""
    if not public_ops_only() and _threshold_backward_works():
        return torch.ops.aten.threshold_backward(grad_u, u, 0)  # one pass instead of two
    return grad_u.masked_fill(u <= 0, 0.0)


def fused_adamw_step(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    steps: list[torch.Tensor],
    *,
    lr: float,
    beta1: float,
    beta2: float,
    weight_decay: float,
    eps: float,
) -> None:
    """One AdamW update of the tensors in place, by the kernel torch.optim.AdamW(fused=True) calls
    (its step counts already advanced); only call it where `fused_adamw_available()`."""
    torch._fused_adamw_(
        params,
        grads,
        exp_avgs,
        exp_avg_sqs,
        [],
        steps,
        amsgrad=False,
        lr=lr,
        beta1=beta1,
        beta2=beta2,
        weight_decay=weight_decay,
        eps=eps,
        maximize=False,
        grad_scale=None,
        found_inf=None,
    )


@functools.cache
def _fused_adamw_works() -> bool:
    try:
        p, g, m, v, step = torch.ones(3), torch.ones(3), torch.zeros(3), torch.zeros(3), torch.ones(())
        fused_adamw_step([p], [g], [m], [v], [step], lr=0.5, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8)
        return torch.allclose(p, torch.full((3,), 0.5))  # the first Adam step moves by lr
    except (AttributeError, RuntimeError, NotImplementedError, TypeError):
        return False


def fused_adamw_available() -> bool:
    """Whether this PyTorch's fused AdamW kernel is there as hyla calls it and private operators
    are allowed."""
    return not public_ops_only() and _fused_adamw_works()


def constant_under_compile(fn):
    """Mark `fn` as torch.compiler.assume_constant_result does: torch.compile calls it once while
    tracing and keeps its result as a constant. Sets the mark directly (the attribute torch's
    decorator sets) because the decorator imports torch._dynamo (a second, and triton with it) at
    hyla's import; tests/ops/test_attention.py compiles a call through it with fullgraph=True."""
    fn._dynamo_marked_constant = True
    return fn
