"""`hyla.ops.attention`: the attention family of SPEC §2 as one pure function.

Three implementations sit behind it: `attention_naive` (the einsum reference), and for the `mlp`
value network `hyla_fused` (CPU: fewer passes over the scores, hand-written backward) and, at
large sizes, `hyla_streamed` (memory-bounded); all give the same outputs and gradients.
"""

from __future__ import annotations

import torch

from hyla.ops.attention.common import check_inputs, normalize, scores
from hyla.ops.attention.fused import fusable, hyla_fused
from hyla.ops.attention.naive import attention_naive
from hyla.ops.attention.streamed import hyla_streamed

IMPLEMENTATIONS = ("auto", "naive", "streamed", "fused")
# `auto` streams HYLA once its hidden tensor [B, Tq, Tk, Dv] would exceed this many elements.
STREAM_THRESHOLD = 1 << 24


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
        implementation: "auto" | "naive" | "streamed" | "fused" (streamed, fused: mlp only). auto:
            streamed above STREAM_THRESHOLD, else fused for mlp on CPU (without return_scores).

    Returns: out [B, Tq, H, Dv], and a [B, H, Tq, Tk] when return_scores.
    """
    check_inputs(q, k, v, normalization, value_network, activation)
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {implementation!r}; valid: {', '.join(IMPLEMENTATIONS)}")
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = attend), got {mask.dtype}")
    if implementation in ("streamed", "fused") and value_network != "mlp":
        raise ValueError(f"implementation={implementation!r} exists for value_network='mlp' only")
    hidden_elements = q.shape[0] * q.shape[1] * k.shape[1] * v.shape[-1]
    stream = implementation == "streamed" or (
        implementation == "auto" and value_network == "mlp" and hidden_elements > STREAM_THRESHOLD
    )
    fuse = implementation == "fused" or (
        implementation == "auto" and value_network == "mlp" and not stream and not return_scores
        and q.device.type == "cpu" and fusable(dropout_mask)
    )
    if fuse:
        out = hyla_fused(q, k, v, normalization=normalization, activation=activation, bias=bias, mask=mask,
                         dropout_mask=dropout_mask)
        return (out, normalize(scores(q, k, bias), normalization, mask)) if return_scores else out
    if not stream:
        out, a = attention_naive(
            q, k, v, normalization=normalization, value_network=value_network, activation=activation,
            bias=bias, mask=mask, dropout_mask=dropout_mask,
        )
        return (out, a) if return_scores else out
    out = hyla_streamed(
        q, k, v, normalization=normalization, activation=activation, bias=bias, mask=mask,
        dropout_mask=dropout_mask,
    )
    if not return_scores:
        return out
    return out, normalize(scores(q, k, bias), normalization, mask)


__all__ = ["attention", "attention_naive", "hyla_streamed", "hyla_fused", "IMPLEMENTATIONS"]
