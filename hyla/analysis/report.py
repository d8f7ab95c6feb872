"""`report.md`: the analysis results as Markdown tables, each followed by what its columns mean, with
the figures linked."""

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
CODES_COLUMN = "*codes*: the latent codes measured, of one layer or of all layers side by side"
SPLIT_COLUMN = "*split*: the split whose codes are measured (see Splits)"
SIGNIFICANCE = 0.05


def _f(value, digits: int = 3) -> str:
    return "–" if value is None or value != value else f"{value:.{digits}f}"


def columns(*meanings: str) -> str:
    """The line under a table that says what its columns mean."""
    return "Columns: " + "; ".join(meanings) + "."


def write_report(results: dict, path: str | Path) -> Path:
    """Write the report for the results dict of `hyla.analysis.analyze`."""
    kind = results["task"]
    lines = _intro_lines(kind, results.get("run") or {})
    lines += _split_lines(results["splits"], kind)
    lines += _probe_lines(results["probes"], kind)
    lines += _topographic_lines(results["topographic_similarity"], kind)
    if kind == "sraven":
        lines += _addition_subtraction_lines(results["label_similarity"], results["figures"])
    lines += ["", "## Mean codes per " + ("rule" if kind == "sraven" else "term"), ""]
    for split, per_set in results["label_similarity"].items():
        lines += _mean_code_lines(split, per_set)
    lines += ["## Embeddings", ""]
    lines += [f"![{name}]({name})" for name in results["figures"] if name.startswith("embedding_")]
    path = Path(path)
    path.write_text("\n".join(lines) + "\n")
    return path


def _read_line(source: dict) -> str:
    """What the weights were read from: full path and sha256 (hyla.train.load_run_at_step)."""
    return f"Read: `{source['path']}/{source['file']}`, sha256 `{source['sha256']}`"


def _intro_lines(kind: str, run: dict) -> list[str]:
    """The title, the run, and what a latent code is for this task."""
    title = f"# Latent-code analysis ({kind}" + (f", {run['mixer']}" if "mixer" in run else "") + ")"
    return [
        title,
        "",
        *([f"Run: `{run['path']}` (checkpoint step {run.get('checkpoint_step')})", ""] if "path" in run else []),
        *([_read_line(run["source"]), ""] if "source" in run else []),
        "Latent code z_qk = a[b, :, q, k] (attention scores after normalization, across heads). "
        + (
            "Position: the last token attending to itself, per layer."
            if kind == "fuzzy_logic"
            else "Position: each answer token attending to the tokens of the same underlying feature in "
            "panels (2,0) and (2,1), per layer (one row per sample and feature)."
        ),
        "Every probe is shown with its chance level, the same probe fitted on shuffled labels, and with "
        "the score of a trivial answer that ignores the codes.",
        "",
    ]


def _split_lines(splits: dict, kind: str) -> list[str]:
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
        "",
        columns(
            "*split*: the task's split the sequences come from (valid: training tasks, ood: held-out tasks; "
            "the suffixes name the input variants of docs/tasks.md)",
            "*samples*: the sequences whose codes were collected",
            "*metrics*: the model's own scores on them, mean over the sequences ("
            + (
                "acc: the whole answer panel right, feature_acc: the share of its features right)"
                if kind == "sraven"
                else "r2: 1 − squared error / variance of the sequence's targets, mse: the squared error)"
            ),
        ),
    ]


def _probe_lines(probes: dict, kind: str) -> list[str]:
    """The probes section: per (train split -> test split) pair, its figure and a table of the code sets."""
    lines = ["", "## Probes (trained on training tasks, tested on held-out tasks)", ""]
    for pair, per_set in probes.items():
        lines += [f"### {pair}", "", f"![probes](probes_{pair.replace('->', '_to_')}.png)", ""]
        lines += _sraven_probe_table(per_set) if kind == "sraven" else _fuzzy_logic_probe_table(per_set)
        lines.append("")
    return lines


def _sraven_probe_table(per_set: dict) -> list[str]:
    keys = ("accuracy", "chance_accuracy", "majority", "macro_f1", "chance_macro_f1")
    return [
        markdown_table(
            ["codes", "rule accuracy", "chance", "majority", "macro F1", "chance"],
            [[name] + [_f(p[key]) for key in keys] for name, p in per_set.items()],
        ),
        "",
        columns(
            CODES_COLUMN,
            "*rule accuracy*: share of held-out (sample, feature) rows whose rule a logistic probe, trained on "
            "the first split, names right (8 rules)",
            "*chance*: the same probe trained on shuffled rules",
            "*majority*: always naming the training split's most frequent rule",
            "*macro F1*: the F1 score per rule, averaged over the rules (so a rare rule counts as much as a "
            "frequent one), and its *chance* as above",
        ),
    ]


def _fuzzy_logic_probe_table(per_set: dict) -> list[str]:
    rows = [[name] + [_f(p[probe][key]) for probe, key in FUZZY_LOGIC_PROBE_COLUMNS] for name, p in per_set.items()]
    header = [
        "codes",
        "ridge R² term bits (in dist.)",
        "chance",
        "ridge R² (held-out tasks)",
        "chance",
        "mean term F1 (held-out)",
        "chance",
        "always-positive F1",
    ]
    return [
        markdown_table(header, rows),
        "",
        columns(
            CODES_COLUMN,
            "*ridge R² term bits (in dist.)*: a ridge regression from the codes to the literal bits of the "
            "task's terms, fitted on half of the first split and scored on its other half (R² averaged over "
            "the bits)",
            "*ridge R² (held-out tasks)*: the same fitted on the first split, scored on the second, whose "
            "tasks it never saw",
            "each *chance*: the same probe fitted on shuffled targets",
            "*mean term F1 (held-out)*: per term, a logistic probe of whether the term is part of the task, "
            "trained on the first split and scored on the second; F1 averaged over the terms",
            "*always-positive F1*: the F1 of answering 'present' for every term, the best a probe that "
            "ignores the codes can do",
        ),
        "",
        "R² is 1 for a perfect read-out and 0 for predicting the targets' mean; below 0, the probe predicts "
        "worse than that mean. On held-out tasks a large negative R² (e.g. −50) says that the linear "
        "read-out learned on the training tasks does not carry over: it extrapolates to codes unlike any "
        "it was fitted on (the figure draws such values at −1, marked as clipped, with their value written above).",
    ]


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
        "",
        columns(
            SPLIT_COLUMN,
            CODES_COLUMN,
            "*Spearman*: the correlation above (0: no relation between task distance and code distance; "
            "1: the codes order the task pairs exactly as their distances do)",
            "*p-value*: the share of permutations (task labels shuffled, plus the observed one) with a "
            "correlation at least as high; the smallest possible is 1 / (permutations + 1)",
            "*tasks*: the distinct tasks among the samples (at most 400 enter, a seeded subset)",
            "*samples per task*: the samples averaged into each task's mean code, on average",
        ),
    ]


ADDITION_SUBTRACTION_HEADER = [
    "split",
    "codes",
    "cos(add, sub)",
    "centered",
    "mean of all pairs",
    "most similar other pair",
    "rank",
    "p-value",
    "nearest to add",
]


def _addition_subtraction_lines(similarity: dict, figure_names: list[str]) -> list[str]:
    """SRAVEN, paper Fig. 5E: per split and code set, the addition-vs-subtraction similarity and its test."""
    rows = [
        [
            split,
            name,
            _f(a["cosine"]),
            _f(a["centered_cosine"]),
            _f(a["mean_of_pairs"]),
            _f(a["most_similar_other_pair"]),
            f"{a['rank_among_pairs']} / {a['num_pairs']}",
            _f(a["p_value"]),
            RULE_NAMES[a["nearest_rule_to_addition"]],
        ]
        for split, per_set in similarity.items()
        for name, entry in per_set.items()
        if (a := entry.get("addition_subtraction"))
    ]
    if not rows:
        return []
    return [
        "",
        "## Do addition and subtraction share codes? (paper Fig. 5E)",
        "",
        *(
            ["![addition and subtraction](addition_subtraction.png)", ""]
            if "addition_subtraction.png" in figure_names
            else []
        ),
        markdown_table(ADDITION_SUBTRACTION_HEADER, rows),
        "",
        columns(
            SPLIT_COLUMN,
            CODES_COLUMN,
            "*cos(add, sub)*: cosine similarity of the mean codes of the rows whose rule is addition and of "
            "those whose rule is subtraction",
            "*centered*: the same after subtracting the mean over the 8 rules' mean codes (what every rule "
            "shares, which makes every raw cosine near 1)",
            "*mean of all pairs*: the centered cosine averaged over all 28 rule pairs",
            "*most similar other pair*: the highest centered cosine of the 27 other pairs",
            "*rank*: the place of (addition, subtraction) among the 28 pairs, most similar first",
            "*p-value*: permutation test of the rule names (rank / 28): the share of rule pairs at least as "
            "similar; exact, no sampling",
            "*nearest to add*: the rule whose mean code is most similar to addition's (centered)",
        ),
        "",
        "The test asks whether addition and subtraction are more alike than rules paired at random: under "
        "the null the names are exchangeable, so (addition, subtraction) is as likely to be any of the 28 "
        f"pairs. With 8 rules the smallest p-value is 1/28 = 0.036: below {SIGNIFICANCE} only when they are "
        "the most similar pair. Shuffling rules across samples instead would only test whether the codes "
        "carry the rule at all (the probes do that).",
    ]


def _mean_code_lines(split: str, per_set: dict) -> list[str]:
    """One split's mean-code section: the constant code sets (their cosines would be those of
    rounding noise: not drawn), the two figures."""
    lines = [f"### {split}", ""]
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
