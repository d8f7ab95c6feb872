"""HYLA (the `mlp` value network) as fused Triton kernels, forward and backward, for the GPU.

One program owns a tile of queries (forward) or of keys (backward) for ALL heads, because the
`rms_head` normalization and the generated first layer both act across the heads of a query-key
pair. It loops over the other axis in tiles and keeps everything per pair in registers:

    s [H, BQ, BK] = q k^T / sqrt(Dk) + bias            (masked entries -> 0)
    w [H, BQ, BK] = s * rsqrt(mean_h s^2 + eps) * dropout    (rms_head; `none`: s * dropout)
    z [BK, BQ, Dv] = sum_h w v         u = act(z)       (layer 1: a batched product over keys)
    y [BQ, H, Dv] += sum_k w u                            (layer 2: a batched product over queries)

so neither the hidden tensor [B, Tq, Tk, Dv] nor the scores [B, H, Tq, Tk] ever reach global
memory. The value dimensions are independent through both layers, so they are split into chunks
of BD (the forward runs one program per chunk). The backward recomputes a tile's codes and hidden
layer (as `hyla_streamed` recomputes a key block), keeps the key gradients of its key tile in
registers, adds its value gradients chunk by chunk into a float32 buffer that no other program
writes, and adds the query gradients of every query tile into a float32 buffer with atomics. It
loads the q and k tiles again (from L2) for each product instead of keeping them across its loop:
a tile kept is a shared-memory buffer that lives through the loop, and the float32 backward would
then not fit the 99 KiB of an sm_86/sm_89 GPU.
Memory: the inputs, the output, those two buffers and, only when the bias needs a gradient, one
float32 [B or 1, H, Tq, Tk].

Heads are padded to a power of two, at least 8, for the scores (heads are the batch axis of
those products) and to at least 16 for the two layers (heads are a side of those products, and 16
is the smallest side of a tensor-core product); the padded heads have zero queries, keys, values
and codes and do not enter the RMS mean. Every product is exact float32 (`input_precision="ieee"`):
bfloat16/float16 inputs, and the codes and hidden layer rounded to that dtype as the naive form
rounds them, are widened to float32 first: on an H100 with Triton 3.6 the tensor-core products
(bfloat16 inputs, or TF32) gave wrong outputs (relative errors ~2) while exact float32 matched
the reference (experiments/RESULTS.md, the GPU suite on one H100 with Triton 3.6).

The kernels sit beside this module: `triton_hyla_forward` (the tile helpers and the forward kernel)
and `triton_hyla_backward`; this module launches them and makes them one autograd operator.
CPU tensors work in Triton's interpreter (`TRITON_INTERPRET=1` set before this module is first
imported): that is how the tests run without a GPU. Same values as `attention_naive` up to
rounding; tested against it on outputs and gradients (tests/ops/test_attention.py).
"""

from __future__ import annotations

import math

import torch
import triton
from triton.runtime.errors import OutOfResources

from hyla.ops.kernels.common import (
    TRITON_DTYPES,
    TRITON_MAX_HEAD_DIM,
    TRITON_NORMALIZATIONS,
    as_4d,
    record_fallback,
)
from hyla.ops.kernels.naive import attention_naive
from hyla.ops.kernels.streamed import hyla_streamed
from hyla.ops.kernels.triton_hyla_backward import _hyla_backward_kernel
from hyla.ops.kernels.triton_hyla_forward import _hyla_forward_kernel

ACTIVATION_CODES = {"identity": 0, "relu": 1, "gelu": 2, "silu": 3, "sigmoid": 4, "tanh": 5}
MIN_DOT = 16  # the smallest side of a tensor-core product
# Tiles (block_q, block_k, block_v) tried in turn until one fits the GPU's shared memory per block:
# a value chunk of 32 recomputes the scores half as often as 16, but its float32 backward needs
# more shared memory than the 99 KiB of sm_86/sm_89 GPUs (RTX 30/40, A6000, L4, L40).
TILES = {
    torch.float32: ((16, 16, 16),),
    torch.bfloat16: ((16, 16, 32), (16, 16, 16)),
    torch.float16: ((16, 16, 32), (16, 16, 16)),
}
DEFAULT_NUM_WARPS = 8
DEFAULT_NUM_STAGES = 1


# ----------------------------------------------------------------------------- launch and autograd


def _interpreted() -> bool:
    return type(_hyla_forward_kernel).__name__ == "InterpretedFunction"


def _pair_strides(t: torch.Tensor | None, shape: tuple[int, int, int, int]) -> tuple[int, int, int, int]:
    """Strides of a tensor broadcastable to [B, H, Tq, Tk] as a [B, H, Tq, Tk] view (0 = broadcast)."""
    if t is None:
        return (0, 0, 0, 0)
    return as_4d(t).expand(shape).stride()


def _launch_args(q, k, v, bias, mask, dropout_mask, normalization, activation, blocks):
    """(tensor args, scalar args, constexprs) shared by the forward and backward kernels."""
    batch, q_len, heads, k_dim = q.shape
    k_len, v_dim = k.shape[1], v.shape[-1]
    shape = (batch, heads, q_len, k_len)
    # bool has no Triton pointer type on every version: read the mask as bytes (same storage)
    mask_bytes = None if mask is None else mask.view(torch.uint8)
    pointers = [t if t is not None else q for t in (bias, mask_bytes, dropout_mask)]
    strides = [s for t in (bias, mask_bytes, dropout_mask) for s in _pair_strides(t, shape)]
    constexprs = dict(
        H=heads,
        DK=k_dim,
        DV=v_dim,
        HS=max(MIN_DOT // 2, triton.next_power_of_2(heads)),
        HP=max(MIN_DOT, triton.next_power_of_2(heads)),
        DKP=max(MIN_DOT, triton.next_power_of_2(k_dim)),
        BD=min(blocks[2], max(MIN_DOT, triton.next_power_of_2(v_dim))),
        BQ=blocks[0],
        BK=blocks[1],
        ACT=ACTIVATION_CODES[activation],
        RMS=normalization == "rms_head",
        HAS_BIAS=bias is not None,
        HAS_MASK=mask is not None,
        HAS_DROP=dropout_mask is not None,
        PRECISION="ieee",
        UPCAST=q.dtype != torch.float32 or _interpreted(),
    )
    return pointers, [q_len, k_len, 1.0 / math.sqrt(k_dim), *strides], constexprs


def _forward(q, k, v, bias, mask, dropout_mask, normalization, activation, tiles, num_warps, num_stages):
    """out [B, Tq, H, Dv] from the forward kernel, or from the PyTorch form if no tile launches."""
    try:
        return _launch_forward(
            q, k, v, bias, mask, dropout_mask, normalization, activation, tiles, num_warps, num_stages
        )
    except Exception as error:  # compile, resources, driver or an older Triton: same math in PyTorch
        _fell_back(error)
        return hyla_streamed(
            q, k, v, normalization=normalization, activation=activation, bias=bias, mask=mask, dropout_mask=dropout_mask
        )


def _backward(
    grad_out, q, k, v, bias, mask, dropout_mask, normalization, activation, tiles, num_warps, num_stages, want_bias
):
    """(grad q, grad k, grad v, grad bias) from the backward kernel, or from the naive form's vjp: if
    no tile launches, or in deterministic mode (the kernel adds with atomics)."""
    if not torch.are_deterministic_algorithms_enabled():
        try:
            return _launch_backward(
                grad_out,
                q,
                k,
                v,
                bias,
                mask,
                dropout_mask,
                normalization,
                activation,
                tiles,
                num_warps,
                num_stages,
                want_bias,
            )
        except Exception as error:
            _fell_back(error)
    else:
        _fell_back(RuntimeError("deterministic mode: the Triton backward adds with atomics"))

    # (torch.func.vjp: a custom operator's body runs below autograd; the naive form keeps [B, Tq, Tk, Dv])
    def output(q, k, v, bias):
        return attention_naive(
            q,
            k,
            v,
            normalization=normalization,
            value_network="mlp",
            activation=activation,
            bias=bias,
            mask=mask,
            dropout_mask=dropout_mask,
        )[0]

    if want_bias:
        return torch.func.vjp(output, q, k, v, bias)[1](grad_out.to(q.dtype))
    grad_q, grad_k, grad_v = torch.func.vjp(lambda q, k, v: output(q, k, v, bias), q, k, v)[1](grad_out.to(q.dtype))
    return grad_q, grad_k, grad_v, q.new_empty(0, dtype=torch.float32)


def _fell_back(error: Exception) -> None:
    """Warn once per reason, and record that the PyTorch form ran instead of the kernels."""
    reason = f"{type(error).__name__}: {str(error).strip().splitlines()[0] if str(error).strip() else ''}"
    record_fallback("triton", reason)


def _launch(kernel, grid, tensors, scalars, constexprs_for, tiles, num_warps, num_stages):
    """Launch `kernel` with the first tile of `tiles` that fits the device (a tile that runs out of
    shared memory or registers is remembered and skipped). Returns the tile that ran."""
    error = None
    for tile in tiles:
        key = (id(kernel), tile, *tensors[0].shape[2:], tensors[0].dtype, tensors[0].device)
        if key in _TOO_LARGE:
            continue
        try:
            kernel[grid(tile)](*tensors, *scalars, **constexprs_for(tile), num_warps=num_warps, num_stages=num_stages)
            return tile
        except OutOfResources as e:
            _TOO_LARGE.add(key)
            error = e
    raise error or RuntimeError("no tile fits this GPU")


_TOO_LARGE: set = set()


def _launch_forward(q, k, v, bias, mask, dropout_mask, normalization, activation, tiles, num_warps, num_stages):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    out = torch.empty(*q.shape[:3], v.shape[-1], dtype=q.dtype, device=q.device)  # [B, Tq, H, Dv]

    def launch_args(tile):
        return _launch_args(q, k, v, bias, mask, dropout_mask, normalization, activation, tile)

    pointers, scalars, _ = launch_args(tiles[0])

    def grid(tile):
        return (triton.cdiv(q.shape[1], tile[0]), q.shape[0], triton.cdiv(v.shape[-1], launch_args(tile)[2]["BD"]))

    _launch(
        _hyla_forward_kernel,
        grid,
        [q, k, v, *pointers, out],
        scalars,
        lambda tile: launch_args(tile)[2],
        tiles,
        num_warps,
        num_stages,
    )
    return out


def _launch_backward(
    grad_out, q, k, v, bias, mask, dropout_mask, normalization, activation, tiles, num_warps, num_stages, want_bias
):
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    batch, q_len, heads, _ = q.shape
    pointers, scalars, _ = _launch_args(q, k, v, bias, mask, dropout_mask, normalization, activation, tiles[0])
    # float32 accumulators: grad q by atomics, grad v by chunks added over the query tiles
    grad_q = torch.zeros(q.shape, dtype=torch.float32, device=q.device)
    grad_v = torch.zeros(v.shape, dtype=torch.float32, device=q.device)
    grad_k = torch.empty_like(k)
    bias4 = as_4d(bias)
    shared = want_bias and bias4.shape[0] == 1
    grad_bias = torch.zeros(
        (1 if shared else batch, heads, q_len, k.shape[1]) if want_bias else (0,), dtype=torch.float32, device=q.device
    )

    def constexprs_for(tile):
        constexprs = _launch_args(q, k, v, bias, mask, dropout_mask, normalization, activation, tile)[2]
        return {**constexprs, "GRAD_BIAS": want_bias, "GRAD_BIAS_SHARED": shared}

    tensors = [q, k, v, *pointers, grad_out.contiguous(), grad_q, grad_k, grad_v, grad_bias]
    _launch(
        _hyla_backward_kernel,
        lambda tile: (triton.cdiv(k.shape[1], tile[1]), batch),
        tensors,
        scalars,
        constexprs_for,
        tiles,
        num_warps,
        num_stages,
    )
    if want_bias:
        grad_bias = grad_bias.sum_to_size(bias4.shape).reshape(bias.shape).to(bias.dtype)
    return grad_q.to(q.dtype), grad_k, grad_v.to(v.dtype), grad_bias


# torch.library custom operators: torch.compile treats them as opaque (fullgraph works) and
# autograd reaches the hand-written backward through `register_autograd`. They take the tiles to try
# flattened ([bq, bk, bv, bq, ...]): an operator schema has no list of lists.


def _unflatten(tiles: list[int]) -> list[tuple[int, int, int]]:
    return [tuple(tiles[i : i + 3]) for i in range(0, len(tiles), 3)]


@torch.library.custom_op("hyla::triton_hyla_forward", mutates_args=())
def _forward_op(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    mask: torch.Tensor | None,
    dropout_mask: torch.Tensor | None,
    normalization: str,
    activation: str,
    tiles: list[int],
    num_warps: int,
    num_stages: int,
) -> torch.Tensor:
    return _forward(
        q, k, v, bias, mask, dropout_mask, normalization, activation, _unflatten(tiles), num_warps, num_stages
    )


@_forward_op.register_fake
def _(q, k, v, bias, mask, dropout_mask, normalization, activation, tiles, num_warps, num_stages):
    return q.new_empty(*q.shape[:3], v.shape[-1])


@torch.library.custom_op("hyla::triton_hyla_backward", mutates_args=())
def _backward_op(
    grad_out: torch.Tensor,
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    bias: torch.Tensor | None,
    mask: torch.Tensor | None,
    dropout_mask: torch.Tensor | None,
    normalization: str,
    activation: str,
    tiles: list[int],
    num_warps: int,
    num_stages: int,
    want_bias: bool,
) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor, torch.Tensor]:
    return _backward(
        grad_out,
        q,
        k,
        v,
        bias,
        mask,
        dropout_mask,
        normalization,
        activation,
        _unflatten(tiles),
        num_warps,
        num_stages,
        want_bias,
    )


@_backward_op.register_fake
def _(grad_out, q, k, v, bias, mask, dropout_mask, normalization, activation, tiles, num_warps, num_stages, want_bias):
    grad_bias = torch.empty_like(bias) if want_bias else q.new_empty(0, dtype=torch.float32)
    return torch.empty_like(q), torch.empty_like(k), torch.empty_like(v), grad_bias


def _setup_context(ctx, inputs, output):
    q, k, v, bias, mask, dropout_mask, *config = inputs
    ctx.save_for_backward(q, k, v, bias, mask, dropout_mask)
    ctx.config = config


def _autograd_backward(ctx, grad_out):
    q, k, v, bias, mask, dropout_mask = ctx.saved_tensors
    want_bias = bias is not None and ctx.needs_input_grad[3]
    grad_q, grad_k, grad_v, grad_bias = _backward_op(
        grad_out, q, k, v, bias, mask, dropout_mask, *ctx.config, want_bias
    )
    return (grad_q, grad_k, grad_v, grad_bias if want_bias else None) + (None,) * 7


_forward_op.register_autograd(_autograd_backward, setup_context=_setup_context)


def check_supported(q, k, v, normalization) -> None:
    """Raise a one-line error for what the kernels do not cover."""
    if normalization not in TRITON_NORMALIZATIONS:
        raise ValueError(
            f"the triton kernel supports normalization 'none' and 'rms_head', not {normalization!r} "
            "(use implementation='streamed' for softmax)"
        )
    if q.dtype not in TRITON_DTYPES:
        raise TypeError(f"the triton kernel supports float32, bfloat16 and float16, not {q.dtype}")
    if not q.dtype == k.dtype == v.dtype:
        raise TypeError(f"q, k and v must share one dtype, got {q.dtype}, {k.dtype}, {v.dtype}")
    if max(q.shape[-1], v.shape[-1]) > TRITON_MAX_HEAD_DIM:
        raise ValueError(
            f"the triton kernel supports head sizes up to {TRITON_MAX_HEAD_DIM}, got Dk={q.shape[-1]}, Dv={v.shape[-1]}"
        )


def hyla_triton(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    *,
    normalization: str,
    activation: str = "relu",
    bias: torch.Tensor | None = None,
    mask: torch.Tensor | None = None,
    dropout_mask: torch.Tensor | None = None,
    tiles: list[tuple[int, int, int]] | None = None,
    num_warps: int = DEFAULT_NUM_WARPS,
    num_stages: int = DEFAULT_NUM_STAGES,
) -> torch.Tensor:
    """HYLA output [B, Tq, H, Dv] (the `mlp` value network) from the fused kernels, equal to the naive
    form up to rounding. Normalization 'none' or 'rms_head'; CUDA tensors (or CPU tensors under
    TRITON_INTERPRET=1).

    q [B, Tq, H, Dk], k [B, Tk, H, Dk], v [B, Tk, H, Dv] (Dk, Dv <= 128); bias, mask (bool) and
    dropout_mask broadcastable to [B, H, Tq, Tk]. tiles: (block_q, block_k, block_v) tiles to try in
    turn, the first that fits the GPU runs (default TILES[dtype]): query and key tile sizes and value
    dimensions per chunk, all powers of two >= 16. num_warps: per program; num_stages: Triton's
    software pipelining depth of the tile loads.

    If no tile launches (compile error, shared memory, an unsupported GPU or Triton), or the backward
    runs in deterministic mode, it warns once and `hyla_streamed` computes the same function.
    """
    check_supported(q, k, v, normalization)
    tiles = list(tiles or TILES[q.dtype])
    for tile in tiles:
        for name, block in zip(("block_q", "block_k", "block_v"), tile):
            if block < MIN_DOT or block & (block - 1):
                raise ValueError(f"{name} must be a power of two >= {MIN_DOT}, got {block}")
    return _forward_op(
        q,
        k,
        v,
        bias,
        mask,
        dropout_mask,
        normalization,
        activation,
        [block for tile in tiles for block in tile],
        num_warps,
        num_stages,
    )
