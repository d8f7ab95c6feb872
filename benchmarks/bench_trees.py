"""Two checkouts side by side, laid out as the long CPU runs are: in each round, for each checkout in
turn (A B A B ...), one `bench_training.py` process per mixer at once, one thread each, so every
mixer is timed with the others beside it on the shared cores. Reported: each process's median-window
steps/s, and per mixer the ratio B / A of each round, their median and range.

    python benchmarks/bench_trees.py OLD_CHECKOUT NEW_CHECKOUT --out benchmarks/results/trees_sraven.json
    python benchmarks/bench_trees.py A B --mixers hyla linear hyla_identity --rounds 3 --steps 20

Each process imports hyla from its own checkout (PYTHONPATH), so the C++ kernels each one compiles
are its own (their cache is keyed by source). The ratio of a round compares A and B under the same
load, next to each other in time: the drift of a shared machine falls on both.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

from bench_optimizer import write_results


def bench_command(tree: Path, preset: str, mixer: str, steps: int, repeats: int, out: Path) -> list[str]:
    return [
        sys.executable,
        str(tree / "benchmarks" / "bench_training.py"),
        *("--presets", preset, "--mixers", mixer, "--modes", "eager", "--threads", "1"),
        *("--steps", str(steps), "--repeats", str(repeats), "--out", str(out)),
    ]


def one_side(tree: Path, args: argparse.Namespace) -> dict[str, float]:
    """{mixer: median-window steps/s} of one process per mixer, all at once, one thread each."""
    with tempfile.TemporaryDirectory() as folder:
        outs = {mixer: Path(folder) / f"{mixer}.json" for mixer in args.mixers}
        env = {**os.environ, "PYTHONPATH": str(tree)}
        processes = [
            subprocess.Popen(
                bench_command(tree, args.preset, m, args.steps, args.repeats, out),
                env=env,
                cwd=tree,
                stdout=subprocess.DEVNULL,
            )
            for m, out in outs.items()
        ]
        if any(p.wait() for p in processes):
            raise SystemExit(f"a benchmark process failed in {tree}")
        return {m: json.loads(out.read_text())["rows"][0]["steps_per_second"] for m, out in outs.items()}


def commit(tree: Path) -> str:
    result = subprocess.run(["git", "-C", str(tree), "rev-parse", "--short", "HEAD"], capture_output=True, text=True)
    return result.stdout.strip() or "unknown"


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("a", type=Path, help="the checkout to compare against (the previous main)")
    parser.add_argument("b", type=Path, help="the checkout measured")
    parser.add_argument("--preset", default="raven_3x3_4features")
    parser.add_argument("--mixers", nargs="+", default=["hyla", "linear", "hyla_identity"])
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--steps", type=int, default=20, help="steps per timing window")
    parser.add_argument("--repeats", type=int, default=5, help="timing windows per process")
    parser.add_argument("--out", default="", help="JSON output ('' to skip)")
    args = parser.parse_args(argv)
    rounds = []
    for i in range(args.rounds):
        a, b = one_side(args.a.resolve(), args), one_side(args.b.resolve(), args)
        rounds.append({"a": a, "b": b})
        print(f"round {i + 1}: " + ", ".join(f"{m} {a[m]:.2f} -> {b[m]:.2f} ({b[m] / a[m]:.2f}x)" for m in args.mixers))
    rows = []
    for m in args.mixers:
        ratios = [r["b"][m] / r["a"][m] for r in rounds]
        rows.append(
            {
                "preset": args.preset,
                "mixer": m,
                "steps": args.steps,
                "repeats": args.repeats,
                "a": {"commit": commit(args.a), "steps_per_second": [r["a"][m] for r in rounds]},
                "b": {"commit": commit(args.b), "steps_per_second": [r["b"][m] for r in rounds]},
                "ratios": ratios,
                "median_ratio": statistics.median(ratios),
            }
        )
        print(f"{m}: B / A {statistics.median(ratios):.2f}x (rounds {min(ratios):.2f}-{max(ratios):.2f})")
    write_results(args.out, 1, rows)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
