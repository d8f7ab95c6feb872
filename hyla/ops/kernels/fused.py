"""HYLA (the `mlp` value network) with a hand-written backward that touches the [B, H, Tq, Tk]
scores far less often than autograd through the naive form (the eager hot path on CPU, where these
passes over memory, not arithmetic, set the speed of the paper-sized models).

The per-pair scalars (the RMS-head normalizer and the attention-dropout mask, both shared by all
heads) are folded into the small tensors of the generated value network, so the normalized and
dropped-out scores are never materialized:

    a[b,h,q,k] = P[b,h,q,k] * c[b,q,k]      P = scores (masked), c = rsqrt(mean_h P^2 + eps) * dropout
    z[b,q,k,:] = sum_h a v = c[b,q,k] * sum_h P[b,h,q,k] v[b,k,h,:]          (layer 1)
    y[b,q,h,:] = sum_k a u = sum_k P[b,h,q,k] * (c[b,q,k] u[b,q,k,:])       (layer 2, u = act(z))

For softmax (a per-head normalization) P is the softmax and c only the dropout mask. Same values as
`attention_naive` up to float rounding (the products are associated differently); tested against
it on outputs and gradients.
"""

from __future__ import annotations

import math

import torch

from hyla.ops.kernels.common import ACTIVATION_FNS, RMS_EPS, masked_softmax, per_pair, shared_by_heads


def softmax_backward(grad_p: torch.Tensor, p: torch.Tensor) -> torch.Tensor:
    """The gradient of the scores s given that of p = softmax(s, dim=-1)."""
    return p * (grad_p - (grad_p * p).sum(-1, keepdim=True))


def relu_backward(grad_u: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """The gradient of z given that of u = relu(z) (from u: u > 0 exactly where z > 0)."""
    return grad_u.masked_fill(u <= 0, 0.0)


def fusable(dropout_mask: torch.Tensor | None) -> bool:
    """The dropout mask must be shared by all heads to be folded (MultiHeadAttention's is [Tq, Tk])."""
    return shared_by_heads(dropout_mask)


def _activation_backward(activation: str, z: torch.Tensor, u: torch.Tensor, grad_u: torch.Tensor) -> torch.Tensor:
    if activation == "identity":
        return grad_u
    if activation == "relu":
        return relu_backward(grad_u, u)
    with torch.enable_grad():
        z_ = z.detach().requires_grad_()
        return torch.autograd.grad(ACTIVATION_FNS[activation](z_), z_, grad_u)[0]


class _FusedHyla(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, mask, dropout_mask, normalization, activation):
        batch, q_len, heads, _ = q.shape
        k_len, v_dim = k.shape[1], v.shape[-1]
        scale = math.sqrt(q.shape[-1])
        s = torch.matmul(q.transpose(1, 2), k.permute(0, 2, 3, 1))  # [B, H, Tq, Tk]
        if bias is not None:
            # bias + s / scale in one pass; a contiguous bias keeps the result contiguous (the
            # output takes the layout of the first input, and the position bias is a permuted view)
            s = torch.addcdiv(bias.contiguous(), s, torch.tensor(scale, dtype=s.dtype, device=s.device))
        else:
            s.div_(scale)
        inv = None
        if normalization == "softmax":
            p = masked_softmax(s, mask, inplace=True)  # in place: s is a fresh tensor here
        else:
            p = s if mask is None else s.masked_fill_(~mask, 0.0)
            if normalization == "rms_head":
                inv = torch.rsqrt(p.pow(2).mean(dim=1, keepdim=True) + RMS_EPS)  # [B, 1, Tq, Tk]
        c = inv if dropout_mask is None else dropout_mask if inv is None else inv * dropout_mask
        c = None if c is None else per_pair(c, q_len, k_len)  # [B|1, Tq, Tk]

        p_by_key = p.permute(0, 3, 2, 1).contiguous()  # [B, Tk, Tq, H]: layer 1 contracts the heads
        z0 = torch.matmul(p_by_key, v)  # [B, Tk, Tq, Dv]
        z = torch.empty(batch, q_len, k_len, v_dim, dtype=z0.dtype, device=z0.device)  # [B, Tq, Tk, Dv]
        if c is None:
            z.copy_(z0.transpose(1, 2))
        else:
            torch.mul(z0.transpose(1, 2), c.unsqueeze(-1), out=z)
        u = ACTIVATION_FNS[activation](z)
        u_scaled = u if c is None else u * c.unsqueeze(-1)
        p_by_query = p.permute(0, 2, 1, 3).contiguous()  # [B, Tq, H, Tk]: layer 2 contracts the keys
        out = torch.matmul(p_by_query, u_scaled)  # [B, Tq, H, Dv]

        ctx.save_for_backward(q, k, v, bias, mask, dropout_mask, p, inv, c, p_by_key, p_by_query, z0, z, u)
        ctx.config = (normalization, activation, scale)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, bias, mask, dropout_mask, p, inv, c, p_by_key, p_by_query, z0, z, u = ctx.saved_tensors
        normalization, activation, scale = ctx.config
        batch, q_len, heads, _ = q.shape
        k_len = k.shape[1]
        grad_out = grad_out.contiguous()

        # layer 2: out = p_by_query @ u_scaled
        u_scaled = u if c is None else u * c.unsqueeze(-1)
        grad_p_by_query = torch.matmul(grad_out, u_scaled.transpose(-1, -2))  # [B, Tq, H, Tk]
        grad_u_scaled = torch.matmul(p_by_query.transpose(-1, -2), grad_out)  # [B, Tq, Tk, Dv]
        grad_c = None
        grad_u = grad_u_scaled
        if c is not None:
            grad_u = grad_u_scaled * c.unsqueeze(-1)
            grad_c = (grad_u_scaled * u).sum(-1)  # [B, Tq, Tk]
        grad_z = _activation_backward(activation, z, u, grad_u)  # [B, Tq, Tk, Dv]

        # layer 1: z = c * (p_by_key @ v), transposed
        grad_z0 = torch.empty_like(z0)  # [B, Tk, Tq, Dv]
        if c is None:
            grad_z0.copy_(grad_z.transpose(1, 2))
        else:
            torch.mul(grad_z.transpose(1, 2), c.transpose(-1, -2).unsqueeze(-1), out=grad_z0)
            grad_c = grad_c + (grad_z * z0.transpose(1, 2)).sum(-1)
        grad_p_by_key = torch.matmul(grad_z0, v.transpose(-1, -2))  # [B, Tk, Tq, H]
        grad_v = torch.matmul(p_by_key.transpose(-1, -2), grad_z0)  # [B, Tk, H, Dv]

        grad_p = torch.empty(p.shape, dtype=p.dtype, device=p.device)  # [B, H, Tq, Tk]
        torch.add(grad_p_by_query.permute(0, 2, 1, 3), grad_p_by_key.permute(0, 3, 2, 1), out=grad_p)
        del grad_p_by_query, grad_p_by_key

        # normalization
        if normalization == "rms_head":
            grad_inv = grad_c if dropout_mask is None else grad_c * per_pair(dropout_mask, q_len, k_len)
            # inv = (m + eps)^(-1/2), m = mean_h p^2  ->  dL/dp = ... + p * (2 / H) * dL/dm
            grad_m = grad_inv.unsqueeze(1) * (-0.5) * inv.pow(3)  # [B, 1, Tq, Tk]
            grad_p.addcmul_(p, grad_m, value=2.0 / heads)
        if mask is not None:
            grad_p.masked_fill_(~mask, 0.0)
        if normalization == "softmax":
            grad_s = softmax_backward(grad_p, p)
            if mask is not None:
                grad_s.masked_fill_(~mask, 0.0)
        else:
            grad_s = grad_p

        grad_bias = None
        if bias is not None and ctx.needs_input_grad[3]:
            grad_bias = grad_s.sum_to_size(bias.shape)
        grad_q = grad_k = None
        if ctx.needs_input_grad[0]:
            grad_q = torch.matmul(grad_s, k.transpose(1, 2)).div_(scale).transpose(1, 2)  # [B, Tq, H, Dk]
        if ctx.needs_input_grad[1]:
            grad_k = torch.matmul(grad_s.transpose(-1, -2), q.transpose(1, 2)).div_(scale).transpose(1, 2)
        return grad_q, grad_k, grad_v, grad_bias, None, None, None, None


def hyla_fused(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    normalization: str,
    activation: str = "relu",
    bias: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    dropout_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """HYLA output [B, Tq, H, Dv] (the `mlp` value network), equal to the naive form up to rounding.

    q [B, Tq, H, Dk], k [B, Tk, H, Dk], v [B, Tk, H, Dv]; bias and mask broadcastable to
    [B, H, Tq, Tk]; dropout_mask broadcastable to [B, 1, Tq, Tk] (shared by the heads).
    """
    if not fusable(dropout_mask):
        raise ValueError("hyla_fused needs a dropout mask shared by all heads (size 1 on the head axis)")
    return _FusedHyla.apply(q, k, v, bias, mask, dropout_mask, normalization, activation)
