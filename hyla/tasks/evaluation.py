"""A model evaluated on fresh samples of a task's split.

The samples are batches 0, 1, 2, ... of the split's own random stream, `batch_size` samples each
(the last one the remainder), so `valid` never repeats a training batch and every evaluation with
the same (task seed, num_samples, batch_size) sees the same samples: a run's evaluation is repeated
with the run's task (`hyla.load`) and its `eval.final_samples` and `eval.batch_size`.
Every evaluation during training reads the start of the same stream, so a re-evaluation with the
defaults is not an independent sample of the split. `offset` skips batches: `offset=N` (a multiple
of `batch_size`) starts at batch N / batch_size, and with N at least the recorded samples rounded up
to whole batches (`fresh_offset`), at the recorded batch size, no sample of the recorded
evaluation is drawn again.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import torch
from torch import nn

from .base import Task


def fresh_offset(recorded_samples: int, batch_size: int) -> int:
    """The first offset past an evaluation of `recorded_samples` samples: whole batches of `batch_size`."""
    return math.ceil(recorded_samples / batch_size) * batch_size


def eval_batch_sizes(num_samples: int, batch_size: int) -> list[int]:
    """Global sizes of the evaluation batches: full batches, then the remainder."""
    sizes = [batch_size] * (num_samples // batch_size)
    if num_samples % batch_size:
        sizes.append(num_samples % batch_size)
    return sizes


@torch.no_grad()
def evaluate(
    model: nn.Module,
    task: Task,
    split: str,
    num_samples: int,
    batch_size: int = 1024,
    *,
    offset: int = 0,
    rank: int = 0,
    world_size: int = 1,
    reduce: Callable[[torch.Tensor], torch.Tensor] | None = None,
    on_batch: Callable[[int], object] | None = None,
) -> dict[str, float]:
    """{name: mean over `num_samples` samples of `split`} of the task's per-sequence metrics
    (`task.metrics`) and of its loss, in eval mode (the model's mode is restored after).

    `offset`: samples of the split's stream skipped first, a multiple of `batch_size` (module
    docstring: 0 re-reads the samples of the run's own evaluations; `fresh_offset` gives new ones).
    Adds `ppl = exp(nll)` when the task reports a mean token NLL. Data parallel: rank `rank` of
    `world_size` evaluates its rows of each batch and `reduce` sums a tensor over the ranks, so all
    ranks return the same. `on_batch(size)` is called after each batch (a progress bar).
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be positive, got {num_samples}")
    if offset < 0 or offset % batch_size:
        raise ValueError(f"offset must be a non-negative multiple of the batch size {batch_size}, got {offset}")
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    sums: dict[str, torch.Tensor] = {}
    count = 0
    try:
        for index, size in enumerate(eval_batch_sizes(num_samples, batch_size)):
            if size % world_size:
                raise ValueError(
                    f"evaluation batch of {size} samples does not split over {world_size} ranks; "
                    f"choose sample counts and batch sizes divisible by {world_size}"
                )
            batch = task.batch(split, size, offset // batch_size + index, rank, world_size).to(device)
            pred = model(batch.x)
            rows = batch.x.shape[0]
            values = {"loss": task.loss(pred, batch).detach().double() * rows}
            values.update({name: v.detach().double().sum() for name, v in task.metrics(pred, batch).items()})
            for name, value in values.items():
                sums[name] = sums[name] + value if name in sums else value
            count += rows
            if on_batch is not None:
                on_batch(size)
    finally:
        model.train(was_training)
    return _means(sums, count, device, reduce)


def _means(sums: dict[str, torch.Tensor], count: int, device, reduce) -> dict[str, float]:
    """The sums divided by the sample count, both summed over the ranks by `reduce` first."""
    names = sorted(sums)
    totals = torch.stack([sums[n] for n in names] + [torch.tensor(float(count), dtype=torch.float64, device=device)])
    if reduce is not None:
        totals = reduce(totals)
    totals = totals.tolist()
    result = {name: total / totals[-1] for name, total in zip(names, totals[:-1])}
    if "nll" in result:
        result["ppl"] = math.exp(result["nll"]) if result["nll"] < 700 else math.inf
    return result
