"""`report.md`: the analysis results as Markdown tables, with the figures linked."""

from __future__ import annotations

from pathlib import Path

from hyla.analysis.figures import RULE_NAMES


def _f(value, digits: int = 3) -> str:
    return "–" if value is None or value != value else f"{value:.{digits}f}"


def write_report(results: dict, path: str | Path) -> Path:
    """Write the report for the results dict of `hyla.analysis.analyze`."""
    kind = results["task"]
    run = results.get("run") or {}
    title = f"# Latent-code analysis ({kind}" + (f", {run['mixer']}" if "mixer" in run else "") + ")"
    lines = [title, "", *([f"Run: `{run['path']}` (checkpoint step {run.get('checkpoint_step')})", ""]
                          if "path" in run else []),
             "Latent code z_qk = a[b, :, q, k] (attention scores after normalization, across heads). "
             + ("Position: the last token attending to itself, per layer."
                if kind == "fuzzy_logic" else
                "Position: each answer token attending to the tokens of the same underlying feature in "
                "panels (2,0) and (2,1), per layer (one row per sample and feature)."),
             "Every probe is shown with its chance level: the same probe fitted on shuffled labels.", "",
             "## Splits", "", "| split | samples | metrics |", "|---|---|---|"]
    for split, summary in results["splits"].items():
        metrics = ", ".join(f"{k} {_f(v)}" for k, v in summary.items() if k != "num_samples")
        lines.append(f"| {split} | {summary['num_samples']} | {metrics} |")

    lines += ["", "## Probes (trained on training tasks, tested on held-out tasks)", ""]
    for pair, per_set in results["probes"].items():
        lines += [f"### {pair}", "", f"![probes](probes_{pair.replace('->', '_to_')}.png)", ""]
        if kind == "sraven":
            lines += ["| codes | rule accuracy | chance | majority | macro F1 | chance |", "|---|---|---|---|---|---|"]
            for name, p in per_set.items():
                lines.append(f"| {name} | {_f(p['accuracy'])} | {_f(p['chance_accuracy'])} | {_f(p['majority'])} "
                             f"| {_f(p['macro_f1'])} | {_f(p['chance_macro_f1'])} |")
        else:
            lines += ["| codes | ridge R² term bits (in dist.) | chance | ridge R² (held-out tasks) | chance "
                      "| mean term F1 (held-out) | chance | always-positive F1 |", "|---|---|---|---|---|---|---|---|"]
            for name, p in per_set.items():
                r_in, r_out, f1 = (p["ridge_term_bits_in_distribution"], p["ridge_term_bits_held_out"],
                                   p["term_f1_held_out"])
                lines.append(f"| {name} | {_f(r_in['r2'])} | {_f(r_in['chance'])} | {_f(r_out['r2'])} "
                             f"| {_f(r_out['chance'])} | {_f(f1['mean_f1'])} | {_f(f1['mean_chance'])} "
                             f"| {_f(f1['mean_always_positive'])} |")
        lines.append("")

    lines += ["## Topographic similarity", "",
              "Spearman correlation between pairwise task distances and pairwise Euclidean distances of the "
              "per-task mean codes; one-sided permutation p-value (task labels shuffled). Task distance: "
              + ("least total Hamming distance between the literal bits of the two tasks' terms over term "
                 "matchings." if kind == "fuzzy_logic" else
                 "a task is a rule multiset; distance = number of rules to replace (K − |A ∩ B|); a sample's "
                 "code is the mean of its K feature codes."), "",
              "| split | codes | Spearman | p-value | tasks | samples per task |", "|---|---|---|---|---|---|"]
    for split, per_set in results["topographic_similarity"].items():
        for name, t in per_set.items():
            lines.append(f"| {split} | {name} | {_f(t['spearman'])} | {_f(t['p_value'], 4)} | {t['num_tasks']} "
                         f"| {_f(t['samples_per_task'], 1)} |")

    lines += ["", "## Mean codes per " + ("rule" if kind == "sraven" else "term"), ""]
    for split, per_set in results["label_similarity"].items():
        if kind == "sraven":
            lines += [f"### {split}", "", "| codes | cos(add, sub) | centered | rank among pairs | nearest to add |",
                      "|---|---|---|---|---|"]
            for name, entry in per_set.items():
                a = entry.get("addition_subtraction")
                if a:
                    lines.append(f"| {name} | {_f(a['cosine'])} | {_f(a['centered_cosine'])} "
                                 f"| {a['rank_among_pairs']} / {a['num_pairs']} "
                                 f"| {RULE_NAMES[a['nearest_rule_to_addition']]} |")
            lines.append("")
        lines += [f"![{split} similarity](similarity_{split}.png)", "",
                  f"![{split} mean codes](mean_codes_{split}.png)", ""]

    lines += ["## Embeddings", ""]
    lines += [f"![{name}]({name})" for name in results["figures"] if name.startswith("embedding_")]
    path = Path(path)
    path.write_text("\n".join(lines) + "\n")
    return path
