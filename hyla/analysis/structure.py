"""Latent structure against generalization, across runs.

Per run: the topographic similarity of its latent codes on a held-out split (the number `hyla
analyze` reports under "topographic similarity", `hyla.analysis.topographic`: Spearman between
pairwise task distances and pairwise distances of the per-task mean codes) of one code set (a
layer, default the last, or all layers), from the final checkpoint on a fixed number of samples
(as `hyla analyze` draws them: the run's task seed, the batch of step 0); beside it the run's
final metric on the same split (fuzzy logic: OOD R²).

Across runs: the Spearman rank correlation between the two, with a percentile bootstrap
confidence interval that resamples runs (with replacement, seeded), overall and within each
mixer that has at least `MIN_RUNS` runs. A rank correlation across runs is an association:
it says whether runs with more topographically organized codes also generalize better, not why.
"""

from __future__ import annotations

import json
import math
from pathlib import Path

import numpy as np
from scipy.stats import rankdata

from hyla.analysis.probes import random_stream

MIN_RUNS = 3  # fewer runs: no correlation is reported
FEW_RUNS = 8  # fewer runs: the text warns that the bootstrap interval is rough


# ----------------------------------------------------------------------------- statistics
def spearman(x, y) -> float:
    """Spearman's rho (Pearson correlation of average ranks; NaN if either side is constant)."""
    rx, ry = rankdata(np.asarray(x, dtype=float)), rankdata(np.asarray(y, dtype=float))
    rx, ry = rx - rx.mean(), ry - ry.mean()
    denominator = math.sqrt(float(rx @ rx) * float(ry @ ry))
    return float(rx @ ry / denominator) if denominator > 0 else math.nan


def bootstrap_spearman(x, y, num_resamples: int = 2000, confidence: float = 0.95, seed: int = 0) -> dict:
    """rho of (x, y) and its percentile bootstrap interval over resampled pairs (runs).

    Resamples in which x or y is constant have no rho and are left out (`resamples_used` says how
    many remain). Returns `rho`, `ci_low`, `ci_high`, `n`, `confidence`, `num_resamples`,
    `resamples_used`, `seed`; rho and the interval are None for fewer than `MIN_RUNS` pairs."""
    x, y = np.asarray(x, dtype=float), np.asarray(y, dtype=float)
    n = len(x)
    result = {
        "n": n,
        "confidence": confidence,
        "num_resamples": num_resamples,
        "seed": seed,
        "rho": None,
        "ci_low": None,
        "ci_high": None,
        "resamples_used": 0,
    }
    if n < MIN_RUNS:
        return result
    indices = random_stream(seed, "bootstrap runs").integers(0, n, size=(num_resamples, n))  # [R, n]
    rhos = np.array([spearman(x[i], y[i]) for i in indices])
    rhos = rhos[np.isfinite(rhos)]
    rho = spearman(x, y)
    result.update(rho=None if math.isnan(rho) else rho, resamples_used=int(len(rhos)))
    if len(rhos):
        tail = 100 * (1 - confidence) / 2
        result["ci_low"], result["ci_high"] = (float(v) for v in np.percentile(rhos, [tail, 100 - tail]))
    return result


def correlations(points: list[dict], num_resamples: int, seed: int, confidence: float = 0.95) -> dict:
    """`overall` and `per_mixer` (every mixer; rho only where it has `MIN_RUNS` runs) bootstrap
    Spearman between `topographic_similarity` and `metric` of the points."""

    def stats(members: list[dict]) -> dict:
        return bootstrap_spearman(
            [p["topographic_similarity"] for p in members],
            [p["metric"] for p in members],
            num_resamples,
            confidence,
            seed,
        )

    mixers = sorted({p["mixer"] for p in points})
    return {"overall": stats(points), "per_mixer": {m: stats([p for p in points if p["mixer"] == m]) for m in mixers}}


# ----------------------------------------------------------------------------- one run
def cache_name(step: int, options: dict) -> str:
    """`latent_structure-step<S>-<split>-layer-<layer>-samples<N>-permutations<P>-seed<s>.json`:
    every option is in the name, so results of other options never share a file."""
    return (
        f"latent_structure-step{step}-{options['split']}-layer-{options['layer']}-samples{options['num_samples']}"
        f"-permutations{options['num_permutations']}-seed{options['seed']}.json"
    )


def describe_layer(layer: str) -> str:
    """The code set an option value names, e.g. "last layer", "all layers", "layer 0"."""
    return {"last": "last layer", "all": "all layers"}.get(layer, f"layer {layer}")


def select_codes(data: dict, layer: str) -> tuple[np.ndarray, np.ndarray, str, str]:
    """(codes `[N, D]`, task identities, task distance, code-set name) as `hyla analyze` forms
    them (`measures.topographic`): layer "last", "all" or an index (negative from the end)."""
    from hyla.analysis.collect import SRAVEN

    if str(data["task"]) == SRAVEN:  # a task is a rule multiset; a sample's code is its K features' mean
        codes, identities, distance = data["codes"].mean(1), data["rules"], "rule_multiset"  # [N, layers, 2, H]
    else:
        codes, identities, distance = data["codes"], data["terms"], "term_matching"  # [N, layers, H]
    num_layers = codes.shape[1]
    if layer == "all":
        return codes.reshape(len(codes), -1), identities, distance, "all layers"
    index = num_layers - 1 if layer == "last" else int(layer)
    if not -num_layers <= index < num_layers:
        from hyla.train.configs import ConfigError

        raise ConfigError(f"--latent-layer {layer}: the model has {num_layers} layers (0..{num_layers - 1})")
    index %= num_layers
    return codes[:, index].reshape(len(codes), -1), identities, distance, f"layer {index}"


def measure_run(run_dir: Path, options: dict) -> dict:
    """Collect the codes of the run's latest checkpoint on `options['split']` and measure their
    topographic similarity. Returns the entry cached in the run folder (without the metric)."""
    from threadpoolctl import threadpool_limits

    from hyla.analysis.collect import collect_latents
    from hyla.analysis.topographic import topographic_similarity
    from hyla.train import load_run_at_step

    cfg, model, task, step, _ = load_run_at_step(run_dir, task=("fuzzy_logic", "sraven"))
    if options["split"] not in task.splits:
        from hyla.train.configs import ConfigError

        raise ConfigError(f"--latent-split {options['split']}: {run_dir} has splits {', '.join(task.splits)}")
    data = collect_latents(model, task, options["split"], options["num_samples"], progress=False)
    codes, identities, distance, code_set = select_codes(data, options["layer"])
    with threadpool_limits(limits=1):  # the machine is shared: small numpy problems gain nothing from threads
        topo = topographic_similarity(codes, identities, distance, options["num_permutations"], seed=options["seed"])
    return {
        "checkpoint_step": step,
        "task": cfg.task,
        "mixer": cfg.model.mixer,
        "seed": cfg.seed,
        "codes": code_set,
        "options": options,
        "topographic": topo,
    }


def cached_measure(run_dir: Path, step: int, options: dict) -> tuple[dict, bool]:
    """(entry, whether it came from the cache): `RUN/<cache_name>` when it holds these options,
    else measured and written there. A file of that name with other options is refused."""
    from hyla.utils import write_json

    path = Path(run_dir) / cache_name(step, options)
    if path.exists():
        entry = json.loads(path.read_text())
        if entry.get("options") != json.loads(json.dumps(options)):
            raise FileExistsError(f"{path} holds results of other options: move it away to measure again")
        return entry, True
    entry = measure_run(Path(run_dir), options)
    if entry["checkpoint_step"] == step:  # an older checkpoint (fallback) is not the run's final model
        write_json(path, entry, indent=1)
    return entry, False


# ----------------------------------------------------------------------------- output
def summary_text(result: dict) -> str:
    """The correlations in words: what is correlated, rho [CI] and n, overall and per mixer."""
    opts = result["options"]
    metric = f"{opts['split']} {result['metric_name']}"
    lines = [
        f"Latent structure vs generalization: topographic similarity of the latent codes ({result['codes']}, "
        f"{opts['split']} split, {opts['num_samples']} samples) against final {metric}, "
        f"across runs.",
        f"Spearman rho with a {100 * result['confidence']:.0f}% percentile bootstrap interval "
        f"({opts['bootstrap']} resamples of runs, seed {opts['seed']}):",
    ]
    groups = [("all runs", result["overall"])] + list(result["per_mixer"].items())
    for name, s in groups:
        if s["rho"] is None:
            why = f"fewer than {MIN_RUNS} runs" if s["n"] < MIN_RUNS else "a constant variable"
            lines.append(f"  {name}: n = {s['n']} ({why}: no correlation)")
        else:
            ci = "–" if s["ci_low"] is None else f"[{s['ci_low']:+.2f}, {s['ci_high']:+.2f}]"
            lines.append(f"  {name}: rho = {s['rho']:+.2f}, CI {ci}, n = {s['n']}")
    lines.append(
        "What it shows: whether runs whose codes are more topographically organized on held-out tasks "
        f"also reach a higher {metric} (an association across runs, not a cause). 'all runs' pools the "
        "mixers, so differences between mixers drive it as much as differences within one; with few runs "
        "the interval is wide, and an interval that contains 0 shows no evidence either way."
    )
    if any(s["rho"] is not None and s["n"] < FEW_RUNS for _, s in groups):
        lines.append(
            f"With fewer than {FEW_RUNS} runs a bootstrap has few distinct resamples: such an interval (even "
            "[-1, -1] from 3 runs ordered alike) is a rough guide, not a calibrated one."
        )
    return "\n".join(lines)


def structure_figure(points: list[dict], result: dict):
    """Scatter of the runs: topographic similarity (x) against the final metric (y), coloured (then
    marked) by mixer, rho [CI] per mixer in the legend and overall in the title."""
    from matplotlib.figure import Figure

    from hyla.analysis.plots import legend, series_colors

    fig = Figure(figsize=(7.5, 4.2))
    ax = fig.subplots()
    colors = series_colors(result["per_mixer"])
    for i, (mixer, s) in enumerate(result["per_mixer"].items()):
        members = [p for p in points if p["mixer"] == mixer]
        rho = "" if s["rho"] is None else f", rho {s['rho']:+.2f}"
        ax.scatter(
            [p["topographic_similarity"] for p in members],
            [p["metric"] for p in members],
            color=colors[mixer],
            marker="os^D"[i // 10 % 4],  # past 10 groups the colours repeat: the marker tells them apart
            label=f"{mixer} (n={s['n']}{rho})",
            s=30,
            alpha=0.85,
        )
    overall = result["overall"]
    title = f"{len(points)} runs"
    if overall["rho"] is not None and overall["ci_low"] is not None:
        title += (
            f": Spearman rho {overall['rho']:+.2f} "
            f"[{overall['ci_low']:+.2f}, {overall['ci_high']:+.2f}] ({100 * result['confidence']:.0f}% CI)"
        )
    ax.set_title(title, fontsize=9)
    opts = result["options"]
    ax.set_xlabel(f"topographic similarity of latent codes ({result['codes']}, {opts['split']})")
    ax.set_ylabel(f"final {opts['split']} {result['metric_name']}")
    # beside the axes, never over a point
    legend(ax, fontsize=8, title="mixer", title_fontsize=8, loc="upper left", bbox_to_anchor=(1.02, 1.0), frameon=False)
    ax.grid(alpha=0.3)
    fig.tight_layout()
    return fig
