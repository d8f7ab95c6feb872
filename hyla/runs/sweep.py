"""`hyla sweep FILE`: a grid of runs (preset × grid × seeds), on this machine or on a Slurm cluster, restartable.

A sweep file (YAML) looks like

    name: table_a1_logic_cpu
    preset: logic_cpu
    out_dir: runs/table_a1_logic_cpu      # default: runs/<name>
    seeds: [0, 1, 2]
    overrides: {train.steps: 3000}        # applied to every run
    grid:                                  # cartesian product; a list of such dicts = their union
      model.mixer: [softmax, linear, hyla]
    parallel: 2                            # runs at once with the local launcher (default: 1)
    slurm: {timeout_min: 240, slurm_partition: gpu, gpus_per_node: 1, cpus_per_task: 8}  # optional
    results: experiments/results/table_a1_logic_cpu  # optional: runs recorded there count as done

Every run's config is built and checked before anything launches (`--dry-run` included): a bad
key or value ends with one line naming the sweep file and the grid or overrides entry. Every run
is a subprocess `hyla train` (or `hyla resume` when a checkpoint exists) writing to
`<out_dir>/<run name>`, with its output in `<out_dir>/<run name>.log`. Completed runs are
skipped and a run killed before its first checkpoint starts again from scratch, so re-running the
same command after an interruption of any kind finishes the sweep. On Linux the trainings end with
the sweep however it ends, kill -9 included (`hyla.runs.launch.end_with_parent`: they checkpoint and exit), and a
re-run clears the markers a killed sweep left and waits for its trainings to stop.

Launchers (`--launcher`): `local` (default) runs `parallel` runs at once here and waits;
`slurm` submits each run as a Slurm job (an array job, through submitit: pip install
'hyla[slurm]') and returns. The `slurm` section holds submitit's parameters (timeout_min,
cpus_per_task, gpus_per_node, mem_gb, slurm_partition, slurm_account, ...; timeout_min defaults
to 240). A job that is preempted or reaches its time limit gets the signal first: its training
saves a checkpoint, and the job is requeued and resumes from it.

`--pack N` (local launcher) trains runs that share an architecture (same task, model and batch
size; seeds, learning rates and the like may differ) as packs of up to N runs, each pack one
batched model (hyla.train.packed), `parallel` packs at a time, each in a process of its own; every
run still writes its own run folder, and a stopped pack is packed again and resumes exactly.

`--threads N` gives each local run (or pack) N CPU threads instead of the cores / `parallel`, for a
sweep that shares the machine with other work.

`--only PATTERN ...` makes the sweep the runs whose names match one of the glob patterns (the names
`--status` lists: `--only 'mixer-hyla__*'`, `--only mixer-hyla__s0`), to train one cell first; the
others stay as they are for the next run of the whole sweep.

`results` names the folder of the sweep's tables (`hyla results ... --out`) and of the records of its
runs (hyla.runs.records): each run that completes writes its record there, and its final
weights into `<results>/models/<run name>/` (`hyla export`'s safetensors, config.json and
manifest.json; 0.3-1.6 MB a model at the paper's sizes); a run recorded there as completed, with
the same seed and settings, counts as done when its run folder is gone (another machine, a fresh
checkout).

`hyla sweep SPEC --status` shows each run as done, running (its owner is alive), pending (not
started, queued, or stopped cleanly and resumable), stale (killed: its owner is gone, and it ended
without a summary; a re-run resumes or restarts it) or failed, from the run folders:
summary.json's status, and `<run name>.running` (written while a job trains: the pids of the job
and of its training) and `<run name>.job` (a queued Slurm job); beside each, its step, while it
trains its pace and ETA, and its latest complete evaluation (the final one once completed). It ends
with the training left: the steps the runs not done still need, at the mean seconds per step of the runs
completed in the folder.

This module plans a sweep: its file, runs, command lines, markers and status. Launching the runs
(here or on Slurm, with progress) is hyla.runs.launch; the command's options, hyla.cli.sweep.
"""

from __future__ import annotations

import fnmatch
import itertools
import json
import math
import os
import socket
import statistics
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any

import yaml

from hyla.runs import records
from hyla.train.run_dir import RunDir
from hyla.utils import duration

SPEC_KEYS = ("name", "preset", "out_dir", "seeds", "overrides", "grid", "parallel", "slurm", "results")


def name_matches(name: str, patterns) -> bool:
    """Whether the run name matches one of the glob `patterns` (`--only`)."""
    return any(fnmatch.fnmatchcase(name, pattern) for pattern in patterns)


def unmatched_pattern(names: list[str], patterns) -> str | None:
    """The first of the glob `patterns` that matches none of the run `names`, or None."""
    return next((pattern for pattern in patterns if not any(name_matches(n, (pattern,)) for n in names)), None)


@dataclass
class Run:
    name: str
    seed: int
    overrides: dict[str, Any]
    """the sweep's overrides with this run's grid point on top"""
    point: dict[str, Any] = field(default_factory=dict)
    """this run's grid entries"""


@dataclass
class SweepSpec:
    name: str
    preset: str
    out_dir: str
    seeds: list[int] = field(default_factory=lambda: [0])
    overrides: dict[str, Any] = field(default_factory=dict)
    grid: list[dict[str, list]] = field(default_factory=lambda: [{}])
    parallel: int = 1
    slurm: dict[str, Any] = field(default_factory=dict)
    results: str | None = None
    """the results folder of this sweep: runs recorded there (hyla.runs.records) count as done"""
    threads: int | None = None
    """CPU threads of each local run or pack (`hyla sweep --threads`); None: this machine's cores / parallel"""
    source: str = "sweep"
    """the sweep file (named in error messages)"""
    only: list[str] = field(default_factory=list)
    """glob patterns of run names (`hyla sweep --only`): the sweep is the runs that match one; empty: all"""

    @staticmethod
    def load(path: str | Path) -> SweepSpec:
        data = yaml.safe_load(Path(path).read_text()) or {}
        unknown = sorted(set(data) - set(SPEC_KEYS))
        if unknown:
            raise ValueError(f"{path}: unknown keys {unknown}; valid: {', '.join(SPEC_KEYS)}")
        for key in ("name", "preset"):
            if key not in data:
                raise ValueError(f"{path}: missing required key {key!r}")
        grid = data.get("grid") or {}
        grids = grid if isinstance(grid, list) else [grid]
        for g in grids:
            for key, values in g.items():
                if not isinstance(values, list) or not values:
                    raise ValueError(f"{path}: grid.{key} must be a non-empty list, got {values!r}")
        return SweepSpec(
            name=data["name"],
            preset=data["preset"],
            out_dir=data.get("out_dir") or f"runs/{data['name']}",
            seeds=list(data.get("seeds", [0])),
            overrides=dict(data.get("overrides") or {}),
            grid=grids,
            parallel=int(data.get("parallel", 1)),
            slurm=dict(data.get("slurm") or {}),
            results=data.get("results"),
            source=str(path),
        )

    def runs(self) -> list[Run]:
        """Every (seed, grid point), named by the grid values that vary."""
        points = [dict(zip(grid, values)) for grid in self.grid for values in itertools.product(*grid.values())]
        runs, seen = [], set()
        for seed in self.seeds:  # seed-major: a sweep cut short has every configuration at the first seeds
            for point in points:
                label = "__".join(f"{k.split('.')[-1]}-{v}" for k, v in point.items()) or "base"
                name = f"{label}__s{seed}"
                if name not in seen:
                    seen.add(name)
                    runs.append(Run(name, seed, {**self.overrides, **point}, point))
        if self.only:
            runs = [r for r in runs if name_matches(r.name, self.only)]
        return runs

    def select(self, patterns: list[str]) -> None:
        """Restrict the sweep to the runs whose names match one of the glob `patterns`; a pattern that
        matches no run is a ValueError naming the runs there are."""
        names = [r.name for r in self.runs()]
        pattern = unmatched_pattern(names, patterns)
        if pattern is not None:
            raise ValueError(f"--only {pattern!r} matches no run; the runs: {', '.join(names)}")
        self.only = list(patterns)

    def local_threads(self) -> int:
        """CPU threads of each run (or pack) the local launcher starts."""
        return self.threads or max(1, (os.cpu_count() or 1) // max(1, self.parallel))


def override_flags(key: str, value: Any) -> list[str]:
    """`hyla train` flags setting one dotted field (booleans are tyro flags: --a.b / --a.no-b)."""
    if isinstance(value, bool):
        section, _, name = key.rpartition(".")
        return [f"--{key}" if value else f"--{section + '.' if section else ''}no-{name}"]
    return [f"--{key}", str(value)]


def run_command(spec: SweepSpec, run: Run, threads: int) -> list[str]:
    """The `hyla` command line that trains (or resumes) one run of the sweep."""
    run_dir = Path(spec.out_dir) / run.name
    hyla = [sys.executable, "-m", "hyla.cli"]
    if RunDir(run_dir).has_checkpoint():
        threads = run.overrides.get("train.threads", threads)  # what `train_args` gave it
        return hyla + ["resume", str(run_dir), "--log.no-progress", "--train.threads", str(threads)]
    return hyla + ["train"] + train_args(spec, run, threads)


def train_args(spec: SweepSpec, run: Run, threads: int) -> list[str]:
    """The `hyla train` arguments of one run of the sweep."""
    args = [
        "--preset",
        spec.preset,
        "--seed",
        str(run.seed),
        "--out_dir",
        spec.out_dir,
        "--name",
        run.name,
        "--log.no-progress",
        "--train.threads",
        str(threads),
    ]
    for key, value in run.overrides.items():
        args += override_flags(key, value)
    return args


def run_status(run_dir: Path) -> str:
    """summary.json's status (completed | stopped | interrupted | diverged | failed) unless a later
    session wrote a newer checkpoint, else partial (a checkpoint and no summary of it: killed),
    started (files but no checkpoint: killed before its first one) or new."""
    run = RunDir(run_dir)
    checkpoint = run.checkpoint_file if run.checkpoint_file.exists() else run.previous_checkpoint_file
    if run.summary_file.exists() and (
        not checkpoint.exists() or run.summary_file.stat().st_mtime >= checkpoint.stat().st_mtime
    ):
        return run.read_summary().get("status", "new")
    if checkpoint.exists():
        return "partial"
    return "started" if run.exists() else "new"


def marker_path(spec: SweepSpec, run: Run, kind: str) -> Path:
    """`<out_dir>/<run>.running` (a job trains it now) or `<out_dir>/<run>.job` (queued on Slurm)."""
    return Path(spec.out_dir) / f"{run.name}.{kind}"


def write_marker(path: Path, **info) -> None:
    """Atomically (`--status` may read it at any moment): host, time and `info` as JSON."""
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(json.dumps({"host": socket.gethostname(), "time": time.strftime("%Y-%m-%dT%H:%M:%S"), **info}))
    os.replace(tmp, path)


def _running(marker: Path) -> bool:
    """The marker exists and, if it was written on this host, its job or the job's training is alive
    (a training stops a few seconds after its sweep is killed: end_with_parent)."""
    if not marker.exists():
        return False
    info = local_marker(marker)
    return info is None or any(alive(info[key]) for key in ("pid", "training_pid") if key in info)


def local_marker(marker: Path) -> dict | None:
    """The marker's content if it was written on this host, else None."""
    info = json.loads(marker.read_text() or "{}")
    return info if info.get("host") == socket.gethostname() else None


def alive(pid: int) -> bool:
    """Whether process `pid` runs (a zombie, killed and not yet reaped, does not)."""
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False  # left behind by a killed job
    except PermissionError:
        pass
    try:
        return Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0] != "Z"
    except (OSError, IndexError):
        return True  # no /proc: alive as far as kill can tell


def sweep_status(spec: SweepSpec) -> dict[str, str]:
    """{run name: running | queued | completed | recorded | stopped | interrupted | diverged | failed | partial
    | started | new}; recorded: no run folder, completed in the sweep's results folder."""
    out, states = Path(spec.out_dir), {}
    for run in spec.runs():
        status = run_status(out / run.name)
        if (
            status == "new"
            and spec.results
            and records.recorded_as_completed(spec.results, f"{out.name}/{run.name}", run.seed, run.overrides)
        ):
            status = "recorded"
        job, summary = marker_path(spec, run, "job"), RunDir(out / run.name).summary_file
        if _running(marker_path(spec, run, "running")):
            status = "running"
        elif job.exists() and (not summary.exists() or job.stat().st_mtime > summary.stat().st_mtime):
            status = "queued"
        states[run.name] = status
    return states


STATUS_GROUPS = {
    "completed": "done",
    "recorded": "done",
    "running": "running",
    "partial": "stale",
    "started": "stale",
    "diverged": "failed",
    "failed": "failed",
}  # else pending


def print_status(spec: SweepSpec) -> dict[str, int]:
    """A line per run and the counts of done / running / pending / failed runs; returns the counts."""
    states = sweep_status(spec)
    width = max(map(len, states), default=0)
    for run in spec.runs():
        state, run_dir = states[run.name], Path(spec.out_dir) / run.name
        progress = progress_note(run_dir, run_steps(spec, run), state)
        print(f"{run.name:<{width}}  {STATUS_GROUPS.get(state, 'pending'):<8} {state:<12} {progress}".rstrip())
    counts = {group: 0 for group in ("done", "running", "pending", "stale", "failed")}
    for state in states.values():
        counts[STATUS_GROUPS.get(state, "pending")] += 1
    print(f"sweep {spec.name}: " + ", ".join(f"{n} {group}" for group, n in counts.items()) + f" ({spec.out_dir})")
    left = training_left(spec, states)
    if left:
        seconds, paced_by = left
        at_once = min(spec.parallel, len(seconds))
        parallel_seconds = max(sum(seconds) / at_once, *seconds)  # shared out evenly, never before the longest run
        in_parallel = f" ({_hours(parallel_seconds)} with {at_once} at once)" if at_once > 1 else ""
        print(
            f"training left: about {_hours(sum(seconds))} one run at a time{in_parallel}, at the mean pace of the "
            f"{paced_by} run{'s' if paced_by > 1 else ''} completed in {spec.out_dir}"
        )
    return counts


ENDED = ("completed", "stopped", "interrupted", "diverged", "failed")
"""The states whose run folder's summary.json is its latest session's (`run_status`)."""
PACE_ROWS = 10
"""Training records whose logged pace gives a running run's ETA in `--status`."""


def progress_note(run_dir: Path, total: int, state: str) -> str:
    """What `--status` says of a run's progress: from the summary of an ended session, `step 40000/40000`
    and, completed, its final evaluation (`; final: valid acc 0.4132, ood acc 0.4030`); else (running,
    or killed) from metrics.jsonl, `step 31000/156250`, while it runs its pace and ETA (the mean over its
    last PACE_ROWS training records), and its latest complete evaluation (`; at step 30,000: valid acc ...`)."""
    summary = RunDir(run_dir).read_summary() if state in ENDED else {}
    if "step" in summary:
        note = f"step {summary['step']}/{summary['steps']}"
        final = _evaluation(summary.get("final") or {}, summary.get("metric_name")) if state == "completed" else ""
        return note + (f"; final: {final}" if final else "")
    train, evaluation = _latest_rows(run_dir)
    if not train:
        return ""
    note = f"step {train[-1]['step']}/{total}"
    paces = [row["steps_per_second"] for row in train[-PACE_ROWS:] if row.get("steps_per_second")]
    if state == "running" and paces:
        seconds_per_step = statistics.fmean(1 / pace for pace in paces)
        left = duration(seconds_per_step * max(0, total - train[-1]["step"]))
        note += f", {1 / seconds_per_step:.2f} steps/s, ETA {left}"
    latest = _evaluation(evaluation, _metric_name(run_dir))
    if latest:
        note += f"; at step {next(iter(evaluation.values()))['step']:,}: {latest}"
    return note


def _latest_rows(run_dir: Path) -> tuple[list[dict], dict[str, dict]]:
    """(the training records of run/metrics.jsonl, {split: record} of its latest complete evaluation:
    one still being written, with fewer splits than the one before it, is passed over, as is a line
    being written right now)."""
    train, latest, before = [], {}, {}
    try:
        lines = RunDir(run_dir).metrics_file.read_text().splitlines()
    except OSError:
        return train, latest
    for line in lines:
        try:
            row = json.loads(line)
        except json.JSONDecodeError:
            continue
        if row.get("split") == "train":
            train.append(row)
        elif "split" in row:
            if latest and next(iter(latest.values()))["step"] != row["step"]:
                before, latest = latest, {}
            latest[row["split"]] = row
    return train, latest if len(latest) >= len(before) else before


def _metric_name(run_dir: Path) -> str | None:
    """The main metric of the run's task (None if its config cannot be read)."""
    from hyla.tasks.registry import task_class

    try:
        return task_class(json.loads(RunDir(run_dir).config_file.read_text())["task"]).metric_name
    except (OSError, ValueError, KeyError, TypeError):
        return None


def _evaluation(by_split: dict[str, dict], metric: str | None) -> str:
    """`valid acc 0.4132, ood acc 0.4030`: the main metric per split (every split that has it)."""
    return ", ".join(f"{split} {metric} {row[metric]:.4f}" for split, row in by_split.items() if metric in row)


def training_left(spec: SweepSpec, states: dict[str, str]) -> tuple[list[float], int] | None:
    """(the seconds of training each run not done or failed still needs, at the mean seconds per step of
    the sweep's runs completed in its folder, those left out by --only included; how many completed runs
    set that pace), or None when none has completed there or nothing is left."""
    out, paces = Path(spec.out_dir), []
    for run in replace(spec, only=[]).runs():
        summary = RunDir(out / run.name).read_summary()
        if summary.get("status") == "completed" and summary.get("wall_time_s") and summary.get("step"):
            paces.append(summary["wall_time_s"] / summary["step"])
    steps_left = []
    for run in spec.runs():
        group = STATUS_GROUPS.get(states[run.name], "pending")
        if group not in ("done", "failed"):
            from_scratch = states[run.name] in ("new", "queued", "started")  # started: killed before a checkpoint
            steps = run_steps(spec, run) - (0 if from_scratch else last_train_step(out / run.name))
            steps_left += [steps] if steps > 0 else []
    if not paces or not steps_left:
        return None
    return [statistics.fmean(paces) * steps for steps in steps_left], len(paces)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{math.ceil(seconds / 60)} min"


def runs_to_launch(spec: SweepSpec) -> list[Run]:
    """The runs to launch: not completed, not running now, not queued."""
    states = sweep_status(spec)
    return [r for r in spec.runs() if states[r.name] not in ("completed", "recorded", "running", "queued")]


def run_steps(spec: SweepSpec, run: Run) -> int:
    """The number of training steps of a run of the sweep."""
    from hyla.train.presets import get_preset

    return int(run.overrides.get("train.steps", get_preset(spec.preset).train.steps))


def last_train_step(run: Path) -> int:
    """The step of the last training record in run/metrics.jsonl (0 if none)."""
    try:
        lines = RunDir(run).metrics_file.read_text().splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        if '"split": "train"' in line:
            try:
                return json.loads(line)["step"]
            except json.JSONDecodeError:  # the line being written right now
                continue
    return 0
