"""`hyla.ops.attention`: the attention family of SPEC §2 as one pure function.

Four implementations sit behind it: `attention_naive` (the einsum reference), `attention_pointwise`
(broadcast products that torch.compile fuses; for small heads), and for the `mlp` value network
`hyla_fused` (CPU eager: fewer passes over the scores, hand-written backward), at large sizes
`hyla_streamed` (memory-bounded), and on CUDA `hyla_triton` (fused Triton kernels, forward and
backward, memory linear in the sequence length; imported only when used, so `triton` stays
optional); all give the same outputs and gradients.
"""

from __future__ import annotations

import importlib.util

import torch

from hyla.ops.attention.common import check_inputs, normalize, scores
from hyla.ops.attention.fused import fusable, hyla_fused
from hyla.ops.attention.naive import attention_naive
from hyla.ops.attention.pointwise import attention_pointwise
from hyla.ops.attention.streamed import hyla_streamed

IMPLEMENTATIONS = ("auto", "naive", "pointwise", "streamed", "fused", "triton")
MLP_ONLY = ("streamed", "fused", "triton")
# What the Triton kernels take (hyla/ops/attention/triton_hyla.py checks the same constants).
TRITON_NORMALIZATIONS = ("none", "rms_head")
TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
TRITON_MAX_HEAD_DIM = 128
# Located, not imported (find_spec reads no module): a constant that torch.compile can trace.
TRITON_INSTALLED = importlib.util.find_spec("triton") is not None
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
        implementation: "auto" | "naive" | "pointwise" | "streamed" | "fused" | "triton" (streamed,
            fused, triton: mlp only; triton: normalization none or rms_head, CUDA); see
            `choose_implementation` for what auto picks.

    Returns: out [B, Tq, H, Dv], and a [B, H, Tq, Tk] when return_scores.
    """
    check_inputs(q, k, v, normalization, value_network, activation)
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {implementation!r}; valid: {', '.join(IMPLEMENTATIONS)}")
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = attend), got {mask.dtype}")
    if implementation in MLP_ONLY and value_network != "mlp":
        raise ValueError(f"implementation={implementation!r} exists for value_network='mlp' only")
    name = implementation if implementation != "auto" else choose_implementation(
        q, v, k.shape[1], value_network, return_scores, dropout_mask, normalization)
    if name == "triton":
        from hyla.ops.attention.triton_hyla import hyla_triton

        out = hyla_triton(q, k, v, normalization=normalization, activation=activation, bias=bias, mask=mask,
                          dropout_mask=dropout_mask)
    elif name == "fused":
        out = hyla_fused(q, k, v, normalization=normalization, activation=activation, bias=bias, mask=mask,
                         dropout_mask=dropout_mask)
    elif name == "streamed":
        out = hyla_streamed(q, k, v, normalization=normalization, activation=activation, bias=bias, mask=mask,
                            dropout_mask=dropout_mask)
    else:
        reference = attention_pointwise if name == "pointwise" else attention_naive
        out, a = reference(q, k, v, normalization=normalization, value_network=value_network,
                           activation=activation, bias=bias, mask=mask, dropout_mask=dropout_mask)
        return (out, a) if return_scores else out
    return (out, normalize(scores(q, k, bias), normalization, mask)) if return_scores else out


def triton_covers(q, v, normalization: str | None) -> bool:
    """Whether `hyla_triton` takes these inputs: triton installed, normalization none or rms_head,
    a float32/bfloat16/float16 dtype and heads of at most 128 (without importing triton)."""
    return (normalization in TRITON_NORMALIZATIONS and q.dtype in TRITON_DTYPES
            and max(q.shape[-1], v.shape[-1]) <= TRITON_MAX_HEAD_DIM and TRITON_INSTALLED)


def choose_implementation(q, v, k_len: int, value_network: str, return_scores: bool = False, dropout_mask=None,
                          normalization: str | None = None) -> str:
    """`auto`: on CUDA, triton for HYLA where the kernels cover it (under torch.compile only for
    heads wider than POINTWISE_MAX_HEAD_DIM: inductor fuses the pointwise form of small heads, and
    the kernels pad heads to 16 values); streamed for HYLA above STREAM_THRESHOLD; under
    torch.compile, pointwise for small heads; eagerly on CPU, fused for HYLA; else naive."""
    small_compiled = torch.compiler.is_compiling() and v.shape[-1] <= POINTWISE_MAX_HEAD_DIM
    if value_network == "mlp" and q.is_cuda and not small_compiled and triton_covers(q, v, normalization):
        return "triton"
    hidden_elements = q.shape[0] * q.shape[1] * k_len * v.shape[-1]
    if value_network == "mlp" and hidden_elements > STREAM_THRESHOLD:
        return "streamed"
    if torch.compiler.is_compiling():
        return "pointwise" if v.shape[-1] <= POINTWISE_MAX_HEAD_DIM else "naive"
    if value_network == "mlp" and not return_scores and q.device.type == "cpu" and fusable(dropout_mask):
        return "fused"
    return "naive"


__all__ = ["attention", "attention_naive", "attention_pointwise", "hyla_streamed", "hyla_fused", "IMPLEMENTATIONS"]
