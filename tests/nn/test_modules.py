"""`hyla.nn`: MultiHeadAttention (every mixer, cross-attention, dropout, latents, kv cache,
causality), the T5 relative position bias, and the mixture of experts."""

import math

import pytest
import torch
from torch import nn
from torch.testing import assert_close

from hyla import MultiHeadAttention
from hyla.nn import MixtureOfExperts, RelativePositionBias
from hyla.nn.position import relative_position_bucket
from hyla.ops import NAMED_MIXERS, attention

ALL_NAMES = [name for hyla_name, (author_name, _) in NAMED_MIXERS.items() for name in (hyla_name, author_name)]

# --- 5. every named mixer builds and runs ------------------------------------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("name", ALL_NAMES)
def test_every_mixer_runs_forward_and_backward(name, dtype):
    mha = MultiHeadAttention(8, 4, name, qk_dim=8, v_dim=12, context_dim=6).to(dtype)
    x, context = torch.randn(2, 5, 8, dtype=dtype), torch.randn(2, 7, 6, dtype=dtype)
    mask = torch.rand(2, 1, 5, 7) > 0.3
    mask[:, :, 2] = False  # a fully masked query row
    y, latents = mha(x, context, mask=mask, return_latents=True)
    assert y.shape == (2, 5, 8) and latents.shape == (2, 4, 5, 7)
    assert y.dtype == latents.dtype == dtype
    assert torch.isfinite(y).all() and torch.isfinite(latents).all()
    assert (latents.masked_select(~mask) == 0).all()
    y.sum().backward()
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in mha.parameters())


# --- 4. causality ------------------------------------------------------------------------------------


@pytest.mark.parametrize("name", list(NAMED_MIXERS))
def test_causal_attention_ignores_later_tokens(name):
    mha = MultiHeadAttention(8, 2, name, causal=True).double()
    x = torch.randn(2, 9, 8, dtype=torch.float64)
    later = x.clone()
    later[:, 6:] += 10 * torch.randn(2, 3, 8, dtype=torch.float64)
    y, y_later = mha(x), mha(later)
    assert_close(y_later[:, :6], y[:, :6], rtol=0, atol=1e-12)
    assert not torch.allclose(y_later[:, 6:], y[:, 6:])


# --- 7. cross-attention, dropout, latent codes, kv cache --------------------------------------------


def test_cross_attention_attends_to_the_context():
    mha = MultiHeadAttention(8, 2, "hyla", context_dim=5, out_dim=3)
    x, context = torch.randn(2, 4, 8), torch.randn(2, 11, 5)
    y, latents = mha(x, context, return_latents=True)
    assert y.shape == (2, 4, 3) and latents.shape == (2, 2, 4, 11)
    other = context.clone()
    other[:, 0] += 1.0
    assert not torch.allclose(mha(x, other), y)


def readout_module(heads: int, k_len: int, dropout: float) -> MultiHeadAttention:
    """Softmax attention whose output shows the attention weights: with one-hot context tokens and
    identity value/output projections, y[b, q, h * Tk + k] = (a * dropout_mask)[b, h, q, k]."""
    mha = MultiHeadAttention(
        8,
        heads,
        "softmax",
        qk_dim=8,
        v_dim=heads * k_len,
        out_dim=heads * k_len,
        context_dim=k_len,
        dropout=dropout,
    )
    with torch.no_grad():
        mha.value.weight.copy_(torch.eye(k_len).repeat(heads, 1))
        mha.out.weight.copy_(torch.eye(heads * k_len))
        mha.value.bias.zero_()
        mha.out.bias.zero_()
    return mha


def test_attention_dropout_drops_whole_latent_codes():
    batch, heads, q_len, k_len, rate = 3, 4, 6, 8, 0.5
    mha = readout_module(heads, k_len, rate)
    x = torch.randn(batch, q_len, 8)
    context = torch.eye(k_len).expand(batch, k_len, k_len)
    y, latents = mha.train()(x, context, return_latents=True)
    weights = y.view(batch, q_len, heads, k_len).permute(0, 2, 1, 3)  # [B, H, Tq, Tk]
    assert (latents > 0).all()  # softmax: every zero weight is a dropout
    dropped = weights == 0
    # one [Tq, Tk] keep-mask shared by every batch element and head
    assert 0 < dropped.sum() < dropped.numel()
    assert (dropped == dropped[:1, :1]).all()
    assert_close(weights, latents * ~dropped / (1 - rate))
    # the latent codes themselves are returned without dropout
    assert_close(latents, mha.eval()(x, context, return_latents=True)[1])

    y_eval, latents_eval = mha.eval()(x, context, return_latents=True)
    assert_close(y_eval.view(batch, q_len, heads, k_len).permute(0, 2, 1, 3), latents_eval)


def test_dropout_masks_are_the_same_in_every_hyla_layer_and_on_every_device(monkeypatch):
    """The keep-masks that reach `attention`: MultiHeadAttention's and the transformers
    integration's are the same tensor for the same seed, and a mask for another device (here meta)
    is drawn from the CPU's generator: the CPU mask drawn next is the one drawn after a CPU mask."""
    from hyla.integrations import transformers as integration
    from hyla.nn import attention as nn_attention

    masks = []

    def capture(*args, dropout_mask=None, **kwargs):
        masks.append(dropout_mask)
        return attention(*args, dropout_mask=dropout_mask, **kwargs)

    monkeypatch.setattr(nn_attention, "attention", capture)
    monkeypatch.setattr(integration, "attention", capture)
    mha = MultiHeadAttention(8, 2, "hyla", dropout=0.5).train()
    x = torch.randn(3, 6, 8)
    torch.manual_seed(0)
    mha(x)
    torch.manual_seed(0)
    q = torch.randn(3, 2, 6, 4)
    torch.manual_seed(0)
    integration.hyla_attention_forward(mha, q, q, q, None, dropout=0.5, mixer="hyla")
    assert masks[0].shape == (6, 6) and 0 < (masks[0] == 0).sum() < 36
    assert torch.equal(masks[0], masks[1])
    torch.manual_seed(0)
    on_meta = q.to("meta")
    integration.hyla_attention_forward(mha, on_meta, on_meta, on_meta, None, dropout=0.5, mixer="hyla")
    assert masks[-1].device.type == "meta"
    next_cpu_draw = torch.rand(3)
    torch.manual_seed(0)
    mha(x)
    assert torch.equal(torch.rand(3), next_cpu_draw)  # the meta mask moved the CPU generator as a CPU mask does


@pytest.mark.parametrize("normalization", ["softmax", "none", "rms_head"])
def test_return_latents_gives_the_normalized_scores(normalization):
    mha = MultiHeadAttention(12, 3, "hyla", normalization=normalization, qk_dim=6)
    x = torch.randn(2, 5, 12)
    _, latents = mha(x, return_latents=True)
    q = mha.query(x).unflatten(-1, (3, 2))
    k = mha.key(x).unflatten(-1, (3, 2))
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(2)
    expected = {
        "softmax": s.softmax(-1),
        "none": s,
        "rms_head": s / torch.sqrt(s.pow(2).mean(1, keepdim=True) + 1e-6),
    }[normalization]
    assert_close(latents, expected)


@pytest.mark.parametrize("name", list(NAMED_MIXERS))
def test_kv_cache_decoding_equals_the_full_causal_forward(name):
    mha = MultiHeadAttention(8, 2, name, causal=True).double()
    x = torch.randn(2, 9, 8, dtype=torch.float64)
    bias = torch.randn(1, 2, 9, 9, dtype=torch.float64)
    full = mha(x, bias=bias)
    cache = {}
    steps = [mha(x[:, :4], bias=bias[:, :, :4, :4], kv_cache=cache)]  # prefill, then one token at a time
    for t in range(4, 9):
        steps.append(mha(x[:, t : t + 1], bias=bias[:, :, t : t + 1, : t + 1], kv_cache=cache))
    assert cache["k"].shape == (2, 9, 2, 4)
    assert_close(torch.cat(steps, dim=1), full, rtol=1e-12, atol=1e-12)


# --- 8. T5 relative position bias -------------------------------------------------------------------

# (key - query, bucket) computed by hand from the T5 formula: max_exact = num_buckets // 2 (halved
# first when bidirectional); d >= max_exact -> max_exact + int(log(d / max_exact) / log(max_distance
# / max_exact) * (num_buckets - max_exact)), at most num_buckets - 1.
ONE_DIRECTIONAL = [(0, 0), (-5, 5), (-15, 15), (-16, 16), (-20, 17), (-32, 21), (-64, 26), (-127, 31),
                   (-1000, 31), (3, 0), (50, 0)]  # fmt: skip
BIDIRECTIONAL = [(0, 0), (-3, 3), (3, 19), (-8, 8), (8, 24), (-16, 10), (16, 26), (-20, 10), (-128, 15),
                 (128, 31)]  # fmt: skip


@pytest.mark.parametrize("bidirectional, table", [(False, ONE_DIRECTIONAL), (True, BIDIRECTIONAL)])
def test_t5_buckets_match_hand_computed_values(bidirectional, table):
    relative = torch.tensor([r for r, _ in table])
    buckets = relative_position_bucket(relative, bidirectional, num_buckets=32, max_distance=128)
    assert buckets.tolist() == [b for _, b in table]


def test_paper_buckets_give_every_distance_its_own_bucket():
    """num_buckets = max_distance = seq_len: no two distances below seq_len share a bucket."""
    distance = torch.arange(16)
    assert relative_position_bucket(-distance, False, 16, 16).tolist() == distance.tolist()


def test_position_bias_one_directional_vs_bidirectional():
    one_way = RelativePositionBias(num_heads=2, max_len=8, bidirectional=False)
    both_ways = RelativePositionBias(num_heads=2, max_len=8, bidirectional=True)
    nn.init.normal_(one_way.table.weight)
    both_ways.table.weight.data.copy_(one_way.table.weight)
    bias = one_way(8, 8)
    assert bias.shape == (1, 2, 8, 8)
    query, key = torch.arange(8)[:, None], torch.arange(8)[None, :]
    # one-directional: every key after the query shares the bucket of distance 0 ...
    diagonal = bias.diagonal(dim1=-2, dim2=-1)[..., :, None].expand_as(bias)
    assert (bias == diagonal)[..., key >= query].all()
    # ... and keys before it look up the bucket of their distance
    assert (bias[0, :, 5, 2] == one_way.table.weight[3]).all()
    # bidirectional: keys after the query get buckets of their own, keys before keep theirs
    bias2 = both_ways(8, 8)
    assert not torch.equal(bias2[..., 0, 1], bias2[..., 0, 0])
    assert (bias2[0, :, 0, 1] == both_ways.table.weight[4 + 1]).all()


def test_position_bias_offset_gives_the_rows_of_later_queries():
    bias = RelativePositionBias(num_heads=3, max_len=10)
    nn.init.normal_(bias.table.weight)
    assert_close(bias(2, 7, offset=5), bias(7, 7)[:, :, 5:7])


def test_position_bias_longer_than_its_table_raises():
    with pytest.raises(ValueError, match="longer than the position table"):
        RelativePositionBias(num_heads=2, max_len=8)(9, 9)


# --- 9. mixture of experts ------------------------------------------------------------------------


def gate_readout_moe(num_experts: int, top_k: int, dim: int = 8) -> MixtureOfExperts:
    """Expert i outputs the unit vector e_i whatever its input, so the MoE output is the gate vector."""
    moe = MixtureOfExperts("gelu_mlp", dim, 16, num_experts, top_k)
    with torch.no_grad():
        for i, expert in enumerate(moe.experts):
            expert.down.weight.zero_()
            expert.down.bias.copy_(torch.eye(dim)[i])
    return moe


def test_moe_top_k_gates():
    moe = gate_readout_moe(num_experts=5, top_k=2)
    x = torch.randn(3, 7, 8)
    gates = moe(x)[..., :5]  # [B, T, E]
    assert ((gates > 0).sum(-1) == 2).all()
    assert_close(gates.sum(-1), torch.ones(3, 7))
    logits = moe.router(x)
    top = logits.topk(2, dim=-1)
    assert_close(gates.gather(-1, top.indices), top.values.softmax(-1))


def moe_per_token(moe: MixtureOfExperts, x: torch.Tensor) -> torch.Tensor:
    """The definition, one token at a time: the top_k experts by router logit, their outputs mixed
    by a softmax over those k logits."""
    tokens = x.reshape(-1, x.shape[-1])
    outputs = []
    for token in tokens:
        logits = token @ moe.router.weight.T  # [E]
        chosen = sorted(range(len(logits)), key=lambda e: -logits[e].item())[: moe.top_k]
        weights = torch.softmax(logits[chosen], dim=0)
        outputs.append(sum(w * moe.experts[e](token[None])[0] for w, e in zip(weights, chosen)))
    return torch.stack(outputs).reshape(x.shape)


@pytest.mark.parametrize("routed", [True, False], ids=["routed", "dense"])
@pytest.mark.parametrize("top_k", [1, 2, 4])
@pytest.mark.parametrize("kind", ["gelu_mlp", "swiglu"])
def test_moe_equals_a_per_token_loop_over_the_chosen_experts(kind, top_k, routed):
    """Outputs and gradients (input, router, every expert), float64, against `moe_per_token`, in
    both forms (each expert on its tokens; every expert on every token)."""
    torch.manual_seed(0)
    moe = MixtureOfExperts(kind, 8, 16, num_experts=5, top_k=top_k).double()
    moe.routed = routed
    x = torch.randn(2, 6, 8, dtype=torch.float64, requires_grad=True)
    routes = moe.router(x).topk(top_k, dim=-1).indices.sort(-1).values.reshape(-1, top_k)
    assert len(set(map(tuple, routes.tolist()))) > 1  # tokens take different routes, so routing is tested
    grad = torch.randn_like(x)
    results = []
    for forward in (moe, lambda x: moe_per_token(moe, x)):
        out = forward(x)
        # an expert no token chose gets no gradient from the loop: a zero, as from the dense form
        grads = torch.autograd.grad(out, [x, *moe.parameters()], grad, allow_unused=True, materialize_grads=True)
        results.append((out, *grads))
    names = ["output", "input"] + [name for name, _ in moe.named_parameters()]
    for name, got, want in zip(names, *results):
        assert_close(got, want, rtol=1e-10, atol=1e-12, msg=lambda m: f"{name}: {m}")


def test_compiled_routed_moe_equals_the_dense_form():
    """Under torch.compile the routed form (a graph break: data-dependent sizes) gives the dense
    form's outputs and gradients."""
    torch.manual_seed(0)
    moe = MixtureOfExperts("gelu_mlp", 16, 32, num_experts=5, top_k=2)
    x = torch.randn(4, 9, 16, requires_grad=True)
    results = []
    for routed, forward in ((True, torch.compile(moe)), (False, moe)):
        moe.routed = routed
        out = forward(x)
        results.append((out, *torch.autograd.grad(out.square().sum(), [x, *moe.parameters()])))
    for got, want in zip(*results):
        assert_close(got, want, rtol=1e-5, atol=1e-5)


def test_moe_rejects_top_k_above_the_expert_count():
    with pytest.raises(ValueError, match="num_experts=5"):
        MixtureOfExperts("gelu_mlp", 8, 16, num_experts=5, top_k=6)


# --- 6. errors -----------------------------------------------------------------------------------------


def test_unknown_mixer_name_lists_valid_names():
    with pytest.raises(ValueError, match=r"valid names.*hyla \(linear_hypatt\)"):
        MultiHeadAttention(8, 2, "hypatt")


def test_unknown_axis_on_the_module_lists_valid_choices():
    with pytest.raises(ValueError, match="relu, gelu, silu, sigmoid, tanh, identity"):
        MultiHeadAttention(8, 2, "hyla", activation="swish")
    with pytest.raises(ValueError, match="softmax, none, rms_head"):
        MultiHeadAttention(8, 2, None, normalization="l2", value_network="mlp")


@pytest.mark.parametrize("sizes", [dict(qk_dim=10), dict(v_dim=6)])
def test_sizes_must_divide_by_heads(sizes):
    with pytest.raises(ValueError, match="not divisible by num_heads=4"):
        MultiHeadAttention(8, 4, **sizes)


def test_wrong_input_width_raises():
    mha = MultiHeadAttention(8, 2, context_dim=5)
    with pytest.raises(ValueError, match=r"\[B, T, 8\]"):
        mha(torch.randn(2, 3, 7))
    with pytest.raises(ValueError, match="context"):
        mha(torch.randn(2, 3, 8), torch.randn(2, 4, 8))


def test_unknown_feedforward_lists_valid_choices():
    from hyla.nn import make_feedforward

    with pytest.raises(ValueError, match="gelu_mlp, swiglu"):
        make_feedforward("relu_mlp", 8, 16)
