"""The C++ HYLA kernel (hyla/ops/kernels/cpp.py), beyond the comparison of every implementation with
the reference in test_attention.py: a bias of any strides, gradcheck, threads, what it refuses,
compiled, building and falling back."""

import shutil

import pytest
import torch
from helpers_ops import assert_all_close, assert_close, make_case, outputs_and_grads

from hyla.ops import attention, attention_naive, dispatch
from hyla.ops.dispatch import choose_implementation
from hyla.ops.kernels import cpp
from hyla.ops.kernels.common import implementations_ran, reset_implementations_ran
from hyla.utils import switches

pytestmark = pytest.mark.skipif(not cpp.available(), reason="the C++ kernel did not build on this machine")
BUILT = switches().cache / "kernels"  # where the line above built (or found) the library


def naive(q, k, v, **kwargs):
    return attention_naive(q, k, v, value_network="mlp", **kwargs)[0]


@pytest.mark.parametrize("layout", ["position_bias_view", "per_example_view", "shared_by_heads"])
def test_reads_a_bias_of_any_strides_without_copying_it(layout, monkeypatch):
    """The kernel reads the bias through its strides: the position bias (a transposed view of
    [Tq, Tk, H]), a per-example view and one broadcast over the heads give the reference's
    outputs and gradients, and the bias reaches the kernel uncopied."""
    B, Tq, Tk, H = 2, 5, 7, 3
    case = make_case(B, Tq, Tk, H, 3, 4, bias=None)
    q, k, v = case.leaves()
    g = torch.Generator().manual_seed(1)
    stored = {
        "position_bias_view": (Tq, Tk, H),
        "per_example_view": (Tk, B, H, Tq),
        "shared_by_heads": (Tq, Tk),
    }[layout]
    leaf = torch.randn(stored, generator=g, dtype=torch.float64, requires_grad=True)
    bias = {
        "position_bias_view": lambda t: t.permute(2, 0, 1).unsqueeze(0),  # [1, H, Tq, Tk]
        "per_example_view": lambda t: t.permute(1, 2, 3, 0),  # [B, H, Tq, Tk]
        "shared_by_heads": lambda t: t,  # [Tq, Tk]
    }[layout]
    seen = []
    forward = cpp._forward
    monkeypatch.setattr(cpp, "_forward", lambda q, k, v, b, *rest: seen.append(b) or forward(q, k, v, b, *rest))
    kwargs = dict(normalization="rms_head", activation="relu", mask=case.mask, dropout_mask=case.dropout_mask)
    out = cpp.hyla_cpp(q, k, v, bias=bias(leaf), **kwargs)
    want = naive(q, k, v, bias=bias(leaf), **kwargs)
    assert seen[0].data_ptr() == leaf.data_ptr() and not seen[0].is_contiguous()
    leaves = [q, k, v, leaf]
    got = [out, *torch.autograd.grad(out, leaves, case.grad_out)]
    assert_all_close(got, [want, *torch.autograd.grad(want, leaves, case.grad_out)], what=layout)


def test_gradcheck():
    case = make_case(2, 3, 4, 4, 2, 3, dropout="per_example")
    m, d = case.mask, case.dropout_mask
    assert torch.autograd.gradcheck(
        lambda q, k, v, b: cpp.hyla_cpp(q, k, v, normalization="rms_head", bias=b, mask=m, dropout_mask=d),
        tuple(case.leaves()),
    )


def test_thread_count_does_not_change_the_output_or_the_input_gradients():
    case = make_case(6, 12, 12, 16, 4, 4, dtype=torch.float32, mask="shared", dropout="per_example")
    threads = torch.get_num_threads()
    results = []
    try:
        for n in (1, 2, 3):
            torch.set_num_threads(n)
            results.append(outputs_and_grads(cpp.hyla_cpp, case, normalization="rms_head"))
    finally:
        torch.set_num_threads(threads)
    for other in results[1:]:
        for x, y in zip(results[0][:4], other[:4]):  # each batch element is one thread's work
            assert torch.equal(x, y)
        assert_close(results[0][4], other[4], what="grad bias")  # the shared bias sums the threads' parts


@pytest.mark.parametrize(
    "change, match",
    [
        (dict(dtype=torch.bfloat16), "float32/float64"),
        (dict(normalization="softmax"), "rms_head or none"),
        (dict(activation="gelu"), "relu or identity"),
        (dict(per_head_mask=True), "shared by the heads"),
        (dict(key_dtype=torch.float64), "of one dtype"),
    ],
)
def test_refuses_what_it_does_not_take(change, match):
    dtype = change.get("dtype", torch.float32)
    q = torch.randn(2, 3, 4, 2, dtype=dtype)
    mask = torch.ones(2, 4, 3, 3, dtype=torch.bool) if change.get("per_head_mask") else None
    k = q.to(change.get("key_dtype", dtype))
    with pytest.raises(ValueError, match=match):
        cpp.hyla_cpp(
            q,
            k,
            q,
            normalization=change.get("normalization", "rms_head"),
            activation=change.get("activation", "relu"),
            mask=mask,
        )
    if "key_dtype" not in change:
        assert not cpp.covers(
            q, q, change.get("normalization", "rms_head"), change.get("activation", "relu"), None, mask, None
        )


def test_compiled_matches_eager():
    case = make_case(3, 16, 16, 8, 2, 2, dtype=torch.float32, mask="shared", dropout="per_example")
    torch._dynamo.reset()
    compiled = torch.compile(cpp.hyla_cpp, fullgraph=True)
    got = outputs_and_grads(compiled, case, normalization="rms_head")
    assert_all_close(got, outputs_and_grads(cpp.hyla_cpp, case, normalization="rms_head"), what="compiled")


def test_turned_off_for_auto_by_its_switch(set_switch, caplog, monkeypatch):
    """HYLA_CPP_KERNEL=0: `auto` takes the reference (and logs why, once); an explicit
    implementation="cpp" still runs the kernel."""
    set_switch("HYLA_CPP_KERNEL", "0")
    monkeypatch.setattr(dispatch, "_LOGGED", set())  # what earlier tests logged
    q = torch.randn(2, 3, 4, 2)
    reset_implementations_ran()
    with caplog.at_level("INFO", logger="hyla.ops"):
        out = attention(q, q, q, normalization="rms_head", value_network="mlp")
    assert implementations_ran() == ["naive"]  # auto takes the reference, with the same values
    assert "cpp does not apply: turned off by HYLA_CPP_KERNEL=0" in caplog.text
    naive_out = attention(q, q, q, normalization="rms_head", value_network="mlp", implementation="naive")
    assert_close(out, naive_out, what="auto without the kernel")
    explicit = attention(q, q, q, normalization="rms_head", value_network="mlp", implementation="cpp")
    assert implementations_ran() == ["cpp", "naive"]
    assert_close(explicit, naive_out, what="the kernel, asked for by name")


def test_a_damaged_cached_library_is_rebuilt(fresh_build, monkeypatch):
    library = fresh_build / "kernels" / f"hyla_cpu-{cpp._cache_key(cpp._compiler())}.so"
    library.parent.mkdir(parents=True)
    library.write_bytes(b"garbage, as a torn write leaves it")  # (before any process loaded it)
    calls = []

    def build(compiler, target):  # the compiler's output, not compiled again (test_builds_once_into_the_cache compiles)
        calls.append(target)
        shutil.copyfile(BUILT / library.name, target)

    monkeypatch.setattr(cpp, "_build", build)
    assert cpp.available() and calls == [library]  # rebuilt once
    assert library.read_bytes()[:4] == b"\x7fELF"


def test_a_library_that_never_loads_falls_back(fresh_build, monkeypatch):
    def damaged_build(compiler, target):
        target.parent.mkdir(parents=True, exist_ok=True)
        target.write_bytes(b"not a shared library")

    monkeypatch.setattr(cpp, "_build", damaged_build)
    with pytest.warns(UserWarning, match="does not load"):
        assert not cpp.available()
    q = torch.randn(2, 3, 4, 2)
    assert choose_implementation(q, q, 3, "mlp", None, "rms_head") == "naive"


def test_a_failed_build_is_remembered(fresh_build, monkeypatch):
    calls = []
    monkeypatch.setattr(cpp, "_build", lambda compiler, target: calls.append(target) or "error: no space left")
    with pytest.warns(UserWarning, match="did not compile .* no space left"):
        assert not cpp.available()
    (record,) = (fresh_build / "kernels").glob("*.failed")
    assert "error: no space left" in record.read_text()
    cpp._library.cache_clear()  # another process of the sweep
    with pytest.warns(UserWarning, match="an earlier build failed.*no space left"):
        assert not cpp.available()
    assert len(calls) == 1
    record.unlink()  # deleting the record retries
    cpp._library.cache_clear()
    with pytest.warns(UserWarning, match="did not compile .* no space left"):
        assert not cpp.available()
    assert len(calls) == 2 and record.is_file() and "no space left" in record.read_text()  # remembered again


def test_a_compiler_that_does_not_exist_warns(fresh_build, monkeypatch):
    monkeypatch.setenv("CXX", "/nonexistent/c++")
    with pytest.warns(UserWarning, match="cannot run the compiler"):
        assert not cpp.available()


@pytest.fixture
def fresh_build(set_switch, tmp_path):
    """An empty kernel cache and a forgotten library, restored (and rebuilt from the real cache) after."""
    set_switch("HYLA_CACHE", str(tmp_path))
    cpp._library.cache_clear()
    yield tmp_path
    cpp._library.cache_clear()


def test_builds_once_into_the_cache(fresh_build, monkeypatch):
    assert cpp.available()
    built = list((fresh_build / "kernels").glob("hyla_cpu-*.so"))
    assert len(built) == 1
    calls = []
    monkeypatch.setattr(cpp, "_build", lambda *args: calls.append(args))
    cpp._library.cache_clear()
    assert cpp.available() and not calls  # a second process loads the cached build


def test_without_a_working_compiler_auto_falls_back(fresh_build, monkeypatch):
    monkeypatch.setenv("CXX", "false")  # a "compiler" that always fails
    with pytest.warns(UserWarning, match="did not compile"):
        assert not cpp.available()
    q = torch.randn(2, 3, 4, 2)
    assert choose_implementation(q, q, 3, "mlp", None, "rms_head") == "naive"
