"""Interventions over several trained models: the summary of each mixer's models, the table printed on
the terminal (and by experiments/interventions_table.py), and the figure (docs/interventions.md,
"The command").

A group is the models of one task and mixer (e.g. the three training seeds of HYLA on fuzzy logic).
Every number is given twice: the mean ± s.e. (with two or more models the s.e. over the models'
means, with one model that model's s.e. over queries; the group's `error_bars` says which), and the
median of the scored queries of all the group's models with its bootstrap 95% interval (draws of
models, then of their queries: `median_interval`). The tables and the figure define every site,
condition, reference and column where they appear."""

from __future__ import annotations

from pathlib import Path

from hyla.analysis.intervention_terms import DOCS, LABELS, SCALE, SHOWN_REFERENCES, definition
from hyla.analysis.interventions import (
    BOOTSTRAP_RESAMPLES,
    CONDITIONS,
    MIN_GAP,
    REFERENCES,
    SITES,
    SPLITS,
    median_interval,
)
from hyla.analysis.tables import markdown_table, mean_se
from hyla.utils import write_json


# ============================================================================= over models
def group_stat(stats: list[dict], seed: int) -> dict:
    """Per-model statistics (`query_stats`, with their per-query "scores") -> {"mean", "se", "median",
    "median_ci", "per_model", "per_model_median"}: the mean and s.e. over the models' means when
    there are two or more, else the one model's own (its s.e. over queries); the median of all the
    models' scores and its bootstrap interval (`median_interval`, seeded with `seed`)."""
    per_model = {"per_model": [s["mean"] for s in stats], "per_model_median": [s["median"] for s in stats]}
    if len(stats) == 1:  # (its median's interval: the same draws as the model's own)
        return {key: stats[0][key] for key in ("mean", "se", "median", "median_ci")} | per_model
    means = [s["mean"] for s in stats if s["mean"] is not None]
    mean, se = mean_se(means) if means else (None, None)
    return {"mean": mean, "se": se, **median_interval([s["scores"] for s in stats], seed), **per_model}


def summarize_split(entries: list[dict], seed: int) -> dict:
    """One split's entries of a group's models -> the same layout with `group_stat`s."""
    first = entries[0]
    return {
        "num_scored": [entry["num_scored"] for entry in entries],
        "reference": {name: group_stat([e["reference"][name] for e in entries], seed) for name in first["reference"]},
        "sites": {
            site: {
                setting: {
                    condition: group_stat([e["sites"][site][setting][condition] for e in entries], seed)
                    for condition in conditions
                }
                for setting, conditions in settings.items()
            }
            for site, settings in first["sites"].items()
        },
    }


def summarize(per_model: list[dict]) -> list[dict]:
    """Results of `interventions` per model (in memory, with per-query scores) -> one summary per
    (task, mixer) group, in first-seen order: {"task", "mixer", "models", "error_bars", "seed",
    "layer_settings", "splits": {split: ...}}."""
    groups: dict[tuple, list[dict]] = {}
    for result in per_model:
        groups.setdefault((result["task"], result["model"].get("mixer", "?")), []).append(result)
    summaries = []
    for (task, mixer), results in groups.items():
        splits = [s for s in SPLITS if all("sites" in r["splits"].get(s, {}) for r in results)]
        seed = results[0]["options"]["seed"]
        summaries.append(
            {
                "task": task,
                "mixer": mixer,
                "models": [r["model"].get("label", "?") for r in results],
                "error_bars": "models" if len(results) > 1 else "queries",
                "seed": seed,
                "layer_settings": results[0]["layer_settings"],
                "splits": {s: summarize_split([r["splits"][s] for r in results], seed) for s in splits},
            }
        )
    return summaries


def without_scores(tree):
    """A copy of results without the per-query "scores" (the JSON keeps the statistics only)."""
    if isinstance(tree, dict):
        return {key: without_scores(value) for key, value in tree.items() if key != "scores"}
    if isinstance(tree, list):
        return [without_scores(value) for value in tree]
    return tree


# ============================================================================= the table
def mean_cell(stat: dict) -> str:
    if stat["mean"] is None:
        return "–"
    return f"{stat['mean']:.2f}" if stat["se"] is None else f"{stat['mean']:.2f} ± {stat['se']:.2f}"


def median_cell(stat: dict) -> str:
    if stat.get("median") is None:
        return "–"
    low, high = stat["median_ci"]
    return f"{stat['median']:.2f} [{low:.2f}, {high:.2f}]"


def legend(task: str, seed: int | None) -> str:
    """What every site, condition, reference and column of `group_table` means, one line each."""
    seeded = "" if seed is None else f", seed {seed}"
    references = [name for name in SHOWN_REFERENCES if name in REFERENCES[task]]
    lines = [
        f"How to read the {task.replace('_', ' ')} tables (details: {DOCS}):",
        SCALE[task],
        f"scored queries (title, per model): those whose 0 and 1 lie at least {MIN_GAP} apart; only they are scored",
        *(definition(split, task) for split in SPLITS),
        *(definition(site, task) for site in SITES),
        "layers: the layers whose codes are patched: each alone (layer i), then all together",
        "statistic: mean ± s.e. (over the scored queries of one model, or over the models' means); "
        f"median [95% CI] of the scored queries of all the group's models ({BOOTSTRAP_RESAMPLES:,} "
        f"bootstrap draws of models, then of their queries{seeded})",
        *(definition(condition, task) for condition in CONDITIONS),
        *(definition(name, task) for name in references),
        "the references do not depend on site or layers: each split's values stand on all of its rows",
    ]
    return "\n".join(f"- {line}" if i else line for i, line in enumerate(lines))


def group_table(group: dict) -> str:
    """One group's table: per split, site and layer setting, the mean row and the median row of the
    patch, its three controls and the references of no transfer."""
    task = group["task"]
    references = [name for name in SHOWN_REFERENCES if name in REFERENCES[task]]
    header = ["split", "site", "layers", "statistic", *(LABELS[c] for c in CONDITIONS)]
    header += [LABELS[name] for name in references]
    rows = []
    for split, entry in group["splits"].items():
        for site in SITES:
            for setting, conditions in entry["sites"][site].items():
                for statistic, cell in (("mean ± s.e.", mean_cell), ("median [95% CI]", median_cell)):
                    values = [cell(conditions[c]) for c in CONDITIONS]
                    values += [cell(entry["reference"][name]) for name in references]
                    rows.append([split, site, setting, statistic, *values])
    over = f"over {len(group['models'])} models" if group["error_bars"] == "models" else "over queries (one model)"
    scored = ", ".join(f"{split} {'/'.join(map(str, e['num_scored']))}" for split, e in group["splits"].items())
    title = (
        f"{task}, {group['mixer']}: transfer (0 = unpatched, 1 = B's own), s.e. {over}; "
        f"models: {', '.join(group['models'])}; scored queries: {scored or 'none'}"
    )
    return f"{title}\n\n{markdown_table(header, rows)}"


def tables(groups: list[dict]) -> str:
    """Every group's table, each task's legend before its first group."""
    parts, explained = [], set()
    for group in groups:
        if group["task"] not in explained:
            explained.add(group["task"])
            parts.append(legend(group["task"], group.get("seed")))
        parts.append(group_table(group))
    return "\n\n".join(parts)


# ============================================================================= files
def write_report(per_model: list[dict], stem: Path) -> str:
    """Write STEM.json ({"models": per-model results, "groups": their summaries}, without the
    per-query scores) and STEM.png; return the tables."""
    from hyla.analysis.intervention_figure import interventions_figure
    from hyla.analysis.plots import save_figure

    groups = summarize(per_model)
    write_json(stem.with_suffix(".json"), {"models": without_scores(per_model), "groups": groups}, indent=1)
    save_figure(interventions_figure(groups), stem.with_suffix(".png"))
    return tables(groups)
