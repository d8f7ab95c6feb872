"""`hyla demo`: softmax vs linear attention vs HYLA on a CPU-sized fuzzy logic preset.

Trains one model per mixer with the same data, seed and budget, then writes a comparison table
(Markdown + JSON) and the training curves (PNG) into the output folder. Re-running with the same
--out skips finished runs and resumes interrupted ones.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from hyla.configs import PRESETS, get_preset
from hyla.ops.mixers import canonical_mixer_name

DEFAULT_PRESET = "logic_cpu"
DEFAULT_MIXERS = ("softmax", "linear", "hyla")
PERCENT_METRICS = ("r2", "acc", "feature_acc")  # shown ×100, as in the paper's tables


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="hyla demo", description=__doc__.split("\n\n")[0] + " About 10 minutes "
                                     "on a 2-core CPU with the defaults.")
    parser.add_argument("--preset", default=DEFAULT_PRESET, choices=sorted(PRESETS))
    parser.add_argument("--mixers", nargs="+", default=list(DEFAULT_MIXERS), help="mixer names (hyla or authors')")
    parser.add_argument("--steps", type=int, default=None, help="training steps per model (default: the preset's)")
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--out", default=None, help="output folder (default: runs/demo-<timestamp>)")
    parser.add_argument("--threads", type=int, default=-1, help="-1: pick the fastest thread count (default); 0: torch's default")
    parser.add_argument("--compile", action="store_true", help="torch.compile the models")
    parser.add_argument("--eval-samples", type=int, default=None, help="samples per split at periodic evaluations "
                        "(default: the preset's)")
    parser.add_argument("--final-eval-samples", type=int, default=None, help="default: the preset's")
    parser.add_argument("--no-progress", action="store_true")
    args = parser.parse_args(argv)
    try:
        args.mixers = [canonical_mixer_name(m) for m in args.mixers]
    except ValueError as e:
        parser.error(str(e))
    if args.steps is not None and args.steps < 1:
        parser.error("--steps must be >= 1")
    return args


def main(argv: list[str]) -> int:
    from hyla.train import NonFiniteLossError, train
    from hyla.train.run_dir import RunDir

    args = parse_args(argv)
    out = Path(args.out or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    base = get_preset(args.preset)
    train_cfg = base.train
    if args.steps is not None:
        scale = args.steps / train_cfg.steps
        train_cfg = replace(train_cfg, steps=args.steps, warmup_steps=min(train_cfg.warmup_steps, max(1, args.steps // 10)),
                            eval_every=max(1, round(train_cfg.eval_every * scale)),
                            log_every=max(1, min(train_cfg.log_every, args.steps // 10 or 1)),
                            checkpoint_every=max(1, round(train_cfg.checkpoint_every * scale)))
    if args.eval_samples is not None:
        train_cfg = replace(train_cfg, eval_samples=args.eval_samples)
    if args.final_eval_samples is not None:
        train_cfg = replace(train_cfg, final_eval_samples=args.final_eval_samples)
    train_cfg = replace(train_cfg, threads=args.threads, compile=args.compile, progress=not args.no_progress)
    print(f"hyla demo: {', '.join(args.mixers)} on {args.preset} ({base.task}), {train_cfg.steps} steps each -> {out}")

    start = time.perf_counter()
    for mixer in args.mixers:
        cfg = replace(base, seed=args.seed, out_dir=str(out), name=mixer, train=train_cfg,
                      model=replace(base.model, mixer=mixer))
        run = RunDir(out / mixer)
        if run.read_summary().get("status") == "completed":
            print(f"{mixer}: already trained in {run.path}")
            continue
        try:
            train(replace(cfg, resume=run.exists()))
        except NonFiniteLossError as e:
            print(f"{mixer}: {e}", file=sys.stderr)
    wall = time.perf_counter() - start

    rows = collect_rows(out, args.mixers)
    metric = rows[0]["metric_name"] if rows else "r2"
    table = markdown_table(rows, metric)
    reading = describe_ordering(rows, metric)
    report = {"preset": args.preset, "steps": train_cfg.steps, "seed": args.seed, "wall_time_s": wall,
              "metric": metric, "rows": rows, "reading": reading}
    out.mkdir(parents=True, exist_ok=True)
    (out / "demo.json").write_text(json.dumps(report, indent=2) + "\n")
    (out / "demo.md").write_text(f"# hyla demo: {args.preset}, {train_cfg.steps} steps, seed {args.seed}\n\n"
                                 f"{table}\n\n{reading}\n\nTotal wall time {wall:.0f} s.\n")
    plot_curves(out, args.mixers, metric, out / "curves.png")
    print("\n" + table + "\n\n" + reading)
    print(f"\nwrote {out / 'demo.md'}, {out / 'demo.json'}, {out / 'curves.png'} ({wall:.0f} s)")
    return 0


def collect_rows(out: Path, mixers: list[str]) -> list[dict]:
    rows = []
    for mixer in mixers:
        summary_file = out / mixer / "summary.json"
        if not summary_file.exists():
            continue
        s = json.loads(summary_file.read_text())
        rows.append({"mixer": mixer, "status": s["status"], "metric_name": s["metric_name"],
                     "final": s.get("final", {}), "train_loss": s.get("train_loss"),
                     "steps_per_second": s.get("steps_per_second"), "wall_time_s": s.get("wall_time_s"),
                     "num_parameters": s.get("num_parameters")})
    return rows


def _value(row: dict, split: str, metric: str) -> float | None:
    return row["final"].get(split, {}).get(metric)


def markdown_table(rows: list[dict], metric: str) -> str:
    splits = [s for s in ("valid", "ood", "novel_terms") if any(_value(r, s, metric) is not None for r in rows)]
    scale = 100 if metric in PERCENT_METRICS else 1
    unit = " ×100" if scale == 100 else ""
    header = ["mixer"] + [f"{s} {metric}{unit}" for s in splits] + ["final train loss", "steps/s", "wall s", "status"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for r in rows:
        cells = [r["mixer"]]
        cells += [f"{scale * v:.2f}" if (v := _value(r, s, metric)) is not None else "–" for s in splits]
        cells.append(f"{r['train_loss']:.4g}" if r["train_loss"] is not None else "–")
        cells.append(f"{r['steps_per_second']:.1f}" if r["steps_per_second"] else "–")
        cells.append(f"{r['wall_time_s']:.0f}" if r["wall_time_s"] else "–")
        cells.append(r["status"])
        lines.append("| " + " | ".join(cells) + " |")
    return "\n".join(lines)


def describe_ordering(rows: list[dict], metric: str) -> str:
    """One honest sentence per split: the mixers ordered by the metric (whatever the order is)."""
    lower_is_better = metric in ("nll", "loss", "mse")
    lines = []
    for split in ("ood", "valid"):
        scored = [(r["mixer"], v) for r in rows if (v := _value(r, split, metric)) is not None]
        if len(scored) < 2:
            continue
        scored.sort(key=lambda mv: mv[1], reverse=not lower_is_better)
        lines.append(f"{split} {metric}: " + " > ".join(f"{m} ({v:.3f})" for m, v in scored)
                     + (" (lower is better)" if lower_is_better else ""))
    losses = sorted((r["train_loss"], r["mixer"]) for r in rows if r["train_loss"] is not None)
    if len(losses) >= 2:
        lines.append("final training loss: " + " < ".join(f"{m} ({v:.4g})" for v, m in losses))
    return "\n".join(lines)


def plot_curves(out: Path, mixers: list[str], metric: str, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, (ax_loss, ax_metric) = plt.subplots(1, 2, figsize=(11, 4))
    for i, mixer in enumerate(mixers):
        metrics_file = out / mixer / "metrics.jsonl"
        if not metrics_file.exists():
            continue
        records = [json.loads(line) for line in metrics_file.read_text().splitlines() if line.strip()]
        color = f"C{i}"
        train = [r for r in records if r["split"] == "train"]
        ax_loss.plot([r["step"] for r in train], [r["loss"] for r in train], color=color, label=mixer)
        for split, style in (("valid", "--"), ("ood", "-")):
            points = [(r["step"], r[metric]) for r in records if r["split"] == split and metric in r]
            if points:
                ax_metric.plot(*zip(*points), style, color=color, marker="o", markersize=3, label=f"{mixer} {split}")
    ax_loss.set(xlabel="step", ylabel="training loss", yscale="log", title="training loss")
    ax_metric.set(xlabel="step", ylabel=metric, title=f"{metric}: ood (solid), valid (dashed)")
    if metric == "r2":
        low, high = ax_metric.get_ylim()
        ax_metric.set_ylim(max(low, -0.5), min(high, 1.05))
    for ax in (ax_loss, ax_metric):
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
