"""Memory-bounded HYLA: streams over key blocks so the [B, Tq, Tk, Dv] hidden tensor of the
generated value network only ever exists one block at a time, in the forward AND the backward.

Forward keeps nothing but the inputs (and, for softmax, the log-sum-exp over keys). Backward
recomputes each block under autograd and frees it before the next. HYLA has no linear-time form
(the activation acts per query-key pair), so the cost stays quadratic; only memory is bounded.

Softmax couples all keys of a row through its normalizer. Each block treats the log-sum-exp
`lse` as an input, so its gradient `g_lse = -sum_k a*ga` over the blocks gives the row term D;
a second, cheap pass over the [B, H, Tq, block] scores adds the correction `gs += a * g_lse`.
"""

from __future__ import annotations

import torch

from hyla.ops.kernels.common import as_4d
from hyla.ops.kernels.naive import ACTIVATION_FNS, masked_scores, normalize, raw_scores

# Elements of one hidden block [B, Tq, block, Dv]: 4M floats = 16 MiB in float32.
BLOCK_ELEMENTS = 1 << 22


def key_block_size(batch: int, q_len: int, v_dim: int, block_elements: int = BLOCK_ELEMENTS) -> int:
    return max(1, block_elements // max(1, batch * q_len * v_dim))


def _with_key_axis(t: torch.Tensor | None, k_len: int) -> torch.Tensor | None:
    """View a tensor broadcastable to [B, H, Tq, Tk] as 4-d with a full key axis (no copy)."""
    if t is None:
        return None
    t = as_4d(t)
    return t.expand(*t.shape[:-1], k_len)


def _block_output(q, k, v, bias, mask, dropout_mask, lse, normalization, activation):
    """HYLA output of one key block: q [B, Tq, H, Dk], k/v [B, Kb, H, D], extras [.., Kb] -> [B, Tq, H, Dv]."""
    a = normalize(raw_scores(q, k, bias), normalization, mask, softmax_lse=lse)
    if dropout_mask is not None:
        a = a * dropout_mask
    hidden = ACTIVATION_FNS[activation](torch.einsum("bhqk,bkhd->bqkd", a, v))  # [B, Tq, Kb, Dv]
    return torch.einsum("bhqk,bqkd->bqhd", a, hidden)


def _softmax_lse(q, k, bias, mask, block):
    """log-sum-exp of the masked scores over all keys, [B, H, Tq, 1], one key block at a time."""
    lse = None
    for start in range(0, k.shape[1], block):
        ks = slice(start, start + block)
        s = raw_scores(q, k[:, ks], None if bias is None else bias[..., ks])
        s = masked_scores(s, None if mask is None else mask[..., ks])
        block_lse = torch.logsumexp(s, dim=-1, keepdim=True)
        lse = block_lse if lse is None else torch.logaddexp(lse, block_lse)
    return lse


class _StreamedHyla(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, mask, dropout_mask, normalization, activation, block):
        k_len = k.shape[1]
        bias4, mask4, drop4 = (_with_key_axis(t, k_len) for t in (bias, mask, dropout_mask))
        lse = _softmax_lse(q, k, bias4, mask4, block) if normalization == "softmax" else None
        out = torch.zeros(*q.shape[:3], v.shape[-1], dtype=q.dtype, device=q.device)
        for start in range(0, k_len, block):
            ks = slice(start, start + block)
            out += _block_output(
                q,
                k[:, ks],
                v[:, ks],
                *(None if t is None else t[..., ks] for t in (bias4, mask4, drop4)),
                lse,
                normalization,
                activation,
            )
        ctx.save_for_backward(q, k, v, bias, mask, dropout_mask, lse)
        ctx.config = (normalization, activation, block)
        return out

    @staticmethod
    def backward(ctx, grad_out):
        q, k, v, bias, mask, dropout_mask, lse = ctx.saved_tensors
        normalization, activation, block = ctx.config
        k_len = k.shape[1]
        bias4, mask4, drop4 = (_with_key_axis(t, k_len) for t in (bias, mask, dropout_mask))
        want_bias = bias is not None and ctx.needs_input_grad[3]
        grad_q = torch.zeros_like(q)
        grad_k, grad_v = torch.zeros_like(k), torch.zeros_like(v)
        grad_bias = torch.zeros(bias4.shape, dtype=bias.dtype, device=bias.device) if want_bias else None
        grad_lse = None if lse is None else torch.zeros_like(lse)
        with torch.enable_grad():
            q_ = q.detach().requires_grad_()
            lse_ = None if lse is None else lse.detach().requires_grad_()
            for start in range(0, k_len, block):
                ks = slice(start, start + block)
                k_, v_ = k[:, ks].detach().requires_grad_(), v[:, ks].detach().requires_grad_()
                bias_ = None if bias4 is None else bias4[..., ks].detach().requires_grad_(want_bias)
                inputs = [q_, k_, v_] + ([bias_] if want_bias else []) + ([lse_] if lse_ is not None else [])
                out = _block_output(
                    q_,
                    k_,
                    v_,
                    bias_,
                    *(None if t is None else t[..., ks] for t in (mask4, drop4)),
                    lse_,
                    normalization,
                    activation,
                )
                grads = list(torch.autograd.grad(out, inputs, grad_out))
                grad_q += grads.pop(0)
                grad_k[:, ks] += grads.pop(0)
                grad_v[:, ks] += grads.pop(0)
                if want_bias:
                    grad_bias[..., ks] += grads.pop(0).sum_to_size(bias4[..., ks].shape)
                if lse_ is not None:
                    grad_lse += grads.pop(0)
        if lse is not None:
            # Softmax: lse depends on every score, d lse / d s = a. Add the row term gs = a * g_lse.
            with torch.enable_grad():
                q_ = q.detach().requires_grad_()
                for start in range(0, k_len, block):
                    ks = slice(start, start + block)
                    k_ = k[:, ks].detach().requires_grad_()
                    bias_ = None if bias4 is None else bias4[..., ks].detach().requires_grad_(want_bias)
                    s = raw_scores(q_, k_, bias_)
                    a = normalize(s.detach(), "softmax", None if mask4 is None else mask4[..., ks], lse)
                    inputs = [q_, k_] + ([bias_] if want_bias else [])
                    grads = list(torch.autograd.grad(s, inputs, a * grad_lse))
                    grad_q += grads.pop(0)
                    grad_k[:, ks] += grads.pop(0)
                    if want_bias:
                        grad_bias[..., ks] += grads.pop(0).sum_to_size(bias4[..., ks].shape)
        if want_bias:
            grad_bias = grad_bias.sum_to_size(as_4d(bias).shape).reshape(bias.shape)
        return grad_q, grad_k, grad_v, grad_bias, None, None, None, None, None


def hyla_streamed(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    normalization: str,
    activation: str = "relu",
    bias: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    dropout_mask: torch.Tensor | None = None,
    block: int | None = None,
) -> torch.Tensor:
    """HYLA (mlp value network) output [B, Tq, H, Dv], equal to the naive form, in bounded memory.

    `block`: keys per block; by default sized so one hidden block holds BLOCK_ELEMENTS floats.
    """
    if block is None:
        block = key_block_size(q.shape[0], q.shape[1], v.shape[-1])
    return _StreamedHyla.apply(q, k, v, bias, mask, dropout_mask, normalization, activation, block)
