"""The training loop: `train(cfg) -> run folder`, and the one loop that steps every run.

Read `train`, `opened_runs` and `run_steps` top to bottom. `opened_runs` builds what runs need,
once: each run folder (fresh, or from its checkpoint), task, model, AdamW and its schedule
(`open_run`), the update function (`choose_update` for a run, hyla.train.step: eager, compiled or
graphed; a pack's: hyla.train.packed), and each run's `Session` (its records: metrics.jsonl,
trackers, env.json). A solo run is a session of one; a pack (hyla.train.packed.train_packed) is
several, stepped together by one update. Then `run_steps`: per step the sessions' batches and
update (`update(trainers, steps)`), their schedules' step, and when due each one's training
record, evaluation, analysis and checkpoint; a session that reaches its end does its final
evaluation and `summary.json` and leaves.
(`hyla.train.numerics` sets what a run computes with, `hyla.train.signals` stops it,
`hyla.train.progress` shows it.)

What is guaranteed (tests/train/test_exact_resume.py checks each; test_packed.py a pack's):
- A run is a pure function of its config and its numerics (threads, device, the compile mode that
  trained, whether CUDA graphs replayed the steps, precision, deterministic mode, world size;
  recorded in env.json): everything random is
  a function of (seed, step). The default thread count is a function of the machine (the cores
  this process may use), never of timing.
- Exact resume: after SIGINT / SIGTERM (the current step, its records, evaluation and analysis
  finish, then a checkpoint is written), `train.stop_at`, kill -9 or a crash (the run continues from
  its last checkpoint), `hyla resume` ends with the same weights, optimizer state, metrics.jsonl
  records and summary as the uninterrupted run — except the timing fields (`steps_per_second`,
  `wall_time_s`) — provided the numerics are unchanged (resume warns when they differ).
"""

from __future__ import annotations

import time
from collections.abc import Callable
from contextlib import contextmanager
from pathlib import Path

from hyla.train import distributed
from hyla.train.configs import ConfigError, ExperimentConfig, validate
from hyla.train.distributed import DistContext
from hyla.train.numerics import numerics, process_settings, warn_if_changed
from hyla.train.progress import StepProgress
from hyla.train.run_dir import RunDir
from hyla.train.session import AnalysisHook, NonFiniteLossError, Session, Start, open_run
from hyla.train.signals import StopSignal
from hyla.train.step import Trainer, Update, choose_update

ChooseUpdate = Callable[[list[Trainer], list[int]], Update]


def train(cfg: ExperimentConfig, analysis_hook: AnalysisHook | None = None) -> Path:
    """Train (or, with cfg.resume, continue) the run described by `cfg`; return its folder.

    `analysis_hook(model, task, step, out_dir, samples) -> dict` runs every
    `analysis.every` steps (`hyla train` passes `hyla.analysis.analysis_hook`).
    Raises ConfigError for invalid settings, NonFiniteLossError if the loss diverges, and
    KeyboardInterrupt after checkpointing when interrupted.
    """
    with opened_runs([validate(cfg)], analysis_hook, choose_update) as ([folder], sessions, update):
        if sessions:
            run_steps(sessions, update)
    return folder


@contextmanager
def opened_runs(cfgs: list[ExperimentConfig], analysis_hook: AnalysisHook | None, choose: ChooseUpdate):
    """The runs of `cfgs` (validated; one, or a pack's members, which share the process settings of
    the first), ready to train under those settings: (their folders, the sessions of those not
    complete, the update `choose(trainers, steps)` returns for them, None without sessions)."""
    if any(cfg.analysis.every for cfg in cfgs) and analysis_hook is None:
        raise ConfigError("analysis.every > 0 needs an analysis hook, e.g. hyla.analysis.analysis_hook")
    ctx = distributed.setup(cfgs[0].train.device)
    try:
        with process_settings(cfgs[0], ctx):
            # each run folder, and the task, model, AdamW and progress (from its checkpoint when resuming)
            opened = [open_run(cfg, ctx) for cfg in cfgs]
            runs = [(folder, start) for folder, start in opened if start is not None]  # (not those complete)
            sessions, update = [], None
            if runs:
                trainers, steps = [s.trainer for _, s in runs], [s.progress.step for _, s in runs]
                update = choose(trainers, steps)  # eager, compiled or graphed (a pack's: batched)
                sessions = [_session(start, folder, ctx, analysis_hook, update.kind) for folder, start in runs]
            yield [folder.path for folder, _ in opened], sessions, update
    finally:
        distributed.teardown(ctx)


def _session(
    start: Start, folder: RunDir, ctx: DistContext, analysis_hook: AnalysisHook | None, update_kind: dict
) -> Session:
    """A run's session, its numerics those of its update (env.json; resume warns when they changed)."""
    settings = numerics(start.cfg, ctx, update_kind)
    warn_if_changed(start.saved_numerics, settings, folder.path)
    return Session(start, folder, ctx, analysis_hook, settings)


def run_steps(sessions: list[Session], update: Update) -> None:
    """Step the sessions together with `update` until each has reached its end (the final
    evaluation, or the stop at train.stop_at), then raise NonFiniteLossError for those that
    diverged (each left with a "diverged" summary when its loss became non-finite; the others go
    on). A stop signal ends them all after the current step, every one with a checkpoint."""
    live, diverged = list(sessions), []
    first, done, total = live[0], min(s.progress.step for s in live), max(s.cfg.train.steps for s in live)
    desc = first.cfg.model.mixer if len(live) == 1 else f"pack of {len(live)}"
    stop = StopSignal()
    try:
        with stop.installed(), StepProgress(desc, total, done, first.shows_progress) as shown:
            while _finish_ended(live):
                # one update of every session, each at its own next step, and its schedule's step
                tick, kind, steps = time.perf_counter(), update.kind, [s.progress.step for s in live]
                results = update([s.trainer for s in live], steps)
                if update.kind != kind:  # a pack's CUDA graph captured anew for the members left, or failed to
                    for session in live:
                        session.records.update_numerics(update.kind)
                for session in live:
                    session.trainer.scheduler.step()
                elapsed = time.perf_counter() - tick
                for session, step, (loss, pred, batch) in zip(live, steps, results):
                    session.records.add_step(step, loss, pred, batch, elapsed)
                stopping = distributed.any_rank(stop.requested, first.ctx)
                postfix = _after_step(live, stopping, diverged)
                done += 1
                shown.update(done, postfix if len(sessions) == 1 else None)
                if stopping and live:  # (a session that diverged on its way out raises that instead)
                    raise stop.stopped()
    except (KeyboardInterrupt, Exception) as e:
        for session in live:
            session.record_stop(e)
        raise
    finally:
        for session in live:
            session.close()
    if diverged:
        raise NonFiniteLossError("; ".join(map(str, diverged)))


def _after_step(sessions: list[Session], stopping: bool, diverged: list) -> dict | None:
    """Each session's records; every one checkpoints when any is due (or on a stop), so that a
    stopped pack resumes with its members at one step. A session whose loss became non-finite
    leaves (its error joins `diverged`). Returns the last training record's progress postfix."""
    force = stopping or any(session.checkpoints.due() for session in sessions)
    postfix = None
    for session in list(sessions):
        try:
            postfix = session.after_step(force)
        except NonFiniteLossError as e:
            diverged.append(session.diverged(e))
            _leave(sessions, session)
    return postfix


def _finish_ended(sessions: list[Session]) -> bool:
    """Finish the sessions at their end (final evaluation, or stop_at); True while any is left."""
    for session in list(sessions):
        if session.progress.step >= session.end:
            session.finish()
            _leave(sessions, session)
    return bool(sessions)


def _leave(sessions: list[Session], session: Session) -> None:
    session.close()
    sessions.remove(session)
