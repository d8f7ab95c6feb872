"""The training loop: `train(cfg) -> run folder`.

Read `open_session` and then `TrainingLoop.run` top to bottom: build the task and model, open the
run folder (fresh or from its checkpoint), then per step: one update (`Trainer`, hyla.train.step),
and when due a training record, an evaluation, an analysis and a checkpoint (`after_step`); at the
end the final evaluation and `summary.json`. (`hyla.train.packed` steps several runs' loops
together; `hyla.train.numerics` sets what a run computes with, `hyla.train.signals` stops it.)

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

import math
import sys
import time
import warnings
from collections.abc import Callable
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from hyla.nn.transformer import Transformer
from hyla.ops.kernels.common import implementations_ran, reset_implementations_ran
from hyla.tasks.base import stable_seed
from hyla.train import distributed
from hyla.train.configs import (
    RESUMABLE_CHANGES,
    ConfigError,
    ExperimentConfig,
    build_task,
    config_diff,
    resolve_model,
    validate,
)
from hyla.train.distributed import DistContext
from hyla.train.evaluate import evaluate
from hyla.train.numerics import numerics, process_settings
from hyla.train.run_dir import MetricsLog, RunDir, environment, require_tensorboard
from hyla.train.signals import StopSignal
from hyla.train.step import Trainer
from hyla.train.trackers import open_trackers

AnalysisHook = Callable[[nn.Module, Any, int, Path, int], dict]


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or inf; the run stopped and kept its last good checkpoint."""


def build_model(cfg: ExperimentConfig) -> Transformer:
    """The model of a resolved config, initialized from the seed on the CPU (same on every device
    and torch version: docs/paper_fidelity.md)."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(stable_seed(cfg.seed, "init"))
        return Transformer(cfg.model)


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
            return _train(cfg, ctx, analysis_hook)
    finally:
        distributed.teardown(ctx)


def _train(cfg: ExperimentConfig, ctx: DistContext, analysis_hook: AnalysisHook | None) -> Path:
    run, loop = open_session(cfg, ctx, analysis_hook)
    return loop.run() if loop is not None else run.path


def open_session(
    cfg: ExperimentConfig,
    ctx: DistContext,
    analysis_hook: AnalysisHook | None,
    packed: bool = False,
    pack_graphs: bool = False,
) -> tuple[RunDir, TrainingLoop | None]:
    """The run folder of `cfg` (new, or resumed from its checkpoint) and a loop ready to train it;
    no loop when the run is already complete. `packed`: the loop's steps come from a pack
    (`pack_graphs`: replayed as CUDA graphs)."""
    task = build_task(cfg, ctx.device)  # batches are generated on the training device
    cfg = replace(cfg, model=resolve_model(cfg.model, task))
    cfg, run = _name_run(cfg, ctx)
    state = _resume_state(cfg, run, ctx)
    if cfg.train.tensorboard:
        require_tensorboard()
    if cfg.train.batch_size % ctx.world_size:
        raise ConfigError(
            f"train.batch_size={cfg.train.batch_size} must be divisible by the number of ranks ({ctx.world_size})"
        )
    summary = run.read_summary()
    if state is not None and summary.get("status") == "completed":
        if ctx.is_main:  # the summary's step: the checkpoint may be the previous one (the latest damaged)
            tqdm.write(f"{run.path} is complete (step {summary.get('step', state['progress']['step'])}); nothing to do")
        return run, None

    model = build_model(cfg).to(ctx.device)
    trainer = Trainer(cfg, task, model, ctx, pack_graphs if packed else None)
    progress = Progress()
    settings = numerics(cfg, ctx, trainer.compile_mode, packed)
    if trainer.cuda_graph is not None:
        settings["cuda_graph"] = trainer.cuda_graph
    reset_implementations_ran()
    if state is not None:
        trainer.load_state(state)
        progress = Progress(**state["progress"])
        _warn_if_numerics_changed(state["numerics"], settings, run)
    return run, TrainingLoop(cfg, task, trainer, run, progress, ctx, analysis_hook, settings)


class TrainingLoop:
    """One session of a run: from `progress.step` to `end` (all steps, or train.stop_at), or a stop.
    Rank 0 writes the files. `run` drives it; a pack (hyla.train.packed) drives several through
    `record_step`, `after_step`, `finish`, `diverged`, `record_stop` and `close`."""

    def __init__(
        self,
        cfg,
        task,
        trainer: Trainer,
        run: RunDir,
        progress: Progress,
        ctx: DistContext,
        analysis_hook: AnalysisHook | None,
        numerics: dict[str, Any],
    ):
        self.cfg, self.task, self.trainer, self.run_dir, self.progress, self.ctx = (
            cfg,
            task,
            trainer,
            run,
            progress,
            ctx,
        )
        self.analysis_hook, self.numerics = analysis_hook, numerics  # as numerics() gave them
        t = cfg.train
        self.end = t.stop_at if progress.step < t.stop_at < t.steps else t.steps
        self.pending: list[torch.Tensor] = []  # this rank's losses not yet reduced into progress
        self.session_start, self.first_step = time.perf_counter(), progress.step
        self.window_time, self.window_timed_steps = 0.0, 0
        self.checkpoint_step = progress.step if progress.step else None
        self.log = self._open_log() if ctx.is_main else None

    def run(self) -> Path:
        t, p = self.cfg.train, self.progress
        bar = tqdm(
            total=t.steps,
            initial=p.step,
            disable=not (self.ctx.is_main and t.progress),
            dynamic_ncols=True,
            unit="step",
            desc=self.cfg.model.mixer,
            mininterval=0.5 if sys.stderr.isatty() else 30.0,
        )
        stop = StopSignal()
        try:
            with stop.installed():
                for step in range(p.step, self.end):
                    tick = time.perf_counter()
                    loss, pred, batch = self.trainer.step(step)
                    self.record_step(step, loss, pred, batch, time.perf_counter() - tick)
                    bar.update(1)
                    stopping = distributed.any_rank(stop.requested, self.ctx)
                    postfix = self.after_step(stopping)
                    if postfix is not None:
                        bar.set_postfix(postfix, refresh=False)
                    if stopping:
                        raise stop.stopped()
            bar.close()
            return self.finish()
        except NonFiniteLossError as e:
            bar.close()
            raise self.diverged(e) from None
        except (KeyboardInterrupt, Exception) as e:
            bar.close()
            self.record_stop(e)
            raise
        finally:
            self.close()

    def record_step(self, step: int, loss: torch.Tensor, pred: torch.Tensor, batch, elapsed: float) -> None:
        """Account for update number `step`, which took `elapsed` seconds: loss, last batch, timing."""
        self.pending.append(loss)
        self.last_pred, self.last_batch = pred, batch
        if step == self.first_step:
            self._record_outcomes()
        self.progress.step = step + 1
        if step > self.first_step:  # the session's first step includes compilation and warm-up
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

    def _record_outcomes(self) -> None:
        """After the session's first step, the numerics (env.json, the checkpoints) say what trains:
        the compile mode (compiling may fall back) and the attention implementations that ran
        (a fast path may fall back)."""
        mode = self.trainer.compile_mode
        outcomes = {"compile": mode is not None, "compile_mode": mode, "attention": implementations_ran()}
        if self.trainer.cuda_graph is not None:  # the steps were replayed as CUDA graphs, or capture failed
            outcomes["cuda_graph"] = self.trainer.cuda_graph
        if any(self.numerics.get(key) != value for key, value in outcomes.items()):
            self.numerics = {**self.numerics, **outcomes}
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
                tqdm.write(message)
            self.write_summary("stopped", message=message)
        else:
            result = self.write_summary("completed", final=self.evaluate_all(t.final_eval_samples))
            if self.ctx.is_main:
                tqdm.write(_final_line(result, self.task.metric_name))
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
            tqdm.write(message)
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

    def _open_log(self) -> MetricsLog:
        cfg, run = self.cfg, self.run_dir
        run.path.mkdir(parents=True, exist_ok=True)
        run.write_config(cfg)
        run.write_env(environment(self.numerics), self.progress.step)
        if cfg.resume:
            run.truncate_metrics(self.progress.metrics_rows)
        model = self.trainer.model
        tqdm.write(
            f"run {run.path}: {cfg.task} with {cfg.model.mixer}, {model.num_parameters():,} parameters, "
            f"{'resuming at step ' + str(self.progress.step) if self.progress.step else 'from scratch'} "
            f"({self.ctx.world_size} rank{'s' if self.ctx.world_size > 1 else ''} on {self.ctx.device}, "
            f"{torch.get_num_threads()} thread{'s' if torch.get_num_threads() > 1 else ''})"
        )
        return MetricsLog(run, self.progress.metrics_rows, cfg.train.tensorboard, open_trackers(cfg, run.path))


def _name_run(cfg: ExperimentConfig, ctx: DistContext) -> tuple[ExperimentConfig, RunDir]:
    """The config with its run name (every rank uses rank 0's timestamped default) and its folder."""
    if not cfg.name:
        names = [RunDir.for_config(cfg).path.name]
        if ctx.distributed:
            torch.distributed.broadcast_object_list(names, src=0)
        cfg = replace(cfg, name=names[0])
    return cfg, RunDir.for_config(cfg)


def _resume_state(cfg: ExperimentConfig, run: RunDir, ctx: DistContext) -> dict | None:
    """The checkpoint to continue from (None: a new run, or a resumed run that has none yet)."""
    state = None
    if cfg.resume:
        if run.config_file.exists():
            saved = run.read_config()
            changed = {k: v for k, v in config_diff(saved, cfg).items() if k not in RESUMABLE_CHANGES}
            if changed:
                lines = "\n".join(f"  {k}: {a!r} in the run, {b!r} now" for k, (a, b) in changed.items())
                raise ConfigError(
                    f"cannot resume {run.path}: the config differs in settings that change training:\n{lines}"
                )
        if run.has_checkpoint():
            state, source, note = run.load_checkpoint()
            if note and ctx.is_main:
                tqdm.write(f"warning: {note}")
    elif run.exists():
        raise FileExistsError(
            f"run folder {run.path} already exists; pass --resume to continue it "
            "(or `hyla resume RUN`), or choose another --name"
        )
    distributed.barrier(ctx)  # nobody creates the folder before every rank has checked it
    return state


def _warn_if_numerics_changed(saved: dict, now: dict, run: RunDir) -> None:
    saved = {"precision": "fp32", **saved}  # a checkpoint that records no precision trained in fp32
    # (what attention ran is known after the first step: recorded then, not compared; the wait policy
    # changes only the speed)
    changed = {
        k: (saved.get(k), now.get(k))
        for k in {**saved, **now}
        if saved.get(k) != now.get(k) and k not in ("attention", "omp_wait_policy", "gomp_spincount")
    }
    if changed:
        what = ", ".join(f"{k} {b} (was {a})" for k, (a, b) in changed.items())
        warnings.warn(
            f"resuming {run.path} with {what}: the result will not be bit-identical to an uninterrupted run",
            RuntimeWarning,
            stacklevel=3,
        )


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
