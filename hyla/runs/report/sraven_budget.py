"""SRAVEN OOD panel accuracy against examples seen: the paper's budget (20M examples, 156,250 steps of
128) beside the quarter budget (40k steps) and the paper's Table A1 end points, on one set of axes.

The work of `python experiments/sraven_budget.py [--snapshot DIR | --restore DIR]`. `--snapshot DIR`
(`snapshot`) first writes a record of each run under way in DIR into
`experiments/results/table_a1_raven_20m_cpu_progress/`, so that the curves of runs still training
are committed and this figure and table can be rebuilt from committed files alone. Once the sweep
has written a run's completed record (`table_a1_raven_20m_cpu/records/`), its progress record is
dropped.

The runs take about a day of 2-core compute, longer than a machine is kept, so `--snapshot` also
copies (`save_resume_state`) what each unfinished run resumes from (its latest checkpoint, 4.9 MB of
weights and Adam state, with its config, environment and metrics) into
`table_a1_raven_20m_cpu_progress/resume/<run>/`, and drops that copy once the run has completed.
`--restore DIR` (`restore_resume_state`) puts those files back into DIR (a run already as far or
further there is left alone), after which `hyla sweep` resumes each run where the snapshot was.

A run that completes writes its record and exported weights into the results folder of the checkout
it trains in (its batch's commit, not main). Before anything else, `--snapshot` (`collect_completed`)
copies them from there into this checkout's `table_a1_raven_20m_cpu/`, so a completed run's resume
copy is never dropped while main lacks what it produced.

`write_curves` writes `ood_vs_examples.png` and `curves.md` into
experiments/results/table_a1_raven_20m_cpu/: every evaluation of the full-budget runs with its
binomial standard error sqrt(p(1-p)/n) (n: the tasks evaluated at that point), every change of
order between two mixers, with whether the differences on both sides of it exceed twice their
combined standard error, and each run's stretches of compute (its sessions, from the records'
environment) with their pace while training and the CPU they ran on.
"""

from __future__ import annotations

import math
import shutil
import statistics
import subprocess
from dataclasses import dataclass
from datetime import datetime, timedelta
from pathlib import Path

from hyla.analysis.tables import markdown_table, mean_se
from hyla.runs import records
from hyla.runs.paper import TABLE_A1
from hyla.runs.report.cells import MIXER_COLORS, label, over_seeds, paper, seeds_text, signed
from hyla.runs.report.files import RESULTS, ROOT, SRAVEN_MIXERS
from hyla.train.run_dir import RunDir

FULL = RESULTS / "table_a1_raven_20m_cpu"
PROGRESS = RESULTS / "table_a1_raven_20m_cpu_progress"
QUARTER = RESULTS / "table_a1_raven_40k_cpu"
PAIRS = (("hyla", "linear"), ("hyla", "hyla_identity"), ("hyla", "softmax"))  # the paper's claims, as differences
PAPER_EXAMPLES = 20e6
RESUME = PROGRESS / "resume"
RESUME_FILES = ("config.json", "env.json", "metrics.jsonl", "checkpoints/latest.pt")
CORES = 2  # the runs train at once on a 2-core machine, one thread each
SAME_STRETCH = timedelta(minutes=10)  # runs resumed this close together share one stretch of compute


@dataclass
class Stretch:
    """One session of compute of a run: from its start (or resume) to the next one's, or its last step."""

    started: str  # UTC, "2026-11-28 14:27"
    commit: str  # the checkout it ran, 7 characters
    from_step: int
    to_step: int
    steps_per_second: float | None  # the median of its logged training records' paces (each: since the one before)
    cpu: str  # the machine's CPU, as its environment record names it ("" where it names none)


@dataclass
class Curve:
    """OOD panel accuracy of one run at each evaluation."""

    mixer: str
    seed: int
    batch_size: int
    total_steps: int
    completed: bool
    last_step: int  # the last step logged
    points: list[tuple[int, float, int]]  # (step, accuracy in [0, 1], tasks evaluated)
    valid: dict[int, float]  # step: valid panel accuracy in [0, 1]
    train_loss: dict[int, float]  # step: training loss, the mean over the steps since the last record
    stretches: list[Stretch]

    def standard_error(self, i: int) -> float:
        _, p, n = self.points[i]
        return math.sqrt(p * (1 - p) / n)


def curve(record: dict) -> Curve:
    config, summary = record["config"], record["summary"]
    train, evaluation = config["train"], config["eval"]
    last = train["steps"] if summary.get("status") == "completed" else None
    points = [
        (row["step"], row["acc"], evaluation["final_samples"] if row["step"] == last else evaluation["samples"])
        for row in record["metrics"]
        if row.get("split") == "ood"
    ]
    return Curve(
        config["model"]["mixer"],
        config["seed"],
        train["batch_size"],
        train["steps"],
        summary.get("status") == "completed",
        max((row["step"] for row in record["metrics"]), default=0),
        points,
        {row["step"]: row["acc"] for row in record["metrics"] if row.get("split") == "valid"},
        {row["step"]: row["loss"] for row in record["metrics"] if row.get("split") == "train"},
        stretches(record),
    )


def stretches(record: dict) -> list[Stretch]:
    """The run's sessions (its environment record's `sessions`: when each started, from which step,
    from which commit, on which CPU), each to the next one's first step or the run's last, with its pace
    while training: the median of its training records' paces (a record's `steps_per_second`: the pace
    since the one before; records thinned evenly, hyla.runs.records). The median, not the steps over
    the seconds: one record that spans a pause of the run (or a busy machine) would rule the latter."""
    sessions = record.get("env", {}).get("sessions", [])
    last = max((row["step"] for row in record["metrics"]), default=0)
    ends = [session["from_step"] for session in sessions[1:]] + [last]
    out = []
    for session, end in zip(sessions, ends):
        paces = [
            row["steps_per_second"]
            for row in record["metrics"]
            if row.get("split") == "train" and session["from_step"] < row["step"] <= end and row.get("steps_per_second")
        ]
        started = session["time"][:16].replace("T", " ")
        pace = statistics.median(paces) if paces else None
        commit = session.get("git_commit", "")[:7]
        out.append(Stretch(started, commit, session["from_step"], end, pace, session.get("cpu", "")))
    return out


def final_ood(curves: list[Curve], mixer: str) -> dict[int, tuple[float, float]]:
    """{seed: (final OOD accuracy, its binomial s.e.)} of the completed runs of `mixer`."""
    return {
        c.seed: (c.points[-1][1], c.standard_error(len(c.points) - 1))
        for c in curves
        if c.mixer == mixer and c.completed
    }


def seed_table(curves: list[Curve]) -> str:
    """Per mixer: each completed seed's final OOD panel accuracy ×100 ± its binomial s.e., their mean ±
    the s.e. over seeds, and the paper's Table A1 mean ± s.e. (3 seeds)."""
    rows = []
    for mixer in SRAVEN_MIXERS:
        runs = final_ood(curves, mixer)
        if not runs:
            continue
        by_seed = ", ".join(f"s{seed} {100 * p:.2f} ± {100 * se:.2f}" for seed, (p, se) in sorted(runs.items()))
        mean = over_seeds([100 * p for p, _ in runs.values()], 2, count=True)
        rows.append([label(mixer), by_seed, mean, paper(("sraven", mixer, False), 2)])
    return markdown_table(["mixer", "final OOD by seed (± binomial s.e.)", "mean over seeds", "paper (3 seeds)"], rows)


@dataclass
class Paired:
    """The difference a − b of final OOD accuracy ×100 over the seeds both mixers completed."""

    a: str
    b: str
    by_seed: dict[int, tuple[float, float]]  # seed: (a − b ×100, its binomial s.e.)
    mean: float | None
    se: float | None  # over seeds; None below 2 seeds
    p_value: float | None  # two-sided paired t-test over seeds; None below 2 seeds
    interval: tuple[float, float] | None  # the mean's 95% t-interval (n − 1 degrees of freedom); None below 2 seeds


def paired(curves: list[Curve], a: str, b: str) -> Paired:
    runs_a, runs_b = final_ood(curves, a), final_ood(curves, b)
    by_seed = {
        seed: (100 * (runs_a[seed][0] - runs_b[seed][0]), 100 * math.hypot(runs_a[seed][1], runs_b[seed][1]))
        for seed in sorted(set(runs_a) & set(runs_b))
    }
    if not by_seed:
        return Paired(a, b, {}, None, None, None, None)
    mean, se = mean_se([d for d, _ in by_seed.values()])
    if se is None:
        return Paired(a, b, by_seed, mean, None, None, None)
    from scipy.stats import t, ttest_rel

    seeds = list(by_seed)
    p_value = float(ttest_rel([runs_a[s][0] for s in seeds], [runs_b[s][0] for s in seeds]).pvalue)
    half = float(t.ppf(0.975, len(seeds) - 1)) * se
    return Paired(a, b, by_seed, mean, se, p_value, (mean - half, mean + half))


def paper_difference(a: str, b: str) -> tuple[float, float]:
    """The paper's Table A1 difference a − b ×100 on SRAVEN, with the two rows' s.e. combined."""
    (mean_a, se_a), (mean_b, se_b) = TABLE_A1["sraven"][(a, False)], TABLE_A1["sraven"][(b, False)]
    return mean_a - mean_b, math.hypot(se_a, se_b)


def against_paper(d: Paired) -> str:
    """What the paired difference's 95% t-interval says of the paper's claim that a leads b, in words: a
    lead where the interval lies above 0; smaller than the paper's where it lies below the paper's
    difference less twice its s.e.; neither ruled out where it reaches both. A description beside the
    claims table's verdict (hyla.runs.report.claims_paper), not a second verdict."""
    if d.interval is None:
        return "1 seed: no interval"
    low, high = d.interval
    theirs, their_se = paper_difference(d.a, d.b)
    lead, smaller = low > 0, high < theirs - 2 * their_se
    if lead and not smaller:
        return "a lead: the 95% CI lies above 0 and reaches the paper's low end"
    if lead:
        return "a lead smaller than the paper's: the 95% CI lies above 0, below the paper's low end"
    if smaller:
        return "no lead shown, and smaller than the paper's: the 95% CI reaches 0, below the paper's low end"
    return f"no lead shown, the paper's not ruled out at {len(d.by_seed)} seeds: the 95% CI reaches 0 and its low end"


def paired_table(curves: list[Curve]) -> str:
    """The paper's claims as paired differences by seed: each seed's difference ± its binomial s.e., the
    mean ± s.e. over seeds, its 95% t-interval and a two-sided paired t-test (from 2 seeds on), the
    paper's difference (its Table A1 means, ± their s.e. combined) and what ours says of it
    (`against_paper`)."""
    rows = []
    for a, b in PAIRS:
        d = paired(curves, a, b)
        if not d.by_seed:
            continue
        by_seed = ", ".join(f"s{seed} {signed(diff)} ± {se:.2f}" for seed, (diff, se) in d.by_seed.items())
        if d.se is None:
            mean, interval, test = f"{signed(d.mean)} (1 seed: no spread over seeds)", "–", "–"
        else:
            mean, test = f"{signed(d.mean)} ± {d.se:.2f}", f"p = {d.p_value:.3f} ({len(d.by_seed)} seeds)"
            interval = f"[{signed(d.interval[0])}, {signed(d.interval[1])}]"
        theirs, their_se = paper_difference(a, b)
        row = [f"{label(a)} − {label(b)}", by_seed, mean, interval, test, f"{signed(theirs)} ± {their_se:.2f}"]
        rows.append([*row, against_paper(d)])
    header = [
        "difference ×100",
        "by seed (± binomial s.e.)",
        "mean ± s.e. over seeds",
        "95% CI (t)",
        "paired t-test",
        "paper (Table A1)",
        "what the 95% CI says of the paper's lead",
    ]
    return markdown_table(header, rows)


def hours_left(curves: list[Curve], cores: int = CORES) -> list[float | None]:
    """Hours of compute until each run completes (0 for a completed run, None for one without a logged
    pace), the unfinished runs training at once on `cores` cores, one thread each: each at its latest
    stretch's pace, taken as measured while every run that started that stretch trained (a run that
    completed within it makes this an underestimate of the pace after), and each time one completes,
    the others faster in proportion to their share of a core, min(1, cores / runs training)."""
    pace = {i: c.stretches[-1].steps_per_second for i, c in enumerate(curves) if not c.completed and c.stretches}
    left = {i: curves[i].total_steps - curves[i].last_step for i, steps_per_second in pace.items() if steps_per_second}
    hours = [0.0 if c.completed else None for c in curves]
    if not left:
        return hours

    def share(runs: int) -> float:  # of a core, per run
        return min(1.0, cores / runs)

    def started(c: Curve) -> datetime:
        return datetime.strptime(c.stretches[-1].started, "%Y-%m-%d %H:%M")

    latest = max(started(curves[i]) for i in left)
    sharing = sum(1 for c in curves if c.stretches and abs(latest - started(c)) <= SAME_STRETCH)
    measured_share, clock = share(sharing), 0.0
    while left:
        rate = {i: pace[i] * share(len(left)) / measured_share for i in left}  # steps/s now
        first = min(left, key=lambda i: left[i] / rate[i])
        seconds = left[first] / rate[first]
        clock += seconds
        left = {i: steps - rate[i] * seconds for i, steps in left.items() if i != first}
        hours[first] = clock / 3600
    return hours


def full_budget_curves(results: Path = RESULTS) -> list[Curve]:
    """The completed records, else the progress records, one per run (below `results`)."""
    chosen: dict[str, dict] = {}
    for folder in (PROGRESS.name, FULL.name):  # later wins: a completed record replaces its progress record
        for path in records.find(results / folder / "records"):
            record = records.read(path)
            chosen[record["run"]] = record
    return sorted((curve(r) for r in chosen.values()), key=lambda c: (SRAVEN_MIXERS.index(c.mixer), c.seed))


def quarter_budget_curves() -> list[Curve]:
    return [curve(records.read(path)) for path in records.find(QUARTER / "records")]


def snapshot(run_root: Path) -> list[str]:
    """A progress record in PROGRESS of each run below run_root whose completed record FULL does not hold
    yet; the progress record of one it holds, dropped. One line of what was done per run."""
    done = []
    for run_dir in sorted(p for p in run_root.iterdir() if (p / "metrics.jsonl").exists()):
        key = records.run_key(run_dir)
        if not records.path_of(FULL, key).exists():
            done.append(f"wrote {records.write(records.from_folder(run_dir), PROGRESS).relative_to(ROOT)}")
        elif (progress := records.path_of(PROGRESS, key)).exists():
            progress.unlink()
            done.append(f"{run_dir.name}: completed, progress record dropped")
    return done


def collect_completed(run_root: Path) -> list[str]:
    """Copy into FULL the record and exported weights of each completed run below run_root that FULL
    lacks, from the same results folder of the checkout holding run_root, where the run wrote them.
    One line of what was done per run."""
    checkout = subprocess.run(["git", "-C", str(run_root), "rev-parse", "--show-toplevel"], capture_output=True, text=True)
    theirs = Path(checkout.stdout.strip()) / FULL.relative_to(ROOT) if checkout.returncode == 0 else Path("(no checkout)")
    done = []
    for run_dir in sorted(p for p in run_root.iterdir() if (p / "config.json").exists()):
        key = records.run_key(run_dir)
        if RunDir(run_dir).read_summary().get("status") != "completed" or records.path_of(FULL, key).exists():
            continue
        record, model = records.path_of(theirs, key), theirs / "models" / run_dir.name
        if not (record.is_file() and (model / "manifest.json").is_file()):
            done.append(f"{run_dir.name}: completed, but its record and weights are not in {theirs}")
            continue
        records.path_of(FULL, key).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy2(record, records.path_of(FULL, key))
        shutil.copytree(model, FULL / "models" / run_dir.name, dirs_exist_ok=True)
        done.append(f"{run_dir.name}: completed, record and weights copied from {theirs}")
    return done


def checkpoint_step(run_dir: Path) -> int:
    """The step of run_dir's latest checkpoint; -1 when it has none."""
    run = RunDir(run_dir)
    return run.load_checkpoint()[0]["progress"]["step"] if run.has_checkpoint() else -1


def save_resume_state(run_root: Path) -> list[str]:
    """Copy the files each unfinished run below run_root resumes from into RESUME/<run>/; drop the
    copy of a completed run. One line of what was done per run."""
    done = []
    for run_dir in sorted(p for p in run_root.iterdir() if (p / "config.json").exists()):
        saved = RESUME / run_dir.name
        if RunDir(run_dir).read_summary().get("status") == "completed":
            if saved.exists():
                shutil.rmtree(saved)
                done.append(f"{run_dir.name}: completed, resume copy dropped")
            continue
        if not (run_dir / "checkpoints" / "latest.pt").exists():
            continue
        for name in RESUME_FILES:
            (saved / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(run_dir / name, saved / name)
        done.append(f"{run_dir.name}: resume copy at step {checkpoint_step(saved):,}")
    return done


def restore_resume_state(run_root: Path) -> list[str]:
    """Put each copy in RESUME back under run_root, unless the run there is as far or further."""
    done = []
    for saved in sorted(p for p in RESUME.iterdir() if p.is_dir()) if RESUME.is_dir() else []:
        run_dir, step = run_root / saved.name, checkpoint_step(saved)
        here = checkpoint_step(run_dir)
        if here >= step:
            done.append(f"{saved.name}: left alone (step {here:,} here, {step:,} saved)")
            continue
        shutil.rmtree(run_dir, ignore_errors=True)
        for name in RESUME_FILES:
            (run_dir / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(saved / name, run_dir / name)
        done.append(f"{saved.name}: restored at step {step:,}")
    return done


def crossings(a: Curve, b: Curve) -> list[str]:
    """Every change of order between two curves at their common evaluations, in words."""
    at_b = {step: i for i, (step, _, _) in enumerate(b.points)}
    common = [(i, at_b[step]) for i, (step, _, _) in enumerate(a.points) if step in at_b]
    lines = []
    for (i0, j0), (i1, j1) in zip(common, common[1:]):
        before = a.points[i0][1] - b.points[j0][1]
        after = a.points[i1][1] - b.points[j1][1]
        if before * after < 0:
            clear = [
                abs(a.points[i][1] - b.points[j][1]) > 2 * math.hypot(a.standard_error(i), b.standard_error(j))
                for i, j in ((i0, j0), (i1, j1))
            ]
            leader = a.mixer if after > 0 else b.mixer
            lines.append(
                f"{leader} takes the lead from {b.mixer if leader == a.mixer else a.mixer} between steps "
                f"{a.points[i0][0]:,} and {a.points[i1][0]:,} ({beyond_or_within(*clear)})"
            )
    return lines


def beyond_or_within(before: bool, after: bool) -> str:
    """Whether the differences before and after a change of order exceed 2 standard errors, in words."""
    word = {True: "beyond", False: "within"}
    if before == after:
        return f"{word[before]} 2 s.e. on both sides"
    return f"{word[before]} 2 s.e. before, {word[after]} after"


def table(curves: list[Curve]) -> str:
    if not curves:
        return "(no full-budget run recorded yet)"
    steps = sorted({step for c in curves for step, _, _ in c.points})
    rows = []
    for step in steps:
        cells = []
        for c in curves:
            index = {s: i for i, (s, _, _) in enumerate(c.points)}
            if step in index:
                i = index[step]
                _, p, n = c.points[i]
                cells.append(f"{100 * p:.2f} ± {100 * c.standard_error(i):.2f} (n={n:,})")
            else:
                cells.append("")
        rows.append([f"{step:,}", f"{step * curves[0].batch_size / 1e6:.2f}M", *cells])
    return markdown_table(["step", "examples", *(f"{c.mixer} s{c.seed}" for c in curves)], rows)


def fit_table(curves: list[Curve]) -> str:
    """Valid panel accuracy ×100 and training loss of each run at each evaluation."""
    steps = sorted({step for c in curves for step, _, _ in c.points})
    rows = []
    for step in steps:
        cells = [
            f"{100 * c.valid[step]:.2f} / {c.train_loss[step]:.4f}" if step in c.valid and step in c.train_loss else ""
            for c in curves
        ]
        rows.append([f"{step:,}", *cells])
    return markdown_table(["step", *(f"{c.mixer} s{c.seed} valid / loss" for c in curves)], rows)


def stretch_table(curves: list[Curve]) -> str:
    """Each run's stretches of compute: when, from which commit, on which CPU, which steps, at what pace."""
    rows = []
    for c in curves:
        for s in c.stretches:
            pace = "–" if s.steps_per_second is None else f"{s.steps_per_second:.2f}"
            steps = f"{s.from_step:,} → {s.to_step:,}"
            rows.append([f"{c.mixer} s{c.seed}", s.started, f"`{s.commit}`", s.cpu or "–", steps, pace])
    return markdown_table(["run", "started (UTC)", "commit", "CPU", "steps", "steps/s (median)"], rows)


def report(full: list[Curve]) -> str:
    status = ", ".join(
        f"{c.mixer} s{c.seed} {'completed' if c.completed else 'at step'} {c.last_step:,}/{c.total_steps:,}"
        for c in full
    )
    pairs = [(a, b) for i, a in enumerate(full) for b in full[i + 1 :] if a.seed == b.seed]
    changes = [f"seed {a.seed}: {line}" for a, b in pairs for line in crossings(a, b)] or ["none so far"]
    return "\n".join(
        [
            "# SRAVEN at the paper's budget: OOD panel accuracy ×100 by evaluation",
            "",
            f"Runs: {status}.",
            "",
            "Generated by `python experiments/sraven_budget.py` from the records in `records/` (completed",
            "runs) and `../table_a1_raven_20m_cpu_progress/` (runs under way). Each cell: accuracy ± its",
            "binomial standard error sqrt(p(1-p)/n) over the n OOD tasks evaluated at that step.",
            "",
            table(full),
            "",
            "Final OOD panel accuracy ×100 of the completed runs, by seed and over seeds:",
            "",
            seed_table(full),
            "",
            "The paper's claims as paired differences over the seeds both mixers completed:",
            "",
            paired_table(full),
            "",
            "Changes of order between mixers of the same seed (at consecutive evaluations):",
            "",
            *[f"- {line}" for line in changes],
            "",
            "How well each run fits its training tasks at the same evaluations: valid panel accuracy ×100",
            "(held-in rule combinations, new tasks) / training loss (the mean over the 100 steps before):",
            "",
            fit_table(full) if full else "(no full-budget run recorded yet)",
            "",
            "Stretches of compute: each session of each run, from its start (or resume from a checkpoint) to",
            "the next one's, with the CPU it ran on and its pace while training (the median of its logged",
            "training records' paces):",
            "",
            stretch_table(full),
            "",
        ]
    )


def seed_band(curves: list[Curve]) -> tuple[list[float], list[float], list[float]]:
    """Examples seen (millions), mean OOD ×100 and its s.e. at the evaluations every run in `curves`
    reached: the s.e. over the runs (seeds), or a single run's binomial s.e."""
    steps = sorted(set.intersection(*({s for s, _, _ in c.points} for c in curves)))
    x, mean, se = [], [], []
    for step in steps:
        at = [(p, c.standard_error(i)) for c in curves for i, (s, p, _) in enumerate(c.points) if s == step]
        m, e = mean_se([100 * p for p, _ in at])
        x.append(step * curves[0].batch_size / 1e6)
        mean.append(m)
        se.append(100 * at[0][1] if e is None else e)
    return x, mean, se


def figure(full: list[Curve], quarter: list[Curve], path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(8, 5))
    for c in quarter:
        x = [s * c.batch_size / 1e6 for s, _, _ in c.points]
        ax.plot(x, [100 * p for _, p, _ in c.points], color=MIXER_COLORS[c.mixer], lw=0.8, ls="--", alpha=0.6)
    drawn = [m for m in SRAVEN_MIXERS if any(c.mixer == m for c in full)]
    for mixer in drawn:
        runs = [c for c in full if c.mixer == mixer and c.points]
        for c in runs:
            x = [s * c.batch_size / 1e6 for s, _, _ in c.points]
            ax.plot(x, [100 * p for _, p, _ in c.points], color=MIXER_COLORS[mixer], lw=1, alpha=0.8)
        if not runs:
            continue
        x, mean, se = seed_band(runs)
        ax.plot(x, mean, color=MIXER_COLORS[mixer], lw=2, marker="o", ms=3)
        ax.fill_between(
            x, [m - e for m, e in zip(mean, se)], [m + e for m, e in zip(mean, se)], color=MIXER_COLORS[mixer], alpha=0.2
        )
    for i, mixer in enumerate(drawn):
        mean, se = TABLE_A1["sraven"][(mixer, False)]
        offset = 0.25 * (i - (len(drawn) - 1) / 2)
        ax.errorbar(PAPER_EXAMPLES / 1e6 + offset, mean, yerr=se, color=MIXER_COLORS[mixer], marker="*", ms=12, capsize=4)
    for mixer in drawn:
        seeds = sorted(c.seed for c in full if c.mixer == mixer)
        ax.plot([], [], color=MIXER_COLORS[mixer], lw=6, label=f"{label(mixer)}, {seeds_text(seeds)}")
    ax.plot([], [], color="gray", lw=1, label="paper's budget (20M): each seed")
    ax.plot(
        [],
        [],
        color="gray",
        lw=2,
        marker="o",
        ms=3,
        label="its mean at the evaluations all seeds reached, ± 1 s.e. band",
    )
    ax.plot([], [], color="gray", lw=0.8, ls="--", label="40k-step budget (5.12M), seeds 0-2")
    ax.plot([], [], color="gray", marker="*", ms=12, ls="", label="paper, Table A1 (mean ± s.e., 3 seeds)")
    ax.set_xlabel("training examples seen (millions)")
    ax.set_ylabel("OOD panel accuracy ×100 (chance 0.02)")
    ax.set_title("SRAVEN, 4 features: OOD panel accuracy against examples seen")
    ax.set_xlim(0, 21)
    ax.set_ylim(0, 80)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=7, loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def write_curves() -> str:
    """Write curves.md and ood_vs_examples.png into FULL from the committed records; what was written."""
    full = full_budget_curves()
    FULL.mkdir(parents=True, exist_ok=True)
    (FULL / "curves.md").write_text(report(full))
    figure(full, quarter_budget_curves(), FULL / "ood_vs_examples.png")
    return f"wrote {(FULL / 'curves.md').relative_to(ROOT)} and {(FULL / 'ood_vs_examples.png').relative_to(ROOT)}"
