"""`hyla.ops.attention`: the attention family, and HYLA, as one pure function, and the table of
implementations that `implementation="auto"` walks.

The math (docs/math.md; the paper's Eq. 4-7). q [B, Tq, H, Dk], k [B, Tk, H, Dk], v [B, Tk, H, Dv]:

    s[b,h,q,k] = <q[b,q,h,:], k[b,k,h,:]> / sqrt(Dk) + bias[b,h,q,k]
    a = normalize(s)     softmax over keys | none | rms_head (RMS norm across the heads, per pair)
    value_network "linear" (multi-head attention):
        y[b,q,h,:] = sum_k a[b,h,q,k] v[b,k,h,:]
    value_network "mlp" (HYLA; the latent code a[b,:,q,k] generates both layers):
        u[b,q,k,:] = act(sum_h a[b,h,q,k] v[b,k,h,:])     layer 1: sums over the heads
        y[b,q,h,:] = sum_k a[b,h,q,k] u[b,q,k,:]          layer 2: sums over the keys

`hyla/ops/kernels/naive.py` is exactly this, in einsums: the reference. Every other implementation
in `hyla/ops/kernels/` computes the same function and is tested against it on outputs AND
gradients in float64 (tests/ops/). `BACKENDS` below lists them in the order `auto` tries them,
each with its environment switch, if it has one, the value network it computes, if only one, and
the verifier that says why it does not apply to a call (None: it does); the first that applies
runs, `naive` always does. `IMPLEMENTATIONS` and `ONLY_FOR` are read off it. Why each is there
(and what it buys: docs/speed.md, which has a row for each):

    triton       memory linear in T on CUDA, and faster than `streamed` (docs/speed.md)
    cpp          one C++ kernel on the CPU, each query-key pair in registers
    cpp_linear   the same kernel for multi-head attention (the linear value network), eager only
    streamed     memory: HYLA's [B, Tq, Tk, Dv] hidden tensor exists one key block at a time
    naive_eager  correctness: inductor has compiled wrong gradients of HYLA on CUDA (docs/gpu.md),
                 so HYLA stays out of compiled graphs off the CPU
    naive        the reference

Switches (hyla.utils, read once per process): `=0` keeps `auto` from taking a fast path
(HYLA_CPP_KERNEL, HYLA_CPP_LINEAR, HYLA_TRITON); HYLA_TRITON=1 also lets it take the Triton kernels on a GPU
architecture not in TRITON_VALIDATED. An explicit `implementation=` runs what it names either way.
A fast path that `auto` passes over logs its reason once (logger `hyla.ops`, level INFO); one that
fails at run time warns once and records it. `implementations_ran()` lists what ran; training
writes it to env.json.

`return_latents` (or `return_scores`, its name in SPEC §9) never changes the choice, so
an analysis run computes the same outputs as training does. The returned latent codes are
`normalize(raw_scores(q, k, bias))`: the very tensor the output came from for `naive`; the others
do not return it (they fold or stream it), so the same two functions compute it beside them:
identical values. (Under torch.compile the choice also depends on the compile state: a compiled
training run and an eager analysis of its checkpoint agree to float rounding, not bit for bit.)
"""

from __future__ import annotations

import functools
import importlib.util
import logging
from collections.abc import Callable
from dataclasses import dataclass

import torch

from hyla.ops.kernels import cpp
from hyla.ops.kernels.common import (
    TRITON_DTYPES,
    TRITON_MAX_HEAD_DIM,
    TRITON_NORMALIZATIONS,
    check_inputs,
    record_fallback,
    record_ran,
)
from hyla.ops.kernels.naive import attention_naive, attention_naive_eager, normalize, raw_scores
from hyla.ops.kernels.streamed import hyla_streamed
from hyla.ops.torch_internals import constant_under_compile, forced_on, switched_off
from hyla.utils import env_name

LOG = logging.getLogger("hyla.ops")
# Located, not imported (find_spec reads no module): a constant that torch.compile can trace.
TRITON_INSTALLED = importlib.util.find_spec("triton") is not None
# GPU architectures (compute capability) where hyla's GPU suite (the CUDA and Triton tests and
# benchmarks/bench_triton_attention.py) passed on real hardware and the kernels were faster than
# the PyTorch forms: `auto` takes Triton there only. Elsewhere opt in with implementation="triton"
# or HYLA_TRITON=1.
TRITON_VALIDATED = {(9, 0): "NVIDIA H100 80GB HBM3 and H200; torch 2.11, Triton 3.6"}
# `auto` streams HYLA once its hidden tensor [B, Tq, Tk, Dv] would exceed this many elements.
STREAM_THRESHOLD = 1 << 24


@dataclass(frozen=True)
class Call:
    """What a verifier sees of one `attention` call."""

    q: torch.Tensor  # [B, Tq, H, Dk]
    v: torch.Tensor  # [B, Tk, H, Dv]
    k_len: int
    normalization: str
    value_network: str
    activation: str
    bias: torch.Tensor | None
    mask: torch.Tensor | None
    dropout_mask: torch.Tensor | None

    @property
    def hidden_elements(self) -> int:
        """Elements of HYLA's hidden tensor [B, Tq, Tk, Dv]."""
        return self.q.shape[0] * self.q.shape[1] * self.k_len * self.v.shape[-1]


@dataclass(frozen=True)
class Backend:
    """One implementation: `run(q, k, v, value_network=..., **kwargs)` -> (output, latent codes or
    None); `verify(call)` -> why it does not apply, or None; `switch`: the `hyla.utils.Switches`
    field whose `=0` keeps `auto` from taking it (None: it has none); `only_for`: the one value
    network it computes (None: both), which an explicit `implementation=` is held to as well."""

    name: str
    run: Callable
    verify: Callable[[Call], str | None]
    switch: str | None = None
    only_for: str | None = None

    def rejects(self, call: Call) -> str | None:
        """Why `auto` does not take it for `call` (None: it does)."""
        if self.switch is not None and switched_off(self.switch):
            return f"turned off by {env_name(self.switch)}=0"
        if self.only_for not in (None, call.value_network):
            return f"{VALUE_NETWORK_NAMES[self.only_for]} (value_network={self.only_for!r}) only"
        return self.verify(call)


VALUE_NETWORK_NAMES = {"mlp": "HYLA", "linear": "multi-head attention"}


def hyla_triton(q, k, v, **kwargs):
    """`triton_hyla.hyla_triton`, imported on first use: importing hyla never imports triton. A
    Triton too old for the kernels falls back to `hyla_streamed`, with a warning."""
    try:
        from hyla.ops.kernels import triton_hyla
    except Exception as error:
        record_fallback("triton", f"importing it failed: {type(error).__name__}: {error}")
        return hyla_streamed(q, k, v, **kwargs)
    return triton_hyla.hyla_triton(q, k, v, **kwargs)


def triton_covers(q, v, normalization: str | None) -> bool:
    """Whether `hyla_triton` takes these inputs (decided without importing triton)."""
    return (
        normalization in TRITON_NORMALIZATIONS
        and q.dtype in TRITON_DTYPES
        and max(q.shape[-1], v.shape[-1]) <= TRITON_MAX_HEAD_DIM
        and TRITON_INSTALLED
    )


def triton_by_default(device: torch.device) -> bool:
    """Whether `auto` may take the Triton kernels on this CUDA device: a validated architecture or
    HYLA_TRITON=1, and not in deterministic mode (the backward adds with atomics). (HYLA_TRITON=0:
    the `triton` row of BACKENDS.)"""
    if torch.are_deterministic_algorithms_enabled():
        return False
    return forced_on("triton") or _validated_architecture(device.index or 0)


@constant_under_compile
def _validated_architecture(device_index: int) -> bool:
    return torch.cuda.get_device_capability(device_index) in TRITON_VALIDATED


# --- the verifiers: why an implementation does not apply (None: it does) ---------------------------


def _above_stream_threshold(call: Call) -> str | None:
    if call.hidden_elements <= STREAM_THRESHOLD:
        return f"the hidden tensor has at most STREAM_THRESHOLD={STREAM_THRESHOLD} elements"
    return None


def _verify_triton(call: Call) -> str | None:
    if reason := _above_stream_threshold(call):
        return reason
    if not call.q.is_cuda:
        return "CUDA only"
    if not triton_covers(call.q, call.v, call.normalization):
        return "inputs the kernels do not take (normalization, dtype, head size) or triton not installed"
    if not triton_by_default(call.q.device):
        return f"not a validated GPU architecture ({env_name('triton')}=1 opts in) or deterministic mode"
    return None


def _verify_cpp(call: Call) -> str | None:
    if not cpp.covers(call.q, call.v, call.normalization, call.activation, call.bias, call.mask, call.dropout_mask):
        return "inputs the kernel does not take (device, dtype, normalization, activation, masks per head)"
    return None if cpp.available() else "the kernel is not available (see its warning)"


def _verify_cpp_linear(call: Call) -> str | None:
    if torch.compiler.is_compiling():
        return "eager only (under torch.compile inductor compiles the reference; not measured against it)"
    if not cpp.covers(
        call.q, call.v, call.normalization, call.activation, call.bias, call.mask, call.dropout_mask, "linear"
    ):
        return "inputs the kernel does not take (device, dtype, normalization, masks per head)"
    return None if cpp.available() else "the kernel is not available (see its warning)"


def _verify_naive_eager(call: Call) -> str | None:
    if not torch.compiler.is_compiling():
        return "only under torch.compile"
    if call.value_network != "mlp" or call.q.device.type == "cpu":
        return "HYLA off the CPU only"
    return None


def _codes_beside(kernel: Callable) -> Callable:
    """An implementation that returns only the output, as (output, None): `attention` computes the
    latent codes beside it when they are asked for."""

    def run(q, k, v, *, value_network, **kwargs):
        return kernel(q, k, v, **kwargs), None

    return run


# The order `auto` tries them; `naive` always applies.
BACKENDS = [
    Backend("triton", _codes_beside(hyla_triton), _verify_triton, switch="triton", only_for="mlp"),
    Backend("cpp", _codes_beside(cpp.hyla_cpp), _verify_cpp, switch="cpp_kernel", only_for="mlp"),
    Backend(
        "cpp_linear",
        _codes_beside(functools.partial(cpp.hyla_cpp, value_network="linear")),
        _verify_cpp_linear,
        switch="cpp_linear",
        only_for="linear",
    ),
    Backend("streamed", _codes_beside(hyla_streamed), _above_stream_threshold, only_for="mlp"),
    Backend("naive_eager", attention_naive_eager, _verify_naive_eager),
    Backend("naive", attention_naive, lambda call: None),
]
IMPLEMENTATIONS = ("auto", *(backend.name for backend in BACKENDS))  # what `implementation=` takes
ONLY_FOR = {backend.name: backend.only_for for backend in BACKENDS if backend.only_for}  # name -> value network


def attention(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    normalization: str,
    value_network: str,
    activation: str = "relu",
    bias: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    return_latents: bool = False,
    dropout_mask: torch.Tensor | None = None,
    implementation: str = "auto",
    return_scores: bool = False,
):
    """Multi-head attention as a hypernetwork.

    Args:
        q [B, Tq, H, Dk], k [B, Tk, H, Dk], v [B, Tk, H, Dv].
        normalization: "softmax" | "none" | "rms_head" (RMS norm across heads per query-key pair).
        value_network: "linear" (standard attention) | "mlp" (HYLA: the latent code generates
            both layers of a two-layer value network).
        activation: the value network's nonlinearity (mlp only).
        bias: additive, broadcastable to [B, H, Tq, Tk], added before normalization.
        mask: bool, broadcastable to [B, H, Tq, Tk], True = attend. Fully masked rows give 0.
        return_latents: also return the latent codes a [B, H, Tq, Tk] (normalized, no dropout).
        dropout_mask: multiplies a after normalization (attention dropout: keep-mask / keep).
        implementation: "auto" | "triton" | "cpp" | "cpp_linear" | "streamed" | "naive_eager" | "naive"
            (ONLY_FOR: the value network of each that takes one; cpp, cpp_linear: CPU, see
            `cpp.covers`; triton: normalization none or rms_head, CUDA or Triton's interpreter);
            `auto` takes the first of BACKENDS that applies.
        return_scores: the same as return_latents (its name in SPEC §9).

    Returns: out [B, Tq, H, Dv], and a [B, H, Tq, Tk] when return_latents.
    """
    check_inputs(q, k, v, normalization, value_network, activation)
    if implementation not in IMPLEMENTATIONS:
        raise ValueError(f"unknown implementation {implementation!r}; valid: {', '.join(IMPLEMENTATIONS)}")
    if mask is not None and mask.dtype != torch.bool:
        raise TypeError(f"mask must be a bool tensor (True = attend), got {mask.dtype}")
    if (only := ONLY_FOR.get(implementation, value_network)) != value_network:
        raise ValueError(f"implementation={implementation!r} exists for value_network={only!r} only")
    call = Call(q, v, k.shape[1], normalization, value_network, activation, bias, mask, dropout_mask)
    backend = choose(call) if implementation == "auto" else _BY_NAME[implementation]
    record_ran(backend.name)
    out, codes = backend.run(
        q,
        k,
        v,
        value_network=value_network,
        normalization=normalization,
        activation=activation,
        bias=bias,
        mask=mask,
        dropout_mask=dropout_mask,
    )
    if not (return_latents or return_scores):
        return out
    return out, normalize(raw_scores(q, k, bias), normalization, mask) if codes is None else codes


_BY_NAME = {backend.name: backend for backend in BACKENDS}


def choose(call: Call) -> Backend:
    """The first of BACKENDS that applies to `call` (what `auto` runs)."""
    for backend in BACKENDS:
        reason = backend.rejects(call)
        if reason is None:
            return backend
        _log_rejection(backend.name, reason)
    raise AssertionError("unreachable: the last backend always applies")


def choose_implementation(
    q, v, k_len: int, value_network: str, dropout_mask, normalization=None, activation="relu", bias=None, mask=None
) -> str:
    """The name of what `auto` runs for these inputs."""
    call = Call(q, v, k_len, normalization, value_network, activation, bias, mask, dropout_mask)
    return choose(call).name


_LOGGED: set[tuple[str, str]] = set()


def _log_rejection(name: str, reason: str) -> None:
    """Log once per process why `auto` passed over a fast path (nothing while torch.compile traces)."""
    if name == "naive" or torch.compiler.is_compiling() or (name, reason) in _LOGGED:
        return
    _LOGGED.add((name, reason))
    LOG.info("hyla.ops.attention: %s does not apply: %s", name, reason)
