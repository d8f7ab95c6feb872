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
the sweep however it ends, kill -9 included (`end_with_parent`: they checkpoint and exit), and a
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
runs (hyla.experiments.records): each run that completes writes its record there, and its final
weights into `<results>/models/<run name>/` (`hyla export`'s safetensors, config.json and
manifest.json; 0.3-1.6 MB a model at the paper's sizes); a run recorded there as completed, with
the same seed and settings, counts as done when its run folder is gone (another machine, a fresh
checkout).

`hyla sweep SPEC --status` shows each run as done, running (its owner is alive), pending (not
started, queued, or stopped cleanly and resumable), stale (killed: its owner is gone, and it ended
without a summary; a re-run resumes or restarts it) or failed, from the run folders:
summary.json's status, and `<run name>.running` (written while a job trains: the pids of the job
and of its training) and `<run name>.job` (a queued Slurm job). It ends with the training left: the
steps the runs not done still need, at the mean seconds per step of the runs completed in the folder.
"""

from __future__ import annotations

import fnmatch
import functools
import itertools
import json
import math
import multiprocessing
import os
import re
import shutil
import signal
import socket
import statistics
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Annotated, Any, Literal

import yaml
from tyro.conf import Positional, arg

from hyla.experiments import records
from hyla.train.loop import SWEEP_ENDED, Stopped
from hyla.train.run_dir import RunDir

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
    """the results folder of this sweep: runs recorded there (hyla.experiments.records) count as done"""
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


def check_configs(spec: SweepSpec, threads: int) -> None:
    """Build and validate every run's config; ConfigError naming the sweep file and the grid or
    overrides entry (else the run) that is invalid, with the valid choices."""
    from hyla.train.configs import ConfigError
    from hyla.train.presets import parse_train_args

    for run in spec.runs():
        for key in run.overrides:
            _check_key(spec, run, key)
        try:
            parse_train_args(train_args(spec, run, threads))
        except ConfigError as e:
            raise ConfigError(f"{spec.source}: {_entry(run, str(e))}: {e}") from None


def _check_key(spec: SweepSpec, run: Run, key: str) -> None:
    """ConfigError unless `key` names a config field ("section.field"), listing the valid ones."""
    import dataclasses
    import typing

    from hyla.train.configs import ConfigError, ExperimentConfig

    kind, path = ExperimentConfig, []
    for part in key.split("."):
        names = [f.name for f in dataclasses.fields(kind)] if dataclasses.is_dataclass(kind) else []
        if part not in names:
            where = f"fields of {'.'.join(path)}" if path else "sections and fields"
            raise ConfigError(
                f"{spec.source}: {_where(run, key)} entry {key}: unknown key; valid {where}: {', '.join(names)}"
            )
        kind, path = typing.get_type_hints(kind)[part], [*path, part]


def _where(run: Run, key: str) -> str:
    return "grid" if key in run.point else "overrides"


def _entry(run: Run, message: str) -> str:
    """The sweep-file entry that an error message names first, grid entries before overrides (they
    are what differs from the runs that pass), else the run."""
    found = {}
    for key in run.overrides:
        match = re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", message)
        if match:
            found[key] = (key not in run.point, match.start())
    if not found:
        return f"run {run.name}"
    key = min(found, key=found.get)
    return f"{_where(run, key)} entry {key}: {run.overrides[key]!r} (run {run.name})"


def run_command(spec: SweepSpec, run: Run, threads: int) -> list[str]:
    """The `hyla` command line that trains (or resumes) one run of the sweep."""
    run_dir = Path(spec.out_dir) / run.name
    hyla = [sys.executable, "-m", "hyla.cli"]
    if RunDir(run_dir).has_checkpoint():
        threads = run.overrides.get("train.threads", threads)  # what `train_args` gave it
        return hyla + ["resume", str(run_dir), "--train.no-progress", "--train.threads", str(threads)]
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
        "--train.no-progress",
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


def restart_cleanly(run_dir: Path) -> bool:
    """Remove a run folder that has no checkpoint (a run killed before its first one), so that it
    starts again from scratch; whether there was one."""
    run = RunDir(run_dir)
    if not run.exists() or run.has_checkpoint():
        return False
    shutil.rmtree(run_dir)
    return True


def _marker(spec: SweepSpec, run: Run, kind: str) -> Path:
    """`<out_dir>/<run>.running` (a job trains it now) or `<out_dir>/<run>.job` (queued on Slurm)."""
    return Path(spec.out_dir) / f"{run.name}.{kind}"


def _write_marker(path: Path, **info) -> None:
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
    info = _local_marker(marker)
    return info is None or any(_alive(info[key]) for key in ("pid", "training_pid") if key in info)


def _local_marker(marker: Path) -> dict | None:
    """The marker's content if it was written on this host, else None."""
    info = json.loads(marker.read_text() or "{}")
    return info if info.get("host") == socket.gethostname() else None


def settle_markers(spec: SweepSpec, timeout: float = 60.0) -> None:
    """Before a local sweep launches: remove this host's `.running` markers whose job and training are
    gone (a sweep killed with kill -9 leaves them), and wait up to `timeout` s for the trainings whose
    job is gone (a killed sweep's: they checkpoint and stop, see end_with_parent), so that this sweep
    resumes those runs instead of skipping them as running."""
    deadline, told = time.monotonic() + timeout, False
    while True:
        orphans = []
        for run in spec.runs():
            marker = _marker(spec, run, "running")
            info = _local_marker(marker) if marker.exists() else None
            if info is None or "pid" not in info or _alive(info["pid"]):
                continue  # no marker, another host's, or its sweep is alive
            if "training_pid" in info and _alive(info["training_pid"]):
                orphans.append(run.name)
            else:
                marker.unlink(missing_ok=True)
        if not orphans:
            return
        if time.monotonic() >= deadline:
            print(f"still training after {timeout:.0f} s, left as running: {', '.join(orphans)}", file=sys.stderr)
            return
        if not told:
            print(f"waiting for the trainings of a killed sweep to stop: {', '.join(orphans)}", file=sys.stderr)
            told = True
        time.sleep(0.2)


def _alive(pid: int) -> bool:
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
        job, summary = _marker(spec, run, "job"), RunDir(out / run.name).summary_file
        if _running(_marker(spec, run, "running")):
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
        if state == "running":  # its summary is a past session's: the step it logged last
            progress = f"step {last_train_step(run_dir)}/{run_steps(spec, run)}"
        else:
            summary = RunDir(run_dir).read_summary()
            progress = f"step {summary['step']}/{summary['steps']}" if "step" in summary else ""
        print(f"{run.name:<{width}}  {STATUS_GROUPS.get(state, 'pending'):<8} {state:<12} {progress}".rstrip())
    counts = {group: 0 for group in ("done", "running", "pending", "stale", "failed")}
    for state in states.values():
        counts[STATUS_GROUPS.get(state, "pending")] += 1
    print(f"sweep {spec.name}: " + ", ".join(f"{n} {group}" for group, n in counts.items()) + f" ({spec.out_dir})")
    left = training_left(spec, states)
    if left:
        seconds, paced_by = left
        at_once = f" ({_hours(seconds / spec.parallel)} with {spec.parallel} at once)" if spec.parallel > 1 else ""
        print(
            f"training left: about {_hours(seconds)} one run at a time{at_once}, at the mean pace of the "
            f"{paced_by} run{'s' if paced_by > 1 else ''} completed in {spec.out_dir}"
        )
    return counts


def training_left(spec: SweepSpec, states: dict[str, str]) -> tuple[float, int] | None:
    """(seconds of training the runs not done or failed still need, one after another, at the mean
    seconds per step of the sweep's runs completed in its folder, those left out by --only included;
    how many completed runs set that pace), or None when none has completed there or nothing is left."""
    out, paces = Path(spec.out_dir), []
    for run in replace(spec, only=[]).runs():
        summary = RunDir(out / run.name).read_summary()
        if summary.get("status") == "completed" and summary.get("wall_time_s") and summary.get("step"):
            paces.append(summary["wall_time_s"] / summary["step"])
    steps_left = 0
    for run in spec.runs():
        group = STATUS_GROUPS.get(states[run.name], "pending")
        if group not in ("done", "failed"):
            from_scratch = states[run.name] in ("new", "queued", "started")  # started: killed before a checkpoint
            steps_left += run_steps(spec, run) - (0 if from_scratch else last_train_step(out / run.name))
    if not paces or steps_left <= 0:
        return None
    return statistics.fmean(paces) * steps_left, len(paces)


def _hours(seconds: float) -> str:
    return f"{seconds / 3600:.1f} h" if seconds >= 3600 else f"{math.ceil(seconds / 60)} min"


class RunJob:
    """Trains one run of a sweep in a subprocess, logging to `<run>.log`; what every launcher runs.

    Returns the exit code. Under submitit (Slurm), a preemption or the time limit calls `checkpoint`
    first: the training gets SIGTERM (it saves a checkpoint and exits) and the returned copy of
    this job is requeued; it resumes, because `run_command` resumes a run that has a checkpoint.
    """

    def __init__(self, spec: SweepSpec, run: Run, threads: int):
        self.spec, self.run, self.threads = spec, run, threads
        self.process: subprocess.Popen | None = None

    def __call__(self) -> int:
        marker, job_id = _marker(self.spec, self.run, "running"), os.environ.get("SLURM_JOB_ID")
        _write_marker(marker, pid=os.getpid(), job_id=job_id)
        try:
            with open(Path(self.spec.out_dir) / f"{self.run.name}.log", "a") as log:
                if restart_cleanly(Path(self.spec.out_dir) / self.run.name):
                    log.write(f"{self.run.name}: killed before its first checkpoint; starting again from scratch\n")
                    log.flush()
                self.process = subprocess.Popen(
                    run_command(self.spec, self.run, self.threads),
                    stdout=log,
                    stderr=subprocess.STDOUT,
                    preexec_fn=stop_with_parent(),
                )
                _write_marker(marker, pid=os.getpid(), training_pid=self.process.pid, job_id=job_id)
                code = self.process.wait()
            keep_record(self.spec, self.run.name)
            return code
        finally:
            marker.unlink(missing_ok=True)

    def checkpoint(self, *args, **kwargs):
        import submitit

        if self.process is not None:
            _stop(self.process.pid)
        job_file = _marker(self.spec, self.run, "job")
        if job_file.exists():
            job_file.touch()  # queued again: newer than the summary the interrupted training wrote
        return submitit.helpers.DelayedSubmission(RunJob(self.spec, self.run, self.threads))

    def __getstate__(self):
        return {**self.__dict__, "process": None}  # a process handle does not travel to the requeued job


PR_SET_PDEATHSIG = 1  # prctl(2)


@functools.cache
def _prctl():
    import ctypes

    return ctypes.CDLL(None, use_errno=True).prctl


def end_with_parent(parent: int) -> None:
    """In a child of process `parent`, on Linux: SWEEP_ENDED (SIGUSR1) when the thread that started it
    ends, with its process, however that ends (kill -9 included). A training then checkpoints and exits
    (hyla.train.loop.StopSignal), so no run of a killed sweep trains on without it; a re-run resumes it.
    Not SIGTERM: the signal comes again each time the child passes to another thread of the dying
    parent, and a second SIGTERM aborts a training at once."""
    _prctl()(PR_SET_PDEATHSIG, int(SWEEP_ENDED))
    if os.getppid() != parent:  # the parent died before the signal was set
        os.kill(os.getpid(), SWEEP_ENDED)


def stop_with_parent():
    """The `preexec_fn` for Popen that calls end_with_parent in the child on Linux; elsewhere None
    (there the trainings of a killed sweep run to their end)."""
    if not sys.platform.startswith("linux"):
        return None
    _prctl()  # looked up here, before the fork: the child only calls it
    return functools.partial(end_with_parent, os.getpid())


def _stop(pid: int, timeout: float = 60.0) -> None:
    """SIGTERM the training (it saves a checkpoint at the end of its step) and wait for it to exit;
    SIGKILL after `timeout` s (Slurm's warning comes 90 s before its kill). Waits with os.waitpid,
    not Popen.wait: this runs in a signal handler that interrupted a Popen.wait holding its lock."""
    try:
        os.kill(pid, signal.SIGTERM)
        deadline = time.monotonic() + timeout
        while time.monotonic() < deadline:
            if os.waitpid(pid, os.WNOHANG)[0]:
                return
            time.sleep(0.1)
        os.kill(pid, signal.SIGKILL)
        os.waitpid(pid, 0)
    except (ProcessLookupError, ChildProcessError):
        pass  # it had already exited


def keep_record(spec: SweepSpec, name: str) -> None:
    """A completed run's record (hyla.experiments.records) and its exported weights
    (hyla.experiments.export, into `models/<run name>/`) into the sweep's results folder, if it has
    one: in the source tree, where committing them keeps the run once its folder is gone."""
    from hyla.experiments.export import export_run  # export loads the model: only when a run completes

    run_dir = Path(spec.out_dir) / name
    if spec.results and run_status(run_dir) == "completed":
        records.write(records.from_folder(run_dir), spec.results)
        export_run(run_dir, Path(spec.results) / "models" / name, replace=True)


def _todo(spec: SweepSpec) -> list[Run]:
    """The runs to launch: not completed, not running now, not queued."""
    states = sweep_status(spec)
    return [r for r in spec.runs() if states[r.name] not in ("completed", "recorded", "running", "queued")]


def run_sweep(spec: SweepSpec, dry_run: bool = False, progress: bool = True) -> dict[str, int]:
    """Train every run of the sweep that is not complete, here, `spec.parallel` at a time (each a
    `hyla` subprocess); returns {run name: exit code}. Progress is read from the runs' metrics.jsonl."""
    threads = spec.local_threads()
    check_configs(spec, threads)
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not dry_run:
        settle_markers(spec)
    runs, todo = spec.runs(), _todo(spec)
    print(
        f"sweep {spec.name}: {len(runs)} runs, {len(runs) - len(todo)} complete or under way, {len(todo)} to run "
        f"({spec.parallel} at once, {threads} threads each) in {out}"
    )
    if dry_run:
        for r in todo:
            print(" ".join(run_command(spec, r, threads)))
        return {}
    codes = {}
    bars = RunProgress({r.name: run_steps(spec, r) for r in todo}, progress)
    with ThreadPoolExecutor(max_workers=max(1, spec.parallel)) as pool:
        running = {pool.submit(RunJob(spec, r, threads)): r.name for r in todo}
        try:
            while running:
                finished, _ = wait(running, timeout=0.5)
                for future in finished:
                    name = running.pop(future)
                    codes[name] = future.result()
                    bars.finished(name, last_train_step(out / name), codes[name])
                for future, name in running.items():
                    if future.running():  # launched: queued runs are not timed
                        bars.update(name, last_train_step(out / name))
        finally:  # on Ctrl-C the runs got it too: the pool waits while they checkpoint and exit
            bars.close()
    failed = {n: c for n, c in codes.items() if c != 0}
    if failed:
        print(f"{len(failed)} runs failed (see their .log files): {', '.join(failed)}", file=sys.stderr)
    return codes


def run_steps(spec: SweepSpec, run: Run) -> int:
    """The number of training steps of a run of the sweep."""
    from hyla.train.presets import get_preset

    return int(run.overrides.get("train.steps", get_preset(spec.preset).train.steps))


class RunProgress:
    """One progress bar per run (steps) on a terminal. Elsewhere (a log file, CI) bars redrawn in place
    would garble the output: each run gets a line (step, elapsed time) when it first makes progress, then
    (with its ETA) at most every `every` seconds, and one when it finishes.

    `update` is called for launched runs only: a run is timed from its first update. Its first interval
    (up to the first new step seen) holds its start (imports, building, a resumed run's loading) and steps
    that may have been written in one go, so the ETA comes from the pace measured after it."""

    def __init__(self, total_steps: dict[str, int], enabled: bool = True, every: float = 30.0):
        self.as_lines = enabled and not sys.stderr.isatty()
        self.totals, self.every = total_steps, every
        self.started: dict[str, tuple[float, int]] = {}  # name -> (time, step) of its first update
        self.paced_from: dict[str, tuple[float, int]] = {}  # name -> (time, step) of its first new step
        self.last_line: dict[str, float] = {}
        self.bars = {}
        if enabled and not self.as_lines:
            from tqdm.auto import tqdm

            self.bars = {
                name: tqdm(total=total, desc=name, position=position, unit="step", dynamic_ncols=True, leave=True)
                for position, (name, total) in enumerate(total_steps.items())
            }

    def update(self, name: str, step: int) -> None:
        now = time.monotonic()
        start_step = self.started.setdefault(name, (now, step))[1]
        if name not in self.paced_from and step > start_step:
            self.paced_from[name] = (now, step)
            self._restart_bar_clock(name, step)
        self._advance_bar(name, step)
        if step > start_step and self.as_lines and now - self.last_line.get(name, -math.inf) >= self.every:
            self.last_line[name] = now
            print(self._line(name, step, now), file=sys.stderr, flush=True)

    def _line(self, name: str, step: int, now: float) -> str:
        """`name: step S/N, 1m05s elapsed, ETA 2m10s` (no ETA until the pace is measured)."""
        total, elapsed = self.totals[name], now - self.started[name][0]
        line = f"{name}: step {step}/{total}, {_duration(elapsed)} elapsed"
        since, paced_step = self.paced_from[name]
        if step > paced_step:
            line += f", ETA {_duration((now - since) / (step - paced_step) * (total - step))}"
        return line

    def _restart_bar_clock(self, name: str, step: int) -> None:
        """A bar's rate and ETA from here on: not from the first interval's jump."""
        bar = self.bars.get(name)
        if bar is not None:
            bar.reset(total=bar.total)
            bar.initial = bar.n = bar.last_print_n = step
            bar.refresh()

    def _advance_bar(self, name: str, step: int) -> None:
        bar = self.bars.get(name)
        if bar is not None and step > bar.n:
            bar.update(step - bar.n)

    def finished(self, name: str, step: int, code: int) -> None:
        self._advance_bar(name, step)
        if self.as_lines:
            outcome = "finished" if code == 0 else f"exited with code {code}"
            print(f"{name}: {outcome} at step {step}", file=sys.stderr, flush=True)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def _duration(seconds: float) -> str:
    minutes, seconds = divmod(int(seconds), 60)
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


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


def run_packed_sweep(spec: SweepSpec, size: int, dry_run: bool = False) -> dict[str, int]:
    """Train the runs that are not complete in packs of at most `size` runs that share an
    architecture (hyla.train.packed: one batched model per pack), `spec.parallel` packs at a time,
    each in a process of its own; returns {run name: exit code}. A stopped pack is packed again and
    resumes exactly."""
    from hyla.train.packed import plan_packs
    from hyla.train.presets import parse_train_args

    threads = spec.local_threads()
    check_configs(spec, threads)
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    if not dry_run:
        settle_markers(spec)
    runs, todo = spec.runs(), {run.name: run for run in _todo(spec)}
    # resume=True: a run with a checkpoint continues from it, a new one starts
    packs = plan_packs(
        [replace(parse_train_args(train_args(spec, run, threads))[0], resume=True) for run in todo.values()], size
    )
    print(
        f"sweep {spec.name}: {len(runs)} runs, {len(runs) - len(todo)} complete or under way, {len(todo)} to run "
        f"in {len(packs)} packs of at most {size}, {spec.parallel} at a time ({threads} threads each) in {out}"
    )
    for pack in packs:
        print(f"pack: {', '.join(cfg.name for cfg in pack)}", flush=True)
    if dry_run:
        return {}
    for name in todo:
        restart_cleanly(out / name)
    pack_markers = [[_marker(spec, todo[cfg.name], "running") for cfg in pack] for pack in packs]
    markers = [marker for pack in pack_markers for marker in pack]
    for marker in markers:
        _write_marker(marker, pid=os.getpid())
    # a fresh interpreter per worker: forking a process whose OpenMP threads are running can hang
    context = multiprocessing.get_context("spawn")
    linux = sys.platform.startswith("linux")
    try:
        with ProcessPoolExecutor(
            max_workers=max(1, spec.parallel),
            mp_context=context,
            initializer=end_with_parent if linux else None,
            initargs=(os.getpid(),) if linux else (),
        ) as pool:
            for pack, error in zip(packs, pool.map(_train_pack, packs, pack_markers)):
                if error:  # reported; the members' summaries say more, and a rerun resumes them
                    print(f"pack {', '.join(cfg.name for cfg in pack)}: {error}", file=sys.stderr)
    finally:
        for marker in markers:
            marker.unlink(missing_ok=True)
    for cfg in (cfg for pack in packs for cfg in pack):
        keep_record(spec, cfg.name)
    return {cfg.name: 0 if run_status(out / cfg.name) == "completed" else 1 for pack in packs for cfg in pack}


def _train_pack(pack: list, markers: list[Path]) -> str:
    """Train one pack (in a worker process), its members' `markers` naming this process as their
    training; "" or the error it ended with."""
    from hyla.train.packed import train_packed

    for marker in markers:
        _write_marker(marker, pid=os.getppid(), training_pid=os.getpid())
    try:
        train_packed(pack)
    except Stopped as e:
        if e.signum == SWEEP_ENDED:  # the sweep is gone: no one to report to, and the worker would wait for work
            sys.stdout.flush()
            sys.stderr.flush()
            os._exit(128 + e.signum)
        raise
    except Exception as e:  # noqa: BLE001 - the error of one pack must not stop the others
        return f"{type(e).__name__}: {e}"
    return ""


def slurm_executor(spec: SweepSpec):
    """A submitit executor for Slurm with the spec's `slurm` parameters (job logs in <out_dir>/submitit/)."""
    from hyla.train.configs import ConfigError

    try:
        import submitit
    except ImportError:
        raise ConfigError("--launcher slurm needs submitit: pip install 'hyla[slurm]'") from None
    try:
        executor = submitit.AutoExecutor(folder=Path(spec.out_dir) / "submitit", cluster="slurm")
    except RuntimeError as e:  # no Slurm here
        raise ConfigError(f"--launcher slurm: {e}") from None
    executor.update_parameters(**{"name": spec.name, "timeout_min": 240, **spec.slurm})
    return executor


def submit_sweep(spec: SweepSpec, executor, dry_run: bool = False) -> dict[str, Any]:
    """Submit every run that is not complete, running or queued as a job of `executor` (a submitit
    executor: Slurm, or the local one in tests), all in one array; returns {run name: job}."""
    threads = int(spec.slurm.get("cpus_per_task", 0))  # 0: torch's default
    check_configs(spec, threads)
    Path(spec.out_dir).mkdir(parents=True, exist_ok=True)
    todo = _todo(spec)
    print(f"sweep {spec.name}: {len(spec.runs())} runs, {len(todo)} to submit")
    if dry_run or not todo:
        for r in todo if dry_run else []:
            print(" ".join(run_command(spec, r, threads)))
        return {}
    with executor.batch():
        jobs = {r.name: executor.submit(RunJob(spec, r, threads)) for r in todo}
    for run in todo:
        _write_marker(_marker(spec, run, "job"), job_id=jobs[run.name].job_id)
    print(
        f"submitted {len(jobs)} jobs ({', '.join(sorted({j.job_id.split('_')[0] for j in jobs.values()}))}); "
        f"follow them with: hyla sweep SPEC --status"
    )
    return jobs


@dataclass
class SweepOptions:
    """Train a grid of runs from a sweep file (YAML, see `hyla/experiments/sweep.py`), skipping finished ones:
    locally, several at once, or as Slurm jobs."""

    spec: Positional[Path]
    """sweep file (YAML)"""
    launcher: Literal["local", "slurm"] = "local"
    """where runs train"""
    status: bool = False
    """show which runs are done, running, pending and failed, and exit"""
    parallel: Annotated[int | None, arg(help_behavior_hint="(default: the file's)")] = None
    """runs at once with the local launcher, or with --pack packs at once, each in its own process"""
    threads: Annotated[int | None, arg(help_behavior_hint="(default: this machine's cores / parallel)")] = None
    """CPU threads of each run or pack; lower it when other work shares the machine"""
    out_dir: Annotated[str | None, arg(help_behavior_hint="(default: the file's)")] = None
    """parent folder of the sweep's run folders"""
    pack: Annotated[int | None, arg(help_behavior_hint="(default: no packs)")] = None
    """train runs that share an architecture as packs of up to N (one batched model each), --parallel packs at
    a time, local launcher"""
    only: list[str] = field(default_factory=list)
    """train (or with --status, show) only the runs whose names match one of these glob patterns, e.g.
    'mixer-hyla__*' or mixer-hyla__s0 (the names --status lists)"""
    dry_run: bool = False
    """print the commands, run nothing"""

    def __post_init__(self):
        from hyla.train.configs import check_positive

        check_positive(parallel=self.parallel, threads=self.threads, pack=self.pack)


def main(argv: list[str]) -> int:
    from hyla.train.configs import ConfigError, parse_options

    args = parse_options(SweepOptions, argv, "hyla sweep")
    try:
        spec = SweepSpec.load(args.spec)
        spec.select(args.only)
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise ConfigError(f"{args.spec}: {e}") from None
    if args.parallel:
        spec.parallel = args.parallel
    spec.threads = args.threads
    if args.out_dir:
        spec.out_dir = args.out_dir
    if args.status:
        print_status(spec)
        return 0
    if args.pack and args.launcher != "local":
        raise ConfigError("--pack works with the local launcher")
    if args.launcher == "slurm":
        submit_sweep(spec, slurm_executor(spec), args.dry_run)
        return 0
    codes = run_packed_sweep(spec, args.pack, args.dry_run) if args.pack else run_sweep(spec, args.dry_run)
    return 1 if any(codes.values()) else 0
