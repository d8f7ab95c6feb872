"""`hyla results DIR [DIR ...]`: aggregate run folders into tables (mean ± standard error over seeds),
CSV/JSON exports and plots.

Runs are grouped by every config field that varies among them and changes what a run computes
(model, task, optimization, steps, ...): seeds are aggregated, and bookkeeping fields (name,
folders, progress bars, threads, logging, evaluation schedule, stop_at, ...) never split a group.
A group of one seed shows no error bar. Writes, into `--out` (default: `results/<name of the first
DIR>` in the working directory, not the runs folder; the command prints where), `results.md` (a
table per main metric, and per-feature accuracy where the task reports it; then the main metric
along training, a table per split),
`results.csv`, `results.json`, `results_<metric>.png` (final metric per split), `curves_<metric>.png`
(training loss and evaluation curves against steps and training examples seen) and, for each numeric
setting the groups vary (a held-out fraction, say), `<metric>_vs_<setting>.png`: the final metric
against it, a line per group of the other settings (on a log axis where the values span a factor of 10
or more, as 1 and 16 heads).
Several folders are read as one. Run records (hyla.experiments.records) count as run folders, and
`--out DIR` keeps the record of every completed run read in `DIR/records/`, so that DIR, committed,
regenerates its tables without the run folders.
`--paper` sets the paper's Table A1 value (hyla.experiments.paper) beside each row it has.
`--only PATTERN ...` reads only the runs whose names match one of the glob patterns (the names `hyla
sweep --status` lists), e.g. the softmax, linear and HYLA runs of a folder that holds more mixers.

`hyla results DIR [DIR ...] --latent-structure` instead relates latent structure to generalization across
the completed runs (`hyla.analysis.structure`): per run, the topographic similarity of its latent
codes on the held-out split (cached in the run folder) against its final metric there; Spearman
across runs with a bootstrap interval, overall and per mixer. Writes `latent_structure.json` and
`latent_structure.png`.
"""

from __future__ import annotations

import csv
import json
import math
import sys
import time
from collections import defaultdict
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

from tyro.conf import Positional, arg

from hyla.analysis import tables
from hyla.analysis.tables import format_duration
from hyla.experiments.sweep import name_matches, unmatched_pattern
from hyla.train.jsonio import portable_path, write_json

if TYPE_CHECKING:
    from matplotlib.figure import Figure

SECONDARY_METRICS = ("feature_acc",)
"""final metrics tabled beside the runs' main metric where a task reports them (SRAVEN: per-feature accuracy)"""


def bookkeeping_fields() -> frozenset[str]:
    """Config fields that do not change what a run computes (final_eval_samples does: it is kept)."""
    from hyla.train.configs import RESUMABLE_CHANGES

    return frozenset(
        {"seed", "name", "out_dir", "resume", "preset", "train.deterministic"} | set(RESUMABLE_CHANGES)
    ) - {"train.final_eval_samples"}


def _leaves(d: dict, prefix: str = "") -> dict:
    out = {}
    for key, value in d.items():
        if isinstance(value, dict):
            out.update(_leaves(value, f"{prefix}{key}."))
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
    folders, then the records (hyla.experiments.records) of runs whose folder is not among them;
    {key, path, config (flat), summary, metrics, record (None for a folder)}."""
    from hyla.experiments import records
    from hyla.train.run_dir import RunDir

    runs, seen = [], set()
    for root in roots:
        for summary_file in sorted(Path(root).rglob("summary.json")):
            run, key = RunDir(summary_file.parent), records.run_key(summary_file.parent)
            if run.config_file.exists() and key not in seen and selected(key, only):
                seen.add(key)
                config = json.loads(run.config_file.read_text())
                runs.append(_run(key, run.path, config, run.read_summary(), run.read_metrics()))
    for path, record in unshadowed_records(roots, seen, only):
        runs.append(_run(record["run"], path, record["config"], record["summary"], record["metrics"], record))
    return runs


def unshadowed_records(roots: list[Path], seen: set[str], only: tuple[str, ...] = ()):
    """(path, record) of every run record below the roots (those `selected` by `only`) whose run is
    not in `seen` (the keys of the run folders read), each run once; adds their keys to `seen`."""
    from hyla.experiments import records

    for root in roots:
        for path in records.find(root):
            record = records.read(path)
            if record["run"] not in seen and selected(record["run"], only):
                seen.add(record["run"])
                yield path, record


def _run(key: str, path: Path, config: dict, summary: dict, metrics: list, record: dict | None = None) -> dict:
    config = _leaves(config)
    return {"key": key, "path": path, "config": config, "summary": summary, "metrics": metrics, "record": record}


def write_records(runs: list[dict], out: Path) -> int:
    """The record of every completed run into `out/records/`; how many."""
    from hyla.experiments import records

    completed = [run for run in runs if run["summary"].get("status") == "completed"]
    for run in completed:
        records.write(run["record"] or records.from_folder(run["path"]), out)
    return len(completed)


def mean_se(values: list[float]) -> tuple[float, float | None]:
    """Mean and standard error (sample std / sqrt(n); None for a single value)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


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


def _label(group: dict) -> str:
    return ", ".join(f"{k.split('.')[-1]}={v}" for k, v in group.items()) or "all"


def metric_splits(rows: list[dict], metric: str) -> list[str]:
    """The evaluation splits on which some row has a final `metric`, sorted."""
    return sorted({name.split("/")[0] for row in rows for name in row["values"] if name.endswith(f"/{metric}")})


def results_table(fields: list[str], rows: list[dict], metric: str, paper: bool = False) -> str:
    """Main metric per split (×100, as in the paper's tables), training loss and speed; with `paper`,
    the paper's Table A1 value beside each row it has (hyla.experiments.paper)."""
    from hyla.experiments.paper import table_a1

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
            cells.append(_mean_se_text(m, scale=100, digits=".2f"))
        if paper_column:
            cells.append(_mean_se_text(paper_value, digits=".2f"))
        loss, speed = row["values"].get("train_loss"), row["values"].get("steps_per_second")
        cells.append(_mean_se_text(loss, digits=".4g", se_digits=".2g"))
        cells.append(f"{speed[0]:.1f}" if speed else "–")
        lines.append(cells)
    return tables.markdown_table(header, lines)


def _count_text(row: dict) -> str:
    """The n cell: completed runs, and those not completed beside them ("1 (+2 unfinished)")."""
    return f"{row['n']} (+{row['unfinished']} unfinished)" if row["unfinished"] else str(row["n"])


def _mean_se_text(value: tuple | None, scale: float = 1.0, digits: str = ".2f", se_digits: str | None = None) -> str:
    if value is None:
        return "–"
    mean, se = value
    text = f"{scale * mean:{digits}}"
    return text if se is None else f"{text} ± {scale * se:{se_digits or digits}}"


def metrics_by_label(runs: list[dict], fields: list[str]) -> dict[str, list[list[dict]]]:
    """{group label: [the metrics.jsonl records of each of its runs]}, in the order of the labels."""
    by_label = defaultdict(list)
    for run in runs:
        by_label[_label({f: run["config"].get(f) for f in fields})].append(run["metrics"])
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
        lines.append([label] + [_mean_se_text(at.get(step), scale=100, digits=".1f") for step in shown])
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


def final_figure(rows: list[dict], metric: str, fields: list[str]) -> Figure:
    """Final `metric` per group (a bar per split) as mean ± s.e. over its seeds: error bars only
    for groups of two seeds or more (a single seed has no standard error, and gets no cap)."""
    from matplotlib.figure import Figure

    from hyla.analysis.plots import legend

    splits = metric_splits(rows, metric)
    fig = Figure(figsize=(max(4, 1.2 * len(rows) * max(1, len(splits)) / 2), 3.5))
    ax = fig.subplots()
    width = 0.8 / max(1, len(splits))
    for i, split in enumerate(splits):
        x = [j + i * width for j in range(len(rows))]
        stats = [row["values"].get(f"{split}/{metric}", (math.nan, None)) for row in rows]
        ax.bar(x, [mean for mean, _ in stats], width, label=split, color=f"C{i % 10}")
        with_se = [(xj, mean, se) for xj, (mean, se) in zip(x, stats) if se is not None]
        if with_se:
            ax.errorbar(
                [a for a, _, _ in with_se],
                [m for _, m, _ in with_se],
                yerr=[e for _, _, e in with_se],
                fmt="none",
                ecolor="black",
                elinewidth=1,
                capsize=3,
            )
    ax.set_xticks([j + width * (len(splits) - 1) / 2 for j in range(len(rows))])
    ax.set_xticklabels([_label(row["group"]) for row in rows], rotation=30, ha="right", fontsize=8)
    ax.set_xlabel(", ".join(f.split(".")[-1] for f in fields) or "runs")
    ax.set_ylabel(f"{metric} (mean ± s.e.)")
    legend(ax, fontsize=8)
    fig.tight_layout()
    return fig


def numeric_fields(fields: list[str], rows: list[dict]) -> list[str]:
    """The grouping fields whose values are all numbers, at least two of them (a swept setting)."""
    numeric = []
    for field in fields:
        values = {row["group"].get(field) for row in rows}
        if len(values) > 1 and all(isinstance(v, (int, float)) and not isinstance(v, bool) for v in values):
            numeric.append(field)
    return numeric


def against_figure(rows: list[dict], metric: str, x_field: str) -> Figure:
    """Final `metric` (mean ± s.e. over seeds) against the numeric field `x_field`, a panel per split
    and a line per group of the other fields (e.g. OOD R² against the held-out fraction, per mixer)."""
    from matplotlib.figure import Figure

    from hyla.analysis.plots import legend, series_colors

    splits = metric_splits(rows, metric)
    lines = defaultdict(list)  # label of the other fields -> [(x, row)]
    for row in rows:
        others = {f: v for f, v in row["group"].items() if f != x_field}
        lines[_label(others)].append((row["group"][x_field], row))
    xs = sorted({row["group"][x_field] for row in rows})
    log_axis = xs[0] > 0 and xs[-1] >= 10 * xs[0]  # e.g. 1 and 16 heads: evenly spaced doublings
    fig = Figure(figsize=(3.6 * max(1, len(splits)), 3.4))
    for ax, split in zip(fig.subplots(1, max(1, len(splits)), squeeze=False)[0], splits):
        if log_axis:
            ax.set_xscale("log", base=2)
            ax.set_xticks(xs, [f"{x:g}" for x in xs])
        colors = series_colors(sorted(lines))
        for label, points in sorted(lines.items()):
            points = sorted((x, row["values"].get(f"{split}/{metric}")) for x, row in points)
            points = [(x, stat) for x, stat in points if stat is not None]
            ax.errorbar(
                [x for x, _ in points],
                [mean for _, (mean, _) in points],
                yerr=[se or 0.0 for _, (_, se) in points],
                marker="o",
                capsize=3,
                color=colors[label],
                label=label,
            )
        ax.set_xlabel(x_field.split(".")[-1])
        ax.set_ylabel(f"{split} {metric} (mean ± s.e.)")
        legend(ax, fontsize=7)
    fig.tight_layout()
    return fig


def fitted_runs(runs: list[dict], fields: list[str]) -> dict[str, list[tuple[float, dict]]]:
    """Each completed run's (final training loss, final metrics {split: {name: value}}), by the label
    of its group; every group is a key (in the order, and so the colours, of the curves)."""
    points = defaultdict(list)
    for run in runs:
        summary = run["summary"]
        group = points[_label({f: run["config"].get(f) for f in fields})]
        if summary.get("status") == "completed" and summary.get("train_loss") is not None:
            group.append((summary["train_loss"], summary.get("final") or {}))
    return dict(sorted(points.items()))


def fit_figure(points: dict[str, list[tuple[float, dict]]], metric: str) -> Figure:
    """Each completed run's final `metric` against its final training loss (points: `fitted_runs`), a
    panel per split and a colour per group (the colours of the curves): at the same training loss, a
    higher held-out score is better generalization; groups that differ along one line differ in how
    well they fit."""
    from matplotlib.figure import Figure

    from hyla.analysis.plots import series_colors

    splits = sorted(
        {split for group in points.values() for _, final in group for split in final if metric in final[split]}
    )
    losses = [loss for group in points.values() for loss, _ in group]
    log_axis = max(losses) > 10 * min(losses)  # only where the losses span decades: a log axis's labels crowd
    fig = Figure(figsize=(3.2 * max(1, len(splits)) + 2.2, 3.4), layout="constrained")
    handles = {}  # one legend entry a group, to the right of the panels
    colors = series_colors(points)
    for ax, split in zip(fig.subplots(1, max(1, len(splits)), squeeze=False)[0], splits):
        for label, group in points.items():
            xy = [(loss, final[split][metric]) for loss, final in group if final.get(split, {}).get(metric) is not None]
            if xy:
                handles[label] = ax.scatter([x for x, _ in xy], [y for _, y in xy], s=20, color=colors[label])
        if log_axis:
            ax.set_xscale("log")
        ax.set_xlabel("final training loss (a point a run)")
        ax.set_ylabel(f"{split} {metric}")
    fig.legend(handles.values(), handles.keys(), loc="outside right upper", fontsize=7)
    return fig


def plot_final(path: Path, rows: list[dict], metric: str, fields: list[str] = ()) -> Path:
    """`final_figure` written to `path`."""
    from hyla.analysis.plots import save_figure

    return save_figure(final_figure(rows, metric, list(fields)), path)


def summarize(
    roots: str | Path | list,
    out: str | Path | None = None,
    paper: bool = False,
    only: tuple[str, ...] = (),
    keep_records: bool | None = None,
) -> str:
    """Aggregate the runs (folders and records) below one or several roots, those whose names match
    one of the glob patterns `only` if given; write the tables and plots into `out` (default: the
    first root) and, with `keep_records` (default: when `out` is given), the record of each completed
    run into `out/records/`. paper: the paper's Table A1 values beside the rows it has."""
    from hyla.analysis.plots import plot_curves, save_figure
    from hyla.train.run_dir import RunError

    roots = [roots] if isinstance(roots, (str, Path)) else list(roots)
    runs = find_runs(roots, only)
    where = ", ".join(map(str, roots))
    check_only([run["key"] for run in runs], only, where)
    if not runs:
        raise RunError(f"no run folders (with config.json and summary.json) or run records below {where}")
    recorded = write_records(runs, Path(out)) if (out is not None if keep_records is None else keep_records) else 0
    out = Path(out or roots[0])
    out.mkdir(parents=True, exist_ok=True)
    fields, rows = aggregate(runs)
    metrics = sorted({r["summary"].get("metric_name") for r in runs if r["summary"].get("metric_name")})
    final_names = {name for r in runs for split in (r["summary"].get("final") or {}).values() for name in split}
    tables = [
        f"### {metric}\n\n{results_table(fields, rows, metric, paper)}"
        for metric in metrics + sorted(final_names & set(SECONDARY_METRICS) - set(metrics))
    ]
    batch_sizes = {run["config"].get("train.batch_size") for run in runs}
    batch_size = batch_sizes.pop() if len(batch_sizes) == 1 else None  # examples seen: on a common batch
    fitted = fitted_runs(runs, fields)
    curve_tables = []
    all_runs = metrics_by_label(runs, fields)
    completed = metrics_by_label([run for run in runs if run["summary"].get("status") == "completed"], fields)
    for metric in metrics:
        plot_final(out / f"results_{metric}.png", rows, metric, fields)
        for field in numeric_fields(fields, rows):
            save_figure(against_figure(rows, metric, field), out / f"{metric}_vs_{field.split('.')[-1]}.png")
        plot_curves(out / f"curves_{metric}.png", all_runs, metric, batch_size)
        for split in metric_splits(rows, metric):
            table = curve_table(completed, metric, split)
            if table:
                title = f"### {split} {metric} ×100 along training (columns: steps; mean ± s.e. of the completed runs)"
                curve_tables.append(f"{title}\n\n{table}")
        if sum(len(group) for group in fitted.values()) >= 2:
            save_figure(fit_figure(fitted, metric), out / f"{metric}_vs_train_loss.png")
    text = "\n\n".join(tables + curve_tables)
    (out / "results.md").write_text(f"# Results for {where}\n\n{text}\n")
    write_csv(out / "results.csv", fields, rows)
    write_json(
        out / "results.json",
        [{k: r[k] for k in ("group", "n", "unfinished", "seeds", "values")} for r in rows],
    )
    kept = f"\nKept the record of each completed run ({recorded}) in {out / 'records'}" if recorded else ""
    return f"{text}\n\nWrote results.md, results.csv, results.json and the figures (*.png) to {out}{kept}"


def run_folders(root: str | Path) -> list[Path]:
    """Every run folder below root: a config.json beside a summary, metrics or checkpoints (an
    export folder, config.json and weights only, is not one)."""
    return [
        c.parent
        for c in sorted(Path(root).rglob("config.json"))
        if any((c.parent / n).exists() for n in ("summary.json", "metrics.jsonl", "checkpoints"))
    ]


def structure_candidates(roots: list[Path], split: str, only: tuple[str, ...] = ()) -> tuple[list[dict], list[str]]:
    """(completed runs with a final metric on `split`: {path, name, config (flat), summary, record
    (None for a folder)}, one note per run skipped and why), of the runs `selected` by `only`: run
    folders, then the records of runs whose folder is not among them."""
    from hyla.experiments import records
    from hyla.train.run_dir import RunDir

    runs, notes, seen = [], [], set()
    for root in roots:
        for path in run_folders(root):
            key = records.run_key(path)
            if key in seen or not selected(key, only):
                continue
            seen.add(key)
            name = str(path.relative_to(root)) if path != Path(root) else path.name
            run = RunDir(path)
            try:
                summary = run.read_summary() if run.summary_file.exists() else {}
                config = _leaves(json.loads(run.config_file.read_text()))
            except ValueError as e:
                notes.append(f"{name}: unreadable ({' '.join(str(e).split())})")
                continue
            runs.append({"path": path, "name": name, "config": config, "summary": summary, "record": None})
    for path, record in unshadowed_records(roots, seen, only):
        config, summary = _leaves(record["config"]), record["summary"]
        runs.append({"path": path, "name": record["run"], "config": config, "summary": summary, "record": record})
    verdicts = [(run, _structure_note(run, split)) for run in runs]
    return [run for run, note in verdicts if note is None], notes + [note for _, note in verdicts if note]


def _structure_note(run: dict, split: str) -> str | None:
    """Why a run cannot be measured (not completed, not a fuzzy_logic or sraven run, no final metric
    on `split`), or None."""
    name, config, summary = run["name"], run["config"], run["summary"]
    status, final = summary.get("status"), (summary.get("final") or {}).get(split) or {}
    if status != "completed":
        where = f"{status} at step {summary.get('step')}" if summary else "no summary.json yet: running or interrupted"
        return f"{name}: not completed ({where})"
    if config.get("task") not in ("fuzzy_logic", "sraven"):
        return f"{name}: a {config.get('task')} run (latent codes: fuzzy_logic and sraven only)"
    if summary.get("metric_name") not in final:
        return f"{name}: no final {summary.get('metric_name')} on split {split!r}"
    return None


def _measure(run: dict, options: dict) -> tuple[dict, bool]:
    """(entry, whether cached) of a run folder (measured, or read from its cache) or of a record (its
    cached measurement with these options; RunError when it has none)."""
    from hyla.analysis.structure import cache_name, cached_measure
    from hyla.train.run_dir import RunError

    step = run["summary"].get("step")
    if run["record"] is None:
        return cached_measure(run["path"], step, options)
    entry = run["record"].get("latent_structure", {}).get(cache_name(step, options))
    if entry is None or entry.get("options") != json.loads(json.dumps(options)):
        raise RunError("a run record (its folder, with the checkpoint, is not here) not measured with these options")
    return entry, True


def measure_runs(candidates: list[dict], options: dict) -> tuple[list[dict], list[str]]:
    """Topographic similarity of every candidate (cached per run), with a line per run on stderr
    (elapsed and ETA; a tqdm bar on a terminal). Returns (points, notes on runs left out)."""
    from tqdm.auto import tqdm

    from hyla.train.checkpoint import CheckpointError
    from hyla.train.run_dir import RunError

    bar = tqdm(total=len(candidates), desc="latent structure", unit="run") if sys.stderr.isatty() else None
    points, notes, start, measuring, measured = [], [], time.monotonic(), 0.0, 0
    for i, run in enumerate(candidates, 1):
        began = time.monotonic()
        try:
            entry, cached = _measure(run, options)
            point, note = _structure_point(run, entry, options["split"], cached)
        except (RunError, CheckpointError) as e:  # e.g. a completed run whose checkpoints were deleted
            entry, cached, point, note = None, False, None, f"{run['name']}: left out, {' '.join(str(e).split())}"
        if not cached:
            measuring, measured = measuring + time.monotonic() - began, measured + 1
        points += [point] if point else []
        notes += [note] if note else []
        text = note or (
            f"topographic similarity {point['topographic_similarity']:.3f}, {options['split']} "
            f"{point['metric_name']} {point['metric']:.3f}{' (cached)' if cached else ''}"
        )
        if bar is not None:
            bar.write(f"{run['name']}: {text}")
            bar.update(1)
        else:
            left = len(candidates) - i
            eta = f", ETA {format_duration(measuring / measured * left)}" if measured and left else ""
            print(
                f"latent structure {i}/{len(candidates)} {run['name']}: {text} "
                f"({format_duration(time.monotonic() - start)} elapsed{eta})",
                file=sys.stderr,
                flush=True,
            )
    if bar is not None:
        bar.close()
    return points, notes


def _structure_point(run: dict, entry: dict, split: str, cached: bool) -> tuple[dict | None, str | None]:
    """(the run's point, None) or (None, why it is left out of the correlation)."""
    summary, topo = run["summary"], entry["topographic"]
    metric_name = summary["metric_name"]
    metric = summary["final"][split][metric_name]
    if entry["checkpoint_step"] != summary.get("step"):
        return None, (
            f"{run['name']}: left out, its final checkpoint is unreadable (latest readable: step "
            f"{entry['checkpoint_step']}, the run reached {summary.get('step')})"
        )
    if topo.get("spearman") is None or math.isnan(topo["spearman"]) or metric is None:
        return None, (
            f"{run['name']}: left out, no finite topographic similarity ({topo['num_tasks']} tasks) or {metric_name}"
        )
    return {
        "name": run["name"],
        "path": portable_path(run["path"]),
        "task": entry["task"],
        "mixer": _mixer_label(run["config"]),
        "seed": entry["seed"],
        "steps": summary.get("step"),
        "metric_name": metric_name,
        "metric": metric,
        "topographic_similarity": topo["spearman"],
        "topographic_p_value": topo["p_value"],
        "num_tasks": topo["num_tasks"],
        "codes": entry["codes"],
        "cached": cached,
    }, None


def _mixer_label(config: dict) -> str:
    """A run's group in the latent-structure correlation: its mixer, with " + MoE" where a mixture of
    experts replaces the feed-forward layer (`config` flat, as `_leaves` gives it)."""
    mixer = config["model.mixer"]
    return f"{mixer} + MoE" if config.get("model.num_experts") else mixer


def latent_structure(args: ResultsOptions) -> str:
    """`hyla results DIRS --latent-structure`: measure (or read) every completed run, correlate,
    write latent_structure.json and .png into `args.out` (default: the first of DIRS); returns the
    text printed."""
    from hyla.analysis import structure
    from hyla.analysis.plots import save_figure
    from hyla.train.run_dir import RunError

    where = ", ".join(map(str, args.dirs))
    for folder in args.dirs:
        if not folder.is_dir():
            raise RunError(f"{folder} does not exist or is not a folder")
    candidates, notes = structure_candidates(list(args.dirs), args.latent_split, args.only)
    check_only([run["name"] for run in candidates], args.only, where)
    if not candidates:
        detail = f" ({len(notes)} skipped: {'; '.join(notes)})" if notes else ""
        raise RunError(
            f"no completed fuzzy_logic or sraven run with a final metric on split {args.latent_split!r} "
            f"below {where}{detail}"
        )
    options = {
        "split": args.latent_split,
        "layer": args.latent_layer,
        "num_samples": args.latent_samples,
        "num_permutations": args.latent_permutations,
        "seed": args.seed,
    }
    points, left_out = measure_runs(candidates, options)
    kinds = sorted({(p["task"], p["metric_name"]) for p in points})
    if len(kinds) > 1:
        raise RunError(f"runs of several tasks or metrics below {where} ({kinds}): point at one task's runs")
    result = {
        "options": {**options, "bootstrap": args.bootstrap},
        "codes": structure.describe_layer(args.latent_layer),
        "metric_name": kinds[0][1] if kinds else None,
        "confidence": 0.95,
        **structure.correlations(points, args.bootstrap, args.seed),
        "runs": points,
        "skipped": notes + left_out,
    }
    text = structure.summary_text(result)
    if len({p["steps"] for p in points}) > 1:
        text += f"\nNote: the runs trained for different numbers of steps ({sorted({p['steps'] for p in points})})."
    if result["skipped"]:
        text += "\nSkipped:\n" + "\n".join(f"  {note}" for note in result["skipped"])
    result["statement"] = text
    recorded = write_records(candidates, args.out) if args.out is not None else 0  # with the measurements
    out = Path(args.out or default_out(args.dirs))
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "latent_structure.json", result)
    if points:
        save_figure(structure.structure_figure(points, result), out / "latent_structure.png")
    kept = f"\nKept the record of each completed run ({recorded}) in {out / 'records'}" if recorded else ""
    return text + f"\nWrote {out / 'latent_structure.json'}" + (" and latent_structure.png" if points else "") + kept


@dataclass
class ResultsOptions:
    """Aggregate the run folders below DIRS into mean ± s.e. tables (Markdown, CSV, JSON) and plots
    (with a figure of each metric against every numeric setting the runs vary); with
    --latent-structure, relate each run's latent-code structure to its generalization instead."""

    dirs: Positional[tuple[Path, ...]]
    """folders containing run folders or run records (searched recursively)"""
    out: Annotated[Path | None, arg(help_behavior_hint="(default: results/<name of the first of DIRS>)")] = None
    """where to write the tables and plots (the default is beside the runs folders, not in them); given,
    it also keeps the record of every completed run read in OUT/records/"""
    latent_structure: bool = False
    """instead of the tables: topographic similarity of each completed run's latent codes on
    --latent-split against its final metric there, Spearman across runs with a bootstrap CI, overall
    and per mixer (latent_structure.json, latent_structure.png; per-run numbers cached in each run
    folder as latent_structure-step<S>-<options>.json)"""
    latent_split: str = "ood"
    """held-out split whose codes and final metric are compared"""
    latent_layer: str = "last"
    """code set: last | all (layers concatenated) | a layer index"""
    latent_samples: int = 512
    """sequences whose codes are collected per run"""
    latent_permutations: int = 1000
    """permutation-test size of each run's topographic p-value"""
    bootstrap: int = 2000
    """bootstrap resamples of runs for the confidence interval (95%, percentile)"""
    only: tuple[str, ...] = ()
    """read only the runs whose names match one of these glob patterns, e.g. 'mixer-hyla__s*' (hyla sweep --status)"""
    paper: bool = False
    """beside each row of the tables, the paper's Table A1 value for its task and mixer (OOD R² on fuzzy
    logic, OOD panel accuracy on SRAVEN; mean ± s.e. over 3 seeds, at the paper's budget)"""
    seed: int = 0
    """seed of the task subset and permutations of each run's topographic similarity, and of the
    bootstrap (the samples are those `hyla analyze` uses: the run's task seed, batch of step 0)"""

    def __post_init__(self):
        from hyla.train.configs import ConfigError, check_positive

        if not self.dirs:
            raise ConfigError("hyla results needs at least one folder of run folders")
        check_positive(
            latent_samples=self.latent_samples, latent_permutations=self.latent_permutations, bootstrap=self.bootstrap
        )
        if self.latent_layer not in ("last", "all") and not self.latent_layer.lstrip("-").isdigit():
            raise ConfigError(f"--latent-layer={self.latent_layer!r} is not valid: last, all or a layer index")


def main(argv: list[str]) -> int:
    from hyla.train.configs import parse_options

    args = parse_options(ResultsOptions, argv, "hyla results", __doc__)
    if args.latent_structure:
        print(latent_structure(args))
    else:
        out = args.out or default_out(args.dirs)
        print(summarize(args.dirs, out, args.paper, args.only, keep_records=args.out is not None))
    return 0


def default_out(dirs: tuple[Path, ...]) -> Path:
    """`results/<name of the first folder>` in the working directory: a runs folder stays runs only."""
    return Path("results") / (dirs[0].resolve().name or "root")
