"""The plain reference: every normalization and value network as einsums, short enough to check
against the paper by eye (docs/math.md): multi-head attention as a hypernetwork (Eq. 4-5) for the
linear value network, HYLA (Eq. 6-7) for the mlp one. Materializes the [B, Tq, Tk, Dv] tensor of
HYLA's first layer; the other implementations in this folder are tested against it.
`attention_naive_eager` is the same function kept out of torch.compile's graphs."""

from __future__ import annotations

import torch

from hyla.ops.kernels.common import ACTIVATION_FNS, normalize, raw_scores


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
    weights = a if dropout_mask is None else a * dropout_mask
    if value_network == "linear":
        return torch.einsum("bhqk,bkhd->bqhd", weights, v), a
    # HYLA (Eq. 6-7): the code generates layer 1 (sum over heads) and layer 2 (sum over keys).
    hidden = ACTIVATION_FNS[activation](torch.einsum("bhqk,bkhd->bqkd", weights, v))  # [B, Tq, Tk, Dv]
    return torch.einsum("bhqk,bqkd->bqhd", weights, hidden), a


def attention_naive_eager(
    q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, **kwargs
) -> tuple[torch.Tensor, torch.Tensor]:
    """`attention_naive`, run eagerly also inside a function that torch.compile compiles: a graph
    break there (which fullgraph=True refuses), so inductor never compiles it. Same arguments and
    results."""
    if not torch.compiler.is_compiling():
        return attention_naive(q, k, v, **kwargs)
    return torch.compiler.disable(attention_naive)(q, k, v, **kwargs)
