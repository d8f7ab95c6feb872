"""The training loop: `train(cfg) -> run folder`.

Read `train` and then `run_steps` top to bottom. `train` builds what a run needs, once: the run
folder (fresh, or from its checkpoint), the task, the model, AdamW and its schedule (`open_run`),
the update function (`choose_update`, hyla.train.step: eager, compiled or whole-step CUDA graphs,
one signature), and the session's records (`Session`: metrics.jsonl, trackers, env.json). Then one
loop, `run_steps`: per step the batch, the update, the schedule's step, and when due a training
record, an evaluation, an analysis and a checkpoint; at the end the final evaluation and
`summary.json`. (`hyla.train.packed` steps several runs' sessions together; `hyla.train.numerics`
sets what a run computes with, `hyla.train.signals` stops it, `hyla.train.progress` shows it.)

What is guaranteed (tests/train/test_exact_resume.py checks each):
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
from pathlib import Path

from hyla.train import distributed
from hyla.train.configs import ConfigError, ExperimentConfig, validate
from hyla.train.numerics import numerics, process_settings, warn_if_changed
from hyla.train.progress import StepProgress
from hyla.train.session import AnalysisHook, NonFiniteLossError, Session, open_run
from hyla.train.signals import StopSignal
from hyla.train.step import Update, choose_update


def train(cfg: ExperimentConfig, analysis_hook: AnalysisHook | None = None) -> Path:
    """Train (or, with cfg.resume, continue) the run described by `cfg`; return its folder.

    `analysis_hook(model, task, step, out_dir, samples) -> dict` runs every
    `train.analysis_every` steps (`hyla train` passes `hyla.analysis.analysis_hook`).
    Raises ConfigError for invalid settings, NonFiniteLossError if the loss diverges, and
    KeyboardInterrupt after checkpointing when interrupted.
    """
    cfg = validate(cfg)
    if cfg.train.analysis_every and analysis_hook is None:
        raise ConfigError("train.analysis_every > 0 needs an analysis hook: train(cfg, hyla.analysis.analysis_hook)")
    ctx = distributed.setup(cfg.train.device)
    try:
        with process_settings(cfg, ctx):
            # the run folder, and the task, model, AdamW and progress (from its checkpoint when resuming)
            folder, start = open_run(cfg, ctx)
            if start is None:
                return folder.path  # complete
            update, update_kind = choose_update(start.trainer, start.progress.step)  # eager, compiled or graphed
            settings = numerics(start.cfg, ctx, update_kind)
            warn_if_changed(start.saved_numerics, settings, folder.path)
            session = Session(start, folder, ctx, analysis_hook, settings)  # env.json, metrics.jsonl, trackers
            return run_steps(session, update)
    finally:
        distributed.teardown(ctx)


def run_steps(session: Session, update: Update) -> Path:
    """The steps of a session: the batch, the update, the schedule's step, then the records,
    evaluation, analysis and checkpoint that are due; at the end the final evaluation (or the stop at
    train.stop_at). A stop signal ends it after the current step, with a checkpoint."""
    s, trainer, t = session, session.trainer, session.cfg.train
    stop = StopSignal()
    try:
        with stop.installed(), StepProgress(s.cfg.model.mixer, t.steps, s.progress.step, s.shows_progress) as shown:
            for step in range(s.progress.step, s.end):
                tick = time.perf_counter()
                batch = trainer.batch(step)
                loss, pred = update(step, batch)
                trainer.scheduler.step()
                s.record_step(step, loss, pred, batch, time.perf_counter() - tick)
                stopping = distributed.any_rank(stop.requested, s.ctx)
                shown.update(step + 1, s.after_step(stopping))
                if stopping:
                    raise stop.stopped()
        return s.finish()
    except NonFiniteLossError as e:
        raise s.diverged(e) from None
    except (KeyboardInterrupt, Exception) as e:
        s.record_stop(e)
        raise
    finally:
        s.close()
