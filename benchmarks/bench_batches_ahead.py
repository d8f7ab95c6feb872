"""Training batches made several steps ahead (Task.batches) against one step at a time, on the CPU:
the compiled HYLA training step of the paper presets, steps/s, alternating in one process.

    python benchmarks/bench_batches_ahead.py --threads 2    # JSON into benchmarks/results/batches_ahead.json

Both sides train the same model on the same batches (Task.batches equals Task.batch bit for bit);
only `task.batches_per_pass` differs, so the ratio is the cost of making batches one by one inside
the training loop. Also times making the batches alone, milliseconds a batch, per pass size.
"""

from __future__ import annotations

import argparse
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
from bench_optimizer import write_results

from hyla.configs import build_task, get_preset, resolve_model
from hyla.train.distributed import DistContext
from hyla.train.loop import Trainer, build_model, process_settings

RESULTS = Path(__file__).parent / "results" / "batches_ahead.json"


def ms_per_batch(task, batch_size: int, per_pass: int, batches: int = 512) -> float:
    task.batches("train", batch_size, range(per_pass))  # warm-up
    start = time.perf_counter()
    for first in range(0, batches, per_pass):
        task.batches("train", batch_size, range(first, first + per_pass))
    return (time.perf_counter() - start) / batches * 1e3


def measure(preset: str, threads: int, rounds: int, steps: int) -> dict:
    cfg = get_preset(preset)
    cfg = replace(cfg, model=replace(cfg.model, mixer="hyla"), train=replace(cfg.train, compile=True, threads=threads))
    ctx = DistContext(0, 1, torch.device("cpu"))
    with process_settings(cfg, ctx):
        task = build_task(cfg)
        cfg = replace(cfg, model=resolve_model(cfg.model, task))
        trainer = Trainer(cfg, task, build_model(cfg), ctx)
        ahead = task.batches_per_pass
        alone = {per_pass: ms_per_batch(task, cfg.train.batch_size, per_pass) for per_pass in (1, 4, ahead, 4 * ahead)}
        for step in range(3):  # compilation and warm-up
            trainer.step(step)
        rates = {1: [], ahead: []}
        for _ in range(rounds):  # alternating, so that drift of the machine's speed falls on both
            for per_pass, timings in rates.items():
                task.batches_per_pass, trainer.upcoming = per_pass, {}
                start = time.perf_counter()
                for _ in range(steps):
                    step += 1
                    trainer.step(step)
                timings.append(steps / (time.perf_counter() - start))
        task.batches_per_pass = ahead
    ratios = [b / a for a, b in zip(rates[1], rates[ahead])]
    return {"preset": preset, "batch_size": cfg.train.batch_size, "batches_per_pass": ahead,
            "ms_per_batch_alone": {str(k): v for k, v in alone.items()},
            "steps_per_second": {str(k): v for k, v in rates.items()},
            "ratios": ratios, "median_ratio": statistics.median(ratios)}


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["logic_4var_2term", "raven_3x3_4features"])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--rounds", type=int, default=8)
    parser.add_argument("--steps", type=int, default=160, help="fuzzy-logic steps per timing (SRAVEN: a tenth)")
    parser.add_argument("--out", default=str(RESULTS), help="JSON output ('' to skip)")
    args = parser.parse_args(argv)
    rows = []
    for preset in args.presets:
        steps = args.steps if preset.startswith("logic") else max(1, args.steps // 10)
        row = measure(preset, args.threads, args.rounds, steps)
        rows.append(row)
        print(f"{preset}: {row['batches_per_pass']} batches a pass / 1: x{row['median_ratio']:.3f} steps/s "
              f"(median of {args.rounds} alternating rounds of {steps} steps); a batch alone "
              + ", ".join(f"{v:.3f} ms ({k} a pass)" for k, v in row["ms_per_batch_alone"].items()))
    write_results(args.out, args.threads, rows)
    return 0


if __name__ == "__main__":
    sys.exit(main())
