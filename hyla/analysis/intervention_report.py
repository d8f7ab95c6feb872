"""Interventions over several trained models: the summary of each mixer's models, the table printed on
the terminal (and by experiments/interventions_table.py), and the figure (docs/interventions.md,
"The command").

A group is the models of one task and mixer (e.g. the three training seeds of HYLA on fuzzy logic).
Every number is given twice: the mean ± s.e. (with two or more models the s.e. over the models'
means, with one model that model's s.e. over queries; the group's `error_bars` says which), and the
median of the scored queries of all the group's models with its bootstrap 95% interval (draws of
models, then of their queries: `median_interval`). The tables and the figure define every site,
condition, reference and column where they appear; the verdicts (`verdict`, by `VERDICT_RULE`) end
the tables."""

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


# ============================================================================= the verdict
VERDICT_RULE = (
    "a patch transfers where the 95% interval of its median lies wholly above the interval of every "
    "control (leak, random task's codes, heads shuffled) and of every reference of no transfer "
    "(unpatched, constant prediction, perfect random task or rule, wrecked)"
)
VERDICT_SITE, VERDICT_LAYERS = "row", "all layers"
"""the setting of a mixer's verdict per split: the query's codes to every key, in every layer"""


def rivals(entry: dict) -> dict[str, dict]:
    """The statistics a patch must clear in one split's entry, at each site and layer setting: the
    controls (there) and the references but B's own (the scale's 1)."""
    return {name: stat for name, stat in entry["reference"].items() if name not in ("donor_run", "donor_target")}


def blockers(entry: dict, site: str, setting: str) -> list[str]:
    """The controls and references whose median interval reaches the patch's lower bound at (site,
    setting) of a split's entry (["patched"] where no query was scored); none: the patch transfers
    (`VERDICT_RULE`)."""
    conditions = entry["sites"][site][setting]
    if conditions["patched"].get("median_ci") is None:
        return ["patched"]
    low = conditions["patched"]["median_ci"][0]
    others = {c: conditions[c] for c in CONDITIONS if c != "patched"} | rivals(entry)
    return [name for name, stat in others.items() if stat.get("median_ci") and stat["median_ci"][1] >= low]


def verdict(group: dict) -> dict[str, dict]:
    """Per split of a group: {"transfers": bool at `VERDICT_SITE`, `VERDICT_LAYERS`; "blockers": what
    stops it there; "passes_at": every "site, layers" where the patch transfers}."""
    result = {}
    for split, entry in group["splits"].items():
        passes = [
            f"{site}, {setting}"
            for site in SITES
            for setting in entry["sites"][site]
            if not blockers(entry, site, setting)
        ]
        blocked = blockers(entry, VERDICT_SITE, VERDICT_LAYERS)
        result[split] = {"transfers": not blocked, "blockers": blocked, "passes_at": passes}
    return result


def verdict_lines(groups: list[dict]) -> str:
    """One line per group and split: the verdict at the row site with all layers, what blocks it, and
    where else the patch transfers."""
    lines = [f"Verdict ({VERDICT_RULE}; per split, at site {VERDICT_SITE} with {VERDICT_LAYERS}):"]
    for group in groups:
        for split, v in verdict(group).items():
            head = f"- {group['task']}, {group['mixer']}, {split}: "
            if v["transfers"]:
                head += "transfers"
            else:
                reached = ", ".join(LABELS[b] for b in v["blockers"] if b != "patched")
                head += f"does not transfer (interval reached by {reached})" if reached else "no scored queries"
            elsewhere = "; ".join(v["passes_at"]) or "nowhere"
            lines.append(f"{head}; transfers at: {elsewhere}")
    return "\n".join(lines)


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
    """Every group's table, each task's legend before its first group, then the verdicts."""
    parts, explained = [], set()
    for group in groups:
        if group["task"] not in explained:
            explained.add(group["task"])
            parts.append(legend(group["task"], group.get("seed")))
        parts.append(group_table(group))
    return "\n\n".join([*parts, verdict_lines(groups)])


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
