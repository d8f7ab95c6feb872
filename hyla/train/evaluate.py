"""Evaluation on fresh samples of any split.

Evaluation batches come from the split's own random stream (step 0, 1, 2, ... of that split), so
`valid` never repeats a training batch and every evaluation of a run sees the same samples.
"""

from __future__ import annotations

import math
import sys

import torch
from torch import nn
from tqdm.auto import tqdm

from hyla.train.distributed import DistContext, all_reduce_sum


def eval_batch_sizes(num_samples: int, batch_size: int) -> list[int]:
    """Global sizes of the evaluation batches: full batches, then the remainder."""
    sizes = [batch_size] * (num_samples // batch_size)
    if num_samples % batch_size:
        sizes.append(num_samples % batch_size)
    return sizes


@torch.no_grad()
def evaluate(
    model: nn.Module,
    task,
    split: str,
    num_samples: int,
    batch_size: int = 1024,
    ctx: DistContext | None = None,
    progress: bool = False,
) -> dict[str, float]:
    """Mean of the task's per-sample metrics and of the loss over `num_samples` samples of `split`.

    Adds `ppl = exp(nll)` when the task reports a mean token NLL. Under data parallelism every
    rank evaluates its slice of each batch and the sums are reduced, so all ranks return the same.
    `progress`: a bar on a terminal (none elsewhere: a bar redrawn in place garbles a log file).
    """
    if num_samples < 1:
        raise ValueError(f"num_samples must be positive, got {num_samples}")
    device = next(model.parameters()).device
    rank, world_size = (ctx.rank, ctx.world_size) if ctx is not None else (0, 1)
    sizes = eval_batch_sizes(num_samples, batch_size)
    bar = tqdm(
        total=num_samples,
        desc=f"eval {split}",
        unit="sample",
        leave=False,
        dynamic_ncols=True,
        disable=not progress or rank != 0 or len(sizes) < 4 or not sys.stderr.isatty(),
    )
    was_training = model.training
    model.eval()
    sums: dict[str, torch.Tensor] = {}
    count = 0
    try:
        for index, size in enumerate(sizes):
            if size % world_size:
                raise ValueError(
                    f"evaluation batch of {size} samples does not split over {world_size} ranks; "
                    f"choose sample counts and batch sizes divisible by {world_size}"
                )
            batch = task.batch(split, size, index, rank, world_size).to(device)
            pred = model(batch.x)
            rows = batch.x.shape[0]
            values = {"loss": task.loss(pred, batch).detach().double() * rows}
            values.update({name: v.detach().double().sum() for name, v in task.metrics(pred, batch).items()})
            for name, value in values.items():
                sums[name] = sums[name] + value if name in sums else value
            count += rows
            bar.update(size)
    finally:
        model.train(was_training)
        bar.close()
    names = sorted(sums)
    totals = torch.stack([sums[n] for n in names] + [torch.tensor(float(count), dtype=torch.float64, device=device)])
    if ctx is not None:
        totals = all_reduce_sum(totals, ctx)
    totals = totals.tolist()
    result = {name: total / totals[-1] for name, total in zip(names, totals[:-1])}
    if "nll" in result:
        result["ppl"] = math.exp(result["nll"]) if result["nll"] < 700 else math.inf
    return result
