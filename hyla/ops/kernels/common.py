"""Pieces every implementation shares: scores, normalizations (docs/math.md), activations, and the
input checks. Sharing them is what makes the latent codes of every implementation identical."""

from __future__ import annotations

import math
import warnings

import torch
import torch.nn.functional as F

from hyla.ops.mixers import check_axes
from hyla.ops.torch_internals import constant_under_compile

RMS_EPS = 1e-6
# What the Triton kernels take (triton_hyla.py checks them; hyla.ops.dispatch decides by them
# without importing triton).
TRITON_NORMALIZATIONS = ("none", "rms_head")
TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
TRITON_MAX_HEAD_DIM = 128
# What attention() ran in this process: implementation names, and fast paths that fell back (with
# the reason). Training records it in the run's numerics.
_RAN: set[str] = set()

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
    stays finite (and `masked_softmax` zeroes it)."""
    return s if mask is None else s.masked_fill(~mask, torch.finfo(s.dtype).min)


def masked_softmax(s: torch.Tensor, mask: torch.Tensor | None, softmax_lse: torch.Tensor | None = None) -> torch.Tensor:
    """softmax of the scores s over the keys (the last axis), exactly 0 where `mask` is False: a fully
    masked row is all 0.

    softmax_lse [B, H, Tq, 1]: the log-sum-exp over ALL keys, for when `s` holds only a block of keys.
    """
    s = masked_scores(s, mask)
    p = torch.softmax(s, dim=-1) if softmax_lse is None else torch.exp(s - softmax_lse)
    return p if mask is None else p.masked_fill(~mask, 0.0)


def normalize(
    s: torch.Tensor,
    normalization: str,
    mask: torch.Tensor | None,
    softmax_lse: torch.Tensor | None = None,
) -> torch.Tensor:
    """Normalized scores a [B, H, Tq, Tk] from raw scores s; masked entries are exactly 0.

    softmax_lse [B, H, Tq, 1]: the log-sum-exp over ALL keys, for when `s` holds only a block of keys.
    """
    if normalization == "softmax":
        return masked_softmax(s, mask, softmax_lse)
    a = s if mask is None else s.masked_fill(~mask, 0.0)
    if normalization == "rms_head":
        a = a * torch.rsqrt(a.pow(2).mean(dim=1, keepdim=True) + RMS_EPS)
    return a


def as_4d(t: torch.Tensor | None) -> torch.Tensor | None:
    """A tensor broadcastable to [B, H, Tq, Tk] (a bias, a mask, a dropout mask, ...) as a 4-d view:
    the axes it lacks in front added with size 1. None stays None."""
    return None if t is None else t.reshape((1,) * (4 - t.ndim) + tuple(t.shape))


def shared_by_heads(t: torch.Tensor | None) -> bool:
    """Whether a tensor broadcastable to [B, H, Tq, Tk] is the same for every head (None is)."""
    return t is None or t.ndim < 3 or t.shape[-3] == 1


def per_pair(t: torch.Tensor, q_len: int, k_len: int) -> torch.Tensor:
    """A tensor broadcastable to [B, 1, Tq, Tk] (one value per query-key pair, shared by the heads)
    as [B or 1, Tq, Tk] (a view)."""
    t = as_4d(t)
    return t[:, 0].expand(t.shape[0], q_len, k_len)


def check_inputs(q, k, v, normalization, value_network, activation) -> None:
    check_axes(normalization, value_network, activation)
    if q.ndim != 4 or k.ndim != 4 or v.ndim != 4:
        raise ValueError(
            f"q, k, v must be [B, T, H, D]; got shapes {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if k.shape[:3] != v.shape[:3] or q.shape[0] != k.shape[0] or q.shape[2:] != k.shape[2:]:
        raise ValueError(
            "incompatible shapes: need q [B, Tq, H, Dk], k [B, Tk, H, Dk], v [B, Tk, H, Dv]; "
            f"got {tuple(q.shape)}, {tuple(k.shape)}, {tuple(v.shape)}"
        )
    if not (q.is_floating_point() and k.is_floating_point() and v.is_floating_point()):
        raise TypeError("q, k and v must be floating point tensors")


@constant_under_compile  # recorded while tracing: a set the graph changed would fail a guard and recompile
def record_ran(name: str) -> None:
    _RAN.add(name)


def record_fallback(fast_path: str, reason: str) -> None:
    """A fast path did not run and the PyTorch form with the same math did: warn once per reason."""
    entry = f"{fast_path} fell back to PyTorch ({reason})"
    if entry not in _RAN:
        warnings.warn(
            f"hyla: the {fast_path} HYLA kernel did not run ({reason}); the PyTorch form with the same "
            "math runs instead",
            RuntimeWarning,
            stacklevel=2,
        )
    _RAN.add(entry)


def implementations_ran() -> list[str]:
    """What attention() ran since the last `reset_implementations_ran()`, sorted."""
    return sorted(_RAN)


def reset_implementations_ran() -> None:
    _RAN.clear()
