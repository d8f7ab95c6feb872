"""`hyla results`' work (the command: hyla.cli.results): `summarize` writes the tables
(hyla.runs.result_tables) and figures (hyla.runs.result_figures) of the runs below
some folders; `latent_structure` relates each run's latent-code structure to its generalization
(hyla.analysis.structure)."""

from __future__ import annotations

import json
import math
from collections.abc import Sequence
from pathlib import Path

from hyla.runs.result_figures import against_figure, fit_figure, fitted_runs, numeric_fields, plot_final
from hyla.runs.result_tables import (
    aggregate,
    check_only,
    curve_table,
    find_runs,
    flat_config,
    metric_splits,
    metrics_by_label,
    results_table,
    selected,
    unshadowed_records,
    write_csv,
    write_records,
)
from hyla.utils import portable_path, write_json

SECONDARY_METRICS = ("feature_acc",)
"""final metrics tabled beside the runs' main metric where a task reports them (SRAVEN: per-feature accuracy)"""


def summarize(
    roots: str | Path | list,
    out: str | Path | None = None,
    paper: bool = False,
    only: tuple[str, ...] = (),
    keep_records: bool | None = None,
    runs: list[dict] | None = None,
) -> str:
    """Aggregate the runs (folders and records) below one or several roots, those whose names match
    one of the glob patterns `only` if given; write the tables and plots into `out` (default: the
    first root) and, with `keep_records` (default: when `out` is given), the record of each completed
    run into `out/records/`. paper: the paper's Table A1 values beside the rows it has. runs: those
    runs as the caller read them already (`find_runs(roots, only)`), else read here."""
    from hyla.analysis.plots import plot_curves, save_figure
    from hyla.train.run_dir import RunError

    roots = [roots] if isinstance(roots, (str, Path)) else list(roots)
    runs = find_runs(roots, only) if runs is None else runs
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
    (out / "results.md").write_text(f"# Results for {', '.join(map(portable_path, roots))}\n\n{text}\n")
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
    from hyla.runs import records
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
                config = flat_config(run.read_config_dict())
            except ValueError as e:
                notes.append(f"{name}: unreadable ({' '.join(str(e).split())})")
                continue
            runs.append({"path": path, "name": name, "config": config, "summary": summary, "record": None})
    for path, record in unshadowed_records(roots, seen, only):
        config, summary = flat_config(record["config"]), record["summary"]
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
    """Topographic similarity of every candidate (cached per run), with its result as the progress
    postfix (hyla.train.progress: a line per run in a log, with the elapsed time and the ETA from the
    runs measured, not read from their cache; a tqdm bar on a terminal). Returns (points, notes on
    runs left out)."""
    from hyla.train.checkpoint import CheckpointError
    from hyla.train.progress import StepProgress
    from hyla.train.run_dir import RunError

    points, notes = [], []
    with StepProgress("latent structure", len(candidates), unit="run", every=0.0) as shown:
        for i, run in enumerate(candidates, 1):
            try:
                entry, cached = _measure(run, options)
                point, note = _structure_point(run, entry, options["split"], cached)
            except (RunError, CheckpointError) as e:  # e.g. a completed run whose checkpoints were deleted
                cached, point, note = False, None, f"{run['name']}: left out, {' '.join(str(e).split())}"
            points += [point] if point else []
            notes += [note] if note else []
            text = note or (
                f"{run['name']}: topographic similarity {point['topographic_similarity']:.3f}, {options['split']} "
                f"{point['metric_name']} {point['metric']:.3f}{' (cached)' if cached else ''}"
            )
            shown.update(i, text, timed=not cached)
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
    experts replaces the feed-forward layer (`config` flat, as `flat_config` gives it)."""
    mixer = config["model.mixer"]
    return f"{mixer} + MoE" if config.get("model.num_experts") else mixer


def runs_to_measure(dirs: Sequence[Path], split: str, only: tuple[str, ...]) -> tuple[list[dict], list[str]]:
    """`structure_candidates` below every folder of `dirs`: the runs `latent_structure` measures and
    the notes on those it skips; RunError for a folder that is not there, or when no run is left."""
    from hyla.train.run_dir import RunError

    where = ", ".join(map(str, dirs))
    for folder in dirs:
        if not folder.is_dir():
            raise RunError(f"{folder} does not exist or is not a folder")
    candidates, notes = structure_candidates(list(dirs), split, only)
    check_only([run["name"] for run in candidates], only, where)
    if not candidates:
        detail = f" ({len(notes)} skipped: {'; '.join(notes)})" if notes else ""
        raise RunError(
            f"no completed fuzzy_logic or sraven run with a final metric on split {split!r} below {where}{detail}"
        )
    return candidates, notes


def latent_structure(
    dirs: Sequence[Path],
    out: Path | None = None,
    split: str = "ood",
    layer: str = "last",
    samples: int = 512,
    permutations: int = 1000,
    bootstrap: int = 2000,
    only: tuple[str, ...] = (),
    seed: int = 0,
) -> str:
    """`hyla results DIRS --latent-structure`: measure (or read) every completed run below `dirs`
    (those whose names match one of the glob patterns `only` if given), correlate, write
    latent_structure.json and .png into `out` (default: `default_out(dirs)`, and only a given `out`
    keeps the runs' records); returns the text printed. Per run: the topographic similarity of the
    codes `layer` (last | all | a layer index) of `samples` sequences of `split`, with a
    `permutations`-sized test; across runs: Spearman with `bootstrap` resamples; `seed` seeds both."""
    from hyla.analysis import structure
    from hyla.analysis.plots import save_figure
    from hyla.train.run_dir import RunError

    where = ", ".join(map(str, dirs))
    candidates, notes = runs_to_measure(dirs, split, only)
    options = {
        "split": split,
        "layer": layer,
        "num_samples": samples,
        "num_permutations": permutations,
        "seed": seed,
    }
    points, left_out = measure_runs(candidates, options)
    kinds = sorted({(p["task"], p["metric_name"]) for p in points})
    if len(kinds) > 1:
        raise RunError(f"runs of several tasks or metrics below {where} ({kinds}): point at one task's runs")
    result = {
        "options": {**options, "bootstrap": bootstrap},
        "codes": structure.describe_layer(layer),
        "metric_name": kinds[0][1] if kinds else None,
        "confidence": 0.95,
        **structure.correlations(points, bootstrap, seed),
        "runs": points,
        "skipped": notes + left_out,
    }
    text = structure.summary_text(result)
    if len({p["steps"] for p in points}) > 1:
        text += f"\nNote: the runs trained for different numbers of steps ({sorted({p['steps'] for p in points})})."
    if result["skipped"]:
        text += "\nSkipped:\n" + "\n".join(f"  {note}" for note in result["skipped"])
    result["statement"] = text
    recorded = write_records(candidates, out) if out is not None else 0  # with the measurements
    out = Path(out or default_out(dirs))
    out.mkdir(parents=True, exist_ok=True)
    write_json(out / "latent_structure.json", result)
    if points:
        save_figure(structure.structure_figure(points, result), out / "latent_structure.png")
    kept = f"\nKept the record of each completed run ({recorded}) in {out / 'records'}" if recorded else ""
    return text + f"\nWrote {out / 'latent_structure.json'}" + (" and latent_structure.png" if points else "") + kept


def default_out(dirs: tuple[Path, ...]) -> Path:
    """`results/<name of the first folder>` in the working directory: a runs folder stays runs only."""
    return Path("results") / (dirs[0].resolve().name or "root")
