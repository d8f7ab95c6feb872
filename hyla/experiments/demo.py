"""`hyla demo`: softmax vs linear attention vs HYLA on a CPU-sized fuzzy logic preset.

Trains one model per mixer with the same data, seed and budget, then writes a comparison table
(Markdown + JSON) and the training curves (PNG) into the output folder. Re-running with the same
--out skips finished runs and resumes interrupted ones.
"""

from __future__ import annotations

import os
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Any

from tyro.conf import arg

from hyla.analysis.plots import plot_curves
from hyla.analysis.tables import markdown_table
from hyla.experiments.sweep import SweepSpec, run_sweep
from hyla.ops.mixers import canonical_mixer_name
from hyla.train.configs import ConfigError, TrainConfig, check_positive, parse_options
from hyla.train.jsonio import write_json
from hyla.train.presets import PRESETS, get_preset
from hyla.train.run_dir import RunDir

DEFAULT_PRESET = "logic_cpu"
DEFAULT_MIXERS = ("softmax", "linear", "hyla")
PERCENT_METRICS = ("r2", "acc", "feature_acc")  # shown ×100, as in the paper's tables


@dataclass
class DemoOptions:
    """Softmax vs linear attention vs HYLA on a CPU-sized fuzzy logic preset: one model per mixer with
    the same data, seed and budget, then a comparison table and training curves. The defaults are
    sized for a few minutes on a small CPU (timings: README.md, "Quick start"). Re-running with the
    same --out skips finished runs and resumes interrupted ones."""

    preset: str = DEFAULT_PRESET
    mixers: list[str] = field(default_factory=lambda: list(DEFAULT_MIXERS))
    """mixer names (hyla or authors')"""
    steps: Annotated[int | None, arg(help_behavior_hint="(default: the preset's)")] = None
    """training steps per model"""
    seed: int = 0
    out: Annotated[Path | None, arg(help_behavior_hint="(default: runs/demo-<timestamp>)")] = None
    """output folder"""
    parallel: int = 0
    """runs trained at the same time, as separate processes (0: all of them; on 2 cores this beats one run at a
    time with 2 threads)"""
    threads: Annotated[int | None, arg(help_behavior_hint="(default: the cores divided by the runs at a time)")] = None
    """threads per run"""
    compile: bool = False
    """torch.compile the models"""
    eval_samples: Annotated[int | None, arg(help_behavior_hint="(default: the preset's)")] = None
    """samples per split at periodic evaluations"""
    final_eval_samples: Annotated[int | None, arg(help_behavior_hint="(default: the preset's)")] = None
    """samples per split at the final evaluation"""
    progress: bool = True
    """progress bars (--no-progress: none; not on a terminal: a line per run every 30 s and at its end)"""

    def __post_init__(self):
        if self.preset not in PRESETS:
            raise ConfigError(f"--preset {self.preset!r} is not valid; valid presets: {', '.join(PRESETS)}")
        check_positive(
            steps=self.steps,
            threads=self.threads,
            eval_samples=self.eval_samples,
            final_eval_samples=self.final_eval_samples,
        )
        if self.parallel < 0:
            raise ConfigError(f"--parallel={self.parallel} must be >= 0")
        try:
            self.mixers = [canonical_mixer_name(m) for m in self.mixers]
        except ValueError as e:
            raise ConfigError(str(e)) from None


def main(argv: list[str]) -> int:
    args = parse_options(DemoOptions, argv, "hyla demo")
    out = Path(args.out or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    base = get_preset(args.preset)
    spec = demo_sweep(args, base.train, out)
    steps = spec.overrides.get("train.steps", base.train.steps)
    print(
        f"hyla demo: {', '.join(args.mixers)} on {args.preset} ({base.task}), {steps} steps each, "
        f"{spec.parallel} at a time -> {out}"
    )

    start = time.perf_counter()
    try:
        codes = run_sweep(spec, progress=args.progress)
    except KeyboardInterrupt:
        print(
            f"\ninterrupted; the runs keep their checkpoints: run `hyla demo --out {out}` with the same "
            "settings to continue",
            file=sys.stderr,
        )
        return 130
    wall = time.perf_counter() - start
    failed = {m: c for m, c in codes.items() if c != 0}
    write_outputs(args, spec, out, steps, wall)
    return 1 if failed else 0


def demo_sweep(args: DemoOptions, train: TrainConfig, out: Path) -> SweepSpec:
    """The demo as a sweep: one run per mixer, all with the same seed and overrides."""
    return SweepSpec(
        name="demo",
        preset=args.preset,
        out_dir=str(out),
        seeds=[args.seed],
        overrides=train_overrides(train, args),
        grid=[{"model.mixer": args.mixers}],
        parallel=args.parallel or len(args.mixers),
    )


def write_outputs(args: DemoOptions, spec: SweepSpec, out: Path, steps: int, wall: float) -> None:
    """Write demo.json, demo.md and curves.png into `out` and print the table and its reading."""
    run_names = {run.overrides["model.mixer"]: run.name for run in spec.runs()}
    rows = collect_rows(out, run_names)
    metric = rows[0]["metric_name"] if rows else "r2"
    table = comparison_table(rows, metric)
    reading = describe_ordering(rows, metric)
    note = (
        f"{spec.parallel} runs trained at a time; steps/s is each run's own rate under that sharing."
        if spec.parallel > 1
        else ""
    )
    report = {
        "preset": args.preset,
        "steps": steps,
        "seed": args.seed,
        "wall_time_s": wall,
        "parallel": spec.parallel,
        "metric": metric,
        "rows": rows,
        "reading": reading,
        "load_average": os.getloadavg(),
    }
    write_json(out / "demo.json", report)
    (out / "demo.md").write_text(
        f"# hyla demo: {args.preset}, {steps} steps, seed {args.seed}\n\n"
        f"{table}\n\n{reading}\n\n{note}\nTotal wall time {wall:.0f} s.\n"
    )
    plot_curves(out / "curves.png", {m: [RunDir(out / name).read_metrics()] for m, name in run_names.items()}, metric)
    print("\n" + table + "\n\n" + reading + ("\n" + note if note else ""))
    print(f"\nwrote {out / 'demo.md'}, {out / 'demo.json'}, {out / 'curves.png'} ({wall:.0f} s)")


def train_overrides(train: TrainConfig, args: DemoOptions) -> dict[str, Any]:
    """The sweep overrides of the preset's training settings that the demo's options ask for."""
    overrides: dict[str, Any] = {"train.compile": args.compile}
    if args.steps is not None:
        scale = args.steps / train.steps
        overrides.update(
            {
                "train.steps": args.steps,
                "train.warmup_steps": min(train.warmup_steps, max(1, args.steps // 10)),
                "train.eval_every": max(1, round(train.eval_every * scale)),
                "train.log_every": max(1, min(train.log_every, args.steps // 10 or 1)),
                "train.checkpoint_every": max(1, round(train.checkpoint_every * scale)),
            }
        )
    for name in ("eval_samples", "final_eval_samples", "threads"):
        if getattr(args, name) is not None:
            overrides[f"train.{name}"] = getattr(args, name)
    return overrides


def collect_rows(out: Path, run_names: dict[str, str]) -> list[dict]:
    """{mixer: run folder name} -> one row per finished or stopped run."""
    rows = []
    for mixer, name in run_names.items():
        s = RunDir(out / name).read_summary()
        if not s:
            continue
        rows.append(
            {
                "mixer": mixer,
                "status": s["status"],
                "metric_name": s["metric_name"],
                "final": s.get("final", {}),
                "train_loss": s.get("train_loss"),
                "steps_per_second": s.get("steps_per_second"),
                "wall_time_s": s.get("wall_time_s"),
                "num_parameters": s.get("num_parameters"),
            }
        )
    return rows


def _value(row: dict, split: str, metric: str) -> float | None:
    return row["final"].get(split, {}).get(metric)


def comparison_table(rows: list[dict], metric: str) -> str:
    """One row per mixer: the final metric per split, training loss, speed, wall time and status."""
    splits = [s for s in ("valid", "ood", "novel_terms") if any(_value(r, s, metric) is not None for r in rows)]
    scale = 100 if metric in PERCENT_METRICS else 1
    unit = " ×100" if scale == 100 else ""
    header = ["mixer"] + [f"{s} {metric}{unit}" for s in splits] + ["final train loss", "steps/s", "wall s", "status"]
    cells = []
    for r in rows:
        row = [r["mixer"]]
        row += [f"{scale * v:.2f}" if (v := _value(r, s, metric)) is not None else "–" for s in splits]
        row.append(f"{r['train_loss']:.4g}" if r["train_loss"] is not None else "–")
        row.append(f"{r['steps_per_second']:.1f}" if r["steps_per_second"] else "–")
        row.append(f"{r['wall_time_s']:.0f}" if r["wall_time_s"] else "–")
        row.append(r["status"])
        cells.append(row)
    return markdown_table(header, cells)


def describe_ordering(rows: list[dict], metric: str) -> str:
    """One honest sentence per split: the mixers ordered by the metric (whatever the order is)."""
    lower_is_better = metric in ("nll", "loss", "mse")
    lines = []
    for split in ("ood", "valid"):
        scored = [(r["mixer"], v) for r in rows if (v := _value(r, split, metric)) is not None]
        if len(scored) < 2:
            continue
        scored.sort(key=lambda mv: mv[1], reverse=not lower_is_better)
        lines.append(
            f"{split} {metric}: "
            + " > ".join(f"{m} ({v:.3f})" for m, v in scored)
            + (" (lower is better)" if lower_is_better else "")
        )
    losses = sorted((r["train_loss"], r["mixer"]) for r in rows if r["train_loss"] is not None)
    if len(losses) >= 2:
        lines.append("final training loss: " + " < ".join(f"{m} ({v:.4g})" for v, m in losses))
    return "\n".join(lines)
