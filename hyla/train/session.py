"""A session of a run: what it starts from (`open_run`: the run folder, task, model, AdamW and
progress, from its checkpoint when resuming) and what it records as it trains (`Session`: training
records, evaluations, analyses, checkpoints, env.json and summary.json). The loop that drives it:
hyla.train.loop.run_steps (a pack's: hyla.train.packed)."""

from __future__ import annotations

import math
import time
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn

from hyla.ops.kernels.common import implementations_ran, reset_implementations_ran
from hyla.train import distributed
from hyla.train.configs import ConfigError, ExperimentConfig, build_task, check_resumable, resolve_model
from hyla.train.distributed import DistContext
from hyla.train.evaluate import evaluate
from hyla.train.progress import say
from hyla.train.run_dir import RunDir, environment, open_run_dir
from hyla.train.step import Trainer
from hyla.train.trackers import open_trackers

AnalysisHook = Callable[[nn.Module, Any, int, Path, int], dict]


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or inf; the run stopped and kept its last good checkpoint."""


@dataclass
class Progress:
    """What the loop accumulates besides the weights; saved in every checkpoint.

    Losses are global (the mean over ranks) so that every rank holds the same values.
    """

    step: int = 0
    window: list[float] = field(default_factory=list)  # per-step losses since the last training record
    recent: list[float] = field(default_factory=list)  # per-step losses of the last train_loss_window steps
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
    It keeps the run's records: the training records, evaluations, analyses, checkpoints, env.json
    and summary.json (rank 0 writes the files, and opens metrics.jsonl and the trackers at once).
    `numerics`: what trains (hyla.train.numerics). hyla.train.loop.run_steps drives it, a pack
    (hyla.train.packed) several at once, through `record_step`, `after_step`, `finish`, `diverged`,
    `record_stop` and `close`."""

    def __init__(self, start: Start, run: RunDir, ctx: DistContext, analysis_hook: AnalysisHook | None, numerics: dict):
        self.cfg, self.task, self.trainer, self.progress = start.cfg, start.task, start.trainer, start.progress
        self.run_dir, self.ctx, self.analysis_hook, self.numerics = run, ctx, analysis_hook, numerics
        t, progress = self.cfg.train, self.progress
        self.end = t.stop_at if progress.step < t.stop_at < t.steps else t.steps
        self.shows_progress = ctx.is_main and t.progress
        self.pending: list[torch.Tensor] = []  # this rank's losses not yet reduced into progress
        self.session_start, self.first_step = time.perf_counter(), progress.step
        self.window_time, self.window_timed_steps = 0.0, 0
        self.checkpoint_step = progress.step if progress.step else None
        self.log = None
        if ctx.is_main:
            trackers = open_trackers(self.cfg, run.path)
            self.log = run.open_log(self.cfg, environment(numerics), progress.step, progress.metrics_rows, trackers)

    def record_step(self, step: int, loss: torch.Tensor, pred: torch.Tensor, batch, elapsed: float) -> None:
        """Account for update number `step`, which took `elapsed` seconds: loss, last batch, timing."""
        self.pending.append(loss)
        self.last_pred, self.last_batch = pred, batch
        if step == self.first_step:  # what attention ran is known now (a fast path may fall back)
            self.update_numerics({"attention": implementations_ran()})
        self.progress.step = step + 1
        if step > self.first_step:  # the session's first step includes warm-ups (the optimizer's first step)
            self.progress.train_time += elapsed
            self.progress.timed_steps += 1
            self.window_time += elapsed
            self.window_timed_steps += 1

    def after_step(self, force_checkpoint: bool = False) -> dict | None:
        """What is due after an update: the training record, an evaluation, an analysis, and a
        checkpoint (when due, or forced: a stop). Returns the progress bar's postfix when a
        training record was written."""
        t, p = self.cfg.train, self.progress
        done, postfix = p.step, None
        if done % t.log_every == 0 or done == t.steps:
            postfix = self.log_training()
        if t.eval_every and done % t.eval_every == 0 and done < t.steps:
            p.last_eval = {"step": done, **self.evaluate_all(t.eval_samples)}
        if t.analysis_every and done % t.analysis_every == 0:
            self.analyze()
        if force_checkpoint or self.checkpoint_due():
            self.save()
        return postfix

    def update_numerics(self, changes: dict) -> None:
        """What trains, learned as the session goes (the attention that ran; a pack's CUDA graphs that
        failed to capture), into the numerics of env.json and of the checkpoints."""
        if any(self.numerics.get(key) != value for key, value in changes.items()):
            self.numerics = {**self.numerics, **changes}
            if self.ctx.is_main:
                self.run_dir.write_env(environment(self.numerics), self.first_step, same_session=True)

    def checkpoint_due(self) -> bool:
        return self.progress.step % self.cfg.train.checkpoint_every == 0 or self.progress.step == self.end

    def reduce_losses(self) -> None:
        """Move this rank's pending losses, averaged over ranks, into the progress windows."""
        if not self.pending:
            return
        losses = distributed.all_reduce_sum(torch.stack(self.pending).double(), self.ctx) / self.ctx.world_size
        self.pending = []
        values = losses.tolist()
        self.progress.window += values
        self.progress.recent = (self.progress.recent + values)[-self.cfg.train.train_loss_window :]

    def log_training(self) -> dict:
        """Write the training record (mean loss since the last one, all ranks; metrics of the last
        batch; gradient norm; learning rate) and return the progress bar's postfix."""
        p = self.progress
        self.reduce_losses()
        loss = sum(p.window) / len(p.window)
        if not math.isfinite(loss):
            raise NonFiniteLossError(
                f"the training loss became non-finite ({loss}) "
                f"between step {p.step - len(p.window) + 1} and step {p.step}"
            )
        record = {
            "loss": loss,
            **_batch_metrics(self.task, self.last_pred, self.last_batch, self.ctx),
            "grad_norm": float(self.trainer.grad_norm()),
            "lr": self.trainer.optimizer.param_groups[0]["lr"],  # the rate of the next update
            "steps_per_second": self.window_timed_steps / self.window_time if self.window_time > 0 else None,
        }
        p.window = []
        self.window_time, self.window_timed_steps = 0.0, 0
        self.write(p.step, "train", record)
        return _postfix(record, self.task.metric_name, p.last_eval)

    def evaluate_all(self, num_samples: int) -> dict:
        results = {}
        for split in self.task.eval_splits:
            results[split] = evaluate(
                self.trainer.model,
                self.task,
                split,
                num_samples,
                self.cfg.train.eval_batch_size,
                self.ctx,
                progress=self.cfg.train.progress,
            )
            self.write(self.progress.step, split, results[split])
        return results

    def analyze(self) -> None:
        if self.ctx.is_main:
            t = self.cfg.train
            result = self.analysis_hook(
                self.trainer.model, self.task, self.progress.step, self.run_dir.path / "analysis", t.analysis_samples
            )
            self.write(self.progress.step, "analysis", result)

    def save(self) -> None:
        """Checkpoint the weights, optimizer, schedule and progress (rank 0), after checking that the
        loss and the gradients are finite on every rank."""
        self.reduce_losses()
        flags = torch.tensor(
            [not all(map(math.isfinite, self.progress.window)), not bool(self.trainer.grad_norm().isfinite())],
            dtype=torch.float32,
        )
        if distributed.all_reduce_max(flags.to(self.ctx.device), self.ctx).any():
            raise NonFiniteLossError(
                f"the training loss or gradient became non-finite before step {self.progress.step}"
            )
        if self.ctx.is_main:
            progress = replace(self.progress, metrics_rows=self.log.rows, wall_time=self.wall_time())
            self.run_dir.save_checkpoint(
                {
                    **self.trainer.state(),
                    "progress": asdict(progress),
                    "config": asdict(self.cfg),
                    "numerics": self.numerics,
                }
            )
        self.checkpoint_step = self.progress.step

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
            result = self.write_summary("completed", final=self.evaluate_all(t.final_eval_samples))
            if self.ctx.is_main:
                say(_final_line(result, self.task.metric_name))
        distributed.barrier(self.ctx)  # ranks leave together: none tears down while rank 0 still writes
        return self.run_dir.path

    def diverged(self, error: NonFiniteLossError) -> NonFiniteLossError:
        """Write the "diverged" summary; return the error to raise, saying what is kept."""
        where = (
            f"the last good checkpoint (step {self.checkpoint_step}) is kept in {self.run_dir.checkpoint_file}"
            if self.checkpoint_step is not None
            else "no checkpoint had been written yet"
        )
        message = f"{error}; stopping: {where}. Try a lower --train.lr or more --train.warmup_steps."
        self.write_summary("diverged", message=message)
        return NonFiniteLossError(message)

    def record_stop(self, error: BaseException) -> None:
        """Write the summary of a session ended by a stop (KeyboardInterrupt) or by an error."""
        if not isinstance(error, KeyboardInterrupt):
            self.write_summary("failed", message=f"{type(error).__name__}: {error}")
            return
        message = (
            f"interrupted at step {self.progress.step}; continue from the checkpoint of step "
            f"{self.checkpoint_step} with: hyla resume {self.run_dir.path}"
        )
        if self.ctx.is_main:
            say(message)
        self.write_summary("interrupted", message=message)

    def close(self) -> None:
        if self.log is not None:
            self.log.close()

    def write(self, step: int, split: str, record: dict) -> None:
        if self.log is not None:
            self.log.write(step, split, record)

    def wall_time(self) -> float:
        return self.progress.wall_time + time.perf_counter() - self.session_start

    def write_summary(self, status: str, final: dict | None = None, message: str = "") -> dict:
        self.reduce_losses()
        p, t = self.progress, self.cfg.train
        summary = {
            "status": status,
            "step": p.step,
            "steps": t.steps,
            "task": self.cfg.task,
            "mixer": self.cfg.model.mixer,
            "preset": self.cfg.preset,
            "metric_name": self.task.metric_name,
            "num_parameters": self.trainer.model.num_parameters(),
            "final": final or {},
            "last_eval": p.last_eval,
            "train_loss": sum(p.recent) / len(p.recent) if p.recent else None,
            "train_loss_window": len(p.recent),
            "steps_per_second": p.timed_steps / p.train_time if p.train_time > 0 else None,
            "wall_time_s": self.wall_time(),
            "world_size": self.ctx.world_size,
            "checkpoint_step": self.checkpoint_step,
        }
        if message:
            summary["message"] = message
        if self.ctx.is_main:
            self.run_dir.write_summary(summary)
        return summary


def _batch_metrics(task, pred, batch, ctx: DistContext) -> dict[str, float]:
    """The task's metrics on the last training batch, averaged over all ranks. One host sync."""
    metrics = task.metrics(pred, batch)
    names = sorted(metrics)
    rows = batch.x.shape[0]
    values = torch.stack([metrics[n].detach().double().sum() / rows for n in names])
    values = distributed.all_reduce_sum(values, ctx) / ctx.world_size
    return dict(zip(names, values.tolist()))


def _postfix(record: dict, metric_name: str, last_eval: dict) -> dict:
    post = {"loss": f"{record['loss']:.4g}"}
    if metric_name in record:
        post[metric_name] = f"{record[metric_name]:.3f}"
    for split, metrics in last_eval.items():
        if isinstance(metrics, dict) and metric_name in metrics:
            post[f"{split}_{metric_name}"] = f"{metrics[metric_name]:.3f}"
    post["lr"] = f"{record['lr']:.2e}"
    return post


def _final_line(summary: dict, metric_name: str) -> str:
    parts = [f"{split} {metric_name}={m.get(metric_name, float('nan')):.4f}" for split, m in summary["final"].items()]
    speed = summary["steps_per_second"]
    return f"done: {', '.join(parts)}; final train loss {summary['train_loss']:.4g}" + (
        f"; {speed:.1f} steps/s" if speed else ""
    )
