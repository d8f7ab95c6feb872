"""Evaluation during and after training: `hyla.tasks.evaluate` with the run's data parallelism and
a progress bar.

Evaluation batches come from the split's own random stream (step 0, 1, 2, ... of that split), so
`valid` never repeats a training batch and every evaluation of a run sees the same samples;
`offset` starts further along the stream (`hyla.tasks.evaluation`).
"""

from __future__ import annotations

import functools
import sys

from torch import nn
from tqdm.auto import tqdm

from hyla.tasks import evaluation
from hyla.train.distributed import DistContext, all_reduce_sum


def evaluate(
    model: nn.Module,
    task,
    split: str,
    num_samples: int,
    batch_size: int = 1024,
    ctx: DistContext | None = None,
    progress: bool = False,
    offset: int = 0,
) -> dict[str, float]:
    """Mean of the task's per-sample metrics and of the loss over `num_samples` samples of `split`
    (`hyla.tasks.evaluate`). Under data parallelism every rank evaluates its slice of each batch
    and the sums are reduced, so all ranks return the same.
    `progress`: a bar on a terminal (none elsewhere: a bar redrawn in place garbles a log file)."""
    rank, world_size = (ctx.rank, ctx.world_size) if ctx is not None else (0, 1)
    bar = tqdm(
        total=num_samples,
        desc=f"eval {split}",
        unit="sample",
        leave=False,
        dynamic_ncols=True,
        disable=not progress or rank != 0 or num_samples <= 3 * batch_size or not sys.stderr.isatty(),
    )
    try:
        return evaluation.evaluate(
            model,
            task,
            split,
            num_samples,
            batch_size,
            offset=offset,
            rank=rank,
            world_size=world_size,
            reduce=None if ctx is None else functools.partial(all_reduce_sum, ctx=ctx),
            on_batch=bar.update,
        )
    finally:
        bar.close()
