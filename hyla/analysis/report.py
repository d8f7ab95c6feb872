"""`report.md`: the analysis results as Markdown tables, with the figures linked."""

from __future__ import annotations

from pathlib import Path

from hyla.analysis.figures import RULE_NAMES
from hyla.analysis.tables import markdown_table

# (probe, value) per column of the fuzzy logic probe table, after the code set's name
FUZZY_LOGIC_PROBE_COLUMNS = (
    ("ridge_term_bits_in_distribution", "r2"),
    ("ridge_term_bits_in_distribution", "chance"),
    ("ridge_term_bits_held_out", "r2"),
    ("ridge_term_bits_held_out", "chance"),
    ("term_f1_held_out", "mean_f1"),
    ("term_f1_held_out", "mean_chance"),
    ("term_f1_held_out", "mean_always_positive"),
)


def _f(value, digits: int = 3) -> str:
    return "–" if value is None or value != value else f"{value:.{digits}f}"


def write_report(results: dict, path: str | Path) -> Path:
    """Write the report for the results dict of `hyla.analysis.analyze`."""
    kind = results["task"]
    lines = _intro_lines(kind, results.get("run") or {})
    lines += _split_lines(results["splits"])
    lines += _probe_lines(results["probes"], kind)
    lines += _topographic_lines(results["topographic_similarity"], kind)
    lines += ["", "## Mean codes per " + ("rule" if kind == "sraven" else "term"), ""]
    for split, per_set in results["label_similarity"].items():
        lines += _mean_code_lines(split, per_set, kind)
    lines += ["## Embeddings", ""]
    lines += [f"![{name}]({name})" for name in results["figures"] if name.startswith("embedding_")]
    path = Path(path)
    path.write_text("\n".join(lines) + "\n")
    return path


def _intro_lines(kind: str, run: dict) -> list[str]:
    """The title, the run, and what a latent code is for this task."""
    title = f"# Latent-code analysis ({kind}" + (f", {run['mixer']}" if "mixer" in run else "") + ")"
    return [
        title,
        "",
        *([f"Run: `{run['path']}` (checkpoint step {run.get('checkpoint_step')})", ""] if "path" in run else []),
        "Latent code z_qk = a[b, :, q, k] (attention scores after normalization, across heads). "
        + (
            "Position: the last token attending to itself, per layer."
            if kind == "fuzzy_logic"
            else "Position: each answer token attending to the tokens of the same underlying feature in "
            "panels (2,0) and (2,1), per layer (one row per sample and feature)."
        ),
        "Every probe is shown with its chance level: the same probe fitted on shuffled labels.",
        "",
    ]


def _split_lines(splits: dict) -> list[str]:
    """The splits section: one table row per split, its number of samples and its metrics."""
    return [
        "## Splits",
        "",
        markdown_table(
            ["split", "samples", "metrics"],
            [
                [
                    split,
                    summary["num_samples"],
                    ", ".join(f"{k} {_f(v)}" for k, v in summary.items() if k != "num_samples"),
                ]
                for split, summary in splits.items()
            ],
        ),
    ]


def _probe_lines(probes: dict, kind: str) -> list[str]:
    """The probes section: per (train split -> test split) pair, its figure and a table of the code sets."""
    lines = ["", "## Probes (trained on training tasks, tested on held-out tasks)", ""]
    for pair, per_set in probes.items():
        lines += [f"### {pair}", "", f"![probes](probes_{pair.replace('->', '_to_')}.png)", ""]
        lines.append(_sraven_probe_table(per_set) if kind == "sraven" else _fuzzy_logic_probe_table(per_set))
        lines.append("")
    return lines


def _sraven_probe_table(per_set: dict) -> str:
    return markdown_table(
        ["codes", "rule accuracy", "chance", "majority", "macro F1", "chance"],
        [
            [name] + [_f(p[key]) for key in ("accuracy", "chance_accuracy", "majority", "macro_f1", "chance_macro_f1")]
            for name, p in per_set.items()
        ],
    )


def _fuzzy_logic_probe_table(per_set: dict) -> str:
    return markdown_table(
        [
            "codes",
            "ridge R² term bits (in dist.)",
            "chance",
            "ridge R² (held-out tasks)",
            "chance",
            "mean term F1 (held-out)",
            "chance",
            "always-positive F1",
        ],
        [[name] + [_f(p[probe][key]) for probe, key in FUZZY_LOGIC_PROBE_COLUMNS] for name, p in per_set.items()],
    )


def _topographic_lines(topographic: dict, kind: str) -> list[str]:
    """The topographic similarity section: what is correlated, the task distance, one row per split and code set."""
    return [
        "## Topographic similarity",
        "",
        "Spearman correlation between pairwise task distances and pairwise Euclidean distances of the "
        "per-task mean codes; one-sided permutation p-value (task labels shuffled). Task distance: "
        + (
            "least total Hamming distance between the literal bits of the two tasks' terms over term matchings."
            if kind == "fuzzy_logic"
            else "a task is a rule multiset; distance = number of rules to replace (K − |A ∩ B|); a sample's "
            "code is the mean of its K feature codes."
        ),
        "",
        markdown_table(
            ["split", "codes", "Spearman", "p-value", "tasks", "samples per task"],
            [
                [split, name, _f(t["spearman"]), _f(t["p_value"], 4), t["num_tasks"], _f(t["samples_per_task"], 1)]
                for split, per_set in topographic.items()
                for name, t in per_set.items()
            ],
        ),
    ]


def _mean_code_lines(split: str, per_set: dict, kind: str) -> list[str]:
    """One split's mean-code section: SRAVEN's addition-vs-subtraction table, the constant code
    sets (their cosines would be those of rounding noise: not drawn), the two figures."""
    lines = []
    if kind == "sraven":
        pairs = [
            (name, entry["addition_subtraction"])
            for name, entry in per_set.items()
            if entry.get("addition_subtraction")
        ]
        lines += [
            f"### {split}",
            "",
            markdown_table(
                ["codes", "cos(add, sub)", "centered", "rank among pairs", "nearest to add"],
                [
                    [
                        name,
                        _f(a["cosine"]),
                        _f(a["centered_cosine"]),
                        f"{a['rank_among_pairs']} / {a['num_pairs']}",
                        RULE_NAMES[a["nearest_rule_to_addition"]],
                    ]
                    for name, a in pairs
                ],
            ),
            "",
        ]
    constant = [name for name, entry in per_set.items() if entry.get("constant_codes")]
    if constant:
        lines += [
            f"Constant codes on {split} (no similarity matrix: it would show rounding noise): "
            + ", ".join(constant)
            + ".",
            "",
        ]
    return lines + [
        f"![{split} similarity](similarity_{split}.png)",
        "",
        f"![{split} mean codes](mean_codes_{split}.png)",
        "",
    ]
