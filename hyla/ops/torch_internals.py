"""What hyla uses of PyTorch beyond its public API, in one place (why each stays: docs/speed.md).

    fused AdamW       `fused_adamw_step` calls torch._fused_adamw_, the kernel behind
                      torch.optim.AdamW(fused=True), directly: hyla's AdamW step (hyla.train.optim)
                      skips torch's per-step Python work around it, bit for bit the same update.
                      Detected on first use (nothing runs at import): on a PyTorch whose kernel is
                      absent or has another signature `fused_adamw_available()` is False and the
                      step is torch.optim.AdamW's own.
    HYLA_PUBLIC_OPS   `public_ops_only()`, `PUBLIC_OPS_ENV`: with this environment variable set (to
                      anything but "" or "0") hyla never calls the kernel above, so the optimizer
                      step is exactly torch.optim.AdamW's. The tests run both ways; it is the speed
                      ledger's off switch for the direct kernel call.
    constant_under_compile
                      torch.compiler.assume_constant_result's mark, so that torch.compile calls the
                      C++ kernel's and Triton's availability checks once while tracing (they may
                      compile or query the device) instead of tracing into them; set directly
                      because the decorator imports torch._dynamo at hyla's import.

hyla calls no other private PyTorch operator (its one private compiler setting, inductor's
cpp.enable_loop_tail_vec, is set in hyla.train.loop). hyla runs on any PyTorch from 2.6 on.
"""

from __future__ import annotations

import functools
import os

import torch

PUBLIC_OPS_ENV = "HYLA_PUBLIC_OPS"


def public_ops_only() -> bool:
    """True when HYLA_PUBLIC_OPS is set (to anything but "" or "0")."""
    return os.environ.get(PUBLIC_OPS_ENV, "") not in ("", "0")


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
    """Whether this PyTorch's fused AdamW kernel is there as hyla calls it and HYLA_PUBLIC_OPS is
    not set."""
    return not public_ops_only() and _fused_adamw_works()


def constant_under_compile(fn):
    """Mark `fn` as torch.compiler.assume_constant_result does: torch.compile calls it once while
    tracing and keeps its result as a constant. Sets the mark directly (the attribute torch's
    decorator sets) because the decorator imports torch._dynamo (a second, and triton with it) at
    hyla's import; tests/ops/test_attention.py compiles a call through it with fullgraph=True."""
    fn._dynamo_marked_constant = True
    return fn
