"""Validation curves and a results table of language-model runs.

    python experiments/lm/plot.py runs/lm_cpu [--out experiments/lm/lm_cpu.png]

Reads every run folder below the given folder (metrics.jsonl, summary.json, env.json), draws
validation NLL (and training loss) against the step, and prints a markdown table.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt  # noqa: E402

MIXER_ORDER = ("softmax", "linear", "hyla")


def read_runs(folder: Path) -> list[dict]:
    runs = []
    for run in sorted(p for p in folder.iterdir() if (p / "metrics.jsonl").exists()):
        records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
        summary = json.loads((run / "summary.json").read_text()) if (run / "summary.json").exists() else {}
        env = json.loads((run / "env.json").read_text()) if (run / "env.json").exists() else {}
        config = json.loads((run / "config.json").read_text())
        runs.append(
            {
                "name": run.name,
                "mixer": config["model"]["mixer"],
                "records": records,
                "summary": summary,
                "env": env,
                "config": config,
            }
        )
    order = {m: i for i, m in enumerate(MIXER_ORDER)}
    return sorted(runs, key=lambda r: (order.get(r["mixer"], len(order)), r["name"]))


def plot(runs: list[dict], out: Path) -> None:
    fig, (ax_valid, ax_train) = plt.subplots(1, 2, figsize=(11, 4))
    colors, styles = {}, ("-", "--", ":", "-.")
    for run in runs:
        valid = [(r["step"], r["nll"]) for r in run["records"] if r["split"] == "valid"]
        train = [(r["step"], r["loss"]) for r in run["records"] if r["split"] == "train"]
        color = colors.setdefault(run["mixer"], f"C{len(colors)}")
        style = styles[run["config"]["seed"] % len(styles)]
        label = f"{run['mixer']} (seed {run['config']['seed']})"
        if valid:
            ax_valid.plot(*zip(*valid), style, color=color, marker="o", markersize=3, label=label)
        if train:
            ax_train.plot(*zip(*train), style, color=color, alpha=0.8, label=label)
    for ax, title in ((ax_valid, "validation NLL (nats/token)"), (ax_train, "training loss (mean over 50 steps)")):
        ax.set_xlabel("step")
        ax.set_title(title)
        ax.grid(alpha=0.3)
        ax.legend(fontsize=8)
        ax.set_ylim(top=min(ax.get_ylim()[1], 6.0))
    corpus = runs[0]["config"]["text"]["corpus"]
    fig.suptitle(f"{runs[0]['config'].get('preset', '')} on {corpus}: equal budget per mixer")
    fig.tight_layout()
    fig.savefig(out, dpi=120)


def table(runs: list[dict]) -> str:
    """One row per run, then the mean over seeds of every mixer with finished runs."""
    lines = [
        "| mixer | seed | parameters | valid NLL | valid ppl | train loss (last 100 steps)"
        " | steps | wall time | steps/s |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    finished: dict[str, list[tuple[float, float]]] = {}
    for run in runs:
        s = run["summary"]
        nll = s.get("final", {}).get("valid", {}).get("nll", math.nan)
        if s.get("status") == "completed":
            finished.setdefault(run["mixer"], []).append((nll, s["train_loss"]))
        lines.append(
            f"| {run['mixer']} | {run['config']['seed']} | {s.get('num_parameters', 0):,} | {nll:.3f} | "
            f"{math.exp(nll):.1f} | {s.get('train_loss') or math.nan:.3f} | {s.get('step')} | "
            f"{s.get('wall_time_s', 0) / 60:.1f} min | {s.get('steps_per_second') or math.nan:.2f} |"
        )
    lines += [
        "",
        "| mixer | runs | valid NLL (mean ± s.e.) | valid ppl (of the mean NLL) | train loss (mean) |",
        "|---|---|---|---|---|",
    ]
    for mixer, values in finished.items():
        nlls = [v[0] for v in values]
        mean = sum(nlls) / len(nlls)
        se = (sum((x - mean) ** 2 for x in nlls) / (len(nlls) - 1) / len(nlls)) ** 0.5 if len(nlls) > 1 else math.nan
        lines.append(
            f"| {mixer} | {len(nlls)} | {mean:.3f} ± {se:.3f} | {math.exp(mean):.1f} | "
            f"{sum(v[1] for v in values) / len(values):.3f} |"
        )
    return "\n".join(lines)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("folder", type=Path)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "lm_cpu.png")
    args = parser.parse_args()
    runs = read_runs(args.folder)
    if not runs:
        raise SystemExit(f"no run folders with metrics.jsonl in {args.folder}")
    plot(runs, args.out)
    print(table(runs))
    env = runs[0]["env"]
    print(f"\nplot: {args.out}; machine: {json.dumps(env)}")


if __name__ == "__main__":
    main()
