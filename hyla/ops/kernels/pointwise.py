"""The value networks as broadcast products reduced over one axis, for compiled code.

Per-head dimensions in the paper's models are tiny (qk_dim/heads = 2 for fuzzy logic, 4 for
SRAVEN), so the batched matrix products of `attention_naive` are thousands of 16x8 @ 8x2
multiplications, which run far below the machine's speed. Written as a product broadcast over
[B, H, Tq, Dv, Tk] and a sum, `torch.compile` fuses each layer into one loop nest that never
materializes the product, vectorized along the keys (faster on CPU at those sizes: the attention-alone
times of benchmarks/README.md, `bench_small_heads.py`; as a whole training step: bench_ledger.py's
`pointwise` row).
Eagerly it would materialize the product, so `attention` picks it only when compiling.

On CPU, compile with `torch._inductor.config.cpp.enable_loop_tail_vec = False` (the hyla trainer
does): otherwise inductor vectorizes the 2-wide head axis and opens an OpenMP region inside it
per output element, which makes these kernels far slower with more than one thread (docs/speed.md,
the ledger's "compiler settings" row).
"""

from __future__ import annotations

import torch

from hyla.ops.kernels.common import ACTIVATION_FNS, normalize, raw_scores


def attention_pointwise(
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
    """Same arguments and results as `attention_naive`: (output [B, Tq, H, Dv], latent codes a [B, H, Tq, Tk])."""
    a = normalize(raw_scores(q, k, bias), normalization, mask)  # [B, H, Tq, Tk]
    weights = (a if dropout_mask is None else a * dropout_mask).unsqueeze(3)  # [B, H, Tq, 1, Tk]
    values = v.permute(0, 2, 3, 1).unsqueeze(2)  # [B, H, 1, Dv, Tk]
    if value_network == "linear":
        return (weights * values).sum(-1).transpose(1, 2), a
    # HYLA: layer 1 sums over the heads, layer 2 over the keys
    hidden = ACTIVATION_FNS[activation]((weights * values).sum(1, keepdim=True))  # [B, 1, Tq, Dv, Tk]
    return (weights * hidden).sum(-1).transpose(1, 2), a
