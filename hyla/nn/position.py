"""T5-style relative position bias: one learned scalar per (head, distance bucket)."""

from __future__ import annotations

import functools
import math

import torch
from torch import nn


def relative_position_bucket(
    relative: torch.Tensor, bidirectional: bool, num_buckets: int, max_distance: int
) -> torch.Tensor:
    """Bucket of each relative position (key - query), as in T5.

    One-directional (the paper presets): keys after the query all share the bucket of distance 0.
    Bidirectional: half the buckets for keys before, half for keys after the query.
    """
    distance = -relative  # > 0 for keys before the query
    bucket = torch.zeros_like(relative)
    if bidirectional:
        num_buckets //= 2
        bucket = bucket + (distance < 0).long() * num_buckets
        distance = distance.abs()
    else:
        distance = distance.clamp(min=0)
    max_exact = num_buckets // 2
    # Distances below max_exact get a bucket each; larger ones share log-spaced buckets.
    log_ratio = torch.log(distance.float().clamp(min=1) / max_exact) / math.log(max(max_distance / max_exact, 1 + 1e-6))
    large = (max_exact + (log_ratio * (num_buckets - max_exact)).long()).clamp(max=num_buckets - 1)
    return bucket + torch.where(distance < max_exact, distance, large)


class RelativePositionBias(nn.Module):
    """bias [1, H, Tq, Tk] for queries at positions offset..offset+Tq-1 and keys at 0..Tk-1.

    num_buckets = max_distance = max_len (the paper's choice). Longer sequences raise an error.
    The table is `[num_buckets, H]` (the authors' Flax table is its transpose, `[H, num_buckets]`).
    """

    def __init__(self, num_heads: int, max_len: int, bidirectional: bool = False):
        super().__init__()
        self.max_len, self.bidirectional = max_len, bidirectional
        self.num_buckets = max_len
        self.table = nn.Embedding(self.num_buckets, num_heads)

    def forward(self, q_len: int, k_len: int, offset: int = 0) -> torch.Tensor:
        if offset + q_len > self.max_len or k_len > self.max_len:
            raise ValueError(
                f"sequence of {max(offset + q_len, k_len)} positions is longer than the position table "
                f"({self.max_len}); raise seq_len in the model config"
            )
        buckets = position_buckets(
            q_len, k_len, offset, self.bidirectional, self.num_buckets, self.max_len, self.table.weight.device
        )
        return self.table(buckets).permute(2, 0, 1).unsqueeze(0)  # [1, H, Tq, Tk]


def position_buckets(
    q_len: int, k_len: int, offset: int, bidirectional: bool, num_buckets: int, max_distance: int, device: torch.device
) -> torch.Tensor:
    """The buckets [Tq, Tk] of queries at offset..offset+Tq-1 and keys at 0..Tk-1. Eagerly computed
    once per length and device and shared by every layer and step (they depend on nothing else);
    torch.compile traces the computation, which it folds into its graph."""
    arguments = (q_len, k_len, offset, bidirectional, num_buckets, max_distance, device)
    if torch.compiler.is_compiling():
        return _position_buckets(*arguments)
    return _cached_position_buckets(*arguments)


def _position_buckets(q_len, k_len, offset, bidirectional, num_buckets, max_distance, device) -> torch.Tensor:
    query = torch.arange(offset, offset + q_len, device=device)[:, None]
    key = torch.arange(k_len, device=device)[None, :]
    return relative_position_bucket(key - query, bidirectional, num_buckets, max_distance)


_cached_position_buckets = functools.lru_cache(maxsize=64)(_position_buckets)
