"""The plain reference, self-contained: the scores, every normalization and value network as
einsums, short enough to check against the paper by eye (docs/math.md): multi-head attention as a
hypernetwork (Eq. 4-5) for the linear value network, HYLA (Eq. 6-7) for the mlp one. Materializes
the [B, Tq, Tk, Dv] tensor of HYLA's first layer; the other implementations in this folder are
tested against it, and take its scores and normalizations from here (the latent codes of every
implementation are identical). `attention_naive_eager` is the same function kept out of
torch.compile's graphs."""

from __future__ import annotations

import math

import torch
import torch.nn.functional as F

RMS_EPS = 1e-6
ACTIVATION_FNS = {
    "relu": torch.relu,
    "gelu": F.gelu,
    "silu": F.silu,
    "sigmoid": torch.sigmoid,
    "tanh": torch.tanh,
    "identity": lambda x: x,
}


def raw_scores(q: torch.Tensor, k: torch.Tensor, bias: torch.Tensor | None) -> torch.Tensor:
    """The scores before any normalization: <q, k> / sqrt(Dk) + bias.

    q [B, Tq, H, Dk], k [B, Tk, H, Dk], bias broadcastable to [B, H, Tq, Tk] -> [B, H, Tq, Tk]."""
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1])
    return s if bias is None else s + bias


def masked_scores(s: torch.Tensor, mask: torch.Tensor | None) -> torch.Tensor:
    """Scores s with the pairs where `mask` is False set to the dtype's minimum, so that a softmax or
    a log-sum-exp over the keys leaves them out. The minimum rather than -inf: a fully masked row
    stays finite (and the softmax zeroes it)."""
    return s if mask is None else s.masked_fill(~mask, torch.finfo(s.dtype).min)


def normalize(
    s: torch.Tensor, normalization: str, mask: torch.Tensor | None, softmax_lse: torch.Tensor | None = None
) -> torch.Tensor:
    """Normalized scores a [B, H, Tq, Tk] from raw scores s; masked entries (and fully masked rows)
    are exactly 0: softmax over the keys, none, or rms_head (RMS norm across the heads, per pair).

    softmax_lse [B, H, Tq, 1]: the log-sum-exp over ALL keys, for when `s` holds only a block of keys.
    """
    if normalization == "softmax":
        s = masked_scores(s, mask)
        a = torch.softmax(s, dim=-1) if softmax_lse is None else torch.exp(s - softmax_lse)
    else:
        a = s
    a = a if mask is None else a.masked_fill(~mask, 0.0)
    if normalization == "rms_head":
        a = a * torch.rsqrt(a.pow(2).mean(dim=1, keepdim=True) + RMS_EPS)
    return a


def attention_from_codes(
    a: torch.Tensor,
    v: torch.Tensor,
    value_network: str,
    activation: str = "relu",
    dropout_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The value network given the latent codes: a [B, H, Tq, Tk], v [B, Tk, H, Dv] -> y [B, Tq, H, Dv];
    dropout_mask (keep-mask / keep probability) multiplies `a`."""
    weights = a if dropout_mask is None else a * dropout_mask
    if value_network == "linear":  # Eq. 4-5
        return torch.einsum("bhqk,bkhd->bqhd", weights, v)
    # HYLA (Eq. 6-7): the code generates layer 1 (sum over heads) and layer 2 (sum over keys).
    hidden = ACTIVATION_FNS[activation](torch.einsum("bhqk,bkhd->bqkd", weights, v))  # [B, Tq, Tk, Dv]
    return torch.einsum("bhqk,bqkd->bqhd", weights, hidden)


def attention_naive(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    normalization: str,
    value_network: str,
    activation: str = "relu",
    bias: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    dropout_mask: torch.Tensor | None = None,
) -> tuple[torch.Tensor, torch.Tensor]:
    """Returns (output [B, Tq, H, Dv], latent codes a [B, H, Tq, Tk]).

    q [B, Tq, H, Dk], k [B, Tk, H, Dk], v [B, Tk, H, Dv]; bias and mask broadcastable to
    [B, H, Tq, Tk]; dropout_mask (keep-mask / keep probability) multiplies `a` after normalization.
    """
    a = normalize(raw_scores(q, k, bias), normalization, mask)  # [B, H, Tq, Tk]
    return attention_from_codes(a, v, value_network, activation, dropout_mask), a


def attention_naive_eager(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    """`attention_naive`, run eagerly also inside a function that torch.compile compiles: a graph
    break there (which fullgraph=True refuses), so inductor never compiles it. Same arguments and
    results."""
    if not torch.compiler.is_compiling():
        return attention_naive(q, k, v, **kwargs)
    return torch.compiler.disable(attention_naive)(q, k, v, **kwargs)
