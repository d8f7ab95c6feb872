"""`hyla.ops.attention`: the authors' reference outputs; every implementation equal to the naive
reference on outputs, latent codes and gradients (tests/helpers_ops.py: the cases, tolerances and
the list of implementations); what `auto` picks; masks, extreme scores, dtypes and input errors."""

import dataclasses
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers_ops import (
    CASES,
    CUDA,
    FAST,
    IMPLEMENTATIONS,
    SRAVEN,
    Case,
    assert_close,
    axes_of,
    implementations_and_axes,
    make_case,
    needs_cuda,
    run,
    why_not,
)

from hyla.ops import NAMED_MIXERS, attention, attention_naive, dispatch, hyla_streamed
from hyla.ops.dispatch import choose_implementation
from hyla.ops.kernels import cpp
from hyla.ops.kernels import naive as naive_module
from hyla.ops.kernels.common import implementations_ran, reset_implementations_ran
from hyla.ops.mixers import NORMALIZATIONS

FIXTURE = Path(__file__).parents[1] / "fixtures" / "attention_reference.npz"


def spy_on_backends(monkeypatch, calls: list) -> None:
    """Make every backend of `auto` append its name to `calls` when it runs."""

    def spied(backend):
        return dataclasses.replace(backend, run=lambda *a, **kw: calls.append(backend.name) or backend.run(*a, **kw))

    monkeypatch.setattr(dispatch, "BACKENDS", [spied(backend) for backend in dispatch.BACKENDS])


def grads(out: torch.Tensor, case, leaves: list[torch.Tensor]) -> list[torch.Tensor]:
    return list(torch.autograd.grad(out, leaves, case.grad_out))


# --- 1. the authors' reference implementation ----------------------------------------------------


@pytest.fixture(scope="module")
def reference():
    with np.load(FIXTURE) as f:
        return {key: torch.from_numpy(f[key]) for key in f.files}


@pytest.mark.parametrize("variant", ["plain", "bias_causal"])
@pytest.mark.parametrize("name", list(NAMED_MIXERS))
def test_matches_authors_reference(reference, name, variant):
    extras = {} if variant == "plain" else dict(bias=reference["bias"], mask=reference["causal_mask"])
    expected = reference[f"{name}__{variant}"]
    q, k, v = reference["q"], reference["k"], reference["v"]
    ran = []
    for implementation in IMPLEMENTATIONS:
        if why_not(implementation, Case(q, k, v, **extras), **axes_of(name)):
            continue
        out = attention(q, k, v, **axes_of(name), **extras, implementation=implementation)
        assert_close(out, expected, torch.float32, f"{name} {implementation}")
        ran.append(implementation)
    assert "naive" in ran


def test_authors_names_give_the_same_mixers():
    from hyla.ops import resolve_mixer

    for name, (author_name, mixer) in NAMED_MIXERS.items():
        assert resolve_mixer(author_name) == resolve_mixer(name) == mixer


# --- 2. every implementation == the reference: outputs, latent codes, gradients -----------------


def cases(names, dtype):
    return [(name, make_case(**CASES[name] if name in CASES else SRAVEN, dtype=dtype)) for name in names]


@pytest.mark.parametrize("implementation, normalization, value_network, activation", implementations_and_axes(FAST))
def test_equals_the_reference_in_float64(implementation, normalization, value_network, activation):
    """Through `attention(..., return_latents=True)`, on every case it takes: the output and the
    gradients of a loss on output and codes to fla's grade, the latent codes bit for bit."""
    axes = dict(normalization=normalization, value_network=value_network, activation=activation)
    taken = [(name, case) for name, case in cases(CASES, torch.float64) if not why_not(implementation, case, **axes)]
    if not taken:
        pytest.skip(f"{implementation} takes none of the float64 cases with these axes")
    for name, case in taken:
        run(implementation, case, **axes).assert_close(run("naive", case, **axes), torch.float64, name, True)


FLOAT32_CASES = ["cross", "one_query", "batch_1", "SRAVEN"]
# In Triton's interpreter a case takes seconds: one case with two query tiles, two key tiles and two
# value chunks here; tests/ops/test_triton_attention.py tries the tiles and bias layouts.
FLOAT32_CASES_OF = {"triton": ["batch_1"] if not CUDA else FLOAT32_CASES}


@pytest.mark.parametrize("device", ["cpu", pytest.param("cuda", marks=needs_cuda)])
@pytest.mark.parametrize(
    "implementation, normalization, value_network, activation", implementations_and_axes(["auto", *IMPLEMENTATIONS])
)
def test_equals_the_reference_in_float32(implementation, normalization, value_network, activation, device):
    """In float32 (on the CPU, and on CUDA when there is a GPU), against the float64 reference."""
    axes = dict(normalization=normalization, value_network=value_network, activation=activation)
    ran = 0
    for name, case in cases(FLOAT32_CASES_OF.get(implementation, FLOAT32_CASES), torch.float64):
        fast = case.to(device, torch.float32)
        if why_not(implementation, fast, **axes):
            continue
        run(implementation, fast, **axes).assert_close(run("naive", case, **axes), torch.float32, name)
        ran += 1
    if not ran:
        pytest.skip(f"{implementation} takes none of the float32 cases with these axes on {device}")


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_streamed_gradcheck(normalization):
    case = make_case(1, 3, 5, 2, 2, 2, dropout=None)
    inputs = tuple(case.leaves())

    def streamed(q, k, v, bias):
        return hyla_streamed(
            q, k, v, normalization=normalization, activation="tanh", bias=bias, mask=case.mask, block=2
        )

    assert torch.autograd.gradcheck(streamed, inputs)


def test_auto_streams_hyla_above_the_threshold(monkeypatch, set_switch):
    calls = []

    set_switch("HYLA_CPP_KERNEL", "0")  # the C++ kernel, when built, comes before streaming
    case = make_case(2, 9, 11, 3, 4, 5, dtype=torch.float32)
    q, k, v, bias, mask = case.q, case.k, case.v, case.bias, case.mask
    expected = attention(q, k, v, **axes_of("hyla"), bias=bias, mask=mask)
    spy_on_backends(monkeypatch, calls)
    attention(q, k, v, **axes_of("softmax"), bias=bias, mask=mask)
    attention(q, k, v, **axes_of("hyla"), bias=bias, mask=mask)
    assert "streamed" not in calls  # below the threshold, and never for the linear value network
    monkeypatch.setattr(dispatch, "STREAM_THRESHOLD", 2 * 9 * 11 * 5 - 1)
    out = attention(q, k, v, **axes_of("hyla"), bias=bias, mask=mask)
    assert calls[-1] == "streamed"
    assert_close(out, expected, what="streamed")


# --- 3. return_latents never changes the implementation ------------------------------------------


@pytest.mark.parametrize(
    "case, expected",
    [
        (dict(name="hyla"), "cpp"),  # CPU HYLA with the C++ kernel built
        (dict(name="hyla", threshold=0), "cpp"),  # the kernel's memory is linear in T: it never streams
        (dict(name="hyla", no_cpp=True), "naive"),  # CPU HYLA without it
        (dict(name="hyla", no_cpp=True, threshold=0), "streamed"),
        (dict(name="hyla", per_head=True), "naive"),  # cpp folds a mask shared by the heads
        (dict(name="softmax_hyla"), "naive"),  # softmax: not in the kernel
        (dict(name="linear_rms_head"), "cpp_linear"),  # CPU multi-head attention with the kernel built
        (dict(name="linear_rms_head", no_cpp_linear=True), "naive"),
        (dict(name="softmax"), "naive"),  # softmax: not in the kernel
    ],
)
def test_return_scores_never_changes_the_implementation(case, expected, monkeypatch, set_switch):
    """Analysis (return_scores=True) runs what training runs, so it sees the same numbers."""
    if case.get("no_cpp"):
        set_switch("HYLA_CPP_KERNEL", "0")
    elif case.get("no_cpp_linear"):
        set_switch("HYLA_CPP_LINEAR", "0")
    elif expected in ("cpp", "cpp_linear") and not cpp.available():
        pytest.skip("the C++ kernel did not build on this machine")
    if "threshold" in case:
        monkeypatch.setattr(dispatch, "STREAM_THRESHOLD", case["threshold"])
    called = []
    spy_on_backends(monkeypatch, called)
    inputs = make_case(2, 9, 11, 3, 4, 5, dtype=torch.float32, dropout="per_head" if case.get("per_head") else "shared")
    q, k, v = inputs.q, inputs.k, inputs.v
    kwargs = dict(**axes_of(case["name"]), bias=inputs.bias, mask=inputs.mask, dropout_mask=inputs.dropout_mask)
    out = attention(q, k, v, **kwargs)
    out_with_codes, codes = attention(q, k, v, **kwargs, return_scores=True)
    assert called == [expected, expected]
    assert torch.equal(out_with_codes, out)
    assert torch.equal(codes, attention_naive(q, k, v, **kwargs)[1])


@pytest.mark.parametrize(
    "value_network, cpp_kernel, expected",
    [("linear", True, "naive"), ("mlp", False, "naive"), ("mlp", True, "cpp")],
)
def test_compiled_auto_takes_the_cpp_kernel_or_the_reference(
    value_network, cpp_kernel, expected, monkeypatch, set_switch
):
    """Under torch.compile on the CPU `auto` picks the C++ kernel for HYLA when built, else the
    reference (compiled), and the compiled result matches the eager reference."""

    if not cpp_kernel:
        set_switch("HYLA_CPP_KERNEL", "0")
    elif not cpp.available():
        pytest.skip("the C++ kernel did not build on this machine")
    case = make_case(3, 16, 16, 8, 2, 2, dtype=torch.float32, mask=None)
    q, k, v, b = leaves = case.leaves()
    d = case.dropout_mask
    kwargs = dict(normalization="rms_head", value_network=value_network, bias=b, dropout_mask=d)
    chosen = []

    def compiled(q, k, v):
        chosen.append(choose_implementation(q, v, k.shape[1], value_network, d, "rms_head", "relu", b))
        return attention(q, k, v, **kwargs)

    torch._dynamo.reset()
    out = torch.compile(compiled, fullgraph=True)(q, k, v)
    reference, _ = attention_naive(q, k, v, **kwargs)
    assert_close(out, reference, what="output")
    for got, want in zip(grads(out, case, leaves), grads(reference, case, leaves)):
        assert_close(got, want, what="gradient")
    assert chosen == [expected]


def test_compiled_attention_records_what_ran_without_recompiling():
    """What attention() ran is recorded while tracing: a compiled call records it, and a second call
    reuses the graph (recording at run time would change a set the graph guards on: a recompile)."""
    from torch._dynamo.utils import counters

    case = make_case(2, 8, 8, 4, 2, 2, dtype=torch.float32, mask=None, dropout=None)
    q, k, v, b = case.leaves()
    torch._dynamo.reset()
    counters.clear()
    reset_implementations_ran()
    compiled = torch.compile(lambda q, k, v: attention(q, k, v, **axes_of("hyla"), bias=b))
    for _ in range(3):
        compiled(q, k, v).sum().backward()
    assert implementations_ran() == [choose_implementation(q, v, 8, "mlp", None, "rms_head", "relu", b)]
    assert counters["stats"]["unique_graphs"] == 1


@pytest.mark.parametrize(
    "device, implementation, q_len",
    [
        ("cpu", "auto", 36),
        ("cpu", "auto", 4),
        pytest.param("cuda", "auto", 36, marks=needs_cuda),
        pytest.param("cuda", "auto", 4, marks=needs_cuda),
    ],
)
def test_compiled_hyla_uses_the_dropout_mask_it_draws_in_forward_and_backward(
    device, implementation, q_len, monkeypatch, set_switch
):
    """A compiled step that draws its attention-dropout mask inside the graph, as a training step of
    MultiHeadAttention does (inductor's own random numbers), computes HYLA's output and gradients
    with that one mask: both equal the float64 reference given the mask the graph returns. SRAVEN's
    shapes (H=16, Dk=Dv=4, 36 keys) with the relative-position bias, for every query and for the
    last few only (the model's last block). `auto` compiles the reference on the CPU (the C++
    kernel off) and runs naive_eager on CUDA, which keeps HYLA out of the graph: inductor's
    gradients of HYLA were wrong there at SRAVEN's sizes (benchmarks/repro_inductor_hyla_grad.py)."""
    set_switch("HYLA_CPP_KERNEL", "0")
    g = torch.Generator().manual_seed(0)
    B, T, H, D = 64, 36, 16, 4  # a SRAVEN batch of 64: inductor tiles by size
    q, grad = (torch.randn(B, q_len, H, D, generator=g, dtype=torch.float64) for _ in range(2))
    k, v = (torch.randn(B, T, H, D, generator=g, dtype=torch.float64) for _ in range(2))
    bias = torch.randn(1, H, q_len, T, generator=g, dtype=torch.float64)
    inputs = [t.to(device, torch.float32).requires_grad_() for t in (q, k, v, bias)]

    def step(q, k, v, bias):
        keep = torch.bernoulli(torch.full((q_len, T), 0.9, device=q.device)) / 0.9  # as draw_dropout_mask
        return attention(q, k, v, **axes_of("hyla"), bias=bias, dropout_mask=keep, implementation=implementation), keep

    torch._dynamo.reset()
    torch.manual_seed(0)
    out, keep = torch.compile(step)(*inputs)
    got = torch.autograd.grad(out, inputs, grad.to(device, torch.float32))
    assert 0 < (keep == 0).sum() < keep.numel()  # the graph dropped some pairs, not all
    leaves = [t.requires_grad_() for t in (q, k, v, bias)]
    want, _ = attention_naive(*leaves[:3], **axes_of("hyla"), bias=leaves[3], dropout_mask=keep.double().cpu())
    assert_close(out, want, what="output")
    for got_grad, want_grad in zip(got, torch.autograd.grad(want, leaves, grad)):
        assert_close(got_grad, want_grad, what="gradient")


@pytest.mark.parametrize("value_network, expected", [("mlp", "naive_eager"), ("linear", "naive")])
def test_compiled_auto_keeps_hyla_out_of_the_graph_off_the_cpu(value_network, expected, monkeypatch):
    """Under torch.compile on a device other than the CPU (here meta tensors), `auto` runs HYLA's
    value network eagerly and compiles the linear one."""
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    q = torch.empty(2, 9, 3, 4, device="meta")
    assert choose_implementation(q, q, 9, value_network, None, "rms_head") == expected


def test_naive_eager_runs_outside_the_compiled_graph():
    """naive_eager inside a compiled function is a graph break: attention_naive runs eagerly there,
    and outputs and gradients equal the reference's."""
    module = naive_module
    compiling = []
    naive = module.attention_naive

    def spy(*args, **kwargs):
        compiling.append(torch.compiler.is_compiling())
        return naive(*args, **kwargs)

    case = make_case(3, 8, 8, 4, 2, 2, dtype=torch.float32, mask=None)
    q, k, v, b = leaves = case.leaves()
    kwargs = dict(**axes_of("hyla"), bias=b, dropout_mask=case.dropout_mask)
    torch._dynamo.reset()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "attention_naive", spy)
        out = torch.compile(lambda q, k, v: attention(q, k, v, **kwargs, implementation="naive_eager") * 2)(q, k, v)
    assert compiling == [False]
    reference, _ = attention_naive(q, k, v, **kwargs)
    assert_close(out / 2, reference, what="output")
    for got, want in zip(grads(out / 2, case, leaves), grads(reference, case, leaves)):
        assert_close(got, want, what="gradient")


# --- 5. every mixer: latent shapes, masks and extreme scores, dtypes ------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("name", list(NAMED_MIXERS))
def test_masked_rows_and_extreme_scores(name, dtype):
    case = make_case(2, 6, 9, 3, 4, 5, dtype=dtype, dropout=None)
    q, k, v, bias, mask = case.q, case.k, case.v, case.bias, case.mask
    masked_rows = case.fully_masked_rows()  # [B, H, Tq, 1]
    for scale in (1.0, 1e3):
        for implementation in [i for i in IMPLEMENTATIONS if not why_not(i, case, **axes_of(name))]:
            inputs = [(q * scale).requires_grad_(), (k * scale).requires_grad_(), v.clone().requires_grad_()]
            out, a = attention(
                *inputs, **axes_of(name), bias=bias, mask=mask, return_scores=True, implementation=implementation
            )
            assert out.shape == (2, 6, 3, 5) and a.shape == (2, 3, 6, 9)
            assert out.dtype == a.dtype == dtype
            where = f"{name} {implementation} scale={scale}"
            assert torch.isfinite(out).all() and torch.isfinite(a).all(), where
            assert (a.masked_select(~mask) == 0).all(), where
            assert (out.transpose(1, 2).masked_select(masked_rows) == 0).all(), where
            input_grads = torch.autograd.grad(out, inputs, torch.randn_like(out))
            assert all(torch.isfinite(g).all() for g in input_grads), where
            assert (input_grads[0].transpose(1, 2).masked_select(masked_rows) == 0).all(), where


# --- 6. input errors ---------------------------------------------------------------------------------


def qkv(q_len=4, k_len=4, heads=2, dk=3, dv=3):
    return torch.randn(1, q_len, heads, dk), torch.randn(1, k_len, heads, dk), torch.randn(1, k_len, heads, dv)


@pytest.mark.parametrize(
    "axes_kwargs, match",
    [
        (dict(normalization="sparsemax", value_network="linear"), "softmax, none, rms_head"),
        (dict(normalization="softmax", value_network="conv"), "linear, mlp"),
        (dict(normalization="softmax", value_network="mlp", activation="swish"), "relu, gelu, silu"),
    ],
)
def test_unknown_axis_names_list_valid_choices(axes_kwargs, match):
    with pytest.raises(ValueError, match=match):
        attention(*qkv(), **axes_kwargs)


@pytest.mark.parametrize(
    "shapes",
    [
        dict(dk=3, k=(1, 4, 2, 5)),  # key size differs from query size
        dict(k=(1, 4, 3, 3)),  # head count differs
        dict(v=(1, 5, 2, 3)),  # values and keys of different lengths
        dict(q=(4, 2, 3)),  # not 4-d
    ],
)
def test_mismatched_shapes_raise(shapes):
    q, k, v = qkv()
    q = torch.randn(*shapes.get("q", q.shape))
    k = torch.randn(*shapes.get("k", k.shape))
    v = torch.randn(*shapes.get("v", v.shape))
    with pytest.raises(ValueError, match=r"\[B, T"):
        attention(q, k, v, normalization="softmax", value_network="linear")


def test_non_bool_mask_raises():
    with pytest.raises(TypeError, match="bool"):
        attention(*qkv(), normalization="softmax", value_network="linear", mask=torch.ones(4, 4))


def test_streamed_needs_the_mlp_value_network():
    with pytest.raises(ValueError, match="value_network='mlp'"):
        attention(*qkv(), normalization="softmax", value_network="linear", implementation="streamed")


def test_cpp_linear_needs_the_linear_value_network():
    with pytest.raises(ValueError, match="value_network='linear'"):
        attention(*qkv(), normalization="none", value_network="mlp", implementation="cpp_linear")


def test_cpp_linear_is_eager_only(monkeypatch):
    """Under torch.compile `auto` leaves multi-head attention to the reference, which inductor compiles."""
    case = make_case(2, 5, 6, dtype=torch.float32)
    call = dispatch.Call(case.q, case.v, 6, "none", "linear", "relu", None, None, None)
    assert dispatch.choose(call).name == ("cpp_linear" if cpp.available() else "naive")
    monkeypatch.setattr(torch.compiler, "is_compiling", lambda: True)
    assert dispatch._verify_cpp_linear(call).startswith("eager only")


@pytest.mark.parametrize("implementation", ["flash", "fused", "pointwise"])  # the last two: removed
def test_unknown_implementation_lists_valid_choices(implementation):
    valid = "auto, triton, cpp, cpp_linear, streamed, naive_eager, naive"
    with pytest.raises(ValueError, match=f"^unknown implementation '{implementation}'; valid: {valid}$"):
        attention(*qkv(), normalization="softmax", value_network="mlp", implementation=implementation)


def test_auto_logs_why_it_passed_over_a_fast_path_once(monkeypatch, caplog):
    """Each reason a verifier gives is logged once per process (logger hyla.ops, INFO)."""
    monkeypatch.setattr(dispatch, "_LOGGED", set())
    case = make_case(2, 5, 6, dtype=torch.float32)
    q, k, v, bias, mask = case.q, case.k, case.v, case.bias, case.mask
    with caplog.at_level("INFO", logger="hyla.ops"):
        for _ in range(2):
            attention(q, k, v, **axes_of("softmax"), bias=bias, mask=mask)
    reasons = [record.getMessage() for record in caplog.records if record.name == "hyla.ops"]
    assert "hyla.ops.attention: cpp does not apply: HYLA (value_network='mlp') only" in reasons
    assert len(reasons) == len(set(reasons))
    assert not any("naive does not apply" in reason for reason in reasons)
