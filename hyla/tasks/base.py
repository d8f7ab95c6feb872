"""What the task generators share: the batch container, reproducible random streams, sharding.

Every batch is a pure function of (seed, task, split, step): its random numbers come from a
`RandomStream` (hyla.tasks.random) keyed by a stable hash of those four values, so any batch can
be regenerated, a resumed run sees exactly the batches it would have seen, and `valid` never
repeats a `train` batch (different stream).

The stream is counter-based and made of integer tensor ops, so batches are generated directly on
the task's device and are bit for bit the same on every device. Data-parallel ranks compute only
their own rows of the GLOBAL batch (the counters of a row do not depend on the other rows), so a
run's data (and hence its result) does not depend on the number of ranks.
"""

from __future__ import annotations

import hashlib
import math
from typing import NamedTuple

import torch

from .random import RandomStream


class Batch(NamedTuple):
    """One batch of a task.

    x:    model input `[B, T, input_dim]` float.
    y:    targets (shape depends on the task).
    info: per-sample tensors (first dimension B) describing how the batch was made.
    """

    x: torch.Tensor
    y: torch.Tensor
    info: dict[str, torch.Tensor]

    def to(self, device: torch.device | str) -> Batch:
        return Batch(self.x.to(device), self.y.to(device), {key: value.to(device) for key, value in self.info.items()})

    def rows(self, start: int, stop: int) -> Batch:
        """The samples `start:stop` (views, no copy)."""
        return Batch(
            self.x[start:stop], self.y[start:stop], {key: value[start:stop] for key, value in self.info.items()}
        )


def stable_seed(*parts: int | str) -> int:
    """A 63-bit seed from a hash of `parts` that, unlike `hash()`, is the same in every process."""
    digest = hashlib.blake2b(repr(parts).encode(), digest_size=8).digest()
    return int.from_bytes(digest, "little") >> 1


def held_out_count(num_items: int, fraction: float) -> int:
    """floor(num_items * fraction), as the authors' code does (66 * 0.7 -> 46); the tiny
    tolerance keeps products such as 100 * 0.29 = 28.999... from losing an item."""
    if not 0.0 <= fraction <= 1.0:
        raise ValueError(f"fraction must lie in [0, 1], got {fraction}")
    return math.floor(num_items * fraction + 1e-9)


class Task:
    """Base of the task generators: split checking, seeding, sharding and device placement.

    Subclasses set `name`, `splits`, `seed`, `device`, implement
    `_generate(split, step, batch_size, rows) -> Batch` (rows `rows[0]:rows[1]` of the global
    batch of `batch_size` samples, on `device`, random numbers from `self.random_stream(split, step)`)
    or, when samples are independent rows, derive from `RowwiseTask` and implement `_generate_rows`,
    and provide `loss(pred, batch) -> scalar` and `metrics(pred, batch) -> dict of [B] tensors`.
    """

    name: str
    splits: tuple[str, ...]
    seed: int
    device: torch.device

    def batch(self, split: str, batch_size: int, step: int, rank: int = 0, world_size: int = 1) -> Batch:
        """Rank `rank`'s share (rows `[rank*B/W, (rank+1)*B/W)`) of the global batch of
        `batch_size` samples of `split` at `step`, generated on the task's device."""
        return self._generate(split, step, batch_size, self._rows(split, batch_size, rank, world_size))

    def _rows(self, split: str, batch_size: int, rank: int, world_size: int) -> tuple[int, int]:
        """The rows of the global batch that rank `rank` generates."""
        self.check_split(split)
        if batch_size < 1:
            raise ValueError(f"batch_size must be positive, got {batch_size}")
        if world_size < 1 or not 0 <= rank < world_size:
            raise ValueError(f"need 0 <= rank < world_size, got rank={rank}, world_size={world_size}")
        if batch_size % world_size:
            raise ValueError(f"global batch_size {batch_size} is not divisible by world_size {world_size}")
        per_rank = batch_size // world_size
        return rank * per_rank, (rank + 1) * per_rank

    def random_stream(self, split: str, step: int, device: torch.device | str | None = None) -> RandomStream:
        """The random numbers of batch `step` of `split`, drawn on `device` (default: the task's);
        the same numbers on every device."""
        return RandomStream(stable_seed(self.seed, self.name, split, step), device or self.device)

    def check_split(self, split: str) -> None:
        if split not in self.splits:
            raise ValueError(
                f"unknown split {split!r} for {type(self).__name__}; valid splits: {', '.join(self.splits)}"
            )

    def summarize(self, mean_metrics: dict[str, float]) -> dict[str, float]:
        """Metrics derived from the per-sample metrics averaged over an evaluation (ratios that
        a per-sample mean cannot express); the base adds none."""
        return dict(mean_metrics)

    def _generate(self, split: str, step: int, batch_size: int, rows: tuple[int, int]) -> Batch:
        raise NotImplementedError


class RowwiseTask(Task):
    """A task whose samples are independent rows made from the batch's random stream.

    Subclasses implement `_generate_rows(split, stream, batch_size, rows) -> Batch`: the rows
    `rows` of the global batch, from `stream` (the batch's random stream).
    """

    def _generate(self, split: str, step: int, batch_size: int, rows: tuple[int, int]) -> Batch:
        return self._generate_rows(split, self.random_stream(split, step), batch_size, rows)

    def _generate_rows(self, split: str, stream: RandomStream, batch_size: int, rows: tuple[int, int]) -> Batch:
        raise NotImplementedError
