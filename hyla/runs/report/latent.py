"""The report's latent-code numbers, from `hyla analyze --out`'s summaries and analyses: topographic
similarity, the held-out rule and term probes by layer, and Fig. 5E's addition-subtraction similarity."""

from __future__ import annotations

import json

from hyla.analysis.tables import mean_se_text
from hyla.runs.report import files
from hyla.runs.report.cells import number, over_models, per_model
from hyla.runs.report.files import MIXERS, final, read_json, records_in, summary_rows


def latent_code_numbers(
    file: str, prefix: str, measure: str, split: str, code_set: str, test: str | None
) -> dict[str, str]:
    """One measure of `hyla analyze --out`'s summary per mixer, `{prefix}_{mixer}`: mean ± s.e. over the
    retrained models (over those where it is defined, and then how many), with how many pass the
    measure's `test` where one is named; `{prefix}_passes`: how many pass over all mixers."""
    n, passed, models = {}, 0, 0
    for row in read_json(file)["summary"]:
        if (row["measure"], row["split"], row["code_set"]) == (measure, split, code_set):
            value = mean_se_text((row["mean"], row["se"]))
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
        paths = list((files.RESULTS / folder).glob(f"mixer-{mixer}__s0/*/analysis.json"))
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
        for path in (files.RESULTS / folder).glob(f"mixer-{mixer}__s*/*/analysis.json")
    ]
    return f"{min(chances):.2f}–{max(chances):.2f}"


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


def numbers() -> dict[str, str]:
    """Every latent-code number of the report's sections, by name."""
    return {
        **latent_code_sections(),
        **addition_subtraction("latent_weights_sraven_40k_cpu", "as40"),
        **addition_subtraction("latent_table_a1_raven_20m_cpu", "as20m"),
        **addition_subtraction_over_seeds("latent_weights_raven_cpu", "asr"),
    }
