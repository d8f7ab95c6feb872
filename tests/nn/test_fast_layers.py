"""The training hot path's fast versions against their plain references, outputs and gradients:
`linear_group` vs its layers one by one (eager and compiled), compiled `gelu_tanh` vs F.gelu, and
the model's last block computing only the read-out positions vs every position. (The attention
implementations are tested against `attention_naive` in tests/ops/test_attention.py.)"""

import pytest
import torch
import torch.nn.functional as F
from torch import nn

from hyla.nn.feedforward import gelu_tanh
from hyla.nn.linear import linear_group
from hyla.nn.transformer import ModelConfig, Transformer


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64])
@pytest.mark.parametrize("bias", [True, False])
@pytest.mark.parametrize("compiled", [False, True])
def test_linear_group_equals_the_layers_one_by_one(dtype, bias, compiled):
    torch.manual_seed(0)
    layers = [nn.Linear(24, out, bias=bias).to(dtype) for out in (16, 16, 8)]
    x, grads = torch.randn(3, 5, 24, dtype=dtype), [torch.randn(3, 5, out, dtype=dtype) for out in (16, 16, 8)]
    group = linear_group
    if compiled:
        torch._dynamo.reset()
        group = torch.compile(linear_group, fullgraph=True)
    results = []
    for run in (lambda inp: [layer(inp) for layer in layers], lambda inp: group(inp, layers)):
        inp = x.clone().requires_grad_()
        outputs = run(inp)
        torch.autograd.backward(outputs, grads)
        results.append([*outputs, inp.grad, *(p.grad.clone() for layer in layers for p in layer.parameters())])
        for layer in layers:
            layer.zero_grad(set_to_none=True)
    tol = {"rtol": 1e-5, "atol": 1e-5} if dtype == torch.float32 else {"rtol": 1e-12, "atol": 1e-12}
    assert len(results[1]) == len(results[0]) == 4 + 3 * (1 + bias)
    for got, want in zip(results[1], results[0]):
        torch.testing.assert_close(got, want, **tol)


def test_linear_group_of_mixed_bias_and_of_one_layer():
    torch.manual_seed(0)
    layers, x = [nn.Linear(6, 4), nn.Linear(6, 3, bias=False)], torch.randn(2, 6)
    for got, layer in zip(linear_group(x, layers), layers):
        torch.testing.assert_close(got, layer(x))
    assert torch.equal(linear_group(x, layers[:1])[0], layers[0](x))


def test_compiled_gelu_tanh_equals_the_tanh_approximation():
    x = torch.linspace(-12, 12, 2001, dtype=torch.float64, requires_grad=True)
    torch._dynamo.reset()
    out = torch.compile(gelu_tanh, fullgraph=True)(x)
    ref = F.gelu(x, approximate="tanh")
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        torch.autograd.grad(out.sum(), x)[0], torch.autograd.grad(ref.sum(), x)[0], rtol=1e-10, atol=1e-12
    )
    torch.testing.assert_close(gelu_tanh(x), ref, rtol=0, atol=0)  # eager: aten's kernel


@pytest.mark.parametrize("mixer", ["softmax", "linear", "hyla"])
@pytest.mark.parametrize("layers, length, outputs, causal", [(2, 16, 1, False), (3, 36, 4, False), (2, 12, 1, True)])
def test_last_block_computes_only_the_read_out_positions(mixer, layers, length, outputs, causal):
    torch.manual_seed(0)
    cfg = ModelConfig(
        num_layers=layers,
        dim=32,
        num_heads=4,
        qk_dim=16,
        v_dim=16,
        mlp_dim=64,
        mixer=mixer,
        seq_len=length,
        input_dim=5,
        output_dim=3,
        num_outputs=outputs,
        causal=causal,
    )
    model = Transformer(cfg).eval()
    x = torch.randn(6, length, 5, requires_grad=True)
    pruned = model(x)  # the last block computes `outputs` queries only
    full, latents = model(x, return_latents=True)  # every position (latent codes need them all)
    assert pruned.shape == full.shape == (6, outputs, 3) and latents[-1].shape[-2] == length
    torch.testing.assert_close(pruned, full, rtol=1e-5, atol=1e-6)
    grad = torch.randn_like(pruned)
    torch.testing.assert_close(
        torch.autograd.grad(pruned, x, grad)[0], torch.autograd.grad(full, x, grad)[0], rtol=1e-4, atol=1e-5
    )
