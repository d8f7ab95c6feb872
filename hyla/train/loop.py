"""The training loop: `train(cfg) -> run folder`.

Read `open_session` and then `TrainingLoop.run` top to bottom: build the task and model, open the
run folder (fresh or from its checkpoint), then per step: one update (`Trainer`, hyla.train.step),
and when due a training record, an evaluation, an analysis and a checkpoint (`after_step`); at the
end the final evaluation and `summary.json`. (`hyla.train.packed` steps several runs' loops
together.)

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
import os
import signal
import sys
import threading
import time
import warnings
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from typing import Any

import torch
from torch import nn
from tqdm.auto import tqdm

from hyla.nn.transformer import Transformer
from hyla.ops.kernels import cpp
from hyla.ops.kernels.common import implementations_ran, reset_implementations_ran
from hyla.tasks.base import stable_seed
from hyla.train import distributed
from hyla.train.allocator import keep_freed_memory
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
from hyla.train.run_dir import MetricsLog, RunDir, environment, require_tensorboard
from hyla.train.step import Trainer, generates_value_network
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


def default_threads(world_size: int = 1) -> int:
    """Threads per process: the cores this process may use, shared among the ranks on this machine."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    local_ranks = int(os.environ.get("LOCAL_WORLD_SIZE", world_size))
    return max(1, cores // local_ranks)


# torch.set_float32_matmul_precision for each train.precision (bf16 autocasts; what stays float32 is exact)
MATMUL_PRECISION = {"fp32": "highest", "tf32": "high", "bf16": "highest"}


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


SWEEP_ENDED = getattr(signal, "SIGUSR1", None)
"""The signal a training started by `hyla sweep` gets when the sweep ends, however it ends (on Linux:
the parent-death signal, hyla.experiments.launch.end_with_parent): a stop request like SIGTERM's,
except that repeats of it are the same request (a dying sweep sends one per thread), never an abort."""


class Stopped(KeyboardInterrupt):
    """A session stopped by a signal; `hyla` exits with 128 + its number (SIGINT 130, SIGTERM 143)."""

    def __init__(self, signum: int):
        super().__init__(signal.Signals(signum).name)
        self.signum = int(signum)


class StopSignal:
    """SIGINT / SIGTERM (and SWEEP_ENDED) ask the loop to stop after the current step (it checkpoints
    first); a second SIGINT / SIGTERM interrupts at once (the run then resumes from its last checkpoint)."""

    def __init__(self):
        self.signum: int | None = None

    @property
    def requested(self) -> bool:
        return self.signum is not None

    def stopped(self) -> Stopped:
        """The exception that ends the session (another rank's stop: SIGTERM's)."""
        return Stopped(self.signum or signal.SIGTERM)

    def _handle(self, signum, frame):
        if signum == SWEEP_ENDED and self.requested:
            return
        if self.requested:
            raise Stopped(signum)
        self.signum = signum
        why = " (the sweep that started this training ended)" if signum == SWEEP_ENDED else ""
        tqdm.write(
            f"{signal.Signals(signum).name}{why}: stopping after this step with a checkpoint "
            "(send SIGINT or SIGTERM again to abort at once)"
        )

    @contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        signals = [signal.SIGINT, signal.SIGTERM] + ([SWEEP_ENDED] if SWEEP_ENDED else [])
        previous = {sig: signal.signal(sig, self._handle) for sig in signals}
        try:
            yield self
        finally:
            for sig, handler in previous.items():
                signal.signal(sig, handler)


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


def numerics(cfg: ExperimentConfig, ctx: DistContext, compile_mode: str | None, packed: bool = False) -> dict[str, Any]:
    """The settings that change floating-point results (recorded in env.json and checkpoints), and
    OpenMP's wait policy and spin count, which change only the speed (hyla.cli.bound_openmp_waiting);
    `compile_mode`: the torch.compile mode that trains (None: eager); `packed`: trained in a pack
    (hyla.train.packed), whose batched kernels round differently."""
    settings = {
        "threads": torch.get_num_threads(),
        "device": str(ctx.device),
        "compile": compile_mode is not None,
        "compile_mode": compile_mode,
        "precision": cfg.train.precision,
        "deterministic": cfg.train.deterministic,
        "world_size": ctx.world_size,
        "torch": str(torch.__version__),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "gomp_spincount": os.environ.get("GOMP_SPINCOUNT"),
    }
    if packed:
        return {**settings, "packed": True}
    if ctx.device.type == "cpu" and generates_value_network(cfg):
        settings["cpp_kernel"] = cpp.available()  # HYLA's C++ kernel, or (without a compiler) PyTorch forms
    return settings


@contextmanager
def process_settings(cfg: ExperimentConfig, ctx: DistContext):
    """Threads, deterministic mode, float32 matmul precision, the compiler flag and the global RNG for
    the duration of a run, restored afterwards; on the CPU, malloc keeps freed memory for reuse
    (`hyla.train.allocator`, for the rest of the process)."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    cublas, matmul = os.environ.get("CUBLAS_WORKSPACE_CONFIG"), torch.get_float32_matmul_precision()
    torch.set_num_threads(cfg.train.threads or default_threads(ctx.world_size))
    if ctx.device.type == "cpu":
        keep_freed_memory()
    torch.set_float32_matmul_precision(MATMUL_PRECISION[cfg.train.precision])
    if cfg.train.deterministic:
        if ctx.device.type == "cuda" and cublas is None:
            os.environ["CUBLAS_WORKSPACE_CONFIG"] = ":4096:8"  # deterministic cuBLAS needs it
        torch.use_deterministic_algorithms(True)
    devices = [ctx.device] if ctx.device.type == "cuda" else []
    try:
        with torch.random.fork_rng(devices=devices), _compiler_settings(cfg):
            yield
    finally:
        torch.set_num_threads(threads)
        torch.set_float32_matmul_precision(matmul)
        torch.use_deterministic_algorithms(deterministic)
        if cublas is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)


@contextmanager
def _compiler_settings(cfg: ExperimentConfig):
    if not cfg.train.compile:
        yield
        return
    from torch._inductor import config as inductor_config

    # Inductor's CPU code vectorizes a loop as short as the per-head dimension (2 in the fuzzy-logic
    # models) with masked "tail" vectors and parallelizes the reduction inside it: an OpenMP region
    # for a few elements of work, whose start-up costs more than the work (docs/speed.md).
    with inductor_config.patch({"cpp.enable_loop_tail_vec": False}):
        yield


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
    saved = {"precision": "fp32", **saved}  # runs from before train.precision existed trained in fp32
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
