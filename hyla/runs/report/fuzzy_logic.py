"""The report's fuzzy-logic numbers: `hyla demo`, Table A1 and Fig. 2C."""

from __future__ import annotations

from hyla.analysis.tables import mean_se
from hyla.runs.paper import TABLE_A1
from hyla.runs.report.cells import mean, number, paper, pm, run_numbers, signed
from hyla.runs.report.files import (
    MIXERS,
    final,
    mixer_and_experts,
    mixer_and_held_out,
    read_json,
    records_in,
    seed_values,
    train_loss,
)
from hyla.runs.report.latent import latent_code_numbers

A1_ROWS = MIXERS + ("linear_rms_head", "hyla_identity", "hyla_identity_no_rms_head", "hyla_no_rms_head", "softmax_hyla")
"""Table A1's fuzzy-logic rows without experts"""


def fuzzy_logic_numbers() -> dict[str, str]:
    """Table A1 (`a1_*`), the paper's (`paper_*`), Fig. 2C (`f2c_*`), latent structure and codes."""
    a1 = seed_values(records_in("table_a1_logic_50k_cpu"), mixer_and_experts, final("ood", "r2"))
    frac = seed_values(records_in("fig2c_logic_50k_cpu"), mixer_and_held_out, final("ood", "r2"))
    n: dict[str, str] = {}
    for mixer in A1_ROWS:
        row = ("fuzzy_logic", mixer, False)
        n[f"a1_{mixer}"], n[f"a1_{mixer}_2"] = pm(a1[(mixer, False)]), pm(a1[(mixer, False)], 2)
        n[f"paper_{mixer}"], n[f"paper_{mixer}_mean"] = paper(row), paper(row, 1, False)
        n[f"paper_{mixer}_2"] = paper(row, 2, False)
    for mixer in MIXERS:
        n[f"a1_{mixer}_moe"], n[f"a1_{mixer}_moe_2"] = pm(a1[(mixer, True)]), pm(a1[(mixer, True)], 2)
        n[f"paper_{mixer}_moe_mean"] = paper(("fuzzy_logic", mixer, True), 1, False)
        for percent in (30, 50):
            name = f"f2c_{mixer}_{percent}"
            n[name], n[f"{name}_2"] = mean(frac[(mixer, percent)]), pm(frac[(mixer, percent)], 2)
        n[f"f2c_{mixer}_70"] = mean(a1[(mixer, False)])
        n[f"f2c_{mixer}_drop"] = f"{mean_se(frac[(mixer, 30)])[0] - mean_se(a1[(mixer, False)])[0]:.1f}"
    overall = read_json("latent_structure_logic_50k_cpu/latent_structure.json")["overall"]
    table = read_json("table_a1_logic_50k_cpu/latent_structure.json")["overall"]
    n["ls_n"], n["ls_a1_n"] = str(overall["n"]), str(table["n"])
    n["ls"] = f"{signed(overall['rho'])}, 95% CI [{signed(overall['ci_low'])}, {signed(overall['ci_high'])}]"
    n["ls_a1"] = f"{signed(table['rho'])} [{signed(table['ci_low'])}, {signed(table['ci_high'])}]"
    summary = "latent_weights_logic_50k_cpu/latent_summary.json"
    n.update(latent_code_numbers(summary, "codes", "topographic similarity", "ood_fixed_query", "layer 1", "p < 0.05"))
    return n


def demo_ood(folder: str) -> dict[str, float]:
    """{mixer: final OOD R² ×100} of a committed `hyla demo` run."""
    return {r["mixer"]: 100 * r["final"]["ood"]["r2"] for r in read_json(f"{folder}/demo.json")["rows"]}


FUZZY_COLUMNS = {
    "ood": (final("ood", "r2"), 2, False),
    "valid": (final("valid", "r2"), 2, False),
    "novel": (final("novel_terms", "r2"), 2, False),
}


def fuzzy_logic_sections() -> dict[str, str]:
    """`hyla demo` (`demo_*`), Table A1 (`a1t_*`, the paper's `paper_*_pm2`) and Fig. 2C (`fc_*`)."""
    n = {}
    for row in read_json("demo_logic_cpu/demo.json")["rows"]:
        name, result = f"demo_{row['mixer']}", row["final"]
        n[f"{name}_valid"], n[f"{name}_novel"] = (
            number(100 * result["valid"]["r2"]),
            number(100 * result["novel_terms"]["r2"]),
        )
        n[f"{name}_loss"] = f"{row['train_loss']:.4g}"
    loss = {"loss": (train_loss(1e4), 2, False)}
    n.update(run_numbers("a1t", records_in("table_a1_logic_50k_cpu"), {**FUZZY_COLUMNS, **loss}))
    for mixer, moe in TABLE_A1["fuzzy_logic"]:
        n[f"paper_{mixer}{'_moe' if moe else ''}_pm2"] = paper(("fuzzy_logic", mixer, moe), 2)
    columns = {**FUZZY_COLUMNS, "novel": (final("novel_terms", "r2"), 2, True), "loss": (train_loss(), 5, False)}
    fig2c = records_in("fig2c_logic_50k_cpu")
    n.update(run_numbers("fc", fig2c, columns, lambda record: "{}_{}".format(*mixer_and_held_out(record))))
    return n


def demo_numbers() -> dict[str, str]:
    """README's `hyla demo` numbers: final OOD R² ×100 per mixer (`demo_*`), and HYLA's on a Xeon."""
    demo = demo_ood("demo_logic_cpu")
    xeon = demo_ood("demo_logic_cpu_xeon")["hyla"]
    n = {}
    n["demo_xeon_hyla"], n["demo_xeon_hyla_1"] = f"{xeon:.2f}", f"{xeon:.1f}"
    for mixer in MIXERS:
        n[f"demo_{mixer}"], n[f"demo_{mixer}_2"] = f"{demo[mixer]:.1f}", f"{demo[mixer]:.2f}"
    return n


def numbers() -> dict[str, str]:
    """Every fuzzy-logic number of the report, by name."""
    return {**fuzzy_logic_numbers(), **demo_numbers(), **fuzzy_logic_sections()}
