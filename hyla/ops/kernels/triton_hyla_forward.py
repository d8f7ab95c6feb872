"""The forward Triton kernel of HYLA (hyla.ops.kernels.triton_hyla explains the tiling) and the
tile helpers it shares with the backward kernel (hyla.ops.kernels.triton_hyla_backward), which
recomputes each tile's latent codes with `_latent_codes`."""

from __future__ import annotations

import triton
import triton.language as tl

from hyla.ops.kernels.naive import RMS_EPS

_EPS = tl.constexpr(RMS_EPS)


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

# The kernel below is kept out of the formatter (fmt: off): a @triton.jit kernel takes each
# pointer, stride and constexpr as its own parameter (no packing them into a structure), and one
# parameter a line would bury its body under a list of some 40 names.


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
