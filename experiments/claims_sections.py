"""The numbers of RESULTS.md's section tables, read from the committed files, and the readers and
formats that experiments/claims.py shares with them.

Every file is read below `RESULTS` (experiments/results/) or `BENCHMARKS` (benchmarks/results/),
through `read_json`, `read_jsonl` and `records_in`, so that a test can point them at a copy.
Names follow one scheme: `{prefix}_{row}_{column}` is a row's mean ± s.e. over its seeds,
`…_{column}_mean` the mean alone, `…_{column}_seeds` the seeds' values in order ("a / b / c"),
`{prefix}_{row}_s{seed}_{column}` one seed's value and `{prefix}_{row}_n` the number of seeds.
"""

from __future__ import annotations

import json
import math
import re
from collections import defaultdict
from pathlib import Path

from hyla.experiments import records
from hyla.experiments.paper import TABLE_A1
from hyla.experiments.result_tables import mean_se

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "experiments" / "results"
BENCHMARKS = ROOT / "benchmarks" / "results"
MIXERS = ("hyla", "linear", "softmax")


# ----------------------------------------------------------------------------- reading the files
def read_json(path: str, root: str = "results"):
    return json.loads(((RESULTS if root == "results" else BENCHMARKS) / path).read_text())


def read_jsonl(path: str) -> list[dict]:
    return [json.loads(line) for line in (RESULTS / path).read_text().splitlines() if line.strip()]


def records_in(folder: str) -> list[dict]:
    """The run records below experiments/results/<folder>/records."""
    return [records.read(path) for path in records.find(RESULTS / folder / "records")]


def run_folders(folder: str) -> list[dict]:
    """Run folders kept whole below experiments/results/<folder>, read as records."""
    return [
        {
            "config": read_json(f"{folder}/{run}/config.json"),
            "summary": read_json(f"{folder}/{run}/summary.json"),
            "metrics": read_jsonl(f"{folder}/{run}/metrics.jsonl"),
        }
        for run in sorted(p.name for p in (RESULTS / folder).iterdir() if (p / "summary.json").is_file())
    ]


def mixer_row(record: dict) -> str:
    """A record's row: its mixer, `_moe` added for a mixture of experts."""
    model = record["config"]["model"]
    return model["mixer"] + ("_moe" if model.get("num_experts") else "")


def final(split: str, metric: str, scale: float = 100):
    return lambda record: scale * record["summary"]["final"][split][metric]


def train_loss(scale: float = 1):
    return lambda record: scale * record["summary"]["train_loss"]


def at_step(split: str, metric: str, step: int, scale: float = 100):
    """A metric of the row of `split` at `step` in a record's metrics (training rows: the logged mean)."""

    def get(record: dict) -> float:
        [row] = [r for r in record["metrics"] if r["split"] == split and r["step"] == step]
        return scale * row[metric]

    return get


# ----------------------------------------------------------------------------- formats
def number(x: float, digits: int = 2, sign: bool = False) -> str:
    """x to `digits` decimals, with a minus sign (and a plus with `sign`)."""
    return f"{x:{'+' if sign else ''}.{digits}f}".replace("-", "−")


def pm(values, digits: int = 1, sign: bool = False) -> str:
    """'mean ± s.e.' of a list of values."""
    mean, se = mean_se(list(values))
    return number(mean, digits, sign) + ("" if se is None else f" ± {se:.{digits}f}")


def mean(values, digits: int = 1) -> str:
    return number(mean_se(list(values))[0], digits)


def signed(x: float) -> str:
    return number(x, 2, sign=True)


def paper(row: tuple, digits: int = 1, error: bool = True) -> str:
    value, se = TABLE_A1[row[0]][row[1:]]
    return f"{value:.{digits}f} ± {se:.{digits}f}" if error else f"{value:.{digits}f}"


def minutes(seconds: float) -> str:
    """'42 min', or '3 h 25 min' from an hour on."""
    total = round(seconds / 60)
    return f"{total} min" if total < 60 else f"{total // 60} h {total % 60:02d} min"


# ----------------------------------------------------------------------------- runs into numbers
def run_numbers(prefix: str, runs: list[dict], columns: dict, row=mixer_row) -> dict[str, str]:
    """The numbers of the runs' groups (by `row`), per column: {name: (getter, digits, sign)}."""
    groups: dict[str, dict[int, dict]] = defaultdict(dict)
    for record in runs:
        groups[row(record)][record["config"]["seed"]] = record
    n = {}
    for name, seeds in groups.items():
        n[f"{prefix}_{name}_n"] = str(len(seeds))
        for column, (get, digits, sign) in columns.items():
            values = {seed: get(record) for seed, record in sorted(seeds.items())}
            for seed, value in values.items():
                n[f"{prefix}_{name}_s{seed}_{column}"] = number(value, digits, sign)
            n[f"{prefix}_{name}_{column}"] = pm(values.values(), digits, sign)
            n[f"{prefix}_{name}_{column}_mean"] = number(mean_se(list(values.values()))[0], digits, sign)
            n[f"{prefix}_{name}_{column}_seeds"] = " / ".join(number(v, digits, sign) for v in values.values())
    return n


FUZZY_COLUMNS = {
    "ood": (final("ood", "r2"), 2, False),
    "valid": (final("valid", "r2"), 2, False),
    "novel": (final("novel_terms", "r2"), 2, False),
}
SRAVEN_COLUMNS = {
    "ood": (final("ood", "acc"), 2, False),
    "valid": (final("valid", "acc"), 2, False),
    "oodf": (final("ood", "feature_acc"), 2, False),
    "validf": (final("valid", "feature_acc"), 2, False),
    "loss": (train_loss(), 3, False),
}
SRAVEN_40K_STEPS = {
    "ood10k": (at_step("ood", "acc", 10000), 2, False),
    "ood30k": (at_step("ood", "acc", 30000), 2, False),
    "loss30k": (at_step("train", "loss", 30000, 1), 3, False),
}


def section_numbers() -> dict[str, str]:
    """Every number of RESULTS.md's section tables, by name (the `{name}`s of claims_tables.md)."""
    return {
        **fuzzy_logic_sections(),
        **sraven_40k_sections(),
        **sraven_20m_layout_sections(),
        **sraven_20m_sections(),
        **sraven_20m_progress_sections(),
        **sraven_cpu_sections(),
        **latent_code_sections(),
        **addition_subtraction("latent_weights_sraven_40k_cpu", "as40"),
        **addition_subtraction("latent_table_a1_raven_20m_cpu", "as20m"),
        **addition_subtraction_over_seeds("latent_weights_raven_cpu", "asr"),
        **intervention_sections(),
        **other_sections(),
        **gpu_speed_sections(),
    }


# ----------------------------------------------------------------------------- fuzzy logic
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
    for (mixer, moe), (value, se) in TABLE_A1["fuzzy_logic"].items():
        n[f"paper_{mixer}{'_moe' if moe else ''}_pm2"] = f"{value:.2f} ± {se:.2f}"
    columns = {**FUZZY_COLUMNS, "novel": (final("novel_terms", "r2"), 2, True), "loss": (train_loss(), 5, False)}

    def held_out(record: dict) -> str:
        return f"{record['config']['model']['mixer']}_{round(100 * record['config']['fuzzy_logic']['frac_held_out'])}"

    n.update(run_numbers("fc", records_in("fig2c_logic_50k_cpu"), columns, held_out))
    return n


# ----------------------------------------------------------------------------- SRAVEN, 4 features, 40k steps
def sraven_40k_sections() -> dict[str, str]:
    """SRAVEN Table A1 at 40k steps: on the CPU (`c40_*`, along training `c40curve_*`), on GPUs
    (`g40_*`; compiled HYLA `g40c_*`; with the CPU's masks on an H100 `h100_*`), the authors' code
    (`authors_*`) and the retrained seed-0 runs against their records (`w40_*`)."""
    cpu = records_in("table_a1_raven_40k_cpu")
    n = run_numbers("c40", cpu, {**SRAVEN_COLUMNS, **SRAVEN_40K_STEPS})
    n.update(run_numbers("g40", records_in("table_a1_raven_40k_gpu"), {**SRAVEN_COLUMNS, **SRAVEN_40K_STEPS}))
    n.update(run_numbers("g40c", records_in("raven_40k_gpu_hyla_compiled"), SRAVEN_COLUMNS))
    n.update(run_numbers("h100", run_folders("raven_hyla_cuda_cpu_masks_h100"), SRAVEN_40K_STEPS))
    n.update(curve_numbers(cpu))
    for mixer in MIXERS:
        rows = read_jsonl(f"authors_curve_raven_40k/authors_gpu_{mixer}_s0.jsonl")
        last = {r["split"]: r for r in rows if r.get("split")}
        n[f"authors_{mixer}_valid"] = number(100 * last["test"]["acc"])
        n[f"authors_{mixer}_feat"] = number(100 * last["ood"]["acc_per_feature"])
        n[f"authors_{mixer}_loss"] = number([r for r in rows if "train_loss" in r][-1]["train_loss"], 3)
    retrained = {record["config"]["model"]["mixer"]: record for record in records_in("weights_sraven_40k_cpu")}
    recorded = {mixer_row(r): r for r in cpu if r["config"]["seed"] == 0}
    for mixer, record in retrained.items():
        name = f"w40_{mixer}"
        for split in ("ood", "valid"):
            n[f"{name}_{split}"] = number(final(split, "acc")(record))
        n[f"{name}_loss"] = number(record["summary"]["train_loss"], 3)
        n[f"{name}_time"] = minutes(record["summary"]["wall_time_s"])
        n[f"{name}_rows"] = rows_compared(record["metrics"], recorded[mixer]["metrics"])
    return n


SRAVEN_20M_LAYOUTS = {
    # layout: the bench_training.py outputs measured at once (benchmarks/results/sraven_layout_2cores/)
    "one": ["a_2threads.json"],
    "two": ["b_softmax.json", "b_linear.json"],
    "three": ["c_softmax.json", "c_linear.json", "c_hyla.json"],
}


def sraven_20m_layout_sections() -> dict[str, str]:
    """The layouts measured for the three full-budget SRAVEN runs on 2 cores: each run's steps/s
    (`lay_{layout}_{mixer}`), the run-steps/s of the layout (`lay_{layout}_rate`: the runs at once
    added up; one at a time, three runs over the sum of their times) and the three runs' 156,250 steps
    each at that rate (`lay_{layout}_hours`). HYLA alone on one thread: `lay_two_hyla`."""
    n = {}
    for layout, files in SRAVEN_20M_LAYOUTS.items():
        rows = [row for file in files for row in read_json(f"sraven_layout_2cores/{file}", "benchmarks")["rows"]]
        rates = {row["mixer"]: row["steps_per_second"] for row in rows}
        n.update({f"lay_{layout}_{mixer}": number(rate) for mixer, rate in rates.items()})
        together = len(rates) / sum(1 / r for r in rates.values()) if layout == "one" else sum(rates.values())
        n[f"lay_{layout}_rate"] = number(together)
        n[f"lay_{layout}_hours"] = f"{3 * 156_250 / together / 3600:.1f} h"
    alone = read_json("sraven_layout_2cores/b_hyla_alone.json", "benchmarks")["rows"][0]
    n["lay_two_hyla"] = number(alone["steps_per_second"])
    return n


def sraven_20m_sections() -> dict[str, str]:
    """The SRAVEN runs at the paper's budget, seed 0, at the latest evaluation all three reached (the
    final one once all three have completed; a completed run's record replaces its progress record):
    `r20m`, one phrase of the three OOD panel accuracies ×100 ± binomial s.e. (once completed, with their
    order); per mixer
    `r20m_{mixer}_{ood,valid,loss}`, `r20m_{mixer}_vs_paper` (once completed: OOD less the paper's
    mean, and the standard deviation of the paper's 3 seeds), `r20m_order` (the mixers' order there,
    each lead with its error) and `r20m_at` (where the runs are)."""
    from sraven_budget import full_budget_curves

    curves = {c.mixer: c for c in full_budget_curves(RESULTS) if c.seed == 0 and c.mixer in MIXERS}
    evaluated = [{step for step, _, _ in curves[m].points} for m in MIXERS if m in curves]
    common = set.intersection(*evaluated) if len(evaluated) == len(MIXERS) else set()
    if not common:
        dash = {f"r20m_{m}_{c}": "–" for m in MIXERS for c in ("ood", "valid", "loss", "vs_paper")}
        return {"r20m": "not yet evaluated", "r20m_at": "not yet evaluated", "r20m_order": "–", **dash}
    step = max(common)
    completed = all(c.completed for c in curves.values())
    n = {}
    for m, c in curves.items():
        i = [s for s, _, _ in c.points].index(step)
        _, p, tasks = c.points[i]
        n[f"r20m_{m}_ood"] = f"{number(100 * p)} ± {100 * c.standard_error(i):.2f}"
        n[f"r20m_{m}_valid"] = number(100 * c.valid[step])
        n[f"r20m_{m}_loss"] = number(c.train_loss[step], 4) if step in c.train_loss else "–"
        paper_mean, paper_se = TABLE_A1["sraven"][(m, False)]
        n[f"r20m_{m}_vs_paper"] = (  # against the spread of the paper's seeds: s.d. = s.e. × √3
            f"{number(100 * p - paper_mean, 1, sign=True)} ({paper_se * math.sqrt(3):.1f})" if completed else "–"
        )
    values = ", ".join(f"{'HYLA' if m == 'hyla' else m} {n[f'r20m_{m}_ood']}" for m in ("softmax", "linear", "hyla"))
    n["r20m_order"] = order_at(list(curves.values()), step)
    hyla = curves["hyla"]
    examples = f"{step * hyla.batch_size / 1e6:.2f}M examples"
    if completed:
        n["r20m"] = f"{values} ({tasks:,} OOD tasks each, ± binomial s.e.): {n['r20m_order']}"
        n["r20m_at"] = f"completed ({examples}); the final evaluation, {tasks:,} tasks per split"
    else:
        n["r20m"] = f"under way; at {examples} (step {step:,}), {values} ({tasks:,} OOD tasks each)"
        n["r20m_at"] = (
            f"under way; the latest evaluation all three reached: step {step:,} of {hyla.total_steps:,} "
            f"({examples}), {tasks:,} tasks per split"
        )
    return n


def order_at(curves: list, step: int) -> str:
    """The mixers by OOD accuracy at `step`, and each one's lead over the next ×100 ± the standard
    error of that difference (the two binomial s.e. combined), beyond or within twice it:
    'HYLA > linear > softmax; HYLA − linear +0.51 ± 0.99 (within 2 s.e.), linear − softmax ...'."""
    at = []  # (accuracy, s.e., name)
    for c in curves:
        i = [s for s, _, _ in c.points].index(step)
        at.append((c.points[i][1], c.standard_error(i), "HYLA" if c.mixer == "hyla" else c.mixer))
    at.sort(reverse=True)
    leads = []
    for (p, se, name), (q, se_next, next_name) in zip(at, at[1:]):
        lead, error = 100 * (p - q), 100 * math.hypot(se, se_next)
        clear = "beyond" if lead > 2 * error else "within"
        leads.append(f"{name} − {next_name} {number(lead, sign=True)} ± {error:.2f} ({clear} 2 s.e.)")
    return " > ".join(name for _, _, name in at) + "; " + ", ".join(leads)


def sraven_20m_progress_sections() -> dict[str, str]:
    """How far each paper-budget run is, from its record: `r20m_progress_rows`, one table row per run
    (mixer, seed): the last step logged, each session (start, commit, steps, pace) and the hours of
    compute to its end (the runs sharing the machine at their latest stretch's pace), or "completed"."""
    from sraven_budget import full_budget_curves, hours_left, label, paired_table, seed_table

    curves = full_budget_curves(RESULTS)
    rows = []
    for c, left in zip(curves, hours_left(curves)):
        stretches = "; ".join(
            f"{s.started} `{s.commit}`: {s.from_step:,} → {s.to_step:,}"
            + ("" if s.steps_per_second is None else f" at {s.steps_per_second:.2f}")
            for s in c.stretches
        )
        hours = "completed" if c.completed else "–" if left is None else f"{left:.1f} h"
        rows.append(f"| {label(c.mixer)} | {c.seed} | {c.last_step:,} | {stretches} | {hours} |")
    return {
        "r20m_progress_rows": "\n".join(rows),
        "r20m_seeds": seed_table(curves),
        "r20m_paired": paired_table(curves),
    }


def curve_numbers(runs: list[dict]) -> dict[str, str]:
    """Mean OOD panel accuracy ×100 over the seeds at 5k, 10k, …, 40k steps per mixer, and HYLA's
    difference to softmax and to linear."""
    curve = {}
    for mixer in MIXERS:
        seeds = [r for r in runs if r["config"]["model"]["mixer"] == mixer]
        for step in range(5000, 40001, 5000):
            curve[mixer, step] = mean_se([at_step("ood", "acc", step)(r) for r in seeds])[0]
    n = {f"c40curve_{m}_{step // 1000}k": number(value, 1) for (m, step), value in curve.items()}
    for other in ("softmax", "linear"):
        for step in range(5000, 40001, 5000):
            n[f"c40curve_hyla_minus_{other}_{step // 1000}k"] = number(
                curve["hyla", step] - curve[other, step], 1, sign=True
            )
    return n


TIMINGS = ("steps_per_second", "wall_time_s", "time")


def rows_compared(retrained: list[dict], recorded: list[dict]) -> str:
    """'all N: bit-identical' where every metric row (timings stripped) is equal, else the first
    step where they differ."""

    def strip(rows):
        return [{k: v for k, v in row.items() if k not in TIMINGS} for row in rows]

    a, b = strip(retrained), strip(recorded)
    if a == b:
        return f"all {len(a)}: bit-identical"
    step = next(x["step"] for x, y in zip(a, b) if x != y)
    return f"from step {step:,} on they differ in the rounding digits"


# ----------------------------------------------------------------------------- SRAVEN at the CPU budget
def sraven_cpu_sections() -> dict[str, str]:
    """`raven_cpu`: the first sweep's means (`rc_*`), its transcribed seeds against the retrained runs
    (`wr_*`) and one head against 16 (`heads_*`)."""
    n = {}
    for row in read_json("table_a1_raven_cpu/results.json"):
        name, values = f"rc_{row['group']['model.mixer']}", row["values"]
        for column, key in (("valid", "valid/acc"), ("ood", "ood/acc"), ("validf", "valid/feature_acc")):
            n[f"{name}_{column}"] = pm_pair(values[key], 100, 1)
        n[f"{name}_oodf"] = pm_pair(values["ood/feature_acc"], 100, 1)
        n[f"{name}_loss"] = number(values["train_loss"][0], 3)
    old = {
        (run["config"]["model"]["mixer"], run["config"]["seed"]): run["summary"]["final"]
        for run in read_json("table_a1_raven_cpu/transcribed_runs.json")["runs"]
    }
    weights = records_in("weights_raven_cpu")
    n.update(run_numbers("wr", weights, {**SRAVEN_COLUMNS, "wall": (lambda r: r["summary"]["wall_time_s"], 0, False)}))
    for record in weights:
        mixer, seed = record["config"]["model"]["mixer"], record["config"]["seed"]
        then = old[mixer, seed]
        name = f"wr_{mixer}_s{seed}"
        n[f"{name}_old"] = f"{100 * then['valid']['acc']:.1f} / {100 * then['ood']['acc']:.1f}"
        n[f"{name}_change"] = number(100 * (record["summary"]["final"]["ood"]["acc"] - then["ood"]["acc"]), 1, True)
        n[f"{name}_minutes"] = minutes(record["summary"]["wall_time_s"])

    def heads(record: dict) -> str:
        return f"{record['config']['model']['mixer']}_h{record['config']['model']['num_heads']}"

    n.update(run_numbers("heads", records_in("fig5c_raven_single_head_cpu"), SRAVEN_COLUMNS, heads))
    return n


def pm_pair(value: list, scale: float, digits: int) -> str:
    """'mean ± s.e.' of a [mean, s.e.] pair that `hyla results` wrote."""
    return f"{number(scale * value[0], digits)} ± {scale * value[1]:.{digits}f}"


# ----------------------------------------------------------------------------- latent codes
def summary_rows(file: str, measure: str, split: str, code_set: str) -> dict[str, dict]:
    """{mixer: its row of `hyla analyze --out`'s summary} for one measure, split and code set."""
    return {
        row["mixer"]: row
        for row in read_json(file)["summary"]
        if (row["measure"], row["split"], row["code_set"]) == (measure, split, code_set)
    }


def addition_subtraction(folder: str, prefix: str) -> dict[str, str]:
    """Fig. 5E from `hyla analyze --out folder` on 4-layer SRAVEN models, held-out tasks
    (`{prefix}_{mixer}_{l0..l3,all}`): the centered cosine of addition's and subtraction's mean codes /
    the most similar other rule pair, bold where (addition, subtraction) is the most similar of the 28
    pairs (permutation p = 1/28)."""
    n = {}
    file = f"{folder}/latent_summary.json"
    measure = "addition-subtraction similarity (centered cosine)"
    for code_set, tag in [*((f"layer {i}", f"l{i}") for i in range(4)), ("all layers", "all")]:
        for mixer, row in summary_rows(file, measure, "ood_unpermuted", code_set).items():
            cell = f"{number(row['mean'], 3)} / {number(row['baselines']['most similar other pair'], 3)}"
            n[f"{prefix}_{mixer}_{tag}"] = f"**{cell}**" if row["passes"].startswith("1 ") else cell
    return n


def addition_subtraction_over_seeds(folder: str, prefix: str) -> dict[str, str]:
    """Fig. 5E from `hyla analyze --out folder` on several seeds of 2-layer SRAVEN models
    (`{prefix}_{mixer}_{valid,ood}_{l0,l1,all}`): the centered cosine of addition's and subtraction's
    mean codes, mean ± s.e. over the models, and in how many it is the most similar of the 28 rule
    pairs (permutation p = 1/28; alone: `..._passes`); bold where it is in every model."""
    n = {}
    file = f"{folder}/latent_summary.json"
    measure = "addition-subtraction similarity (centered cosine)"
    for split in ("valid", "ood"):
        for code_set, tag in (("layer 0", "l0"), ("layer 1", "l1"), ("all layers", "all")):
            for mixer, row in summary_rows(file, measure, f"{split}_unpermuted", code_set).items():
                cell, every = f"{over_models(row)}, {row['passes']}", len(row["per_model"])
                n[f"{prefix}_{mixer}_{split}_{tag}"] = f"**{cell}**" if row["passes"] == f"{every} of {every}" else cell
                n[f"{prefix}_{mixer}_{split}_{tag}_passes"] = row["passes"]
    return n


def over_models(row: dict, digits: int = 2) -> str:
    """A summary row's 'mean ± s.e.', and over how many models where some are undefined."""
    text = number(row["mean"], digits) + ("" if row["se"] is None else f" ± {row['se']:.{digits}f}")
    defined = sum(model["value"] is not None for model in row["per_model"])
    return text if defined == len(row["per_model"]) else f"{text} over {defined} models"


def per_model(row: dict, digits: int = 3) -> str:
    """Each model's value, in the order of the seeds: 'a / b / undefined'."""
    models = sorted(row["per_model"], key=lambda model: model["seed"])
    return " / ".join("undefined" if m["value"] is None else number(m["value"], digits) for m in models)


def latent_code_sections() -> dict[str, str]:
    """The fuzzy-logic codes (`lf_*`), the `raven_cpu` rule probes (`rl_*`) and the 4-feature SRAVEN
    models' probes by layer, at 40k steps (`s40_*`) and at the paper's budget (`s20m_*`)."""
    n = {}
    file, fixed = "latent_weights_logic_50k_cpu/latent_summary.json", "layer 1"
    cells = {
        "ood": ("topographic similarity", "ood_fixed_query"),
        "valid": ("topographic similarity", "valid_fixed_query"),
        "plain": ("topographic similarity", "ood"),
        "probe": ("held-out probe (mean_f1)", "valid_fixed_query->ood_fixed_query"),
    }
    for cell, (measure, split) in cells.items():
        for mixer, row in summary_rows(file, measure, split, fixed).items():
            n[f"lf_{mixer}_{cell}"], n[f"lf_{mixer}_{cell}_models"] = over_models(row), per_model(row)
            n[f"lf_{mixer}_{cell}_passes"] = row["passes"]
    file, probe = "latent_weights_raven_cpu/latent_summary.json", "valid_unpermuted->ood_unpermuted"
    for layer in (0, 1):
        for mixer, row in summary_rows(file, "held-out probe (accuracy)", probe, f"layer {layer}").items():
            n[f"rl_{mixer}_probe{layer}"], n[f"rl_{mixer}_probe{layer}_models"] = over_models(row), per_model(row)
            n[f"rl_{mixer}_probe{layer}_chance"] = chance_range("latent_weights_raven_cpu", probe, layer, mixer)
    for mixer, row in summary_rows(file, "topographic similarity", "ood_unpermuted", "layer 1").items():
        n[f"rl_{mixer}_ts"], n[f"rl_{mixer}_ts_models"] = over_models(row), per_model(row)
    n.update(sraven_rule_probes("latent_weights_sraven_40k_cpu", "weights_sraven_40k_cpu", "s40"))
    n.update(sraven_rule_probes("latent_table_a1_raven_20m_cpu", "table_a1_raven_20m_cpu", "s20m"))
    return n


def sraven_rule_probes(folder: str, runs: str, prefix: str) -> dict[str, str]:
    """Per mixer analyzed, seed 0, from `hyla analyze --out folder` on SRAVEN models whose records are in
    `runs`: the final OOD panel accuracy (`{prefix}_{mixer}_acc`), the held-out rule probe's accuracy and
    chance per code set (`{prefix}_{mixer}_{l0,..,all}`, `..._chance`) and the topographic similarity
    (`{prefix}_{mixer}_ts_{l0,..,all}`)."""
    n, probe = {}, "valid_unpermuted->ood_unpermuted"
    accuracy = {r["config"]["model"]["mixer"]: final("ood", "acc")(r) for r in records_in(runs)}
    for mixer in MIXERS:
        paths = list((RESULTS / folder).glob(f"mixer-{mixer}__s0/*/analysis.json"))
        if not paths:  # not analyzed (yet): a run still training
            continue
        [path] = paths
        analysis = json.loads(path.read_text())
        n[f"{prefix}_{mixer}_acc"] = number(accuracy[mixer], 1)
        for code_set, result in analysis["probes"][probe].items():
            tag = code_set.replace("layer ", "l").replace("all layers", "all")
            n[f"{prefix}_{mixer}_{tag}"] = number(result["accuracy"], 3)
            n[f"{prefix}_{mixer}_{tag}_chance"] = number(result["chance_accuracy"], 3)
        for code_set, result in analysis["topographic_similarity"]["ood_unpermuted"].items():
            n[f"{prefix}_{mixer}_ts_{code_set.replace('layer ', 'l').replace('all layers', 'all')}"] = number(
                result["spearman"], 2
            )
    return n


def chance_range(folder: str, split: str, layer: int, mixer: str = "*") -> str:
    """The range over the models (of one mixer) of a probe's chance level (fitted on shuffled labels)."""
    chances = [
        json.loads(path.read_text())["probes"][split][f"layer {layer}"]["chance_accuracy"]
        for path in (RESULTS / folder).glob(f"mixer-{mixer}__s*/*/analysis.json")
    ]
    return f"{min(chances):.2f}–{max(chances):.2f}"


# ----------------------------------------------------------------------------- interventions
def calibrated(cell: dict) -> str:
    return f"{number(cell['mean'])} ± {cell['se']:.2f}"


def intervention_cells(split: dict, layer: str = "all layers") -> dict[str, dict]:
    """The row site's conditions at `layer` and the references of one split of a model or group."""
    sites, reference = split["sites"]["row"][layer], split["reference"]
    return {
        "patched": sites["patched"],
        "leak": sites["query_side"],
        "random": sites["random_donor"],
        "shuffled": sites["shuffled_heads"],
        "constant": reference["constant"],
        "perfect": reference.get("random_rule") or reference["random_task"],
        "wrecked": reference["wrecked"],
    }


def intervention_sections() -> dict[str, str]:
    """The calibrated transfer: the seed-0 `raven_cpu` models (`ivr_*`), the fuzzy-logic models over
    seeds (`ivft_*`), the 4-feature SRAVEN models at 40k steps (`iv40_*`) and at the paper's budget
    (`iv20m_*`), and the superseded measure (`ivo_*`)."""
    n = {}
    for model in read_json("interventions_weights_raven_cpu/interventions_tasks16_samples32_seed0.json")["models"]:
        if model["model"]["seed"] == 0:
            name, ood = f"ivr_{model['model']['mixer']}", model["splits"]["ood"]
            n.update({f"{name}_{k}": calibrated(v) for k, v in intervention_cells(ood).items()})
            n[f"{name}_l1"] = calibrated(ood["sites"]["row"]["layer 1"]["patched"])
    file = "interventions_weights_logic_50k_cpu/interventions_tasks16_samples32_seed0.json"
    for group in read_json(file)["groups"]:
        name = f"ivft_{group['mixer']}"
        for key, cell in intervention_cells(group["splits"]["ood"]).items():
            n[f"{name}_{key}"] = calibrated(cell)
            n[f"{name}_{key}_models"] = " / ".join(number(v) for v in cell["per_model"])
    n.update(intervention_verdicts())
    n.update(sraven_model_interventions("interventions_weights_sraven_40k_cpu", "iv40"))
    n.update(sraven_model_interventions("interventions_table_a1_raven_20m_cpu", "iv20m"))
    n.update(superseded_intervention_numbers("interventions_fuzzy_50k", "ivo_logic", "row"))
    n.update(superseded_intervention_numbers("interventions_raven_cpu", "ivo_raven", "probe"))
    return n


INTERVENTION_SETS = {
    # tag: the folder of `hyla interventions --out` (seed 0, 16 tasks × 32 samples)
    "logic": "interventions_weights_logic_50k_cpu",
    "raven": "interventions_weights_raven_cpu",
    "s40": "interventions_weights_sraven_40k_cpu",
    "s20m": "interventions_table_a1_raven_20m_cpu",
}

INTERVENTION_LABELS = {"logic": "fuzzy logic", "raven": "`raven_cpu`", "s40": "SRAVEN 40k", "s20m": "SRAVEN 20M"}


def intervention_verdicts() -> dict[str, str]:
    """Per set and mixer, OOD, row site, all layers (`ivv_{tag}_{mixer}_*`): the patch's mean ± s.e.
    and median [95% CI], the constant prediction's mean and median, and the verdict of
    `hyla interventions` (`hyla.analysis.intervention_report.verdict`, the same rule)."""
    from hyla.analysis.intervention_report import verdict
    from hyla.analysis.intervention_terms import LABELS

    n, transfers, groups = {}, [], 0
    for tag, folder in INTERVENTION_SETS.items():
        for group in read_json(f"{folder}/interventions_tasks16_samples32_seed0.json")["groups"]:
            groups += 1
            name, ood = f"ivv_{tag}_{group['mixer']}", group["splits"]["ood"]
            patch, constant = ood["sites"]["row"]["all layers"]["patched"], ood["reference"]["constant"]
            low, high = patch["median_ci"]
            n[f"{name}_mean"] = calibrated(patch)
            n[f"{name}_median"] = f"{number(patch['median'])} [{number(low)}, {number(high)}]"
            n[f"{name}_constant"] = f"{number(constant['mean'])} / {number(constant['median'])}"
            v = verdict(group)["ood"]
            if v["transfers"]:
                transfers.append(f"{group['mixer']} ({INTERVENTION_LABELS[tag]})")
            n[f"{name}_verdict"] = (
                "**transfers**"
                if v["transfers"]
                else "no: reached by " + ", ".join(LABELS[b] for b in v["blockers"] if b != "patched")
            )
    n["ivv_summary"] = f"{len(transfers)} of {groups} patches transfer: {', '.join(transfers) or 'none'}"
    return n


def sraven_model_interventions(folder: str, prefix: str) -> dict[str, str]:
    """Per model (one seed per mixer) of `hyla interventions --out folder` on SRAVEN, OOD split, row
    site: every condition and reference at all layers (`{prefix}_{mixer}_{patched,leak,...}`) and the
    best single layer's patch (`{prefix}_{mixer}_best`)."""
    n = {}
    for model in read_json(f"{folder}/interventions_tasks16_samples32_seed0.json")["models"]:
        name, ood = f"{prefix}_{model['model']['mixer']}", model["splits"]["ood"]
        n.update({f"{name}_{k}": calibrated(v) for k, v in intervention_cells(ood).items()})
        layers = {k: v["patched"] for k, v in ood["sites"]["row"].items() if k != "all layers"}
        best = max(layers, key=lambda k: layers[k]["mean"])
        n[f"{name}_best"] = f"{calibrated(layers[best])} ({best})"
    return n


def superseded_intervention_numbers(folder: str, prefix: str, site: str) -> dict[str, str]:
    """The symmetric score of the runs measured before the calibrated one, mean ± s.e. over the
    intervention seeds 0, 1, 2: `{prefix}_{mixer}_{split}_unpatched` and `…_{l0|l1|all}` (patched /
    random task / shuffled heads)."""
    n = {}
    for run in sorted(p.name for p in (RESULTS / folder).iterdir()):
        files = [read_json(f"{folder}/{run}/interventions_tasks16_samples32_seed{s}.json") for s in (0, 1, 2)]
        for split in ("valid", "ood"):
            name = f"{prefix}_{run.removesuffix('_s0')}_{split}"
            n[f"{name}_unpatched"] = pm([f["splits"][split]["reference"]["unpatched"]["transfer"] for f in files], 2)
            for layer, tag in (("layer 0", "l0"), ("layer 1", "l1"), ("all layers", "all")):
                conditions = [
                    [f["splits"][split]["sites"][site][layer][c]["transfer"] for f in files] for c in CONDITIONS
                ]
                n[f"{name}_{tag}"] = " / ".join(pm(values, 2) for values in conditions)
    return n


CONDITIONS = ("patched", "random_task", "shuffled_heads")


# ----------------------------------------------------------------------------- the rest
def other_sections() -> dict[str, str]:
    """Language modeling (`lmt_*`), the learning-quality gate (`gate_*`) and the speed ledger's CPU
    measurement (`ledger_*`)."""
    n = run_numbers("lmt", records_in("lm_cpu"), {"nll": (final("valid", "nll", 1), 3, False)})
    for mixer in MIXERS:
        ppl = [r["summary"]["final"]["valid"]["ppl"] for r in records_in("lm_cpu") if mixer_row(r) == mixer]
        n[f"lmt_{mixer}_ppl"] = f"{min(ppl):.0f}–{max(ppl):.0f}"
    gate = json.loads((ROOT / "tests" / "fixtures" / "learning_quality.json").read_text())
    for preset, measured in gate["presets"].items():
        for regression, outside in measured["groups_outside"].items():
            n[f"gate_{preset}_" + re.sub(r"\W+", "_", regression)] = outside
    n["vs_cpu_rows"] = "\n".join(
        vs_authors_cpu_row(run) for run in read_json("vs_authors_cpu.json", "benchmarks")["runs"]
    )
    for row in read_json("ledger.json", "benchmarks")["rows"]:
        low, high = f"{row['ratio_min']:.2f}", f"{row['ratio_max']:.2f}"
        n[f"ledger_{row['mechanism']}_{row['preset']}_{row['mode']}"] = f"{low}x" if low == high else f"{low}–{high}x"
    return n


def vs_authors_cpu_row(run: dict) -> str:
    """One run of benchmarks/results/vs_authors_cpu.json: its commit, CPU and setting, then hyla's steps/s
    over the authors' compiled, min / median / max over its pairs, per preset."""
    setting = run["setting"]
    cells = {(row["preset"], row["variant"]): row for row in run["summary"]}
    ratios = [
        " / ".join(f"{r[k]:.2f}" for k in ("ratio_min", "ratio_median", "ratio_max"))
        if (r := cells.get((preset, "compiled")))
        else "–"
        for preset in ("logic_4var_2term", "raven_3x3_4features")
    ]
    wait = setting.get("omp_wait_policy") or "default"
    malloc = ", the malloc variables given to the authors' too" if setting.get("malloc_env") else ""
    commit = run["machine"].get("hyla_git_commit", "")
    tree = f"`{commit[:7]}`" + (" + uncommitted" if commit.endswith("-dirty") else "")
    return f"| {tree} | {run['machine']['cpu']} | OpenMP wait {wait}{malloc} | {ratios[0]} | {ratios[1]} |"


def gpu_speed_sections() -> dict[str, str]:
    """The H100's Triton benchmark, `tri_{dtype}_{implementation}_{T}`: seconds (peak MiB), `tri_speedup` the
    range of the streamed form's seconds over Triton's, and its
    side-by-side benchmark with the authors' code, `gpu_vs_{preset}_{variant}`: steps/s (ratio)."""
    n, seconds = {}, {}
    for row in read_json("triton_attention_h100.json", "benchmarks")["rows"]:
        seconds[row["dtype"], row["implementation"], row["length"]] = row["seconds"]
        name = f"tri_{row['dtype']}_{row['implementation']}_{row['length']}"
        n[name] = f"{row['seconds']:.3f} ({row['peak_mib']:,.0f})"
        n[f"tri_batch_{row['length']}"] = str(row["batch"])
    speedups = [seconds[d, "streamed", t] / s for (d, i, t), s in seconds.items() if i == "triton"]
    n["tri_speedup"] = f"{min(speedups):.1f}–{max(speedups):.1f}x"
    for preset in ("logic_4var_2term", "raven_3x3_4features"):
        [run] = read_json(f"vs_authors_gpu_{preset}.json", "benchmarks")["runs"]
        for row in run["summary"]:
            [speed], [authors] = row["hyla_steps_per_second"], row["authors_steps_per_second"]
            n[f"gpu_vs_{preset}_{row['variant']}"] = f"{speed:.1f} ({row['ratio_median']:.2f}x)"
            n[f"gpu_vs_{preset}_authors"] = f"{authors:.1f}"
    return n
