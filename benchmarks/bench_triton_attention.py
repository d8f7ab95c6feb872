"""Long-context HYLA on the GPU: the fused Triton kernels vs naive and streamed HYLA, and vs PyTorch's
scaled-dot-product softmax attention (flash), forward+backward time and peak memory.

    python benchmarks/bench_triton_attention.py                       # T = 512 ... 16384, float32 + bfloat16
    python benchmarks/bench_triton_attention.py --lengths 512 2048 --dtypes bfloat16 --repeats 3
    python benchmarks/bench_triton_attention.py --device cpu --lengths 32 --tokens 64   # interpreter smoke run
    python benchmarks/bench_triton_attention.py --compile-report   # no GPU needed: registers, spills, shared memory

Shapes: H=8, Dk=Dv=64, a causal mask (language modeling), fixed tokens per batch (B = tokens / T),
HYLA = rms_head normalization + relu value network (the paper's). softmax_sdpa is
`F.scaled_dot_product_attention(is_causal=True)`: flash attention in bfloat16; in float32 PyTorch
falls back to its memory-efficient kernel (flash has no float32).

Correctness gates the report: at every size, before timing, the Triton outputs and gradients are
compared with streamed HYLA in float32 (itself tested against the naive form) on the same inputs
(error: max |diff| / max(max |reference|, 1), the worst of the output and the three gradients).
A case is `incorrect`, with no time reported, when that error exceeds both the dtype's tolerance
and twice the error of streamed HYLA run in the same dtype (in bfloat16 the gradients of the value
network lose a few bits in PyTorch's own computation too: 0.1-0.3 of the largest entry of grad v
at Dv=64, measured in the interpreter at T=40).
Peak memory: `torch.cuda.max_memory_allocated` during the first forward+backward, over the memory
allocated before it (inputs). Time: CUDA events, the median of --repeats runs after one warm-up.
Cases estimated to need more than --max-gib are skipped (listed as skipped).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path

import torch

LENGTHS = (512, 1024, 2048, 4096, 8192, 16384)
IMPLEMENTATIONS = ("triton", "streamed", "naive", "softmax_sdpa")
OUT = Path(__file__).parent / "results" / "triton_attention.json"
# max |triton - streamed float32| / max(max |streamed|, 1), outputs and each gradient
TOLERANCE = {"float32": 5e-3, "bfloat16": 3e-2}


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", default=list(LENGTHS))
    p.add_argument("--tokens", type=int, default=16384, help="tokens per batch: B = tokens // T (at least 1)")
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64, help="Dk = Dv")
    p.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"], choices=list(TOLERANCE))
    p.add_argument("--implementations", nargs="+", default=list(IMPLEMENTATIONS), choices=IMPLEMENTATIONS)
    p.add_argument("--device", default="cuda", help="cuda; cpu runs the kernels in Triton's interpreter (smoke test)")
    p.add_argument("--repeats", type=int, default=5)
    p.add_argument("--max-gib", type=float, default=60.0, help="skip cases estimated to need more memory")
    p.add_argument(
        "--blocks",
        type=int,
        nargs=3,
        default=None,
        metavar=("BQ", "BK", "BV"),
        help="Triton tile sizes (default: the kernel's)",
    )
    p.add_argument("--num-warps", type=int, default=None)
    p.add_argument(
        "--tf32",
        action="store_true",
        help="torch.set_float32_matmul_precision('high'): TF32 float32 products everywhere (default exact)",
    )
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument(
        "--compile-report",
        action="store_true",
        help="compile the kernels for --arch without a GPU and report their resources (JSON to --out)",
    )
    p.add_argument("--arch", type=int, default=90, help="CUDA compute capability for --compile-report (90: H100)")
    return p.parse_args(argv)


def estimated_gib(impl: str, batch: int, length: int, heads: int, dim: int, itemsize: int) -> float:
    """Rough forward+backward footprint: naive keeps [B, T, T, Dv] tensors and [B, H, T, T] scores."""
    if impl == "naive":
        return batch * length * length * (3 * dim + 6 * heads) * itemsize / 2**30
    return 12 * batch * length * heads * dim * itemsize / 2**30


def hyla_fn(impl: str, args):
    from hyla.ops import attention

    triton_options = {}
    if args.blocks:
        triton_options.update(tiles=[tuple(args.blocks)])
    if args.num_warps:
        triton_options.update(num_warps=args.num_warps)

    def run(q, k, v, mask):
        if impl == "softmax_sdpa":
            out = torch.nn.functional.scaled_dot_product_attention(
                q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2), is_causal=True
            )
            return out.transpose(1, 2)
        if impl == "triton" and triton_options:
            from hyla.ops.kernels.triton_hyla import hyla_triton

            return hyla_triton(q, k, v, normalization="rms_head", activation="relu", mask=mask, **triton_options)
        return attention(
            q, k, v, normalization="rms_head", value_network="mlp", activation="relu", mask=mask, implementation=impl
        )

    return run


def make_inputs(batch, length, heads, dim, dtype, device, seed=0):
    g = torch.Generator(device="cpu").manual_seed(seed)
    q, k, v, grad = (torch.randn(batch, length, heads, dim, generator=g).to(device, dtype) for _ in range(4))
    mask = torch.ones(length, length, dtype=torch.bool, device=device).tril()
    return q, k, v, grad, mask


def forward_backward(fn, q, k, v, grad, mask):
    leaves = [t.detach().requires_grad_() for t in (q, k, v)]
    out = fn(*leaves, mask)
    return (out.detach(), *torch.autograd.grad(out, leaves, grad))


def relative_error(actual, expected) -> float:
    return max(
        (a.double() - e.double()).abs().max().item() / max(e.double().abs().max().item(), 1.0)
        for a, e in zip(actual, expected)
    )


def measure(fn, inputs, device, repeats):
    """(peak MiB over the inputs, median seconds, all seconds) of forward+backward."""
    cuda = device == "cuda"
    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        base = torch.cuda.memory_allocated()
    forward_backward(fn, *inputs)  # warm-up (compiles the kernels) and memory
    peak = (torch.cuda.max_memory_allocated() - base) / 2**20 if cuda else None
    times = []
    for _ in range(repeats):
        if cuda:
            start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
            start.record()
            forward_backward(fn, *inputs)
            end.record()
            torch.cuda.synchronize()
            times.append(start.elapsed_time(end) / 1e3)
        else:
            t0 = time.perf_counter()
            forward_backward(fn, *inputs)
            times.append(time.perf_counter() - t0)
    return peak, sorted(times)[len(times) // 2], times


def run_case(impl, length, dtype_name, args, reference):
    dtype = getattr(torch, dtype_name)
    batch = max(1, args.tokens // length)
    row = dict(implementation=impl, length=length, batch=batch, dtype=dtype_name)
    if estimated_gib(impl, batch, length, args.heads, args.head_dim, dtype.itemsize) > args.max_gib:
        return dict(row, status="skipped (memory estimate above --max-gib)")
    inputs = make_inputs(batch, length, args.heads, args.head_dim, dtype, args.device)
    fn = hyla_fn(impl, args)
    try:
        if impl == "triton":
            expected = reference(inputs)
            error = relative_error(forward_backward(fn, *inputs), expected)
            same_dtype_error = relative_error(forward_backward(hyla_fn("streamed", args), *inputs), expected)
            row.update(relative_error_vs_streamed=error, streamed_same_dtype_error=same_dtype_error)
            if not error <= max(TOLERANCE[dtype_name], 2 * same_dtype_error):
                return dict(row, status="incorrect: no time reported")
        peak, median, times = measure(fn, inputs, args.device, args.repeats)
    except torch.OutOfMemoryError:
        return dict(row, status="out of memory")
    finally:
        if args.device == "cuda":
            torch.cuda.empty_cache()
    return dict(row, status="ok", peak_mib=peak, seconds=median, times_s=times)


def print_table(rows):
    print(f"{'dtype':9} {'impl':13} {'T':>6} {'B':>4} {'time s':>10} {'peak MiB':>10}  status")
    for r in rows:
        t = f"{r['seconds']:.4g}" if "seconds" in r else "-"
        m = f"{r['peak_mib']:.0f}" if r.get("peak_mib") is not None else "-"
        print(
            f"{r['dtype']:9} {r['implementation']:13} {r['length']:>6} {r['batch']:>4} {t:>10} {m:>10}  {r['status']}"
        )


def kernel_resources(compiled):
    """Registers, spill stack and shared memory of a kernel compiled by `triton_compile.compile_kernels`."""
    import subprocess
    import tempfile

    import triton

    with tempfile.NamedTemporaryFile(suffix=".cubin") as f:
        f.write(compiled.asm["cubin"])
        f.flush()
        cuobjdump = Path(triton.__file__).parent / "backends" / "nvidia" / "bin" / "cuobjdump"
        usage = subprocess.run([str(cuobjdump), "--dump-resource-usage", f.name], capture_output=True, text=True).stdout
    fields = dict(item.split(":") for line in usage.splitlines() if "REG:" in line for item in line.split())
    return dict(
        registers=int(fields["REG"]), spill_stack_bytes=int(fields["STACK"]), shared_bytes=compiled.metadata.shared
    )


def compile_report(args):
    """Resources of the forward and backward kernels at the benchmark's head sizes for each dtype
    and tile configuration, compiled for one GPU architecture on this machine, with a bias (with a
    gradient), a mask and a dropout mask."""
    from triton_compile import compile_kernels

    from hyla.ops.kernels import triton_hyla as th

    configs = (
        [tuple(args.blocks) + (args.num_warps or th.DEFAULT_NUM_WARPS,)]
        if args.blocks
        else [(16, 16, 16, 8), (16, 16, 32, 4), (16, 16, 32, 8), (32, 16, 32, 8), (32, 32, 16, 8)]
    )
    rows = []
    for dtype_name in args.dtypes:
        q = torch.empty(1, 64, args.heads, args.head_dim, dtype=getattr(torch, dtype_name), device="meta")
        pair = torch.empty(64, 64, device="meta")
        for block_q, block_k, block_v, warps in configs:
            try:
                compiled = compile_kernels(
                    q,
                    q,
                    q,
                    normalization="rms_head",
                    bias=pair,
                    mask=pair.bool(),
                    dropout_mask=pair,
                    tiles=[(block_q, block_k, block_v)],
                    num_warps=warps,
                    arch=args.arch,
                )
            except ValueError as error:  # too large for this GPU
                print(error, flush=True)
                continue
            for name, kernel in compiled.items():
                row = dict(
                    kernel=name,
                    dtype=dtype_name,
                    block_q=block_q,
                    block_k=block_k,
                    block_v=block_v,
                    num_warps=warps,
                    products="ieee",
                    **kernel_resources(kernel),
                )
                rows.append(row)
                print(row, flush=True)
    return rows


def main(argv=None):
    args = parse_args(argv)
    if args.tf32:
        torch.set_float32_matmul_precision("high")
    if args.compile_report:
        write_compile_report(args)
        return
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # before hyla.ops.kernels.triton_hyla imports triton
    elif not torch.cuda.is_available():
        sys.exit("no CUDA device: run on a GPU, or --device cpu for an interpreter smoke run")
    import triton

    rows = run_cases(args)
    result = dict(
        benchmark="triton_attention",
        heads=args.heads,
        head_dim=args.head_dim,
        tokens=args.tokens,
        mask="causal",
        hyla="rms_head + relu",
        device=args.device,
        gpu=torch.cuda.get_device_name() if args.device == "cuda" else platform.processor(),
        torch=torch.__version__,
        triton=triton.__version__,
        blocks=args.blocks,
        num_warps=args.num_warps,
        float32_matmul_precision=torch.get_float32_matmul_precision(),
        tolerance=TOLERANCE,
        rows=rows,
    )
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print_table(rows)
    print(f"-> {args.out}")


def write_compile_report(args) -> None:
    """--compile-report: the kernels' resources (`compile_report`) as JSON."""
    import triton

    rows = compile_report(args)
    out = args.out if args.out != OUT else OUT.with_name("triton_resources.json")
    out.write_text(
        json.dumps(
            dict(
                benchmark="triton_resources",
                arch=f"sm_{args.arch}",
                heads=args.heads,
                head_dim=args.head_dim,
                triton=triton.__version__,
                rows=rows,
            ),
            indent=1,
        )
    )
    print(f"-> {out}")


def run_cases(args) -> list[dict]:
    """One row per dtype x length x implementation, printed as it finishes (triton's outputs and
    gradients checked against streamed HYLA in float64 first)."""
    streamed = hyla_fn("streamed", args)
    rows = []
    for dtype_name in args.dtypes:
        for length in args.lengths:
            for impl in args.implementations:
                rows.append(
                    run_case(
                        impl,
                        length,
                        dtype_name,
                        args,
                        lambda inputs: forward_backward(
                            streamed, *(t.double() if t.is_floating_point() else t for t in inputs)
                        ),
                    )
                )
                print_table(rows[-1:])
    return rows


if __name__ == "__main__":
    main()
