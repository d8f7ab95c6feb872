"""The one harness of the op's tests (tests/ops/): one case builder, one `assert_close`, one list of every
implementation of `hyla.ops.attention`, and `run`, which takes an implementation's outputs, latent
codes and gradients through the public function.

Every implementation is judged against `naive` (the reference) in float64 to fla's grade, and in
the dtypes it runs in to that dtype's tolerance (TOLERANCES)."""

from __future__ import annotations

import itertools
from dataclasses import dataclass, fields, replace

import pytest
import torch

from hyla.ops import NAMED_MIXERS, attention, dispatch
from hyla.ops.kernels import cpp, streamed
from hyla.ops.kernels.common import TRITON_NORMALIZATIONS
from hyla.ops.mixers import ACTIVATIONS, NORMALIZATIONS

CUDA = torch.cuda.is_available()
needs_cuda = pytest.mark.skipif(not CUDA, reason="needs CUDA")

# --- one tolerance table ------------------------------------------------------------------------

# max |actual - expected| <= tol * (|expected| + max(max |expected|, 1)), per tensor: near-zero
# entries of a large tensor (cancellations) are judged against its scale, not their own.
TOLERANCES = {
    torch.float64: 1e-10,  # fla-grade: the implementations differ only in the order of their sums
    torch.float32: 1e-4,  # sums of ~600 terms round to ~1e-5; on a GPU atomics add in any order
    "tf32": 5e-3,  # float32 products on TF32 tensor cores: a 10-bit mantissa
    torch.bfloat16: 3e-2,  # 8-bit mantissa, the codes and hidden layer rounded before each product
}


def assert_close(actual: torch.Tensor, expected: torch.Tensor, dtype=None, what: str = "") -> None:
    """`actual` equals `expected` to the tolerance of `dtype` (default: actual's dtype), compared in
    float64 on the CPU; shapes must match and `actual` must be finite."""
    tol = TOLERANCES[dtype or actual.dtype]
    actual, expected = actual.detach().double().cpu(), expected.detach().double().cpu()
    assert actual.shape == expected.shape, f"{what}: shape {tuple(actual.shape)} != {tuple(expected.shape)}"
    assert torch.isfinite(actual).all(), f"{what}: not finite"
    scale = max(expected.abs().max().item(), 1.0) if expected.numel() else 1.0
    torch.testing.assert_close(actual, expected, rtol=tol, atol=tol * scale, msg=lambda m: f"{what}: {m}")


# --- one case builder ---------------------------------------------------------------------------


@dataclass
class Case:
    """Inputs of one call and the gradients a loss sends back. q [B, Tq, H, Dk], k [B, Tk, H, Dk],
    v [B, Tk, H, Dv]; bias, mask (True = attend), dropout_mask broadcastable to [B, H, Tq, Tk];
    grad_out [B, Tq, H, Dv]; grad_codes [B, H, Tq, Tk]."""

    q: torch.Tensor
    k: torch.Tensor
    v: torch.Tensor
    bias: torch.Tensor | None = None
    mask: torch.Tensor | None = None
    dropout_mask: torch.Tensor | None = None
    grad_out: torch.Tensor | None = None
    grad_codes: torch.Tensor | None = None

    def to(self, device="cpu", dtype=None) -> Case:
        """A copy on `device`, floating tensors in `dtype` (default: unchanged)."""

        def move(t):
            if t is None:
                return None
            return t.to(device, dtype if dtype is not None and t.is_floating_point() else t.dtype)

        return replace(self, **{f.name: move(getattr(self, f.name)) for f in fields(self)})

    def leaves(self) -> list[torch.Tensor]:
        """Fresh leaves q, k, v (and bias when there is one) that require gradients."""
        return [t.detach().requires_grad_() for t in (self.q, self.k, self.v, self.bias) if t is not None]

    def fully_masked_rows(self) -> torch.Tensor:
        """[B, H, Tq, 1]: the query rows that attend to no key."""
        B, Tq, H, _ = self.q.shape
        return ~self.mask.any(-1, keepdim=True).expand(B, H, Tq, 1)


def make_case(
    B=2, Tq=5, Tk=7, H=3, Dk=3, Dv=5, *, dtype=torch.float64, bias="shared", mask="random", dropout="shared", seed=0
) -> Case:
    """A random case.

    bias: None | "shared" [1, H, Tq, Tk] | "per_example" [B, H, Tq, Tk] | "per_head" [H, Tq, Tk] |
        "pair" [Tq, Tk] (shared by the heads).
    mask: None | "random" [B, 1, Tq, Tk] (30% masked) | "shared" [1, 1, Tq, Tk] (random) | "causal"
        [B, 1, Tq, Tk] (and random; queries are the last Tq keys); the middle query row fully masked.
    dropout: None | "shared" [Tq, Tk] | "per_example" [B, 1, Tq, Tk] | "per_head" [B, H, Tq, Tk];
        keep 0.8, scaled by 1/0.8.
    """
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=dtype)

    q, k, v = randn(B, Tq, H, Dk), randn(B, Tk, H, Dk), randn(B, Tk, H, Dv)
    bias_shape = {"shared": (1, H, Tq, Tk), "per_example": (B, H, Tq, Tk), "per_head": (H, Tq, Tk), "pair": (Tq, Tk)}
    bias_tensor = None if bias is None else randn(*bias_shape[bias])
    mask_tensor = None
    if mask is not None:
        mask_tensor = torch.rand(1 if mask == "shared" else B, 1, Tq, Tk, generator=g) > 0.3
        if mask == "causal":
            mask_tensor &= torch.ones(Tq, Tk, dtype=torch.bool).tril(Tk - Tq)
        mask_tensor[:, :, Tq // 2] = False
    dropout_shape = {"shared": (Tq, Tk), "per_example": (B, 1, Tq, Tk), "per_head": (B, H, Tq, Tk)}
    dropout_tensor = None
    if dropout is not None:
        dropout_tensor = (torch.rand(*dropout_shape[dropout], generator=g) > 0.2).to(dtype) / 0.8
    return Case(q, k, v, bias_tensor, mask_tensor, dropout_tensor, randn(B, Tq, H, Dv), randn(B, H, Tq, Tk))


# Odd shapes (B, Tq, Tk, H, Dk, Dv): lengths that are no multiple of the Triton tiles (16) or the
# streamed key block (STREAMED_BLOCK), Dk != Dv, one head, odd head counts, batch 1, one query (a
# read-out layer), one key, 16 heads (the C++ kernel's specialization) and 40 (none), value heads
# of 20 (two Triton value chunks); with every bias, mask and dropout layout.
CASES = {
    "cross": dict(B=2, Tq=15, Tk=37, H=3, Dk=4, Dv=5, mask="causal"),
    "one_query": dict(B=2, Tq=1, Tk=37, H=3, Dk=4, Dv=5, bias="per_example", mask=None, dropout=None),
    "one_head": dict(B=2, Tq=19, Tk=15, H=1, Dk=3, Dv=2, dropout="per_example"),
    "batch_1": dict(B=1, Tq=19, Tk=23, H=5, Dk=2, Dv=20, bias="per_head", mask="causal", dropout="per_head"),
    "one_key": dict(B=3, Tq=13, Tk=1, H=3, Dk=4, Dv=5, bias="pair", mask=None),
    "16_heads": dict(B=2, Tq=9, Tk=9, H=16, Dk=4, Dv=4, bias="per_example", mask="shared", dropout="per_example"),
    "40_heads": dict(B=2, Tq=4, Tk=6, H=40, Dk=2, Dv=3, bias=None, dropout=None),
    "long": dict(B=1, Tq=130, Tk=130, H=3, Dk=4, Dv=5, mask="causal", dropout=None),
}
# SRAVEN's size, where float32 sums of ~600 terms round to ~1e-5 (1.04e-5 seen on an Intel Xeon).
SRAVEN = dict(B=4, Tq=36, Tk=36, H=16, Dk=4, Dv=4, mask="causal")
# Every combination of bias, mask and dropout (on or off) at one small shape.
CASES |= {
    f"bias={b}, mask={m}, dropout={d}": dict(B=2, Tq=5, Tk=7, H=3, Dk=3, Dv=5, bias=b, mask=m, dropout=d)
    for b, m, d in itertools.product([None, "shared"], [None, "random"], [None, "shared"])
}
STREAMED_BLOCK = 7  # keys per block when `run` takes the streamed form: several blocks per case

# --- one list of every implementation ------------------------------------------------------------

# Every implementation `attention(implementation=...)` takes except `auto`, which is one of these.
IMPLEMENTATIONS = [name for name in dispatch.IMPLEMENTATIONS if name != "auto"]
# Implementations compared with the reference (naive itself is the reference).
FAST = [name for name in IMPLEMENTATIONS if name != "naive"]
# The mixers' axes: (normalization, value_network, activation)
AXES = [(n, "linear", "relu") for n in NORMALIZATIONS] + [
    (n, "mlp", a) for n, a in itertools.product(NORMALIZATIONS, ACTIVATIONS)
]
# The axes each implementation takes (the rest raise: tested in test_attention.py's input errors).
TAKES = {
    "cpp": lambda n, vn, a: vn == "mlp" and n in cpp.NORMALIZATIONS and a in cpp.ACTIVATIONS,
    "cpp_linear": lambda n, vn, a: vn == "linear" and n in cpp.NORMALIZATIONS,
    "triton": lambda n, vn, a: vn == "mlp" and n in TRITON_NORMALIZATIONS,
    "streamed": lambda n, vn, a: vn == "mlp",
}


def implementations_and_axes(implementations) -> list:
    """pytest params (implementation, normalization, value_network, activation): every implementation
    with every axes it takes."""
    return [
        pytest.param(name, *axes, id=f"{name}-{'-'.join(axes)}")
        for name in implementations
        for axes in AXES
        if TAKES.get(name, lambda *axes: True)(*axes)
    ]


def axes_of(mixer_name: str) -> dict:
    mixer = NAMED_MIXERS[mixer_name][1]
    return dict(normalization=mixer.normalization, value_network=mixer.value_network, activation=mixer.activation)


def why_not(implementation: str, case: Case, normalization: str, value_network: str, activation: str) -> str | None:
    """Why `implementation` does not take this call (None: it does)."""
    q, v = case.q, case.v
    if dispatch.ONLY_FOR.get(implementation, value_network) != value_network:
        return "for the other value network only"
    if implementation in ("cpp", "cpp_linear"):
        if not cpp.covers(q, v, normalization, activation, case.bias, case.mask, case.dropout_mask, value_network):
            return "inputs the C++ kernel does not take"
        return None if cpp.available() else "the C++ kernel did not build on this machine"
    if implementation == "triton":
        if not dispatch.triton_covers(q, v, normalization):
            return "inputs the Triton kernels do not take, or triton not installed"
        return None if q.is_cuda or triton_interpreted() else "Triton needs CUDA or its interpreter"
    return None


def triton_interpreted() -> bool:
    """Whether the Triton kernels run in Triton's interpreter (CPU tensors) in this process."""
    try:
        from hyla.ops.kernels import triton_hyla
    except Exception:
        return False
    return "Interpreted" in type(triton_hyla._hyla_forward_kernel).__name__


@dataclass
class Result:
    """What one call gave: the output, the latent codes and the gradients of the case's loss
    (grad_out . out + grad_codes . codes) with respect to q, k, v and the bias."""

    out: torch.Tensor
    codes: torch.Tensor
    grads: list[torch.Tensor]

    def assert_close(self, expected: Result, dtype, what: str, codes_exactly: bool = False) -> None:
        """Outputs and gradients within `dtype`'s tolerance; the codes too, or bit for bit."""
        assert_close(self.out, expected.out, dtype, f"{what}: output")
        if codes_exactly:
            assert torch.equal(self.codes, expected.codes), f"{what}: latent codes differ"
        else:
            assert_close(self.codes, expected.codes, dtype, f"{what}: latent codes")
        for name, got, want in zip(("q", "k", "v", "bias"), self.grads, expected.grads):
            assert_close(got, want, dtype, f"{what}: grad {name}")


def run(implementation: str, case: Case, function=attention, **axes) -> Result:
    """`function(..., implementation=implementation, return_latents=True)` on the case (`function`:
    `attention`, or it compiled), and the gradients of its loss. The streamed form takes
    STREAMED_BLOCK keys per block."""
    leaves = case.leaves()
    q, k, v, *bias = leaves
    kwargs = dict(bias=bias[0] if bias else None, mask=case.mask, dropout_mask=case.dropout_mask)
    with pytest.MonkeyPatch.context() as patch:
        patch.setattr(streamed, "key_block_size", lambda *args: STREAMED_BLOCK)
        out, codes = function(q, k, v, **axes, **kwargs, return_latents=True, implementation=implementation)
    loss = (out * case.grad_out).sum() + (codes * case.grad_codes).sum()
    return Result(out, codes, list(torch.autograd.grad(loss, leaves)))


def outputs_and_grads(fn, case: Case, **kwargs) -> list[torch.Tensor]:
    """[output, grad q, grad k, grad v(, grad bias)] of `fn(q, k, v, bias=, mask=, dropout_mask=,
    **kwargs)` -> output, under the case's output gradient; for a kernel called directly."""
    leaves = case.leaves()
    q, k, v, *bias = leaves
    out = fn(q, k, v, bias=bias[0] if bias else None, mask=case.mask, dropout_mask=case.dropout_mask, **kwargs)
    return [out, *torch.autograd.grad(out, leaves, case.grad_out)]


def assert_all_close(actual: list, expected: list, dtype=None, what: str = "") -> None:
    """`assert_close` on each pair of [output, grad q, grad k, grad v(, grad bias)]."""
    assert len(actual) == len(expected), what
    for name, got, want in zip(("output", "grad q", "grad k", "grad v", "grad bias"), actual, expected):
        assert_close(got, want, dtype, f"{what} {name}")
