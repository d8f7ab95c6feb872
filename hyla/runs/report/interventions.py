"""The report's intervention numbers, from `hyla interventions --out`'s JSON: the calibrated transfer
of the patch, its controls and references, the verdicts, and the superseded symmetric score."""

from __future__ import annotations

from hyla.analysis.tables import mean_se_text
from hyla.runs.report import files
from hyla.runs.report.cells import label, number, pm, seeds_text
from hyla.runs.report.files import SRAVEN_MIXERS, read_json


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
        n[name] = mean_se_text((row["patched"]["mean"], row["patched"]["se"]))
        n[f"{name}_leak"] = f"{row['query_side']['mean']:.2f}"
        n[f"{name}_shuffled"] = f"{row['shuffled_heads']['mean']:.2f}"
        n[f"{name}_constant"] = f"{ood['reference']['constant']['mean']:.2f}"
        n[f"{name}_random"] = f"{ood['reference'][reference]['mean']:.2f}"
    return n


def calibrated(cell: dict) -> str:
    """A condition's 'mean ± s.e.' of the calibrated transfer, a true minus sign."""
    return mean_se_text((cell["mean"], cell["se"]), true_minus=True)


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
    n["iv20m_rows"] = sraven_intervention_rows(n, "interventions_table_a1_raven_20m_cpu", "iv20m", "20M examples")
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
    n["ivv_s20m_rows"] = verdict_rows(n, "s20m", "SRAVEN 20M examples")
    return n


def verdict_rows(n: dict[str, str], tag: str, models: str) -> str:
    """The verdicts table's rows of the set `tag` from `intervention_verdicts`' cells `n`, one per mixer
    in SRAVEN_MIXERS' order: `{models}, {seeds}`, the mixer, the patch, the constant and the verdict."""
    report = read_json(f"{INTERVENTION_SETS[tag]}/interventions_tasks16_samples32_seed0.json")
    groups = {group["mixer"]: group for group in report["groups"]}
    rows = []
    for mixer in [m for m in SRAVEN_MIXERS if m in groups]:
        name, seeds = f"ivv_{tag}_{mixer}", seeds_text(group_seeds(report, groups[mixer]))
        cells = " | ".join(n[f"{name}_{cell}"] for cell in ("mean", "median", "constant", "verdict"))
        rows.append(f"| {models}, {seeds} | {label(mixer)} | {cells} |")
    return "\n".join(rows)


def group_seeds(report: dict, group: dict) -> list[int]:
    """The seeds of a group's models in `hyla interventions`' report."""
    seeds = {model["model"]["label"]: model["model"]["seed"] for model in report["models"]}
    return sorted(seeds[name] for name in group["models"])


def sraven_model_interventions(folder: str, prefix: str) -> dict[str, str]:
    """Per mixer of `hyla interventions --out folder` on SRAVEN (mean ± s.e. over its models, or over
    queries for one), OOD split, row site: every condition and reference at all layers
    (`{prefix}_{mixer}_{patched,leak,...}`), the best single layer's patch (`{prefix}_{mixer}_best`), and
    the models' seeds (`{prefix}_{mixer}_seeds`)."""
    n = {}
    report = read_json(f"{folder}/interventions_tasks16_samples32_seed0.json")
    for group in report["groups"]:
        name, ood = f"{prefix}_{group['mixer']}", group["splits"]["ood"]
        n.update({f"{name}_{k}": calibrated(v) for k, v in intervention_cells(ood).items()})
        layers = {k: v["patched"] for k, v in ood["sites"]["row"].items() if k != "all layers"}
        best = max(layers, key=lambda k: layers[k]["mean"])
        n[f"{name}_best"] = f"{calibrated(layers[best])} ({best})"
        n[f"{name}_seeds"] = seeds_text(group_seeds(report, group))
    return n


def sraven_intervention_rows(n: dict[str, str], folder: str, prefix: str, budget: str) -> str:
    """`sraven_model_interventions(folder, prefix)`' cells `n` as table rows, one per mixer in SRAVEN_MIXERS' order:
    `{label}, {budget}, {seeds}`; the patch in bold where its verdict is that it transfers."""
    from hyla.analysis.intervention_report import verdict

    rows = []
    groups = {group["mixer"]: group for group in read_json(f"{folder}/interventions_tasks16_samples32_seed0.json")["groups"]}
    for mixer in [m for m in SRAVEN_MIXERS if m in groups]:
        name = f"{prefix}_{mixer}"
        patched = n[f"{name}_patched"]
        cells = [n[f"{name}_best"], f"**{patched}**" if verdict(groups[mixer])["ood"]["transfers"] else patched]
        cells += [n[f"{name}_{k}"] for k in ("leak", "random", "shuffled", "constant", "perfect", "wrecked")]
        rows.append(f"| {label(mixer)}, {budget}, {n[f'{name}_seeds']} | {' | '.join(cells)} |")
    return "\n".join(rows)


def superseded_intervention_numbers(folder: str, prefix: str, site: str) -> dict[str, str]:
    """The symmetric score of the runs measured before the calibrated one, mean ± s.e. over the
    intervention seeds 0, 1, 2: `{prefix}_{mixer}_{split}_unpatched` and `…_{l0|l1|all}` (patched /
    random task / shuffled heads)."""
    n = {}
    for run in sorted(p.name for p in (files.RESULTS / folder).iterdir()):
        reports = [read_json(f"{folder}/{run}/interventions_tasks16_samples32_seed{s}.json") for s in (0, 1, 2)]
        for split in ("valid", "ood"):
            name = f"{prefix}_{run.removesuffix('_s0')}_{split}"
            n[f"{name}_unpatched"] = pm([f["splits"][split]["reference"]["unpatched"]["transfer"] for f in reports], 2)
            for layer, tag in (("layer 0", "l0"), ("layer 1", "l1"), ("all layers", "all")):
                conditions = [
                    [f["splits"][split]["sites"][site][layer][c]["transfer"] for f in reports] for c in CONDITIONS
                ]
                n[f"{name}_{tag}"] = " / ".join(pm(values, 2) for values in conditions)
    return n


CONDITIONS = ("patched", "random_task", "shuffled_heads")


def numbers() -> dict[str, str]:
    """Every intervention number of the report, by name: README's (`iv_*` on SRAVEN, `ivf_*` on fuzzy
    logic) and those of RESULTS.md's sections."""
    fuzzy = "interventions_weights_logic_50k_cpu/interventions_tasks16_samples32_seed0.json"
    return {
        **intervention_numbers("interventions_weights_raven_cpu/interventions_tasks16_samples32_seed0.json"),
        **intervention_numbers(fuzzy, prefix="ivf", reference="random_task"),
        **intervention_sections(),
    }
