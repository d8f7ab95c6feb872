"""HYLA (the `mlp` value network) as fused Triton kernels, forward and backward, for the GPU.

One program owns a tile of queries (forward) or of keys (backward) for ALL heads, because the
`rms_head` normalization and the generated first layer both act across the heads of a query-key
pair. It loops over the other axis in tiles and keeps everything per pair in registers:

    s [H, BQ, BK] = q k^T / sqrt(Dk) + bias            (masked entries -> 0)
    w [H, BQ, BK] = s * rsqrt(mean_h s^2 + eps) * dropout    (rms_head; `none`: s * dropout)
    z [BK, BQ, Dv] = sum_h w v         u = act(z)       (layer 1: a batched product over keys)
    y [BQ, H, Dv] += sum_k w u                            (layer 2: a batched product over queries)

so neither the hidden tensor [B, Tq, Tk, Dv] nor the scores [B, H, Tq, Tk] ever reach global
memory. The value dimensions are independent through both layers, so they are split into chunks
of BD (the forward runs one program per chunk). The backward recomputes a tile's codes and hidden
layer (as `hyla_streamed` recomputes a key block), keeps the key gradients of its key tile in
registers, adds its value gradients chunk by chunk into a float32 buffer that no other program
writes, and adds the query gradients of every query tile into a float32 buffer with atomics. It
loads the q and k tiles again (from L2) for each product instead of keeping them across its loop:
a tile kept is a shared-memory buffer that lives through the loop, and the float32 backward would
then not fit the 99 KiB of an sm_86/sm_89 GPU.
Memory: the inputs, the output, those two buffers and, only when the bias needs a gradient, one
float32 [B or 1, H, Tq, Tk].

Heads are padded to a power of two, at least 8, for the scores (heads are the batch axis of
those products) and to at least 16 for the two layers (heads are a side of those products, and 16
is the smallest side of a tensor-core product); the padded heads have zero queries, keys, values
and codes and do not enter the RMS mean. Every product is exact float32 (`input_precision="ieee"`):
bfloat16/float16 inputs, and the codes and hidden layer rounded to that dtype as the naive form
rounds them, are widened to float32 first: on an H100 with Triton 3.6 the tensor-core products
(bfloat16 inputs, or TF32) gave wrong outputs (relative errors ~2) while exact float32 matched
the reference (experiments/RESULTS.md, "On one H100 (2026-11-24, session 9)", GPU suite).

CPU tensors work in Triton's interpreter (`TRITON_INTERPRET=1` set before this module is first
imported): that is how the tests run without a GPU. Same values as `attention_naive` up to
rounding; tested against it on outputs and gradients (tests/ops/test_attention.py).
"""

from __future__ import annotations

import math

import torch
import triton
import triton.language as tl
from triton.runtime.errors import OutOfResources

from hyla.ops.kernels.common import (
    RMS_EPS,
    TRITON_DTYPES,
    TRITON_MAX_HEAD_DIM,
    TRITON_NORMALIZATIONS,
    as_4d,
    record_fallback,
)
from hyla.ops.kernels.naive import attention_naive
from hyla.ops.kernels.streamed import hyla_streamed

ACTIVATION_CODES = {"identity": 0, "relu": 1, "gelu": 2, "silu": 3, "sigmoid": 4, "tanh": 5}
MIN_DOT = 16  # the smallest side of a tensor-core product
_EPS = tl.constexpr(RMS_EPS)
# Tiles (block_q, block_k, block_v) tried in turn until one fits the GPU's shared memory per block:
# a value chunk of 32 recomputes the scores half as often as 16, but its float32 backward needs
# more shared memory than the 99 KiB of sm_86/sm_89 GPUs (RTX 30/40, A6000, L4, L40).
TILES = {
    torch.float32: ((16, 16, 16),),
    torch.bfloat16: ((16, 16, 32), (16, 16, 16)),
    torch.float16: ((16, 16, 32), (16, 16, 16)),
}
DEFAULT_NUM_WARPS = 8
DEFAULT_NUM_STAGES = 1


# ----------------------------------------------------------------------------- kernel helpers


@triton.jit
def _load3(base, o0, o1, o2, s0, s1, s2, n0, n1, n2):
    """The [len(o0), len(o1), len(o2)] tile at base + o0*s0 + o1*s1 + o2*s2; zeros outside (n0, n1, n2)."""
    ptrs = base + o0[:, None, None] * s0 + o1[None, :, None] * s1 + o2[None, None, :] * s2
    inside = (o0 < n0)[:, None, None] & (o1 < n1)[None, :, None] & (o2 < n2)[None, None, :]
    return tl.load(ptrs, mask=inside, other=0)


@triton.jit
def _dot(a, b, acc, PRECISION: tl.constexpr, UPCAST: tl.constexpr):
    """a @ b (+ acc), float32 result. UPCAST: multiply in float32 (Triton's interpreter stores
    bfloat16 as raw 16-bit integers and cannot multiply them; the values are already rounded)."""
    if UPCAST:
        a, b = a.to(tl.float32), b.to(tl.float32)
    return tl.dot(a, b, acc, input_precision=PRECISION)


@triton.jit
def _activation(z, ACT: tl.constexpr):
    if ACT == 1:
        return tl.maximum(z, 0.0)
    elif ACT == 2:  # exact (erf) GELU, as torch.nn.functional.gelu
        return 0.5 * z * (1.0 + tl.erf(z * 0.7071067811865476))
    elif ACT == 3:
        return z * tl.sigmoid(z)
    elif ACT == 4:
        return tl.sigmoid(z)
    elif ACT == 5:  # tanh(z) = 2 sigmoid(2z) - 1 (core Triton has no tanh outside libdevice)
        return 2.0 * tl.sigmoid(2.0 * z) - 1.0
    else:
        return z


@triton.jit
def _activation_grad(z, ACT: tl.constexpr):
    """d act / d z at z."""
    if ACT == 1:
        return tl.where(z > 0.0, 1.0, 0.0)
    elif ACT == 2:
        cdf = 0.5 * (1.0 + tl.erf(z * 0.7071067811865476))
        return cdf + z * tl.exp(-0.5 * z * z) * 0.3989422804014327
    elif ACT == 3:
        sig = tl.sigmoid(z)
        return sig * (1.0 + z * (1.0 - sig))
    elif ACT == 4:
        sig = tl.sigmoid(z)
        return sig * (1.0 - sig)
    elif ACT == 5:
        t = 2.0 * tl.sigmoid(2.0 * z) - 1.0
        return 1.0 - t * t
    else:
        return tl.full(z.shape, 1.0, tl.float32)


@triton.jit
def _pad_heads(x, HS: tl.constexpr, HP: tl.constexpr):
    """[HS, BQ, BK] -> [HP, BQ, BK] with zero heads appended (HP is HS or 2 * HS)."""
    if HS == HP:
        padded = x
    else:
        doubled = tl.permute(tl.join(x, tl.zeros_like(x)), (3, 0, 1, 2))  # [2, HS, BQ, BK]
        padded = tl.reshape(doubled, (HP, x.shape[1], x.shape[2]))
    return padded


@triton.jit
def _unpad_heads(x, HS: tl.constexpr, HP: tl.constexpr):
    """[HP, BQ, BK] -> its first HS heads."""
    if HS == HP:
        first = x
    else:
        halves = tl.permute(tl.reshape(x, (2, HS, x.shape[1], x.shape[2])), (1, 2, 3, 0))  # [HS, BQ, BK, 2]
        first, _ = tl.split(halves)
    return first


@triton.jit
def _pair_tile(base, offs_h, offs_q, offs_k, strides, H, Tq, Tk):
    """A [HS, BQ, BK] tile of a tensor broadcast to [B, H, Tq, Tk] (strides of h, q, k; 0 = broadcast).
    int64 offsets: H * Tq * Tk exceeds 2^31 at long sequences."""
    return _load3(
        base,
        offs_h.to(tl.int64),
        offs_q.to(tl.int64),
        offs_k.to(tl.int64),
        strides[0],
        strides[1],
        strides[2],
        H,
        Tq,
        Tk,
    )


@triton.jit
def _latent_codes(
    q_tile,
    k_tile_t,
    bias_base,
    mask_base,
    drop_base,
    offs_h,
    offs_q,
    offs_k,
    bias_strides,
    mask_strides,
    drop_strides,
    Tq,
    Tk,
    scale,
    H: tl.constexpr,
    RMS: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    HAS_MASK: tl.constexpr,
    HAS_DROP: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Scores p (masked -> 0), the per-pair RMS factor r, the weights w = p * r * dropout, and
    `valid` for one tile: q_tile [HS, BQ, DKP], k_tile_t [HS, DKP, BK] -> [HS, BQ, BK] (r: [BQ, BK])."""
    s = _dot(q_tile, k_tile_t, None, PRECISION, UPCAST) * scale  # [HS, BQ, BK]
    if HAS_BIAS:
        s += _pair_tile(bias_base, offs_h, offs_q, offs_k, bias_strides, H, Tq, Tk).to(tl.float32)
    valid = (offs_h < H)[:, None, None] & (offs_q < Tq)[None, :, None] & (offs_k < Tk)[None, None, :]
    if HAS_MASK:
        valid = valid & (_pair_tile(mask_base, offs_h, offs_q, offs_k, mask_strides, H, Tq, Tk) != 0)
    p = tl.where(valid, s, 0.0)
    if RMS:
        r = tl.rsqrt(tl.sum(p * p, axis=0) / H + _EPS)  # [BQ, BK]: padded heads hold 0
    else:
        r = tl.full((p.shape[1], p.shape[2]), 1.0, tl.float32)
    w = p * r[None, :, :]
    if HAS_DROP:
        w = w * _pair_tile(drop_base, offs_h, offs_q, offs_k, drop_strides, H, Tq, Tk).to(tl.float32)
    return p, r, w, valid


# ----------------------------------------------------------------------------- forward

# The two kernels below are kept out of the formatter (fmt: off): a @triton.jit kernel takes each
# pointer, stride and constexpr as its own parameter (no packing them into a structure), and one
# parameter a line would bury their bodies under lists of some 40 names.


# fmt: off
@triton.jit
def _hyla_forward_kernel(
    q_ptr, k_ptr, v_ptr, bias_ptr, mask_ptr, drop_ptr, out_ptr,
    Tq, Tk, scale,
    bias_sb, bias_sh, bias_sq, bias_sk, mask_sb, mask_sh, mask_sq, mask_sk,
    drop_sb, drop_sh, drop_sq, drop_sk,
    H: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, HS: tl.constexpr, HP: tl.constexpr, DKP: tl.constexpr,
    BD: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr, ACT: tl.constexpr, RMS: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr, HAS_DROP: tl.constexpr, PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Program (query tile, batch, value chunk): out[b, q-tile, :, chunk] = sum over key tiles of w u.
    The value dimensions are independent through both layers, so chunks of BD of them split the
    hidden tile [BQ, BK, BD] (registers) at the price of recomputing the scores per chunk."""
    b = tl.program_id(1).to(tl.int64)
    offs_q = tl.program_id(0) * BQ + tl.arange(0, BQ)
    offs_h, offs_hv = tl.arange(0, HS), tl.arange(0, HP)
    offs_dk, offs_dv = tl.arange(0, DKP), tl.program_id(2) * BD + tl.arange(0, BD)
    q_tile = _load3(q_ptr + b * Tq * H * DK, offs_h, offs_q, offs_dk, DK, H * DK, 1, H, Tq, DK)  # [HS, BQ, DKP]
    k_base, v_base = k_ptr + b * Tk * H * DK, v_ptr + b * Tk * H * DV
    bias_base, mask_base, drop_base = bias_ptr + b * bias_sb, mask_ptr + b * mask_sb, drop_ptr + b * drop_sb
    acc = tl.zeros((BQ, HP, BD), tl.float32)
    for k_start in range(0, Tk, BK):
        offs_k = k_start + tl.arange(0, BK)
        k_tile_t = _load3(k_base, offs_h, offs_dk, offs_k, DK, 1, H * DK, H, DK, Tk)  # [HS, DKP, BK]
        _, _, w, valid = _latent_codes(
            q_tile, k_tile_t, bias_base, mask_base, drop_base, offs_h, offs_q, offs_k,
            (bias_sh, bias_sq, bias_sk), (mask_sh, mask_sq, mask_sk), (drop_sh, drop_sq, drop_sk), Tq, Tk, scale,
            H, RMS, HAS_BIAS, HAS_MASK, HAS_DROP, PRECISION, UPCAST)
        if tl.max(valid.to(tl.int32)) > 0:  # skip tiles with no attended pair (e.g. above a causal diagonal)
            v_tile = _load3(v_base, offs_k, offs_hv, offs_dv, H * DV, DV, 1, Tk, H, DV)  # [BK, HP, BD]
            w_padded = _pad_heads(w, HS, HP)  # [HP, BQ, BK]
            w_by_key = tl.permute(w_padded, (2, 1, 0)).to(v_tile.dtype)  # [BK, BQ, HP]
            z = _dot(w_by_key, v_tile, None, PRECISION, UPCAST)  # [BK, BQ, BD]
            u = tl.permute(_activation(z, ACT), (1, 0, 2)).to(v_tile.dtype)  # [BQ, BK, BD]
            w_by_query = tl.permute(w_padded, (1, 0, 2)).to(v_tile.dtype)  # [BQ, HP, BK]
            acc = _dot(w_by_query, u, acc, PRECISION, UPCAST)  # [BQ, HP, BD]
    out_base = out_ptr + b * Tq * H * DV
    offs_out = offs_q[:, None, None] * (H * DV) + offs_hv[None, :, None] * DV + offs_dv[None, None, :]
    inside = (offs_q < Tq)[:, None, None] & (offs_hv < H)[None, :, None] & (offs_dv < DV)[None, None, :]
    tl.store(out_base + offs_out, acc.to(out_ptr.dtype.element_ty), mask=inside)
# fmt: on


# ----------------------------------------------------------------------------- backward


# fmt: off
@triton.jit
def _hyla_backward_kernel(
    q_ptr, k_ptr, v_ptr, bias_ptr, mask_ptr, drop_ptr, grad_out_ptr,
    grad_q_ptr, grad_k_ptr, grad_v_ptr, grad_bias_ptr,
    Tq, Tk, scale,
    bias_sb, bias_sh, bias_sq, bias_sk, mask_sb, mask_sh, mask_sq, mask_sk,
    drop_sb, drop_sh, drop_sq, drop_sk,
    H: tl.constexpr, DK: tl.constexpr, DV: tl.constexpr, HS: tl.constexpr, HP: tl.constexpr, DKP: tl.constexpr,
    BD: tl.constexpr, BQ: tl.constexpr, BK: tl.constexpr, ACT: tl.constexpr, RMS: tl.constexpr,
    HAS_BIAS: tl.constexpr, HAS_MASK: tl.constexpr, HAS_DROP: tl.constexpr, PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
    GRAD_BIAS: tl.constexpr, GRAD_BIAS_SHARED: tl.constexpr,
):
    """Program (key tile, batch): grad k of its keys in registers; grad v of its keys added chunk by
    chunk into a float32 buffer only this program writes; grad q by atomics into a float32 buffer;
    grad bias [B or 1, H, Tq, Tk] float32 (atomics when shared over the batch)."""
    b = tl.program_id(1).to(tl.int64)
    offs_k = tl.program_id(0) * BK + tl.arange(0, BK)
    offs_h, offs_hv, offs_dk = tl.arange(0, HS), tl.arange(0, HP), tl.arange(0, DKP)
    q_base, go_base = q_ptr + b * Tq * H * DK, grad_out_ptr + b * Tq * H * DV
    k_base = k_ptr + b * Tk * H * DK
    v_base, grad_v_base = v_ptr + b * Tk * H * DV, grad_v_ptr + b * Tk * H * DV
    bias_base, mask_base, drop_base = bias_ptr + b * bias_sb, mask_ptr + b * mask_sb, drop_ptr + b * drop_sb
    grad_k = tl.zeros((HS, BK, DKP), tl.float32)
    for q_start in range(0, Tq, BQ):
        offs_q = q_start + tl.arange(0, BQ)
        q_tile = _load3(q_base, offs_h, offs_q, offs_dk, DK, H * DK, 1, H, Tq, DK)  # [HS, BQ, DKP]
        k_tile_t = _load3(k_base, offs_h, offs_dk, offs_k, DK, 1, H * DK, H, DK, Tk)  # [HS, DKP, BK]
        p, r, w, valid = _latent_codes(
            q_tile, k_tile_t, bias_base, mask_base, drop_base, offs_h, offs_q, offs_k,
            (bias_sh, bias_sq, bias_sk), (mask_sh, mask_sq, mask_sk), (drop_sh, drop_sq, drop_sk), Tq, Tk, scale,
            H, RMS, HAS_BIAS, HAS_MASK, HAS_DROP, PRECISION, UPCAST)
        if tl.max(valid.to(tl.int32)) > 0:
            w_padded = _pad_heads(w, HS, HP)  # [HP, BQ, BK]
            grad_w = tl.zeros(w_padded.shape, tl.float32)
            for d_start in range(0, DV, BD):
                grad_w += _value_network_backward(w_padded, v_base, go_base, grad_v_base, offs_q, offs_k, offs_hv,
                                                  d_start + tl.arange(0, BD), Tq, Tk, H, DV, ACT, PRECISION, UPCAST)
            grad_s = _latent_codes_backward(_unpad_heads(grad_w, HS, HP), p, r, valid, drop_base, offs_h, offs_q,
                                            offs_k, (drop_sh, drop_sq, drop_sk), Tq, Tk, H, RMS, HAS_DROP)
            if GRAD_BIAS:
                _store_grad_bias(grad_bias_ptr, b, grad_s, offs_h, offs_q, offs_k, Tq, Tk, H, GRAD_BIAS_SHARED)
            grad_s = grad_s * scale
            q_tile = _load3(q_base, offs_h, offs_q, offs_dk, DK, H * DK, 1, H, Tq, DK)  # [HS, BQ, DKP]
            grad_k = _dot(tl.permute(grad_s, (0, 2, 1)).to(q_tile.dtype), q_tile, grad_k, PRECISION,
                          UPCAST)  # [HS, BK, DKP]
            k_tile = _load3(k_base, offs_h, offs_k, offs_dk, DK, H * DK, 1, H, Tk, DK)  # [HS, BK, DKP]
            grad_q_part = _dot(grad_s.to(k_tile.dtype), k_tile, None, PRECISION, UPCAST)  # [HS, BQ, DKP]
            offs = offs_h[:, None, None] * DK + offs_q[None, :, None] * (H * DK) + offs_dk[None, None, :]
            inside = (offs_h < H)[:, None, None] & (offs_q < Tq)[None, :, None] & (offs_dk < DK)[None, None, :]
            tl.atomic_add(grad_q_ptr + b * Tq * H * DK + offs, grad_q_part, mask=inside)
    offs = offs_h[:, None, None] * DK + offs_k[None, :, None] * (H * DK) + offs_dk[None, None, :]
    inside = (offs_h < H)[:, None, None] & (offs_k < Tk)[None, :, None] & (offs_dk < DK)[None, None, :]
    tl.store(grad_k_ptr + b * Tk * H * DK + offs, grad_k.to(grad_k_ptr.dtype.element_ty), mask=inside)
# fmt: on


@triton.jit
def _latent_codes_backward(
    grad_w,
    p,
    r,
    valid,
    drop_base,
    offs_h,
    offs_q,
    offs_k,
    drop_strides,
    Tq,
    Tk,
    H: tl.constexpr,
    RMS: tl.constexpr,
    HAS_DROP: tl.constexpr,
):
    """dL/ds [HS, BQ, BK] from dL/dw, back through `_latent_codes`: the attention dropout, then the
    RMS normalization across heads, then the mask (p, r and valid as `_latent_codes` returned them)."""
    grad_a = grad_w
    if HAS_DROP:
        grad_a = grad_a * _pair_tile(drop_base, offs_h, offs_q, offs_k, drop_strides, H, Tq, Tk).to(tl.float32)
    if RMS:
        # a = p r, r = (mean_h p^2 + eps)^(-1/2):  dL/dp = r dL/da - (r^3 / H) p sum_h(dL/da p)
        along = tl.sum(grad_a * p, axis=0)  # [BQ, BK]
        grad_a = r[None, :, :] * grad_a - ((r * r * r * along) / H)[None, :, :] * p
    return tl.where(valid, grad_a, 0.0)


@triton.jit
def _value_network_backward(
    w,
    v_base,
    go_base,
    grad_v_base,
    offs_q,
    offs_k,
    offs_h,
    offs_dv,
    Tq,
    Tk,
    H: tl.constexpr,
    DV: tl.constexpr,
    ACT: tl.constexpr,
    PRECISION: tl.constexpr,
    UPCAST: tl.constexpr,
):
    """Through both generated layers for one tile and one chunk offs_dv [BD] of the value dimensions:
    w [HP, BQ, BK] -> this chunk's part of dL/dw [HP, BQ, BK]; adds its part of grad v in place."""
    v_tile = _load3(v_base, offs_k, offs_h, offs_dv, H * DV, DV, 1, Tk, H, DV)  # [BK, HP, BD]
    dtype = v_tile.dtype
    w_by_key = tl.permute(w, (2, 1, 0)).to(dtype)  # [BK, BQ, HP]
    z = _dot(w_by_key, v_tile, None, PRECISION, UPCAST)  # [BK, BQ, BD]
    u = tl.permute(_activation(z, ACT), (1, 0, 2)).to(dtype)  # [BQ, BK, BD]
    grad_out = _load3(go_base, offs_q, offs_h, offs_dv, H * DV, DV, 1, Tq, H, DV)  # [BQ, HP, BD]
    # layer 2, y = sum_k w u:  dL/dw += dy . u,  dL/du = sum_h w dy
    grad_w_layer2 = _dot(grad_out, tl.permute(u, (0, 2, 1)), None, PRECISION, UPCAST)  # [BQ, HP, BK]
    w_by_query_t = tl.permute(w, (1, 2, 0)).to(dtype)  # [BQ, BK, HP]
    grad_u = _dot(w_by_query_t, grad_out, None, PRECISION, UPCAST)  # [BQ, BK, BD]
    grad_z = (tl.permute(grad_u, (1, 0, 2)) * _activation_grad(z, ACT)).to(dtype)  # [BK, BQ, BD]
    # layer 1, z = sum_h w v:  dL/dw += dz . v,  dL/dv = sum_q w dz
    grad_w_layer1 = _dot(grad_z, tl.permute(v_tile, (0, 2, 1)), None, PRECISION, UPCAST)  # [BK, BQ, HP]
    grad_v_ptrs = grad_v_base + offs_k[:, None, None] * (H * DV) + offs_h[None, :, None] * DV + offs_dv[None, None, :]
    inside = (offs_k < Tk)[:, None, None] & (offs_h < H)[None, :, None] & (offs_dv < DV)[None, None, :]
    grad_v = tl.load(grad_v_ptrs, mask=inside, other=0.0)  # [BK, HP, BD] float32
    grad_v = _dot(tl.permute(w_by_key, (0, 2, 1)), grad_z, grad_v, PRECISION, UPCAST)
    tl.store(grad_v_ptrs, grad_v, mask=inside)
    return tl.permute(grad_w_layer2, (1, 0, 2)) + tl.permute(grad_w_layer1, (2, 1, 0))  # [HP, BQ, BK]


@triton.jit
def _store_grad_bias(grad_bias_ptr, b, grad_s, offs_h, offs_q, offs_k, Tq, Tk, H: tl.constexpr, SHARED: tl.constexpr):
    """grad_s [HS, BQ, BK] into the float32 [B or 1, H, Tq, Tk] buffer; summed over the batch when SHARED."""
    offs = (offs_h.to(tl.int64)[:, None, None] * Tq + offs_q[None, :, None]) * Tk + offs_k[None, None, :]
    inside = (offs_h < H)[:, None, None] & (offs_q < Tq)[None, :, None] & (offs_k < Tk)[None, None, :]
    if SHARED:
        tl.atomic_add(grad_bias_ptr + offs, grad_s, mask=inside)
    else:
        tl.store(grad_bias_ptr + b * H * Tq * Tk + offs, grad_s, mask=inside)


# ----------------------------------------------------------------------------- launch and autograd


def _interpreted() -> bool:
    return type(_hyla_forward_kernel).__name__ == "InterpretedFunction"


def _pair_strides(t: torch.Tensor | None, shape: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """Strides of a tensor broadcastable to [B, H, Tq, Tk] as a [B, H, Tq, Tk] view (0 = broadcast)."""
    if t is None:
        return (0, 0, 0, 0)
    return as_4d(t).expand(shape).stride()


def _launch_args(q, k, v, bias, mask, dropout_mask, normalization, activation, blocks):
    """(tensor args, scalar args, constexprs) shared by the forward and backward kernels."""
    batch, q_len, heads, k_dim = q.shape
    k_len, v_dim = k.shape[1], v.shape[-1]
    shape = (batch, heads, q_len, k_len)
    # bool has no Triton pointer type on every version: read the mask as bytes (same storage)
    mask_bytes = None if mask is None else mask.view(torch.uint8)
    pointers = [t if t is not None else q for t in (bias, mask_bytes, dropout_mask)]
    strides = [s for t in (bias, mask_bytes, dropout_mask) for s in _pair_strides(t, shape)]
    constexprs = dict(
        H=heads,
        DK=k_dim,
        DV=v_dim,
        HS=max(MIN_DOT // 2, triton.next_power_of_2(heads)),
        HP=max(MIN_DOT, triton.next_power_of_2(heads)),
        DKP=max(MIN_DOT, triton.next_power_of_2(k_dim)),
        BD=min(blocks[2], max(MIN_DOT, triton.next_power_of_2(v_dim))),
        BQ=blocks[0],
        BK=blocks[1],
        ACT=ACTIVATION_CODES[activation],
        RMS=normalization == "rms_head",
        HAS_BIAS=bias is not None,
        HAS_MASK=mask is not None,
        HAS_DROP=dropout_mask is not None,
        PRECISION="ieee",
        UPCAST=q.dtype != torch.float32 or _interpreted(),
    )
    return pointers, [q_len, k_len, 1.0 / math.sqrt(k_dim), *strides], constexprs


def _forward(q, k, v, bias, mask, dropout_mask, normalization, activation, tiles, num_warps, num_stages):
    """out [B, Tq, H, Dv] from the forward kernel, or from the PyTorch form if no tile launches."""
    try:
        return _launch_forward(
            q, k, v, bias, mask, dropout_mask, normalization, activation, tiles, num_warps, num_stages
        )
    except Exception as error:  # compile, resources, driver or an older Triton: same math in PyTorch
        _fell_back(error)
        return hyla_streamed(
            q, k, v, normalization=normalization, activation=activation, bias=bias, mask=mask, dropout_mask=dropout_mask
        )


def _backward(
    grad_out, q, k, v, bias, mask, dropout_mask, normalization, activation, tiles, num_warps, num_stages, want_bias
):
    """(grad q, grad k, grad v, grad bias) from the backward kernel, or from the naive form's vjp: if
    no tile launches, or in deterministic mode (the kernel adds with atomics)."""
    if not torch.are_deterministic_algorithms_enabled():
        try:
            return _launch_backward(
                grad_out,
                q,
                k,
                v,
                bias,
                mask,
                dropout_mask,
                normalization,
                activation,
                tiles,
                num_warps,
                num_stages,
                want_bias,
            )
        except Exception as error:
            _fell_back(error)
    else:
        _fell_back(RuntimeError("deterministic mode: the Triton backward adds with atomics"))

    # (torch.func.vjp: a custom operator's body runs below autograd; the naive form keeps [B, Tq, Tk, Dv])
    def output(q, k, v, bias):
        return attention_naive(
            q,
            k,
            v,
            normalization=normalization,
            value_network="mlp",
            activation=activation,
            bias=bias,
            mask=mask,
            dropout_mask=dropout_mask,
        )[0]

    if want_bias:
        return torch.func.vjp(output, q, k, v, bias)[1](grad_out.to(q.dtype))
    grad_q, grad_k, grad_v = torch.func.vjp(lambda q, k, v: output(q, k, v, bias), q, k, v)[1](grad_out.to(q.dtype))
    return grad_q, grad_k, grad_v, q.new_empty(0, dtype=torch.float32)


def _fell_back(error: Exception) -> None:
    """Warn once per reason, and record that the PyTorch form ran instead of the kernels."""
    reason = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    record_fallback("triton", reason)


def _launch(kernel, grid, tensors, scalars, constexprs_for, tiles, num_warps, num_stages):
    """Launch `kernel` with the first tile of `tiles` that fits the device (a tile that runs out of
    shared memory or registers is remembered and skipped). Returns the tile that ran."""
    error = None
    for tile in tiles:
        key = (id(kernel), tile, *tensors[0].shape[2:], tensors[0].dtype, tensors[0].device)
        if key in _TOO_LARGE:
            continue
        try:
            kernel[grid(tile)](*tensors, *scalars, **constexprs_for(tile), num_warps=num_warps, num_stages=num_stages)
            return tile
        except OutOfResources as e:
            _TOO_LARGE.add(key)
            error = e
    raise error or RuntimeError("no tile fits this GPU")


_TOO_LARGE: set = set()


def _launch_forward(q, k, v, bias, mask, dropout_mask, normalization, activation, tiles, num_warps, num_stages):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty(*q.shape[:3], v.shape[-1], dtype=q.dtype, device=q.device)  # [B, Tq, H, Dv]

    def launch_args(tile):
        return _launch_args(q, k, v, bias, mask, dropout_mask, normalization, activation, tile)

    pointers, scalars, _ = launch_args(tiles[0])

    def grid(tile):
        return (triton.cdiv(q.shape[1], tile[0]), q.shape[0], triton.cdiv(v.shape[-1], launch_args(tile)[2]["BD"]))

    _launch(
        _hyla_forward_kernel,
        grid,
        [q, k, v, *pointers, out],
        scalars,
        lambda tile: launch_args(tile)[2],
        tiles,
        num_warps,
        num_stages,
    )
    return out


def _launch_backward(
    grad_out, q, k, v, bias, mask, dropout_mask, normalization, activation, tiles, num_warps, num_stages, want_bias
):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    batch, q_len, heads, _ = q.shape
    pointers, scalars, _ = _launch_args(q, k, v, bias, mask, dropout_mask, normalization, activation, tiles[0])
    # float32 accumulators: grad q by atomics, grad v by chunks added over the query tiles
    grad_q = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    grad_v = torch.zeros(v.shape, dtype=torch.float32, device=q.device)
    grad_k = torch.empty_like(k)
    bias4 = as_4d(bias)
    shared = want_bias and bias4.shape[0] == 1
    grad_bias = torch.zeros(
        (1 if shared else batch, heads, q_len, k.shape[1]) if want_bias else (0,), dtype=torch.float32, device=q.device
    )

    def constexprs_for(tile):
        constexprs = _launch_args(q, k, v, bias, mask, dropout_mask, normalization, activation, tile)[2]
        return {**constexprs, "GRAD_BIAS": want_bias, "GRAD_BIAS_SHARED": shared}

    tensors = [q, k, v, *pointers, grad_out.contiguous(), grad_q, grad_k, grad_v, grad_bias]
    _launch(
        _hyla_backward_kernel,
        lambda tile: (triton.cdiv(k.shape[1], tile[1]), batch),
        tensors,
        scalars,
        constexprs_for,
        tiles,
        num_warps,
        num_stages,
    )
    if want_bias:
        grad_bias = grad_bias.sum_to_size(bias4.shape).reshape(bias.shape).to(bias.dtype)
    return grad_q.to(q.dtype), grad_k, grad_v.to(v.dtype), grad_bias


# torch.library custom operators: torch.compile treats them as opaque (fullgraph works) and
# autograd reaches the hand-written backward through `register_autograd`. They take the tiles to try
# flattened ([bq, bk, bv, bq, ...]): an operator schema has no list of lists.


def _unflatten(tiles: list[int]) -> list[tuple[int, int, int]]:
    return [tuple(tiles[i : i + 3]) for i in range(0, len(tiles), 3)]


@torch.library.custom_op("hyla::triton_hyla_forward", mutates_args=())
def _forward_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    mask: torch.Tensor | None,
    dropout_mask: torch.Tensor | None,
    normalization: str,
    activation: str,
    tiles: list[int],
    num_warps: int,
    num_stages: int,
) -> torch.Tensor:
    return _forward(
        q, k, v, bias, mask, dropout_mask, normalization, activation, _unflatten(tiles), num_warps, num_stages
    )


@_forward_op.register_fake
def _(q, k, v, bias, mask, dropout_mask, normalization, activation, tiles, num_warps, num_stages):
    return q.new_empty(*q.shape[:3], v.shape[-1])


@torch.library.custom_op("hyla::triton_hyla_backward", mutates_args=())
def _backward_op(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    mask: torch.Tensor | None,
    dropout_mask: torch.Tensor | None,
    normalization: str,
    activation: str,
    tiles: list[int],
    num_warps: int,
    num_stages: int,
    want_bias: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward(
        grad_out,
        q,
        k,
        v,
        bias,
        mask,
        dropout_mask,
        normalization,
        activation,
        _unflatten(tiles),
        num_warps,
        num_stages,
        want_bias,
    )


@_backward_op.register_fake
def _(grad_out, q, k, v, bias, mask, dropout_mask, normalization, activation, tiles, num_warps, num_stages, want_bias):
    grad_bias = torch.empty_like(bias) if want_bias else q.new_empty(0, dtype=torch.float32)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), grad_bias


def _setup_context(ctx, inputs, output):
    q, k, v, bias, mask, dropout_mask, *config = inputs
    ctx.save_for_backward(q, k, v, bias, mask, dropout_mask)
    ctx.config = config


def _autograd_backward(ctx, grad_out):
    q, k, v, bias, mask, dropout_mask = ctx.saved_tensors
    want_bias = bias is not None and ctx.needs_input_grad[3]
    grad_q, grad_k, grad_v, grad_bias = _backward_op(
        grad_out, q, k, v, bias, mask, dropout_mask, *ctx.config, want_bias
    )
    return (grad_q, grad_k, grad_v, grad_bias if want_bias else None) + (None,) * 7


_forward_op.register_autograd(_autograd_backward, setup_context=_setup_context)


def check_supported(q, k, v, normalization) -> None:
    """Raise a one-line error for what the kernels do not cover."""
    if normalization not in TRITON_NORMALIZATIONS:
        raise ValueError(
            f"the triton kernel supports normalization 'none' and 'rms_head', not {normalization!r} "
            "(use implementation='streamed' for softmax)"
        )
    if q.dtype not in TRITON_DTYPES:
        raise TypeError(f"the triton kernel supports float32, bfloat16 and float16, not {q.dtype}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if max(q.shape[-1], v.shape[-1]) > TRITON_MAX_HEAD_DIM:
        raise ValueError(
            f"the triton kernel supports head sizes up to {TRITON_MAX_HEAD_DIM}, got Dk={q.shape[-1]}, Dv={v.shape[-1]}"
        )


def hyla_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    normalization: str,
    activation: str = "relu",
    bias: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    dropout_mask: torch.Tensor | None = None,
    tiles: list[tuple[int, int, int]] | None = None,
    num_warps: int = DEFAULT_NUM_WARPS,
    num_stages: int = DEFAULT_NUM_STAGES,
) -> torch.Tensor:
    """HYLA output [B, Tq, H, Dv] (the `mlp` value network) from the fused kernels, equal to the naive
    form up to rounding. Normalization 'none' or 'rms_head'; CUDA tensors (or CPU tensors under
    TRITON_INTERPRET=1).

    q [B, Tq, H, Dk], k [B, Tk, H, Dk], v [B, Tk, H, Dv] (Dk, Dv <= 128); bias, mask (bool) and
    dropout_mask broadcastable to [B, H, Tq, Tk]. tiles: (block_q, block_k, block_v) tiles to try in
    turn, the first that fits the GPU runs (default TILES[dtype]): query and key tile sizes and value
    dimensions per chunk, all powers of two >= 16. num_warps: per program; num_stages: Triton's
    software pipelining depth of the tile loads.

    If no tile launches (compile error, shared memory, an unsupported GPU or Triton), or the backward
    runs in deterministic mode, it warns once and `hyla_streamed` computes the same function.
    """
    check_supported(q, k, v, normalization)
    tiles = list(tiles or TILES[q.dtype])
    for tile in tiles:
        for name, block in zip(("block_q", "block_k", "block_v"), tile):
            if block < MIN_DOT or block & (block - 1):
                raise ValueError(f"{name} must be a power of two >= {MIN_DOT}, got {block}")
    return _forward_op(
        q,
        k,
        v,
        bias,
        mask,
        dropout_mask,
        normalization,
        activation,
        [block for tile in tiles for block in tile],
        num_warps,
        num_stages,
    )
