"""One optimization step at a time (`Trainer`): the model's forward (compiled or eager, with its
fallbacks), the losses, backward, AdamW and the schedule; `update` steps one run or a pack's members
together (hyla.train.packed), and `gradient_step` is what a whole-step CUDA graph captures
(hyla.train.graphed). The loop around it (records, evaluations, checkpoints): hyla.train.loop."""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch
from torch import nn

from hyla.ops import resolve_mixer
from hyla.tasks.base import stable_seed
from hyla.train import graphed
from hyla.train.configs import ExperimentConfig
from hyla.train.distributed import DistContext
from hyla.train.optim import make_optimizer

# The compile modes that replay CUDA graphs on CUDA: a call's outputs live in a memory pool that the
# next call overwrites.
CUDA_GRAPH_MODES = ("reduce-overhead", "max-autotune")


def resolve_compile_mode(mode: str, device: torch.device) -> str:
    """The torch.compile mode that train.compile_mode names on `device` (auto: CUDA graphs on CUDA)."""
    if mode != "auto":
        return mode
    return "reduce-overhead" if device.type == "cuda" else "default"


# A model with HYLA's value network trains eagerly on CUDA, whatever train.compile says: inductor
# computed wrong gradients of HYLA on CUDA (benchmarks/repro_inductor_hyla_grad.py), and compiled, the
# paper's SRAVEN HYLA model stayed at chance on an H100 (3 of 3 seeds, 40k steps) while softmax and
# linear attention compiled the same way learned (docs/gpu.md, experiments/RESULTS.md). `auto` keeps
# HYLA's op out of the graph on CUDA (naive_eager), but no compiled model around that op has been
# shown to learn on a GPU, and a model that fails to learn shows it only after a whole training.
COMPILED_HYLA_ON_CUDA = (
    "train.compile is ignored for a model with HYLA's value network on CUDA: compiled, the SRAVEN "
    "HYLA model did not learn on an H100 (docs/gpu.md); training eagerly"
)


def compile_fallbacks(cfg: ExperimentConfig, device: torch.device) -> list[str | None]:
    """The compile modes to try in turn until one trains the first step: the configured mode, then
    "default", then eager (None). Only eager, with a warning, for HYLA's value network on CUDA."""
    if not cfg.train.compile:
        return [None]
    if device.type == "cuda" and generates_value_network(cfg):
        warnings.warn(COMPILED_HYLA_ON_CUDA, RuntimeWarning, stacklevel=3)
        return [None]
    return [*dict.fromkeys([resolve_compile_mode(cfg.train.compile_mode, device), "default"]), None]


def generates_value_network(cfg: ExperimentConfig) -> bool:
    """Whether the model's mixer is of the HYLA family (the attention generates a value network)."""
    m = cfg.model
    return resolve_mixer(m.mixer, value_network=m.value_network).value_network == "mlp"


def autocast(precision: str, device: torch.device):
    """The context of the forward and the loss: bfloat16 autocast for precision bf16, else none."""
    return torch.autocast(device.type, dtype=torch.bfloat16, enabled=precision == "bf16")


class Trainer:
    """One optimization step at a time: data, forward, backward, AdamW update, schedule.

    `model` is the plain module (evaluate and checkpoint it); `self.forward` is what trains: the
    module, wrapped in DistributedDataParallel when there are several ranks, compiled on request.
    `compile_mode` is the mode in use (None: eager); the first step falls back along
    `compile_fallbacks` when compiling fails. With train.cuda_graph, `graphed` replays the steps as
    one CUDA graph each (hyla.train.graphed) and `cuda_graph` says whether it did (None: not asked
    for). A pack's members (`pack_graphs` not None) are stepped by the pack, graphed or not.
    """

    def __init__(
        self, cfg: ExperimentConfig, task, model: nn.Module, ctx: DistContext, pack_graphs: bool | None = None
    ):
        self.cfg, self.task, self.model, self.ctx = cfg, task, model, ctx
        self.optimizer, self.scheduler = make_optimizer(model, cfg.train)
        self.eager = model
        if ctx.distributed:
            from torch.nn.parallel import DistributedDataParallel

            self.eager = DistributedDataParallel(model, device_ids=[ctx.device] if ctx.device.type == "cuda" else None)
        self.fallbacks = compile_fallbacks(cfg, ctx.device)
        self._use_next_compile_mode()
        asked = cfg.train.cuda_graph == "on"
        if pack_graphs is None:
            graphs = graphed.wanted(cfg.train.cuda_graph, ctx.device, ctx.world_size)
            self.graphed = graphed.GraphedUpdate([self], self._gradient_step) if graphs else None
        else:
            graphs, self.graphed = pack_graphs, None
        self.cuda_graph: bool | None = graphs if asked or graphs else None

    def _use_next_compile_mode(self) -> None:
        self.compile_mode = self.fallbacks.pop(0)
        self.forward = self.eager if self.compile_mode is None else torch.compile(self.eager, mode=self.compile_mode)

    def step(self, step: int) -> tuple[torch.Tensor, torch.Tensor, Any]:
        """Update number `step` (0-based). Returns (loss, predictions, batch) of this rank."""
        batch = self.batch(step)
        while self.fallbacks:  # the first compiled step, until a mode works
            try:
                result = self._update(step, batch)
                self.fallbacks = []
                return result
            except Exception as e:  # noqa: BLE001 - any compiler failure falls back
                failed = self.compile_mode
                self._use_next_compile_mode()
                warnings.warn(
                    f"torch.compile failed (mode {failed}: {type(e).__name__}: "
                    f"{str(e).splitlines()[0] if str(e) else ''}); continuing with "
                    f"{'mode ' + self.compile_mode if self.compile_mode else 'eager mode'}",
                    RuntimeWarning,
                    stacklevel=2,
                )
        return self._update(step, batch)

    def batch(self, step: int):
        """This rank's slice of training batch number `step`, on the device."""
        batch = self.task.batch("train", self.cfg.train.batch_size, step, self.ctx.rank, self.ctx.world_size)
        return batch.to(self.ctx.device)

    def seed_dropout(self, step: int) -> None:
        """Attention dropout draws from the CPU's global generator (a compiled step on CUDA, from the
        GPU's): seed them from the step, so the masks do not depend on what ran before (train()
        restores the generators' states when it returns)."""
        seed = stable_seed(self.cfg.seed, "step", step)
        torch.default_generator.manual_seed(seed)  # the CPU generator only: cheaper than manual_seed
        if self.ctx.device.type == "cuda":
            torch.cuda.manual_seed(seed)

    def dropout_masks(self, step: int, seq_len: int) -> list[torch.Tensor] | None:
        """The attention-dropout keep-masks of update `step` (None: no dropout): with
        train.dropout_masks cpu those the eager forward draws; with device, masks of the same shapes
        from the device's generator (to reproduce runs that drew them there: docs/gpu.md, "Eager HYLA
        on CUDA")."""
        self.seed_dropout(step)
        masks = self.model.draw_dropout_masks(seq_len)
        if masks is None or self.cfg.train.dropout_masks == "cpu" or self.ctx.device.type == "cpu":
            return masks
        keep = 1.0 - self.cfg.model.attention_dropout
        return [torch.bernoulli(torch.full(m.shape, keep, device=m.device, dtype=m.dtype)) / keep for m in masks]

    def _update(self, step: int, batch):
        if self.graphed is not None:
            [(loss, pred)] = self.graphed((batch, self.dropout_masks(step, batch.x.shape[1])))
            self.cuda_graph = self.graphed.active
            return loss, pred, batch
        if self.cfg.train.dropout_masks == "cpu":
            self.seed_dropout(step)
            masks = None  # the forward draws them
        else:
            masks = self.dropout_masks(step, batch.x.shape[1])
        [(loss, pred)] = update([self], lambda: self._forward_losses(batch, masks))
        return loss, pred, batch

    def _forward_losses(self, batch, masks: list[torch.Tensor] | None):
        pred = self.forward(batch.x) if masks is None else self.forward(batch.x, dropout_masks=masks)
        return [self.task.loss(pred, batch)], [pred]

    def _gradient_step(self, inputs: tuple) -> tuple[list[torch.Tensor], list[torch.Tensor]]:
        """`gradient_step` on (batch, dropout masks): what `graphed` captures."""
        batch, masks = inputs
        return gradient_step([self], lambda: self._forward_losses(batch, masks))

    def grad_norm(self) -> torch.Tensor:
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        return torch.nn.utils.get_total_norm(grads) if grads else torch.zeros((), device=self.ctx.device)

    def state(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
        }

    def load_state(self, state: dict) -> None:
        self.model.load_state_dict(state["model"])
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])


def update(
    trainers: list[Trainer], forward_losses: Callable[[], tuple[list[torch.Tensor], Any]]
) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """One optimization step of `trainers` together (one for a solo run, a pack's members in
    `hyla.train.packed`): zero their gradients; under autocast, `forward_losses()` runs the forward
    and returns (each trainer's loss, each trainer's predictions); backpropagate the sum of the
    losses (trainer i's loss reaches trainer i's parameters only); then every trainer's optimizer
    and schedule step. Returns each trainer's (loss, predictions), detached."""
    graphed = any(trainer.compile_mode in CUDA_GRAPH_MODES for trainer in trainers)
    if graphed:
        torch.compiler.cudagraph_mark_step_begin()  # this step's replay may reuse the last step's memory
    losses, preds = gradient_step(trainers, forward_losses)
    for trainer in trainers:
        trainer.scheduler.step()
    # a CUDA-graph output is overwritten by the next step: the caller keeps a copy
    return [(loss.detach(), pred.detach().clone() if graphed else pred.detach()) for loss, pred in zip(losses, preds)]


def gradient_step(trainers: list[Trainer], forward_losses: Callable[[], tuple[list[torch.Tensor], Any]]):
    """`update` without the schedule steps (what a whole-step CUDA graph captures,
    hyla.train.graphed): zero the gradients, forward and losses under autocast, backward, every
    trainer's optimizer step. Returns (losses, predictions) as `forward_losses` gave them."""
    for trainer in trainers:
        trainer.optimizer.zero_grad(set_to_none=True)
    with autocast(trainers[0].cfg.train.precision, trainers[0].ctx.device):
        losses, preds = forward_losses()
    # one loss is backpropagated as it is: a sum over one tensor would add operations
    (losses[0] if len(losses) == 1 else torch.stack(losses).sum()).backward()
    for trainer in trainers:
        trainer.optimizer.step()
    return losses, preds
