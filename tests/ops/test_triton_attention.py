"""`hyla_triton` (the fused Triton HYLA kernels) against the float64 naive reference: outputs and
gradients of q, k, v and the bias; every activation x normalization none / rms_head; masks (random
and causal, with fully masked rows), relative-position-style bias, attention dropout, lengths that
are not multiples of the tiles, value chunks, float32 and bfloat16.

Where it runs: on CUDA when a GPU is present, otherwise on CPU tensors in Triton's interpreter
(`TRITON_INTERPRET=1`, set below before triton is first imported: the interpreter is chosen when
the kernels are defined). Skipped when triton is not installed (`pip install 'hyla[test]'`).

Tolerances, on max |actual - reference| / max(max |reference|, 1) per tensor:
- float32: 1e-4 (errors ~1e-7 in the interpreter; on the GPU the atomics add in any order).
- float32 after `torch.set_float32_matmul_precision("high")`: 5e-3 (TF32 products, 10-bit
  mantissa, on the GPU; the interpreter multiplies exactly).
- bfloat16 inputs: 3e-2 against the float64 reference computed from the same bfloat16 values.
  bfloat16 keeps 8 bits (relative rounding 4e-3), and the kernels round the latent codes and the
  hidden layer to bfloat16 before each product, as the naive form does in bfloat16.
"""

import json
import os
import subprocess
import sys

import pytest
import torch

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DEVICE = "cuda" if torch.cuda.is_available() else "cpu"
if DEVICE == "cpu":
    os.environ["TRITON_INTERPRET"] = "1"
pytest.importorskip("triton")

from hyla.ops import (  # noqa: E402
    attention,
    attention_naive,
    dispatch,
    kernels,  # noqa: E402
)
from hyla.ops.dispatch import choose_implementation, triton_by_default, triton_covers  # noqa: E402
from hyla.ops.kernels import triton_hyla  # noqa: E402
from hyla.ops.kernels.common import implementations_ran, reset_implementations_ran  # noqa: E402
from hyla.ops.mixers import ACTIVATIONS  # noqa: E402

if DEVICE == "cpu" and "Interpreted" not in type(triton_hyla._hyla_forward_kernel).__name__:
    pytest.skip("triton_hyla was imported before TRITON_INTERPRET=1 was set in this process", allow_module_level=True)

NORMALIZATIONS = ["none", "rms_head"]
FLOAT32_TOLERANCE = 1e-4
TF32_TOLERANCE = 5e-3
BFLOAT16_TOLERANCE = 3e-2


def make_case(batch=2, q_len=19, k_len=23, heads=3, k_dim=4, v_dim=20, *, causal=True, shared_bias=True, seed=0):
    """float64 CPU tensors: q, k, v, bias, a mask with one fully masked query row, a [Tq, Tk] dropout
    mask, and an output gradient. 19 and 23 are not multiples of the 16-wide tiles."""
    g = torch.Generator().manual_seed(seed)
    q = torch.randn(batch, q_len, heads, k_dim, generator=g, dtype=torch.float64)
    k = torch.randn(batch, k_len, heads, k_dim, generator=g, dtype=torch.float64)
    v = torch.randn(batch, k_len, heads, v_dim, generator=g, dtype=torch.float64)
    bias = torch.randn(1 if shared_bias else batch, heads, q_len, k_len, generator=g, dtype=torch.float64)
    mask = torch.rand(batch, 1, q_len, k_len, generator=g) > 0.3
    mask[:, :, q_len // 2] = False
    if causal:
        mask &= torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)
    dropout_mask = (torch.rand(q_len, k_len, generator=g) > 0.2).double() / 0.8
    grad_out = torch.randn(batch, q_len, heads, v_dim, generator=g, dtype=torch.float64)
    return dict(q=q, k=k, v=v, bias=bias, mask=mask, dropout_mask=dropout_mask), grad_out


def outputs_and_grads(fn, case, grad_out, dtype, device):
    """(out, grad q, grad k, grad v, grad bias) of fn on the case cast to dtype/device, as float64 CPU."""
    inputs = {name: t.to(device, dtype if t.is_floating_point() else t.dtype) for name, t in case.items()}
    leaves = [inputs[name].requires_grad_() for name in ("q", "k", "v", "bias")]
    out = fn(**inputs)
    grads = torch.autograd.grad(out, leaves, grad_out.to(device, dtype))
    return [t.detach().double().cpu() for t in (out, *grads)]


def naive(**kwargs):
    return lambda **t: attention_naive(**t, value_network="mlp", **kwargs)[0]


def fused(**kwargs):
    return lambda **t: triton_hyla.hyla_triton(**t, **kwargs)


def assert_matches(actual, expected, tolerance, what=""):
    names = ("out", "grad q", "grad k", "grad v", "grad bias")
    for name, a, e in zip(names, actual, expected):
        assert a.shape == e.shape, f"{what} {name}: shape {a.shape} != {e.shape}"
        assert torch.isfinite(a).all(), f"{what} {name}: not finite"
        error = (a - e).abs().max().item() / max(e.abs().max().item(), 1.0)
        assert error <= tolerance, f"{what} {name}: relative error {error:.2e} > {tolerance:.0e}"


@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_matches_naive_float32(normalization, activation):
    """Bias, causal + random mask, dropout, two query and two key tiles, two value chunks."""
    case, grad_out = make_case(seed=len(activation))
    kwargs = dict(normalization=normalization, activation=activation)
    expected = outputs_and_grads(naive(**kwargs), case, grad_out, torch.float64, "cpu")
    actual = outputs_and_grads(fused(**kwargs, tiles=[(16, 16, 16)]), case, grad_out, torch.float32, DEVICE)
    assert_matches(actual, expected, FLOAT32_TOLERANCE, f"{normalization} {activation}")


@pytest.mark.parametrize(
    "q_len, k_len, heads, shared_bias, causal",
    [(1, 37, 16, False, False), (37, 5, 8, True, False), (40, 40, 8, False, True)],
    ids=["one-query-16-heads", "few-keys", "per-batch-bias"],
)
def test_lengths_and_bias_layouts(q_len, k_len, heads, shared_bias, causal):
    """Cross-attention lengths, 16 heads (no head padding), a bias per batch element (stored, not
    added by atomics), 32-query tiles."""
    case, grad_out = make_case(q_len=q_len, k_len=k_len, heads=heads, v_dim=16, causal=causal, shared_bias=shared_bias)
    kwargs = dict(normalization="rms_head", activation="relu")
    expected = outputs_and_grads(naive(**kwargs), case, grad_out, torch.float64, "cpu")
    actual = outputs_and_grads(fused(**kwargs, tiles=[(32, 16, 16)]), case, grad_out, torch.float32, DEVICE)
    assert_matches(actual, expected, FLOAT32_TOLERANCE, f"Tq={q_len} Tk={k_len}")


def test_matches_naive_tf32():
    case, grad_out = make_case(heads=8, k_dim=16, v_dim=16)
    kwargs = dict(normalization="rms_head", activation="relu")
    expected = outputs_and_grads(naive(**kwargs), case, grad_out, torch.float64, "cpu")
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        actual = outputs_and_grads(fused(**kwargs), case, grad_out, torch.float32, DEVICE)
    finally:
        torch.set_float32_matmul_precision(previous)
    assert_matches(actual, expected, TF32_TOLERANCE)


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_matches_naive_bfloat16(normalization):
    case, grad_out = make_case(heads=8, k_dim=16, v_dim=16)
    case = {name: t.bfloat16().double() if t.is_floating_point() else t for name, t in case.items()}
    kwargs = dict(normalization=normalization, activation="gelu")
    expected = outputs_and_grads(naive(**kwargs), case, grad_out, torch.float64, "cpu")
    actual = outputs_and_grads(fused(**kwargs), case, grad_out, torch.bfloat16, DEVICE)
    assert_matches(actual, expected, BFLOAT16_TOLERANCE, normalization)


def test_per_head_dropout_and_bias_shapes():
    """A dropout mask per head [B, H, Tq, Tk], a 3-d bias [H, Tq, Tk], no mask."""
    case, grad_out = make_case(q_len=9, k_len=17, causal=False)
    case["bias"] = case["bias"][0]
    case["dropout_mask"] = (torch.rand(2, 3, 9, 17) > 0.2).double() / 0.8
    del case["mask"]
    kwargs = dict(normalization="rms_head", activation="silu")
    expected = outputs_and_grads(naive(**kwargs), case, grad_out, torch.float64, "cpu")
    actual = outputs_and_grads(fused(**kwargs), case, grad_out, torch.float32, DEVICE)
    assert_matches(actual, expected, FLOAT32_TOLERANCE)


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_fully_masked_rows_give_zeros_and_finite_grads(normalization):
    """Masked rows: output and query gradient exactly 0, every gradient finite, also for huge scores."""
    case, grad_out = make_case(q_len=6, k_len=9, causal=False)
    masked_rows = ~case["mask"].any(-1).squeeze(1)  # [B, Tq]
    assert masked_rows.any()
    case["q"], case["k"] = case["q"] * 1e3, case["k"] * 1e3
    out, grad_q, grad_k, grad_v, grad_bias = outputs_and_grads(
        fused(normalization=normalization, activation="relu"), case, grad_out, torch.float32, DEVICE
    )
    for t in (out, grad_q, grad_k, grad_v, grad_bias):
        assert torch.isfinite(t).all()
    assert (out[masked_rows] == 0).all() and (grad_q[masked_rows] == 0).all()


def test_attention_dispatch():
    """implementation="triton" in `hyla.ops.attention`, with the latent codes; clear errors otherwise."""
    case, _ = make_case(q_len=5, k_len=7, causal=False)
    case = {name: t.to(DEVICE, torch.float32) if t.is_floating_point() else t.to(DEVICE) for name, t in case.items()}
    axes = dict(normalization="rms_head", value_network="mlp", activation="relu")
    out, codes = attention(**case, **axes, implementation="triton", return_scores=True)
    expected_out, expected_codes = attention(**case, **axes, implementation="naive", return_scores=True)
    torch.testing.assert_close(out, expected_out, rtol=FLOAT32_TOLERANCE, atol=FLOAT32_TOLERANCE)
    torch.testing.assert_close(codes, expected_codes)
    with pytest.raises(ValueError, match="value_network='mlp'"):
        attention(**case, normalization="none", value_network="linear", implementation="triton")
    with pytest.raises(ValueError, match="'none' and 'rms_head'"):
        attention(**case, normalization="softmax", value_network="mlp", implementation="triton")
    with pytest.raises(ValueError, match="power of two"):
        triton_hyla.hyla_triton(case["q"], case["k"], case["v"], normalization="none", tiles=[(24, 16, 16)])
    with pytest.raises(TypeError, match="one dtype"):
        triton_hyla.hyla_triton(case["q"], case["k"].bfloat16(), case["v"], normalization="none")
    with pytest.raises(TypeError, match="float32, bfloat16"):
        attention(
            **{n: t.double() if t.is_floating_point() else t for n, t in case.items()}, **axes, implementation="triton"
        )


def test_auto_takes_triton_only_on_cuda():
    q = torch.randn(2, 5, 4, 8)
    assert triton_covers(q, q, "rms_head") and triton_covers(q, q, "none")
    assert not triton_covers(q, q, "softmax") and not triton_covers(q.double(), q, "rms_head")
    assert not triton_covers(q, torch.randn(2, 5, 4, 256), "rms_head")
    assert choose_implementation(q, q, 5, "mlp", dropout_mask=None, normalization="rms_head") != "triton"
    if DEVICE == "cuda":
        q = q.cuda()
        assert choose_implementation(q, q, 5, "mlp", dropout_mask=None, normalization="rms_head") == "naive"
        long = torch.randn(2, 4096, 4, 8, device="cuda")  # a hidden tensor of 268M elements: streamed or triton
        auto = choose_implementation(long, long, 4096, "mlp", dropout_mask=None, normalization="rms_head")
        assert auto == ("triton" if triton_by_default(q.device) else "streamed")
        assert choose_implementation(q, q, 5, "mlp", dropout_mask=None, normalization="softmax") != "triton"
        assert choose_implementation(q, q, 5, "linear", dropout_mask=None, normalization="rms_head") != "triton"


def test_custom_operator_registration():
    """Schema, fake (meta) implementation and autograd registration of the custom operators, which
    let torch.compile keep the kernels in a full graph."""
    case, _ = make_case(q_len=5, k_len=7, v_dim=4, causal=False)
    q, k, v, bias = (case[n].to(DEVICE, torch.float32).requires_grad_() for n in ("q", "k", "v", "bias"))
    args = (
        q,
        k,
        v,
        bias,
        case["mask"].to(DEVICE),
        case["dropout_mask"].to(DEVICE, torch.float32),
        "rms_head",
        "tanh",
        [16, 16, 16],
        4,
        1,
    )
    torch.library.opcheck(
        torch.ops.hyla.triton_hyla_forward.default,
        args,
        test_utils=("test_schema", "test_autograd_registration", "test_faketensor"),
    )


def test_compiles_in_a_full_graph():
    """torch.compile traces the dispatch and keeps the kernels as opaque custom operators (no graph
    break; aot_eager: AOTAutograd runs the registered backward, without inductor's compile time)."""
    case, grad_out = make_case(q_len=9, k_len=9, causal=False)
    del case["dropout_mask"]
    kwargs = dict(normalization="rms_head", value_network="mlp", activation="relu")
    compiled = torch.compile(
        lambda **t: attention(**t, **kwargs, implementation="triton"), fullgraph=True, backend="aot_eager"
    )
    expected = outputs_and_grads(lambda **t: attention_naive(**t, **kwargs)[0], case, grad_out, torch.float64, "cpu")
    actual = outputs_and_grads(compiled, case, grad_out, torch.float32, DEVICE)
    assert_matches(actual, expected, FLOAT32_TOLERANCE)


def test_importing_hyla_does_not_import_triton():
    code = (
        "import sys, torch, hyla; from hyla.ops import attention; q = torch.randn(1, 3, 2, 4); "
        "attention(q, q, q, normalization='rms_head', value_network='mlp'); "
        "assert 'triton' not in sys.modules, 'triton imported'"
    )
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    subprocess.run([sys.executable, "-c", code], check=True, env=env, cwd=ROOT)


COMPILE_FOR_GPUS = """
import json, sys, torch
sys.path.insert(0, "benchmarks")
from triton_compile import SHARED_MEMORY_PER_BLOCK, compile_kernels
out = []
for heads, dim in ((8, 64),):
    for dtype in (torch.float32, torch.bfloat16):
        q = torch.empty(2, 64, heads, dim, dtype=dtype, device="meta")
        pair = torch.empty(64, 64, device="meta")
        for arch in (80, 86, 89, 90):
            compiled = compile_kernels(q, q, q, normalization="rms_head", activation="gelu", bias=pair,
                                       mask=pair.bool(), dropout_mask=pair, arch=arch)
            out += [dict(heads=heads, dim=dim, dtype=str(dtype), arch=arch, kernel=name, tile=kernel.tile,
                         shared=kernel.metadata.shared, limit=SHARED_MEMORY_PER_BLOCK[arch])
                    for name, kernel in compiled.items()]
print(json.dumps(out))
"""


def test_kernels_fit_the_shared_memory_of_common_gpus():
    """The interpreter accepts code the compiler rejects: compile both kernels as a launch would
    (default tiles; no GPU needed; in a subprocess, where the kernels are not interpreted) for the
    A100 (sm_80), RTX 30 / A6000 (sm_86), RTX 40 / L4 / L40 (sm_89) and H100 (sm_90), float32 and
    bfloat16, at the benchmark's shape (H=8, Dk=Dv=64; the paper's heads are smaller), with a bias,
    a mask and a dropout mask: every kernel fits, the float32 backward on the 99 KiB GPUs included."""
    env = {key: value for key, value in os.environ.items() if key != "TRITON_INTERPRET"}
    result = subprocess.run(
        [sys.executable, "-c", COMPILE_FOR_GPUS],
        check=True,
        env=env,
        capture_output=True,
        text=True,
        cwd=ROOT,
    )
    rows = json.loads(result.stdout.strip().splitlines()[-1])
    assert len(rows) == 2 * 4 * 2
    for row in rows:
        assert row["shared"] <= row["limit"], row
    # the largest tile that fits is taken: a value chunk of 32 for bfloat16 wherever it fits
    assert {tuple(r["tile"]) for r in rows if r["dtype"] == "torch.bfloat16"} == {(16, 16, 32)}


def test_a_tile_too_large_for_the_gpu_gives_way_to_a_smaller_one(monkeypatch):
    """A launch that runs out of shared memory is retried with the next tile; the result is the
    same function."""
    from triton.runtime.errors import OutOfResources

    launched = []

    class SmallGpu:  # refuses value chunks of 32, as a 99 KiB GPU would a too large tile
        def __init__(self, kernel):
            self.kernel = kernel

        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                launched.append(kwargs["BD"])
                if kwargs["BD"] > 16:
                    raise OutOfResources(147456, 101376, "shared memory")
                return self.kernel[grid](*args, **kwargs)

            return launch

    for name in ("_hyla_forward_kernel", "_hyla_backward_kernel"):
        monkeypatch.setattr(triton_hyla, name, SmallGpu(getattr(triton_hyla, name)))
    case, grad_out = make_case(heads=4, v_dim=32)
    kwargs = dict(normalization="rms_head", activation="relu")
    expected = outputs_and_grads(naive(**kwargs), case, grad_out, torch.float64, "cpu")
    reset_implementations_ran()
    actual = outputs_and_grads(
        fused(**kwargs, tiles=[(16, 16, 32), (16, 16, 16)]), case, grad_out, torch.float32, DEVICE
    )
    assert_matches(actual, expected, FLOAT32_TOLERANCE)
    assert launched == [32, 16, 32, 16]  # forward, then backward
    outputs_and_grads(fused(**kwargs, tiles=[(16, 16, 32), (16, 16, 16)]), case, grad_out, torch.float32, DEVICE)
    assert launched[4:] == [16, 16]  # the tile too large is remembered
    assert implementations_ran() == []  # (no fallback to PyTorch)


@pytest.mark.parametrize("failure", ["launch", "import"])
def test_a_failing_kernel_falls_back_to_the_same_math(failure, monkeypatch):
    """A compile or launch failure (an unsupported GPU, an older Triton) warns once, with the
    reason, and the PyTorch form computes the same outputs and gradients; what ran is recorded."""

    class BrokenGpu:
        def __getitem__(self, grid):
            def launch(*args, **kwargs):
                raise RuntimeError("CUDA error: no kernel image is available for execution on the device")

            return launch

    if failure == "launch":
        for name in ("_hyla_forward_kernel", "_hyla_backward_kernel"):
            monkeypatch.setattr(triton_hyla, name, BrokenGpu())
        reason = "no kernel image"
    else:
        monkeypatch.setitem(sys.modules, "hyla.ops.kernels.triton_hyla", None)  # importing it raises
        monkeypatch.delattr(kernels, "triton_hyla")
        reason = "importing it failed"
    case, grad_out = make_case(q_len=9, k_len=11)
    kwargs = dict(normalization="rms_head", activation="relu", value_network="mlp")
    expected = outputs_and_grads(lambda **t: attention_naive(**t, **kwargs)[0], case, grad_out, torch.float64, "cpu")
    reset_implementations_ran()
    with pytest.warns(RuntimeWarning, match=reason) as warned:
        actual = outputs_and_grads(
            lambda **t: attention(**t, **kwargs, implementation="triton"), case, grad_out, torch.float32, DEVICE
        )
    assert len(warned) == 1  # once, though forward and backward both fell back
    assert_matches(actual, expected, FLOAT32_TOLERANCE)
    ran = implementations_ran()
    assert (
        ran[0] == "triton" and len(ran) == 2 and ran[1].startswith("triton fell back to PyTorch") and reason in ran[1]
    )


def test_deterministic_mode_uses_no_atomics(monkeypatch):
    """The backward kernel adds query gradients with atomics: in deterministic mode the gradients
    come from the PyTorch form instead, bit for bit the same on every call."""

    def no_atomics(*args, **kwargs):
        raise AssertionError("the atomic backward kernel ran in deterministic mode")

    monkeypatch.setattr(triton_hyla, "_launch_backward", no_atomics)
    case, grad_out = make_case(q_len=9, k_len=11)
    kwargs = dict(normalization="rms_head", activation="relu")
    expected = outputs_and_grads(naive(**kwargs), case, grad_out, torch.float64, "cpu")
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        with pytest.warns(RuntimeWarning, match="deterministic"):
            first = outputs_and_grads(fused(**kwargs), case, grad_out, torch.float32, DEVICE)
        second = outputs_and_grads(fused(**kwargs), case, grad_out, torch.float32, DEVICE)
    finally:
        torch.use_deterministic_algorithms(previous)
    assert_matches(first, expected, FLOAT32_TOLERANCE)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_auto_takes_triton_only_where_validated(monkeypatch, set_switch):
    """On CUDA, `auto` takes the kernels on architectures where the GPU suite passed
    (TRITON_VALIDATED), or with HYLA_TRITON=1; never with HYLA_TRITON=0 or in deterministic mode."""
    ops = dispatch
    device = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (8, 6))
    set_switch(ops.TRITON_ENV, None)
    monkeypatch.setattr(ops, "TRITON_VALIDATED", {})
    assert not ops.triton_by_default(device)
    set_switch(ops.TRITON_ENV, "1")
    assert ops.triton_by_default(device)
    set_switch(ops.TRITON_ENV, None)
    monkeypatch.setattr(ops, "TRITON_VALIDATED", {(8, 6): "a GPU, a date"})
    assert ops.triton_by_default(device)
    set_switch(ops.TRITON_ENV, "0")
    assert not ops.triton_by_default(device)
    set_switch(ops.TRITON_ENV, None)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert not ops.triton_by_default(device)
    finally:
        torch.use_deterministic_algorithms(previous)
