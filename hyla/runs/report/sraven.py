"""The report's SRAVEN numbers at the quarter budget (40k steps) on the CPU and GPUs, the authors'
code, and `raven_cpu` (the first sweep, the retrained models, one head against 16)."""

from __future__ import annotations

from hyla.analysis.tables import mean_se
from hyla.runs.report.cells import minutes, number, paper, pm, pm_pair, run_numbers
from hyla.runs.report.files import (
    MIXERS,
    at_step,
    final,
    mixer_and_heads,
    mixer_row,
    read_json,
    read_jsonl,
    records_in,
    run_folders,
    seed_values,
    train_loss,
)
from hyla.runs.report.latent import chance_range, latent_code_numbers


def last_ood_acc(jsonl: str) -> float:
    return 100 * [r for r in read_jsonl(jsonl) if r.get("split") == "ood"][-1]["acc"]


def sraven_numbers() -> dict[str, str]:
    """SRAVEN 40k on the CPU (`r40_*`) and GPUs (`gpu_*`, `masks_30k`), the authors' code, the
    paper's, `raven_cpu` retrained with kept weights, its rule probes by layer (`rprobe*`, Fig. 5A/F), those
    of the 4-feature SRAVEN 40k models (`s40probe*`) and Fig. 5C (`heads*`)."""
    r40, gpu, raven_cpu = (
        seed_values(records_in(folder), mixer_row, final("ood", "acc"))
        for folder in ("table_a1_raven_40k_cpu", "table_a1_raven_40k_gpu", "weights_raven_cpu")
    )
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
    n["paper_raven_hyla_identity_2"] = paper(("sraven", "hyla_identity", False), 2)  # the nonlinearity's row
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
    at_30k = seed_values(records_in("table_a1_raven_40k_cpu"), mixer_row, at_step("ood", "acc", 30000))
    n["cpu_30k"] = pm(at_30k["hyla"], 2)
    return n


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

    fig5c = records_in("fig5c_raven_single_head_cpu")
    n.update(run_numbers("heads", fig5c, SRAVEN_COLUMNS, lambda record: "{}_h{}".format(*mixer_and_heads(record))))
    return n


def numbers() -> dict[str, str]:
    """Every SRAVEN number of the report at the quarter budget and on `raven_cpu`, by name."""
    return {**sraven_numbers(), **sraven_40k_sections(), **sraven_cpu_sections()}
