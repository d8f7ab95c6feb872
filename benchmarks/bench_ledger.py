"""The speed ledger's measurements (docs/speed.md): each speed mechanism on against off, as a
paired A/B ratio of training steps/s on both paper presets, on this machine.

    python benchmarks/bench_ledger.py                          # -> benchmarks/results/ledger.json
    python benchmarks/bench_ledger.py --mechanisms cpp_kernel --repeats 5
    python benchmarks/bench_ledger.py --off-tree removed_x=/tmp/tree_without_x   # a mechanism removed

Every measurement is a fresh `hyla train` process (HYLA, batch 128, compiled unless `--eager`, `--threads`), and
its steps/s is the run's summary.json `steps_per_second` (the first step, with compilation, is
not timed). "on" is the default; "off" the same command with the mechanism's off switch (an
environment variable), or run from another checkout (`--off-tree NAME=DIR`: the same command in
DIR, whose `hyla` is imported instead). The sides alternate (on off on off ...), so a drift of a
shared machine's speed falls on both; the ratio on/off is taken pair by pair and its min / median
/ max reported. The JSON is rewritten after every pair.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "ledger.json"
# mechanism -> the environment that turns it off. adamw_kernel: hyla's AdamW step calling torch's
# fused AdamW kernel directly (hyla/ops/torch_internals.py); off, the step is torch.optim.AdamW's own.
SWITCHES = {
    "cpp_kernel": {"HYLA_CPP_KERNEL": "0"},
    "adamw_kernel": {"HYLA_PUBLIC_OPS": "1"},
    "allocator": {"HYLA_MALLOC_TUNING": "0"},
}
STEPS = {"logic_4var_2term": 600, "raven_3x3_4features": 120}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mechanisms", nargs="*", default=list(SWITCHES), choices=list(SWITCHES))
    p.add_argument(
        "--off-tree",
        nargs="*",
        default=[],
        metavar="NAME=DIR",
        help="a mechanism measured against another checkout that lacks it",
    )
    p.add_argument("--presets", nargs="+", default=list(STEPS), choices=list(STEPS))
    p.add_argument("--repeats", type=int, default=3, help="pairs per mechanism and preset")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--eager", action="store_true", help="train without torch.compile (the default of `hyla train`)")
    p.add_argument("--out", type=Path, default=OUT)
    return p.parse_args(argv)


def steps_per_second(preset: str, threads: int, env: dict, cwd: Path, eager: bool) -> float:
    """One `hyla train` process of STEPS[preset] steps, compiled unless `eager`: its timed steps/s."""
    with tempfile.TemporaryDirectory() as scratch:
        command = [
            sys.executable,
            "-m",
            "hyla.cli",
            "train",
            "--preset",
            preset,
            "--model.mixer",
            "hyla",
            "--train.steps",
            str(STEPS[preset]),
            "--train.eval_every",
            "0",
            "--train.final_eval_samples",
            "128",
            "--train.checkpoint_every",
            str(STEPS[preset]),
            "--train.no-compile" if eager else "--train.compile",
            "--train.threads",
            str(threads),
            "--train.no-progress",
            "--out_dir",
            scratch,
            "--name",
            "run",
        ]
        done = subprocess.run(command, cwd=cwd, env={**os.environ, **env}, capture_output=True, text=True, check=False)
        if done.returncode:
            raise RuntimeError(f"{' '.join(command)} failed:\n{done.stderr[-2000:]}")
        return json.loads((Path(scratch) / "run" / "summary.json").read_text())["steps_per_second"]


def measure(name: str, preset: str, off_env: dict, off_cwd: Path, args) -> dict:
    """`args.repeats` pairs (on, off) -> the row of one mechanism and preset."""
    on, off = [], []
    for _ in range(args.repeats):
        on.append(steps_per_second(preset, args.threads, {}, ROOT, args.eager))
        off.append(steps_per_second(preset, args.threads, off_env, off_cwd, args.eager))
        print(f"{name} {preset}: on {on[-1]:.1f}, off {off[-1]:.1f} steps/s", flush=True)
    ratios = sorted(a / b for a, b in zip(on, off))
    return {
        "mechanism": name,
        "preset": preset,
        "off": off_env or str(off_cwd),
        "on_steps_per_second": on,
        "off_steps_per_second": off,
        "ratio_min": ratios[0],
        "ratio_median": statistics.median(ratios),
        "ratio_max": ratios[-1],
    }


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    cases = [(name, SWITCHES[name], ROOT) for name in args.mechanisms]
    cases += [(spec.split("=", 1)[0], {}, Path(spec.split("=", 1)[1]).resolve()) for spec in args.off_tree]
    rows = []
    for name, env, cwd in cases:
        for preset in args.presets:
            rows.append(measure(name, preset, env, cwd, args))
            write(args, rows)
    for row in rows:
        print(
            f"{row['mechanism']:18} {row['preset']:20} on/off {row['ratio_median']:.3f} "
            f"({row['ratio_min']:.3f}-{row['ratio_max']:.3f})"
        )
    return 0


def write(args, rows: list[dict]) -> None:
    from hyla.train.run_dir import cpu_name, git_commit

    info = {
        "cpu": cpu_name(),
        "threads": args.threads,
        "git_commit": git_commit(),
        "steps": STEPS,
        "load_average": os.getloadavg(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": info, "rows": rows}, indent=1) + "\n")


if __name__ == "__main__":
    sys.exit(main())
