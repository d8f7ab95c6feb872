"""The paper's hypernetwork view, checked numerically in float64 on a `MultiHeadAttention` module.

Projection biases fold into the per-pair matrices by augmenting every key-side input with a
constant 1: x~_k = [x_k; 1] and Wval~_h = [Wval_h | bval_h]. Then v_kh = Wval~_h x~_k, and

- linear value network (Eq. 4-5):  out_q = sum_k W_qk x~_k + b_out,
      W_qk = sum_h a_hqk Wout_h Wval~_h
- HYLA (Eq. 6):                     out_q = sum_k W'_qk phi(W_qk x~_k) + b_out,
      W_qk = sum_h a_hqk Wval~_h,   W'_qk = sum_h a_hqk Wout_h

so the value bias becomes a bias of the GENERATED first layer (sum_h a_hqk bval_h, weighted by the
latent code), while the output bias is added once, outside the sum over keys. With zero biases
the identities are the paper's equations verbatim; both cases are tested.
"""

import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from hyla import MultiHeadAttention
from hyla.ops import NAMED_MIXERS
from hyla.ops.kernels.naive import ACTIVATION_FNS

B, TQ, TK, D, H, DK, DV, D_OUT = 2, 5, 6, 7, 3, 2, 4, 5


def module(name: str, biases: bool, causal: bool = False) -> MultiHeadAttention:
    mha = MultiHeadAttention(
        D, H, name, qk_dim=H * DK, v_dim=H * DV, out_dim=D_OUT, context_dim=D + 1, causal=causal
    ).double()
    for layer in (mha.query, mha.key, mha.value, mha.out):
        nn.init.normal_(layer.bias) if biases else nn.init.zeros_(layer.bias)
    return mha


def latent_codes_by_hand(mha: MultiHeadAttention, x, context, mask) -> torch.Tensor:
    """a [B, H, Tq, Tk] written out from the module's weights and docs/math.md."""
    q = (x @ mha.query.weight.T + mha.query.bias).unflatten(-1, (H, DK))
    k = (context @ mha.key.weight.T + mha.key.bias).unflatten(-1, (H, DK))
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(DK)
    if mha.mixer.normalization == "softmax":
        return s.masked_fill(~mask, -math.inf).softmax(-1)
    a = s * mask
    if mha.mixer.normalization == "rms_head":
        a = a / torch.sqrt(a.pow(2).mean(dim=1, keepdim=True) + 1e-6)
    return a


def per_head_weights(mha: MultiHeadAttention):
    """Wval~_h [H, Dv, D+1] (value bias as the last column) and Wout_h [H, D_out, Dv]."""
    w_val = mha.value.weight.view(H, DV, -1)
    w_val = torch.cat([w_val, mha.value.bias.view(H, DV, 1)], dim=-1)
    w_out = mha.out.weight.view(D_OUT, H, DV).transpose(0, 1)
    return w_val, w_out


def inputs(causal: bool):
    x = torch.randn(B, TQ, D, dtype=torch.float64)
    context = torch.randn(B, TK, D + 1, dtype=torch.float64)
    mask = torch.ones(TQ, TK, dtype=torch.bool).tril(TK - TQ) if causal else torch.ones(TQ, TK, dtype=torch.bool)
    return x, context, mask


LINEAR_MIXERS = [n for n, (_, m) in NAMED_MIXERS.items() if m.value_network == "linear"]
MLP_MIXERS = [n for n, (_, m) in NAMED_MIXERS.items() if m.value_network == "mlp"]


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("biases", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("name", LINEAR_MIXERS)
def test_multihead_attention_is_a_linear_hypernetwork(name, biases, causal):
    mha = module(name, biases, causal)
    x, context, mask = inputs(causal)
    out, latents = mha(x, context, return_latents=True)
    a = latent_codes_by_hand(mha, x, context, mask)
    assert_close(latents, a, rtol=1e-12, atol=1e-12)

    w_val, w_out = per_head_weights(mha)
    x_aug = torch.cat([context, torch.ones(B, TK, 1, dtype=torch.float64)], dim=-1)  # x~_k
    w_pair = torch.einsum("bhqk,hoe,hed->bqkod", a, w_out, w_val)  # W_qk [B, Tq, Tk, D_out, D+1]
    expected = torch.einsum("bqkod,bkd->bqo", w_pair, x_aug) + mha.out.bias
    assert_close(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("biases", [False, True], ids=["no_bias", "bias"])
@pytest.mark.parametrize("name", MLP_MIXERS)
def test_hyla_generates_a_two_layer_value_network(name, biases, causal):
    mha = module(name, biases, causal)
    x, context, mask = inputs(causal)
    out, latents = mha(x, context, return_latents=True)
    a = latent_codes_by_hand(mha, x, context, mask)
    assert_close(latents, a, rtol=1e-12, atol=1e-12)

    w_val, w_out = per_head_weights(mha)
    x_aug = torch.cat([context, torch.ones(B, TK, 1, dtype=torch.float64)], dim=-1)
    first = torch.einsum("bhqk,hed->bqked", a, w_val)  # W_qk  [B, Tq, Tk, Dv, D+1]
    second = torch.einsum("bhqk,hoe->bqkoe", a, w_out)  # W'_qk [B, Tq, Tk, D_out, Dv]
    hidden = ACTIVATION_FNS[mha.mixer.activation](torch.einsum("bqked,bkd->bqke", first, x_aug))
    expected = torch.einsum("bqkoe,bqke->bqo", second, hidden) + mha.out.bias
    assert_close(out, expected, rtol=1e-12, atol=1e-12)


@pytest.mark.parametrize("name, power", [("linear", 1), ("hyla_identity_no_rms_head", 2)])
def test_hyla_without_nonlinearity_is_quadratic_in_the_latent_code(name, power):
    """HYLA - nonlinearity is NOT linear attention: scaling every latent code by c scales the
    output by c^2 (the code generates both layers), where standard attention scales by c."""
    mha = module(name, biases=False)
    x, context, _ = inputs(False)
    out = mha(x, context)
    with torch.no_grad():
        mha.query.weight.mul_(3.0)  # a = s (no normalization) scales by 3
    assert_close(mha(x, context), 3.0**power * out, rtol=1e-12, atol=1e-12)
