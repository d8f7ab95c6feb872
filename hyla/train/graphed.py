"""Whole-step CUDA graphs: a training step (forward, backward, AdamW) captured once and replayed.

    update = replayed(eager, trainers, steps)           train.step graphed: an eager update, replayed
    update(trainers, steps) -> [(loss, predictions, batch), ...]
    graph = GraphedUpdate(trainers, gradient_step)      the captured step under it:
    graph.capture(inputs) -> bool                       warm up and capture (False: it failed, warned)
    graph(inputs) -> [(loss, predictions), ...]         one replay; one pair per trainer
    begin_compiled_step(mode) -> bool                   torch.compile's own CUDA graphs (train.step compiled)

The paper's models are small: on a GPU a step is bound by launching its few hundred kernels, not
by their work. PyTorch's "whole-network capture" records the kernels of one step
(`torch.cuda.graph`) and replays them with one launch. Unlike torch.compile's reduce-overhead
mode, the kernels are the eager ones (inductor generates none), so HYLA keeps its eager backward,
which is right on CUDA where inductor's is not (docs/gpu.md). `replayed` turns an eager update
(a run's, hyla.train.step.EagerUpdate, or a pack's, hyla.train.packed.PackedUpdate: its `inputs`
and `gradient_step`) into a graphed one (`ReplayedUpdate`), captured before the first step and
again whenever the trainers change (a pack's member left).

How a step stays the step an eager run takes:
- Static inputs. The captured step reads its batch and dropout masks from buffers. Each step's batch
  and masks are made as in an eager step (same generators, same device) and copied into the buffers
  before the replay, so a seed sees the same data and masks with and without graphs.
- No random numbers inside the graph: the attention-dropout masks are inputs
  (`Trainer.dropout_masks`), drawn outside it.
- A capturable optimizer. The fused AdamW kernel reads each group's learning rate from a device
  tensor. The schedule still sets Python floats (so checkpoints and logs do not change) and the
  tensors are filled from them before every replay: float64 where the kernel takes it, the very
  number an eager step passes; else float32 (with a warning: the update may then differ in the last
  bits).
- Warm-up on a side stream before the capture, as PyTorch requires: a few steps on the first
  step's inputs, whose effect on the weights and optimizer state is then undone (`_Snapshot`),
  so the first replayed step starts from where the eager step would.
- Gradients are set to None before the capture, so the captured backward allocates them in the
  graph's memory pool; every replay overwrites them, and the loss and the predictions, which are
  returned as copies.

If capturing fails (an operation that cannot be captured, a missing CUDA feature), `capture` warns
and the run trains eagerly; `env.json` records what ran (`"cuda_graph": true | false` among the
numerics, the key older runs recorded too).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Iterator
from contextlib import contextmanager, nullcontext
from typing import Any

import torch
from torch.utils._pytree import tree_flatten, tree_unflatten

# Eager steps on a side stream before the capture (PyTorch's example takes 3): they initialize
# cuBLAS handles, autograd's streams and the optimizer's state outside the graph.
WARMUP_STEPS = 3

GradientStep = Callable[[Any], tuple[list[torch.Tensor], Any]]


def wanted(device: torch.device, world_size: int = 1) -> bool:
    """Whether whole-step CUDA graphs (train.step graphed) can replay the steps on `device`: on CUDA
    in one process. Elsewhere it warns (the run trains eagerly)."""
    if device.type == "cuda" and world_size == 1:
        return True
    where = "a CUDA device" if device.type != "cuda" else "one process (no data parallelism)"
    warnings.warn(f"train.step graphed needs {where}; training eagerly on {device}", RuntimeWarning, stacklevel=3)
    return False


def replayed(eager: Any, trainers: list, steps: list[int]) -> ReplayedUpdate:
    """`eager` (an update with `inputs(trainers, steps)` and `gradient_step(trainers, inputs)`)
    replayed as CUDA graphs, captured on the inputs of update `steps` of `trainers`."""
    update = ReplayedUpdate(eager)
    update.prepare(trainers, steps)
    return update


class ReplayedUpdate:
    """An eager update replayed as one CUDA graph per step. `prepare` captures it (where graphs can
    run: `wanted`; a capture that fails warns); while it is not captured, the eager update trains.
    `kind`: the eager update's, with "cuda_graph": whether graphs replay the steps."""

    def __init__(self, eager: Any):
        self.eager, self.graph = eager, None
        self.kind = {**eager.kind, "cuda_graph": False}

    def prepare(self, trainers: list, steps: list[int]) -> None:
        """Capture the update of `trainers` on the inputs of their update `steps`."""
        self.graph, device = None, trainers[0].ctx.device
        if wanted(device, trainers[0].ctx.world_size):
            trainers = list(trainers)
            graph = GraphedUpdate(trainers, lambda inputs: self.eager.gradient_step(trainers, inputs))
            self.graph = graph if graph.capture(self.eager.inputs(trainers, steps)[1]) else None
        self.kind = {**self.eager.kind, "cuda_graph": self.graph is not None}

    def __call__(self, trainers: list, steps: list[int]) -> list[tuple[torch.Tensor, torch.Tensor, Any]]:
        if self.graph is not None and self.graph.trainers != list(trainers):  # a member left: capture anew
            self.prepare(trainers, steps)
        if self.graph is None:
            return self.eager(trainers, steps)
        batches, inputs = self.eager.inputs(trainers, steps)
        return [(loss, pred, batch) for (loss, pred), batch in zip(self.graph(inputs), batches)]


# The torch.compile modes that replay CUDA graphs on CUDA (cudagraph trees): a compiled call's
# outputs live in a memory pool that the next call overwrites.
COMPILE_MODES_WITH_GRAPHS = ("reduce-overhead", "max-autotune")


def begin_compiled_step(mode: str) -> bool:
    """Before a step compiled in `mode`: where the mode replays CUDA graphs, begin a new graph
    generation (this step's replay may reuse the last step's memory) and return True: the caller
    copies the step's outputs before the next."""
    if mode not in COMPILE_MODES_WITH_GRAPHS:
        return False
    torch.compiler.cudagraph_mark_step_begin()
    return True


class CudaGraphs:
    """What capturing needs from CUDA: a side stream for the warm-up, and the capture."""

    def __init__(self, device: torch.device):
        self.stream = torch.cuda.Stream(device)

    @contextmanager
    def side_stream(self) -> Iterator[None]:
        self.stream.wait_stream(torch.cuda.current_stream())
        with torch.cuda.stream(self.stream):
            yield
        torch.cuda.current_stream().wait_stream(self.stream)

    @staticmethod
    def capture(step: Callable[[], Any]) -> Callable[[], Any]:
        """Record `step`'s kernels (running none of them); returns `replay() -> step's outputs`."""
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            outputs = step()

        def replay():
            graph.replay()
            return outputs

        return replay


class GraphedUpdate:
    """One optimization step of `trainers` (hyla.train.step.Trainer), replayed as a CUDA graph.

    `gradient_step(inputs) -> (losses, predictions)`: zero the gradients, forward, backward and every
    trainer's optimizer step, reading only `inputs` (a pytree of tensors: batches, dropout masks);
    losses is a list (one per trainer), predictions a list or a tensor with a leading trainer axis.
    `capture(inputs)` warms the step up and captures it; each call then copies `inputs` into the
    graph's buffers and replays it, returning each trainer's (loss, predictions), copies that the
    next step does not overwrite (the caller steps the schedules). `backend`: `CudaGraphs` (the
    tests pass a stand-in that replays by calling the step again).
    """

    def __init__(self, trainers: list, gradient_step: GradientStep, backend: Any = None):
        self.trainers, self.gradient_step = trainers, gradient_step
        self.device = trainers[0].ctx.device
        self.backend = backend if backend is not None else CudaGraphs(self.device)
        self.lrs: list[torch.Tensor] = []  # per optimizer group, the learning rate the graph reads
        self.static: list[torch.Tensor] | None = None  # the input buffers the graph reads
        self.static_inputs: Any = None
        self.spec = None
        self.replay: Callable[[], tuple[torch.Tensor, torch.Tensor]] | None = None

    def capture(self, inputs: Any) -> bool:
        """Warm up on `inputs` (undone afterwards) and capture the step; False, with a warning, when
        capturing failed (then nothing of the warm-up remains and the caller trains eagerly)."""
        self._copy_in(inputs)
        dtype = lr_dtype(self.device)
        self.lrs = [torch.zeros((), dtype=dtype, device=self.device) for _ in self._groups()]
        self._fill_lrs()
        try:
            self.replay = self._capture()
        except Exception as e:  # noqa: BLE001 - whatever stops the capture, train on eagerly
            first_line = str(e).splitlines()[0] if str(e) else ""
            warnings.warn(
                f"CUDA graph capture failed ({type(e).__name__}: {first_line}); training eagerly",
                RuntimeWarning,
                stacklevel=3,
            )
            return False
        return True

    def __call__(self, inputs: Any) -> list[tuple[torch.Tensor, torch.Tensor]]:
        self._copy_in(inputs)
        self._fill_lrs()
        losses, preds = self.replay()
        # the next replay overwrites the graph's outputs: the caller keeps copies
        return list(zip(losses.clone().unbind(0), preds.clone().unbind(0)))

    def _fill_lrs(self) -> None:
        for group, lr in zip(self._groups(), self.lrs):
            lr.fill_(group["lr"])

    def _copy_in(self, inputs: Any) -> None:
        leaves, spec = tree_flatten(inputs)
        if self.static is None:
            self.static, self.spec = [leaf.detach().clone() for leaf in leaves], spec
            self.static_inputs = tree_unflatten(self.static, spec)
            return
        if spec != self.spec or any(a.shape != b.shape or a.dtype != b.dtype for a, b in zip(leaves, self.static)):
            raise ValueError("a graphed step's inputs changed their structure, shapes or dtypes")
        for static, leaf in zip(self.static, leaves):  # a few tensors: public copies, no private op
            static.copy_(leaf)

    def _capture(self) -> Callable[[], tuple[torch.Tensor, torch.Tensor]]:
        """Warm up on the side stream, undo the warm-up's updates, capture the step."""
        snapshot = _Snapshot(self.trainers)
        try:
            with self.backend.side_stream():
                for _ in range(WARMUP_STEPS):
                    self._static_step()
        finally:
            snapshot.restore()
        for trainer in self.trainers:  # the captured backward allocates the gradients in the graph's pool
            trainer.optimizer.zero_grad(set_to_none=True)
        return self.backend.capture(self._static_step)

    def _static_step(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The step on the static inputs, with the learning rates read from their tensors; returns
        the losses [M] and predictions [M, ...] (stacked inside the graph: one copy each after a replay)."""
        with self._capturable_optimizers():
            losses, preds = self.gradient_step(self.static_inputs)
        return torch.stack([loss.detach() for loss in losses]), _stacked(preds).detach()

    @contextmanager
    def _capturable_optimizers(self) -> Iterator[None]:
        """Every group's learning rate as its tensor and `capturable` on (torch refuses to capture
        a step otherwise); afterwards the floats again, as the schedule and the checkpoints see them."""
        groups = self._groups()
        saved = [(group["lr"], group["capturable"]) for group in groups]
        for group, lr in zip(groups, self.lrs):
            group["lr"], group["capturable"] = lr, True
        try:
            yield
        finally:
            for group, (lr, capturable) in zip(groups, saved):
                group["lr"], group["capturable"] = lr, capturable

    def _groups(self) -> list[dict]:
        # (looked up each time: loading an optimizer's state replaces its group dicts)
        return [group for trainer in self.trainers for group in trainer.optimizer.param_groups]


def _stacked(preds: Any) -> torch.Tensor:
    return preds if isinstance(preds, torch.Tensor) else torch.stack(list(preds))


class _Snapshot:
    """The trainers' parameters and optimizer states, to undo the warm-up's updates in place (the
    graph keeps the tensors' addresses). State that the warm-up created is zeroed: what AdamW
    creates at its first step (zero moments, step 0)."""

    def __init__(self, trainers: list):
        self.params = [(p, p.detach().clone()) for trainer in trainers for p in trainer.model.parameters()]
        self.optimizers = [trainer.optimizer for trainer in trainers]
        self.states = [
            {p: {k: v.clone() for k, v in state.items() if torch.is_tensor(v)} for p, state in opt.state.items()}
            for opt in self.optimizers
        ]

    @torch.no_grad()
    def restore(self) -> None:
        for p, saved in self.params:
            p.copy_(saved)
        for optimizer, saved_states in zip(self.optimizers, self.states):
            for p, state in optimizer.state.items():
                before = saved_states.get(p, {})
                for key, value in state.items():
                    if torch.is_tensor(value) and key in before:
                        value.copy_(before[key])
                    elif torch.is_tensor(value):
                        value.zero_()


LR_DTYPES: dict[str, torch.dtype] = {}  # per device: the learning-rate dtype the fused AdamW kernel takes


def lr_dtype(device: torch.device) -> torch.dtype:
    """float64 when the fused AdamW kernel on `device` takes a float64 learning-rate tensor (then a
    graphed update computes with the number an eager one passes), else float32, with a warning."""
    key = str(device)
    if key not in LR_DTYPES:
        LR_DTYPES[key] = torch.float64 if _takes_float64_lr(device) else torch.float32
        if LR_DTYPES[key] is torch.float32:
            warnings.warn(
                f"the fused AdamW kernel on {device} takes no float64 learning rate: graphed updates use "
                "float32 learning rates and may differ from eager ones in the last bits",
                RuntimeWarning,
                stacklevel=3,
            )
    return LR_DTYPES[key]


def _takes_float64_lr(device: torch.device) -> bool:
    p = torch.zeros(2, device=device, requires_grad=True)
    p.grad = torch.ones(2, device=device)
    lr = torch.tensor(1e-3, dtype=torch.float64, device=device)
    try:
        context = torch.cuda.device(device) if device.type == "cuda" else nullcontext()
        with context:
            torch.optim.AdamW([p], lr=lr, fused=True, capturable=True).step()
    except (RuntimeError, TypeError, ValueError):
        return False
    return True


__all__ = [
    "CudaGraphs",
    "GraphedUpdate",
    "ReplayedUpdate",
    "WARMUP_STEPS",
    "begin_compiled_step",
    "lr_dtype",
    "replayed",
    "wanted",
]
