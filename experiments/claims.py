"""README's results table and RESULTS.md's index, every number rebuilt from committed files.

    python experiments/claims.py           print both tables
    python experiments/claims.py --write   write them into README.md and experiments/RESULTS.md
    python experiments/claims.py --check   exit 1 where a committed table differs from the files

Each table sits between two HTML comments (`<!-- claims:NAME begin ... -->` and
`<!-- claims:NAME end -->`); edit it in experiments/claims_tables.md (templates whose `{name}`s
are the numbers below), never in place: tests/experiments/test_claims.py fails while README's
or RESULTS.md's table differs from what this script writes.

Where the numbers come from (under experiments/results/ unless said otherwise): run records
(`records/**/*.run.json`: each run's final metrics, config, environment and cached latent-structure
measurements), the tables `hyla results` wrote (`results.json`), `latent_structure.json`,
`demo_logic_cpu/demo.json`, run folders kept whole (`raven_hyla_cuda_cpu_masks_h100/`), the
authors' curves (`authors_curve_raven_40k/*.jsonl`), benchmarks/results/vs_authors_cpu.json, the
paper's Table A1 (hyla.experiments.paper). Numbers that no
committed file holds are in `QUOTED`, each with where it is written.
"""

from __future__ import annotations

import argparse
import json
import sys
from collections import defaultdict
from pathlib import Path

from hyla.experiments import records
from hyla.experiments.paper import TABLE_A1
from hyla.experiments.result_tables import mean_se

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"

QUOTED = {
    # numbers written only in prose: the measurement left no committed file
    "demo_xeon_hyla": 58.09,  # RESULTS.md, "The main job": the demo's HYLA on the Intel Xeon
    "speed_epyc_logic": 3.57,  # RESULTS.md, "Speed": median over 35 pairs, partly in RESULTS_ARCHIVE.md
    "speed_epyc_raven": 4.34,
}


# ----------------------------------------------------------------------------- reading the files
def final_ood(folder: str, metric: str) -> dict[tuple, dict[int, float]]:
    """{(mixer, experts, frac held out): {seed: final OOD metric ×100}} of the records below
    experiments/results/<folder>/records."""
    groups: dict[tuple, dict[int, float]] = defaultdict(dict)
    for path in records.find(RESULTS / folder / "records"):
        record = records.read(path)
        config, final = record["config"], record["summary"]["final"]
        key = (config["model"]["mixer"], bool(config["model"].get("num_experts")), held_out(config))
        groups[key][config["seed"]] = 100 * final["ood"][metric]
    return groups


def held_out(config: dict) -> float | None:
    return config.get("fuzzy_logic", {}).get("frac_held_out") if config.get("task") == "fuzzy_logic" else None


def ood_at_step(folder: str, mixer: str, step: int) -> list[float]:
    """OOD accuracy ×100 at `step` of each seed of `mixer`, from the records' evaluation rows."""
    values = []
    for path in records.find(RESULTS / folder / "records"):
        record = records.read(path)
        if record["config"]["model"]["mixer"] == mixer:
            [row] = [r for r in record["metrics"] if r["split"] == "ood" and r["step"] == step]
            values.append(100 * row["acc"])
    return values


def last_ood_acc(jsonl: Path) -> float:
    rows = [json.loads(line) for line in jsonl.read_text().splitlines() if line.strip()]
    return 100 * [r for r in rows if r.get("split") == "ood"][-1]["acc"]


def vs_authors(commit: str) -> dict[str, float]:
    """{preset: median ratio of hyla's compiled steps/s to the authors'} of the benchmark entry at `commit`."""
    runs = json.loads((ROOT / "benchmarks" / "results" / "vs_authors_cpu.json").read_text())["runs"]
    [run] = [r for r in runs if (r["machine"].get("hyla_git_commit") or "").startswith(commit)]
    return {row["preset"]: row["ratio_median"] for row in run["summary"] if row["variant"] == "compiled"}


# ----------------------------------------------------------------------------- formatting
def pm(values, digits: int = 1) -> str:
    """'mean ± s.e.' of a list of values."""
    mean, se = mean_se(list(values))
    return f"{mean:.{digits}f} ± {se:.{digits}f}"


def mean(values, digits: int = 1) -> str:
    return f"{mean_se(list(values))[0]:.{digits}f}"


def signed(x: float) -> str:
    return f"{x:+.2f}".replace("-", "−")


def paper(row: tuple, digits: int = 1, error: bool = True) -> str:
    value, se = TABLE_A1[row[0]][row[1:]]
    return f"{value:.{digits}f} ± {se:.{digits}f}" if error else f"{value:.{digits}f}"


# ----------------------------------------------------------------------------- the numbers
MIXERS = ("hyla", "linear", "softmax")
A1_ROWS = MIXERS + ("linear_rms_head", "hyla_identity", "hyla_identity_no_rms_head", "hyla_no_rms_head", "softmax_hyla")
"""Table A1's fuzzy-logic rows without experts"""


def numbers() -> dict[str, str]:
    """Every number of both tables, formatted, by name (the `{name}`s of claims_tables.md)."""
    return {**fuzzy_logic_numbers(), **sraven_numbers(), **other_numbers()}


def fuzzy_logic_numbers() -> dict[str, str]:
    """Table A1 (`a1_*`), the paper's (`paper_*`), Fig. 2C (`f2c_*`), latent structure and codes."""
    a1 = {(m, moe): list(s.values()) for (m, moe, _), s in final_ood("table_a1_logic_50k_cpu", "r2").items()}
    frac = {(m, f): list(s.values()) for (m, _, f), s in final_ood("fig2c_logic_50k_cpu", "r2").items()}
    n: dict[str, str] = {}
    for mixer in A1_ROWS:
        row = ("fuzzy_logic", mixer, False)
        n[f"a1_{mixer}"], n[f"a1_{mixer}_2"] = pm(a1[(mixer, False)]), pm(a1[(mixer, False)], 2)
        n[f"paper_{mixer}"], n[f"paper_{mixer}_mean"] = paper(row), paper(row, 1, False)
        n[f"paper_{mixer}_2"] = paper(row, 2, False)
    for mixer in MIXERS:
        n[f"a1_{mixer}_moe"], n[f"a1_{mixer}_moe_2"] = pm(a1[(mixer, True)]), pm(a1[(mixer, True)], 2)
        n[f"paper_{mixer}_moe_mean"] = paper(("fuzzy_logic", mixer, True), 1, False)
        for f in (0.3, 0.5):
            name = f"f2c_{mixer}_{round(f * 100)}"
            n[name], n[f"{name}_2"] = mean(frac[(mixer, f)]), pm(frac[(mixer, f)], 2)
        n[f"f2c_{mixer}_70"] = mean(a1[(mixer, False)])
        n[f"f2c_{mixer}_drop"] = f"{mean_se(frac[(mixer, 0.3)])[0] - mean_se(a1[(mixer, False)])[0]:.1f}"
    overall = json.loads((RESULTS / "latent_structure_logic_50k_cpu" / "latent_structure.json").read_text())["overall"]
    table = json.loads((RESULTS / "table_a1_logic_50k_cpu" / "latent_structure.json").read_text())["overall"]
    n["ls_n"], n["ls_a1_n"] = str(overall["n"]), str(table["n"])
    n["ls"] = f"{signed(overall['rho'])}, 95% CI [{signed(overall['ci_low'])}, {signed(overall['ci_high'])}]"
    n["ls_a1"] = f"{signed(table['rho'])} [{signed(table['ci_low'])}, {signed(table['ci_high'])}]"
    summary = "latent_weights_logic_50k_cpu/latent_summary.json"
    n.update(latent_code_numbers(summary, "codes", "topographic similarity", "ood_fixed_query", "layer 1", "p < 0.05"))
    return n


def latent_code_numbers(
    file: str, prefix: str, measure: str, split: str, code_set: str, test: str | None
) -> dict[str, str]:
    """One measure of `hyla analyze --out`'s summary per mixer, `{prefix}_{mixer}`: mean ± s.e. over the
    retrained models, with how many pass the measure's `test` where one is named; `{prefix}_passes`:
    how many pass over all mixers."""
    n, passed, models = {}, 0, 0
    for row in json.loads((RESULTS / file).read_text())["summary"]:
        if (row["measure"], row["split"], row["code_set"]) == (measure, split, code_set):
            value = f"{row['mean']:.2f}" + ("" if row["se"] is None else f" ± {row['se']:.2f}")
            undefined = f", {row['undefined']} with codes that do not vary" if row["undefined"] else ""
            n[f"{prefix}_{row['mixer']}"] = f"{value} ({row['passes']} models {test}{undefined})" if test else value
            passed += sum(model["passes"] for model in row["per_model"])
            models += len(row["per_model"])
    n[f"{prefix}_passes"] = f"{passed} of {models}"
    return n


def probe_chance(folder: str, split: str, code_set: str) -> str:
    """The range over the models of a probe's chance level (the probe fitted on shuffled labels)."""
    chances = [
        json.loads(path.read_text())["probes"][split][code_set]["chance_accuracy"]
        for path in (RESULTS / folder).glob("*/*/analysis.json")
    ]
    return f"{min(chances):.2f}–{max(chances):.2f}"


def sraven_numbers() -> dict[str, str]:
    """SRAVEN 40k on the CPU (`r40_*`) and GPUs (`gpu_*`, `masks_30k`), the authors' code, the
    paper's, `raven_cpu` retrained with kept weights, its rule probes by layer (`rprobe*`, Fig. 5A/F), those
    of the 4-feature SRAVEN 40k models (`s40probe*`) and Fig. 5C (`heads*`)."""
    r40 = {m: list(s.values()) for (m, _, _), s in final_ood("table_a1_raven_40k_cpu", "acc").items()}
    gpu = {m: list(s.values()) for (m, _, _), s in final_ood("table_a1_raven_40k_gpu", "acc").items()}
    raven_cpu = {m: list(s.values()) for (m, _, _), s in final_ood("weights_raven_cpu", "acc").items()}
    heads = json.loads((RESULTS / "fig5c_raven_single_head_cpu" / "results.json").read_text())
    head = {(r["group"]["model.mixer"], r["group"]["model.num_heads"]): 100 * r["values"]["ood/acc"][0] for r in heads}
    curves = RESULTS / "authors_curve_raven_40k"
    n: dict[str, str] = {}
    for mixer in MIXERS:
        n[f"r40_{mixer}"], n[f"r40_{mixer}_2"] = pm(r40[mixer]), pm(r40[mixer], 2)
        n[f"gpu_{mixer}"], n[f"gpu_{mixer}_2"] = pm(gpu[mixer]), pm(gpu[mixer], 2)
        n[f"authors_{mixer}"] = f"{last_ood_acc(curves / f'authors_gpu_{mixer}_s0.jsonl'):.2f}"
        n[f"paper_raven_{mixer}"] = paper(("sraven", mixer, False), 1, False)
        n[f"paper_raven_{mixer}_2"] = paper(("sraven", mixer, False), 2)
        n[f"raven_cpu_{mixer}"] = pm(raven_cpu[mixer])
        n[f"heads1_{mixer}"], n[f"heads16_{mixer}"] = f"{head[(mixer, 1)]:.2f}", f"{head[(mixer, 16)]:.2f}"
    measure, probe = "held-out probe (accuracy)", "valid_unpermuted->ood_unpermuted"
    for prefix, folder, layers in (
        ("rprobe", "latent_weights_raven_cpu", 2),
        ("s40probe", "latent_weights_sraven_40k_cpu", 4),
    ):
        summary = f"{folder}/latent_summary.json"
        for layer in range(layers):
            n.update(latent_code_numbers(summary, f"{prefix}{layer}", measure, probe, f"layer {layer}", None))
            n[f"{prefix}{layer}_chance"] = probe_chance(folder, probe, f"layer {layer}")
    masks = RESULTS / "raven_hyla_cuda_cpu_masks_h100"
    n["masks_30k"] = pm([last_ood_acc(masks / f"s{seed}" / "metrics.jsonl") for seed in (0, 1, 2)], 2)
    n["cpu_30k"] = pm(ood_at_step("table_a1_raven_40k_cpu", "hyla", 30000), 2)
    return n


def other_numbers() -> dict[str, str]:
    """The demo, the LM table, speed, and the numbers only prose holds (`QUOTED`)."""
    demo_rows = json.loads((RESULTS / "demo_logic_cpu" / "demo.json").read_text())["rows"]
    demo = {r["mixer"]: 100 * r["final"]["ood"]["r2"] for r in demo_rows}
    n = {name: f"{value:.2f}" for name, value in QUOTED.items()}
    n["demo_xeon_hyla_1"] = f"{QUOTED['demo_xeon_hyla']:.1f}"
    for mixer in MIXERS:
        n[f"demo_{mixer}"], n[f"demo_{mixer}_2"] = f"{demo[mixer]:.1f}", f"{demo[mixer]:.2f}"
    n.update(language_model_numbers())
    n.update(intervention_numbers("interventions_weights_raven_cpu/interventions_tasks16_samples32_seed0.json"))
    fuzzy = "interventions_weights_logic_50k_cpu/interventions_tasks16_samples32_seed0.json"
    n.update(intervention_numbers(fuzzy, prefix="ivf", reference="random_task"))
    speed = vs_authors("a609782")
    n["speed_logic"], n["speed_raven"] = f"{speed['logic_4var_2term']:.2f}", f"{speed['raven_3x3_4features']:.2f}"
    return n


def language_model_numbers() -> dict[str, str]:
    """Final valid NLL per mixer, mean ± s.e. over the seeds recorded in lm_cpu/records."""
    losses: dict[str, list[float]] = defaultdict(list)
    for path in records.find(RESULTS / "lm_cpu" / "records"):
        record = records.read(path)
        losses[record["config"]["model"]["mixer"]].append(record["summary"]["final"]["valid"]["loss"])
    n = {f"lm_{mixer}": pm(losses[mixer], 3) for mixer in MIXERS}
    n["lm_seeds"] = str(min(len(values) for values in losses.values()))
    return n


def intervention_numbers(file: str, prefix: str = "iv", reference: str = "random_rule") -> dict[str, str]:
    """Calibrated transfer on OOD tasks, every layer patched at the row site, per mixer (mean ± s.e.
    over the trained models, or over queries for one model): the patch, the leak control (B's query
    against A's keys), the heads-shuffled control, the constant prediction and a no-transfer
    `reference` (a perfect random rule on SRAVEN, a perfect random task on fuzzy logic)."""
    n = {}
    for group in json.loads((RESULTS / file).read_text())["groups"]:
        ood = group["splits"]["ood"]
        row = ood["sites"]["row"]["all layers"]
        name = f"{prefix}_{group['mixer']}"
        n[name] = f"{row['patched']['mean']:.2f} ± {row['patched']['se']:.2f}"
        n[f"{name}_leak"] = f"{row['query_side']['mean']:.2f}"
        n[f"{name}_shuffled"] = f"{row['shuffled_heads']['mean']:.2f}"
        n[f"{name}_constant"] = f"{ood['reference']['constant']['mean']:.2f}"
        n[f"{name}_random"] = f"{ood['reference'][reference]['mean']:.2f}"
    return n


# ----------------------------------------------------------------------------- the tables
TEMPLATES = ROOT / "experiments" / "claims_tables.md"
TABLES = {"readme-results": ROOT / "README.md", "results-index": ROOT / "experiments" / "RESULTS.md"}
"""where each table of claims_tables.md goes"""


def templates(path: Path = TEMPLATES) -> dict[str, list[str]]:
    """{table name: its rows} of claims_tables.md: the `|` lines after each `<!-- table: NAME ... -->`."""
    tables: dict[str, list[str]] = {}
    name = None
    for line in path.read_text().splitlines():
        if line.startswith("<!-- table: "):
            name = line.removeprefix("<!-- table: ").split()[0]
            tables[name] = []
        elif name and line.startswith("|"):
            tables[name].append(line)
    return tables


def render(rows: list[str], values: dict[str, str]) -> str:
    return "\n".join(row.format(**values) for row in rows) + "\n"


def markers(name: str) -> tuple[str, str]:
    return (
        f"<!-- claims:{name} begin: generated by `python experiments/claims.py --write`, edit the rows there -->\n",
        f"<!-- claims:{name} end -->",
    )


def block(text: str, name: str) -> tuple[int, int]:
    """(start, end) of the table between the markers of `name` in `text`; ValueError without them."""
    begin, end = markers(name)
    start = text.index(begin) + len(begin)
    return start, text.index(end, start)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the tables in README.md and RESULTS.md")
    parser.add_argument("--check", action="store_true", help="exit 1 where a committed table differs")
    args = parser.parse_args(argv)
    values, rows, stale = numbers(), templates(), []
    for name, path in TABLES.items():
        table, text = render(rows[name], values), path.read_text()
        start, end = block(text, name)
        if text[start:end] != table:
            stale.append(path.name)
            if args.write:
                path.write_text(text[:start] + table + text[end:])
        if not (args.write or args.check):
            print(table)
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}; run python experiments/claims.py --write", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    sys.exit(main())
