"""One AdamW update of the paper models on the CPU: hyla's AdamW (hyla.train.optim) against
torch.optim.AdamW(fused=True), which it equals bit for bit; microseconds per step, alternating.

    python benchmarks/bench_optimizer.py --threads 2       # JSON into benchmarks/results/optimizer.json
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from hyla.train.configs import build_task, resolve_model
from hyla.train.optim import make_optimizer, parameter_groups
from hyla.train.presets import get_preset
from hyla.train.run_dir import cpu_name, git_commit
from hyla.train.step import build_model

RESULTS = Path(__file__).parent / "results" / "optimizer.json"


def microseconds_per_step(step, steps: int) -> float:
    for _ in range(20):
        step()
    start = time.perf_counter()
    for _ in range(steps):
        step()
    return (time.perf_counter() - start) / steps * 1e6


def measure(preset: str, rounds: int, steps: int) -> dict:
    cfg = get_preset(preset)
    cfg = replace(cfg, model=replace(resolve_model(cfg.model, build_task(cfg)), mixer="hyla"))
    model = build_model(cfg)
    o = cfg.optim
    hyla_adamw, _ = make_optimizer(model, o, cfg.train.steps)
    torch_adamw = torch.optim.AdamW(
        parameter_groups(model, o.weight_decay), lr=o.lr, betas=(o.beta1, o.beta2), eps=o.eps, fused=True
    )
    for p in model.parameters():
        p.grad = torch.randn_like(p) * 1e-3
    times = {"torch": [], "hyla": []}
    for _ in range(rounds):  # alternating, so that drift of the machine's speed falls on both
        times["torch"].append(microseconds_per_step(torch_adamw.step, steps))
        times["hyla"].append(microseconds_per_step(hyla_adamw.step, steps))
    return {
        "preset": preset,
        "parameter_tensors": len(list(model.parameters())),
        "parameters": sum(p.numel() for p in model.parameters()),
        "us_per_step": times,
        "median_us": {name: statistics.median(v) for name, v in times.items()},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["logic_4var_2term", "raven_3x3_4features"])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--rounds", type=int, default=5)
    parser.add_argument("--steps", type=int, default=400, help="updates per timing")
    parser.add_argument("--out", default=str(RESULTS), help="JSON output ('' to skip)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)
    rows = []
    for preset in args.presets:
        row = measure(preset, args.rounds, args.steps)
        rows.append(row)
        print(
            f"{preset} ({row['parameter_tensors']} tensors): torch {row['median_us']['torch']:.1f} us, "
            f"hyla {row['median_us']['hyla']:.1f} us per step (median of {args.rounds} alternating rounds)"
        )
    write_results(args.out, args.threads, rows)
    return 0


def write_results(out: str, threads: int, rows: list[dict]) -> None:
    """`rows` with the machine, thread count, torch version, commit and time, as JSON in `out`
    (nothing when `out` is empty)."""
    if not out:
        return
    info = {
        "cpu": cpu_name(),
        "threads": threads,
        "torch": torch.__version__,
        "git_commit": git_commit(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    Path(out).parent.mkdir(parents=True, exist_ok=True)
    Path(out).write_text(json.dumps({"machine": info, "rows": rows}, indent=2) + "\n")
    print(f"wrote {out}", file=sys.stderr)


if __name__ == "__main__":
    sys.exit(main())
