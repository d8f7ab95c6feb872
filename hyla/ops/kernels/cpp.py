"""HYLA on the CPU as one C++ kernel (`hyla_cpu.cpp`), forward and backward; multi-head attention
(the linear value network) too.

The paper's models have per-head dimensions of 2 and 4, so every PyTorch form of HYLA spends its
time on tiny matrix products or on passes over the [B, H, Tq, Tk] scores, not on arithmetic. The
kernel instead takes one batch element per thread and, for each query, 16 keys at a time, one
per vector lane (an AVX-512 register of float32; 8 keys, an AVX2 register, on a CPU without
AVX-512). Per query q and key j, all in registers:

    s[h] = <q[q, h, :], k[j, h, :]> / sqrt(Dk) + bias[h, q, j]     the latent code, all heads
    c    = rsqrt(mean_h s[h]^2 + eps) * f[q, j]                    (rms_head; c = f for none)
    z[d] = c * sum_h s[h] v[j, h, d],  u = act(z)                  layer 1: a sum over the heads
    y[q, h, d] += s[h] * c * u[d]                                  layer 2: a sum over the keys

f is the attention-dropout scale and 0 where the mask is False (a masked or dropped pair
contributes nothing, as in the reference). With the linear value network (`value_network="linear"`,
`auto` takes it as `cpp_linear`, HYLA_CPP_LINEAR=0 turns that off) the same scores and c give

    y[q, h, d] += c * s[h] * v[j, h, d]                            a sum over the keys
 The backward recomputes each pair from q, k and v
instead of storing anything of size [B, H, Tq, Tk]. Same values as `attention_naive` up to float
rounding; tests/ops/test_attention.py compares outputs and gradients in float64 and float32.
What it gains in training steps/s is in the speed ledger, docs/speed.md.

The kernel is compiled on first use with the system C++ compiler (`$CXX`, else `c++`) for this
CPU (`-march=native`, OpenMP), in one library with the GELU kernel (`gelu_cpu.cpp`,
hyla/ops/kernels/gelu.py), and cached under `$HYLA_CACHE/kernels` by a key of the sources, the
compiler and the CPU, so a machine compiles it once. Without a working compiler, when the build
fails or the cached library does not load (it is rebuilt once), it is unavailable: hyla warns
once with the reason and `attention(implementation="auto")` takes the PyTorch paths, as it does
with HYLA_CPP_KERNEL=0 (hyla.ops.dispatch: the switch keeps `auto` from taking the kernel). A
failed build is remembered beside the library (`hyla_cpu-<key>.failed`), so the processes of a
sweep do not each retry it; delete that file to retry.
"""

from __future__ import annotations

import ctypes
import functools
import hashlib
import math
import os
import platform
import shutil
import subprocess
import sys
import warnings
from pathlib import Path

import torch

from hyla.ops.kernels.common import as_4d, per_pair, shared_by_heads
from hyla.ops.kernels.naive import RMS_EPS
from hyla.ops.registration import register_operator
from hyla.ops.torch_internals import constant_under_compile
from hyla.utils import switches

SOURCES = tuple(Path(__file__).with_name(name) for name in ("hyla_cpu.cpp", "gelu_cpu.cpp"))
# Tried in turn: the first set that compiles is used (OpenMP or -march=native may be missing).
FLAG_SETS = (("-march=native", "-fopenmp"), ("-fopenmp",), ("-march=native",), ())
BASE_FLAGS = ("-O3", "-fno-math-errno", "-Wno-psabi", "-std=c++17", "-shared", "-fPIC")  # (no errno: sqrt vectorizes)
NORMALIZATIONS = ("rms_head", "none")
ACTIVATIONS = ("relu", "identity")
VALUE_NETWORKS = ("mlp", "linear")
DTYPES = (torch.float32, torch.float64)
MAX_HEADS, MAX_V_DIM = 256, 64  # the kernel's stack arrays (hyla_cpu.cpp)


class _Args(ctypes.Structure):
    """`HylaArgs` of hyla_cpu.cpp, field for field (all 8 bytes wide: no padding)."""

    _fields_ = (
        [(name, ctypes.c_int64) for name in ("batch", "q_len", "k_len", "heads", "qk_dim", "v_dim")]
        + [(name, ctypes.c_void_p) for name in ("q", "k", "v", "bias", "factor")]
        + [(name, ctypes.c_int64) for name in ("bias_per_example", "factor_per_example")]
        + [("scale", ctypes.c_double), ("eps", ctypes.c_double)]
        + [(name, ctypes.c_int64) for name in ("rms_head", "relu", "threads")]
        + [(name, ctypes.c_void_p) for name in ("out", "grad_y", "grad_q", "grad_k", "grad_v", "grad_bias")]
        + [(f"bias_stride_{axis}", ctypes.c_int64) for axis in "bhqk"]
        + [("linear", ctypes.c_int64)]
    )


def _compiler() -> str | None:
    return os.environ.get("CXX") or shutil.which("c++") or shutil.which("g++") or shutil.which("clang++")


def _cpu_identity() -> str:
    """What -march=native depends on: the CPU model and its instruction-set flags."""
    try:
        info = Path("/proc/cpuinfo").read_text()
        return "\n".join(
            line for line in info.splitlines()[:40] if line.startswith(("model name", "flags", "Features"))
        )
    except OSError:
        return platform.processor() + platform.machine()


def _build(compiler: str, target: Path) -> str | None:
    """Compile SOURCES into `target`; None on success, else the compiler's last error line."""
    target.parent.mkdir(parents=True, exist_ok=True)
    partial = target.with_name(f"{target.name}.{os.getpid()}.partial")
    error = "no flag set compiled"
    for flags in FLAG_SETS:
        command = [compiler, *BASE_FLAGS, *flags, *map(str, SOURCES), "-o", str(partial)]
        result = subprocess.run(command, capture_output=True, text=True, check=False)
        if result.returncode == 0:
            os.replace(partial, target)  # atomic: concurrent builders each write their own partial
            return None
        error = (result.stderr.strip().splitlines() or ["(no output)"])[-1]
    return error


def _unavailable(reason: str) -> None:
    """Warn (once per process: `_library` is cached) why HYLA on the CPU takes the PyTorch paths."""
    warnings.warn(
        f"hyla: the C++ HYLA kernel is unavailable ({reason}); HYLA on the CPU uses the PyTorch "
        "implementations, with the same math",
        stacklevel=4,
    )


def _cache_key(compiler: str) -> str | None:
    """What the built library depends on: sources, compiler, its version, the CPU, the flags."""
    try:
        version = subprocess.run([compiler, "--version"], capture_output=True, text=True, check=False).stdout
    except OSError as error:  # CXX names nothing runnable
        _unavailable(f"cannot run the compiler {compiler!r}: {error.strerror or error}")
        return None
    return hashlib.sha256(
        b"\0".join(
            x.encode()
            for x in (
                *(source.read_text() for source in SOURCES),
                compiler,
                version,
                _cpu_identity(),
                repr((BASE_FLAGS, FLAG_SETS)),
            )
        )
    ).hexdigest()[:16]


def _load(target: Path) -> ctypes.CDLL:
    """The built library with its entry points typed; OSError or AttributeError if damaged."""
    library = ctypes.CDLL(str(target))
    for name in ("hyla_forward_f32", "hyla_forward_f64", "hyla_backward_f32", "hyla_backward_f64"):
        getattr(library, name).argtypes = [ctypes.POINTER(_Args)]
        getattr(library, name).restype = ctypes.c_int
    pointer, count = ctypes.c_void_p, ctypes.c_int64
    library.gelu_tanh_forward_f32.argtypes = [pointer, pointer, count, count]  # x, y, n, threads
    library.gelu_tanh_backward_f32.argtypes = [pointer, pointer, pointer, count, count]  # x, grad_y, grad_x, ...
    for name in ("gelu_tanh_forward_f32", "gelu_tanh_backward_f32"):
        getattr(library, name).restype = None
    return library


def _remember_failure(record: Path, reason: str) -> None:
    try:
        record.parent.mkdir(parents=True, exist_ok=True)
        record.write_text(reason + "\n")
    except OSError:  # a full disk, say: the next process tries again
        pass


@functools.cache
def _library() -> ctypes.CDLL | None:
    """The kernel library, built on first use and cached per key. A failed build is remembered in
    `<key>.failed` (a sweep's processes do not retry it; delete the file to retry); a damaged
    cached library is rebuilt once."""
    compiler = _compiler()
    if compiler is None:
        _unavailable("no C++ compiler found: set $CXX or install c++")
        return None
    key = _cache_key(compiler)
    if key is None:
        return None
    target = switches().cache / "kernels" / f"hyla_cpu-{key}.so"
    failed = target.with_suffix(".failed")
    if failed.exists():
        _unavailable(f"an earlier build failed, {failed}: {failed.read_text().strip()}")
        return None
    for attempt in ("cached", "rebuilt"):
        if attempt == "rebuilt" or not target.exists():
            print(
                f"hyla: compiling the C++ HYLA kernel with {compiler} (once per machine, a few seconds)",
                file=sys.stderr,
                flush=True,
            )
            error = _build(compiler, target)
            if error is not None:
                _remember_failure(failed, f"{compiler}: {error}")
                _unavailable(f"it did not compile with {compiler}: {error}")
                return None
        try:
            library = _load(target)
        except (OSError, AttributeError) as error:
            if attempt == "rebuilt":
                _remember_failure(failed, f"the built library does not load: {error}")
                _unavailable(f"the built library does not load: {error}")
                return None
            continue
        _register_compiled_operators()
        return library


def library() -> ctypes.CDLL | None:
    """The built library (compiling it on the first call), None where it is unavailable."""
    return _library()


@constant_under_compile  # torch.compile calls it once while tracing (it may run the compiler)
def available() -> bool:
    """Whether the kernel can run here (compiling it on the first call)."""
    return _library() is not None


def covers(
    q: torch.Tensor,
    v: torch.Tensor,
    normalization: str,
    activation: str,
    bias: torch.Tensor | None,
    mask: torch.Tensor | None,
    dropout_mask: torch.Tensor | None,
    value_network: str = "mlp",
) -> bool:
    """Whether `hyla_cpp` takes these inputs (without compiling anything); the activation matters
    for the mlp value network only."""
    batch = q.shape[0]
    return (
        q.device.type == "cpu"
        and q.dtype in DTYPES
        and v.dtype == q.dtype
        and normalization in NORMALIZATIONS
        and value_network in VALUE_NETWORKS
        and (activation in ACTIVATIONS or value_network == "linear")
        and q.shape[2] <= MAX_HEADS
        and v.shape[-1] <= MAX_V_DIM
        and (bias is None or bias.dtype == q.dtype and _batch_axis_fits(bias, batch))
        and _foldable(mask, batch)
        and _foldable(dropout_mask, batch)
    )


def _batch_axis_fits(t: torch.Tensor, batch: int) -> bool:
    """Whether a tensor broadcastable to [B, H, Tq, Tk] has a batch axis of 1 or B (or none)."""
    return t.ndim < 4 or t.shape[0] in (1, batch)


def _foldable(t: torch.Tensor | None, batch: int) -> bool:
    """Whether a mask or dropout mask folds into the kernel's per-pair factor [1|B, Tq, Tk]: the same
    for every head, with a batch axis of 1 or B (None: nothing to fold)."""
    return t is None or shared_by_heads(t) and _batch_axis_fits(t, batch)


def hyla_cpp(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    normalization: str,
    activation: str = "relu",
    bias: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    dropout_mask: torch.Tensor | None = None,
    value_network: str = "mlp",
) -> torch.Tensor:
    """HYLA output [B, Tq, H, Dv] (the `mlp` value network), or multi-head attention's (`linear`),
    equal to the naive form up to rounding.

    q [B, Tq, H, Dk], k [B, Tk, H, Dk], v [B, Tk, H, Dv]: float32 or float64 CPU tensors;
    normalization rms_head | none; activation relu | identity (mlp only); bias broadcastable to
    [B, H, Tq, Tk]; mask and dropout_mask broadcastable to [B, 1, Tq, Tk] (shared by the heads).
    """
    if k.dtype != q.dtype or not covers(q, v, normalization, activation, bias, mask, dropout_mask, value_network):
        raise ValueError(
            "hyla_cpp takes float32/float64 CPU inputs of one dtype, normalization rms_head or none, value network "
            f"mlp (activation relu or identity) or linear, at most {MAX_HEADS} heads and value dimension "
            f"{MAX_V_DIM}, and a mask and dropout mask shared by the heads"
        )
    if not available():
        raise RuntimeError("the C++ HYLA kernel is not available here (see the warning)")
    _, q_len, heads, qk_dim = q.shape
    k_len = k.shape[1]
    bias_t = None
    if bias is not None:
        bias = as_4d(bias)
        bias_t = bias.expand(bias.shape[0], heads, q_len, k_len)  # [1|B, H, Tq, Tk], a view: read by strides
    factor = None  # [1|B, Tq, Tk]: the attention-dropout scale, 0 where masked
    for t in (mask, dropout_mask):
        if t is not None:
            t = per_pair(t, q_len, k_len).to(q.dtype)
            factor = t if factor is None else factor * t
    return _CppHyla.apply(
        q.contiguous(),
        k.contiguous(),
        v.contiguous(),
        bias_t,
        None if factor is None else factor.contiguous(),
        1.0 / math.sqrt(qk_dim),
        normalization == "rms_head",
        activation == "relu" and value_network == "mlp",
        value_network == "linear",
    )


def _arguments(q, k, v, bias, factor, scale, rms_head, relu, linear) -> _Args:
    batch, q_len, heads, qk_dim = q.shape

    def pointer(t):
        return None if t is None else t.data_ptr()

    def per_example(t):  # 1 when the tensor differs across the batch
        return int(t is not None and t.shape[0] > 1)

    args = _Args(
        batch,
        q_len,
        k.shape[1],
        heads,
        qk_dim,
        v.shape[-1],
        pointer(q),
        pointer(k),
        pointer(v),
        pointer(bias),
        pointer(factor),
        per_example(bias),
        per_example(factor),
        scale,
        RMS_EPS,
        int(rms_head),
        int(relu),
        torch.get_num_threads(),
    )
    args.linear = int(linear)
    if bias is not None:
        args.bias_stride_b, args.bias_stride_h, args.bias_stride_q, args.bias_stride_k = bias.stride()
    return args


def _run(direction: str, args: _Args, dtype: torch.dtype) -> None:
    bits = 32 if dtype == torch.float32 else 64
    if getattr(_library(), f"hyla_{direction}_f{bits}")(ctypes.byref(args)) != 0:
        raise ValueError(f"hyla_cpp: at most {MAX_HEADS} heads and value dimension {MAX_V_DIM}")


def _forward(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    factor: torch.Tensor | None,
    scale: float,
    rms_head: bool,
    relu: bool,
    linear: bool,
) -> torch.Tensor:
    """q [B, Tq, H, Dk], k [B, Tk, H, Dk], v [B, Tk, H, Dv] (contiguous) -> y [B, Tq, H, Dv]."""
    out = _forward_shape(q, k, v, bias, factor, scale, rms_head, relu, linear)
    args = _arguments(q, k, v, bias, factor, scale, rms_head, relu, linear)
    args.out = out.data_ptr()
    _run("forward", args, q.dtype)
    return out


def _backward(
    grad_y: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    factor: torch.Tensor | None,
    scale: float,
    rms_head: bool,
    relu: bool,
    linear: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    """Gradients of q, k, v and bias (an empty tensor without a bias)."""
    grad_y = grad_y.contiguous()
    grad_q, grad_k, grad_v, grad_bias = _backward_shape(grad_y, q, k, v, bias, factor, scale, rms_head, relu, linear)
    args = _arguments(q, k, v, bias, factor, scale, rms_head, relu, linear)
    args.grad_y, args.grad_q, args.grad_k, args.grad_v = (t.data_ptr() for t in (grad_y, grad_q, grad_k, grad_v))
    args.grad_bias = None if bias is None else grad_bias.data_ptr()
    _run("backward", args, q.dtype)
    return grad_q, grad_k, grad_v, grad_bias


def _forward_shape(q, k, v, bias, factor, scale, rms_head, relu, linear):
    """The output, allocated (the real call fills it; torch.compile traces with it)."""
    return q.new_empty(q.shape[0], q.shape[1], q.shape[2], v.shape[-1])


def _backward_shape(grad_y, q, k, v, bias, factor, scale, rms_head, relu, linear):
    return (
        torch.empty_like(q),
        torch.empty_like(k),
        torch.empty_like(v),
        q.new_empty(0) if bias is None else q.new_empty(bias.shape),  # contiguous, whatever the bias's strides
    )


# Both as opaque operators for torch.compile, which cannot trace a ctypes call (see
# hyla.ops.registration). Registered when the library first loads, once per process.
_SIGNATURE = (
    "Tensor q, Tensor k, Tensor v, Tensor? bias, Tensor? factor, float scale, bool rms_head, bool relu, bool linear"
)


def _register_compiled_operators() -> None:
    register_operator("cpp_forward", f"({_SIGNATURE}) -> Tensor", _forward, _forward_shape)
    register_operator(
        "cpp_backward", f"(Tensor grad_y, {_SIGNATURE}) -> (Tensor, Tensor, Tensor, Tensor)", _backward, _backward_shape
    )


def _operator(name: str):
    """The kernel call: the registered operator while torch.compile traces, else the function itself."""
    if torch.compiler.is_compiling():
        return getattr(torch.ops.hyla, f"cpp_{name}").default
    return {"forward": _forward, "backward": _backward}[name]


class _CppHyla(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, bias, factor, scale, rms_head, relu, linear):
        ctx.save_for_backward(q, k, v, bias, factor)
        ctx.config = (scale, rms_head, relu, linear)
        return _operator("forward")(q, k, v, bias, factor, scale, rms_head, relu, linear)

    @staticmethod
    def backward(ctx, grad_y):
        q, k, v, bias, factor = ctx.saved_tensors
        grad_q, grad_k, grad_v, grad_bias = _operator("backward")(grad_y, q, k, v, bias, factor, *ctx.config)
        return grad_q, grad_k, grad_v, None if bias is None else grad_bias, None, None, None, None, None
