"""`hyla.Transformer`: causality and kv-cache decoding for every mixer, parameter counts of the
paper presets, outputs, latents and configuration errors."""

import math

import pytest
import torch
from helpers_train import TINY_MODEL
from torch.testing import assert_close

from hyla import ModelConfig, Transformer
from hyla.ops import NAMED_MIXERS

SMALL = {**TINY_MODEL, "seq_len": 10}


def token_model(mixer: str, **overrides) -> Transformer:
    cfg = ModelConfig(**SMALL, mixer=mixer, vocab_size=13, causal=True, num_outputs=0)
    return Transformer(ModelConfig(**{**cfg.__dict__, **overrides})).double()


# --- 4. causality, 7. kv cache ------------------------------------------------------------------


@pytest.mark.parametrize("name", list(NAMED_MIXERS))
def test_causal_transformer_ignores_later_tokens(name):
    model = Transformer(ModelConfig(**SMALL, mixer=name, input_dim=3, output_dim=2, num_outputs=0, causal=True))
    model = model.double()
    x = torch.randn(2, 10, 3, dtype=torch.float64)
    later = x.clone()
    later[:, 6:] += 10 * torch.randn(2, 4, 3, dtype=torch.float64)
    y, y_later = model(x), model(later)
    assert y.shape == (2, 10, 2)
    assert_close(y_later[:, :6], y[:, :6], rtol=0, atol=1e-12)
    assert not torch.allclose(y_later[:, 6:], y[:, 6:])


@pytest.mark.parametrize("name", list(NAMED_MIXERS))
def test_kv_cache_decoding_equals_the_full_forward(name):
    model = token_model(name).eval()
    ids = torch.randint(0, 13, (2, 10))
    full = model(ids)
    assert full.shape == (2, 10, 13)
    caches = [{} for _ in range(SMALL["num_layers"])]
    steps = [model(ids[:, :3], kv_caches=caches)]  # prefill, then one token at a time
    steps += [model(ids[:, t : t + 1], kv_caches=caches) for t in range(3, 10)]
    assert_close(torch.cat(steps, dim=1), full, rtol=1e-10, atol=1e-10)


def test_kv_cache_cannot_grow_past_the_position_table():
    model = token_model("hyla")
    caches = [{} for _ in range(SMALL["num_layers"])]
    model(torch.randint(0, 13, (1, 10)), kv_caches=caches)
    with pytest.raises(ValueError, match="longer than the model's seq_len=10"):
        model(torch.randint(0, 13, (1, 1)), kv_caches=caches)


# --- outputs and latents ---------------------------------------------------------------------------


def test_continuous_model_reads_the_last_positions_and_returns_latents():
    model = Transformer(ModelConfig(**SMALL, mixer="hyla", input_dim=5, output_dim=8, num_outputs=4))
    x = torch.randn(3, 10, 5)
    logits, latents = model(x, return_latents=True)
    assert logits.shape == (3, 4, 8)
    assert len(latents) == 2 and all(a.shape == (3, 4, 10, 10) for a in latents)
    logits.sum().backward()
    assert all(torch.isfinite(p.grad).all() for p in model.parameters())


def test_token_model_ties_the_output_to_the_embedding():
    model = token_model("softmax").float()
    ids = torch.randint(0, 13, (2, 10))
    hidden = {}
    model.final_norm.register_forward_hook(lambda module, args, out: hidden.update(h=out))
    logits = model(ids)
    assert_close(logits, hidden["h"] @ model.embed.weight.T / math.sqrt(SMALL["dim"]))


@pytest.mark.parametrize("feedforward", ["gelu_mlp", "swiglu"])
def test_mixture_of_experts_model_trains(feedforward):
    model = Transformer(
        ModelConfig(**SMALL, mixer="hyla", input_dim=3, num_experts=5, experts_top_k=2, feedforward=feedforward)
    )
    moe_inputs = []  # what each block's mixture of experts routes
    hooks = [
        block.feedforward.register_forward_hook(lambda m, inputs, output: moe_inputs.append(inputs[0]))
        for block in model.blocks
    ]
    loss = model(torch.randn(2, 10, 3)).square().mean()
    loss.backward()
    for hook in hooks:
        hook.remove()
    assert all(p.grad is not None for p in model.parameters())
    for block, x in zip(model.blocks, moe_inputs):
        moe = block.feedforward
        routed = set(moe.router(x).topk(moe.top_k, dim=-1).indices.flatten().tolist())
        for index, expert in enumerate(moe.experts):
            learns = any(p.grad.abs().sum() > 0 for p in expert.parameters())
            assert learns == (index in routed), f"expert {index}: routed {index in routed}, gradient {learns}"


def test_paper_init_gives_zero_biases_and_fan_in_variance():
    model = Transformer(ModelConfig(dim=128, mlp_dim=256, input_dim=5))
    up = model.blocks[0].feedforward.up
    assert (up.bias == 0).all()
    assert up.weight.std().item() == pytest.approx(1 / math.sqrt(128), rel=0.05)
    assert up.weight.abs().max().item() <= 2 / math.sqrt(128) / 0.8796 + 1e-6  # truncated at 2 std


# --- 10. parameter counts of the paper presets ------------------------------------------------------


def count_by_hand(num_layers, dim, heads, qk_dim, v_dim, mlp_dim, input_dim, seq_len, output_dim) -> int:
    """Layer by layer, for gelu_mlp blocks with biased attention projections (as Flax's defaults)."""
    attention = (dim * qk_dim + qk_dim) * 2 + (dim * v_dim + v_dim) + (v_dim * dim + dim)  # q, k, v, out
    position = seq_len * heads  # one scalar per (bucket, head); num_buckets = seq_len
    feedforward = (dim * mlp_dim + mlp_dim) + (mlp_dim * dim + dim)
    layer_norms = 2 * (2 * dim)
    block = attention + position + feedforward + layer_norms
    embedding = input_dim * dim + dim
    head = dim * output_dim + output_dim
    return embedding + num_layers * block + 2 * dim + head


FUZZY_LOGIC = ModelConfig(
    num_layers=2,
    dim=128,
    num_heads=8,
    qk_dim=16,
    v_dim=16,
    mlp_dim=256,
    input_dim=5,
    seq_len=16,
    output_dim=1,
    num_outputs=1,
    mixer="hyla",
)
SRAVEN = ModelConfig(
    num_layers=4,
    dim=128,
    num_heads=16,
    qk_dim=64,
    v_dim=64,
    mlp_dim=256,
    input_dim=8,
    seq_len=36,
    output_dim=8,
    num_outputs=4,
    mixer="hyla",
)


def test_fuzzy_logic_parameter_count():
    expected = count_by_hand(2, 128, 8, 16, 16, 256, input_dim=5, seq_len=16, output_dim=1)
    assert expected == 151_009
    assert Transformer(FUZZY_LOGIC).num_parameters() == expected


@pytest.mark.parametrize("width, pinned", [(1, 402_824), (2, 1_592_072), (4, 6_329_864)])
def test_sraven_parameter_count(width, pinned):
    m = width
    expected = count_by_hand(4, 128 * m, 16 * m, 64 * m, 64 * m, 256 * m, input_dim=8, seq_len=36, output_dim=8)
    assert expected == pinned
    assert Transformer(SRAVEN.scaled(width)).num_parameters() == expected


@pytest.mark.parametrize("name", list(NAMED_MIXERS))
def test_hyla_adds_no_parameters(name):
    """Every mixer, HYLA included, has the parameters of softmax attention: same names, same shapes,
    the count layer by layer."""
    shapes = {
        mixer: {
            key: tuple(t.shape)
            for key, t in Transformer(ModelConfig(**{**FUZZY_LOGIC.__dict__, "mixer": mixer})).named_parameters()
        }
        for mixer in ("softmax", name)
    }
    assert shapes[name] == shapes["softmax"]
    assert sum(math.prod(shape) for shape in shapes[name].values()) == count_by_hand(
        2, 128, 8, 16, 16, 256, input_dim=5, seq_len=16, output_dim=1
    )


# --- 6. configuration errors ------------------------------------------------------------------------


def test_unknown_mixer_in_the_config_lists_valid_names():
    with pytest.raises(ValueError, match="valid names"):
        Transformer(ModelConfig(**SMALL, mixer="hypernet", input_dim=3))


def test_unknown_activation_in_the_config_lists_valid_choices():
    with pytest.raises(ValueError, match="relu, gelu"):
        Transformer(ModelConfig(**SMALL, mixer="hyla", activation="swish", input_dim=3))


def test_heads_must_divide_qk_dim():
    with pytest.raises(ValueError, match="qk_dim=8 is not divisible by num_heads=3"):
        Transformer(ModelConfig(**{**SMALL, "num_heads": 3, "v_dim": 9}, input_dim=3))


def test_sequence_longer_than_the_position_table_raises():
    model = Transformer(ModelConfig(**SMALL, input_dim=3))
    with pytest.raises(ValueError, match="seq_len=10"):
        model(torch.randn(1, 11, 3))


@pytest.mark.parametrize(
    "overrides, match",
    [
        (dict(), "exactly one of input_dim"),
        (dict(input_dim=3, vocab_size=7), "exactly one of input_dim"),
        (dict(input_dim=3, num_outputs=11), "num_outputs"),
    ],
)
def test_inconsistent_configs_raise(overrides, match):
    with pytest.raises(ValueError, match=match):
        Transformer(ModelConfig(**SMALL, **overrides))


def test_wrong_input_shapes_raise():
    with pytest.raises(ValueError, match=r"\[B, T, 3\]"):
        Transformer(ModelConfig(**SMALL, input_dim=3))(torch.randn(2, 5, 4))
    with pytest.raises(ValueError, match="token ids"):
        token_model("softmax")(torch.randn(2, 5))
