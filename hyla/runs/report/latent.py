"""The report's latent-code numbers, from `hyla analyze --out`'s summaries and analyses: topographic
similarity, the held-out rule and term probes by layer, and Fig. 5E's addition-subtraction similarity."""

from __future__ import annotations

import json

from hyla.analysis.tables import mean_se, mean_se_text
from hyla.runs.report import files
from hyla.runs.report.cells import label, number, over_models, per_model, seeds_text
from hyla.runs.report.files import SRAVEN_MIXERS, final, read_json, records_in, summary_rows


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
    """Per mixer analyzed (`rule_probe_values`), the mean over its seeds: the final OOD panel accuracy
    ×100 (`{prefix}_{mixer}_acc`), the held-out rule probe's accuracy and chance per code set
    (`{prefix}_{mixer}_{l0,..,all}`, `..._chance`) and the topographic similarity
    (`{prefix}_{mixer}_ts_{l0,..,all}`)."""
    return {
        f"{prefix}_{mixer}_{tag}": number(mean_se(values)[0], probe_digits(tag))
        for mixer, (_, by_tag) in rule_probe_values(folder, runs).items()
        for tag, values in by_tag.items()
    }


def rule_probe_rows(folder: str, runs: str, budget: str) -> str:
    """The table rows of `rule_probe_values`, one per mixer: `{label}, {budget}, {seeds} (OOD acc)`, the
    probe's accuracy (chance) per layer and over all layers, and the topographic similarity per layer;
    each value's mean ± s.e. over the seeds (chance: the mean)."""
    rows = []
    for mixer, (seeds, values) in rule_probe_values(folder, runs).items():

        def cell(tag: str) -> str:
            return mean_se_text(mean_se(values[tag]), digits=f".{probe_digits(tag)}f", true_minus=True)

        layers = [tag for tag in values if tag[0] == "l" and not tag.endswith("_chance")]
        probes = " | ".join(f"{cell(tag)} ({number(mean_se(values[f'{tag}_chance'])[0], 3)})" for tag in [*layers, "all"])
        ts = " / ".join(cell(f"ts_{tag}") for tag in layers)
        rows.append(f"| {label(mixer)}, {budget}, {seeds_text(seeds)} ({cell('acc')}%) | {probes} | {ts} |")
    return "\n".join(rows)


def rule_probe_values(folder: str, runs: str) -> dict[str, tuple[list[int], dict[str, list[float]]]]:
    """{mixer: (its seeds, {tag: a value per seed})} of the SRAVEN models (`mixer-<mixer>__s<seed>`)
    that `hyla analyze --out folder` analyzed, their records in `runs`: `acc`, the final OOD panel
    accuracy ×100; `l0`.. and `all`, the held-out rule probe's accuracy per code set, `..._chance`
    its chance level; `ts_l0`.., the topographic similarity. Mixers not analyzed (yet) are left out."""
    probe, out = "valid_unpermuted->ood_unpermuted", {}
    accuracy = {(r["config"]["model"]["mixer"], r["config"]["seed"]): final("ood", "acc")(r) for r in records_in(runs)}
    for mixer in SRAVEN_MIXERS:
        analyses = analyses_by_seed(folder, mixer)
        if not analyses:
            continue
        values = {"acc": [accuracy[(mixer, seed)] for seed in analyses]}
        for analysis in analyses.values():
            for code_set, result in analysis["probes"][probe].items():
                values.setdefault(code_tag(code_set), []).append(result["accuracy"])
                values.setdefault(f"{code_tag(code_set)}_chance", []).append(result["chance_accuracy"])
            for code_set, result in analysis["topographic_similarity"]["ood_unpermuted"].items():
                values.setdefault(f"ts_{code_tag(code_set)}", []).append(result["spearman"])
        out[mixer] = (list(analyses), values)
    return out


def probe_digits(tag: str) -> int:
    """Decimals of a `rule_probe_values` tag: accuracy ×100 1, topographic similarity 2, probes 3."""
    return 1 if tag == "acc" else 2 if tag.startswith("ts_") else 3


def analyses_by_seed(folder: str, mixer: str) -> dict[int, dict]:
    """{seed: its analysis.json} of the models `mixer-<mixer>__s<seed>` that `hyla analyze --out folder`
    analyzed (one analysis each), by seed."""
    by_seed = {}
    for model in sorted((files.RESULTS / folder).glob(f"mixer-{mixer}__s*")):
        [path] = model.glob("*/analysis.json")
        by_seed[int(model.name.rsplit("__s", 1)[1])] = json.loads(path.read_text())
    return dict(sorted(by_seed.items()))


def code_tag(code_set: str) -> str:
    """'layer 2' → 'l2', 'all layers' → 'all'."""
    return code_set.replace("layer ", "l").replace("all layers", "all")


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
    pairs (permutation p = 1/28); over several models of a mixer, the cosine's mean ± s.e., the other
    pair's mean and in how many it is the most similar, bold where in every one."""
    n = {}
    for code_set, tag in [*((f"layer {i}", f"l{i}") for i in range(4)), ("all layers", "all")]:
        for mixer, row in addition_subtraction_rows(folder, code_set).items():
            other, models = number(row["baselines"]["most similar other pair"], 3), len(row["per_model"])
            cosine = number(row["mean"], 3) if models == 1 else over_models(row, 3)
            cell = f"{cosine} / {other}" if models == 1 else f"{cosine} / {other}, {row['passes']}"
            n[f"{prefix}_{mixer}_{tag}"] = f"**{cell}**" if row["passes"] == f"{models} of {models}" else cell
    return n


def addition_subtraction_table(folder: str, budget: str) -> str:
    """`addition_subtraction`'s cells as table rows, one per mixer analyzed: `{label}, {budget}, {seeds}`."""
    cells, rows = addition_subtraction(folder, "as"), []
    for mixer, row in addition_subtraction_rows(folder, "all layers").items():
        seeds = seeds_text(sorted(model["seed"] for model in row["per_model"]))
        by_layer = " | ".join(cells[f"as_{mixer}_{tag}"] for tag in ("l0", "l1", "l2", "l3", "all"))
        rows.append(f"| {label(mixer)}, {budget}, {seeds} | {by_layer} |")
    return "\n".join(rows)


def addition_subtraction_rows(folder: str, code_set: str) -> dict[str, dict]:
    """{mixer: its summary row} of the addition-subtraction similarity on held-out tasks, in
    SRAVEN_MIXERS' order."""
    measure = "addition-subtraction similarity (centered cosine)"
    rows = summary_rows(f"{folder}/latent_summary.json", measure, "ood_unpermuted", code_set)
    return {mixer: rows[mixer] for mixer in SRAVEN_MIXERS if mixer in rows}


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
        "as20m_rows": addition_subtraction_table("latent_table_a1_raven_20m_cpu", "20M examples"),
        "s20m_rows": rule_probe_rows("latent_table_a1_raven_20m_cpu", "table_a1_raven_20m_cpu", "20M examples"),
    }
