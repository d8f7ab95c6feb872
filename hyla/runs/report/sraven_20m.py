"""The report's SRAVEN numbers at the paper's budget (20M examples): the runs' latest common
evaluation, their order, their progress and the layouts measured for running them on 2 cores
(the curves: hyla.runs.report.sraven_budget)."""

from __future__ import annotations

import math

from hyla.runs.paper import TABLE_A1
from hyla.runs.report import files
from hyla.runs.report.cells import label, number
from hyla.runs.report.files import MIXERS, read_json
from hyla.runs.report.sraven_budget import full_budget_curves, hours_left, paired_table, seed_table

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
    for layout, layout_files in SRAVEN_20M_LAYOUTS.items():
        rows = [row for file in layout_files for row in read_json(f"sraven_layout_2cores/{file}", "benchmarks")["rows"]]
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
    curves = {c.mixer: c for c in full_budget_curves(files.RESULTS) if c.seed == 0 and c.mixer in MIXERS}
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
    (mixer, seed): the last step logged, each session (start, commit, CPU, steps, pace) and the hours of
    compute to its end (the runs sharing the machine at their latest stretch's pace), or "completed"."""
    curves = full_budget_curves(files.RESULTS)
    rows = []
    for c, left in zip(curves, hours_left(curves)):
        stretches = "; ".join(
            f"{s.started} `{s.commit}` {s.cpu or '(CPU not recorded)'}: {s.from_step:,} → {s.to_step:,}"
            + ("" if s.steps_per_second is None else f" at {s.steps_per_second:.2f}")
            for s in c.stretches
        )
        hours = "completed" if c.completed else "–" if left is None else f"{left:.1f} h"
        rows.append(f"| {label(c.mixer)} | {c.seed} | {c.last_step:,} | {stretches} | {hours} |")
    return {
        "r20m_status": f"**Where the runs are:** {under_way(curves)}.",
        "r20m_progress_rows": "\n".join(rows),
        "r20m_seeds": seed_table(curves),
        "r20m_paired": paired_table(curves),
    }


def under_way(curves: list) -> str:
    """The runs under way in a sentence: their latest stretch (when, from which commit, on which CPU,
    the step reached, each run's pace), the hours their steps left take at that pace, and at the paces
    of the completed runs three at once on the same CPU (every stretch of theirs but the last, which
    some ran alone); paces on another CPU are named as such, not turned into hours."""
    running = [c for c in curves if not c.completed and c.stretches]
    if not running:
        return "no run under way"
    stretches = [c.stretches[-1] for c in running]
    paces = [s.steps_per_second for s in stretches if s.steps_per_second]
    cpu = stretches[0].cpu
    done = [s for c in curves if c.completed for s in c.stretches[:-1] if s.steps_per_second]
    same = [s.steps_per_second for s in done if s.cpu == cpu]
    elsewhere = [s for s in done if s.cpu != cpu]
    left = max(c.total_steps - c.last_step for c in running)
    text = (
        f"{len(running)} runs under way, at steps {min(c.last_step for c in running):,}–"
        f"{max(c.last_step for c in running):,} of {running[0].total_steps:,}; their latest stretch (from "
        f"{min(s.started for s in stretches)} UTC, commit `{stretches[0].commit}`, {cpu or 'CPU not recorded'}) "
        + (
            f"trained at {min(paces):.2f}–{max(paces):.2f} steps/s each, at which the {left:,} steps left take "
            f"{hours(left, max(paces))}–{hours(left, min(paces))} h"
            if paces
            else "has logged no pace yet"
        )
    )
    if same:
        text += (
            f"; at the completed runs' paces three at once on this CPU ({min(same):.2f}–{max(same):.2f} steps/s "
            f"each), {hours(left, max(same))}–{hours(left, min(same))} h"
        )
    if elsewhere:
        there = [s.steps_per_second for s in elsewhere]
        cpus = ", ".join(sorted({s.cpu or "a CPU not recorded" for s in elsewhere}))
        text += (
            f"; the completed runs trained three at once at {min(there):.2f}–{max(there):.2f} steps/s "
            f"each on another CPU ({cpus})"
        )
    return text


def hours(steps: int, steps_per_second: float) -> str:
    """The hours `steps` take at `steps_per_second`, to a tenth."""
    return f"{steps / steps_per_second / 3600:.1f}"


def numbers() -> dict[str, str]:
    """Every number of the report on the SRAVEN runs at the paper's budget, by name."""
    return {**sraven_20m_layout_sections(), **sraven_20m_sections(), **sraven_20m_progress_sections()}
