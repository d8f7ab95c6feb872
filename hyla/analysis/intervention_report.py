"""Interventions over several trained models: mean ± s.e. over the models of each mixer, the table
printed on the terminal (and by experiments/interventions_table.py), and the figure
(docs/interventions.md, "The command").

A group is the models of one task and mixer (e.g. the three training seeds of HYLA on fuzzy logic).
With two or more models the ± is the standard error over the models' means; with one model it is
that model's standard error over queries (the group's `error_bars` says which)."""

from __future__ import annotations

import math
from pathlib import Path

from hyla.analysis.interventions import CONDITIONS, REFERENCES, SITES, SPLITS
from hyla.utils import write_json

LABELS = {
    "patched": "B's codes (the patch)",
    "query_side": "B's query, A's keys (leak control)",
    "random_donor": "random task's codes (control)",
    "shuffled_heads": "B's codes, heads shuffled (control)",
    "unpatched": "unpatched = 0",
    "donor_run": "B's own run = 1",
    "donor_target": "B's answer = 1",
    "constant": "constant prediction",
    "random_task": "a perfect random task",
    "random_rule": "a perfect random rule",
    "wrecked": "wrecked (shuffled predictions)",
}
BAR_STYLES = {  # the patch coloured and solid; the controls hatched, the leak control in the patch's hue
    "patched": {"color": "tab:blue", "edgecolor": "tab:blue"},
    "query_side": {"color": "white", "edgecolor": "tab:blue", "hatch": "...."},
    "random_donor": {"color": "0.85", "edgecolor": "0.4", "hatch": "///"},
    "shuffled_heads": {"color": "white", "edgecolor": "0.4", "hatch": "xxx"},
}
LEGEND_INCHES, TITLE_INCHES = 1.0, 0.5  # room below and above the panels, whatever their number
LINE_STYLES = {  # B's own and unpatched mark the scale; the no-transfer references are grey or red
    "unpatched": {"color": "black", "ls": "-", "lw": 1.0},
    "donor_run": {"color": "tab:green", "ls": "--", "lw": 1.5},
    "donor_target": {"color": "tab:green", "ls": "--", "lw": 1.5},
    "constant": {"color": "0.35", "ls": "-.", "lw": 1.2},
    "random_task": {"color": "0.35", "ls": ":", "lw": 1.5},
    "random_rule": {"color": "0.35", "ls": ":", "lw": 1.5},
    "wrecked": {"color": "tab:red", "ls": (0, (6, 2)), "lw": 1.0},
}


# ============================================================================= mean ± s.e. over models
def group_stat(stats: list[dict]) -> dict:
    """Per-model {"mean", "se"} -> {"mean", "se", "per_model"}: over the models' means when there
    are two or more, else the one model's own (its s.e. over queries)."""
    means = [s["mean"] for s in stats if s["mean"] is not None]
    if len(stats) == 1:
        return {**stats[0], "per_model": [stats[0]["mean"]]}
    mean = sum(means) / len(means) if means else None
    se = None
    if len(means) > 1:
        se = math.sqrt(sum((m - mean) ** 2 for m in means) / (len(means) - 1) / len(means))
    return {"mean": mean, "se": se, "per_model": [s["mean"] for s in stats]}


def summarize_split(entries: list[dict]) -> dict:
    """One split's entries of a group's models -> the same layout with `group_stat`s."""
    first = entries[0]
    return {
        "num_scored": [entry["num_scored"] for entry in entries],
        "reference": {name: group_stat([e["reference"][name] for e in entries]) for name in first["reference"]},
        "sites": {
            site: {
                setting: {
                    condition: group_stat([e["sites"][site][setting][condition] for e in entries])
                    for condition in conditions
                }
                for setting, conditions in settings.items()
            }
            for site, settings in first["sites"].items()
        },
    }


def summarize(per_model: list[dict]) -> list[dict]:
    """Results of `interventions` per model -> one summary per (task, mixer) group, in first-seen
    order: {"task", "mixer", "models", "error_bars", "layer_settings", "splits": {split: ...}}."""
    groups: dict[tuple, list[dict]] = {}
    for result in per_model:
        groups.setdefault((result["task"], result["model"].get("mixer", "?")), []).append(result)
    summaries = []
    for (task, mixer), results in groups.items():
        splits = [s for s in SPLITS if all("sites" in r["splits"].get(s, {}) for r in results)]
        summaries.append(
            {
                "task": task,
                "mixer": mixer,
                "models": [r["model"].get("label", "?") for r in results],
                "error_bars": "models" if len(results) > 1 else "queries",
                "layer_settings": results[0]["layer_settings"],
                "splits": {s: summarize_split([r["splits"][s] for r in results]) for s in splits},
            }
        )
    return summaries


# ============================================================================= the table
def cell(stat: dict) -> str:
    if stat["mean"] is None:
        return "–"
    return f"{stat['mean']:.2f}" if stat["se"] is None else f"{stat['mean']:.2f} ± {stat['se']:.2f}"


def group_table(group: dict) -> str:
    """A group's markdown tables: the references per split, then the patch and controls per split,
    site and layer setting."""
    task = group["task"]
    names = REFERENCES[task]
    over = f"over {len(group['models'])} models" if group["error_bars"] == "models" else "over queries (one model)"
    lines = [
        f"{task}, {group['mixer']}: transfer (0 = unpatched, 1 = B's own), mean ± s.e. {over}; "
        f"models: {', '.join(group['models'])}",
        "",
        "| split | scored queries | " + " | ".join(LABELS[n] for n in names) + " |",
        "|---" * (2 + len(names)) + "|",
    ]
    for split, entry in group["splits"].items():
        scored = "/".join(str(n) for n in entry["num_scored"])
        lines.append(f"| {split} | {scored} | " + " | ".join(cell(entry["reference"][n]) for n in names) + " |")
    lines += ["", "| split | site | layers | " + " | ".join(LABELS[c] for c in CONDITIONS) + " |"]
    lines.append("|---" * (3 + len(CONDITIONS)) + "|")
    for split, entry in group["splits"].items():
        for site in SITES:
            for setting, conditions in entry["sites"][site].items():
                values = " | ".join(cell(conditions[c]) for c in CONDITIONS)
                lines.append(f"| {split} | {site} | {setting} | {values} |")
    return "\n".join(lines)


def tables(groups: list[dict]) -> str:
    return "\n\n".join(group_table(group) for group in groups)


# ============================================================================= the figure
def interventions_figure(groups: list[dict]):
    """A row per group (task, mixer), a panel per (split, site): per layer setting the patch (solid)
    and the three controls (hatched) with their ± as error bars; the references as horizontal lines
    (B's own = 1 green, unpatched = 0 black, the no-transfer references grey and red)."""
    from matplotlib.figure import Figure

    columns = [(split, site) for split in SPLITS for site in SITES]
    rows = max(len(groups), 1)
    height = 2.9 * rows + LEGEND_INCHES + TITLE_INCHES
    fig = Figure(figsize=(3.6 * len(columns), height))
    axes = fig.subplots(rows, len(columns), squeeze=False)
    for row, group in enumerate(groups):
        for column, (split, site) in enumerate(columns):
            ax = axes[row, column]
            if split not in group["splits"]:
                ax.set_axis_off()
                continue
            entry = group["splits"][split]
            ax.set_title(f"{group['mixer']}, {split}, {site} codes", fontsize=9)
            if not any(entry["num_scored"]):  # the model's 0 and 1 lie closer than MIN_GAP everywhere
                note = "no query scored:\nunpatched and B's own too close"
                ax.text(0.5, 0.5, note, ha="center", fontsize=8, transform=ax.transAxes)
                ax.set_xticks([])
            else:
                draw_references(ax, entry["reference"], REFERENCES[group["task"]])
                draw_bars(ax, entry["sites"][site])
            if column == 0:
                unit = "models" if group["error_bars"] == "models" else "queries"
                ax.set_ylabel(f"{group['task']}, {group['mixer']}\ntransfer (± s.e. over {unit})", fontsize=8)
    handles = {}
    for ax in axes.flat:
        for handle, label in zip(*ax.get_legend_handles_labels()):
            handles.setdefault(label, handle)
    if handles:
        fig.legend(handles.values(), handles.keys(), fontsize=8, frameon=False, loc="lower center", ncol=5)
    tasks = sorted({group["task"] for group in groups})
    fig.suptitle(f"latent-code interventions: {', '.join(tasks)}", fontsize=10)
    fig.subplots_adjust(bottom=LEGEND_INCHES / height, top=1 - TITLE_INCHES / height, hspace=0.45, wspace=0.25)
    return fig


def draw_references(ax, reference: dict, names: tuple[str, ...]) -> None:
    for name in names:
        mean = reference[name]["mean"]
        if mean is not None:
            ax.axhline(mean, label=LABELS[name], zorder=1, **LINE_STYLES[name])


def draw_bars(ax, per_setting: dict) -> None:
    settings = list(per_setting)
    width = 0.8 / len(CONDITIONS)
    for i, condition in enumerate(CONDITIONS):
        stats = [per_setting[s][condition] for s in settings]
        x = [j + (i - (len(CONDITIONS) - 1) / 2) * width for j in range(len(settings))]
        means = [math.nan if s["mean"] is None else s["mean"] for s in stats]
        errors = [0.0 if s["se"] is None else s["se"] for s in stats]
        ax.bar(
            x, means, width, yerr=errors, label=LABELS[condition], zorder=2, capsize=2, lw=0.8, **BAR_STYLES[condition]
        )
    ax.set_xticks(range(len(settings)), settings, fontsize=8)
    low, high = ax.get_ylim()
    ax.set_ylim(min(low, -0.15), max(high, 1.15))


# ============================================================================= files
def write_report(per_model: list[dict], stem: Path) -> str:
    """Write STEM.json ({"models": per-model results, "groups": their summaries}) and STEM.png;
    return the tables."""
    from hyla.analysis.plots import save_figure

    groups = summarize(per_model)
    write_json(stem.with_suffix(".json"), {"models": per_model, "groups": groups}, indent=1)
    save_figure(interventions_figure(groups), stem.with_suffix(".png"), tight=True)
    return tables(groups)
