"""Pieces the implementations share besides the reference's scores and normalizations (naive.py):
what the Triton kernels take, the input checks, the views of biases and masks, and the record of
what ran."""

from __future__ import annotations

import warnings

import torch

from hyla.ops.mixers import check_axes
from hyla.ops.torch_internals import constant_under_compile

# What the Triton kernels take (triton_hyla.py checks them; hyla.ops.dispatch decides by them
# without importing triton).
TRITON_NORMALIZATIONS = ("none", "rms_head")
TRITON_DTYPES = (torch.float32, torch.bfloat16, torch.float16)
TRITON_MAX_HEAD_DIM = 128
# What attention() ran in this process: implementation names, and fast paths that fell back (with
# the reason). Training records it in the run's numerics.
_RAN: set[str] = set()


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
