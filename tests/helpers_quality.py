"""The learning-quality gate: short HYLA runs of the paper's CPU presets on the default path, and the
bands their loss and R² / accuracy land in, measured over twelve seeds (tests/fixtures/learning_quality.json).

The gate averages each metric over `GATE_SEEDS` (seeds the measurement did not use); its band is the
measured per-seed mean ± 4 standard deviations of such an average (sd / sqrt(number of gate seeds)).
The measurement also runs every seed under simulated regressions (`regression`), among them the
initialization and schedule that commit 228f384 fixed, and counts the disjoint groups of seeds whose
average falls outside the bands. Measured on a 2-core Intel Xeon (tests/fixtures/learning_quality.json):
- raven_cpu catches the initialization regression (alone or with the schedule's) and the learning
  rate / 10 in every group (4 of 4); not the schedule's alone, nor the learning rate / 2 (0 of 4):
  in 400 steps they move the metrics less than the seeds do;
- logic_cpu catches the learning rate / 10 (12 of 12, by the loss at step 100); the others in at
  most 2 of 12: its R² starts to rise between ~1,000 and 3,000 steps, depending on the seed.
The schedule itself is pinned exactly by the optax parity test (tests/train/test_optim.py).
Measure again after a change that should move the bands (a new random stream, a new preset):

    python tests/helpers_quality.py --seeds 12 --out tests/fixtures/learning_quality.json
    python tests/helpers_quality.py --plot experiments/results/learning_quality/gate.png
"""

from __future__ import annotations

import argparse
import contextlib
import json
import math
import statistics
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from unittest.mock import patch

import torch

import hyla.nn.transformer as transformer
import hyla.train.optim as optim
from hyla.train import train
from hyla.train.presets import get_preset

BANDS_FILE = Path(__file__).parent / "fixtures" / "learning_quality.json"
STEPS = {"raven_cpu": 400, "logic_cpu": 1500}
"""Each run's length: ~20 s on one core. SRAVEN's panel accuracy is still at chance after 400 steps;
its loss and feature accuracy already move, and seeds agree closely there. Fuzzy logic's R² starts
to rise between ~1,000 and 3,000 steps, depending on the seed."""
METRICS = {
    "logic_cpu": ("train_loss_step100", "train_loss", "valid_loss", "valid_r2"),
    "raven_cpu": ("train_loss_step100", "train_loss", "valid_loss", "valid_feature_acc"),
}
"""train_loss_step100: the training loss logged at step 100, the end of the warmup, where seeds agree
closely; train_loss: the last 100 steps; valid_*: the final evaluation on 1,024 tasks."""
GATE_SEEDS = {"logic_cpu": (100,), "raven_cpu": (100, 101, 102)}
"""SRAVEN's short runs take ~10 s, so its gate averages three; one fuzzy-logic run takes the ~20 s."""
BAND_WIDTH = 4.0  # standard deviations (of an average over the gate seeds) either side of the mean
REGRESSIONS = ("init", "schedule", "init+schedule", "lr/2", "lr/10")


def short_run(preset: str, seed: int, out: Path) -> dict[str, float]:
    """`STEPS[preset]` steps of HYLA (the preset otherwise unchanged: its warmup, cosine over the
    shorter run, default kernels), one thread, deterministic; the metrics the gate checks."""
    cfg = get_preset(preset)
    cfg = replace(
        cfg,
        out_dir=str(out),
        name=f"s{seed}",
        seed=seed,
        model=replace(cfg.model, mixer="hyla"),
        train=replace(cfg.train, steps=STEPS[preset], threads=1, deterministic=True),
        eval=replace(cfg.eval, every=0, final_samples=1024, batch_size=512),
        log=replace(cfg.log, progress=False),
        checkpoint=replace(cfg.checkpoint, every=STEPS[preset]),
    )
    return read_metrics(train(cfg), preset)


def read_metrics(run: Path, preset: str) -> dict[str, float]:
    """The metrics the gate checks, from a finished run's folder."""
    summary = json.loads((run / "summary.json").read_text())
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    early = next(r["loss"] for r in records if r["split"] == "train" and r["step"] == 100)
    valid = summary["final"]["valid"]
    metrics = {"train_loss_step100": early, "train_loss": summary["train_loss"], "valid_loss": valid["loss"]}
    metrics.update({f"valid_{name}": valid[name] for name in ("r2", "feature_acc") if name in valid})
    return {name: metrics[name] for name in METRICS[preset]}


def gate_metrics(preset: str, out: Path) -> dict[str, float]:
    """The gate's statistic: each metric averaged over the preset's gate seeds."""
    return average([short_run(preset, seed, out) for seed in GATE_SEEDS[preset]], METRICS[preset])


def average(runs: list[dict[str, float]], names) -> dict[str, float]:
    return {name: statistics.fmean(run[name] for run in runs) for name in names}


def outside(metrics: dict[str, float], bands: dict[str, list[float]]) -> list[str]:
    """The metrics outside their band, each as 'name value not in [low, high]'."""
    return [
        f"{name} {metrics[name]:.5g} not in [{lo:.5g}, {hi:.5g}]"
        for name, (lo, hi) in bands.items()
        if not lo <= metrics[name] <= hi
    ]


def _pre_fix_init(model: transformer.Transformer) -> None:
    """The initialization before 228f384: position tables and token embeddings with std 1."""
    for module in model.modules():
        if isinstance(module, transformer.RelativePositionBias):
            torch.nn.init.normal_(module.table.weight, std=1.0)
    if model.cfg.vocab_size > 0:
        torch.nn.init.normal_(model.embed.weight, std=1.0)


def _pre_fix_lr_multiplier(step: int, steps: int, warmup_steps: int, final_fraction: float) -> float:
    """The schedule before 228f384: the cosine ends at `steps` instead of `steps - warmup_steps`."""
    if step < warmup_steps:
        return step / warmup_steps
    progress = min(1.0, (step - warmup_steps) / (steps - warmup_steps))
    return final_fraction + (1.0 - final_fraction) * 0.5 * (1.0 + math.cos(math.pi * progress))


@contextlib.contextmanager
def regression(name: str):
    """Training inside the block has a simulated regression: 'init', 'schedule' (those fixed in
    228f384), both ('init+schedule'), or the peak learning rate halved ('lr/2') or divided by 10."""
    parts = set(name.split("+"))
    with contextlib.ExitStack() as stack:
        if "init" in parts:
            paper_init = transformer.Transformer._paper_init

            def pre_fix(model):
                paper_init(model)
                _pre_fix_init(model)

            stack.enter_context(patch.object(transformer.Transformer, "_paper_init", pre_fix))
        if "schedule" in parts:
            stack.enter_context(patch.object(optim, "lr_multiplier", _pre_fix_lr_multiplier))
        for part in parts & {"lr/2", "lr/10"}:
            divisor = float(part.split("/")[1])
            stack.enter_context(patch.object(optim, "lr_multiplier", _scaled(optim.lr_multiplier, 1.0 / divisor)))
        yield


def _scaled(function, factor: float):
    return lambda *args: factor * function(*args)


def measure(seeds: int, out: Path, record: Path) -> None:
    """Every preset over `seeds` seeds, healthy and under each regression: the values, the bands
    (from the healthy seeds), and how many disjoint groups of gate-size seeds fall outside them; written
    to `record` after each preset."""
    result = {"commit": _commit(), "steps": STEPS, "gate_seeds": GATE_SEEDS, "band_width_sd": BAND_WIDTH}
    result["presets"] = {}
    for preset in STEPS:
        values = {"healthy": [_timed(preset, seed, out / preset / "healthy") for seed in range(seeds)]}
        for name in REGRESSIONS:
            with regression(name):
                values[name] = [_timed(preset, seed, out / preset / name.replace("/", "_")) for seed in range(seeds)]
        bands = _bands(values["healthy"], METRICS[preset], len(GATE_SEEDS[preset]))
        outside_groups = {name: _groups_outside(runs, bands, len(GATE_SEEDS[preset])) for name, runs in values.items()}
        result["presets"][preset] = {"bands": bands, "groups_outside": outside_groups, "values": values}
        print(json.dumps({preset: {"bands": bands, "groups_outside": outside_groups}}), flush=True)
        record.write_text(json.dumps(result, indent=1) + "\n")


def _bands(runs: list[dict], names, group_size: int) -> dict[str, list[float]]:
    bands = {}
    for name in names:
        seen = [run[name] for run in runs]
        mean, half_width = statistics.fmean(seen), BAND_WIDTH * statistics.stdev(seen) / math.sqrt(group_size)
        bands[name] = [mean - half_width, mean + half_width]
    return bands


def _groups_outside(runs: list[dict], bands: dict, group_size: int) -> str:
    """'k of n': of the n disjoint groups of `group_size` runs, k average outside the bands."""
    groups = [runs[i : i + group_size] for i in range(0, len(runs) - group_size + 1, group_size)]
    caught = sum(bool(outside(average(group, bands), bands)) for group in groups)
    return f"{caught} of {len(groups)}"


def plot(record: dict, png: Path) -> None:
    """One panel per preset and metric: each seed (small dots) and each disjoint gate-size group's
    average (large dots) per variant, against the band (shaded)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    presets = list(record["presets"])
    columns = max(len(record["presets"][preset]["bands"]) for preset in presets)
    fig, axes = plt.subplots(len(presets), columns, figsize=(3.2 * columns, 3.4 * len(presets)), squeeze=False)
    for row, preset in zip(axes, presets):
        for ax, name in zip(row, record["presets"][preset]["bands"]):
            _panel(ax, record, preset, name)
    fig.tight_layout()
    png.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(png, dpi=110)


def _panel(ax, record: dict, preset: str, name: str) -> None:
    entry, size = record["presets"][preset], len(record["gate_seeds"][preset])
    ax.axhspan(*entry["bands"][name], color="tab:green", alpha=0.2, lw=0)
    for x, runs in enumerate(entry["values"].values()):
        seen = [run[name] for run in runs]
        groups = [statistics.fmean(seen[i : i + size]) for i in range(0, len(seen) - size + 1, size)]
        ax.plot([x] * len(seen), seen, ".", color="0.6", ms=4)
        ax.plot([x] * len(groups), groups, "o", color="tab:blue", ms=6, mfc="none")
    ax.set_xticks(range(len(entry["values"])), list(entry["values"]), rotation=60, fontsize=8)
    ax.set_title(f"{preset}, {STEPS[preset]} steps\n{name} (gate: mean of {size})", fontsize=9)


def _timed(preset: str, seed: int, out: Path) -> dict[str, float]:
    start = time.perf_counter()
    metrics = short_run(preset, seed, out)
    return {**metrics, "seed": seed, "wall_s": round(time.perf_counter() - start, 1)}


def _commit() -> str:
    return subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()


if __name__ == "__main__":
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--seeds", type=int, default=12)
    parser.add_argument("--runs", type=Path, default=Path("/tmp/hyla_learning_quality"))
    parser.add_argument("--out", type=Path, default=BANDS_FILE)
    parser.add_argument("--plot", type=Path, help="instead of measuring: draw the record in --out into this PNG")
    args = parser.parse_args()
    if args.plot:
        plot(json.loads(args.out.read_text()), args.plot)
    else:
        measure(args.seeds, args.runs, args.out)
