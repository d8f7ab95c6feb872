"""The private PyTorch operators are optional: nothing at import, the public fallback (forced with
HYLA_PUBLIC_OPS=1) gives the fast path's outputs and gradients, and registering the compiled
operator survives a reloaded module and another library using the `hyla` namespace."""

import subprocess
import sys
import textwrap

import pytest
import torch

from hyla.nn.linear import Linear
from hyla.nn.transformer import ModelConfig, Transformer
from hyla.ops import hyla_fused
from hyla.ops.torch_internals import PUBLIC_OPS_ENV, onednn_linear_available

needs_onednn = pytest.mark.skipif(not onednn_linear_available(), reason="this PyTorch has no oneDNN linear operator")


def _run_python(code: str) -> str:
    result = subprocess.run([sys.executable, "-c", textwrap.dedent(code)], capture_output=True, text=True, timeout=120)
    assert result.returncode == 0, result.stderr
    return result.stdout


@needs_onednn
def test_linear_public_fallback_equals_onednn(monkeypatch):
    torch.manual_seed(0)
    fast = Linear(37, 19)
    monkeypatch.setenv(PUBLIC_OPS_ENV, "1")
    public = Linear(37, 19)
    public.load_state_dict(fast.state_dict())
    assert fast.onednn and not public.onednn
    x, grad = torch.randn(3, 11, 37), torch.randn(3, 11, 19)
    outputs = []
    for layer in (fast, public):
        inp = x.clone().requires_grad_()
        out = layer(inp)
        out.backward(grad)
        outputs.append((out, inp.grad, layer.weight.grad, layer.bias.grad))
    for got, want in zip(*outputs):
        torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("normalization", ["softmax", "rms_head"])
def test_fused_hyla_public_fallback_equals_private_ops(monkeypatch, normalization):
    g = torch.Generator().manual_seed(1)
    q, k, v = (torch.randn(2, 13, 4, 3, generator=g, dtype=torch.float64, requires_grad=True) for _ in range(3))
    mask = torch.rand(1, 1, 13, 13, generator=g) > 0.2
    grad = torch.randn(2, 13, 4, 3, generator=g, dtype=torch.float64)

    def run():
        out = hyla_fused(q, k, v, normalization=normalization, activation="relu", mask=mask)
        return (out, *torch.autograd.grad(out, [q, k, v], grad))

    private = run()
    monkeypatch.setenv(PUBLIC_OPS_ENV, "1")
    public = run()
    for got, want in zip(public, private):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)


def test_model_public_fallback_equals_default(monkeypatch):
    cfg = ModelConfig(
        num_layers=2,
        dim=32,
        num_heads=4,
        qk_dim=16,
        v_dim=16,
        mlp_dim=64,
        mixer="hyla",
        seq_len=9,
        input_dim=5,
        output_dim=3,
        num_outputs=1,
    )
    torch.manual_seed(0)
    default = Transformer(cfg)
    monkeypatch.setenv(PUBLIC_OPS_ENV, "1")
    public = Transformer(cfg)
    public.load_state_dict(default.state_dict())
    x = torch.randn(4, 9, 5)
    results = []
    for model in (default, public):
        out = model(x)
        out.sum().backward()
        results.append([out] + [p.grad for p in model.parameters()])
    for got, want in zip(*results):
        torch.testing.assert_close(got, want, rtol=1e-4, atol=1e-5)


@needs_onednn
def test_import_is_inert_and_the_operator_survives_reload_reimport_and_a_foreign_hyla_namespace():
    out = _run_python("""
        import importlib, sys, torch
        other = torch.library.Library("hyla", "FRAGMENT")  # another library's op in the same namespace
        other.define("twice(Tensor x) -> Tensor")
        other.impl("twice", lambda x: 2 * x, "CPU")
        import hyla, hyla.nn.linear as linear
        from hyla.ops import torch_internals as ti
        probes = [f.cache_info().currsize for f in (ti._onednn_linear_works, ti._softmax_backward_works,
                                                     ti._threshold_backward_works)]
        print(hasattr(torch.ops.hyla, "onednn_matmul"), probes)  # import: nothing registered, nothing probed
        x, w = torch.randn(5, 3), torch.randn(4, 3)
        for _ in range(2):
            layer = linear.Linear(3, 4)
            assert torch.allclose(torch.ops.hyla.onednn_matmul(x, w, None), x @ w.t(), atol=1e-6)
            linear = importlib.reload(linear)
        for name in [m for m in sys.modules if m.startswith("hyla")]:
            del sys.modules[name]  # a second, independent import
        import hyla.nn.linear as linear
        layer = linear.Linear(3, 4)
        assert torch.allclose(torch.ops.hyla.onednn_matmul(x, w, None), x @ w.t(), atol=1e-6)
        print(torch.ops.hyla.twice(torch.ones(1)).item())
    """)
    assert out.split("\n")[:2] == ["False [0, 0, 0]", "2.0"]
