"""Latent-code analyses of several trained models side by side: per task and mixer, each measure's
mean ± s.e. over the models (e.g. the training seeds), its baselines and how many of the models pass
its test, as a markdown table (with what each column means), JSON and a figure by code set (layer).

Measures, from each model's `analysis.json` (hyla.analysis.pipeline):
- topographic similarity per split and code set (Spearman ρ; passes: permutation p < 0.05;
  baseline: ρ = 0, no relation);
- held-out probes per (train split -> test split) and code set: fuzzy logic, the mean per-term F1
  on held-out tasks (passes: above both its chance level and always answering "present"); SRAVEN,
  the rule's decoding accuracy (passes: above both its chance level and the majority rule);
- SRAVEN, paper Fig. 5E: the centered cosine of addition's and subtraction's mean codes per split
  and code set (passes: permutation p < 0.05 against the other rule pairs, i.e. no other pair more
  similar; baselines: the mean over all rule pairs and the most similar other pair)."""

from __future__ import annotations

import math
from pathlib import Path

from hyla.analysis.tables import mean_se
from hyla.utils import write_json

SIGNIFICANCE = 0.05
# (probe name in analysis.json, its value, {baseline's name: its key}: what it must beat) per task
PROBES = {
    "fuzzy_logic": (
        "term_f1_held_out",
        "mean_f1",
        {"chance": "mean_chance", "always 'present'": "mean_always_positive"},
    ),
    "sraven": (None, "accuracy", {"chance": "chance_accuracy", "majority rule": "majority"}),
}
TOPOGRAPHIC, ADDITION_SUBTRACTION = "topographic similarity", "addition-subtraction similarity (centered cosine)"
NO_RELATION = "no relation (ρ = 0)"
MEAN_OF_PAIRS, MOST_SIMILAR = "mean of all rule pairs", "most similar other pair"


def measurements(analysis: dict) -> list[dict]:
    """One model's measures as rows {measure, split, code_set, value, passes, baselines}; value None
    where the measure is undefined (the codes do not vary across the split's samples)."""
    rows = []
    for split, per_set in analysis["topographic_similarity"].items():
        for code_set, result in per_set.items():
            value = result["spearman"] if result["spearman"] is not None and math.isfinite(result["spearman"]) else None
            passes = value is not None and result["p_value"] < SIGNIFICANCE
            rows.append(_row(TOPOGRAPHIC, split, code_set, value, passes, {NO_RELATION: 0.0}))
    probe, value, baselines = PROBES[analysis["task"]]
    for pair, per_set in analysis["probes"].items():
        for code_set, results in per_set.items():
            result = results[probe] if probe else results
            passes = all(result[value] > result[key] for key in baselines.values())
            levels = {name: result[key] for name, key in baselines.items()}
            rows.append(_row(f"held-out probe ({value})", pair, code_set, result[value], passes, levels))
    for split, per_set in analysis.get("label_similarity", {}).items():
        for code_set, entry in per_set.items():
            if analysis["task"] == "sraven":
                test = entry.get("addition_subtraction")
                value, passes = (test["centered_cosine"], test["p_value"] < SIGNIFICANCE) if test else (None, False)
                levels = (
                    {MEAN_OF_PAIRS: test["mean_of_pairs"], MOST_SIMILAR: test["most_similar_other_pair"]}
                    if test
                    else {}
                )
                rows.append(_row(ADDITION_SUBTRACTION, split, code_set, value, passes, levels))
    return rows


def _row(measure: str, split: str, code_set: str, value: float | None, passes: bool, baselines: dict) -> dict:
    return {
        "measure": measure,
        "split": split,
        "code_set": code_set,
        "value": value,
        "passes": bool(passes),
        "baselines": baselines,
    }


def summarize(analyses: list[dict]) -> list[dict]:
    """Rows {task, mixer, measure, split, code_set, mean, se, baselines, passes ("2 of 3"), undefined,
    per_model} over the models of each task and mixer: mean and se over the models where the measure
    is defined (se None with one), each baseline's mean over the same models; groups where it is
    defined for none left out."""
    groups: dict[tuple, list[tuple[dict, dict]]] = {}
    for analysis in analyses:
        run = analysis["run"]
        for row in measurements(analysis):
            key = (run["task"], run["mixer"], row["measure"], row["split"], row["code_set"])
            groups.setdefault(key, []).append((run, row))
    summary = []
    for (task, mixer, measure, split, code_set), members in groups.items():
        defined = [row for _, row in members if row["value"] is not None]
        if not defined:
            continue
        mean, se = mean_se([row["value"] for row in defined])
        baselines = {
            name: sum(row["baselines"][name] for row in defined) / len(defined) for name in defined[0]["baselines"]
        }
        summary.append(
            {
                "task": task,
                "mixer": mixer,
                "measure": measure,
                "split": split,
                "code_set": code_set,
                "mean": mean,
                "se": se,
                "baselines": baselines,
                "passes": f"{sum(row['passes'] for _, row in members)} of {len(members)}",
                "undefined": len(members) - len(defined),
                "per_model": [{"seed": run["seed"], "path": run["path"], **row} for run, row in members],
            }
        )
    return summary


COLUMNS = """Columns: *task*; *measure*: topographic similarity (Spearman ρ between the task distances and the
distances of the tasks' mean codes), a held-out probe's score (SRAVEN: accuracy of naming the rule;
fuzzy logic: mean F1 of naming the task's terms), or the addition-subtraction similarity (centered
cosine of the two rules' mean codes, paper Fig. 5E); *split*: the split measured, or the probe's
training -> test splits; *code set*: the latent codes of one layer, or of all layers side by side;
*mixer*: the models' attention; *mean ± s.e.*: over the models (no s.e. for one model); *baselines*:
what the measure is compared with, mean over the models (chance: the same probe fitted on shuffled
labels; majority rule / always 'present': a trivial answer that ignores the codes; ρ = 0: no
relation; mean of all rule pairs: the similarity of a random rule pair; most similar other pair: what
addition-subtraction must reach to pass); *passes*: how many of the
models pass the measure's test (topographic similarity: permutation p < 0.05; probe: above every
baseline; addition-subtraction: permutation p < 0.05 against the other rule pairs, i.e. the most
similar of the 28 pairs), "undefined" counting models whose codes do not vary on the split; *per
model*: each model's value by its training seed."""


def in_order(summary: list[dict]) -> list[dict]:
    """The rows by task, then in the order the analyses list their measures, splits and code sets
    (layer 0, 1, ..., all layers), then by mixer."""
    place: dict[tuple, int] = {}
    for r in summary:
        place.setdefault((r["task"], r["measure"], r["split"], r["code_set"]), len(place))
    return sorted(
        summary, key=lambda r: (r["task"], place[(r["task"], r["measure"], r["split"], r["code_set"])], r["mixer"])
    )


def table(summary: list[dict]) -> str:
    lines = [
        "| task | measure | split | code set | mixer | mean ± s.e. | baselines | passes | per model (seed: value) |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for row in in_order(summary):
        cell = f"{row['mean']:.3f}" + ("" if row["se"] is None else f" ± {row['se']:.3f}")
        baselines = ", ".join(f"{name} {value:.3f}" for name, value in row["baselines"].items())
        models = ", ".join(
            f"{m['seed']}: " + ("–" if m["value"] is None else f"{m['value']:.3f}") for m in row["per_model"]
        )
        passes = row["passes"] + (f" ({row['undefined']} undefined)" if row["undefined"] else "")
        lines.append(
            f"| {row['task']} | {row['measure']} | {row['split']} | {row['code_set']} | {row['mixer']} | {cell} "
            f"| {baselines} | {passes} | {models} |"
        )
    return "\n".join(lines)


BASELINE_STYLES = ("--", ":", "-.")  # the line style of a panel's first, second, third baseline


def figure(summary: list[dict]):
    """A panel per (task, measure, split): bars per code set and mixer (mean ± s.e.), a dot per model,
    each baseline a short black line across its bar."""
    from matplotlib.figure import Figure
    from matplotlib.lines import Line2D

    from hyla.analysis.plots import series_colors

    panels = list(dict.fromkeys((r["task"], r["measure"], r["split"]) for r in in_order(summary)))
    colors = series_colors(sorted({r["mixer"] for r in summary}))
    fig = Figure(figsize=(9, 2.7 * len(panels)))
    axes = fig.subplots(len(panels), 1, squeeze=False)
    for ax, (task, measure, split) in zip(axes[:, 0], panels):
        rows = [r for r in summary if (r["task"], r["measure"], r["split"]) == (task, measure, split)]
        code_sets = list(dict.fromkeys(r["code_set"] for r in rows))
        width = 0.8 / len(colors)
        for m, mixer in enumerate(colors):
            for c, code_set in enumerate(code_sets):
                found = [r for r in rows if (r["mixer"], r["code_set"]) == (mixer, code_set)]
                if found:
                    _bar(ax, c + (m - (len(colors) - 1) / 2) * width, width, found[0], colors[mixer], c == 0)
        ax.axhline(0, color="0.5", lw=0.8)
        ax.set_xticks(range(len(code_sets)), code_sets)
        ax.set(xlabel="latent codes of", ylabel=measure.replace(" (", "\n("))
        ax.set_title(f"{task}: {measure}, {split}", fontsize=9)
        handles, labels = ax.get_legend_handles_labels()
        for k, name in enumerate(rows[0]["baselines"]):
            handles.append(Line2D([], [], color="black", ls=BASELINE_STYLES[k % len(BASELINE_STYLES)], lw=1.2))
            labels.append(name)
        ax.legend(handles, labels, fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.01, 1.0))
    fig.tight_layout()
    return fig


def _bar(ax, x: float, width: float, row: dict, color: str, label: bool) -> None:
    """One group's bar (mean ± s.e.), its models' values as dots and its baselines as short lines."""
    ax.bar(
        x, row["mean"], width, yerr=row["se"], color=color, alpha=0.6, capsize=2, label=row["mixer"] if label else None
    )
    values = [p["value"] for p in row["per_model"] if p["value"] is not None]
    ax.plot([x] * len(values), values, "k.", ms=3)
    for k, value in enumerate(row["baselines"].values()):
        style = BASELINE_STYLES[k % len(BASELINE_STYLES)]
        ax.hlines(value, x - width / 2, x + width / 2, colors="black", linestyles=style, lw=1.2)


def write_report(analyses: list[dict], stem: Path) -> str:
    """stem.json (every model's values and the summary), stem.md (the table and what its columns mean)
    and stem.png; returns the markdown."""
    from hyla.analysis.plots import save_figure

    summary = summarize(analyses)
    text = table(summary) + "\n\n" + COLUMNS.replace("\n", " ")
    write_json(stem.with_suffix(".json"), {"models": [a["run"] for a in analyses], "summary": summary}, indent=1)
    stem.with_suffix(".md").write_text(text + "\n")
    save_figure(figure(summary), stem.with_suffix(".png"))
    return text
