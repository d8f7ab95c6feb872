"""The figures of `hyla results` (hyla.runs.results): the final metric per group, against a
numeric setting the groups vary, and against each run's final training loss."""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path
from typing import TYPE_CHECKING

from hyla.runs.result_tables import group_label, metric_splits

if TYPE_CHECKING:
    from matplotlib.figure import Figure


def final_figure(rows: list[dict], metric: str, fields: list[str]) -> Figure:
    """Final `metric` per group (a bar per split) as mean ± s.e. over its seeds: error bars only
    for groups of two seeds or more (a single seed has no standard error, and gets no cap)."""
    from matplotlib.figure import Figure

    from hyla.analysis.plots import legend

    splits = metric_splits(rows, metric)
    fig = Figure(figsize=(max(4, 1.2 * len(rows) * max(1, len(splits)) / 2), 3.5))
    ax = fig.subplots()
    width = 0.8 / max(1, len(splits))
    for i, split in enumerate(splits):
        x = [j + i * width for j in range(len(rows))]
        stats = [row["values"].get(f"{split}/{metric}", (math.nan, None)) for row in rows]
        ax.bar(x, [mean for mean, _ in stats], width, label=split, color=f"C{i % 10}")
        with_se = [(xj, mean, se) for xj, (mean, se) in zip(x, stats) if se is not None]
        if with_se:
            ax.errorbar(
                [a for a, _, _ in with_se],
                [m for _, m, _ in with_se],
                yerr=[e for _, _, e in with_se],
                fmt="none",
                ecolor="black",
                elinewidth=1,
                capsize=3,
            )
    ax.set_xticks([j + width * (len(splits) - 1) / 2 for j in range(len(rows))])
    ax.set_xticklabels([group_label(row["group"]) for row in rows], rotation=30, ha="right", fontsize=8)
    ax.set_xlabel(", ".join(f.split(".")[-1] for f in fields) or "runs")
    ax.set_ylabel(f"{metric} (mean ± s.e.)")
    legend(ax, fontsize=8)
    fig.tight_layout()
    return fig


def numeric_fields(fields: list[str], rows: list[dict]) -> list[str]:
    """The grouping fields whose values are all numbers, at least two of them (a swept setting)."""
    numeric = []
    for field in fields:
        values = {row["group"].get(field) for row in rows}
        if len(values) > 1 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            numeric.append(field)
    return numeric


def against_figure(rows: list[dict], metric: str, x_field: str) -> Figure:
    """Final `metric` (mean ± s.e. over seeds) against the numeric field `x_field`, a panel per split
    and a line per group of the other fields (e.g. OOD R² against the held-out fraction, per mixer)."""
    from matplotlib.figure import Figure

    from hyla.analysis.plots import legend, series_colors

    splits = metric_splits(rows, metric)
    lines = defaultdict(list)  # label of the other fields -> [(x, row)]
    for row in rows:
        others = {f: v for f, v in row["group"].items() if f != x_field}
        lines[group_label(others)].append((row["group"][x_field], row))
    xs = sorted({row["group"][x_field] for row in rows})
    log_axis = xs[0] > 0 and xs[-1] >= 10 * xs[0]  # e.g. 1 and 16 heads: evenly spaced doublings
    fig = Figure(figsize=(3.6 * max(1, len(splits)), 3.4))
    for ax, split in zip(fig.subplots(1, max(1, len(splits)), squeeze=False)[0], splits):
        if log_axis:
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [f"{x:g}" for x in xs])
        colors = series_colors(sorted(lines))
        for label, points in sorted(lines.items()):
            points = sorted((x, row["values"].get(f"{split}/{metric}")) for x, row in points)
            points = [(x, stat) for x, stat in points if stat is not None]
            ax.errorbar(
                [x for x, _ in points],
                [mean for _, (mean, _) in points],
                yerr=[se or 0.0 for _, (_, se) in points],
                marker="o",
                capsize=3,
                color=colors[label],
                label=label,
            )
        ax.set_xlabel(x_field.split(".")[-1])
        ax.set_ylabel(f"{split} {metric} (mean ± s.e.)")
        legend(ax, fontsize=7)
    fig.tight_layout()
    return fig


def fitted_runs(runs: list[dict], fields: list[str]) -> dict[str, list[tuple[float, dict]]]:
    """Each completed run's (final training loss, final metrics {split: {name: value}}), by the label
    of its group; every group is a key (in the order, and so the colours, of the curves)."""
    points = defaultdict(list)
    for run in runs:
        summary = run["summary"]
        group = points[group_label({f: run["config"].get(f) for f in fields})]
        if summary.get("status") == "completed" and summary.get("train_loss") is not None:
            group.append((summary["train_loss"], summary.get("final") or {}))
    return dict(sorted(points.items()))


def fit_figure(points: dict[str, list[tuple[float, dict]]], metric: str) -> Figure:
    """Each completed run's final `metric` against its final training loss (points: `fitted_runs`), a
    panel per split and a colour per group (the colours of the curves): at the same training loss, a
    higher held-out score is better generalization; groups that differ along one line differ in how
    well they fit."""
    from matplotlib.figure import Figure

    from hyla.analysis.plots import series_colors

    splits = sorted(
        {split for group in points.values() for _, final in group for split in final if metric in final[split]}
    )
    losses = [loss for group in points.values() for loss, _ in group]
    log_axis = max(losses) > 10 * min(losses)  # only where the losses span decades: a log axis's labels crowd
    fig = Figure(figsize=(3.2 * max(1, len(splits)) + 2.2, 3.4), layout="constrained")
    handles = {}  # one legend entry a group, to the right of the panels
    colors = series_colors(points)
    for ax, split in zip(fig.subplots(1, max(1, len(splits)), squeeze=False)[0], splits):
        for label, group in points.items():
            xy = [(loss, final[split][metric]) for loss, final in group if final.get(split, {}).get(metric) is not None]
            if xy:
                handles[label] = ax.scatter([x for x, _ in xy], [y for _, y in xy], s=20, color=colors[label])
        if log_axis:
            ax.set_xscale("log")
        ax.set_xlabel("final training loss (a point a run)")
        ax.set_ylabel(f"{split} {metric}")
    fig.legend(handles.values(), handles.keys(), loc="outside right upper", fontsize=7)
    return fig


def plot_final(path: Path, rows: list[dict], metric: str, fields: list[str] = ()) -> Path:
    """`final_figure` written to `path`."""
    from hyla.analysis.plots import save_figure

    return save_figure(final_figure(rows, metric, list(fields)), path)
