"""The figure of `hyla interventions` (docs/interventions.md, "The command"): a row per group (task,
mixer), a panel per (split, site); per layer setting the patch and its three controls as bars (mean
± s.e.) with their medians and bootstrap 95% intervals, the references of no transfer as horizontal
lines, and below the panels one line per site, condition and reference saying what it is."""

from __future__ import annotations

import math

from hyla.analysis.intervention_terms import DOCS, LABELS, SCALE, definition
from hyla.analysis.interventions import CONDITIONS, REFERENCES, SITES, SPLITS

BAR_STYLES = {  # the patch coloured and solid; the controls hatched, the leak control in the patch's hue
    "patched": {"color": "tab:blue", "edgecolor": "tab:blue"},
    "query_side": {"color": "white", "edgecolor": "tab:blue", "hatch": "...."},
    "random_donor": {"color": "0.85", "edgecolor": "0.4", "hatch": "///"},
    "shuffled_heads": {"color": "white", "edgecolor": "0.4", "hatch": "xxx"},
}
LINE_STYLES = {  # B's own and unpatched mark the scale; the no-transfer references are grey or red
    "unpatched": {"color": "black", "ls": "-", "lw": 1.0},
    "donor_run": {"color": "tab:green", "ls": "--", "lw": 1.5},
    "donor_target": {"color": "tab:green", "ls": "--", "lw": 1.5},
    "constant": {"color": "0.35", "ls": "-.", "lw": 1.2},
    "random_task": {"color": "0.35", "ls": ":", "lw": 1.5},
    "random_rule": {"color": "0.35", "ls": ":", "lw": 1.5},
    "wrecked": {"color": "tab:red", "ls": (0, (6, 2)), "lw": 1.0},
}
MEDIAN_STYLE = {"fmt": "D", "color": "tab:orange", "mec": "black", "mew": 0.4, "ms": 3, "lw": 0.9, "zorder": 4}
Y_RANGE = (-1.0, 2.0)
"""the widest y axis: a mean or median beyond it is drawn at the edge, marked ▲/▼ with its value"""
PANEL_INCHES, TITLE_INCHES, LEGEND_INCHES, LINE_INCHES = (3.6, 2.7), 0.55, 0.55, 0.16
SETTING_TICKS = {"all layers": "all"}
MEDIAN_LABEL = "median, bootstrap 95% interval"


def interventions_figure(groups: list[dict]):
    """The figure of `groups` (`summarize`): panels, a legend of what is drawn, and the definitions."""
    from matplotlib.figure import Figure

    columns = [(split, site) for split in SPLITS for site in SITES]
    notes = figure_notes(sorted({group["task"] for group in groups}))
    rows = max(len(groups), 1)
    footer = LEGEND_INCHES + LINE_INCHES * (len(notes) + 1)
    width, height = PANEL_INCHES[0] * len(columns), PANEL_INCHES[1] * rows + TITLE_INCHES + footer
    fig = Figure(figsize=(width, height))
    axes = fig.subplots(rows, len(columns), squeeze=False)
    limits = y_limits(groups)
    for row, group in enumerate(groups):
        for column, (split, site) in enumerate(columns):
            draw_panel(axes[row, column], group, split, site, limits)
            if column == 0:
                unit = "models" if group["error_bars"] == "models" else "queries"
                about = f"{group['task'].replace('_', ' ')}, {group['mixer']}"
                axes[row, column].set_ylabel(f"{about}\ntransfer (± s.e. over {unit})", fontsize=8)
    draw_legends(fig, axes, footer / height, LEGEND_INCHES / 2 / height)
    for i, line in enumerate(notes):
        y = (footer - LEGEND_INCHES - LINE_INCHES * (i + 0.5)) / height
        fig.text(0.01, y, line, fontsize=7.5, va="center")
    tasks = ", ".join(sorted({group["task"].replace("_", " ") for group in groups}))
    fig.suptitle(f"latent-code interventions: {tasks}", fontsize=11, y=1 - 0.15 / height)
    fig.subplots_adjust(
        left=0.06, right=0.99, bottom=(footer + 0.45) / height, top=1 - TITLE_INCHES / height, hspace=0.55, wspace=0.22
    )
    return fig


def figure_notes(tasks: list[str]) -> list[str]:
    """One line per thing drawn (per task when the figure holds both), then how values are drawn."""
    notes = []
    for task in tasks:
        notes += [f"{task.replace('_', ' ')}: {SCALE[task]}"]
        notes += [definition(name, task) for name in (*SPLITS, *SITES)]
        notes += [definition(condition, task) for condition in CONDITIONS]
        notes += [definition(name, task) for name in REFERENCES[task]]
    return notes + [
        "bars: mean ± s.e. (black whisker); ◆ (orange whisker): the median of the scored queries and its bootstrap "
        "95% interval; lines: the references' means",
        "▲/▼ with a number: a mean (◆ a median) beyond the axis, drawn at its edge; whiskers end at the frame. "
        f"Every site, condition and reference in detail: {DOCS}",
    ]


def draw_legends(fig, axes, top: float, row_height: float) -> None:
    """Two legend rows below the panels: what the bars and markers are, then the reference lines."""
    handles = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    bars = [LABELS[c] for c in CONDITIONS] + [MEDIAN_LABEL]
    for row, labels in enumerate((bars, [label for label in handles if label not in bars])):
        labels = [label for label in labels if label in handles]
        if labels:
            anchor = (0.5, top - row * row_height)
            legend = dict(fontsize=8, frameon=False, loc="upper center", ncol=len(labels), bbox_to_anchor=anchor)
            fig.legend([handles[label] for label in labels], labels, **legend)


def y_limits(groups: list[dict]) -> tuple[float, float]:
    """One y axis for every panel: from below 0 to above 1, widened to the means and medians drawn,
    no further than Y_RANGE."""
    values = [-0.15, 1.15]
    for group in groups:
        for entry in group["splits"].values():
            stats = [*entry["reference"].values()]
            stats += [stat for site in entry["sites"].values() for per in site.values() for stat in per.values()]
            values += [stat[key] for stat in stats for key in ("mean", "median") if stat.get(key) is not None]
    return max(Y_RANGE[0], min(values) - 0.05), min(Y_RANGE[1], max(values) + 0.05)


def draw_panel(ax, group: dict, split: str, site: str, limits: tuple[float, float]) -> None:
    if split not in group["splits"]:
        ax.set_axis_off()
        return
    entry = group["splits"][split]
    ax.set_title(f"{group['mixer']} · {split} · site {site}", fontsize=9)
    ax.set_ylim(*limits)
    if not any(entry["num_scored"]):  # the model's 0 and 1 lie closer than MIN_GAP everywhere
        note = "no query scored:\nunpatched and B's own too close"
        ax.text(0.5, 0.5, note, ha="center", fontsize=8, transform=ax.transAxes)
        ax.set_xticks([])
        return
    for name in REFERENCES[group["task"]]:
        mean = entry["reference"][name]["mean"]
        if mean is not None:
            ax.axhline(mean, label=LABELS[name], zorder=1, **LINE_STYLES[name])
    draw_bars(ax, entry["sites"][site], limits)
    ax.set_xlabel("patched layers", fontsize=8, labelpad=1)
    ax.tick_params(labelsize=8)


def draw_bars(ax, per_setting: dict, limits: tuple[float, float]) -> None:
    """Per layer setting a bar per condition (its mean; s.e. whisker left of centre) and its median
    with the 95% interval (right of centre); values beyond `limits` marked at the edge."""
    settings = list(per_setting)
    width = 0.8 / len(CONDITIONS)
    for i, condition in enumerate(CONDITIONS):
        stats = [per_setting[s][condition] for s in settings]
        x = [j + (i - (len(CONDITIONS) - 1) / 2) * width for j in range(len(settings))]
        means = [math.nan if s["mean"] is None else s["mean"] for s in stats]
        ax.bar(x, means, width, label=LABELS[condition], zorder=2, lw=0.8, **BAR_STYLES[condition])
        errors = [0.0 if s["se"] is None else s["se"] for s in stats]
        ax.errorbar(
            [p - width / 4 for p in x], means, yerr=errors, fmt="none", ecolor="black", lw=0.8, capsize=1.5, zorder=3
        )
        for position, stat in zip(x, stats):
            draw_median(ax, position + width / 4, stat, limits)
            mark_clipped(ax, position, stat, limits)
    ax.set_xticks(range(len(settings)), [SETTING_TICKS.get(s, s.removeprefix("layer ")) for s in settings])


def draw_median(ax, x: float, stat: dict, limits: tuple[float, float]) -> None:
    median = stat.get("median")
    if median is None or not limits[0] <= median <= limits[1]:
        return
    low, high = stat["median_ci"]
    ax.errorbar([x], [median], yerr=[[median - low], [high - median]], label=MEDIAN_LABEL, **MEDIAN_STYLE)


def mark_clipped(ax, x: float, stat: dict, limits: tuple[float, float]) -> None:
    """A mean or median beyond the axis: ▲ or ▼ at the edge it leaves by, its value beside it."""
    for top, edge in ((True, limits[1]), (False, limits[0])):
        beyond = lambda value: value is not None and (value > edge if top else value < edge)  # noqa: E731
        parts = [f"{stat['mean']:.2f}"] if beyond(stat["mean"]) else []
        parts += [f"◆{stat['median']:.2f}"] if beyond(stat.get("median")) else []
        if parts:
            ax.plot([x], [edge], marker="^" if top else "v", color="black", ms=4, clip_on=False, zorder=5)
            offset = (0, -5) if top else (0, 5)
            ax.annotate(
                " ".join(parts),
                (x, edge),
                xytext=offset,
                textcoords="offset points",
                rotation=90,
                ha="center",
                va="top" if top else "bottom",
                fontsize=6,
                zorder=5,
                bbox={"fc": "white", "ec": "none", "pad": 0.3},
            )
