"""Data parallelism from the outside: `torchrun --nproc_per_node=N hyla train ...` runs the same
command on N ranks. Every rank draws its slice of the same global batch, DistributedDataParallel
averages gradients (so the loss is the global-batch mean), and only rank 0 writes files.
`torchrun_env()` is the one reader of what torchrun tells a process (RANK, WORLD_SIZE, ...).
"""

from __future__ import annotations

import os
from dataclasses import dataclass

import torch
import torch.distributed as dist


@dataclass(frozen=True)
class Torchrun:
    """What torchrun tells each process it starts, in its environment; the one place that reads it.
    A process that torchrun did not start is rank 0 of 1."""

    rank: int  # RANK
    world_size: int  # WORLD_SIZE
    local_rank: int  # LOCAL_RANK: the rank on this machine (its GPU)
    local_world_size: int | None  # LOCAL_WORLD_SIZE: the ranks on this machine (None: not set)


def torchrun_env() -> Torchrun:
    env = os.environ
    local_world_size = env.get("LOCAL_WORLD_SIZE")
    return Torchrun(
        int(env.get("RANK", "0")),
        int(env.get("WORLD_SIZE", "1")),
        int(env.get("LOCAL_RANK", "0")),
        None if local_world_size is None else int(local_world_size),
    )


@dataclass(frozen=True)
class DistContext:
    rank: int
    world_size: int
    device: torch.device

    @property
    def is_main(self) -> bool:
        return self.rank == 0

    @property
    def distributed(self) -> bool:
        return self.world_size > 1


def resolve_device(name: str, local_rank: int = 0) -> torch.device:
    if name == "auto":
        name = "cuda" if torch.cuda.is_available() else "cpu"
    if name == "cuda":
        if not torch.cuda.is_available():
            raise RuntimeError("train.device=cuda but CUDA is not available; use --train.device cpu")
        return torch.device("cuda", local_rank)
    return torch.device(name)


def setup(device_name: str) -> DistContext:
    """Join the process group if launched by torchrun (WORLD_SIZE > 1), else a single process."""
    launched = torchrun_env()
    device = resolve_device(device_name, launched.local_rank)
    if launched.world_size == 1:
        return DistContext(0, 1, device)
    if device.type == "cuda":
        torch.cuda.set_device(device)
    if not dist.is_initialized():
        dist.init_process_group("nccl" if device.type == "cuda" else "gloo")
    return DistContext(dist.get_rank(), dist.get_world_size(), device)


def teardown(ctx: DistContext) -> None:
    if ctx.distributed and dist.is_initialized():
        dist.destroy_process_group()


def all_reduce_sum(tensor: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    if ctx.distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.SUM)
    return tensor


def all_reduce_max(tensor: torch.Tensor, ctx: DistContext) -> torch.Tensor:
    if ctx.distributed:
        dist.all_reduce(tensor, op=dist.ReduceOp.MAX)
    return tensor


def barrier(ctx: DistContext) -> None:
    if ctx.distributed:
        dist.barrier()


def any_rank(flag: bool, ctx: DistContext) -> bool:
    """True on every rank when `flag` is true on any (e.g. a stop signal that reached one rank)."""
    if not ctx.distributed:
        return flag
    return bool(all_reduce_max(torch.tensor([float(flag)], device=ctx.device), ctx).item())
