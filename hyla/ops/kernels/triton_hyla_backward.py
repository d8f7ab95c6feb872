"""The backward Triton kernel of HYLA (hyla.ops.kernels.triton_hyla explains the tiling): per key
tile it recomputes the latent codes and the hidden layer with the forward's tile helpers, then runs
back through the two generated layers, the RMS normalization and the mask."""

from __future__ import annotations

import triton
import triton.language as tl

from hyla.ops.kernels.triton_hyla_forward import (
    _activation,
    _dot,
    _latent_codes,
    _load3,
    _pad_heads,
    _pair_tile,
    _unpad_heads,
)


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


# The kernel below is kept out of the formatter (fmt: off): a @triton.jit kernel takes each
# pointer, stride and constexpr as its own parameter (no packing them into a structure), and one
# parameter a line would bury its body under a list of some 40 names.


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
