"""The training loop: `train(cfg) -> run folder`.

Everything random is a pure function of (seed, step): the task's batches, and the global torch
RNG (attention dropout) which is reseeded from (seed, step) before every step. A run resumed from
a checkpoint therefore reaches exactly the weights of an uninterrupted run, and N data-parallel
ranks (each drawing its slice of the same global batch) train the same model as one process.
"""

from __future__ import annotations

import hashlib
import math
import signal
import sys
import threading
import time
import warnings
from collections import deque
from contextlib import contextmanager
from dataclasses import asdict, replace
from pathlib import Path

import torch
from torch import nn
from tqdm.auto import tqdm

from hyla.configs import ConfigError, ExperimentConfig, build_task, config_diff, resolve_model, validate
from hyla.model import Transformer
from hyla.train import checkpoint as ckpt
from hyla.train import distributed
from hyla.train.distributed import DistContext
from hyla.train.evaluate import evaluate
from hyla.train.optim import make_optimizer
from hyla.train.run_dir import MetricsLog, RunDir, environment, require_tensorboard, write_json
from hyla.train.trackers import open_trackers

# Settings that may change when a run is resumed: they do not affect the trained weights.
RESUMABLE_CHANGES = ("resume", "train.stop_at", "train.progress", "train.tensorboard", "train.wandb", "train.threads",
                     "train.analysis_every", "train.analysis_samples",
                     "train.log_every", "train.eval_every", "train.eval_samples", "train.final_eval_samples",
                     "train.eval_batch_size", "train.checkpoint_every", "train.compile", "train.compile_mode",
                     "train.device")


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or inf; the run stopped and kept its last good checkpoint."""


def derived_seed(*parts) -> int:
    """A 63-bit seed from (seed, purpose, step, ...), the same in every process and on every machine."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def build_model(cfg: ExperimentConfig) -> Transformer:
    """The model of a resolved config, initialized from the seed on the CPU (same on every device)."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(derived_seed(cfg.seed, "init"))
        return Transformer(cfg.model)


class Trainer:
    """One optimization step at a time: data, forward, backward, AdamW update, schedule.

    `model` is the plain module (evaluate and checkpoint it); `self.forward` is what trains: the
    module, wrapped in DistributedDataParallel when there are several ranks, compiled on request.
    """

    def __init__(self, cfg: ExperimentConfig, task, model: nn.Module, ctx: DistContext):
        self.cfg, self.task, self.model, self.ctx = cfg, task, model, ctx
        self.optimizer, self.scheduler = make_optimizer(model, cfg.train)
        self.eager = model
        if ctx.distributed:
            from torch.nn.parallel import DistributedDataParallel

            self.eager = DistributedDataParallel(model, device_ids=[ctx.device] if ctx.device.type == "cuda" else None)
        self.forward = self.eager
        self.compile_pending = cfg.train.compile
        if cfg.train.compile:
            # Inductor's CPU code vectorizes a loop as short as the per-head dimension (2 in the
            # fuzzy-logic models) with masked "tail" vectors and then parallelizes the reduction
            # inside it: thousands of OpenMP regions per kernel, 10-30x slower with 2 threads.
            from torch._inductor import config as inductor_config

            inductor_config.cpp.enable_loop_tail_vec = False
            self.forward = torch.compile(self.eager, mode=cfg.train.compile_mode)

    def step(self, step: int):
        """Update number `step` (0-based). Returns (loss, predictions, batch) of this rank."""
        cfg = self.cfg
        batch = self.task.batch("train", cfg.train.batch_size, step, self.ctx.rank, self.ctx.world_size)
        batch = batch.to(self.ctx.device)
        if self.compile_pending:
            self.compile_pending = False
            try:
                return self._update(step, batch)
            except Exception as e:  # noqa: BLE001 - any compiler failure falls back to eager
                warnings.warn(f"torch.compile failed ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}); "
                              "continuing in eager mode", RuntimeWarning, stacklevel=2)
                self.forward = self.eager
        return self._update(step, batch)

    def _update(self, step: int, batch):
        # Attention dropout draws from the global RNG: reseed it so the masks depend on the step only
        # (the device's generator alone: torch.manual_seed, which seeds every backend, costs ~0.3 ms).
        seed = derived_seed(self.cfg.seed, "step", step)
        if self.ctx.device.type == "cuda":
            torch.cuda.manual_seed(seed)
        else:
            torch.default_generator.manual_seed(seed)
        self.optimizer.zero_grad(set_to_none=True)
        pred = self.forward(batch.x)
        loss = self.task.loss(pred, batch)
        loss.backward()
        self.optimizer.step()
        self.scheduler.step()
        return loss.detach(), pred.detach(), batch

    def grad_norm(self) -> torch.Tensor:
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        return torch.nn.utils.get_total_norm(grads) if grads else torch.zeros((), device=self.ctx.device)

    def state(self, step: int) -> dict:
        return {"model": self.model.state_dict(), "optimizer": self.optimizer.state_dict(),
                "scheduler": self.scheduler.state_dict(), "step": step, "rng": ckpt.rng_states()}

    def load_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        ckpt.set_rng_states(state["rng"])


class _StopSignal:
    """SIGINT / SIGTERM during an update is deferred to the end of that update (the weights and
    optimizer are then consistent and get checkpointed); outside updates it interrupts at once.
    A second signal always interrupts at once."""

    def __init__(self):
        self.requested = False
        self.deferring = False
        self._previous = {}

    def _handle(self, signum, frame):
        if self.deferring and not self.requested:
            self.requested = True
            tqdm.write("stopping after this step and saving a checkpoint (interrupt again to abort at once)")
            return
        raise KeyboardInterrupt

    @contextmanager
    def installed(self):
        if threading.current_thread() is not threading.main_thread():
            yield self
            return
        for sig in (signal.SIGINT, signal.SIGTERM):
            self._previous[sig] = signal.signal(sig, self._handle)
        try:
            yield self
        finally:
            for sig, handler in self._previous.items():
                signal.signal(sig, handler)

    @contextmanager
    def deferred(self):
        self.deferring = True
        try:
            yield
        finally:
            self.deferring = False
        if self.requested:
            raise KeyboardInterrupt


@contextmanager
def _torch_settings(cfg: ExperimentConfig, device: torch.device):
    """Threads and deterministic mode for the duration of a run (restored afterwards)."""
    threads, deterministic = torch.get_num_threads(), torch.are_deterministic_algorithms_enabled()
    if cfg.train.threads > 0:
        torch.set_num_threads(cfg.train.threads)
    if cfg.train.deterministic:
        if device.type == "cuda":
            import os

            os.environ.setdefault("CUBLAS_WORKSPACE_CONFIG", ":4096:8")
        torch.use_deterministic_algorithms(True)
    try:
        yield
    finally:
        torch.set_num_threads(threads)
        torch.use_deterministic_algorithms(deterministic)


def train(cfg: ExperimentConfig) -> Path:
    """Train (or, with cfg.resume, continue) the run described by `cfg`; return its folder.

    Raises ConfigError for invalid settings, NonFiniteLossError if the loss diverges, and
    KeyboardInterrupt after checkpointing when interrupted.
    """
    cfg = validate(cfg)
    ctx = distributed.setup(cfg.train.device)
    try:
        with _torch_settings(cfg, ctx.device):
            return _train(cfg, ctx)
    finally:
        distributed.teardown(ctx)


def _prepare_run(cfg: ExperimentConfig, ctx: DistContext) -> tuple[ExperimentConfig, RunDir, dict | None]:
    if not cfg.name:
        name = RunDir.for_config(cfg).path.name
        if ctx.distributed:  # every rank must use rank 0's timestamped name
            names = [name]
            torch.distributed.broadcast_object_list(names, src=0)
            name = names[0]
        cfg = replace(cfg, name=name)
    run = RunDir.for_config(cfg)
    state = None
    if cfg.resume:
        if run.config_file.exists():
            saved = run.read_config()
            changed = {k: v for k, v in config_diff(saved, cfg).items() if k not in RESUMABLE_CHANGES}
            if changed:
                lines = "\n".join(f"  {k}: {a!r} in the run, {b!r} now" for k, (a, b) in changed.items())
                raise ConfigError(f"cannot resume {run.path}: the config differs in settings that change training:\n{lines}")
        if run.checkpoint_file.exists():
            state = ckpt.load(run.checkpoint_file, map_location="cpu")
    elif run.exists():
        raise FileExistsError(f"run folder {run.path} already exists; pass --resume to continue it "
                              "(or `hyla resume RUN`), or choose another --name")
    distributed.barrier(ctx)  # nobody creates the folder before every rank has checked it
    return cfg, run, state


def _train(cfg: ExperimentConfig, ctx: DistContext) -> Path:
    task = build_task(cfg)
    cfg = replace(cfg, model=resolve_model(cfg.model, task))
    cfg, run, state = _prepare_run(cfg, ctx)
    t = cfg.train
    if t.tensorboard:
        require_tensorboard()
    if t.batch_size % ctx.world_size:
        raise ConfigError(f"train.batch_size={t.batch_size} must be divisible by the number of ranks ({ctx.world_size})")

    model = build_model(cfg).to(ctx.device)
    if t.threads == -1 and ctx.device.type == "cpu":
        threads = fastest_thread_count(cfg, task, model, ctx)
        if ctx.is_main:
            tqdm.write(f"threads: {threads} (fastest of 1..{torch.get_num_threads()} over a few steps)")
        torch.set_num_threads(threads)
    trainer = Trainer(cfg, task, model, ctx)
    start = 0
    history = {"train_time": 0.0, "timed_steps": 0, "wall_time": 0.0, "recent_losses": [], "last_eval": {}}
    if state is not None:
        trainer.load_state(state)
        start = state["step"]
        history.update(state.get("history", {}))
    end = t.stop_at if start < t.stop_at < t.steps else t.steps
    recent_losses = deque(history["recent_losses"], maxlen=t.train_loss_window)

    log = None
    if ctx.is_main:
        run.path.mkdir(parents=True, exist_ok=True)
        run.write_config(cfg)
        write_json(run.env_file, environment(ctx.device, ctx.world_size))
        if cfg.resume:
            run.truncate_metrics(start)
        log = MetricsLog(run, t.tensorboard, open_trackers(cfg, run.path))
        tqdm.write(f"run {run.path}: {cfg.task} with {cfg.model.mixer}, {model.num_parameters():,} parameters, "
                   f"{'resuming at step ' + str(start) if start else 'from scratch'} "
                   f"({ctx.world_size} rank{'s' if ctx.world_size > 1 else ''} on {ctx.device})")

    session_start = time.perf_counter()
    timing = {"train": 0.0, "steps": 0}  # this session, excluding each session's first (compiling) step
    done = start
    last_good = start if state is not None else None

    def save(step: int):
        nonlocal last_good
        if ctx.is_main:
            hist = dict(history, recent_losses=[float(x) for x in recent_losses],
                        train_time=history["train_time"] + timing["train"],
                        timed_steps=history["timed_steps"] + timing["steps"],
                        wall_time=history["wall_time"] + time.perf_counter() - session_start)
            ckpt.save_atomic({**trainer.state(step), "history": hist, "config": asdict(cfg)}, run.checkpoint_file)
        last_good = step

    def summary(status: str, final: dict | None = None, message: str = "") -> dict:
        train_time = history["train_time"] + timing["train"]
        timed = history["timed_steps"] + timing["steps"]
        result = {
            "status": status, "step": done, "steps": t.steps, "task": cfg.task, "mixer": cfg.model.mixer,
            "preset": cfg.preset, "metric_name": task.metric_name, "num_parameters": model.num_parameters(),
            "final": final or {}, "last_eval": history["last_eval"],
            "train_loss": sum(float(x) for x in recent_losses) / len(recent_losses) if recent_losses else None,
            "train_loss_window": len(recent_losses),
            "steps_per_second": timed / train_time if train_time > 0 else None,
            "wall_time_s": history["wall_time"] + time.perf_counter() - session_start,
            "world_size": ctx.world_size, "checkpoint_step": last_good,
        }
        if message:
            result["message"] = message
        if ctx.is_main:
            run.write_summary(result)
        return result

    def evaluate_all(num_samples: int) -> dict:
        results = {}
        for split in task.eval_splits:
            results[split] = evaluate(model, task, split, num_samples, t.eval_batch_size, ctx, progress=t.progress)
            if log is not None:
                log.write(done, split, results[split])
        return results

    bar = tqdm(total=t.steps, initial=start, disable=not (ctx.is_main and t.progress), dynamic_ncols=True,
               unit="step", desc=f"{cfg.model.mixer}", mininterval=0.5 if sys.stderr.isatty() else 30.0)
    stop = _StopSignal()
    window_loss = torch.zeros((), device=ctx.device)
    window_steps, window_timed_steps, window_time = 0, 0, 0.0
    try:
        with stop.installed():
            for step in range(start, end):
                tick = time.perf_counter()
                with stop.deferred():
                    loss, pred, batch = trainer.step(step)
                    done = step + 1  # inside: a deferred stop raises on leaving, and must checkpoint this step
                window_loss += loss
                window_steps += 1
                recent_losses.append(loss)
                logging = done % t.log_every == 0 or done == end
                # the record waits for the device, so the time below is real work even on a GPU
                record = _train_record(trainer, task, window_loss / window_steps, pred, batch, ctx) if logging else None
                elapsed = time.perf_counter() - tick
                if step > start:  # the session's first step includes compilation and warm-up
                    timing["train"] += elapsed
                    timing["steps"] += 1
                    window_timed_steps += 1
                    window_time += elapsed
                bar.update(1)

                if logging:
                    if not math.isfinite(record["loss"]):
                        raise NonFiniteLossError(f"the training loss became non-finite ({record['loss']}) "
                                                 f"between step {done - window_steps + 1} and step {done}")
                    record["steps_per_second"] = window_timed_steps / window_time if window_time > 0 else None
                    if log is not None:
                        log.write(done, "train", record)
                    bar.set_postfix(_postfix(record, task.metric_name, history["last_eval"]), refresh=False)
                    window_loss = torch.zeros((), device=ctx.device)
                    window_steps, window_timed_steps, window_time = 0, 0, 0.0
                if done % t.checkpoint_every == 0 or done == end:
                    _check_finite_before_saving(window_loss, trainer, ctx, done)
                    save(done)
                if t.eval_every and done % t.eval_every == 0 and done < t.steps:
                    history["last_eval"] = {"step": done, **evaluate_all(t.eval_samples)}
                    bar.set_postfix(_postfix({}, task.metric_name, history["last_eval"]), refresh=False)
                if t.analysis_every and done % t.analysis_every == 0 and ctx.is_main:
                    from hyla.analysis import analysis_hook

                    log.write(done, "analysis", analysis_hook(model, task, done, run.path / "analysis", t.analysis_samples))
        bar.close()
        if done < t.steps:
            message = f"stopped at step {done} of {t.steps} (train.stop_at); continue with: hyla resume {run.path}"
            if ctx.is_main:
                tqdm.write(message)
            summary("stopped", message=message)
            distributed.barrier(ctx)  # ranks leave together: none tears down while rank 0 still writes
            return run.path
        if state is not None and start == t.steps and ctx.is_main:
            tqdm.write(f"{run.path} had already finished training; re-running the final evaluation")
        final = evaluate_all(t.final_eval_samples)
        result = summary("completed", final)
        if ctx.is_main:
            tqdm.write(_final_line(result, task.metric_name))
        distributed.barrier(ctx)  # ranks leave together: none tears down while rank 0 still writes
        return run.path
    except NonFiniteLossError as e:
        bar.close()
        where = (f"the last good checkpoint (step {last_good}) is kept in {run.checkpoint_file}"
                 if last_good is not None else "no checkpoint had been written yet")
        message = f"{e}; stopping: {where}. Try a lower --train.lr or more --train.warmup_steps."
        summary("diverged", message=message)
        raise NonFiniteLossError(message) from None
    except KeyboardInterrupt:
        bar.close()
        # `done` updates are complete and consistent (interrupts inside an update are deferred).
        if last_good != done and done > start:
            save(done)
        message = f"interrupted at step {done}; checkpoint saved; continue with: hyla resume {run.path}"
        if ctx.is_main:
            tqdm.write(message)
        summary("interrupted", message=message)
        raise
    except Exception as e:
        bar.close()
        summary("failed", message=f"{type(e).__name__}: {e}")
        raise
    finally:
        if log is not None:
            log.close()


def fastest_thread_count(cfg: ExperimentConfig, task, model: nn.Module, ctx: DistContext, steps: int = 4) -> int:
    """Time a few updates of a throw-away copy of the model with 1, 2, 4, ... up to torch's default
    thread count; return the fastest. On a shared machine one thread can beat several by a wide
    margin (threads wait for each other when a core is taken away), on an idle one it is the other
    way round."""
    import copy

    default = torch.get_num_threads()
    candidates = sorted({min(2 ** i, default) for i in range(default.bit_length() + 1)})
    if len(candidates) == 1:
        return default
    probe_cfg = replace(cfg, train=replace(cfg.train, compile=False))
    timings = {}
    try:
        for threads in candidates:
            torch.set_num_threads(threads)
            trainer = Trainer(probe_cfg, task, copy.deepcopy(model), DistContext(0, 1, ctx.device))
            trainer.step(0)  # warm-up
            start = time.perf_counter()
            for step in range(1, steps + 1):
                trainer.step(step)
            timings[threads] = time.perf_counter() - start
    finally:
        torch.set_num_threads(default)
    return min(timings, key=timings.get)


def _train_record(trainer: Trainer, task, mean_loss: torch.Tensor, pred, batch, ctx: DistContext) -> dict:
    """Loss (mean over the steps since the last record, all ranks), metrics of the last batch,
    gradient norm and learning rate. One host sync."""
    metrics = task.metrics(pred, batch)
    names = sorted(metrics)
    rows = batch.x.shape[0]
    values = torch.stack([mean_loss.double()] + [metrics[n].detach().double().sum() / rows for n in names])
    values = distributed.all_reduce_sum(values, ctx) / ctx.world_size
    record = dict(zip(["loss"] + names, values.tolist()))
    record["grad_norm"] = float(trainer.grad_norm())
    record["lr"] = trainer.optimizer.param_groups[0]["lr"]  # the rate of the next update
    return record


def _check_finite_before_saving(window_loss: torch.Tensor, trainer: Trainer, ctx: DistContext, step: int) -> None:
    flags = torch.stack([window_loss.isfinite().logical_not(), trainer.grad_norm().isfinite().logical_not()]).float()
    if distributed.all_reduce_max(flags, ctx).any():
        raise NonFiniteLossError(f"the training loss or gradient became non-finite before step {step}")


def _postfix(record: dict, metric_name: str, last_eval: dict) -> dict:
    post = {}
    if "loss" in record:
        post["loss"] = f"{record['loss']:.4g}"
    if metric_name in record:
        post[metric_name] = f"{record[metric_name]:.3f}"
    for split, metrics in last_eval.items():
        if isinstance(metrics, dict) and metric_name in metrics:
            post[f"{split}_{metric_name}"] = f"{metrics[metric_name]:.3f}"
    if "lr" in record:
        post["lr"] = f"{record['lr']:.2e}"
    return post


def _final_line(summary: dict, metric_name: str) -> str:
    parts = [f"{split} {metric_name}={m.get(metric_name, float('nan')):.4f}" for split, m in summary["final"].items()]
    speed = summary["steps_per_second"]
    return (f"done: {', '.join(parts)}; final train loss {summary['train_loss']:.4g}"
            + (f"; {speed:.1f} steps/s" if speed else ""))

