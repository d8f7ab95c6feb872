"""A session of a run: what it starts from (`open_run`: the run folder, task, model, AdamW and
progress, from its checkpoint when resuming) and what it does besides the updates (`Session`):
its records (hyla.train.records), its evaluations (`Evaluation`) and its checkpoints
(`Checkpoints`). The loop that drives a run's session, or a pack's sessions together:
hyla.train.loop.run_steps."""

from __future__ import annotations

import math
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hyla.ops.kernels.common import reset_implementations_ran
from hyla.train import distributed
from hyla.train.configs import ConfigError, ExperimentConfig, build_task, check_resumable, resolve_model
from hyla.train.distributed import DistContext
from hyla.train.evaluate import evaluate
from hyla.train.progress import say
from hyla.train.records import NonFiniteLossError, Records
from hyla.train.run_dir import RunDir, open_run_dir
from hyla.train.step import Trainer

AnalysisHook = Callable[[nn.Module, Any, int, Path, int], dict]


@dataclass
class Progress:
    """What the loop accumulates besides the weights; saved in every checkpoint.

    Losses are global (the mean over ranks) so that every rank holds the same values.
    """

    step: int = 0
    window: list[float] = field(default_factory=list)  # per-step losses since the last training record
    recent: list[float] = field(default_factory=list)  # per-step losses of the last log.train_loss_window steps
    last_eval: dict = field(default_factory=dict)
    metrics_rows: int = 0  # records in metrics.jsonl up to this step
    train_time: float = 0.0  # seconds spent in timed steps (each session's first step is not timed)
    timed_steps: int = 0
    wall_time: float = 0.0  # seconds of earlier sessions


@dataclass
class Start:
    """What a session of a run starts from: the resolved config, the task, the trainer (model,
    AdamW, schedule) and the progress, loaded from the checkpoint when resuming (`saved_numerics`:
    the checkpoint's numerics, empty for a new run)."""

    cfg: ExperimentConfig
    task: Any
    trainer: Trainer
    progress: Progress
    saved_numerics: dict


def open_run(cfg: ExperimentConfig, ctx: DistContext) -> tuple[RunDir, Start | None]:
    """The run folder of `cfg` (new, or resumed from its checkpoint) and what its session starts
    from; None when the run is already complete. Says what trains and where it writes."""
    if cfg.train.batch_size % ctx.world_size:
        raise ConfigError(
            f"train.batch_size={cfg.train.batch_size} must be divisible by the number of ranks ({ctx.world_size})"
        )
    cfg, run, state = open_run_dir(cfg, ctx)
    saved = run.read_config() if cfg.resume and run.config_file.exists() else None
    summary = run.read_summary()
    task = build_task(cfg, ctx.device)  # batches are generated on the training device
    cfg = replace(cfg, model=resolve_model(cfg.model, task))
    check_resumable(saved, cfg, str(run.path))
    if state is not None and summary.get("status") == "completed":
        if ctx.is_main:  # the summary's step: the checkpoint may be the previous one (the latest damaged)
            say(f"{run.path} is complete (step {summary.get('step', state['progress']['step'])}); nothing to do")
        return run, None
    trainer = Trainer(cfg, task, ctx, state)
    progress = Progress(**state["progress"]) if state is not None else Progress()
    if ctx.is_main:
        threads = torch.get_num_threads()
        say(
            f"run {run.path}: {cfg.task} with {cfg.model.mixer}, {trainer.model.num_parameters():,} parameters, "
            f"{'resuming at step ' + str(progress.step) if progress.step else 'from scratch'} "
            f"({ctx.world_size} rank{'s' if ctx.world_size > 1 else ''} on {ctx.device}, "
            f"{threads} thread{'s' if threads > 1 else ''})"
        )
    reset_implementations_ran()
    return run, Start(cfg, task, trainer, progress, state["numerics"] if state is not None else {})


class Session:
    """One session of a run: from `progress.step` to `end` (all steps, or train.stop_at), or a stop.
    Its duties, each an object of its own: `records` (metrics.jsonl and the trackers, env.json,
    summary.json; hyla.train.records), `evaluation` (the splits and the analysis probes) and
    `checkpoints` (when one is due, and writing it). `numerics`: what trains (hyla.train.numerics).
    hyla.train.loop.run_steps drives a run's session, or a pack's sessions together, through
    `records.add_step`, `after_step`, `finish`, `diverged`, `record_stop` and `close`."""

    def __init__(self, start: Start, run: RunDir, ctx: DistContext, analysis_hook: AnalysisHook | None, numerics: dict):
        self.cfg, self.task, self.trainer, self.progress = start.cfg, start.task, start.trainer, start.progress
        self.run_dir, self.ctx = run, ctx
        t, progress = self.cfg.train, self.progress
        self.end = t.stop_at if progress.step < t.stop_at < t.steps else t.steps
        self.shows_progress = ctx.is_main and self.cfg.log.progress
        self.records = Records(start, run, ctx, numerics)
        self.evaluation = Evaluation(start, run, ctx, analysis_hook, self.records)
        self.checkpoints = Checkpoints(start, run, ctx, self.end, self.records)

    def after_step(self, force_checkpoint: bool = False) -> dict | None:
        """What is due after an update: the training record, an evaluation, an analysis, and a
        checkpoint (when due, or forced: a stop). Returns the progress bar's postfix when a
        training record was written."""
        cfg, p = self.cfg, self.progress
        done, steps, every_eval, every_analysis = p.step, cfg.train.steps, cfg.eval.every, cfg.analysis.every
        postfix = None
        if done % cfg.log.every == 0 or done == steps:
            postfix = self.records.write_training()
        if every_eval and done % every_eval == 0 and done < steps:
            p.last_eval = {"step": done, **self.evaluation.splits(cfg.eval.samples)}
        if every_analysis and done % every_analysis == 0:
            self.evaluation.analyze()
        if force_checkpoint or self.checkpoints.due():
            self.checkpoints.save()
        return postfix

    def finish(self) -> Path:
        """Stopped at train.stop_at, or the final evaluation and a completed summary."""
        t, p = self.cfg.train, self.progress
        if p.step < t.steps:
            message = (
                f"stopped at step {p.step} of {t.steps} (train.stop_at); continue with: hyla resume {self.run_dir.path}"
            )
            if self.ctx.is_main:
                say(message)
            self.write_summary("stopped", message=message)
        else:
            result = self.write_summary("completed", final=self.evaluation.splits(self.cfg.eval.final_samples))
            if self.ctx.is_main:
                say(_final_line(result, self.task.metric_name))
        distributed.barrier(self.ctx)  # ranks leave together: none tears down while rank 0 still writes
        return self.run_dir.path

    def diverged(self, error: NonFiniteLossError) -> NonFiniteLossError:
        """Write the "diverged" summary; return the error to raise, saying what is kept."""
        where = (
            f"the last good checkpoint (step {self.checkpoints.step}) is kept in {self.run_dir.checkpoint_file}"
            if self.checkpoints.step is not None
            else "no checkpoint had been written yet"
        )
        message = f"{error}; stopping: {where}. Try a lower --optim.lr or more --optim.warmup_steps."
        self.write_summary("diverged", message=message)
        return NonFiniteLossError(message)

    def record_stop(self, error: BaseException) -> None:
        """Write the summary of a session ended by a stop (KeyboardInterrupt) or by an error."""
        if not isinstance(error, KeyboardInterrupt):
            self.write_summary("failed", message=f"{type(error).__name__}: {error}")
            return
        message = (
            f"interrupted at step {self.progress.step}; continue from the checkpoint of step "
            f"{self.checkpoints.step} with: hyla resume {self.run_dir.path}"
        )
        if self.ctx.is_main:
            say(message)
        self.write_summary("interrupted", message=message)

    def close(self) -> None:
        self.records.close()

    def write_summary(self, status: str, final: dict | None = None, message: str = "") -> dict:
        return self.records.write_summary(status, self.checkpoints.step, final, message)


class Evaluation:
    """A session's evaluations of its model at the current step: every split of the task
    (`splits`), and the analysis hook's probes (`analyze`, into RUN/analysis/), each written to
    the records."""

    def __init__(self, start: Start, run: RunDir, ctx: DistContext, hook: AnalysisHook | None, records: Records):
        self.cfg, self.task, self.model, self.progress = start.cfg, start.task, start.trainer.model, start.progress
        self.folder, self.ctx, self.hook, self.records = run.path / "analysis", ctx, hook, records

    def splits(self, num_samples: int) -> dict:
        results, cfg = {}, self.cfg
        for split in self.task.eval_splits:
            results[split] = evaluate(
                self.model, self.task, split, num_samples, cfg.eval.batch_size, self.ctx, progress=cfg.log.progress
            )
            self.records.write(self.progress.step, split, results[split])
        return results

    def analyze(self) -> None:
        if self.ctx.is_main:
            step, samples = self.progress.step, self.cfg.analysis.samples
            self.records.write(step, "analysis", self.hook(self.model, self.task, step, self.folder, samples))


class Checkpoints:
    """A session's checkpoints: when one is due (every checkpoint.every steps, and at the
    session's end), and writing one; `step`: the last one's (None: none yet)."""

    def __init__(self, start: Start, run: RunDir, ctx: DistContext, end: int, records: Records):
        self.cfg, self.trainer, self.progress = start.cfg, start.trainer, start.progress
        self.run_dir, self.ctx, self.end, self.records = run, ctx, end, records
        self.step = self.progress.step if self.progress.step else None

    def due(self) -> bool:
        return self.progress.step % self.cfg.checkpoint.every == 0 or self.progress.step == self.end

    def save(self) -> None:
        """Checkpoint the weights, optimizer, schedule and progress (rank 0), after checking that the
        loss and the gradients are finite on every rank."""
        self.records.reduce_losses()
        flags = torch.tensor(
            [not all(map(math.isfinite, self.progress.window)), not bool(self.trainer.grad_norm().isfinite())],
            dtype=torch.float32,
        )
        if distributed.all_reduce_max(flags.to(self.ctx.device), self.ctx).any():
            raise NonFiniteLossError(
                f"the training loss or gradient became non-finite before step {self.progress.step}"
            )
        if self.ctx.is_main:
            progress = replace(self.progress, metrics_rows=self.records.log.rows, wall_time=self.records.wall_time())
            self.run_dir.save_checkpoint(
                {
                    **self.trainer.state(),
                    "progress": asdict(progress),
                    "config": asdict(self.cfg),
                    "numerics": self.records.numerics,
                }
            )
        self.step = self.progress.step


def _final_line(summary: dict, metric_name: str) -> str:
    parts = [f"{split} {metric_name}={m.get(metric_name, float('nan')):.4f}" for split, m in summary["final"].items()]
    speed = summary["steps_per_second"]
    return f"done: {', '.join(parts)}; final train loss {summary['train_loss']:.4g}" + (
        f"; {speed:.1f} steps/s" if speed else ""
    )
