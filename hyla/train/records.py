"""What a session of a run records (`Records`): every update's loss and timing, the training records
made of them (metrics.jsonl, and the trackers), the evaluations and analyses written beside them,
env.json (the numerics, as the session learns them) and summary.json. Rank 0 writes the files;
every rank holds the same losses (the mean over ranks). hyla.train.session.Session owns one."""

from __future__ import annotations

import math
import time
from typing import TYPE_CHECKING

import torch

from hyla.ops.kernels.common import implementations_ran
from hyla.train import distributed
from hyla.train.distributed import DistContext
from hyla.train.run_dir import RunDir, environment
from hyla.train.trackers import open_trackers

if TYPE_CHECKING:
    from hyla.train.session import Start


class NonFiniteLossError(RuntimeError):
    """The training loss became NaN or inf; the run stopped and kept its last good checkpoint."""


class Records:
    """The records of one session of a run, from `start.progress.step` on (`numerics`: what trains).
    Rank 0 opens metrics.jsonl and the trackers at once."""

    def __init__(self, start: Start, run: RunDir, ctx: DistContext, numerics: dict):
        self.cfg, self.task, self.trainer, self.progress = start.cfg, start.task, start.trainer, start.progress
        self.run_dir, self.ctx, self.numerics = run, ctx, numerics
        self.pending: list[torch.Tensor] = []  # this rank's losses not yet reduced into progress
        self.session_start, self.first_step = time.perf_counter(), self.progress.step
        self.window_time, self.window_timed_steps = 0.0, 0
        self.log = None
        if ctx.is_main:
            trackers = open_trackers(self.cfg, run.path)
            self.log = run.open_log(
                self.cfg, environment(numerics), self.progress.step, self.progress.metrics_rows, trackers
            )

    def add_step(self, step: int, loss: torch.Tensor, pred: torch.Tensor, batch, elapsed: float) -> None:
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

    def update_numerics(self, changes: dict) -> None:
        """What trains, learned as the session goes (the attention that ran; a pack's CUDA graphs that
        failed to capture), into the numerics of env.json and of the checkpoints."""
        if any(self.numerics.get(key) != value for key, value in changes.items()):
            self.numerics = {**self.numerics, **changes}
            if self.ctx.is_main:
                self.run_dir.write_env(environment(self.numerics), self.first_step, same_session=True)

    def reduce_losses(self) -> None:
        """Move this rank's pending losses, averaged over ranks, into the progress windows."""
        if not self.pending:
            return
        losses = distributed.all_reduce_sum(torch.stack(self.pending).double(), self.ctx) / self.ctx.world_size
        self.pending = []
        values = losses.tolist()
        self.progress.window += values
        self.progress.recent = (self.progress.recent + values)[-self.cfg.log.train_loss_window :]

    def write_training(self) -> dict:
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

    def write(self, step: int, split: str, record: dict) -> None:
        if self.log is not None:
            self.log.write(step, split, record)

    def wall_time(self) -> float:
        return self.progress.wall_time + time.perf_counter() - self.session_start

    def write_summary(self, status: str, checkpoint_step: int | None, final: dict | None, message: str) -> dict:
        """summary.json (rank 0) of a session that ended with `status`; returns it."""
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
            "checkpoint_step": checkpoint_step,
        }
        if message:
            summary["message"] = message
        if self.ctx.is_main:
            self.run_dir.write_summary(summary)
        return summary

    def close(self) -> None:
        if self.log is not None:
            self.log.close()


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
