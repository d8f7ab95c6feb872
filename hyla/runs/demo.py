"""`hyla demo`: softmax vs linear attention vs HYLA on a CPU-sized fuzzy logic preset.

Trains one model per mixer with the same data, seed and budget, then writes a comparison table
(Markdown + JSON) and the training curves (PNG) into the output folder. Re-running with the same
--out skips finished runs and resumes interrupted ones. The command's options: hyla.cli.demo.
"""

from __future__ import annotations

import os
from pathlib import Path
from typing import Any

from hyla.analysis.plots import plot_curves
from hyla.analysis.tables import markdown_table
from hyla.runs.sweep import SweepSpec
from hyla.train.configs import ExperimentConfig
from hyla.train.run_dir import RunDir
from hyla.utils import write_json

DEFAULT_PRESET = "logic_cpu"
DEFAULT_MIXERS = ("softmax", "linear", "hyla")
PERCENT_METRICS = ("r2", "acc", "feature_acc")  # shown ×100, as in the paper's tables


def demo_sweep(
    preset: str, mixers: list[str], seed: int, overrides: dict[str, Any], parallel: int, out: Path
) -> SweepSpec:
    """The demo as a sweep: one run per mixer, all with the same seed and overrides, `parallel` at a
    time (0: all of them)."""
    return SweepSpec(
        name="demo",
        preset=preset,
        out_dir=str(out),
        seeds=[seed],
        overrides=overrides,
        grid=[{"model.mixer": mixers}],
        parallel=parallel or len(mixers),
    )


def write_outputs(spec: SweepSpec, out: Path, preset: str, steps: int, seed: int, wall: float) -> None:
    """Write demo.json, demo.md and curves.png into `out` and print the table and its reading (the
    demo `spec` trained `preset` for `steps` steps with `seed`, in `wall` seconds)."""
    run_names = {run.overrides["model.mixer"]: run.name for run in spec.runs()}
    rows = collect_rows(out, run_names)
    metric = rows[0]["metric_name"] if rows else "r2"
    table = comparison_table(rows, metric) + "\n\n" + split_legend(shown_splits(rows, metric))
    reading = describe_ordering(rows, metric)
    note = (
        f"{spec.parallel} runs trained at a time; steps/s is each run's own rate under that sharing."
        if spec.parallel > 1
        else ""
    )
    report = {
        "preset": preset,
        "steps": steps,
        "seed": seed,
        "wall_time_s": wall,
        "parallel": spec.parallel,
        "metric": metric,
        "rows": rows,
        "reading": reading,
        "load_average": os.getloadavg(),
    }
    write_json(out / "demo.json", report)
    (out / "demo.md").write_text(
        f"# hyla demo: {preset}, {steps} steps, seed {seed}\n\n"
        f"{table}\n\n{reading}\n\n{note}\nTotal wall time {wall:.0f} s.\n"
    )
    plot_curves(out / "curves.png", {m: [RunDir(out / name).read_metrics()] for m, name in run_names.items()}, metric)
    print("\n" + table + "\n\n" + reading + ("\n" + note if note else ""))
    print(f"\nwrote {out / 'demo.md'}, {out / 'demo.json'}, {out / 'curves.png'} ({wall:.0f} s)")


def train_overrides(
    preset: ExperimentConfig,
    steps: int | None = None,
    compile: bool = False,
    eval_samples: int | None = None,
    final_eval_samples: int | None = None,
    threads: int | None = None,
) -> dict[str, Any]:
    """The sweep overrides of the `preset`'s training settings that the demo's options ask for (None:
    the preset's); a shorter run's warmup, evaluations, logs and checkpoints scale with it."""
    overrides: dict[str, Any] = {"train.step": "compiled" if compile else "eager"}
    if steps is not None:
        scale = steps / preset.train.steps
        overrides.update(
            {
                "train.steps": steps,
                "optim.warmup_steps": min(preset.optim.warmup_steps, max(1, steps // 10)),
                "eval.every": max(1, round(preset.eval.every * scale)),
                "log.every": max(1, min(preset.log.every, steps // 10 or 1)),
                "checkpoint.every": max(1, round(preset.checkpoint.every * scale)),
            }
        )
    given = {"eval.samples": eval_samples, "eval.final_samples": final_eval_samples, "train.threads": threads}
    overrides.update({key: value for key, value in given.items() if value is not None})
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


SPLITS = {
    "valid": "new samples of the training tasks",
    "ood": "held-out combinations of terms seen in training (the paper's out-of-distribution split)",
    "novel_terms": "tasks of terms never seen in training: no mixer learns them, so R² far below 0 "
    "(worse than always predicting the mean) is expected there",
}
"""the evaluation splits of a demo's table, in order, and what each is (hyla.tasks.fuzzy_logic)"""


def shown_splits(rows: list[dict], metric: str) -> list[str]:
    """The splits of `SPLITS` that some row has `metric` for."""
    return [s for s in SPLITS if any(_value(r, s, metric) is not None for r in rows)]


def split_legend(splits: list[str]) -> str:
    """One line per split: what it evaluates."""
    return "\n".join(f"{split}: {SPLITS[split]}" for split in splits)


def comparison_table(rows: list[dict], metric: str) -> str:
    """One row per mixer: the final metric per split, training loss, speed, wall time and status."""
    splits = shown_splits(rows, metric)
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
