"""On a CUDA device, compiled: HYLA against the float64 CPU reference (outputs, latent codes and
gradients). Every implementation eagerly on CUDA: test_attention.py's float32 comparison."""

import pytest
import torch
from helpers_ops import make_case, run

from hyla.ops import attention

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


def test_cuda_compiled_hyla_matches_the_cpu_reference():
    """Compiled at a small size (auto: HYLA kept out of the graph, naive_eager)."""
    axes = dict(normalization="rms_head", value_network="mlp", activation="relu")
    case = make_case(3, 16, 16, 8, 4, 2, dropout=None)
    expected = run("naive", case, **axes)
    torch._dynamo.reset()
    got = run("auto", case.to("cuda", torch.float32), function=torch.compile(attention), **axes)
    got.assert_close(expected, torch.float32, "compiled auto")
