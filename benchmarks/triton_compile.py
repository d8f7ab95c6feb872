"""Compile hyla's Triton HYLA kernels for a GPU architecture without a GPU, as a launch would: what
tests/ops/test_triton_attention.py checks the kernels' shared memory with and
bench_triton_attention.py reports the kernels' resources with. Not a benchmark itself.

    from triton_compile import compile_kernels   # with benchmarks/ on sys.path
"""

from __future__ import annotations

import torch
import triton
from triton.backends.compiler import GPUTarget

from hyla.ops.kernels.triton_hyla import (
    DEFAULT_NUM_STAGES,
    DEFAULT_NUM_WARPS,
    TILES,
    _hyla_backward_kernel,
    _hyla_forward_kernel,
    _launch_args,
)

# The most shared memory one block may use (opt-in), by compute capability: what compile_kernels
# checks a tile against without a GPU (a launch asks the device itself).
SHARED_MEMORY_PER_BLOCK = {80: 166912, 86: 101376, 87: 166912, 89: 101376, 90: 232448}
POINTER_TYPES = {torch.float32: "*fp32", torch.bfloat16: "*bf16", torch.float16: "*fp16", torch.uint8: "*u8"}


def compile_kernels(
    q,
    k,
    v,
    *,
    normalization,
    activation="relu",
    bias=None,
    mask=None,
    dropout_mask=None,
    tiles=None,
    num_warps=DEFAULT_NUM_WARPS,
    num_stages=DEFAULT_NUM_STAGES,
    arch=90,
):
    """Compile the forward and backward kernels for CUDA compute capability `arch` (90: H100)
    without a GPU, as a launch on these inputs would (meta tensors will do): each kernel with the
    first of `tiles` (default TILES[dtype]) whose shared memory fits SHARED_MEMORY_PER_BLOCK[arch].
    Returns {"forward": CompiledKernel, "backward": CompiledKernel} (a bias gets a gradient), each
    with its `tile`; raises ValueError when no tile fits."""
    tiles = tiles or TILES[q.dtype]
    pointer_dtypes = _pointer_dtypes(q, k, v, bias, dropout_mask)
    kernels = dict(
        forward=(_hyla_forward_kernel, {}),
        backward=(_hyla_backward_kernel, dict(GRAD_BIAS=bias is not None, GRAD_BIAS_SHARED=True)),
    )
    compiled = {}
    for name, (kernel, extra) in kernels.items():
        for tile in tiles:
            constexprs = _launch_args(q, k, v, bias, mask, dropout_mask, normalization, activation, tile)[2]
            values = {**constexprs, "UPCAST": False, **extra}
            signature = {arg: _argument_type(arg, values, pointer_dtypes) for arg in kernel.arg_names}
            source = triton.compiler.ASTSource(fn=kernel, signature=signature, constexprs=values)
            binary = triton.compile(
                source, target=GPUTarget("cuda", arch, 32), options=dict(num_warps=num_warps, num_stages=num_stages)
            )
            if binary.metadata.shared <= SHARED_MEMORY_PER_BLOCK[arch]:
                binary.tile = tile
                compiled[name] = binary
                break
        else:
            raise ValueError(f"no tile of {tiles} fits the {name} kernel into sm_{arch}'s shared memory")
    return compiled


def _pointer_dtypes(q, k, v, bias, dropout_mask) -> dict[str, torch.dtype]:
    """The dtype each kernel pointer points to (by parameter name), as a launch on these inputs passes them."""
    return dict(
        q_ptr=q.dtype,
        k_ptr=k.dtype,
        v_ptr=v.dtype,
        mask_ptr=torch.uint8,
        out_ptr=q.dtype,
        bias_ptr=q.dtype if bias is None else bias.dtype,
        grad_out_ptr=q.dtype,
        drop_ptr=q.dtype if dropout_mask is None else dropout_mask.dtype,
        grad_k_ptr=k.dtype,
        grad_q_ptr=torch.float32,
        grad_v_ptr=torch.float32,
        grad_bias_ptr=torch.float32,
    )


def _argument_type(arg: str, constexprs: dict, pointer_dtypes: dict[str, torch.dtype]) -> str:
    """Triton's type of the kernel parameter `arg` in an ahead-of-time signature."""
    if arg in constexprs:
        return "constexpr"
    if arg.endswith("_ptr"):
        return POINTER_TYPES[pointer_dtypes[arg]]
    return "fp32" if arg == "scale" else "i32"
