"""`hyla results DIR`: aggregate run folders into tables (mean ± standard error over seeds),
CSV/JSON exports and plots.

Runs are grouped by every config field that varies among them and changes what a run computes
(model, task, optimization, steps, ...): seeds are aggregated, and bookkeeping fields (name,
folders, progress bars, threads, logging, evaluation schedule, stop_at, ...) never split a group.
A group of one seed shows no error bar. Writes `results.md`, `results.csv`, `results.json`,
`results_<metric>.png` (final metric per split) and `curves_<metric>.png` (evaluation curves).
"""

from __future__ import annotations

import csv
import json
import math
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path

from matplotlib.figure import Figure
from tyro.conf import Positional

from hyla import tables
from hyla.jsonio import write_json
from hyla.plots import plot_curves, save_figure


def bookkeeping_fields() -> frozenset[str]:
    """Config fields that do not change what a run computes (final_eval_samples does: it is kept)."""
    from hyla.configs import RESUMABLE_CHANGES

    return frozenset({"seed", "name", "out_dir", "resume", "preset", "train.deterministic"}
                     | set(RESUMABLE_CHANGES)) - {"train.final_eval_samples"}


def _leaves(d: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(_leaves(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def find_runs(root: str | Path) -> list[dict]:
    """Every run folder below root with a config and a summary: {path, config (flat), summary, metrics}."""
    from hyla.train.run_dir import RunDir

    runs = []
    for summary_file in sorted(Path(root).rglob("summary.json")):
        run = RunDir(summary_file.parent)
        if not run.config_file.exists():
            continue
        runs.append({"path": run.path, "config": _leaves(json.loads(run.config_file.read_text())),
                     "summary": run.read_summary(), "metrics": run.read_metrics()})
    return runs


def mean_se(values: list[float]) -> tuple[float, float | None]:
    """Mean and standard error (sample std / sqrt(n); None for a single value)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def varying_fields(runs: list[dict]) -> list[str]:
    keys = sorted(set().union(*(r["config"] for r in runs)))
    bookkeeping = bookkeeping_fields()
    return [k for k in keys if k not in bookkeeping and len({json.dumps(r["config"].get(k)) for r in runs}) > 1]


def aggregate(runs: list[dict]) -> tuple[list[str], list[dict]]:
    """(group fields, one row per group): {group values, n, seeds, <split>/<metric>: (mean, se), train_loss, steps_per_second}."""
    fields = varying_fields(runs)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for run in runs:
        groups[tuple(json.dumps(run["config"].get(f)) for f in fields)].append(run)
    rows = []
    for key, members in groups.items():
        completed = [m for m in members if m["summary"].get("status") == "completed"]
        row = {"group": dict(zip(fields, (json.loads(k) for k in key))), "n": len(completed),
               "seeds": sorted(m["config"].get("seed") for m in completed), "values": {}}
        values = defaultdict(list)
        for m in completed:
            s = m["summary"]
            for split, metrics in (s.get("final") or {}).items():
                for name, value in metrics.items():  # null: the metric was not finite
                    values[f"{split}/{name}"].append(math.nan if value is None else value)
            for name in ("train_loss", "steps_per_second", "wall_time_s"):
                if s.get(name) is not None:
                    values[name].append(s[name])
        row["values"] = {name: mean_se(v) for name, v in values.items() if len(v) == len(completed)}
        rows.append(row)
    return fields, rows


def _label(group: dict) -> str:
    return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in group.items()) or "all"


def results_table(fields: list[str], rows: list[dict], metric: str) -> str:
    """Main metric per split (×100, as in the paper's tables), training loss and speed."""
    splits = sorted({name.split("/")[0] for row in rows for name in row["values"] if name.endswith(f"/{metric}")})
    header = [f.split(".")[-1] for f in fields] + ["n"] + [f"{s} {metric} ×100" for s in splits] + ["train loss", "steps/s"]
    lines = []
    for row in rows:
        cells = [str(row["group"].get(f)) for f in fields] + [str(row["n"])]
        for split in splits:
            m = row["values"].get(f"{split}/{metric}")
            cells.append(_mean_se_text(m, scale=100, digits=".2f"))
        loss, speed = row["values"].get("train_loss"), row["values"].get("steps_per_second")
        cells.append(_mean_se_text(loss, digits=".4g", se_digits=".2g"))
        cells.append(f"{speed[0]:.1f}" if speed else "–")
        lines.append(cells)
    return tables.markdown_table(header, lines)


def _mean_se_text(value: tuple | None, scale: float = 1.0, digits: str = ".2f", se_digits: str | None = None) -> str:
    if value is None:
        return "–"
    mean, se = value
    text = f"{scale * mean:{digits}}"
    return text if se is None else f"{text} ± {scale * se:{se_digits or digits}}"


def write_csv(path: Path, fields: list[str], rows: list[dict]) -> None:
    names = sorted({n for row in rows for n in row["values"]})
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(fields + ["n", "seeds"] + [c for n in names for c in (f"{n}_mean", f"{n}_se")])
        for row in rows:
            cells = [row["group"].get(f) for f in fields] + [row["n"], " ".join(map(str, row["seeds"]))]
            for n in names:
                cells += list(row["values"].get(n, ("", "")))
            writer.writerow(cells)


def final_figure(rows: list[dict], metric: str, fields: list[str]) -> Figure:
    """Final `metric` per group (a bar per split) as mean ± s.e. over its seeds: error bars only
    for groups of two seeds or more (a single seed has no standard error, and gets no cap)."""
    splits = sorted({n.split("/")[0] for row in rows for n in row["values"] if n.endswith(f"/{metric}")})
    fig = Figure(figsize=(max(4, 1.2 * len(rows) * max(1, len(splits)) / 2), 3.5))
    ax = fig.subplots()
    width = 0.8 / max(1, len(splits))
    for i, split in enumerate(splits):
        x = [j + i * width for j in range(len(rows))]
        stats = [row["values"].get(f"{split}/{metric}", (math.nan, None)) for row in rows]
        ax.bar(x, [mean for mean, _ in stats], width, label=split, color=f"C{i % 10}")
        with_se = [(xj, mean, se) for xj, (mean, se) in zip(x, stats) if se is not None]
        if with_se:
            ax.errorbar([a for a, _, _ in with_se], [m for _, m, _ in with_se], yerr=[e for _, _, e in with_se],
                        fmt="none", ecolor="black", elinewidth=1, capsize=3)
    ax.set_xticks([j + width * (len(splits) - 1) / 2 for j in range(len(rows))])
    ax.set_xticklabels([_label(row["group"]) for row in rows], rotation=30, ha="right", fontsize=8)
    ax.set_xlabel(", ".join(f.split(".")[-1] for f in fields) or "runs")
    ax.set_ylabel(f"{metric} (mean ± s.e.)")
    ax.legend(fontsize=8)
    fig.tight_layout()
    return fig


def plot_final(path: Path, rows: list[dict], metric: str, fields: list[str] = ()) -> Path:
    """`final_figure` written to `path`."""
    return save_figure(final_figure(rows, metric, list(fields)), path)


def summarize(root: str | Path, out: str | Path | None = None) -> str:
    """Aggregate the runs below root; write the tables and plots into `out` (default root)."""
    from hyla.train.run_dir import RunError

    runs = find_runs(root)
    if not runs:
        raise RunError(f"no run folders (with config.json and summary.json) below {root}")
    out = Path(out or root)
    out.mkdir(parents=True, exist_ok=True)
    fields, rows = aggregate(runs)
    metrics = sorted({r["summary"].get("metric_name") for r in runs if r["summary"].get("metric_name")})
    tables = []
    for metric in metrics:
        tables.append(f"### {metric}\n\n{results_table(fields, rows, metric)}")
        plot_final(out / f"results_{metric}.png", rows, metric, fields)
        runs_by_label = defaultdict(list)
        for run in runs:
            runs_by_label[_label({f: run["config"].get(f) for f in fields})].append(run["metrics"])
        plot_curves(out / f"curves_{metric}.png", dict(sorted(runs_by_label.items())), metric)
    text = "\n\n".join(tables)
    (out / "results.md").write_text(f"# Results for {root}\n\n{text}\n")
    write_csv(out / "results.csv", fields, rows)
    write_json(out / "results.json",
               [{"group": r["group"], "n": r["n"], "seeds": r["seeds"], "values": r["values"]} for r in rows])
    return text


@dataclass
class ResultsOptions:
    """Aggregate the run folders below DIR into mean ± s.e. tables (Markdown, CSV, JSON) and plots."""

    dir: Positional[Path]
    """folder containing run folders (searched recursively)"""
    out: Path | None = None
    """where to write the tables and plots (default: DIR)"""


def main(argv: list[str]) -> int:
    from hyla.configs import parse_options

    args = parse_options(ResultsOptions, argv, "hyla results", __doc__)
    print(summarize(args.dir, args.out))
    return 0
