"""The figures of the paper's claims, drawn from the committed records into experiments/figures/
(`python experiments/figures.py`: `write`, `up_to_date`).

- `table_a1.png`: Table A1 for both tasks, a row per mixer: hyla's seeds as dots, their mean as a
  bar with its s.e. over the seeds (from 2 seeds on), beside the paper's mean ± s.e. (fuzzy logic:
  experiments/results/table_a1_logic_50k_cpu; SRAVEN: table_a1_raven_20m_cpu, the seeds recorded so far);
- `fig2c.png`: fuzzy logic's OOD R² against the fraction of tasks held out (Fig. 2C), each seed a
  dot, the means joined.

SRAVEN's OOD accuracy against examples seen is `experiments/sraven_budget.py`'s
(results/table_a1_raven_20m_cpu/ood_vs_examples.png). figures.json holds every number drawn; a test
fails while it differs from what the records give, so a figure is never older than its records.
"""

from __future__ import annotations

import json

from hyla.analysis.tables import mean_se
from hyla.runs.paper import TABLE_A1
from hyla.runs.report.cells import MIXER_COLORS, label
from hyla.runs.report.claims_paper import A1_MIXERS, FUZZY, SRAVEN_20M, held_out_seeds, seeds
from hyla.runs.report.files import MIXERS, ROOT

FIGURES = ROOT / "experiments" / "figures"
A1_TASKS = {"fuzzy_logic": (FUZZY, "r2", "OOD R² ×100"), "sraven": (SRAVEN_20M, "acc", "OOD panel accuracy ×100")}
TITLES = {"fuzzy_logic": "fuzzy logic, 50k steps", "sraven": "SRAVEN, 20M examples"}


def data() -> dict:
    """Every number the figures draw: {"table_a1": {task: [row, ...]}, "fig2c": {mixer: {percent: seeds}}}."""
    table = {}
    for task, (folder, metric, _) in A1_TASKS.items():
        runs = seeds(folder, "ood", metric)
        table[task] = [
            {
                "row": label(mixer) + (" + experts" if moe else ""),
                "paper": list(TABLE_A1[task][(mixer, moe)]),
                "hyla": [round(v, 4) for v in runs.get((mixer, moe), [])],
            }
            for moe, mixers in ((False, A1_MIXERS), (True, MIXERS))
            for mixer in mixers
        ]
    held = held_out_seeds()
    fig2c = {m: {str(p): [round(v, 4) for v in held[(m, p)]] for p in (30, 50, 70)} for m in MIXERS}
    return {"table_a1": table, "fig2c": fig2c}


def table_a1_figure(table: dict):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(10, 5.2))
    axes = fig.subplots(1, 2, sharey=True)
    for ax, (task, rows) in zip(axes, table.items()):
        for y, row in enumerate(rows):
            mean, se = row["paper"]
            ax.errorbar(mean, y + 0.15, xerr=se, fmt="s", color="0.45", ms=4, capsize=2, label="paper (mean ± s.e.)")
            if row["hyla"]:
                ax.plot(
                    row["hyla"],
                    [y - 0.15] * len(row["hyla"]),
                    "o",
                    color="tab:blue",
                    ms=4,
                    alpha=0.8,
                    label="hyla, one seed each",
                )
                hyla_mean, hyla_se = mean_se(row["hyla"])
                ax.plot([hyla_mean] * 2, [y - 0.4, y + 0.1], color="tab:blue", lw=2, label="hyla, mean")
                if hyla_se is not None:
                    ax.errorbar(
                        hyla_mean,
                        y - 0.15,
                        xerr=hyla_se,
                        fmt="none",
                        ecolor="tab:blue",
                        capsize=3,
                        label="hyla, mean ± s.e. over seeds",
                    )
        for y, row in enumerate(rows):  # once the axis has its limits
            if not row["hyla"]:
                ax.text(ax.get_xlim()[0], y - 0.15, " hyla: not run", fontsize=7, va="center", color="0.4")
        ax.set_title(f"{TITLES[task]}: {A1_TASKS[task][2]}", fontsize=10)
        ax.grid(axis="x", alpha=0.3)
    axes[0].set_yticks(range(len(table["fuzzy_logic"])), [r["row"] for r in table["fuzzy_logic"]], fontsize=8)
    axes[0].invert_yaxis()
    handles, labels = axes[0].get_legend_handles_labels()
    unique = dict(zip(labels, handles))
    fig.legend(unique.values(), unique.keys(), loc="lower center", ncol=4, fontsize=8, frameon=False)
    fig.suptitle("Table A1: hyla's seeds beside the paper's mean ± s.e.", fontsize=11)
    fig.subplots_adjust(left=0.2, right=0.98, bottom=0.14, top=0.9, wspace=0.08)
    return fig


def fig2c_figure(fig2c: dict):
    from matplotlib.figure import Figure

    fig = Figure(figsize=(5, 3.6))
    ax = fig.subplots()
    for mixer, by_percent in fig2c.items():
        x = [int(p) for p in by_percent]
        means = [sum(v) / len(v) for v in by_percent.values()]
        ax.plot(x, means, "-", color=MIXER_COLORS[mixer], label=label(mixer))
        for p, values in by_percent.items():
            ax.plot([int(p)] * len(values), values, "o", color=MIXER_COLORS[mixer], ms=3, alpha=0.6)
    ax.set_xticks([30, 50, 70])
    ax.set_xlabel("tasks held out (%)")
    ax.set_ylabel("OOD R² ×100")
    ax.set_title("Fig. 2C: fuzzy logic, each seed a dot, the means joined", fontsize=9)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8, frameon=False)
    fig.tight_layout()
    return fig


def up_to_date(numbers: dict) -> bool:
    """Whether figures.json holds `numbers` (`data()`)."""
    file = FIGURES / "figures.json"
    return file.is_file() and json.loads(file.read_text()) == numbers


def write(numbers: dict) -> str:
    """Write figures.json and the figures of `numbers` (`data()`) into FIGURES; what was written."""
    file = FIGURES / "figures.json"
    FIGURES.mkdir(exist_ok=True)
    file.write_text(json.dumps(numbers, indent=1, ensure_ascii=False) + "\n")
    table_a1_figure(numbers["table_a1"]).savefig(FIGURES / "table_a1.png", dpi=90)
    fig2c_figure(numbers["fig2c"]).savefig(FIGURES / "fig2c.png", dpi=90)
    return f"wrote {file.relative_to(ROOT)}, table_a1.png and fig2c.png beside it"
