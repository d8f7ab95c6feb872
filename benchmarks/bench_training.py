"""End-to-end training throughput: steps/s of the real training step (data generation, forward,
backward, AdamW update, schedule) for the paper presets x mixers x {eager, compiled}, batch 128.

    python benchmarks/bench_training.py                      # full grid, JSON into benchmarks/results/
    python benchmarks/bench_training.py --presets logic_4var_2term --mixers hyla --modes eager --threads 1 2
    python benchmarks/bench_training.py --device cuda --out benchmarks/results/training_cuda.json
    python benchmarks/bench_training.py --presets logic_4var_2term --set fuzzy_logic.seq_len=32  # a sweep's setting

Timing: after warm-up (compilation included, reported separately), `--repeats` windows of
`--steps` steps each; reported are the median window and the best window (wall clock), and the
best steps per CPU-second of the process. On a machine shared with other work the wall-clock rate
is what a run experiences and depends on the load (recorded alongside); with one thread, steps
per CPU-second estimate what an idle core would give. Against the authors' code, whose rate depends
on the machine as much as hyla's: bench_vs_authors.py, both on one machine in one run.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch

from hyla.cli.train_args import parse_overrides
from hyla.train.configs import ConfigError, ExperimentConfig, build_task, resolve_model
from hyla.train.distributed import DistContext
from hyla.train.numerics import process_settings
from hyla.train.presets import get_preset
from hyla.train.run_dir import cpu_name, git_commit
from hyla.train.step import Trainer, choose_update

RESULTS = Path(__file__).parent / "results" / "training.json"


def measure(
    preset: str,
    mixer: str,
    compiled: bool,
    threads: int,
    steps: int,
    repeats: int,
    compile_mode: str,
    device: str = "cpu",
    overrides: tuple[str, ...] = (),
) -> dict:
    torch._dynamo.reset()  # every case compiles afresh (and stays below dynamo's recompile limit)
    cfg = preset_with(preset, overrides)
    cfg = replace(
        cfg,
        model=replace(cfg.model, mixer=mixer),
        train=replace(
            cfg.train,
            step="compiled" if compiled else "eager",
            compile_mode=compile_mode,
            device=device,
            threads=threads,
        ),
    )
    ctx = DistContext(0, 1, torch.device(device))
    with process_settings(cfg, ctx):  # threads and compiler settings exactly as `hyla train` sets them
        row = _measure(cfg, ctx, steps, repeats)
    return {
        "preset": preset,
        "mixer": mixer,
        "device": device,
        "mode": "compiled" if compiled else "eager",
        "threads": threads,
        "overrides": list(overrides),
        **row,
    }


def preset_with(preset: str, overrides: tuple[str, ...]) -> ExperimentConfig:
    """The preset with `section.field=value` overrides, read as `hyla train --section.field value`
    reads them; a bad one exits with a one-line message."""
    args = []
    for item in overrides:
        key, sep, value = item.partition("=")
        if not sep:
            raise SystemExit(f"bench_training.py: --set {item!r}: expected SECTION.FIELD=VALUE")
        args += [f"--{key}", value]
    try:
        return parse_overrides(get_preset(preset), args, "bench_training.py --set", None)
    except ConfigError as e:
        raise SystemExit(f"bench_training.py: --set: {e}") from None


def _measure(cfg, ctx: DistContext, steps: int, repeats: int) -> dict:
    task = build_task(cfg, ctx.device)
    cfg = replace(cfg, model=resolve_model(cfg.model, task))
    trainer = Trainer(cfg, task, ctx)
    step = 0
    start = time.perf_counter()
    update = choose_update([trainer], [step])  # compiles (warms up) when asked

    def train_step(step: int):  # the training loop's step (hyla.train.loop.run_steps)
        [(loss, _, _)] = update([trainer], [step])
        trainer.scheduler.step()
        return loss

    for _ in range(3):
        train_step(step)
        step += 1
    warmup = time.perf_counter() - start
    windows, cpu_windows = [], []
    for _ in range(repeats):
        start, cpu_start = time.perf_counter(), time.process_time()
        for _ in range(steps):
            loss = train_step(step)
            step += 1
        loss.item()  # waits for the device
        windows.append(steps / (time.perf_counter() - start))
        cpu_windows.append(steps / (time.process_time() - cpu_start))
    fell_back = cfg.train.step == "compiled" and not update.kind["compile"]
    return {
        "steps_per_second": statistics.median(windows),
        "best_steps_per_second": max(windows),
        "windows": windows,
        "warmup_s": warmup,
        "compile_fell_back": fell_back,
        "compile_mode": update.kind["compile_mode"],  # the mode that compiled the step; None: eager
        # steps per second of this process's CPU time: with 1 thread, what an otherwise idle core
        # would give (the wall-clock rate on a shared machine is lower by the share it gets)
        "steps_per_cpu_second": max(cpu_windows),
        "num_parameters": trainer.model.num_parameters(),
    }


def machine(device: str) -> dict:
    gpu = torch.cuda.get_device_name(device) if device.startswith("cuda") else None
    return {
        "cpu": cpu_name(),
        "gpu": gpu,
        "cpu_count": os.cpu_count(),
        "platform": platform.platform(),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "git_commit": git_commit(),
        "load_average": os.getloadavg(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def table(rows: list[dict]) -> str:
    lines = [
        "| preset | mixer | mode | threads | steps/s (median) | best | steps per CPU-second | warm-up s |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        overrides = r.get("overrides", [])
        mode = r["mode"] + (" (fell back)" if r["compile_fell_back"] else "")
        lines.append(
            f"| {' '.join([r['preset'], *overrides])} | {r['mixer']} | {mode} "
            f"| {r['threads']} | {r['steps_per_second']:.1f} | {r['best_steps_per_second']:.1f} "
            f"| {r['steps_per_cpu_second']:.1f} "
            f"| {r['warmup_s']:.1f} |"
        )
    return "\n".join(lines)


def parse_args(argv: list[str] | None = None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--presets", nargs="+", default=["logic_4var_2term", "raven_3x3_4features"])
    parser.add_argument("--mixers", nargs="+", default=["softmax", "linear", "hyla"])
    parser.add_argument("--modes", nargs="+", default=["eager", "compiled"], choices=["eager", "compiled"])
    parser.add_argument("--threads", nargs="+", type=int, default=[torch.get_num_threads()])
    parser.add_argument("--steps", type=int, default=None, help="steps per window (default: ~2 s worth)")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--compile-mode", default="default")
    parser.add_argument(
        "--set",
        nargs="+",
        default=[],
        metavar="SECTION.FIELD=VALUE",
        help="config overrides on every preset, as `hyla train --SECTION.FIELD VALUE` (e.g. fuzzy_logic.seq_len=32)",
    )
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    parser.add_argument("--out", default=str(RESULTS), help="JSON output ('' to skip)")
    parser.add_argument(
        "--update",
        action="store_true",
        help="keep the other rows already in --out (replace only the measured preset/mixer/mode/threads combinations)",
    )
    args = parser.parse_args(argv)
    for preset in args.presets:
        preset_with(preset, tuple(args.set))  # a bad override fails here, before any measurement
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    info = machine(args.device)
    print(
        f"{info['gpu'] or info['cpu']}, {info['cpu_count']} cores, torch {info['torch']}, "
        f"load average {info['load_average']}",
        file=sys.stderr,
    )
    rows = measure_grid(args)
    info["load_average_end"] = os.getloadavg()
    runs = [{"machine": info, "rows": [r["preset"] + "/" + r["mixer"] for r in rows]}]
    if args.update and args.out and Path(args.out).exists():
        rows, runs = merge_previous(json.loads(Path(args.out).read_text()), rows, runs)
    sort_rows(rows)
    print(table(rows))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(
            json.dumps({"machine": info, "runs": runs, "batch_size": 128, "rows": rows, "table": table(rows)}, indent=2)
            + "\n"
        )
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


def measure_grid(args: argparse.Namespace) -> list[dict]:
    """One row per preset x mixer x mode x threads, each reported on stderr as it is measured."""
    rows = []
    for preset in args.presets:
        for mixer in args.mixers:
            for mode in args.modes:
                for threads in args.threads:
                    steps = args.steps or (20 if preset.startswith("logic") else 5)
                    row = measure(
                        preset,
                        mixer,
                        mode == "compiled",
                        threads,
                        steps,
                        args.repeats,
                        args.compile_mode,
                        args.device,
                        tuple(args.set),
                    )
                    rows.append(row)
                    print(
                        f"{preset} {mixer} {mode} threads={threads}: {row['steps_per_second']:.1f} steps/s "
                        f"(best {row['best_steps_per_second']:.1f}, warm-up {row['warmup_s']:.1f} s)",
                        file=sys.stderr,
                        flush=True,
                    )
    return rows


def merge_previous(previous: dict, rows: list[dict], runs: list[dict]) -> tuple[list[dict], list[dict]]:
    """--update: the previous results' rows of the combinations not measured now, then the new rows;
    the previous runs, then this one."""
    measured = {case(r) for r in rows}
    rows = [r for r in previous["rows"] if case(r) not in measured] + rows
    return rows, previous.get("runs", []) + runs


def case(row: dict) -> tuple:
    """What a row measured: preset, overrides, mixer, mode and threads."""
    return row["preset"], tuple(row.get("overrides", ())), row["mixer"], row["mode"], row["threads"]


def sort_rows(rows: list[dict]) -> None:
    """In place: by preset, mixer and mode in the order of the paper's tables, then threads."""
    order = {
        name: i
        for i, name in enumerate(
            ["logic_4var_2term", "raven_3x3_4features", "softmax", "linear", "hyla", "eager", "compiled"]
        )
    }
    rows.sort(
        key=lambda r: (order.get(r["preset"], 9), order.get(r["mixer"], 9), order.get(r["mode"], 9), r["threads"])
    )


if __name__ == "__main__":
    sys.exit(main())
