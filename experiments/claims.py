"""README's results table and RESULTS.md's tables, every number rebuilt from committed files.

    python experiments/claims.py           print the tables
    python experiments/claims.py --write   write them into README.md and experiments/RESULTS.md
    python experiments/claims.py --check   exit 1 where a committed table differs from the files

Each table sits between two HTML comments (`<!-- claims:NAME begin ... -->` and
`<!-- claims:NAME end -->`); edit it in experiments/claims_tables.md (templates whose `{name}`s
are the numbers below and in claims_sections.py), never in place: tests/experiments/test_claims.py
fails while a committed table differs from what this script writes.

Where the numbers come from (under experiments/results/ unless said otherwise): run records
(`records/**/*.run.json`: each run's final metrics, config, environment and cached latent-structure
measurements), the tables `hyla results` wrote (`results.json`), `latent_structure.json`,
`hyla analyze`'s and `hyla interventions`' JSON, `demo_logic_cpu/demo.json`, run folders kept whole
(`raven_hyla_cuda_cpu_masks_h100/`), the authors' curves (`authors_curve_raven_40k/*.jsonl`),
benchmarks/results/ (`vs_authors_cpu.json`, `ledger.json`), tests/fixtures/learning_quality.json
and the paper's Table A1 (hyla.experiments.paper).

Numbers in prose are checked, not written: each phrase under a `<!-- prose: FILE -->` line of
claims_tables.md, its numbers given as `{name}`s or as fields of committed files, must appear in
FILE as the files give it (`prose()`), or `--check` fails.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections import defaultdict
from pathlib import Path

import claims_sections
from claims_paper import claim_numbers
from claims_sections import (
    MIXERS,
    chance_range,
    mean,
    paper,
    pm,
    read_json,
    read_jsonl,
    records_in,
    section_numbers,
    signed,
)

from hyla.experiments.result_tables import mean_se

ROOT = Path(__file__).resolve().parents[1]


# ----------------------------------------------------------------------------- reading the files
def final_ood(folder: str, metric: str) -> dict[tuple, dict[int, float]]:
    """{(mixer, experts, frac held out): {seed: final OOD metric ×100}} of the records below
    experiments/results/<folder>/records."""
    groups: dict[tuple, dict[int, float]] = defaultdict(dict)
    for record in records_in(folder):
        config, final = record["config"], record["summary"]["final"]
        key = (config["model"]["mixer"], bool(config["model"].get("num_experts")), held_out(config))
        groups[key][config["seed"]] = 100 * final["ood"][metric]
    return groups


def held_out(config: dict) -> float | None:
    return config.get("fuzzy_logic", {}).get("frac_held_out") if config.get("task") == "fuzzy_logic" else None


def ood_at_step(folder: str, mixer: str, step: int) -> list[float]:
    """OOD accuracy ×100 at `step` of each seed of `mixer`, from the records' evaluation rows."""
    values = []
    for record in records_in(folder):
        if record["config"]["model"]["mixer"] == mixer:
            [row] = [r for r in record["metrics"] if r["split"] == "ood" and r["step"] == step]
            values.append(100 * row["acc"])
    return values


def last_ood_acc(jsonl: str) -> float:
    return 100 * [r for r in read_jsonl(jsonl) if r.get("split") == "ood"][-1]["acc"]


def vs_authors(commit: str) -> dict[str, float]:
    """{preset: median ratio of hyla's compiled steps/s to the authors'} of the benchmark entry at `commit`."""
    runs = read_json("vs_authors_cpu.json", "benchmarks")["runs"]
    [run] = [r for r in runs if (r["machine"].get("hyla_git_commit") or "").startswith(commit)]
    return {row["preset"]: row["ratio_median"] for row in run["summary"] if row["variant"] == "compiled"}


# ----------------------------------------------------------------------------- the numbers
A1_ROWS = MIXERS + ("linear_rms_head", "hyla_identity", "hyla_identity_no_rms_head", "hyla_no_rms_head", "softmax_hyla")
"""Table A1's fuzzy-logic rows without experts"""


def numbers() -> dict[str, str]:
    """Every number of the tables, formatted, by name (the `{name}`s of claims_tables.md)."""
    return {**fuzzy_logic_numbers(), **sraven_numbers(), **other_numbers(), **section_numbers(), **claim_numbers()}


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
    overall = read_json("latent_structure_logic_50k_cpu/latent_structure.json")["overall"]
    table = read_json("table_a1_logic_50k_cpu/latent_structure.json")["overall"]
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
    retrained models (over those where it is defined, and then how many), with how many pass the
    measure's `test` where one is named; `{prefix}_passes`: how many pass over all mixers."""
    n, passed, models = {}, 0, 0
    for row in read_json(file)["summary"]:
        if (row["measure"], row["split"], row["code_set"]) == (measure, split, code_set):
            value = f"{row['mean']:.2f}" + ("" if row["se"] is None else f" ± {row['se']:.2f}")
            if row["undefined"]:
                undefined = [m["seed"] for m in row["per_model"] if m["value"] is None]
                value += f" over {len(row['per_model']) - len(undefined)} models"
                seeds = ", ".join(map(str, undefined))
                tail = f"; seed {seeds}: codes that do not vary"
            else:
                tail = ""
            n[f"{prefix}_{row['mixer']}"] = f"{value} ({row['passes']} models {test}{tail})" if test else value
            passed += sum(model["passes"] for model in row["per_model"])
            models += len(row["per_model"])
    n[f"{prefix}_passes"] = f"{passed} of {models}"
    return n


def sraven_numbers() -> dict[str, str]:
    """SRAVEN 40k on the CPU (`r40_*`) and GPUs (`gpu_*`, `masks_30k`), the authors' code, the
    paper's, `raven_cpu` retrained with kept weights, its rule probes by layer (`rprobe*`, Fig. 5A/F), those
    of the 4-feature SRAVEN 40k models (`s40probe*`) and Fig. 5C (`heads*`)."""
    r40 = {m: list(s.values()) for (m, _, _), s in final_ood("table_a1_raven_40k_cpu", "acc").items()}
    gpu = {m: list(s.values()) for (m, _, _), s in final_ood("table_a1_raven_40k_gpu", "acc").items()}
    raven_cpu = {m: list(s.values()) for (m, _, _), s in final_ood("weights_raven_cpu", "acc").items()}
    heads = read_json("fig5c_raven_single_head_cpu/results.json")
    head = {(r["group"]["model.mixer"], r["group"]["model.num_heads"]): 100 * r["values"]["ood/acc"][0] for r in heads}
    n: dict[str, str] = {}
    for mixer in MIXERS:
        n[f"r40_{mixer}"], n[f"r40_{mixer}_2"] = pm(r40[mixer]), pm(r40[mixer], 2)
        n[f"gpu_{mixer}"], n[f"gpu_{mixer}_2"] = pm(gpu[mixer]), pm(gpu[mixer], 2)
        n[f"authors_{mixer}"] = f"{last_ood_acc(f'authors_curve_raven_40k/authors_gpu_{mixer}_s0.jsonl'):.2f}"
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
            n[f"{prefix}{layer}_chance"] = chance_range(folder, probe, layer)
    masks = "raven_hyla_cuda_cpu_masks_h100"
    n["masks_30k"] = pm([last_ood_acc(f"{masks}/s{seed}/metrics.jsonl") for seed in (0, 1, 2)], 2)
    n["cpu_30k"] = pm(ood_at_step("table_a1_raven_40k_cpu", "hyla", 30000), 2)
    return n


def demo_ood(folder: str) -> dict[str, float]:
    """{mixer: final OOD R² ×100} of a committed `hyla demo` run."""
    return {r["mixer"]: 100 * r["final"]["ood"]["r2"] for r in read_json(f"{folder}/demo.json")["rows"]}


def other_numbers() -> dict[str, str]:
    """The demo, the LM table and speed."""
    demo = demo_ood("demo_logic_cpu")
    xeon = demo_ood("demo_logic_cpu_xeon")["hyla"]
    n = {}
    n["demo_xeon_hyla"], n["demo_xeon_hyla_1"] = f"{xeon:.2f}", f"{xeon:.1f}"
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
    for record in records_in("lm_cpu"):
        losses[record["config"]["model"]["mixer"]].append(record["summary"]["final"]["valid"]["nll"])
    n = {f"lm_{mixer}": pm(losses[mixer], 3) for mixer in MIXERS}
    n["lm_seeds"] = str(min(len(values) for values in losses.values()))
    return n


def intervention_numbers(file: str, prefix: str = "iv", reference: str = "random_rule") -> dict[str, str]:
    """Calibrated transfer on OOD tasks, every layer patched at the row site, per mixer (mean ± s.e.
    over the trained models, or over queries for one model): the patch, the leak control (B's query
    against A's keys), the heads-shuffled control, the constant prediction and a no-transfer
    `reference` (a perfect random rule on SRAVEN, a perfect random task on fuzzy logic)."""
    n = {}
    for group in read_json(file)["groups"]:
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


def templates(path: Path = TEMPLATES) -> dict[str, tuple[list[Path], list[str]]]:
    """{table name: (the files it goes into, its rows)} of claims_tables.md: the `|` lines after each
    `<!-- table: NAME (FILE[, FILE ...]) -->`, and the lines that are one `{name}` alone (rows generated
    whole, as many as there are runs), each FILE relative to the repository's root."""
    tables: dict[str, tuple[list[Path], list[str]]] = {}
    name = None
    for line in path.read_text().splitlines():
        if line.startswith("<!-- table: "):
            name, files = line.removeprefix("<!-- table: ").removesuffix(" -->").split(" (")
            tables[name] = ([ROOT / file for file in files.rstrip(")").split(", ")], [])
        elif name and (line.startswith("|") or re.fullmatch(r"\{\w+\}", line)):
            tables[name][1].append(line)
        elif name and not line.strip():
            name = None
    return tables


def render(rows: list[str], values: dict[str, str], path: Path | None = None) -> str:
    """The rows with their numbers, `{results}` the link to RESULTS.md from `path`."""
    results = "" if path == ROOT / "experiments" / "RESULTS.md" else "experiments/RESULTS.md"
    return "\n".join(row.format(**values, results=results) for row in rows) + "\n"


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


# ----------------------------------------------------------------------------- numbers in prose
def prose(path: Path = TEMPLATES) -> list[tuple[Path, str]]:
    """(FILE, phrase) of claims_tables.md: the lines after each `<!-- prose: FILE -->`, up to the
    next blank line."""
    facts, file = [], None
    for line in path.read_text().splitlines():
        if line.startswith("<!-- prose: "):
            file = ROOT / line.removeprefix("<!-- prose: ").removesuffix(" -->")
        elif file and line.strip():
            facts.append((file, line))
        else:
            file = None
    return facts


def field(ref: str) -> str:
    """`FILE KEY [FORMAT]`: the value at KEY of the JSON file FILE, formatted. FILE is a glob below
    experiments/results/ (`benchmarks/…` below benchmarks/results/) that matches one file; KEY is
    dotted, `[k=v,…]` picking the one item of a list whose fields match, `[i]` the i-th; FORMAT is a
    Python format spec, `x100` before it scaling the value first; a minus sign prints as `−`."""
    file, key, *spec = ref.split()
    benchmarks = file.startswith("benchmarks/")
    root = claims_sections.BENCHMARKS if benchmarks else claims_sections.RESULTS
    file = file.removeprefix("benchmarks/")
    paths = sorted(root.glob(file)) or [root / file]
    if len(paths) != 1:
        raise ValueError(f"{ref}: {file} matches {len(paths)} files, not one")
    [path] = paths
    value = json.loads(path.read_text())
    for name, pick in re.findall(r"(\w+)|\[([^\]]*)\]", key):
        if name:
            value = value[name]
        elif pick.lstrip("-").isdigit():
            value = value[int(pick)]
        else:
            want = dict(item.split("=") for item in pick.split(","))
            matches = [v for v in value if all(str(v.get(k)) == w for k, w in want.items())]
            if len(matches) != 1:
                raise ValueError(f"{ref}: [{pick}] matches {len(matches)} items, not one")
            [value] = matches
    spec = spec[0] if spec else ""
    if spec.startswith("x100"):
        value, spec = 100 * value, spec.removeprefix("x100")
    return format(value, spec).replace("-", "−")


def render_phrase(phrase: str, values: dict[str, str]) -> str:
    """The phrase with each `{name}` from `values` and each `{FILE KEY FORMAT}` from its file."""
    return re.sub(r"\{([^{}]+)\}", lambda m: field(m[1]) if " " in m[1] else values[m[1]], phrase)


def prose_differing(values: dict[str, str]) -> list[str]:
    """The phrases of `prose()` that their files no longer hold as the committed results give them."""
    texts: dict[Path, str] = {}
    missing = []
    for path, phrase in prose():
        if path not in texts:
            texts[path] = " ".join(path.read_text().split())
        if " ".join(render_phrase(phrase, values).split()) not in texts[path]:
            missing.append(f"{path.relative_to(ROOT)}: {render_phrase(phrase, values)!r} (from {phrase!r})")
    return missing


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--write", action="store_true", help="rewrite the tables in README.md and RESULTS.md")
    parser.add_argument("--check", action="store_true", help="exit 1 where a committed table differs")
    args = parser.parse_args(argv)
    values, stale, texts = numbers(), [], {}
    for name, (paths, rows) in templates().items():
        for path in paths:
            table, text = render(rows, values, path), texts.get(path) or path.read_text()
            start, end = block(text, name)
            if text[start:end] != table:
                stale.append(name)
                texts[path] = text[:start] + table + text[end:]
            if not (args.write or args.check):
                print(f"{name} ({path.relative_to(ROOT)}):\n{table}")
    if args.write:
        for path, text in texts.items():
            path.write_text(text)
    if args.check and stale:
        print(f"out of date: {', '.join(stale)}; run python experiments/claims.py --write", file=sys.stderr)
    differing = prose_differing(values) if args.check else []
    for phrase in differing:
        print(f"prose differs from its source, edit it by hand: {phrase}", file=sys.stderr)
    return 1 if args.check and (stale or differing) else 0


if __name__ == "__main__":
    sys.exit(main())
