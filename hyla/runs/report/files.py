"""The committed files the paper's report reads, and the values it takes from run records.

Every file is read below `RESULTS` (experiments/results/) or `BENCHMARKS` (benchmarks/results/) of
the checkout this package lies in, through `read_json`, `read_jsonl`, `records_in` and
`summary_rows`, which look the roots up when called, so that a test can point them at a copy
(`monkeypatch.setattr(files, "RESULTS", copy)`). A record's values are grouped by seed with
`seed_values` (`hyla results` groups runs the same way: hyla.runs.result_tables.aggregate).
"""

from __future__ import annotations

import json
from collections import defaultdict
from pathlib import Path

from hyla.runs import records

ROOT = Path(__file__).resolve().parents[3]
RESULTS = ROOT / "experiments" / "results"
BENCHMARKS = ROOT / "benchmarks" / "results"
MIXERS = ("hyla", "linear", "softmax")
SRAVEN_MIXERS = (*MIXERS, "hyla_identity")  # the SRAVEN Table A1 rows trained at the paper's budget


def read_json(path: str, root: str = "results"):
    return json.loads(((RESULTS if root == "results" else BENCHMARKS) / path).read_text())


def read_jsonl(path: str) -> list[dict]:
    return [json.loads(line) for line in (RESULTS / path).read_text().splitlines() if line.strip()]


def records_in(folder: str) -> list[dict]:
    """The run records below experiments/results/<folder>/records."""
    return [records.read(path) for path in records.find(RESULTS / folder / "records")]


def run_folders(folder: str) -> list[dict]:
    """Run folders kept whole below experiments/results/<folder>, read as records."""
    return [
        {
            "config": read_json(f"{folder}/{run}/config.json"),
            "summary": read_json(f"{folder}/{run}/summary.json"),
            "metrics": read_jsonl(f"{folder}/{run}/metrics.jsonl"),
        }
        for run in sorted(p.name for p in (RESULTS / folder).iterdir() if (p / "summary.json").is_file())
    ]


def mixer_row(record: dict) -> str:
    """A record's row: its mixer, `_moe` added for a mixture of experts (`mixer_and_experts`)."""
    mixer, experts = mixer_and_experts(record)
    return mixer + ("_moe" if experts else "")


def final(split: str, metric: str, scale: float = 100):
    return lambda record: scale * record["summary"]["final"][split][metric]


def train_loss(scale: float = 1):
    return lambda record: scale * record["summary"]["train_loss"]


def at_step(split: str, metric: str, step: int, scale: float = 100):
    """A metric of the row of `split` at `step` in a record's metrics (training rows: the logged mean)."""

    def get(record: dict) -> float:
        [row] = [r for r in record["metrics"] if r["split"] == split and r["step"] == step]
        return scale * row[metric]

    return get


def summary_rows(file: str, measure: str, split: str, code_set: str) -> dict[str, dict]:
    """{mixer: its row of `hyla analyze --out`'s summary} for one measure, split and code set."""
    return {
        row["mixer"]: row
        for row in read_json(file)["summary"]
        if (row["measure"], row["split"], row["code_set"]) == (measure, split, code_set)
    }


def seed_values(runs: list[dict], group, value) -> dict[object, list[float]]:
    """{group(record): [value(record) of each of its records, in the order of their seeds]} (a
    defaultdict: a group without records has no values)."""
    values = defaultdict(list)
    for record in sorted(runs, key=lambda r: r["config"]["seed"]):
        values[group(record)].append(value(record))
    return values


def mixer_and_experts(record: dict) -> tuple[str, bool]:
    """A record's Table A1 row: its mixer, and whether a mixture of experts replaces the feed-forward layers."""
    model = record["config"]["model"]
    return model["mixer"], bool(model.get("num_experts"))


def mixer_and_held_out(record: dict) -> tuple[str, int]:
    """A fuzzy-logic record's mixer and the percentage of term combinations held out."""
    return record["config"]["model"]["mixer"], round(100 * record["config"]["fuzzy_logic"]["frac_held_out"])


def mixer_and_heads(record: dict) -> tuple[str, int]:
    return record["config"]["model"]["mixer"], record["config"]["model"]["num_heads"]
