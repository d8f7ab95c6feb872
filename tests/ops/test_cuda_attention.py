"""On a CUDA device: every attention implementation, eager and compiled, against the float64 CPU
reference (outputs, latent codes and gradients)."""

import pytest
import torch

from hyla.ops import NAMED_MIXERS, attention, attention_naive

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def _case(dtype, device, B=3, Tq=16, Tk=16, H=8, Dk=4, Dv=2):
    g = torch.Generator().manual_seed(0)
    q, k, v = (torch.randn(B, T, H, D, generator=g, dtype=torch.float64) for T, D in ((Tq, Dk), (Tk, Dk), (Tk, Dv)))
    bias = torch.randn(1, H, Tq, Tk, generator=g, dtype=torch.float64)
    mask = torch.rand(B, 1, Tq, Tk, generator=g) > 0.2
    grad = torch.randn(B, Tq, H, Dv, generator=g, dtype=torch.float64)
    tensors = [t.to(device, dtype) for t in (q, k, v, bias, grad)]
    for t in tensors[:4]:
        t.requires_grad_(True)
    return (*tensors, mask.to(device))


def _run(fn, q, k, v, bias, grad, mask, **kwargs):
    """(output, latent codes, gradients of q, k, v, bias); `fn` returns (output, latent codes)."""
    out, latents = fn(q, k, v, bias=bias, mask=mask, **kwargs)
    return out, latents, torch.autograd.grad(out, [q, k, v, bias], grad)


@pytest.mark.parametrize("implementation", ["auto", "naive", "pointwise", "streamed"])
@pytest.mark.parametrize("name", list(NAMED_MIXERS))
def test_cuda_attention_matches_the_cpu_reference(name, implementation):
    mixer = NAMED_MIXERS[name][1]
    if implementation == "streamed" and mixer.value_network != "mlp":
        pytest.skip("streamed is the mlp value network's implementation")
    axes = dict(normalization=mixer.normalization, value_network=mixer.value_network, activation=mixer.activation)
    want = _run(attention_naive, *_case(torch.float64, "cpu"), **axes)
    got = _run(attention, *_case(torch.float32, "cuda"), implementation=implementation, return_scores=True, **axes)
    for g, w in zip([got[0], got[1], *got[2]], [want[0], want[1], *want[2]]):
        assert g.is_cuda
        torch.testing.assert_close(g.double().cpu(), w, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("implementation", ["auto", "pointwise"])
def test_cuda_compiled_hyla_matches_the_cpu_reference(implementation):
    """Compiled at a small size (auto: HYLA kept out of the graph, naive_eager)."""
    axes = dict(normalization="rms_head", value_network="mlp", activation="relu")
    want = _run(attention_naive, *_case(torch.float64, "cpu"), **axes)
    torch._dynamo.reset()
    cuda = _case(torch.float32, "cuda")
    got = _run(torch.compile(attention), *cuda, return_scores=True, implementation=implementation, **axes)
    for g, w in zip([got[0], got[1], *got[2]], [want[0], want[1], *want[2]]):
        torch.testing.assert_close(g.double().cpu(), w, rtol=2e-4, atol=2e-4)
