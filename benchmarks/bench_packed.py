"""Packed training throughput: aggregate model-steps/s of one pack of N runs (`hyla.train.packed`:
one vmapped forward and backward for all N) against one solo run, for pack sizes 1, 3, 8, 16.

    python benchmarks/bench_packed.py                                # logic_cpu, hyla, packs of 1 3 8 16
    python benchmarks/bench_packed.py --sizes 1 3 8 --threads 1
    python benchmarks/bench_packed.py --device cuda --out benchmarks/results/packed_cuda.json

A case is the real training update (batch generation, dropout masks, forward, backward, AdamW,
schedule) of members with seeds 0..N-1; "solo" is the ordinary update of one run (`EagerUpdate`).

Correctness first: before any timing, the members of every pack take 5 updates beside solo copies
of themselves; the training losses of every update (dropout on) and then the predictions on a
validation batch must agree to rtol 1e-4 / atol 1e-5, else no ratio is reported. (Predictions,
not weights: a parameter the loss does not depend on, such as the key bias under softmax, gets
Adam updates from rounding noise in both runs, which differ by up to the learning rate; see
hyla/train/packed.py.)
Timing: after a warm-up update, `--repeats` rounds of windows of `--steps` updates, each round
timing every case in turn (so a shared machine's load falls on all of them alike). Reported: each
case's median window as model-steps/s (pack steps/s x N), and its ratio to solo as the median over
the rounds of the ratio within a round (robust to load that changes between rounds).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from dataclasses import replace
from pathlib import Path

import torch
from bench_training import machine

from hyla.train.configs import build_task, resolve_model
from hyla.train.distributed import DistContext
from hyla.train.packed import PackedUpdate
from hyla.train.presets import get_preset
from hyla.train.step import EagerUpdate, Trainer

RESULTS = Path(__file__).parent / "results" / "packed.json"
RTOL, ATOL = 1e-4, 1e-5


def trainers(preset: str, mixer: str, seeds: range, device: str) -> list[Trainer]:
    cfg = get_preset(preset)
    cfg = replace(cfg, model=replace(cfg.model, mixer=mixer), train=replace(cfg.train, device=device))
    members = []
    for seed in seeds:
        member = replace(cfg, seed=seed)
        task = build_task(member)
        member = replace(member, model=resolve_model(member.model, task))
        members.append(Trainer(member, task, DistContext(0, 1, torch.device(device))))
    return members


def packed_step(update: PackedUpdate | EagerUpdate, members: list[Trainer], step: int) -> list[torch.Tensor]:
    """Update `step` of every member (or of a solo run) and their schedules' steps, as the training
    loop takes them; the losses."""
    losses = [loss for loss, _, _ in update(members, [step] * len(members))]
    for trainer in members:
        trainer.scheduler.step()
    return losses


def packed_matches_solo(preset: str, mixer: str, size: int, device: str, updates: int = 5) -> bool:
    """Over `updates` packed updates of `size` members and the same updates solo, are the training
    losses the same, and then the members' predictions on a validation batch?"""
    pack, solo = trainers(preset, mixer, range(size), device), trainers(preset, mixer, range(size), device)
    update, solo_updates = PackedUpdate(pack[0].model), [EagerUpdate(trainer) for trainer in solo]
    for step in range(updates):
        packed_losses = torch.stack(packed_step(update, pack, step))
        solo_losses = torch.stack([packed_step(u, [trainer], step)[0] for u, trainer in zip(solo_updates, solo)])
        if not torch.allclose(packed_losses, solo_losses, rtol=RTOL, atol=ATOL):
            return False
    with torch.no_grad():
        return all(
            torch.allclose(a.model.eval()(batch.x), b.model.eval()(batch.x), rtol=RTOL, atol=ATOL)
            for a, b in zip(pack, solo)
            for batch in [a.task.batch("valid", 256, 0).to(device)]
        )


class Case:
    """One timed configuration: solo (size 0) or a pack of `size` members."""

    def __init__(self, preset: str, mixer: str, size: int, device: str):
        self.size, self.step, self.windows = size, 0, []
        self.members = trainers(preset, mixer, range(max(size, 1)), device)
        self.update = PackedUpdate(self.members[0].model) if size else EagerUpdate(self.members[0])

    @property
    def name(self) -> str:
        return f"pack of {self.size}" if self.size else "solo"

    def run(self, steps: int) -> float:
        """Time `steps` updates; returns the seconds."""
        start = time.perf_counter()
        for _ in range(steps):
            loss = packed_step(self.update, self.members, self.step)[0]
            self.step += 1
        loss.item()  # waits for the device
        return time.perf_counter() - start

    def row(self, steps: int) -> dict:
        window = statistics.median(self.windows)
        return {
            "case": self.name,
            "pack_size": self.size,
            "steps_per_second": steps / window,
            "model_steps_per_second": steps * max(self.size, 1) / window,
            "windows_s": self.windows,
        }


def table(rows: list[dict]) -> str:
    lines = ["| case | pack steps/s | model-steps/s | vs solo |", "|---|---|---|---|"]
    for r in rows:
        ratio = f"{r['vs_solo']:.2f}x" if r.get("vs_solo") is not None else "(not reported)"
        lines.append(f"| {r['case']} | {r['steps_per_second']:.2f} | {r['model_steps_per_second']:.1f} | {ratio} |")
    return "\n".join(lines)


def time_rounds(cases: list[Case], steps: int, repeats: int) -> None:
    """After one warm-up update each, `repeats` rounds of one timed window per case, the cases
    alternating so that all of them see the same machine load."""
    for case in cases:
        case.run(1)  # warm-up
    for round_ in range(repeats):
        for case in cases:
            case.windows.append(case.run(steps))
        print(
            f"round {round_ + 1}/{repeats}: "
            + ", ".join(f"{c.name} {steps / c.windows[-1]:.2f} steps/s" for c in cases),
            file=sys.stderr,
        )


def rows_vs_solo(cases: list[Case], steps: int, correct: dict[int, bool]) -> list[dict]:
    """One row per case; each pack's row with its model-steps per second over the solo case's
    (cases[0]) steps per second, per round and their median (None where the pack's updates do
    not match solo ones)."""
    rows = [case.row(steps) for case in cases]
    solo = cases[0].windows
    for case, row in zip(cases[1:], rows[1:]):
        row["correct"] = correct[case.size]
        ratios = [case.size * solo_s / packed_s for solo_s, packed_s in zip(solo, case.windows)]
        row["vs_solo_per_round"] = ratios
        row["vs_solo"] = statistics.median(ratios) if row["correct"] else None
    return rows


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--preset", default="logic_cpu")
    parser.add_argument("--mixer", default="hyla")
    parser.add_argument("--sizes", nargs="+", type=int, default=[1, 3, 8, 16])
    parser.add_argument("--threads", type=int, default=torch.get_num_threads())
    parser.add_argument("--steps", type=int, default=5, help="updates per timed window")
    parser.add_argument("--repeats", type=int, default=5)
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    parser.add_argument("--out", default=str(RESULTS), help="JSON output ('' to skip)")
    args = parser.parse_args(argv)
    torch.set_num_threads(args.threads)

    info = machine(args.device)
    print(
        f"{info['gpu'] or info['cpu']}, {info['cpu_count']} cores, {args.threads} threads, "
        f"load average {info['load_average']}",
        file=sys.stderr,
    )
    correct = {size: packed_matches_solo(args.preset, args.mixer, size, args.device) for size in args.sizes}
    print(f"packed updates match solo ones: {correct}", file=sys.stderr)
    cases = [Case(args.preset, args.mixer, size, args.device) for size in [0, *args.sizes]]
    time_rounds(cases, args.steps, args.repeats)
    rows = rows_vs_solo(cases, args.steps, correct)
    info["load_average_end"] = os.getloadavg()
    print(table(rows))
    if args.out:
        Path(args.out).parent.mkdir(parents=True, exist_ok=True)
        Path(args.out).write_text(
            json.dumps(
                {
                    "machine": info,
                    "preset": args.preset,
                    "mixer": args.mixer,
                    "threads": args.threads,
                    "steps_per_window": args.steps,
                    "repeats": args.repeats,
                    "tolerance": {"rtol": RTOL, "atol": ATOL},
                    "rows": rows,
                    "table": table(rows),
                },
                indent=2,
            )
            + "\n"
        )
        print(f"wrote {args.out}", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
