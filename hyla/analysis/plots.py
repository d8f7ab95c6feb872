"""Figures without process-wide state: `matplotlib.figure.Figure` objects, never pyplot.

pyplot keeps a global figure registry and picks a GUI backend for the whole process; a library
must not. A bare `Figure` renders to PNG through its own canvas (`fig.savefig`), in any process,
with or without a display.
"""

from __future__ import annotations

import math
from collections import defaultdict
from pathlib import Path

from matplotlib.figure import Figure

EVAL_SPLIT_ORDER = ("valid", "ood", "novel_terms")


def legend(ax, **options) -> None:
    """`ax.legend(**options)` when something in `ax` is labelled (matplotlib warns on an empty one)."""
    if ax.get_legend_handles_labels()[0]:
        ax.legend(**options)


def series_colors(labels) -> dict[str, str]:
    """A colour per series label, each mixer's the same in every figure (`hyla demo`'s, `hyla
    results`', the latent-structure scatter): when the labels are distinct mixers (`hyla` or
    `mixer=hyla`, hyla's or the authors' names), a mixer's colour is its place in
    hyla.ops.mixers.NAMED_MIXERS (softmax blue, linear orange, HYLA green); other labels take the
    colours in order."""
    from hyla.ops.mixers import AUTHOR_NAMES, NAMED_MIXERS

    labels = list(labels)
    mixers = [AUTHOR_NAMES.get(name, name) for name in (label.removeprefix("mixer=") for label in labels)]
    if len(set(mixers)) == len(mixers) and all(mixer in NAMED_MIXERS for mixer in mixers):
        order = list(NAMED_MIXERS)
        return {label: f"C{order.index(mixer) % 10}" for label, mixer in zip(labels, mixers)}
    return {label: f"C{i % 10}" for i, label in enumerate(labels)}


def save_figure(fig: Figure, path: str | Path, dpi: int = 120, tight: bool = False) -> Path:
    """Write `fig` as an image (format from the suffix), creating the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=dpi, bbox_inches="tight" if tight else None)
    return path


def mean_se_curve(runs: list[list[dict]], split: str, key: str) -> tuple[list[int], list[float], list[float | None]]:
    """(steps, mean of `key` over the runs at each step, its standard error, None where fewer than 2
    runs have it) from metrics.jsonl records of one or more runs (e.g. seeds); records without a
    finite value (missing, or null for NaN) are skipped."""
    values = defaultdict(list)
    for records in runs:
        for record in records:
            if record.get("split") == split and record.get(key) is not None:
                values[record["step"]].append(record[key])
    steps = sorted(values)
    means = [sum(values[s]) / len(values[s]) for s in steps]
    ses = [
        math.sqrt(sum((v - m) ** 2 for v in values[s]) / (len(values[s]) - 1) / len(values[s]))
        if len(values[s]) > 1
        else None
        for s, m in zip(steps, means)
    ]
    return steps, means, ses


def curves_figure(
    runs_by_label: dict[str, list[list[dict]]], metric: str, batch_size: int | None = None
) -> Figure | None:
    """Training loss and evaluation curves, one line per label (e.g. a mixer, or a group of runs
    that differ only in the seed): the mean over that label's runs at each step, with a band of
    ± one standard error where at least two runs have the step (none for a single seed).

    runs_by_label: {label: [the metrics.jsonl records of one run, ...]}. Panels: the training
    loss (log scale), then `metric` on each evaluation split found. With the runs' batch size, a
    second x axis on top counts the training examples seen. None when there is no record.
    """
    splits = {r["split"] for runs in runs_by_label.values() for records in runs for r in records if "split" in r}
    eval_splits = sorted(splits - {"train"}, key=lambda s: ((EVAL_SPLIT_ORDER + (s,)).index(s), s))
    panels = (["train"] if "train" in splits else []) + eval_splits
    if not panels:
        return None
    fig = Figure(figsize=(4.2 * len(panels), 3.4))
    axes = fig.subplots(1, len(panels), squeeze=False)[0]
    colors = series_colors(runs_by_label)
    for ax, split in zip(axes, panels):
        key = "loss" if split == "train" else metric
        for label, runs in runs_by_label.items():
            steps, means, ses = mean_se_curve(runs, split, key)
            if steps:
                ax.plot(
                    steps, means, color=colors[label], marker="" if split == "train" else "o", markersize=3, label=label
                )
                _se_band(ax, steps, means, ses, colors[label])
        ax.set(xlabel="step", ylabel=key, title="training loss" if split == "train" else f"{split} {metric}")
        if split == "train":
            ax.set_yscale("log")
        elif metric == "r2":  # early R² can be hugely negative; keep the interesting range visible
            low, high = ax.get_ylim()
            ax.set_ylim(max(low, -0.5), min(high, 1.05))
        if batch_size:
            scale = batch_size / 1e6  # steps -> millions of examples
            top = ax.secondary_xaxis("top", functions=(lambda s: s * scale, lambda e: e / scale))
            top.set_xlabel("training examples seen (millions)", fontsize=8)
        ax.grid(alpha=0.3)
    legend(axes[0], fontsize=7)
    fig.tight_layout()
    return fig


def _se_band(ax, steps: list[int], means: list[float], ses: list[float | None], color: str) -> None:
    """Mean ± s.e. as a shaded band over the steps that have a standard error."""
    with_se = [(s, m, e) for s, m, e in zip(steps, means, ses) if e is not None]
    if with_se:
        x, m, e = (list(column) for column in zip(*with_se))
        ax.fill_between(x, [a - b for a, b in zip(m, e)], [a + b for a, b in zip(m, e)], color=color, alpha=0.2, lw=0)


def plot_curves(
    path: str | Path, runs_by_label: dict[str, list[list[dict]]], metric: str, batch_size: int | None = None
) -> Path | None:
    """`curves_figure` written to `path`; None (and nothing written) when there is no record."""
    fig = curves_figure(runs_by_label, metric, batch_size)
    return None if fig is None else save_figure(fig, path)
