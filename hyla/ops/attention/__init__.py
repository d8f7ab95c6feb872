"""`hyla.ops.attention`: the attention family, and HYLA, as one pure function.

The math (docs/math.md; the paper's Eq. 4-7). q [B, Tq, H, Dk], k [B, Tk, H, Dk], v [B, Tk, H, Dv]:

    s[b,h,q,k] = <q[b,q,h,:], k[b,k,h,:]> / sqrt(Dk) + bias[b,h,q,k]
    a = normalize(s)     softmax over keys | none | rms_head (RMS norm across the heads, per pair)
    value_network "linear" (multi-head attention):
        y[b,q,h,:] = sum_k a[b,h,q,k] v[b,k,h,:]
    value_network "mlp" (HYLA; the latent code a[b,:,q,k] generates both layers):
        u[b,q,k,:] = act(sum_h a[b,h,q,k] v[b,k,h,:])     layer 1: sums over the heads
        y[b,q,h,:] = sum_k a[b,h,q,k] u[b,q,k,:]          layer 2: sums over the keys

`naive.py` is exactly this, in einsums: the reference. Every other implementation below computes
the same function and is tested against it on outputs AND gradients in float64
(tests/ops/test_attention.py). What `implementation="auto"` runs, the first that applies:

    implementation  when                                       why
    `triton`        mlp, CUDA, B·Tq·Tk·Dv > STREAM_THRESHOLD,  memory linear in T, and faster
                    `triton_covers` and `triton_by_default`    than `streamed`
    `cpp`           mlp, CPU, `cpp.covers` (rms_head/none,     one C++ kernel, each query-key
                    relu/identity, float32/64), kernel built   pair in registers
    `streamed`      mlp, B·Tq·Tk·Dv > STREAM_THRESHOLD         memory: [B, Tq, Tk, Dv] exists
                                                               one key block at a time
    `naive_eager`   mlp, under torch.compile, not on the CPU   compiled on CUDA, the pointwise
                                                               form's gradients were wrong
    `pointwise`     under torch.compile, Dv <=                 inductor fuses it; tiny heads
                    POINTWISE_MAX_HEAD_DIM                     make matmuls slow
    `fused`         mlp, eager, CPU, a dropout mask shared     hand-written backward: fewer
                    by the heads, no autocast                  passes over memory
    `naive`         otherwise (e.g. the linear value network   the reference; fast enough there
                    eagerly, CUDA)

`naive_eager` is `naive` kept out of the compiled graph (a graph break). Inductor compiled the
pointwise form's backward wrongly on an H200 (torch 2.11) at SRAVEN's sizes, and the SRAVEN HYLA
model compiled on an H100 did not learn, while eager `naive` did (docs/gpu.md): compiled HYLA runs
only where it was checked, the CPU.

What each fast path gains is measured in the speed ledger, docs/speed.md.

`return_scores` never changes the choice, so an analysis run (`return_latents=True`) computes the
same outputs as training does. The returned latent codes are `normalize(scores(q, k, bias))`: the
very tensor the output came from for `naive` and `pointwise`; `fused` and `streamed` do not return
it (they fold or stream it; nor do `triton` and `cpp`), so the same two functions compute it beside
them: identical values.
(Under torch.compile the choice also depends on the compile state: a compiled training run and
an eager analysis of its checkpoint agree to float rounding, not bit for bit.)
"""

from __future__ import annotations

import importlib.util
import os

import torch

from hyla.ops.attention import cpp
from hyla.ops.attention.common import (
    check_inputs,
    implementations_ran,
    normalize,
    record_fallback,
    record_ran,
    reset_implementations_ran,
    scores,
)
from hyla.ops.attention.fused import fusable, hyla_fused
from hyla.ops.attention.naive import attention_naive, attention_naive_eager
from hyla.ops.attention.pointwise import attention_pointwise
from hyla.ops.attention.streamed import hyla_streamed
from hyla.ops.torch_internals import constant_under_compile

# Implementations of any value network: return (output, latent codes).
GENERAL = {"naive": attention_naive, "naive_eager": attention_naive_eager, "pointwise": attention_pointwise}


def hyla_triton(q, k, v, **kwargs):
    """`triton_hyla.hyla_triton`, imported on first use: importing hyla never imports triton. A
    Triton too old for the kernels falls back to `hyla_streamed`, with a warning."""
    try:
        from hyla.ops.attention import triton_hyla
    except Exception as error:
        record_fallback("triton", f"importing it failed: {type(error).__name__}: {error}")
        return hyla_streamed(q, k, v, **kwargs)
    return triton_hyla.hyla_triton(q, k, v, **kwargs)


# Implementations of HYLA only (value_network="mlp"): return the output.
MLP_ONLY = {"cpp": cpp.hyla_cpp, "streamed": hyla_streamed, "fused": hyla_fused, "triton": hyla_triton}
IMPLEMENTATIONS = ("auto", *GENERAL, *MLP_ONLY)
# What the Triton kernels take (hyla/ops/attention/triton_hyla.py checks the same constants).
TRITON_NORMALIZATIONS = ("none", "rms_head")
TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
TRITON_MAX_HEAD_DIM = 128
# Located, not imported (find_spec reads no module): a constant that torch.compile can trace.
TRITON_INSTALLED = importlib.util.find_spec("triton") is not None
# GPU architectures (compute capability) where hyla's GPU suite passed on real hardware and the
# kernels were faster than the PyTorch forms: `auto` takes them there only. The suite: the CUDA and
# Triton tests and benchmarks/bench_triton_attention.py (docs/speed.md). Elsewhere opt in with
# implementation="triton" or HYLA_TRITON=1.
TRITON_VALIDATED = {(9, 0): "NVIDIA H100 80GB HBM3, 2026-11-24 (tests again 11-26: H100, H200); torch 2.11, Triton 3.6"}
TRITON_ENV = "HYLA_TRITON"
# `auto` streams HYLA once its hidden tensor [B, Tq, Tk, Dv] would exceed this many elements.
STREAM_THRESHOLD = 1 << 24
# Under torch.compile `auto` takes the pointwise form for heads up to this value dimension.
POINTWISE_MAX_HEAD_DIM = 16


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    normalization: str,
    value_network: str,
    activation: str = "relu",
    bias: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    return_scores: bool = False,
    dropout_mask: torch.Tensor | None = None,
    implementation: str = "auto",
):
    """Multi-head attention as a hypernetwork.

    Args:
        q [B, Tq, H, Dk], k [B, Tk, H, Dk], v [B, Tk, H, Dv].
        normalization: "softmax" | "none" | "rms_head" (RMS norm across heads per query-key pair).
        value_network: "linear" (standard attention) | "mlp" (HYLA: the latent code generates
            both layers of a two-layer value network).
        activation: the value network's nonlinearity (mlp only).
        bias: additive, broadcastable to [B, H, Tq, Tk], added before normalization.
        mask: bool, broadcastable to [B, H, Tq, Tk], True = attend. Fully masked rows give 0.
        return_scores: also return the latent codes a [B, H, Tq, Tk] (normalized, no dropout).
        dropout_mask: multiplies a after normalization (attention dropout: keep-mask / keep).
        implementation: "auto" | "naive" | "naive_eager" | "pointwise" | "cpp" | "streamed" | "fused" | "triton"
            (cpp, streamed, fused, triton: mlp only; cpp: CPU, see `cpp.covers`; triton:
            normalization none or rms_head, CUDA or Triton's interpreter); the module docstring's
            table says what auto picks.

    Returns: out [B, Tq, H, Dv], and a [B, H, Tq, Tk] when return_scores.
    """
    check_inputs(q, k, v, normalization, value_network, activation)
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {implementation!r}; valid: {', '.join(IMPLEMENTATIONS)}")
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = attend), got {mask.dtype}")
    if implementation in MLP_ONLY and value_network != "mlp":
        raise ValueError(f"implementation={implementation!r} exists for value_network='mlp' only")
    name = (
        implementation
        if implementation != "auto"
        else choose_implementation(q, v, k.shape[1], value_network, dropout_mask, normalization, activation, bias, mask)
    )
    record_ran(name)
    kwargs = dict(normalization=normalization, activation=activation, bias=bias, mask=mask, dropout_mask=dropout_mask)
    if name in GENERAL:
        out, a = GENERAL[name](q, k, v, value_network=value_network, **kwargs)
        return (out, a) if return_scores else out
    out = MLP_ONLY[name](q, k, v, **kwargs)
    return (out, normalize(scores(q, k, bias), normalization, mask)) if return_scores else out


def triton_covers(q, v, normalization: str | None) -> bool:
    """Whether `hyla_triton` takes these inputs (decided without importing triton)."""
    return (
        normalization in TRITON_NORMALIZATIONS
        and q.dtype in TRITON_DTYPES
        and max(q.shape[-1], v.shape[-1]) <= TRITON_MAX_HEAD_DIM
        and TRITON_INSTALLED
    )


def triton_by_default(device: torch.device) -> bool:
    """Whether `auto` may take the Triton kernels on this CUDA device: a validated architecture or
    HYLA_TRITON=1, and not in deterministic mode (the backward adds with atomics)."""
    if torch.are_deterministic_algorithms_enabled() or os.environ.get(TRITON_ENV) == "0":
        return False
    return os.environ.get(TRITON_ENV) == "1" or _validated_architecture(device.index or 0)


@constant_under_compile
def _validated_architecture(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) in TRITON_VALIDATED


def choose_implementation(
    q,
    v,
    k_len: int,
    value_network: str,
    dropout_mask,
    normalization: str | None = None,
    activation: str = "relu",
    bias=None,
    mask=None,
) -> str:
    """What `auto` runs: the first row of the module docstring's table that applies."""
    hidden_elements = q.shape[0] * q.shape[1] * k_len * v.shape[-1]
    if (
        value_network == "mlp"
        and hidden_elements > STREAM_THRESHOLD
        and q.is_cuda
        and triton_covers(q, v, normalization)
        and triton_by_default(q.device)
    ):
        return "triton"
    if (
        value_network == "mlp"
        and cpp.covers(q, v, normalization, activation, bias, mask, dropout_mask)
        and cpp.available()
    ):
        return "cpp"
    if value_network == "mlp" and hidden_elements > STREAM_THRESHOLD:
        return "streamed"
    if torch.compiler.is_compiling():
        if value_network == "mlp" and q.device.type != "cpu":
            return "naive_eager"
        return "pointwise" if v.shape[-1] <= POINTWISE_MAX_HEAD_DIM else "naive"
    # (the fused backward computes in its inputs' dtype: under autocast they mix bfloat16 and float32)
    if (
        value_network == "mlp"
        and q.device.type == "cpu"
        and fusable(dropout_mask)
        and not torch.is_autocast_enabled("cpu")
    ):
        return "fused"
    return "naive"


__all__ = [
    "attention",
    "attention_naive",
    "attention_pointwise",
    "hyla_streamed",
    "hyla_fused",
    "IMPLEMENTATIONS",
    "implementations_ran",
    "reset_implementations_ran",
]
