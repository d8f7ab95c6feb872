"""Attention forward+backward at the paper models' shapes (tiny heads), per implementation, eager
and compiled: where the training step's attention time goes and what `auto` should pick.

    python benchmarks/bench_small_heads.py                 # threads 1 and 2, JSON into benchmarks/results/
    python benchmarks/bench_small_heads.py --threads 2 --repeats 50

Shapes (batch 128, relative-position bias and a shared attention-dropout mask, as in training):
fuzzy logic first layer (T=16, H=8, head dim 2), its read-out layer (1 query), SRAVEN (T=36, H=16,
head dim 4). Compiled cases run with inductor's defaults, as the trainer compiles. Every
implementation's output is checked against the naive one first. `cpp` is the C++ kernel
(hyla/ops/kernels/cpp.py), built on first use.
"""

from __future__ import annotations

import argparse
import json
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

from hyla.ops import attention
from hyla.train.run_dir import cpu_name, git_commit

OUT = Path(__file__).parent / "results" / "small_heads.json"
SHAPES = {  # name: (batch, queries, keys, heads, head dim)
    "fuzzy_layer1": (128, 16, 16, 8, 2),
    "fuzzy_readout": (128, 1, 16, 8, 2),
    "sraven": (128, 36, 36, 16, 4),
}
MIXERS = {"hyla": ("rms_head", "mlp"), "softmax": ("softmax", "linear")}


def inputs(shape, seed=0):
    batch, tq, tk, heads, dim = shape
    g = torch.Generator().manual_seed(seed)
    q, k, v = (torch.randn(batch, t, heads, dim, generator=g, requires_grad=True) for t in (tq, tk, tk))
    bias = torch.randn(1, heads, tq, tk, generator=g, requires_grad=True)
    dropout = torch.bernoulli(torch.full((tq, tk), 0.9), generator=g) / 0.9
    return q, k, v, bias, dropout


def time_case(shape, mixer, implementation, compiled, repeats) -> tuple[float, torch.Tensor]:
    normalization, value_network = MIXERS[mixer]
    q, k, v, bias, dropout = inputs(shape)

    def step(q, k, v, bias):
        return attention(
            q,
            k,
            v,
            normalization=normalization,
            value_network=value_network,
            bias=bias,
            dropout_mask=dropout,
            implementation=implementation,
        )

    fn = torch.compile(step) if compiled else step
    times = []
    for i in range(repeats + 3):  # 3 warm-up runs (compilation)
        start = time.perf_counter()
        out = fn(q, k, v, bias)
        out.square().sum().backward()
        if i >= 3:
            times.append(time.perf_counter() - start)
    return statistics.median(times), out.detach()


def main(argv=None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, 2])
    parser.add_argument("--repeats", type=int, default=30)
    parser.add_argument("--out", default=str(OUT), help="JSON output ('' to skip)")
    args = parser.parse_args(argv)
    rows = []
    for threads in args.threads:
        torch.set_num_threads(threads)
        for shape_name, shape in SHAPES.items():
            for mixer in MIXERS:
                rows += measure_mixer(shape_name, shape, mixer, threads, args.repeats)
    table = eager_vs_compiled_table(rows)
    print(table)
    if args.out:
        write_results(Path(args.out), rows, table)
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def measure_mixer(shape_name: str, shape: tuple, mixer: str, threads: int, repeats: int) -> list[dict]:
    """One row per implementation and mode (eager, compiled) of `mixer` at `shape`, each output
    checked against the first (naive, eager) one."""
    implementations = ["naive"] + (["cpp"] if mixer == "hyla" else [])
    reference = None
    rows = []
    for implementation in implementations:
        for compiled in (False, True):
            torch._dynamo.reset()
            seconds, out = time_case(shape, mixer, implementation, compiled, repeats)
            reference = out if reference is None else reference
            error = ((out - reference).abs().max() / reference.abs().max()).item()
            if error > 1e-4:
                raise SystemExit(
                    f"{shape_name} {mixer} {implementation}: output differs from naive (relative {error:.1e})"
                )
            rows.append(
                {
                    "shape": shape_name,
                    "mixer": mixer,
                    "implementation": implementation,
                    "mode": "compiled" if compiled else "eager",
                    "threads": threads,
                    "ms": seconds * 1e3,
                    "relative_error": error,
                }
            )
            print(
                f"threads={threads} {shape_name} {mixer} {implementation} {rows[-1]['mode']}: {seconds * 1e3:.3f} ms",
                file=sys.stderr,
                flush=True,
            )
    return rows


def eager_vs_compiled_table(rows: list[dict]) -> str:
    """A Markdown table: per threads, shape, mixer and implementation, the eager and compiled times."""
    lines = ["| threads | shape | mixer | implementation | eager ms | compiled ms |", "|---|---|---|---|---|---|"]
    for r in rows:
        if r["mode"] == "eager":
            c = next(
                x
                for x in rows
                if x["mode"] == "compiled"
                and all(x[key] == r[key] for key in ("threads", "shape", "mixer", "implementation"))
            )
            lines.append(
                f"| {r['threads']} | {r['shape']} | {r['mixer']} | {r['implementation']} "
                f"| {r['ms']:.3f} | {c['ms']:.3f} |"
            )
    return "\n".join(lines)


def write_results(path: Path, rows: list[dict], table: str) -> None:
    machine = {
        "cpu": cpu_name(),
        "platform": platform.platform(),
        "torch": torch.__version__,
        "git_commit": git_commit(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    path.write_text(json.dumps({"machine": machine, "shapes": SHAPES, "rows": rows, "table": table}, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
