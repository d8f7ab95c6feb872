"""`hyla_triton` (the fused Triton HYLA kernels), beyond the comparison of every implementation with
the reference in test_attention.py (every activation x normalization none / rms_head, masks with
fully masked rows, a bias per head, dropout per head, lengths that are not multiples of the tiles,
two value chunks): tiles and bias layouts, TF32 and bfloat16, dispatch, the custom operators,
compiling, shared memory, fallbacks and deterministic mode.

Where it runs: on CUDA when a GPU is present, otherwise on CPU tensors in Triton's interpreter
(`TRITON_INTERPRET=1`, set below before triton is first imported: the interpreter is chosen when
the kernels are defined). Skipped when triton is not installed (`pip install 'hyla[test]'`).

Tolerances: tests/helpers_ops.py (TOLERANCES).
"""

import json
import os
import subprocess
import sys

import pytest
import torch
from helpers_ops import assert_all_close, make_case, outputs_and_grads

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

if DEVICE == "cpu" and "Interpreted" not in type(triton_hyla._hyla_forward_kernel).__name__:
    pytest.skip("triton_hyla was imported before TRITON_INTERPRET=1 was set in this process", allow_module_level=True)


def naive(**kwargs):
    return lambda q, k, v, **t: attention_naive(q, k, v, **t, value_network="mlp", **kwargs)[0]


def fused(**kwargs):
    return lambda q, k, v, **t: triton_hyla.hyla_triton(q, k, v, **t, **kwargs)


def through_attention(**kwargs):
    return lambda q, k, v, **t: attention(q, k, v, **t, **kwargs, value_network="mlp", implementation="triton")


def compare(fast, case, dtype=torch.float32, tolerance=None, what="", tiles=None, **kwargs):
    """`fast(**kwargs, tiles=tiles)` on the case in `dtype` on DEVICE against the float64 reference
    (the tolerance of `tolerance`, default `dtype`); returns its outputs and gradients."""
    expected = outputs_and_grads(naive(**kwargs), case)
    actual = outputs_and_grads(fast(**kwargs, **({"tiles": tiles} if tiles else {})), case.to(DEVICE, dtype))
    assert_all_close(actual, expected, tolerance or dtype, what)
    return actual


@pytest.mark.parametrize(
    "q_len, k_len, heads, shared_bias, causal",
    [(1, 37, 16, False, False), (37, 5, 8, True, False), (40, 40, 8, False, True)],
    ids=["one-query-16-heads", "few-keys", "per-batch-bias"],
)
def test_lengths_and_bias_layouts(q_len, k_len, heads, shared_bias, causal):
    """Cross-attention lengths, 16 heads (no head padding), a bias per batch element (stored, not
    added by atomics), 32-query tiles."""
    bias = "shared" if shared_bias else "per_example"
    case = make_case(2, q_len, k_len, heads, 4, 16, bias=bias, mask="causal" if causal else "random")
    kwargs = dict(normalization="rms_head", activation="relu")
    compare(fused, case, what=f"Tq={q_len} Tk={k_len}", tiles=[(32, 16, 16)], **kwargs)


def test_matches_naive_tf32():
    case = make_case(2, 19, 23, 8, 16, 16, mask="causal")
    kwargs = dict(normalization="rms_head", activation="relu")
    previous = torch.get_float32_matmul_precision()
    torch.set_float32_matmul_precision("high")
    try:
        compare(fused, case, tolerance="tf32", **kwargs)
    finally:
        torch.set_float32_matmul_precision(previous)


@pytest.mark.parametrize("normalization", ["none", "rms_head"])
def test_matches_naive_bfloat16(normalization):
    case = make_case(2, 19, 23, 8, 16, 16, mask="causal").to(dtype=torch.bfloat16).to(dtype=torch.float64)
    kwargs = dict(normalization=normalization, activation="gelu")
    compare(fused, case, torch.bfloat16, what=normalization, **kwargs)


def test_attention_refuses_what_the_kernels_do_not_take():
    """Clear errors (outputs and codes through `attention`: test_attention.py)."""
    case = make_case(2, 5, 7, 3, 4, 20).to(DEVICE, torch.float32)
    q, k, v = case.q, case.k, case.v
    with pytest.raises(ValueError, match="value_network='mlp'"):
        attention(q, k, v, normalization="none", value_network="linear", implementation="triton")
    with pytest.raises(ValueError, match="'none' and 'rms_head'"):
        attention(q, k, v, normalization="softmax", value_network="mlp", implementation="triton")
    with pytest.raises(ValueError, match="power of two"):
        triton_hyla.hyla_triton(q, k, v, normalization="none", tiles=[(24, 16, 16)])
    with pytest.raises(TypeError, match="one dtype"):
        triton_hyla.hyla_triton(q, k.bfloat16(), v, normalization="none")
    with pytest.raises(TypeError, match="float32, bfloat16"):
        attention(
            q.double(), k.double(), v.double(), normalization="none", value_network="mlp", implementation="triton"
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
    case = make_case(2, 5, 7, 3, 4, 4).to(DEVICE, torch.float32)
    q, k, v, bias = case.leaves()
    args = (
        q,
        k,
        v,
        bias,
        case.mask,
        case.dropout_mask,
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
    case = make_case(2, 9, 9, 3, 4, 20, dropout=None)
    kwargs = dict(normalization="rms_head", activation="relu")
    compare(lambda **kw: torch.compile(through_attention(**kw), fullgraph=True, backend="aot_eager"), case, **kwargs)


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
    case = make_case(2, 19, 23, 4, 4, 32, mask="causal")
    kwargs = dict(normalization="rms_head", activation="relu")
    reset_implementations_ran()
    compare(fused, case, **kwargs, tiles=[(16, 16, 32), (16, 16, 16)])
    assert launched == [32, 16, 32, 16]  # forward, then backward
    outputs_and_grads(fused(**kwargs, tiles=[(16, 16, 32), (16, 16, 16)]), case.to(DEVICE, torch.float32))
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
    case = make_case(2, 9, 11, 3, 4, 20, mask="causal")
    kwargs = dict(normalization="rms_head", activation="relu")
    reset_implementations_ran()
    with pytest.warns(RuntimeWarning, match=reason) as warned:
        compare(through_attention, case, **kwargs)
    assert len(warned) == 1  # once, though forward and backward both fell back
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
    case = make_case(2, 9, 11, 3, 4, 20, mask="causal")
    kwargs = dict(normalization="rms_head", activation="relu")
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        with pytest.warns(RuntimeWarning, match="deterministic"):
            first = compare(fused, case, **kwargs)
        second = outputs_and_grads(fused(**kwargs), case.to(DEVICE, torch.float32))
    finally:
        torch.use_deterministic_algorithms(previous)
    assert all(torch.equal(a, b) for a, b in zip(first, second))


def test_auto_takes_triton_only_where_validated(monkeypatch, set_switch):
    """On CUDA, `auto` takes the kernels on architectures where the GPU suite passed
    (TRITON_VALIDATED), or with HYLA_TRITON=1; never with HYLA_TRITON=0 or in deterministic mode."""
    ops = dispatch
    device = torch.device("cuda", 0)
    monkeypatch.setattr(torch.cuda, "get_device_capability", lambda index=None: (8, 6))
    set_switch("HYLA_TRITON", None)
    monkeypatch.setattr(ops, "TRITON_VALIDATED", {})
    assert not ops.triton_by_default(device)
    set_switch("HYLA_TRITON", "1")
    assert ops.triton_by_default(device)
    set_switch("HYLA_TRITON", None)
    monkeypatch.setattr(ops, "TRITON_VALIDATED", {(8, 6): "a GPU, a date"})
    assert ops.triton_by_default(device)
    set_switch("HYLA_TRITON", "0")
    triton = next(backend for backend in ops.BACKENDS if backend.name == "triton")
    assert triton.switch == "triton" and triton.rejects(None) == "turned off by HYLA_TRITON=0"
    set_switch("HYLA_TRITON", None)
    previous = torch.are_deterministic_algorithms_enabled()
    torch.use_deterministic_algorithms(True)
    try:
        assert not ops.triton_by_default(device)
    finally:
        torch.use_deterministic_algorithms(previous)
