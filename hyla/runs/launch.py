"""Launching a sweep's runs (hyla.runs.sweep plans them and documents the sweep file).

`run_sweep` trains the runs here, `parallel` at a time, each a `hyla` subprocess (`RunJob`), with
progress bars or lines (`RunProgress`); `run_packed_sweep` trains them as packs of runs in worker
processes; `submit_sweep` submits them as a Slurm array job through submitit. On Linux the trainings
of a killed sweep end with it (`end_with_parent`), and a re-run settles the markers it left
(`settle_markers`).
"""

from __future__ import annotations

import functools
import multiprocessing
import os
import shutil
import signal
import subprocess
import sys
import time
from concurrent.futures import ProcessPoolExecutor, ThreadPoolExecutor, wait
from dataclasses import replace
from pathlib import Path
from typing import Any

from hyla.runs import records
from hyla.runs.sweep import (
    Run,
    SweepSpec,
    alive,
    last_train_step,
    local_marker,
    marker_path,
    run_command,
    run_status,
    run_steps,
    runs_to_launch,
    write_marker,
)
from hyla.train.configs import ExperimentConfig
from hyla.train.progress import StepProgress
from hyla.train.run_dir import RunDir
from hyla.train.signals import SWEEP_ENDED, Stopped


def restart_cleanly(run_dir: Path) -> bool:
    """Remove a run folder that has no checkpoint (a run killed before its first one), so that it
    starts again from scratch; whether there was one."""
    run = RunDir(run_dir)
    if not run.exists() or run.has_checkpoint():
        return False
    shutil.rmtree(run_dir)
    return True


def settle_markers(spec: SweepSpec, timeout: float = 60.0) -> None:
    """Before a local sweep launches: remove this host's `.running` markers whose job and training are
    gone (a sweep killed with kill -9 leaves them), and wait up to `timeout` s for the trainings whose
    job is gone (a killed sweep's: they checkpoint and stop, see end_with_parent), so that this sweep
    resumes those runs instead of skipping them as running."""
    deadline, told = time.monotonic() + timeout, False
    while True:
        orphans = []
        for run in spec.runs():
            marker = marker_path(spec, run, "running")
            info = local_marker(marker) if marker.exists() else None
            if info is None or "pid" not in info or alive(info["pid"]):
                continue  # no marker, another host's, or its sweep is alive
            if "training_pid" in info and alive(info["training_pid"]):
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


def keep_record(spec: SweepSpec, name: str) -> None:
    """A completed run's record (hyla.runs.records) and its exported weights
    (hyla.runs.export, into `models/<run name>/`) into the sweep's results folder, if it has
    one: in the source tree, where committing them keeps the run once its folder is gone."""
    from hyla.runs.export import export_run  # export loads the model: only when a run completes

    run_dir = Path(spec.out_dir) / name
    if spec.results and run_status(run_dir) == "completed":
        records.write(records.from_folder(run_dir), spec.results)
        export_run(run_dir, Path(spec.results) / "models" / name, replace=True)


def run_sweep(spec: SweepSpec, dry_run: bool = False, progress: bool = True) -> dict[str, int]:
    """Train every run of the sweep that is not complete, here, `spec.parallel` at a time (each a
    `hyla` subprocess); returns {run name: exit code}. Progress is read from the runs' metrics.jsonl."""
    threads = spec.local_threads()
    out = Path(spec.out_dir)
    if not dry_run:  # a dry run writes nothing
        out.mkdir(parents=True, exist_ok=True)
        settle_markers(spec)
    runs, todo = spec.runs(), runs_to_launch(spec)
    print(
        f"sweep {spec.name}: {len(runs)} runs, {len(runs) - len(todo)} complete or under way, {len(todo)} to run "
        f"({spec.parallel} at once, {threads} threads each) in {out}",
        flush=True,
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


class RunProgress:
    """The progress of a sweep's runs, a `StepProgress` (hyla.train.progress) each: a bar per run on a
    terminal; elsewhere (a log file, CI) a run's lines (step, elapsed time, ETA) at the interval, and
    one when it finishes or fails. `update` is called for launched runs only: a run is timed from
    its first update, and its pace from its first new step (`first`, `every`: StepProgress's)."""

    def __init__(
        self, total_steps: dict[str, int], enabled: bool = True, first: float | None = None, every: float | None = None
    ):
        self.totals, self.enabled, self.first, self.every = total_steps, enabled, first, every
        self.runs: dict[str, StepProgress] = {}  # the launched runs that have not finished

    def update(self, name: str, step: int) -> None:
        if name in self.runs:
            self.runs[name].update(step)
            return
        position = list(self.totals).index(name)
        self.runs[name] = StepProgress(
            name, self.totals[name], step, self.enabled, first=self.first, every=self.every, position=position
        )

    def finished(self, name: str, step: int, code: int) -> None:
        self.update(name, step)
        self.runs.pop(name).close(
            f"finished at step {step}" if code == 0 else f"exited with code {code} at step {step}"
        )

    def close(self) -> None:
        for shown in self.runs.values():
            shown.close()


def run_packed_sweep(
    spec: SweepSpec, configs: dict[str, ExperimentConfig], size: int, dry_run: bool = False
) -> dict[str, int]:
    """Train the runs that are not complete in packs of at most `size` runs that share an
    architecture (hyla.train.packed: one batched model per pack), `spec.parallel` packs at a time,
    each in a process of its own, with the runs' progress (`RunProgress`); returns {run name: exit
    code}. `configs`: every run's config, by name, with `spec.local_threads()` threads
    (hyla.cli.sweep.run_configs). A stopped pack is packed again and resumes exactly."""
    from hyla.train.packed import plan_packs

    threads = spec.local_threads()
    out = Path(spec.out_dir)
    if not dry_run:  # a dry run writes nothing
        out.mkdir(parents=True, exist_ok=True)
        settle_markers(spec)
    runs, todo = spec.runs(), {run.name: run for run in runs_to_launch(spec)}
    print(
        f"sweep {spec.name}: {len(runs)} runs, {len(runs) - len(todo)} complete or under way, {len(todo)} to run "
        f"in packs of at most {size}, {spec.parallel} at a time ({threads} threads each) in {out}",
        flush=True,
    )
    # resume=True: a run with a checkpoint continues from it, a new one starts
    packs = plan_packs([replace(configs[name], resume=True) for name in todo], size)
    for pack in packs:
        print(f"pack: {', '.join(cfg.name for cfg in pack)}", flush=True)
    if dry_run:
        return {}
    for name in todo:
        restart_cleanly(out / name)
    pack_markers = [[marker_path(spec, todo[cfg.name], "running") for cfg in pack] for pack in packs]
    markers = [marker for pack in pack_markers for marker in pack]
    for marker in markers:
        write_marker(marker, pid=os.getpid())
    try:
        _train_packs(spec, packs, pack_markers, RunProgress({name: run_steps(spec, run) for name, run in todo.items()}))
    finally:
        for marker in markers:
            marker.unlink(missing_ok=True)
    for cfg in (cfg for pack in packs for cfg in pack):
        keep_record(spec, cfg.name)
    return {cfg.name: _exit_code(out / cfg.name) for pack in packs for cfg in pack}


def _train_packs(spec: SweepSpec, packs: list[list], pack_markers: list[list[Path]], progress: RunProgress) -> None:
    """Train `packs` in worker processes, `spec.parallel` at a time, showing their members'
    progress (read from their metrics.jsonl) as `run_sweep` shows its runs'."""
    out = Path(spec.out_dir)
    # a fresh interpreter per worker: forking a process whose OpenMP threads are running can hang
    context = multiprocessing.get_context("spawn")
    linux = sys.platform.startswith("linux")
    with ProcessPoolExecutor(
        max_workers=max(1, spec.parallel),
        mp_context=context,
        initializer=end_with_parent if linux else None,
        initargs=(os.getpid(),) if linux else (),
    ) as pool:
        running = {pool.submit(_train_pack, pack, markers): pack for pack, markers in zip(packs, pack_markers)}
        try:
            while running:
                finished, _ = wait(running, timeout=0.5)
                for future in finished:
                    pack = running.pop(future)
                    error = future.result()
                    if error:  # reported; the members' summaries say more, and a rerun resumes them
                        print(f"pack {', '.join(cfg.name for cfg in pack)}: {error}", file=sys.stderr)
                    for cfg in pack:
                        progress.finished(cfg.name, last_train_step(out / cfg.name), _exit_code(out / cfg.name))
                for future, pack in running.items():
                    if future.running():  # launched: queued packs are not timed
                        for cfg in pack:
                            progress.update(cfg.name, last_train_step(out / cfg.name))
        finally:  # on Ctrl-C the workers got it too: the pool waits while they checkpoint and exit
            progress.close()


def _exit_code(run_dir: Path) -> int:
    """A packed run's exit code: 0 when it completed."""
    return 0 if run_status(run_dir) == "completed" else 1


def _train_pack(pack: list, markers: list[Path]) -> str:
    """Train one pack (in a worker process), its members' `markers` naming this process as their
    training; "" or the error it ended with."""
    from hyla.train.packed import train_packed

    for marker in markers:
        write_marker(marker, pid=os.getppid(), training_pid=os.getpid())
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
    todo = runs_to_launch(spec)
    print(f"sweep {spec.name}: {len(spec.runs())} runs, {len(todo)} to submit")
    if dry_run or not todo:
        for r in todo if dry_run else []:
            print(" ".join(run_command(spec, r, threads)))
        return {}
    Path(spec.out_dir).mkdir(parents=True, exist_ok=True)
    with executor.batch():
        jobs = {r.name: executor.submit(RunJob(spec, r, threads)) for r in todo}
    for run in todo:
        write_marker(marker_path(spec, run, "job"), job_id=jobs[run.name].job_id)
    print(
        f"submitted {len(jobs)} jobs ({', '.join(sorted({j.job_id.split('_')[0] for j in jobs.values()}))}); "
        f"follow them with: hyla sweep SPEC --status"
    )
    return jobs


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
        marker, job_id = marker_path(self.spec, self.run, "running"), os.environ.get("SLURM_JOB_ID")
        write_marker(marker, pid=os.getpid(), job_id=job_id)
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
                write_marker(marker, pid=os.getpid(), training_pid=self.process.pid, job_id=job_id)
                code = self.process.wait()
            keep_record(self.spec, self.run.name)
            return code
        finally:
            marker.unlink(missing_ok=True)

    def checkpoint(self, *args, **kwargs):
        import submitit

        if self.process is not None:
            _stop(self.process.pid)
        job_file = marker_path(self.spec, self.run, "job")
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
    (hyla.train.signals.StopSignal), so no run of a killed sweep trains on without it; a re-run resumes it.
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
