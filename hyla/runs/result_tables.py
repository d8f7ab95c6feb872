"""Reading runs (run folders and run records) and aggregating them into tables: runs grouped by
every config field that varies among them and changes what a run computes, mean ± standard error over
the seeds of each group (Markdown, CSV; `hyla results`, hyla.runs.results)."""

from __future__ import annotations

import csv
import hashlib
import json
import math
from collections import defaultdict
from pathlib import Path

from hyla.analysis import tables
from hyla.analysis.tables import mean_se, mean_se_text
from hyla.runs.sweep import name_matches, unmatched_pattern
from hyla.utils import dumps


def bookkeeping_fields() -> frozenset[str]:
    """Config fields that do not change what a run computes (eval.final_samples does: it is kept)."""
    from hyla.train.configs import RESUMABLE_CHANGES

    return frozenset(
        {"seed", "name", "out_dir", "resume", "preset", "train.deterministic"} | set(RESUMABLE_CHANGES)
    ) - {"eval.final_samples"}


def flat_config(d: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(flat_config(value, f"{prefix}{key}."))
        else:
            out[f"{prefix}{key}"] = value
    return out


def run_name(key: str) -> str:
    """The run name of the key `<sweep folder>/<run name>`."""
    return key.rsplit("/", 1)[-1]


def selected(key: str, only: tuple[str, ...]) -> bool:
    """Whether the run `<sweep folder>/<run name>` is read: its name matches one of the glob
    patterns `only` (`hyla sweep --only`), or `only` is empty."""
    return not only or name_matches(run_name(key), only)


def check_only(keys: list[str], only: tuple[str, ...], where: str) -> None:
    """A RunError naming the first pattern of `only` that matches none of the runs read."""
    from hyla.train.run_dir import RunError

    pattern = unmatched_pattern([run_name(key) for key in keys], only)
    if pattern is not None:
        raise RunError(f"--only {pattern!r} matches none of the runs read below {where} (it matches run names)")


def find_runs(roots: list[Path], only: tuple[str, ...] = ()) -> list[dict]:
    """Every run with a config and a summary below the roots (those `selected` by `only`): run
    folders, then the records (hyla.runs.records) of runs whose folder is not among them;
    {key, path, config (flat), summary, metrics, record (None for a folder)}."""
    from hyla.runs import records
    from hyla.train.run_dir import RunDir

    runs, seen = [], set()
    for root in roots:
        for summary_file in sorted(Path(root).rglob("summary.json")):
            run, key = RunDir(summary_file.parent), records.run_key(summary_file.parent)
            if run.config_file.exists() and key not in seen and selected(key, only):
                seen.add(key)
                runs.append(_run(key, run.path, run.read_config_dict(), run.read_summary(), run.read_metrics()))
    for path, record in unshadowed_records(roots, seen, only):
        runs.append(_run(record["run"], path, record["config"], record["summary"], record["metrics"], record))
    return runs


def runs_sha256(runs: list[dict]) -> str:
    """sha256 of what the tables of `runs` (`find_runs`) are made of: each run's name, config,
    summary and metrics."""
    keys = ("key", "config", "summary", "metrics")
    return hashlib.sha256(dumps([{key: run[key] for key in keys} for run in runs]).encode()).hexdigest()


def unshadowed_records(roots: list[Path], seen: set[str], only: tuple[str, ...] = ()):
    """(path, record) of every run record below the roots (those `selected` by `only`) whose run is
    not in `seen` (the keys of the run folders read), each run once; adds their keys to `seen`."""
    from hyla.runs import records

    for root in roots:
        for path in records.find(root):
            record = records.read(path)
            if record["run"] not in seen and selected(record["run"], only):
                seen.add(record["run"])
                yield path, record


def _run(key: str, path: Path, config: dict, summary: dict, metrics: list, record: dict | None = None) -> dict:
    config = flat_config(config)
    return {"key": key, "path": path, "config": config, "summary": summary, "metrics": metrics, "record": record}


def write_records(runs: list[dict], out: Path) -> int:
    """The record of every completed run into `out/records/`; how many."""
    from hyla.runs import records

    completed = [run for run in runs if run["summary"].get("status") == "completed"]
    for run in completed:
        records.write(run["record"] or records.from_folder(run["path"]), out)
    return len(completed)


def varying_fields(runs: list[dict]) -> list[str]:
    """The settings the runs differ in (the seed and bookkeeping aside), and the mixer always: a table
    names the attention it measures even while one mixer's runs are done."""
    keys = sorted(set().union(*(r["config"] for r in runs)))
    bookkeeping = bookkeeping_fields()
    return [
        k
        for k in keys
        if k not in bookkeeping and (k == "model.mixer" or len({json.dumps(r["config"].get(k)) for r in runs}) > 1)
    ]


def aggregate(runs: list[dict]) -> tuple[list[str], list[dict]]:
    """(group fields, one row per group, in the order of the groups' values): {group values, n
    (completed runs), unfinished (runs not completed: running, interrupted or failed), seeds,
    <split>/<metric>: (mean, se), train_loss, steps_per_second}."""
    fields = varying_fields(runs)
    groups: dict[tuple, list[dict]] = defaultdict(list)
    for run in runs:
        groups[tuple(json.dumps(run["config"].get(f)) for f in fields)].append(run)
    rows = []
    for key, members in groups.items():
        completed = [m for m in members if m["summary"].get("status") == "completed"]
        row = {
            "group": dict(zip(fields, (json.loads(k) for k in key))),
            "config": members[0]["config"],  # the group's shared settings (the seed aside)
            "n": len(completed),
            "unfinished": len(members) - len(completed),
            "seeds": sorted(m["config"].get("seed") for m in completed),
            "values": {},
        }
        values = defaultdict(list)
        for m in completed:
            s = m["summary"]
            for split, metrics in (s.get("final") or {}).items():
                for name, value in metrics.items():  # null: the metric was not finite
                    values[f"{split}/{name}"].append(math.nan if value is None else value)
            for name in ("train_loss", "steps_per_second", "wall_time_s"):
                if s.get(name) is not None:
                    values[name].append(s[name])
        row["values"] = {name: mean_se(v) for name, v in values.items() if len(v) == len(completed)}
        rows.append(row)
    return fields, sorted(rows, key=lambda row: [_sort_key(row["group"][f]) for f in fields])


def _sort_key(value) -> tuple:
    """Numbers in numeric order (1 head before 16), before anything else in the order of its JSON text."""
    number = isinstance(value, (int, float)) and not isinstance(value, bool)
    return (0, value, "") if number else (1, 0, json.dumps(value))


def group_label(group: dict) -> str:
    return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in group.items()) or "all"


def metric_splits(rows: list[dict], metric: str) -> list[str]:
    """The evaluation splits on which some row has a final `metric`, sorted."""
    return sorted({name.split("/")[0] for row in rows for name in row["values"] if name.endswith(f"/{metric}")})


def results_table(fields: list[str], rows: list[dict], metric: str, paper: bool = False) -> str:
    """Main metric per split (×100, as in the paper's tables), training loss and speed; with `paper`,
    the paper's Table A1 value beside each row it has (hyla.runs.paper)."""
    from hyla.runs.paper import table_a1

    splits = metric_splits(rows, metric)
    papers = [table_a1(row["config"], metric) if paper else None for row in rows]
    paper_column = ["paper ood ×100 (Table A1)"] if any(papers) else []
    header = (
        [f.split(".")[-1] for f in fields]
        + ["n"]
        + [f"{s} {metric} ×100" for s in splits]
        + paper_column
        + ["train loss", "steps/s"]
    )
    lines = []
    for row, paper_value in zip(rows, papers):
        cells = [str(row["group"].get(f)) for f in fields] + [_count_text(row)]
        for split in splits:
            m = row["values"].get(f"{split}/{metric}")
            cells.append(mean_se_text(m, scale=100, digits=".2f"))
        if paper_column:
            cells.append(mean_se_text(paper_value, digits=".2f"))
        loss, speed = row["values"].get("train_loss"), row["values"].get("steps_per_second")
        cells.append(mean_se_text(loss, digits=".4g", se_digits=".2g"))
        cells.append(f"{speed[0]:.1f}" if speed else "–")
        lines.append(cells)
    return tables.markdown_table(header, lines)


def _count_text(row: dict) -> str:
    """The n cell: completed runs, and those not completed beside them ("1 (+2 unfinished)")."""
    return f"{row['n']} (+{row['unfinished']} unfinished)" if row["unfinished"] else str(row["n"])


def metrics_by_label(runs: list[dict], fields: list[str]) -> dict[str, list[list[dict]]]:
    """{group label: [the metrics.jsonl records of each of its runs]}, in the order of the labels."""
    by_label = defaultdict(list)
    for run in runs:
        by_label[group_label({f: run["config"].get(f) for f in fields})].append(run["metrics"])
    return dict(sorted(by_label.items()))


def curve_table(
    runs_by_label: dict[str, list[list[dict]]], metric: str, split: str, max_columns: int = 10
) -> str | None:
    """`metric` on `split` along training, ×100: the mean ± s.e. over each label's runs that reached an
    evaluated step (as the curves figure draws it), at most `max_columns` steps evenly spaced back from
    the last one; a Markdown table, or None where no run evaluated `split`.

    runs_by_label: {label: [the metrics.jsonl records of one run, ...]}."""
    from hyla.analysis.plots import mean_se_curve

    curves = {label: mean_se_curve(runs, split, metric) for label, runs in runs_by_label.items()}
    steps = sorted({step for curve_steps, _, _ in curves.values() for step in curve_steps})
    if not steps:
        return None
    shown = steps[::-1][:: math.ceil(len(steps) / max_columns)][::-1]
    lines = []
    for label, (curve_steps, means, ses) in curves.items():
        at = {step: (mean, se) for step, mean, se in zip(curve_steps, means, ses)}
        lines.append([label] + [mean_se_text(at.get(step), scale=100, digits=".1f") for step in shown])
    return tables.markdown_table(["group"] + [f"{step:,}" for step in shown], lines)


def write_csv(path: Path, fields: list[str], rows: list[dict]) -> None:
    names = sorted({n for row in rows for n in row["values"]})
    with open(path, "w", newline="") as f:
        writer = csv.writer(f)
        writer.writerow(fields + ["n", "seeds"] + [c for n in names for c in (f"{n}_mean", f"{n}_se")])
        for row in rows:
            cells = [row["group"].get(f) for f in fields] + [row["n"], " ".join(map(str, row["seeds"]))]
            for n in names:
                cells += list(row["values"].get(n, ("", "")))
            writer.writerow(cells)
