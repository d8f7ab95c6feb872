"""The numerics of a run: the settings that change floating-point results. `process_settings` sets
them for the duration of a run (threads, deterministic mode, float32 matmul precision, the compiler
flag, the global RNG) and `numerics` records them (env.json, checkpoints), so that a resumed run
can say when it will not be bit-identical to an uninterrupted one."""

from __future__ import annotations

import os
import warnings
from contextlib import contextmanager
from pathlib import Path
from typing import Any

import torch

from hyla.ops import resolve_mixer
from hyla.ops.kernels import cpp
from hyla.train.allocator import keep_freed_memory
from hyla.train.configs import ExperimentConfig
from hyla.train.distributed import DistContext, torchrun_env
from hyla.train.step import generates_value_network
from hyla.utils import switches


def default_threads(world_size: int = 1) -> int:
    """Threads per process: the cores this process may use, shared among the ranks on this machine
    (torchrun's LOCAL_WORLD_SIZE, else `world_size`)."""
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else (os.cpu_count() or 1)
    local_ranks = torchrun_env().local_world_size or world_size
    return max(1, cores // local_ranks)


# torch.set_float32_matmul_precision for each train.precision (bf16 autocasts; what stays float32 is exact)
MATMUL_PRECISION = {"fp32": "highest", "tf32": "high", "bf16": "highest"}


def numerics(cfg: ExperimentConfig, ctx: DistContext, update_kind: dict[str, Any]) -> dict[str, Any]:
    """The settings that change floating-point results (recorded in env.json and checkpoints), and
    OpenMP's wait policy and spin count, which change only the speed (hyla.cli.bound_openmp_waiting).
    `update_kind`: what the update function is (its `kind`, hyla.train.step): compile and
    compile_mode (the torch.compile mode that trains, None: eager), cuda_graph (with train.step
    graphed: whether CUDA graphs replay the steps), packed (True: trained in a pack, hyla.train.packed,
    whose batched kernels round differently)."""
    settings = {
        "threads": torch.get_num_threads(),
        "device": str(ctx.device),
        **update_kind,  # compile, compile_mode (and cuda_graph, packed)
        "precision": cfg.train.precision,
        "deterministic": cfg.train.deterministic,
        "world_size": ctx.world_size,
        "torch": str(torch.__version__),
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "gomp_spincount": os.environ.get("GOMP_SPINCOUNT"),
        "query_pruning": not switches().off("query_pruning"),  # same values as unpruned, other roundings
    }
    if update_kind.get("compile"):
        settings["gelu_sigmoid"] = not switches().off("gelu_sigmoid")  # GELU's form under torch.compile
    elif not settings.get("packed") and ctx.device.type == "cpu" and gelu_mlp_in_float32(cfg):
        # eager GELU (tanh): hyla's C++ kernel, or aten's (HYLA_GELU_KERNEL=0, or without a compiler).
        # Not in RECORDED_LATER: a checkpoint without it trained with aten's, and resuming warns.
        settings["gelu_kernel"] = not switches().off("gelu_kernel") and cpp.available()
    if not settings.get("packed") and ctx.device.type == "cpu" and generates_value_network(cfg):
        # HYLA's C++ kernel, or PyTorch forms (without a compiler, or with HYLA_CPP_KERNEL=0)
        settings["cpp_kernel"] = not switches().off("cpp_kernel") and cpp.available()
    elif (
        not settings.get("packed")
        and ctx.device.type == "cpu"
        and not update_kind.get("compile")
        and linear_in_cpp(cfg)
    ):
        # multi-head attention: the C++ kernel (normalization none or rms_head), or the reference.
        # Not in RECORDED_LATER: a checkpoint without it trained with the reference, and resuming warns.
        settings["cpp_linear"] = not switches().off("cpp_linear") and cpp.available()
    return settings


def gelu_mlp_in_float32(cfg: ExperimentConfig) -> bool:
    """Whether the model's GELU (tanh) runs on float32 tensors (the C++ GELU kernel's case)."""
    return cfg.model.feedforward == "gelu_mlp" and cfg.train.precision != "bf16"


def linear_in_cpp(cfg: ExperimentConfig) -> bool:
    """Whether the model's mixer is multi-head attention of a normalization the C++ kernel takes."""
    m = cfg.model
    mixer = resolve_mixer(m.mixer, normalization=m.normalization, value_network=m.value_network)
    return mixer.value_network == "linear" and mixer.normalization in cpp.NORMALIZATIONS


RECORDED_LATER = ("query_pruning", "gelu_sigmoid")  # since 0.2.1: older checkpoints lack them


def warn_if_changed(saved: dict, now: dict, run: Path) -> None:
    """Warn when a run resumes (`saved`: the checkpoint's numerics; empty for a new run) with other
    numerics than it trained with: the result will not be bit-identical to an uninterrupted run."""
    if not saved:
        return
    saved = {"precision": "fp32", **saved}  # a checkpoint that records no precision trained in fp32
    # (what attention ran is known after the first step: recorded then, not compared; the wait policy
    # changes only the speed; a checkpoint written before the switches were recorded is not compared
    # on them)
    changed = {
        k: (saved.get(k), now.get(k))
        for k in {**saved, **now}
        if saved.get(k) != now.get(k)
        and k not in ("attention", "omp_wait_policy", "gomp_spincount")
        and (k in saved or k not in RECORDED_LATER)
    }
    if changed:
        what = ", ".join(f"{k} {b} (was {a})" for k, (a, b) in changed.items())
        warnings.warn(
            f"resuming {run} with {what}: the result will not be bit-identical to an uninterrupted run",
            RuntimeWarning,
            stacklevel=3,
        )


@contextmanager
def process_settings(cfg: ExperimentConfig, ctx: DistContext):
    """Threads, deterministic mode, float32 matmul precision and the global RNG for
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
        with torch.random.fork_rng(devices=devices):
            yield
    finally:
        torch.set_num_threads(threads)
        torch.set_float32_matmul_precision(matmul)
        torch.use_deterministic_algorithms(deterministic)
        if cublas is None:
            os.environ.pop("CUBLAS_WORKSPACE_CONFIG", None)
