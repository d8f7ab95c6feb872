"""`hyla.ops.attention`: the authors' reference outputs; every implementation (pointwise, fused,
streamed) equal to the naive reference on outputs, gradients and latent codes; what `auto` picks;
masks, extreme scores, dtypes and input errors."""

import itertools
from pathlib import Path

import numpy as np
import pytest
import torch
from torch.testing import assert_close

from hyla.ops import NAMED_MIXERS, attention, attention_naive, attention_pointwise, dispatch, hyla_fused, hyla_streamed
from hyla.ops.dispatch import choose_implementation
from hyla.ops.kernels import cpp
from hyla.ops.kernels import naive as naive_module
from hyla.ops.kernels.common import implementations_ran, reset_implementations_ran
from hyla.ops.mixers import ACTIVATIONS, NORMALIZATIONS

FIXTURE = Path(__file__).parents[1] / "fixtures" / "attention_reference.npz"
MLP_MIXERS = [name for name, (_, mixer) in NAMED_MIXERS.items() if mixer.value_network == "mlp"]


def axes(name: str) -> dict:
    mixer = NAMED_MIXERS[name][1]
    return dict(normalization=mixer.normalization, value_network=mixer.value_network, activation=mixer.activation)


def implementations(name: str, dtype: torch.dtype = torch.float64) -> tuple[str, ...]:
    if name not in MLP_MIXERS:
        return ("naive", "pointwise")
    mixer = NAMED_MIXERS[name][1]
    takes_cpp = (
        mixer.normalization in cpp.NORMALIZATIONS and mixer.activation in cpp.ACTIVATIONS and dtype in cpp.DTYPES
    )
    return ("naive", "pointwise", "streamed", "fused") + ("cpp",) * takes_cpp


def causal_mask(q_len: int, k_len: int) -> torch.Tensor:
    """[Tq, Tk]: queries are the last Tq positions of the key sequence (as in MultiHeadAttention)."""
    return torch.ones(q_len, k_len, dtype=torch.bool).tril(k_len - q_len)


def random_case(batch, q_len, k_len, *, heads=3, dim=4, dtype=torch.float32, causal=False, full_bias=False):
    """q, k, v, bias and a random mask with one fully masked query row in every batch element."""
    q = torch.randn(batch, q_len, heads, dim, dtype=dtype)
    k = torch.randn(batch, k_len, heads, dim, dtype=dtype)
    v = torch.randn(batch, k_len, heads, dim + 1, dtype=dtype)
    bias = torch.randn(batch if full_bias else 1, heads, q_len, k_len, dtype=dtype)
    mask = torch.rand(batch, 1, q_len, k_len) > 0.3
    mask[:, :, q_len // 2] = False
    if causal:
        mask = mask & causal_mask(q_len, k_len)
    return q, k, v, bias, mask


def spy_on_backends(monkeypatch, calls: list) -> None:
    """Make every backend of `auto` append its name to `calls` when it runs."""

    def spied(backend):
        return dispatch.Backend(
            backend.name, lambda *a, **kw: calls.append(backend.name) or backend.run(*a, **kw), backend.verify
        )

    monkeypatch.setattr(dispatch, "BACKENDS", [spied(backend) for backend in dispatch.BACKENDS])


def scaled_atol(expected: torch.Tensor, rtol: float) -> float:
    """Absolute tolerance relative to the tensor's scale, so near-zero entries of a large tensor
    (cancellations) are judged against its magnitude rather than their own."""
    return rtol * max(expected.abs().max().item(), 1.0)


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
    for implementation in implementations(name):
        out = attention(
            reference["q"], reference["k"], reference["v"], **axes(name), **extras, implementation=implementation
        )
        assert_close(out, expected, rtol=0, atol=1e-5, msg=lambda m: f"{name} {implementation}: {m}")


def test_authors_names_give_the_same_mixers():
    from hyla.ops import resolve_mixer

    for name, (author_name, mixer) in NAMED_MIXERS.items():
        assert resolve_mixer(author_name) == resolve_mixer(name) == mixer


# --- 3. streamed == naive, outputs and gradients ---------------------------------------------------

# (Tq, Tk): every length of (1, 15, 37, 130) on both sides, several key blocks of 7 each.
LENGTHS = [(1, 130), (15, 37), (37, 15), (130, 1), (130, 130)]


def outputs_and_grads(fn, q, k, v, bias, grad_out):
    inputs = [t.detach().requires_grad_() for t in (q, k, v, bias)]
    out = fn(*inputs)
    return (out, *torch.autograd.grad(out, inputs, grad_out))


@pytest.mark.parametrize("causal", [False, True], ids=["full", "causal"])
@pytest.mark.parametrize("activation", ACTIVATIONS)
@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_streamed_equals_naive(normalization, activation, causal):
    for i, (q_len, k_len) in enumerate(LENGTHS):
        q, k, v, bias, mask = random_case(2, q_len, k_len, causal=causal, full_bias=i % 2 == 1)
        grad_out = torch.randn(2, q_len, 3, 5)
        kwargs = dict(normalization=normalization, activation=activation, mask=mask)

        def naive(q, k, v, bias):
            return attention_naive(q, k, v, value_network="mlp", bias=bias, **kwargs)[0]

        def streamed(q, k, v, bias):
            return hyla_streamed(q, k, v, bias=bias, block=7, **kwargs)

        expected = outputs_and_grads(naive, q, k, v, bias, grad_out)
        actual = outputs_and_grads(streamed, q, k, v, bias, grad_out)
        for what, a, e in zip(("out", "grad q", "grad k", "grad v", "grad bias"), actual, expected):
            assert_close(a, e, rtol=1e-4, atol=scaled_atol(e, 1e-4), msg=lambda m: f"{what} Tq={q_len} Tk={k_len}: {m}")


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_streamed_equals_naive_float64(normalization):
    for q_len, k_len in [(15, 37), (37, 15)]:
        q, k, v, bias, mask = random_case(2, q_len, k_len, dtype=torch.float64, causal=True)
        dropout_mask = (torch.rand(q_len, k_len) > 0.2).double() / 0.8
        grad_out = torch.randn(2, q_len, 3, 5, dtype=torch.float64)
        kwargs = dict(normalization=normalization, activation="gelu", mask=mask, dropout_mask=dropout_mask)
        expected = outputs_and_grads(
            lambda *t: attention_naive(*t[:3], value_network="mlp", bias=t[3], **kwargs)[0], q, k, v, bias, grad_out
        )
        actual = outputs_and_grads(
            lambda *t: hyla_streamed(*t[:3], bias=t[3], block=4, **kwargs), q, k, v, bias, grad_out
        )
        for a, e in zip(actual, expected):
            assert_close(a, e, rtol=1e-10, atol=1e-10)


@pytest.mark.parametrize("normalization", NORMALIZATIONS)
def test_streamed_gradcheck(normalization):
    q, k, v, bias, mask = random_case(1, 3, 5, heads=2, dim=2, dtype=torch.float64)
    inputs = tuple(t.requires_grad_() for t in (q, k, v, bias))

    def streamed(q, k, v, bias):
        return hyla_streamed(q, k, v, normalization=normalization, activation="tanh", bias=bias, mask=mask, block=2)

    assert torch.autograd.gradcheck(streamed, inputs)


def test_auto_streams_hyla_above_the_threshold(monkeypatch, set_switch):
    calls = []

    set_switch(cpp.DISABLE_ENV, "0")  # the C++ kernel, when built, comes before streaming
    q, k, v, bias, mask = random_case(2, 9, 11)
    expected = attention(q, k, v, **axes("hyla"), bias=bias, mask=mask)
    spy_on_backends(monkeypatch, calls)
    attention(q, k, v, **axes("softmax"), bias=bias, mask=mask)
    attention(q, k, v, **axes("hyla"), bias=bias, mask=mask)
    assert "streamed" not in calls  # below the threshold, and never for the linear value network
    monkeypatch.setattr(dispatch, "STREAM_THRESHOLD", 2 * 9 * 11 * 5 - 1)
    out = attention(q, k, v, **axes("hyla"), bias=bias, mask=mask)
    assert calls[-1] == "streamed"
    assert_close(out, expected)


# --- 4. pointwise and fused == naive; return_scores never changes the implementation -------------

SHAPES = [(2, 15, 15, 4, 3, 5), (3, 7, 37, 2, 4, 2), (1, 16, 16, 8, 2, 2)]  # B, Tq, Tk, H, Dk, Dv


def seeded_case(shape, dtype, bias, mask, dropout):
    """q, k, v (leaves), optional bias [1, H, Tq, Tk] (leaf), mask [B, 1, Tq, Tk] with a fully
    masked row, dropout mask [Tq, Tk] (keep 0.8, scaled) and an output gradient."""
    B, Tq, Tk, H, Dk, Dv = shape
    g = torch.Generator().manual_seed(sum(shape))
    q, k, v = (
        torch.randn(B, T, H, D, generator=g, dtype=dtype, requires_grad=True) for T, D in ((Tq, Dk), (Tk, Dk), (Tk, Dv))
    )
    b = torch.randn(1, H, Tq, Tk, generator=g, dtype=dtype, requires_grad=True) if bias else None
    m = None
    if mask:
        m = torch.rand(B, 1, Tq, Tk, generator=g) > 0.3
        m[0, 0, 0] = False
    d = torch.bernoulli(torch.full((Tq, Tk), 0.8, dtype=dtype), generator=g) / 0.8 if dropout else None
    return q, k, v, b, m, d, torch.randn(B, Tq, H, Dv, generator=g, dtype=dtype)


def assert_same_outputs_and_grads(fast, reference, leaves, grad, rtol=1e-10, atol=1e-12):
    assert_close(fast, reference, rtol=rtol, atol=atol)
    for got, want in zip(torch.autograd.grad(fast, leaves, grad), torch.autograd.grad(reference, leaves, grad)):
        assert_close(got, want, rtol=10 * rtol, atol=10 * atol)


@pytest.mark.parametrize("normalization, activation", list(itertools.product(NORMALIZATIONS, ACTIVATIONS)))
@pytest.mark.parametrize("shape", SHAPES)
def test_fused_equals_naive_float64(normalization, activation, shape):
    for bias, mask, dropout in itertools.product([False, True], repeat=3):
        q, k, v, b, m, d, grad = seeded_case(shape, torch.float64, bias, mask, dropout)
        kwargs = dict(normalization=normalization, activation=activation, bias=b, mask=m, dropout_mask=d)
        reference, _ = attention_naive(q, k, v, value_network="mlp", **kwargs)
        assert_same_outputs_and_grads(hyla_fused(q, k, v, **kwargs), reference, [q, k, v] + [b] * bias, grad)


@pytest.mark.parametrize(
    "value_network, normalization, activation",
    [("linear", n, "relu") for n in NORMALIZATIONS]
    + list(itertools.product(["mlp"], NORMALIZATIONS, ["relu", "gelu", "tanh"])),
)
@pytest.mark.parametrize("shape", SHAPES)
def test_pointwise_equals_naive_float64(value_network, normalization, activation, shape):
    for bias, mask, dropout in itertools.product([False, True], repeat=3):
        q, k, v, b, m, d, grad = seeded_case(shape, torch.float64, bias, mask, dropout)
        kwargs = dict(
            normalization=normalization,
            value_network=value_network,
            activation=activation,
            bias=b,
            mask=m,
            dropout_mask=d,
        )
        reference, reference_codes = attention_naive(q, k, v, **kwargs)
        out, codes = attention_pointwise(q, k, v, **kwargs)
        assert_close(codes, reference_codes, rtol=0, atol=0)
        assert_same_outputs_and_grads(out, reference, [q, k, v] + [b] * bias, grad)


@pytest.mark.parametrize("name", list(NAMED_MIXERS))
def test_every_implementation_returns_the_reference_outputs_codes_and_gradients(name):
    """Through `attention(..., return_scores=True)`, float64: the output, the latent codes (bit
    for bit) and the gradients of a loss on both."""
    q, k, v, bias, mask = random_case(2, 15, 37, dtype=torch.float64, causal=True)
    dropout_mask = (torch.rand(15, 37) > 0.2).double() / 0.8
    grad_out, grad_codes = torch.randn(2, 15, 3, 5, dtype=torch.float64), torch.randn(2, 3, 15, 37, dtype=torch.float64)
    results = {}
    for implementation in implementations(name):
        leaves = [t.detach().requires_grad_() for t in (q, k, v, bias)]
        out, codes = attention(
            *leaves[:3],
            **axes(name),
            bias=leaves[3],
            mask=mask,
            dropout_mask=dropout_mask,
            return_scores=True,
            implementation=implementation,
        )
        loss = (out * grad_out).sum() + (codes * grad_codes).sum()
        results[implementation] = (out, codes, *torch.autograd.grad(loss, leaves))
    (out, codes, *grads) = results.pop("naive")
    for implementation, (got_out, got_codes, *got_grads) in results.items():
        assert torch.equal(got_codes, codes), implementation
        assert_close(got_out, out, rtol=1e-10, atol=1e-12, msg=lambda m: f"{implementation} output: {m}")
        for what, got, want in zip(("q", "k", "v", "bias"), got_grads, grads):
            assert_close(got, want, rtol=1e-9, atol=1e-11, msg=lambda m: f"{implementation} grad {what}: {m}")


@pytest.mark.parametrize(
    "case, expected",
    [
        (dict(name="hyla"), "cpp"),  # CPU HYLA with the C++ kernel built
        (dict(name="hyla", threshold=0), "cpp"),  # the kernel's memory is linear in T: it never streams
        (dict(name="hyla", no_cpp=True), "fused"),  # eager CPU HYLA without it
        (dict(name="hyla", no_cpp=True, threshold=0), "streamed"),
        (dict(name="hyla", per_head_dropout=True), "naive"),  # cpp and fused fold a mask shared by the heads
        (dict(name="softmax_hyla"), "fused"),  # softmax: not in the kernel
        (dict(name="linear_rms_head"), "naive"),
    ],
)
def test_return_scores_never_changes_the_implementation(case, expected, monkeypatch, set_switch):
    """Analysis (return_scores=True) runs what training runs, so it sees the same numbers."""
    if case.get("no_cpp"):
        set_switch(cpp.DISABLE_ENV, "0")
    elif expected == "cpp" and not cpp.available():
        pytest.skip("the C++ kernel did not build on this machine")
    if "threshold" in case:
        monkeypatch.setattr(dispatch, "STREAM_THRESHOLD", case["threshold"])
    called = []
    spy_on_backends(monkeypatch, called)
    q, k, v, bias, mask = random_case(2, 9, 11)
    dropout_mask = (torch.rand(3, 9, 11) if case.get("per_head_dropout") else torch.rand(9, 11)) > 0.1
    kwargs = dict(**axes(case["name"]), bias=bias, mask=mask, dropout_mask=dropout_mask.float() / 0.9)
    out = attention(q, k, v, **kwargs)
    out_with_codes, codes = attention(q, k, v, **kwargs, return_scores=True)
    assert called == [expected, expected]
    assert torch.equal(out_with_codes, out)
    assert torch.equal(codes, attention_naive(q, k, v, **kwargs)[1])


def test_fused_is_close_to_naive_in_float32_at_the_sraven_size():
    q, k, v, b, _, d, grad = seeded_case((4, 36, 36, 16, 4, 4), torch.float32, True, False, True)
    kwargs = dict(normalization="rms_head", activation="relu", bias=b, dropout_mask=d)
    reference, _ = attention_naive(q, k, v, value_network="mlp", **kwargs)
    # atol: float32 sums of ~600 terms of size ~1 round to ~1e-5 (1.04e-5 seen on an Intel Xeon)
    assert_same_outputs_and_grads(hyla_fused(q, k, v, **kwargs), reference, [q, k, v, b], grad, rtol=1e-5, atol=5e-5)
    with pytest.raises(ValueError, match="shared by all heads"):
        hyla_fused(q, k, v, normalization="none", dropout_mask=torch.ones(1, 16, 36, 36))


@pytest.mark.parametrize(
    "value_network, cpp_kernel, expected",
    [("linear", True, "pointwise"), ("mlp", False, "pointwise"), ("mlp", True, "cpp")],
)
def test_compiled_auto_takes_the_pointwise_form_or_the_cpp_kernel(
    value_network, cpp_kernel, expected, monkeypatch, set_switch
):
    """Under torch.compile `auto` picks the C++ kernel for HYLA when built, else the pointwise form
    for small heads, and the compiled result matches the reference."""
    from torch._inductor import config as inductor_config

    if not cpp_kernel:
        set_switch(cpp.DISABLE_ENV, "0")
    elif not cpp.available():
        pytest.skip("the C++ kernel did not build on this machine")
    q, k, v, b, _, d, grad = seeded_case((3, 16, 16, 8, 2, 2), torch.float32, True, False, True)
    kwargs = dict(normalization="rms_head", value_network=value_network, bias=b, dropout_mask=d)
    chosen = []

    def run(q, k, v):
        chosen.append(choose_implementation(q, v, k.shape[1], value_network, d, "rms_head", "relu", b))
        return attention(q, k, v, **kwargs)

    torch._dynamo.reset()
    # the setting the trainer compiles with (see pointwise.py), scoped to this test
    with inductor_config.patch({"cpp.enable_loop_tail_vec": False}):
        out = torch.compile(run, fullgraph=True)(q, k, v)
        reference, _ = attention_naive(q, k, v, **kwargs)
        assert_same_outputs_and_grads(out, reference, [q, k, v, b], grad, rtol=1e-5, atol=1e-5)
    assert chosen == [expected]


def test_compiled_attention_records_what_ran_without_recompiling():
    """What attention() ran is recorded while tracing: a compiled call records it, and a second call
    reuses the graph (recording at run time would change a set the graph guards on: a recompile)."""
    from torch._dynamo.utils import counters

    q, k, v, b, _, _, _ = seeded_case((2, 8, 8, 4, 2, 2), torch.float32, True, False, False)
    torch._dynamo.reset()
    counters.clear()
    reset_implementations_ran()
    compiled = torch.compile(lambda q, k, v: attention(q, k, v, **axes("hyla"), bias=b))
    for _ in range(3):
        compiled(q, k, v).sum().backward()
    assert implementations_ran() == [choose_implementation(q, v, 8, "mlp", None, "rms_head", "relu", b)]
    assert counters["stats"]["unique_graphs"] == 1


CUDA = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
# Measured on an H200 and an H100 (torch 2.11; with inductor's mix-order reduction on or off):
# inductor's backward of the pointwise form is wrong there for every query at SRAVEN's sizes;
# `auto` keeps HYLA out of the graph on CUDA (naive_eager).
POINTWISE_ON_CUDA = pytest.mark.xfail(
    torch.cuda.is_available(), reason="compiled pointwise HYLA gradients are wrong on CUDA", strict=True
)


@pytest.mark.parametrize(
    "device, implementation, q_len",
    [
        ("cpu", "auto", 36),
        ("cpu", "auto", 4),
        pytest.param("cuda", "auto", 36, marks=CUDA),
        pytest.param("cuda", "auto", 4, marks=CUDA),
        pytest.param("cuda", "pointwise", 36, marks=[CUDA, POINTWISE_ON_CUDA]),
        pytest.param("cuda", "pointwise", 4, marks=CUDA),
    ],
)
def test_compiled_hyla_uses_the_dropout_mask_it_draws_in_forward_and_backward(
    device, implementation, q_len, monkeypatch, set_switch
):
    """A compiled step that draws its attention-dropout mask inside the graph, as a training step of
    MultiHeadAttention does (inductor's own random numbers), computes HYLA's output and gradients
    with that one mask: both equal the float64 reference given the mask the graph returns. SRAVEN's
    shapes (H=16, Dk=Dv=4, 36 keys) with the relative-position bias, for every query and for the
    last few only (the model's last block). `auto` compiles the pointwise form on the CPU (the C++
    kernel off) and runs naive_eager on CUDA."""
    set_switch(cpp.DISABLE_ENV, "0")
    g = torch.Generator().manual_seed(0)
    B, T, H, D = 64, 36, 16, 4  # a SRAVEN batch of 64: inductor tiles by size
    q, grad = (torch.randn(B, q_len, H, D, generator=g, dtype=torch.float64) for _ in range(2))
    k, v = (torch.randn(B, T, H, D, generator=g, dtype=torch.float64) for _ in range(2))
    bias = torch.randn(1, H, q_len, T, generator=g, dtype=torch.float64)
    inputs = [t.to(device, torch.float32).requires_grad_() for t in (q, k, v, bias)]

    def step(q, k, v, bias):
        keep = torch.bernoulli(torch.full((q_len, T), 0.9, device=q.device)) / 0.9  # as draw_dropout_mask
        return attention(q, k, v, **axes("hyla"), bias=bias, dropout_mask=keep, implementation=implementation), keep

    torch._dynamo.reset()
    torch.manual_seed(0)
    out, keep = torch.compile(step)(*inputs)
    got = torch.autograd.grad(out, inputs, grad.to(device, torch.float32))
    assert 0 < (keep == 0).sum() < keep.numel()  # the graph dropped some pairs, not all
    leaves = [t.requires_grad_() for t in (q, k, v, bias)]
    want, _ = attention_naive(*leaves[:3], **axes("hyla"), bias=leaves[3], dropout_mask=keep.double().cpu())
    assert_close(out.double().cpu(), want, rtol=2e-4, atol=2e-4)
    for got_grad, want_grad in zip(got, torch.autograd.grad(want, leaves, grad)):
        assert_close(got_grad.double().cpu(), want_grad, rtol=2e-4, atol=2e-4)


@pytest.mark.parametrize("value_network, expected", [("mlp", "naive_eager"), ("linear", "pointwise")])
def test_compiled_auto_keeps_hyla_out_of_the_graph_off_the_cpu(value_network, expected, monkeypatch):
    """Under torch.compile on a device other than the CPU (here meta tensors), `auto` runs HYLA's
    value network eagerly and compiles the linear one in the pointwise form."""
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

    q, k, v, b, _, d, grad = seeded_case((3, 8, 8, 4, 2, 2), torch.float32, True, False, True)
    kwargs = dict(**axes("hyla"), bias=b, dropout_mask=d)
    torch._dynamo.reset()
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(module, "attention_naive", spy)
        out = torch.compile(lambda q, k, v: attention(q, k, v, **kwargs, implementation="naive_eager") * 2)(q, k, v)
    assert compiling == [False]
    reference, _ = attention_naive(q, k, v, **kwargs)
    assert_same_outputs_and_grads(out / 2, reference, [q, k, v, b], grad, rtol=1e-6, atol=1e-6)


# --- 5. every mixer: latent shapes, masks and extreme scores, dtypes ------------------------------


@pytest.mark.parametrize("dtype", [torch.float32, torch.bfloat16, torch.float64], ids=str)
@pytest.mark.parametrize("name", list(NAMED_MIXERS))
def test_masked_rows_and_extreme_scores(name, dtype):
    q, k, v, bias, mask = random_case(2, 6, 9, dtype=dtype)
    masked_rows = ~mask.any(-1, keepdim=True).expand(2, 3, 6, 1)  # [B, H, Tq, 1]
    for scale in (1.0, 1e3):
        for implementation in implementations(name, dtype):
            inputs = [(q * scale).requires_grad_(), (k * scale).requires_grad_(), v.clone().requires_grad_()]
            out, a = attention(
                *inputs, **axes(name), bias=bias, mask=mask, return_scores=True, implementation=implementation
            )
            assert out.shape == (2, 6, 3, 5) and a.shape == (2, 3, 6, 9)
            assert out.dtype == a.dtype == dtype
            where = f"{name} {implementation} scale={scale}"
            assert torch.isfinite(out).all() and torch.isfinite(a).all(), where
            assert (a.masked_select(~mask) == 0).all(), where
            assert (out.transpose(1, 2).masked_select(masked_rows) == 0).all(), where
            grads = torch.autograd.grad(out, inputs, torch.randn_like(out))
            assert all(torch.isfinite(g).all() for g in grads), where
            assert (grads[0].transpose(1, 2).masked_select(masked_rows) == 0).all(), where


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


def test_unknown_implementation_lists_valid_choices():
    with pytest.raises(ValueError, match="auto, naive, naive_eager, pointwise, cpp, streamed, fused"):
        attention(*qkv(), normalization="softmax", value_network="mlp", implementation="flash")


def test_auto_logs_why_it_passed_over_a_fast_path_once(monkeypatch, caplog):
    """Each reason a verifier gives is logged once per process (logger hyla.ops, INFO)."""
    monkeypatch.setattr(dispatch, "_LOGGED", set())
    q, k, v, bias, mask = random_case(2, 5, 6)
    with caplog.at_level("INFO", logger="hyla.ops"):
        for _ in range(2):
            attention(q, k, v, **axes("softmax"), bias=bias, mask=mask)
    reasons = [record.getMessage() for record in caplog.records if record.name == "hyla.ops"]
    assert "hyla.ops.attention: cpp does not apply: HYLA (value_network='mlp') only" in reasons
    assert len(reasons) == len(set(reasons))
    assert not any("naive does not apply" in reason for reason in reasons)
