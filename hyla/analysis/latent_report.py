"""Latent-code analyses of several trained models side by side: per task and mixer, each measure's
mean ± s.e. over the models (e.g. the training seeds) and how many of them pass its test, as a
markdown table, JSON and a figure by code set (layer).

Measures, from each model's `analysis.json` (hyla.analysis.pipeline):
- topographic similarity per split and code set (Spearman ρ; passes: permutation p < 0.05);
- held-out probes per (train split -> test split) and code set: fuzzy logic, the mean per-term F1
  on held-out tasks (passes: above both its chance level and always answering "present"); SRAVEN,
  the rule's decoding accuracy (passes: above both its chance level and the majority rule)."""

from __future__ import annotations

import math
from pathlib import Path

from hyla.analysis.intervention_report import group_stat
from hyla.utils import write_json

SIGNIFICANCE = 0.05
# (probe name in analysis.json, its value, the baselines it must beat) per task
PROBES = {
    "fuzzy_logic": ("term_f1_held_out", "mean_f1", ("mean_chance", "mean_always_positive")),
    "sraven": (None, "accuracy", ("chance_accuracy", "majority")),
}


def measurements(analysis: dict) -> list[dict]:
    """One model's measures as rows {measure, split, code_set, value, passes}; value None where the
    similarity is undefined (the codes do not vary across the split's samples)."""
    rows = []
    for split, per_set in analysis["topographic_similarity"].items():
        for code_set, result in per_set.items():
            value = result["spearman"] if result["spearman"] is not None and math.isfinite(result["spearman"]) else None
            passes = value is not None and result["p_value"] < SIGNIFICANCE
            rows.append(_row("topographic similarity", split, code_set, value, passes))
    probe, value, baselines = PROBES[analysis["task"]]
    for pair, per_set in analysis["probes"].items():
        for code_set, results in per_set.items():
            result = results[probe] if probe else results
            passes = all(result[value] > result[baseline] for baseline in baselines)
            rows.append(_row(f"held-out probe ({value})", pair, code_set, result[value], passes))
    return rows


def _row(measure: str, split: str, code_set: str, value: float | None, passes: bool) -> dict:
    return {"measure": measure, "split": split, "code_set": code_set, "value": value, "passes": bool(passes)}


def summarize(analyses: list[dict]) -> list[dict]:
    """Rows {task, mixer, measure, split, code_set, mean, se, passes ("2 of 3"), undefined, per_model}
    over the models of each task and mixer: mean and se over the models where the measure is defined
    (se None with one), groups where it is defined for none left out."""
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
        stat = group_stat([{"mean": row["value"], "se": None} for row in defined])
        summary.append(
            {
                "task": task,
                "mixer": mixer,
                "measure": measure,
                "split": split,
                "code_set": code_set,
                "mean": stat["mean"],
                "se": stat["se"],
                "passes": f"{sum(row['passes'] for _, row in members)} of {len(members)}",
                "undefined": len(members) - len(defined),
                "per_model": [{"seed": run["seed"], "path": run["path"], **row} for run, row in members],
            }
        )
    return summary


def table(summary: list[dict]) -> str:
    lines = [
        "| task | measure | split | code set | mixer | mean ± s.e. | passes | per model (seed: value) |",
        "|---|---|---|---|---|---|---|---|",
    ]
    for row in sorted(summary, key=lambda r: (r["task"], r["measure"], r["split"], r["code_set"], r["mixer"])):
        cell = f"{row['mean']:.3f}" + ("" if row["se"] is None else f" ± {row['se']:.3f}")
        models = ", ".join(
            f"{m['seed']}: " + ("–" if m["value"] is None else f"{m['value']:.3f}") for m in row["per_model"]
        )
        passes = row["passes"] + (f" ({row['undefined']} undefined)" if row["undefined"] else "")
        lines.append(
            f"| {row['task']} | {row['measure']} | {row['split']} | {row['code_set']} | {row['mixer']} | {cell} "
            f"| {passes} | {models} |"
        )
    return "\n".join(lines)


def figure(summary: list[dict]):
    """A panel per (task, measure, split): bars per code set and mixer (mean ± s.e.), a dot per model."""
    from matplotlib.figure import Figure

    panels = sorted({(r["task"], r["measure"], r["split"]) for r in summary})
    mixers = sorted({r["mixer"] for r in summary})
    fig = Figure(figsize=(7, 2.6 * len(panels)))
    axes = fig.subplots(len(panels), 1, squeeze=False)
    for ax, (task, measure, split) in zip(axes[:, 0], panels):
        rows = [r for r in summary if (r["task"], r["measure"], r["split"]) == (task, measure, split)]
        code_sets = sorted({r["code_set"] for r in rows})
        width = 0.8 / len(mixers)
        for m, mixer in enumerate(mixers):
            for c, code_set in enumerate(code_sets):
                found = [r for r in rows if (r["mixer"], r["code_set"]) == (mixer, code_set)]
                if not found:
                    continue
                x = c + (m - (len(mixers) - 1) / 2) * width
                ax.bar(x, found[0]["mean"], width, yerr=found[0]["se"], color=f"C{m}", alpha=0.6, capsize=2,
                       label=mixer if c == 0 else None)  # fmt: skip
                values = [p["value"] for p in found[0]["per_model"] if p["value"] is not None]
                ax.plot([x] * len(values), values, "k.", ms=3)
        ax.axhline(0, color="0.5", lw=0.8)
        ax.set_xticks(range(len(code_sets)), code_sets)
        ax.set_title(f"{task}: {measure}, {split}", fontsize=9)
        ax.legend(fontsize=7)
    fig.tight_layout()
    return fig


def write_report(analyses: list[dict], stem: Path) -> str:
    """stem.json (every model's values and the summary), stem.md (the table) and stem.png; returns the table."""
    from hyla.analysis.plots import save_figure

    summary = summarize(analyses)
    text = table(summary)
    write_json(stem.with_suffix(".json"), {"models": [a["run"] for a in analyses], "summary": summary}, indent=1)
    stem.with_suffix(".md").write_text(text + "\n")
    save_figure(figure(summary), stem.with_suffix(".png"))
    return text
