"""The paper's claims, one row each, with hyla's numbers and a verdict by one rule (`verdict`).

Each claim is a list of checks, each read from committed files (experiments/results/):

- `greater(a, b)`: mean(a) > mean(b) over seeds (independent runs): holds where the difference
  exceeds twice its standard error (the two s.e. combined), fails where it does not, and is
  undecided with fewer than 2 seeds on a side (a difference needs seeds and their spread);
- `within(values, paper)`: hyla's mean within twice the combined s.e. of the paper's Table A1 mean
  (the paper's s.e. over its 3 seeds), undecided under 2 seeds, untested without a run;
- `every_model(k, n)`: a per-model test (a probe above chance, a permutation test) passed by all
  n models: holds for k = n, fails otherwise;
- `untested(why)`: a part of the claim no committed run measures.

`verdict` turns a claim's checks into one of: reproduced (every check holds), not reproduced (none
holds, every one decided), not decided at 1 seed (none holds, some undecided), partly (some hold,
some not), not tested (nothing measured). `claim_numbers()` gives the cells of the claims table
(`pc_{claim}_{paper,hyla,verdict,budget}`) that experiments/claims.py writes into README.md and
RESULTS.md.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from hyla.analysis.tables import mean_se
from hyla.runs.paper import TABLE_A1
from hyla.runs.report.cells import MIXER_NAMES, label, over_seeds, paper
from hyla.runs.report.files import (
    MIXERS,
    final,
    mixer_and_experts,
    mixer_and_heads,
    mixer_and_held_out,
    read_json,
    records_in,
    seed_values,
    summary_rows,
)

HOLDS, FAILS, UNDECIDED, UNTESTED = "holds", "fails", "undecided", "untested"
A1_MIXERS = tuple(MIXER_NAMES)


# ----------------------------------------------------------------------------- checks and the rule
@dataclass(frozen=True)
class Check:
    outcome: str  # HOLDS | FAILS | UNDECIDED | UNTESTED
    why: str = ""  # for UNTESTED: what no committed run measures


def greater(a: list[float], b: list[float]) -> Check:
    """mean(a) > mean(b) beyond twice the s.e. of the difference (independent seeds)."""
    if len(a) < 2 or len(b) < 2:
        return Check(UNDECIDED if a and b else UNTESTED)
    (ma, sa), (mb, sb) = mean_se(a), mean_se(b)
    return Check(HOLDS if ma - mb > 2 * math.hypot(sa, sb) else FAILS)


def difference_greater(a: tuple[list, list], b: tuple[list, list]) -> Check:
    """(mean a₀ − mean a₁) > (mean b₀ − mean b₁) beyond twice the s.e. of that difference."""
    groups = [*a, *b]
    if any(len(g) < 2 for g in groups):
        return Check(UNDECIDED)
    (m0, s0), (m1, s1), (m2, s2), (m3, s3) = (mean_se(g) for g in groups)
    return Check(HOLDS if (m0 - m1) - (m2 - m3) > 2 * math.hypot(s0, s1, s2, s3) else FAILS)


def within(values: list[float], paper: tuple[float, float]) -> Check:
    """hyla's mean within twice the combined s.e. of the paper's mean."""
    if not values:
        return Check(UNTESTED, "no run")
    if len(values) < 2:
        return Check(UNDECIDED)
    mean, se = mean_se(values)
    return Check(HOLDS if abs(mean - paper[0]) <= 2 * math.hypot(se, paper[1]) else FAILS)


def every_model(passes: str) -> Check:
    """A summary's 'k of n' models passing their own test: holds where all pass."""
    k, n = (int(x) for x in passes.split(" of "))
    return Check(HOLDS if k == n else FAILS)


def untested(why: str) -> Check:
    return Check(UNTESTED, why)


def verdict(checks: list[Check]) -> str:
    """The verdict of a claim from its checks (the rule of the module docstring), with its count."""
    tested = [c for c in checks if c.outcome != UNTESTED]
    holds = sum(c.outcome == HOLDS for c in tested)
    undecided = sum(c.outcome == UNDECIDED for c in tested)
    gaps = "; ".join(dict.fromkeys(c.why for c in checks if c.outcome == UNTESTED and c.why))
    if not tested:
        return f"**not tested**: {gaps}"
    if holds == len(checks):
        word = "**reproduced**"
    elif holds == 0 and undecided == 0:
        word = "**not reproduced**"
    elif holds == 0:
        word = "**not decided at 1 seed**"
    else:
        word = "**partly**"
    parts = [f"{holds} of {len(tested)} checks hold"]
    if undecided:
        parts.append(f"{undecided} at 1 seed")
    if gaps:
        parts.append(f"not run: {gaps}")
    return f"{word} ({'; '.join(parts)})"


# ----------------------------------------------------------------------------- reading the runs
def seeds(folder: str, split: str, metric: str, scale: float = 100) -> dict[tuple[str, bool], list[float]]:
    """{(mixer, mixture of experts): final `split` `metric` × `scale` per seed} of a folder's records."""
    return seed_values(records_in(folder), mixer_and_experts, final(split, metric, scale))


def budget(folder: str, unit: str = "examples") -> str:
    """'S steps × B (N examples), seeds …' of a folder's records (all of one budget)."""
    records = records_in(folder)
    [(steps, batch)] = {(r["config"]["train"]["steps"], r["config"]["train"]["batch_size"]) for r in records}
    examples = steps * batch
    size = f"{examples / 1e6:.1f}M" if examples >= 1e6 else f"{examples / 1e3:.0f}k"
    numbers = sorted({r["config"]["seed"] for r in records})
    return f"{steps:,} steps × {batch} ({size} {unit}), seed{'s' if len(numbers) > 1 else ''} " + ", ".join(
        map(str, numbers)
    )


def named(values: dict[str, str]) -> str:
    return ", ".join(f"{label(m)} {v}" for m, v in values.items())


# ----------------------------------------------------------------------------- the claims
FUZZY = "table_a1_logic_50k_cpu"
SRAVEN_20M = "table_a1_raven_20m_cpu"
SRAVEN_40K = "table_a1_raven_40k_cpu"
NO_GPU = "needs a GPU"
FIG5E_STABILITY = "fig5e_stability_20m"


def table_a1_block(folder: str, task: str, metric: str, moe: bool) -> dict[str, object]:
    """A Table A1 block: each row within the paper's mean (`within`), hyla's three main rows shown."""
    runs = seeds(folder, "ood", metric)
    mixers = MIXERS if moe else A1_MIXERS
    checks = [within(runs.get((m, moe), []), TABLE_A1[task][(m, moe)]) for m in mixers]
    shown = ("hyla", "linear", "softmax")
    run_rows = sum(bool(runs.get((m, moe))) for m in mixers)
    hyla = named({m: over_seeds(runs.get((m, moe), [])) for m in shown})
    if run_rows < len(mixers):
        checks = [c if c.outcome != UNTESTED else untested(f"{len(mixers) - run_rows} rows, {NO_GPU}") for c in checks]
    return {
        "paper": named({m: paper((task, m, moe)) for m in shown}),
        "hyla": f"{hyla}; {run_rows} of {len(mixers)} rows run" if not moe or run_rows else "–",
        "checks": checks,
    }


def order_checks(runs: dict) -> list[Check]:
    """HYLA ahead of linear and of softmax."""
    return [greater(runs.get(("hyla", False), []), runs.get((m, False), [])) for m in MIXERS[1:]]


def claim_rows() -> dict[str, dict[str, object]]:
    """{claim: {"paper", "hyla", "checks", "budget"}} of every claim of the table."""
    fuzzy = seeds(FUZZY, "ood", "r2")
    r20 = seeds(SRAVEN_20M, "ood", "acc")
    rows = {"hyla": hyla_row(fuzzy, r20), "nonlinear": nonlinear_row(fuzzy, r20), **table_a1_rows()}
    rows["scale"] = rows["fig4"] = scale_row(r20)
    rows["fig2c"] = fig2c()
    rows.update(latent_code_rows())
    rows["fig5c"] = fig5c()
    rows["fig5e"] = fig5e()
    rows["fig6"] = fig6()
    return rows


def hyla_row(fuzzy: dict, r20: dict) -> dict[str, object]:
    """Finding 3: HYLA ahead of linear and softmax on both tasks."""
    return {
        "hyla": f"fuzzy logic: {named({m: over_seeds(fuzzy[(m, False)]) for m in MIXERS})}; "
        f"SRAVEN: {named({m: over_seeds(r20.get((m, False), [])) for m in MIXERS})}",
        "checks": order_checks(fuzzy) + order_checks(r20),
        "budget": "the paper's: Table A1's rows below",
    }


def nonlinear_row(fuzzy: dict, r20: dict) -> dict[str, object]:
    """HYLA's nonlinear value network against the same network without its nonlinearity
    (`hyla_identity`): ahead on SRAVEN, the paper's abstract-reasoning task; on fuzzy logic the paper
    has no gain, so it is shown, not checked."""
    pair = ("hyla", "hyla_identity")
    return {
        "paper": f"SRAVEN: {named({m: paper(('sraven', m, False)) for m in pair})}; "
        f"fuzzy logic: {named({m: paper(('fuzzy_logic', m, False)) for m in pair})}",
        "hyla": f"SRAVEN: {named({m: over_seeds(r20.get((m, False), [])) for m in pair})}; "
        f"fuzzy logic: {named({m: over_seeds(fuzzy.get((m, False), [])) for m in pair})}",
        "checks": [
            greater(r20[("hyla", False)], r20[("hyla_identity", False)])
            if r20.get(("hyla_identity", False))
            else untested("no completed HYLA − nonlinearity run at 20M examples")
        ],
        "budget": f"{budget(SRAVEN_20M)}; fuzzy logic: Table A1's",
    }


def table_a1_rows() -> dict[str, dict[str, object]]:
    """The Table A1 blocks: each task with and without experts."""
    return {
        name: table_a1_block(folder, task, metric, moe) | {"budget": budget(folder)}
        for name, folder, task, metric, moe in (
            ("a1_fuzzy", FUZZY, "fuzzy_logic", "r2", False),
            ("a1_fuzzy_moe", FUZZY, "fuzzy_logic", "r2", True),
            ("a1_sraven", SRAVEN_20M, "sraven", "acc", False),
            ("a1_sraven_moe", SRAVEN_20M, "sraven", "acc", True),
        )
    }


def scale_row(r20: dict) -> dict[str, object]:
    """Finding 1 and Fig. 4: SRAVEN better with more data (width and depth need a GPU)."""
    r40 = seeds(SRAVEN_40K, "ood", "acc")
    data = [greater(r20.get((m, False), []), r40[(m, False)]) for m in MIXERS]
    return {
        "hyla": "SRAVEN OOD ×100 at 5.1M → 20M examples: "
        + named({m: f"{over_seeds(r40[(m, False)])} → {over_seeds(r20.get((m, False), []))}" for m in MIXERS}),
        "checks": [*data, untested(f"width and depth, {NO_GPU}")],
        "budget": f"{budget(SRAVEN_40K)}; {budget(SRAVEN_20M)}",
    }


def fig2c() -> dict[str, object]:
    """Fig. 2C: OOD R² falls as more tasks are held out, HYLA's the least."""
    held = held_out_seeds()
    falls = [greater(held[(m, 30)], held[(m, 70)]) for m in MIXERS]
    hyla_drop = (held[("hyla", 30)], held[("hyla", 70)])
    least = [difference_greater((held[(m, 30)], held[(m, 70)]), hyla_drop) for m in MIXERS[1:]]
    return {
        "hyla": "OOD R² ×100 at 30% → 70% held out: "
        + named({m: f"{over_seeds(held[(m, 30)])} → {over_seeds(held[(m, 70)])}" for m in MIXERS}),
        "checks": falls + least,
        "budget": f"{budget('fig2c_logic_50k_cpu')} (70%: Table A1's)",
    }


def latent_code_rows() -> dict[str, dict[str, object]]:
    """Finding 2 and Figs. 5A/B/F: the rule (SRAVEN) and terms (fuzzy logic) read from the latent codes."""
    probe = "held-out probe (accuracy)", "valid_unpermuted->ood_unpermuted"
    cpu, m20 = "latent_weights_raven_cpu/latent_summary.json", "latent_table_a1_raven_20m_cpu/latent_summary.json"
    cpu_last = summary_rows(cpu, *probe, "layer 1")
    cpu_first = summary_rows(cpu, *probe, "layer 0")
    at20 = summary_rows(m20, *probe, "all layers")
    rows: dict[str, dict[str, object]] = {}
    rows["fig5a"] = {
        "hyla": "rule probe on held-out tasks, last layer: "
        + named({m: f"{row['mean']:.2f} ({row['passes']} above chance)" for m, row in cpu_last.items()}),
        "checks": [every_model(r["passes"]) for r in (*cpu_last.values(), *at20.values())],
        "budget": f"`raven_cpu`: {budget('weights_raven_cpu')}; 4 features: {budget(SRAVEN_20M)}",
    }
    fuzzy_probe = summary_rows(
        "latent_weights_logic_50k_cpu/latent_summary.json",
        "held-out probe (mean_f1)",
        "valid_fixed_query->ood_fixed_query",
        "layer 1",
    )
    rows["codes"] = {
        "hyla": "SRAVEN's rule: Fig. 5A's; fuzzy logic's terms, probe on held-out tasks above chance: "
        + named({m: row["passes"] for m, row in fuzzy_probe.items()}),
        "checks": rows["fig5a"]["checks"] + [every_model(r["passes"]) for r in fuzzy_probe.values()],
        "budget": f"{rows['fig5a']['budget']}; fuzzy logic: {budget('weights_logic_50k_cpu')}",
    }
    topographic = summary_rows(cpu, "topographic similarity", "ood_unpermuted", "layer 1")
    top20 = summary_rows(m20, "topographic similarity", "ood_unpermuted", "all layers")
    rows["fig5b"] = {
        "hyla": "similar rules, similar codes (topographic similarity, held-out tasks, last layer): "
        + named({m: f"{row['mean']:.2f} ({row['passes']} p < 0.05)" for m, row in topographic.items()}),
        "checks": [every_model(r["passes"]) for r in (*topographic.values(), *top20.values())],
        "budget": rows["fig5a"]["budget"],
    }
    rows["fig5f"] = {
        "hyla": "rule probe, first → last layer: "
        + named({m: f"{cpu_first[m]['mean']:.2f} → {cpu_last[m]['mean']:.2f}" for m in cpu_last}),
        "checks": [greater(model_values(cpu_last[m]), model_values(cpu_first[m])) for m in cpu_last],
        "budget": f"`raven_cpu`: {budget('weights_raven_cpu')}",
    }
    return rows


def held_out_seeds() -> dict[tuple[str, int], list[float]]:
    """{(mixer, % held out): OOD R² ×100 per seed} of Fig. 2C's runs (30%, 50%) and Table A1's (70%)."""
    held = seed_values(records_in("fig2c_logic_50k_cpu"), mixer_and_held_out, final("ood", "r2"))
    for (mixer, moe), values in seeds(FUZZY, "ood", "r2").items():
        if mixer in MIXERS and not moe:
            held[(mixer, 70)] = values
    return held


def model_values(row: dict) -> list[float]:
    return [m["value"] for m in row["per_model"] if m["value"] is not None]


def fig5c() -> dict[str, object]:
    heads = seed_values(records_in("fig5c_raven_single_head_cpu"), mixer_and_heads, final("ood", "acc"))
    return {
        "hyla": "OOD ×100, 16 heads → 1: "
        + named({m: f"{over_seeds(heads[(m, 16)])} → {over_seeds(heads[(m, 1)], 2)}" for m in MIXERS}),
        "checks": [greater(heads[(m, 16)], heads[(m, 1)]) for m in MIXERS],
        "budget": f"`raven_cpu`: {budget('fig5c_raven_single_head_cpu')}",
    }


def fig5e() -> dict[str, object]:
    """Addition and subtraction the most similar of the 28 rule pairs in the last layer's codes of
    held-out tasks, per model: a rank, not a significance test. The `raven_cpu` models' rank at one
    sample size; the 20M models' rank 1 only where it holds at every sample size and in most
    bootstrap draws over the grids (experiments/fig5e_stability.py), listed by layer."""
    measure = "addition-subtraction similarity (centered cosine)", "ood_unpermuted"
    cpu = summary_rows("latent_weights_raven_cpu/latent_summary.json", *measure, "layer 1")
    stability = read_json(f"{FIG5E_STABILITY}/fig5e_stability.json")
    models = stability["models"]
    per_mixer = [m["mixer"] for m in models]

    def model_name(model: dict) -> str:  # the mixer, and its seed where it has several
        mixer = model["mixer"]
        return mixer if per_mixer.count(mixer) == 1 else f"{label(mixer)} s{model['seed']}"

    stable = {
        model_name(m): [name.removeprefix("layer ") for name, v in m["code_sets"].items() if v["stable"]]
        for m in models
    }
    last = [m["code_sets"]["layer 3"]["stable"] for m in models]
    sizes = stability["options"]["sizes"]
    return {
        "hyla": "models where the pair ranks 1st of 28, last layer, held-out tasks: `raven_cpu` "
        + named({m: row["passes"] for m, row in cpu.items()})
        + f"; 20M, layers where it stays 1st at {sizes[0]:,}–{sizes[-1]:,} samples and in "
        f"{stability['options']['stable_share']:.0%} of bootstrap draws: "
        + named({m: ", ".join(layers) or "none" for m, layers in stable.items()}),
        "checks": [every_model(r["passes"]) for r in cpu.values()]
        + [Check(HOLDS if ok else FAILS) for ok in last],
        "budget": f"`raven_cpu`: {budget('weights_raven_cpu')}; {budget(SRAVEN_20M)}",
    }


def fig6() -> dict[str, object]:
    nll = seeds("lm_cpu", "valid", "loss", scale=1)
    return {
        "hyla": "valid NLL: " + named({m: over_seeds(nll[(m, False)], 3) for m in MIXERS}),
        "checks": [greater(nll[("linear", False)], nll[("hyla", False)]), untested(f"WikiText-103 scale, {NO_GPU}")],
        "budget": f"`lm_cpu`: {budget('lm_cpu', 'sequences')}",
    }


def claim_numbers() -> dict[str, str]:
    """The cells of the claims table: `pc_{claim}_{hyla,verdict,budget}` (the paper's column of
    Table A1 rows: `pc_{claim}_paper`)."""
    n = {}
    for name, row in claim_rows().items():
        n[f"pc_{name}_hyla"] = str(row["hyla"])
        n[f"pc_{name}_verdict"] = verdict(row["checks"])
        n[f"pc_{name}_budget"] = str(row["budget"])
        if "paper" in row:
            n[f"pc_{name}_paper"] = str(row["paper"])
    return n
