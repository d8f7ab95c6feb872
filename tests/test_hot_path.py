"""The training hot path's fast versions against their plain references, outputs and gradients:
`hyla_fused` and `attention_pointwise` vs `attention_naive`, oneDNN `Linear` vs nn.Linear (eager
and compiled), compiled `gelu_tanh` vs F.gelu, and the model's last block computing only the
read-out positions vs every position."""

import itertools

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hyla.model import ModelConfig, Transformer
from hyla.nn.feedforward import gelu_tanh
from hyla.nn.linear import Linear
from hyla.ops import attention, attention_naive, attention_pointwise, hyla_fused

SHAPES = [(2, 15, 15, 4, 3, 5), (3, 7, 37, 2, 4, 2), (1, 16, 16, 8, 2, 2)]  # B, Tq, Tk, H, Dk, Dv


def _inputs(shape, dtype, bias, mask, dropout):
    B, Tq, Tk, H, Dk, Dv = shape
    g = torch.Generator().manual_seed(sum(shape))
    q, k, v = (torch.randn(B, T, H, D, generator=g, dtype=dtype, requires_grad=True)
               for T, D in ((Tq, Dk), (Tk, Dk), (Tk, Dv)))
    b = torch.randn(1, H, Tq, Tk, generator=g, dtype=dtype, requires_grad=True) if bias else None
    m = None
    if mask:
        m = torch.rand(B, 1, Tq, Tk, generator=g) > 0.3
        m[0, 0, 0] = False  # a fully masked query row
    d = torch.bernoulli(torch.full((Tq, Tk), 0.8, dtype=dtype), generator=g) / 0.8 if dropout else None
    grad = torch.randn(B, Tq, H, Dv, generator=g, dtype=dtype)
    return q, k, v, b, m, d, grad


@pytest.mark.parametrize("normalization, activation", list(itertools.product(
    ["softmax", "none", "rms_head"], ["relu", "gelu", "identity", "tanh", "silu", "sigmoid"])))
@pytest.mark.parametrize("shape", SHAPES)
def test_fused_hyla_equals_naive_float64(normalization, activation, shape):
    for bias, mask, dropout in itertools.product([False, True], repeat=3):
        q, k, v, b, m, d, grad = _inputs(shape, torch.float64, bias, mask, dropout)
        leaves = [q, k, v] + ([b] if bias else [])
        kwargs = dict(normalization=normalization, activation=activation, bias=b, mask=m, dropout_mask=d)
        ref, _ = attention_naive(q, k, v, value_network="mlp", **kwargs)
        out = hyla_fused(q, k, v, **kwargs)
        torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
        for got, want in zip(torch.autograd.grad(out, leaves, grad), torch.autograd.grad(ref, leaves, grad)):
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)


def test_fused_hyla_float32_and_dispatch():
    q, k, v, b, m, d, grad = _inputs((4, 36, 36, 16, 4, 4), torch.float32, True, False, True)
    kwargs = dict(normalization="rms_head", value_network="mlp", bias=b, dropout_mask=d)
    ref, _ = attention_naive(q, k, v, **kwargs)
    auto = attention(q, k, v, **kwargs)  # CPU + mlp: the fused implementation
    torch.testing.assert_close(auto, ref, rtol=1e-4, atol=1e-5)
    torch.testing.assert_close(auto, attention(q, k, v, implementation="fused", **kwargs), rtol=0, atol=0)
    g_auto = torch.autograd.grad(auto, [q, k, v, b], grad)
    g_ref = torch.autograd.grad(ref, [q, k, v, b], grad)
    for got, want in zip(g_auto, g_ref):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)
    out, latents = attention(q, k, v, return_scores=True, **kwargs)
    torch.testing.assert_close(latents, attention_naive(q, k, v, **kwargs)[1])
    with pytest.raises(ValueError, match="mlp"):
        attention(q, k, v, normalization="softmax", value_network="linear", implementation="fused")
    with pytest.raises(ValueError, match="shared by all heads"):
        hyla_fused(q, k, v, normalization="none", dropout_mask=torch.ones(1, 16, 36, 36))


@pytest.mark.parametrize("value_network, normalization, activation", [("linear", n, "relu") for n in (
    "softmax", "none", "rms_head")] + list(itertools.product(["mlp"], ["softmax", "none", "rms_head"], ["relu", "gelu", "tanh"])))
@pytest.mark.parametrize("shape", SHAPES)
def test_pointwise_equals_naive_float64(value_network, normalization, activation, shape):
    for bias, mask, dropout in itertools.product([False, True], repeat=3):
        q, k, v, b, m, d, grad = _inputs(shape, torch.float64, bias, mask, dropout)
        leaves = [q, k, v] + ([b] if bias else [])
        kwargs = dict(normalization=normalization, value_network=value_network, activation=activation, bias=b,
                      mask=m, dropout_mask=d)
        ref, ref_codes = attention_naive(q, k, v, **kwargs)
        out, codes = attention_pointwise(q, k, v, **kwargs)
        torch.testing.assert_close(out, ref, rtol=1e-10, atol=1e-12)
        torch.testing.assert_close(codes, ref_codes, rtol=0, atol=0)
        for got, want in zip(torch.autograd.grad(out, leaves, grad), torch.autograd.grad(ref, leaves, grad)):
            torch.testing.assert_close(got, want, rtol=1e-9, atol=1e-11)


@pytest.mark.parametrize("value_network", ["linear", "mlp"])
def test_compiled_auto_takes_the_pointwise_form(value_network):
    """Under torch.compile `auto` picks the pointwise form for small heads and still matches the reference."""
    from torch._inductor import config as inductor_config

    q, k, v, b, _, d, grad = _inputs((3, 16, 16, 8, 2, 2), torch.float32, True, False, True)
    kwargs = dict(normalization="rms_head", value_network=value_network, bias=b, dropout_mask=d)
    chosen = []

    def run(q, k, v):
        from hyla.ops.attention import choose_implementation

        chosen.append(choose_implementation(q, v, k.shape[1], value_network, False, d))
        return attention(q, k, v, **kwargs)

    torch._dynamo.reset()
    with inductor_config.patch({"cpp.enable_loop_tail_vec": False}):
        out = torch.compile(run, fullgraph=True)(q, k, v)
        grads = torch.autograd.grad(out, [q, k, v, b], grad)
    assert chosen == ["pointwise"]
    ref, _ = attention_naive(q, k, v, **kwargs)
    torch.testing.assert_close(out, ref, rtol=1e-4, atol=1e-5)
    for got, want in zip(grads, torch.autograd.grad(ref, [q, k, v, b], grad)):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("shape, features", [((128, 16, 128), (128, 256)), ((7, 5), (5, 3)), ((3, 4, 37), (37, 1))])
@pytest.mark.parametrize("bias", [True, False])
def test_onednn_linear_matches_nn_linear(shape, features, bias):
    torch.manual_seed(0)
    ref, fast = nn.Linear(*features, bias=bias), Linear(*features, bias=bias)
    fast.load_state_dict(ref.state_dict())
    x = torch.randn(*shape)
    sliced = torch.randn(shape[0], 3, shape[-1])[:, -1:]  # non-contiguous input (a read-out slice)
    for inp in (x, sliced):
        a, b = inp.clone().requires_grad_(), inp.clone().requires_grad_()
        grad = torch.randn(*inp.shape[:-1], features[1])
        ya, yb = ref(a), fast(b)
        torch.testing.assert_close(yb, ya, rtol=1e-5, atol=1e-5)
        ya.backward(grad)
        yb.backward(grad)
        torch.testing.assert_close(b.grad, a.grad, rtol=1e-5, atol=1e-5)
        torch.testing.assert_close(fast.weight.grad, ref.weight.grad, rtol=1e-4, atol=1e-4)
        if bias:
            torch.testing.assert_close(fast.bias.grad, ref.bias.grad, rtol=1e-5, atol=1e-5)
        ref.zero_grad()
        fast.zero_grad()
    assert isinstance(fast, nn.Linear) and fast.state_dict().keys() == ref.state_dict().keys()


@pytest.mark.parametrize("features", [(128, 256), (256, 128), (5, 128), (128, 16)])  # both weight-grad orientations
def test_compiled_onednn_linear_matches_nn_linear(features):
    torch.manual_seed(0)
    ref, fast = nn.Linear(*features), Linear(*features)
    fast.load_state_dict(ref.state_dict())
    x, grad = torch.randn(4, 33, features[0]), torch.randn(4, 33, features[1])
    torch._dynamo.reset()
    compiled = torch.compile(fast, fullgraph=True)
    input_grads = []
    for module in (ref, compiled):
        inp = x.clone().requires_grad_()
        module(inp).backward(grad)
        input_grads.append(inp.grad)
    torch.testing.assert_close(input_grads[1], input_grads[0], rtol=1e-5, atol=1e-5)
    torch.testing.assert_close(fast.weight.grad, ref.weight.grad, rtol=1e-4, atol=1e-4)
    torch.testing.assert_close(fast.bias.grad, ref.bias.grad, rtol=1e-5, atol=1e-5)


def test_compiled_gelu_tanh_equals_the_tanh_approximation():
    x = torch.linspace(-12, 12, 2001, dtype=torch.float64, requires_grad=True)
    torch._dynamo.reset()
    out = torch.compile(gelu_tanh, fullgraph=True)(x)
    ref = F.gelu(x, approximate="tanh")
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(torch.autograd.grad(out.sum(), x)[0], torch.autograd.grad(ref.sum(), x)[0],
                               rtol=1e-10, atol=1e-12)
    torch.testing.assert_close(gelu_tanh(x), ref, rtol=0, atol=0)  # eager: aten's kernel


@pytest.mark.parametrize("mixer", ["softmax", "linear", "hyla"])
@pytest.mark.parametrize("layers, length, outputs, causal", [(2, 16, 1, False), (3, 36, 4, False), (2, 12, 1, True)])
def test_last_block_computes_only_the_read_out_positions(mixer, layers, length, outputs, causal):
    torch.manual_seed(0)
    cfg = ModelConfig(num_layers=layers, dim=32, num_heads=4, qk_dim=16, v_dim=16, mlp_dim=64, mixer=mixer,
                      seq_len=length, input_dim=5, output_dim=3, num_outputs=outputs, causal=causal)
    model = Transformer(cfg).eval()
    x = torch.randn(6, length, 5, requires_grad=True)
    pruned = model(x)  # the last block computes `outputs` queries only
    full, latents = model(x, return_latents=True)  # every position (latent codes need them all)
    assert pruned.shape == full.shape == (6, outputs, 3) and latents[-1].shape[-2] == length
    torch.testing.assert_close(pruned, full, rtol=1e-5, atol=1e-6)
    grad = torch.randn_like(pruned)
    # (with return_latents the attention runs the naive form, so this also compares it with the fused one)
    torch.testing.assert_close(torch.autograd.grad(pruned, x, grad)[0], torch.autograd.grad(full, x, grad)[0],
                               rtol=1e-4, atol=1e-5)
