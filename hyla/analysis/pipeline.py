"""The latent-code analysis of one model: collect codes, probe them, measure topographic
similarity and rule similarity, draw the figures, write `analysis.json` and `report.md` (the
measures: hyla.analysis.measures; the progress lines: hyla.train.progress).

Splits (defaults; any split of the task can be given instead):
- fuzzy logic: `valid_fixed_query`, `ood_fixed_query` (the authors' probe data: with the query
  fixed, code variation reflects the context, i.e. the task), `valid`, `ood`.
- SRAVEN: `valid_unpermuted`, `ood_unpermuted` (the paper's latent analysis).
Probes train on `valid<suffix>` and test on `ood<suffix>` for every suffix where both splits
were collected (held-out tasks: compositional generalization of the decoder, paper Fig. 2B/5F).
"""

from __future__ import annotations

import inspect
import json
import re
import sys
from functools import partial
from pathlib import Path

import numpy as np
from threadpoolctl import threadpool_limits

from hyla.analysis import figures
from hyla.analysis.collect import FUZZY_LOGIC, SRAVEN, collect_latents, save_latents, task_kind
from hyla.analysis.measures import (
    code_sets,
    label_similarity,
    no_tick,
    per_feature,
    probe_pairs,
    run_probes,
    topographic,
)
from hyla.analysis.probes import random_stream
from hyla.analysis.report import write_report
from hyla.train.progress import Stages
from hyla.utils import append_jsonl, portable_path, write_json

DEFAULT_SPLITS = {
    FUZZY_LOGIC: ("valid_fixed_query", "ood_fixed_query", "valid", "ood"),
    SRAVEN: ("valid_unpermuted", "ood_unpermuted"),
}


# ----------------------------------------------------------------------------- figures
def embed_split(data: dict, tsne: bool, plot_samples: int, seed: int, tick=no_tick) -> tuple[np.ndarray, dict]:
    """The rows drawn (a seeded subset of `plot_samples`) and their 2-D embeddings per (method,
    code set); `tick()` after each embedding."""
    sets = code_sets(data)
    rows = len(next(iter(sets.values())))
    subset = np.sort(random_stream(seed, "plot subset").permutation(rows)[:plot_samples])
    embeddings = {}
    for method in ("pca", "tsne") if tsne else ("pca",):
        for name, codes in sets.items():
            embeddings[(method, name)] = figures.embed(codes[subset], method, seed)
            tick()
    return subset, embeddings


def draw_embeddings(split: str, data: dict, subset: np.ndarray, embeddings: dict, out_dir: Path) -> list[Path]:
    """The embeddings of `embed_split`, colored by rule and target (SRAVEN) or target and task."""
    kind = str(data["task"])
    if kind == SRAVEN:
        colorings = {
            "rule": (per_feature(data["rules"])[subset], True, dict(enumerate(figures.RULE_NAMES))),
            "target": (per_feature(data["targets"])[subset], False, None),
        }
    else:
        task_ids = [tuple(row) for row in data["term_indices"][subset].tolist()]
        frequent = sorted(set(task_ids), key=task_ids.count, reverse=True)[:10]
        codes_of = {task: i for i, task in enumerate(frequent)}
        colorings = {
            "target": (data["targets"][subset], False, None),
            "task": (
                np.array([codes_of.get(t, -1) for t in task_ids]),
                True,
                {i: f"terms {t}" for t, i in codes_of.items()} | {-1: "other tasks (less frequent)"},
            ),
        }
    paths = []
    for what, (color, categorical, names) in colorings.items():
        paths.append(
            figures.plot_embeddings(
                embeddings,
                color,
                categorical,
                f"{split}: latent codes colored by {what}",
                out_dir / f"embedding_{split}_{what}.png",
                names,
                color_label=what,
            )
        )
    return paths


def draw_similarity(split: str, similarity: dict, kind: str, out_dir: Path) -> list[Path]:
    """One figure of the centered cosine matrices (a panel per code set; constant codes get the
    "constant codes" panel), one of the mean codes (a panel per layer, a column per code dimension)."""
    what = "rule" if kind == SRAVEN else "term"
    labels = next(iter(similarity.values()))["labels"]
    names = [figures.RULE_NAMES[r] for r in labels] if kind == SRAVEN else [f"t{t}" for t in labels]
    cosines = {
        name: None if entry.get("constant_codes") else np.array(entry["centered_cosine"])
        for name, entry in similarity.items()
    }
    means = {name: np.array(entry["mean_codes"]) for name, entry in similarity.items() if name != "all layers"}
    width = next(iter(means.values())).shape[1]
    if kind == SRAVEN:  # per layer: the codes towards panel (2,0), then towards (2,1), H heads each
        columns, groups = [f"h{h}" for _ in range(2) for h in range(width // 2)], 2
        xlabel = "head: towards key panel (2,0) | towards (2,1)"
    else:
        columns, groups, xlabel = [f"h{h}" for h in range(width)], 1, "head"
    return [
        figures.plot_matrices(
            cosines,
            names,
            names,
            f"{split}: cosine similarity of centered mean codes per {what}",
            out_dir / f"similarity_{split}.png",
            xlabel=what,
            ylabel=what,
            value_label="cosine similarity",
        ),
        figures.plot_matrices(
            means,
            names,
            columns,
            f"{split}: mean code per {what}",
            out_dir / f"mean_codes_{split}.png",
            xlabel=xlabel,
            ylabel=what,
            annotate=False,
            value_label="mean code",
            groups=groups,
        ),
    ]


def draw_probes(probes: dict, kind: str, out_dir: Path) -> list[Path]:
    paths = []
    for pair, per_set in probes.items():
        names = list(per_set)
        if kind == SRAVEN:
            curves = {"rule accuracy": [per_set[n]["accuracy"] for n in names]}
            chance = {"rule accuracy": [per_set[n]["chance_accuracy"] for n in names]}
            trivial = {"always the training set's most frequent rule": per_set[names[0]]["majority"]}
            ylabel = "accuracy (held-out tasks)"
        else:
            curves = {
                "ridge R² (in dist.)": [per_set[n]["ridge_term_bits_in_distribution"]["r2"] for n in names],
                "ridge R² (held out)": [per_set[n]["ridge_term_bits_held_out"]["r2"] for n in names],
                "term F1 (held out)": [per_set[n]["term_f1_held_out"]["mean_f1"] for n in names],
            }
            chance = {
                "ridge R² (in dist.)": [per_set[n]["ridge_term_bits_in_distribution"]["chance"] for n in names],
                "ridge R² (held out)": [per_set[n]["ridge_term_bits_held_out"]["chance"] for n in names],
                "term F1 (held out)": [per_set[n]["term_f1_held_out"]["mean_chance"] for n in names],
            }
            trivial = {
                "R² 0: predicting the mean": 0.0,
                "F1 of always answering 'present'": per_set[names[0]]["term_f1_held_out"]["mean_always_positive"],
            }
            ylabel = "probe score"
        path = out_dir / f"probes_{pair.replace('->', '_to_')}.png"
        paths.append(figures.plot_probe_layers(names, curves, chance, ylabel, f"probes {pair}", path, trivial=trivial))
    return paths


def draw_addition_subtraction(similarity: dict, mixer: str, out_dir: Path) -> list[Path]:
    """SRAVEN, paper Fig. 5E: the mean code per rule and the rules' similarity matrix of the codes of
    all layers, a row per split, with the addition-vs-subtraction test (none when no split has it)."""
    panels = {split: per_set["all layers"] for split, per_set in similarity.items()}
    panels = {split: entry for split, entry in panels.items() if entry.get("addition_subtraction")}
    if not panels:
        return []
    layers = len([name for name in next(iter(similarity.values())) if name != "all layers"])
    title = f"{mixer + ': ' if mixer else ''}do addition and subtraction share codes? (paper Fig. 5E; all layers)"
    fig = figures.rule_codes_figure(panels, [f"layer {layer}" for layer in range(layers)], title)
    return [figures.save_figure(fig, out_dir / "addition_subtraction.png", dpi=100, tight=True)]


# ----------------------------------------------------------------------------- entry points
def resolve_splits(task, splits) -> tuple[str, ...]:
    kind = task_kind(task)
    if splits:
        for split in splits:
            task.check_split(split)
        return tuple(splits)
    available = set(getattr(task, "splits", ()))
    chosen = tuple(s for s in DEFAULT_SPLITS[kind] if s in available)
    return chosen or tuple(s for s in ("valid", "ood") if s in available)


def split_summary(data: dict) -> dict:
    summary = {"num_samples": int(len(data["codes"]))}
    for key, values in data.items():
        if key.startswith("metric_"):
            summary[key[len("metric_") :]] = float(np.mean(values))
    return summary


def analyze(
    model,
    task,
    out_dir: str | Path,
    splits=None,
    num_samples: int = 2048,
    batch_size: int = 512,
    tsne: bool = False,
    plot_samples: int = 1500,
    num_permutations: int = 1000,
    seed: int = 0,
    probe_feature: int | None = None,
    save_codes: bool = True,
    progress: bool = True,
    metadata: dict | None = None,
) -> dict:
    """Everything relevant to the task; writes figures, `latents_<split>.npz`, `analysis.json`
    and `report.md` into `out_dir` and returns the results dict (the content of analysis.json).

    num_samples: sequences per split; tsne: t-SNE embeddings besides PCA (minutes per model on a
    CPU, the rest of the analysis well under one); plot_samples: points per embedding plot (rows:
    samples, or (sample, feature) pairs for SRAVEN); num_permutations: size of the topographic
    permutation test; probe_feature: see `run_probes`; metadata: stored under "run" (its "mixer"
    titles the figure of paper Fig. 5E)."""
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    kind = task_kind(task)
    with Stages(progress) as stage:
        data = {}
        splits = resolve_splits(task, splits)
        for i, split in enumerate(splits):
            stage(f"latent codes of {split} ({num_samples} sequences, split {i + 1}/{len(splits)})")
            tick = stage.counter(f"latent codes of {split}, batches", -(-num_samples // batch_size))
            data[split] = collect_latents(model, task, split, num_samples, batch_size, progress=False, tick=tick)
            if save_codes:
                save_latents(out_dir / f"latents_{split}.npz", data[split])
        with threadpool_limits(limits=1):  # small sklearn problems: threads only oversubscribe the CPU
            results = _measure(data, kind, num_permutations, seed, probe_feature, stage)
            stage(f"embeddings ({'PCA and t-SNE' if tsne else 'PCA'})")
            tick = stage.counter("embeddings", len(data) * len(code_sets(data[splits[0]])) * (2 if tsne else 1))
            embedded = {split: embed_split(d, tsne, plot_samples, seed, tick) for split, d in data.items()}
        mixer = (metadata or {}).get("mixer", "")
        results["figures"] = [path.name for path in _draw(results, data, embedded, mixer, out_dir, stage)]
        stage("report")
        results["num_samples"], results["run"] = num_samples, metadata or {}
        write_json(out_dir / "analysis.json", results, indent=1)
        write_report(results, out_dir / "report.md")
    return results


def _measure(data: dict, kind: str, num_permutations: int, seed: int, probe_feature: int | None, stage) -> dict:
    """Probes, topographic similarity and the similarity of the mean codes per label."""
    results = {"task": kind, "seed": seed, "splits": {split: split_summary(d) for split, d in data.items()}}
    num_sets = len(code_sets(next(iter(data.values()))))
    stage("probes")
    tick = stage.counter("probes of code sets", len(probe_pairs(data, kind)) * num_sets)
    results["probes"] = run_probes(data, kind, seed, probe_feature, tick)
    stage(f"topographic similarity ({num_permutations} permutations)")
    tick = stage.counter("topographic similarity of code sets", len(data) * num_sets)
    results["topographic_similarity"] = {
        split: topographic(d, num_permutations, seed, tick) for split, d in data.items()
    }
    results["label_similarity"] = {split: label_similarity(d) for split, d in data.items()}
    return results


def _draw(results: dict, data: dict, embedded: dict, mixer: str, out_dir: Path, stage) -> list[Path]:
    """Every figure, counted as a stage: the probes, per split the embeddings and the mean codes,
    SRAVEN's addition vs subtraction."""
    kind, similarity = results["task"], results["label_similarity"]
    drawings = [partial(draw_probes, results["probes"], kind, out_dir)]
    for split, d in data.items():
        drawings.append(partial(draw_embeddings, split, d, *embedded[split], out_dir))
        drawings.append(partial(draw_similarity, split, similarity[split], kind, out_dir))
    if kind == SRAVEN:
        drawings.append(partial(draw_addition_subtraction, similarity, mixer, out_dir))
    stage("figures")
    tick = stage.counter("figure groups", len(drawings))
    paths = []
    for draw in drawings:
        paths += draw()
        tick()
    return paths


def analysis_hook(
    model, task, step: int, out_dir: str | Path, num_samples: int = 1024, batch_size: int = 512, seed: int = 0
) -> dict[str, float]:
    """Light-weight periodic analysis for the training loop: probes only (no figures, no t-SNE,
    no permutation test), on the default probe splits, the same samples at every call.

    Appends `{"step": step, **metrics}` to `out_dir/analysis_hook.jsonl` and returns the flat
    scalar metrics, e.g. `probe/layer 1/rule_accuracy` with `.../chance` beside it. Restores the
    model's train/eval mode.
    """
    kind = task_kind(task)
    data = {
        split: collect_latents(model, task, split, num_samples, batch_size, progress=False)
        for split in resolve_splits(task, None)
        if split.startswith(("valid", "ood")) and (kind == SRAVEN or "fixed_query" in split)
    }
    metrics: dict[str, float] = {}
    with threadpool_limits(limits=1):
        probes = run_probes(data, kind, seed)
    for per_set in probes.values():
        for name, probe in per_set.items():
            prefix = f"probe/{name}"
            if kind == SRAVEN:
                metrics[f"{prefix}/rule_accuracy"] = probe["accuracy"]
                metrics[f"{prefix}/rule_accuracy_chance"] = probe["chance_accuracy"]
            else:
                metrics[f"{prefix}/term_bits_r2"] = probe["ridge_term_bits_in_distribution"]["r2"]
                metrics[f"{prefix}/term_bits_r2_chance"] = probe["ridge_term_bits_in_distribution"]["chance"]
                metrics[f"{prefix}/term_f1_held_out"] = probe["term_f1_held_out"]["mean_f1"]
                metrics[f"{prefix}/term_f1_held_out_chance"] = probe["term_f1_held_out"]["mean_chance"]
    out_dir = Path(out_dir)
    out_dir.mkdir(parents=True, exist_ok=True)
    append_jsonl(out_dir / "analysis_hook.jsonl", {"step": int(step), **metrics})
    return metrics


def analyze_run(
    run_dir: str | Path, out_root: str | Path, splits=None, num_samples: int = 2048, device: str = "cpu", **kwargs
) -> dict:
    """Load a finished (or checkpointed) run, or an exported model, and write its analysis into
    `<out_root>/<name>/` (`hyla analyze` gives RUN/analysis for a run, ./analysis-<model> for an
    exported model: never into it, hyla.cli.folders), named by the checkpoint step and the options
    (`output_name`), so an analysis with other options never overwrites this one; the results
    dict gets the folder under "out_dir".
    device: where the model runs to collect the codes (cpu | cuda | cuda:N | auto)."""
    import torch

    from hyla.train import load_run_at_step  # train depends on the model; analysis only needs it here

    if device == "auto":
        device = "cuda" if torch.cuda.is_available() else "cpu"
    cfg, model, task, step, source = load_run_at_step(run_dir, task=("fuzzy_logic", "sraven"))
    given = {"num_samples": num_samples, "device": device, **kwargs}
    options = {"splits": list(splits or []), **{key: given.get(key, default) for key, default in _defaults().items()}}
    out_dir = Path(out_root) / output_name(step, options)
    claim_output(out_dir, {"checkpoint_step": step, **options})
    if kwargs.get("progress", True):
        print(f"analyze: {run_dir} (step {step}): writing into {out_dir}/", file=sys.stderr, flush=True)
    metadata = {
        "path": portable_path(run_dir),
        "source": source,
        "task": cfg.task,
        "mixer": cfg.model.mixer,
        "seed": cfg.seed,
        "checkpoint_step": step,
        "options": options,
    }
    results = analyze(
        model.to(device), task, out_dir, splits=splits, num_samples=num_samples, metadata=metadata, **kwargs
    )
    return {**results, "out_dir": str(out_dir)}


# how each option that changes the outputs shows in the folder name when it is not the default
NAME_PARTS = {
    "num_samples": "samples{}",
    "batch_size": "batch-size{}",
    "tsne": "tsne",
    "plot_samples": "plot-samples{}",
    "num_permutations": "permutations{}",
    "seed": "seed{}",
    "probe_feature": "feature{}",
    "save_codes": "save-codes",
    "device": "device-{}",
}


def output_name(step: int, options: dict) -> str:
    """`step<S>` and every option that differs from its default in `analyze`, e.g.
    `step30-samples256-tsne-permutations100-splits-valid+ood` (`step30` for the defaults)."""
    defaults = _defaults()
    parts = [f"step{step}"]
    for key, pattern in NAME_PARTS.items():
        value = options.get(key, defaults[key])
        if value != defaults[key]:
            parts.append(("" if value else "no-") + pattern if isinstance(value, bool) else pattern.format(value))
    if options.get("splits"):
        parts.append("splits-" + "+".join(options["splits"]))
    return re.sub(r"[^A-Za-z0-9_.+=-]", "_", "-".join(parts))


def _defaults() -> dict:
    """The default of every option in `NAME_PARTS` (those of `analyze`, and the cpu device)."""
    defaults = {name: p.default for name, p in inspect.signature(analyze).parameters.items()} | {"device": "cpu"}
    return {key: defaults[key] for key in NAME_PARTS}


def claim_output(out_dir: Path, options: dict) -> None:
    """Record the options in `out_dir/options.json`; refuse a folder written with other options."""
    record = out_dir / "options.json"
    if record.exists():
        previous = json.loads(record.read_text())
        if previous != json.loads(json.dumps(options)):
            changed = sorted(k for k in previous.keys() | options.keys() if previous.get(k) != options.get(k))
            raise FileExistsError(
                f"{out_dir} holds an analysis with other options ({', '.join(changed)} differ): "
                f"move it away to write this one there"
            )
    elif out_dir.exists() and any(out_dir.iterdir()):
        raise FileExistsError(f"{out_dir} exists without options.json: move it away to write an analysis there")
    out_dir.mkdir(parents=True, exist_ok=True)
    write_json(record, options, indent=1)
