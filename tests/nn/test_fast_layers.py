"""The training hot path's fast versions against their plain references, outputs and gradients:
compiled `gelu_tanh` vs F.gelu, and the model's last block computing only the read-out positions vs
every position; and the switches that turn each off (HYLA_GELU_SIGMOID, HYLA_QUERY_PRUNING). (The
attention implementations are tested against `attention_naive` in tests/ops/test_attention.py.)"""

import pytest
import torch
import torch.nn.functional as F
from helpers_train import tiny_model_config

from hyla.nn.feedforward import gelu_tanh
from hyla.nn.transformer import Transformer


def test_compiled_gelu_tanh_equals_the_tanh_approximation():
    x = torch.linspace(-12, 12, 2001, dtype=torch.float64, requires_grad=True)
    torch._dynamo.reset()
    out = torch.compile(gelu_tanh, fullgraph=True)(x)
    ref = F.gelu(x, approximate="tanh")
    torch.testing.assert_close(out, ref, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(
        torch.autograd.grad(out.sum(), x)[0], torch.autograd.grad(ref.sum(), x)[0], rtol=1e-10, atol=1e-12
    )
    torch.testing.assert_close(gelu_tanh(x), ref, rtol=0, atol=0)  # eager in float64: aten's kernel


@pytest.mark.parametrize("switch, traced, not_traced", [(None, torch.sigmoid, F.gelu), ("0", F.gelu, torch.sigmoid)])
def test_gelu_sigmoid_switch_keeps_atens_kernel_under_compile(set_switch, switch, traced, not_traced):
    """What torch.compile traces of `gelu_tanh`: x * sigmoid(2z), or with HYLA_GELU_SIGMOID=0 aten's gelu."""
    set_switch("HYLA_GELU_SIGMOID", switch)
    graphs = []

    def backend(graph_module, example_inputs):  # the graph dynamo traced, run as it is
        graphs.append(graph_module)
        return graph_module.forward

    torch._dynamo.reset()
    torch.compile(gelu_tanh, backend=backend, fullgraph=True)(torch.randn(5))
    [graph] = graphs
    called = {node.target for node in graph.graph.nodes if node.op == "call_function"}
    assert traced in called and not_traced not in called, called


@pytest.mark.parametrize("mixer", ["softmax", "linear", "hyla"])
@pytest.mark.parametrize("layers, length, outputs, causal", [(2, 16, 1, False), (3, 36, 4, False), (2, 12, 1, True)])
def test_last_block_computes_only_the_read_out_positions(mixer, layers, length, outputs, causal):
    torch.manual_seed(0)
    wide = dict(dim=32, qk_dim=16, v_dim=16, mlp_dim=64)
    cfg = tiny_model_config(
        **wide,
        num_layers=layers,
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


@pytest.mark.parametrize("switch, queries", [(None, 1), ("0", 16)])
def test_query_pruning_switch_makes_the_last_block_compute_every_position(set_switch, switch, queries):
    set_switch("HYLA_QUERY_PRUNING", switch)
    cfg = tiny_model_config(num_heads=2, mlp_dim=16, seq_len=16, input_dim=5)
    model = Transformer(cfg).eval()
    seen = []
    model.blocks[-1].attention.register_forward_hook(lambda module, args, out: seen.append(out.shape[1]))
    assert model(torch.randn(3, 16, 5)).shape == (3, 1, 1)
    assert seen == [queries]
