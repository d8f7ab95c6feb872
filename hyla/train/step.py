"""One training step: what a run trains (`Trainer`), and the update function it chooses, once.

    update(trainers, steps) -> [(loss, predictions, batch), ...]   update number steps[i] of trainers[i]
    choose_update([trainer], [step]) -> update                       train.step: eager | compiled | graphed

Read `gradient_step` and `EagerUpdate`: an update draws each trainer's batch and dropout masks
(`Trainer.batch`, `Trainer.dropout_masks`, the one source of the masks), zeroes the gradients, runs
the forward and the loss (under autocast for bf16), backpropagates and takes the optimizer's step;
the loop that calls it steps the schedules (hyla.train.loop.run_steps). A run's update is eager
(`EagerUpdate`), compiled (`CompiledUpdate`: the modes of `compile_fallbacks` in turn, each warmed
up on the first step's batch, falling back when compiling fails) or the eager update replayed as
whole-step CUDA graphs (hyla.train.graphed, which holds every CUDA-graph detail). A pack's update
steps its members' trainers through the same `gradient_step` (hyla.train.packed). `update.kind`
says what an update is (compile, compile_mode, cuda_graph, packed: hyla.train.numerics).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable
from typing import Any

import torch

from hyla.nn.transformer import Transformer
from hyla.ops import resolve_mixer
from hyla.tasks.base import stable_seed
from hyla.train import graphed
from hyla.train.configs import ExperimentConfig
from hyla.train.distributed import DistContext
from hyla.train.optim import make_optimizer
from hyla.train.progress import say

# update(trainers, steps) -> [(loss, predictions, batch), ...]; it also has `kind`, a dict
Update = Callable[[list, list[int]], list[tuple[torch.Tensor, torch.Tensor, Any]]]


def resolve_compile_mode(mode: str, device: torch.device) -> str:
    """The torch.compile mode that train.compile_mode names on `device` (auto: CUDA graphs on CUDA)."""
    if mode != "auto":
        return mode
    return "reduce-overhead" if device.type == "cuda" else "default"


# A model with HYLA's value network trains eagerly on CUDA, even with train.step compiled: inductor
# computed wrong gradients of HYLA on CUDA (benchmarks/repro_inductor_hyla_grad.py), and compiled, the
# paper's SRAVEN HYLA model stayed at chance on an H100 (3 of 3 seeds, 40k steps) while softmax and
# linear attention compiled the same way learned (docs/gpu.md, experiments/RESULTS.md). `auto` keeps
# HYLA's op out of the graph on CUDA (naive_eager), but no compiled model around that op has been
# shown to learn on a GPU, and a model that fails to learn shows it only after a whole training.
COMPILED_HYLA_ON_CUDA = (
    "train.step compiled is ignored for a model with HYLA's value network on CUDA: compiled, the SRAVEN "
    "HYLA model did not learn on an H100 (docs/gpu.md); training eagerly"
)


def compile_fallbacks(cfg: ExperimentConfig, device: torch.device) -> list[str | None]:
    """The compile modes to try in turn until one compiles the first step: the configured mode, then
    "default", then eager (None). Only eager, with a warning, for HYLA's value network on CUDA."""
    if cfg.train.step != "compiled":
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


def build_model(cfg: ExperimentConfig):
    """The model of a resolved config, initialized from the seed on the CPU (same on every device
    and torch version: docs/paper_fidelity.md)."""
    devices = [torch.cuda.current_device()] if torch.cuda.is_available() and torch.cuda.is_initialized() else []
    with torch.random.fork_rng(devices=devices):
        torch.manual_seed(stable_seed(cfg.seed, "init"))
        return Transformer(cfg.model)


class Trainer:
    """What one run trains, on `ctx`'s device: `model` (the plain module: evaluate and checkpoint it),
    `module` (the model, in DistributedDataParallel when there are several ranks), AdamW and its
    schedule, and the batch and dropout masks of each update on this rank. The model is initialized
    from the seed (`build_model`); with `state`, a checkpoint (`Trainer.state()`), the model, AdamW and
    the schedule continue from it."""

    def __init__(self, cfg: ExperimentConfig, task, ctx: DistContext, state: dict | None = None):
        self.cfg, self.task, self.ctx = cfg, task, ctx
        self.model = build_model(cfg).to(ctx.device)
        if state is not None:
            self.model.load_state_dict(state["model"])
        self.optimizer, self.scheduler = make_optimizer(self.model, cfg.optim, cfg.train.steps, state)
        self.module = self.model
        if ctx.distributed:
            from torch.nn.parallel import DistributedDataParallel

            devices = [ctx.device] if ctx.device.type == "cuda" else None
            self.module = DistributedDataParallel(self.model, device_ids=devices)

    def batch(self, step: int):
        """This rank's slice of training batch number `step`, on the device."""
        batch = self.task.batch("train", self.cfg.train.batch_size, step, self.ctx.rank, self.ctx.world_size)
        return batch.to(self.ctx.device)

    def dropout_masks(self, step: int, seq_len: int, drawn_in_forward: bool = False) -> list[torch.Tensor] | None:
        """The attention-dropout keep-masks of update `step` (None: no dropout), the one source of
        every update's masks. The global generators are seeded from (seed, step), so the masks do
        not depend on what ran before (train() restores the generators' states when it returns);
        with train.dropout_masks cpu the masks come from the CPU's generator (the same on every
        device), with device from the device's (to reproduce runs that drew them there: docs/gpu.md,
        "Eager HYLA on CUDA"). `drawn_in_forward`: the caller's forward draws cpu masks itself, from
        the seeded generator (eager: these masks; compiled: inside its graph, from the generator of
        its device; bf16: in bfloat16), and gets None."""
        seed = stable_seed(self.cfg.seed, "step", step)
        torch.default_generator.manual_seed(seed)  # the CPU generator only: cheaper than manual_seed
        if self.ctx.device.type == "cuda":
            torch.cuda.manual_seed(seed)
        if drawn_in_forward and self.cfg.train.dropout_masks == "cpu":
            return None
        masks = self.model.draw_dropout_masks(seq_len)
        if masks is None or self.cfg.train.dropout_masks == "cpu" or self.ctx.device.type == "cpu":
            return masks
        keep = 1.0 - self.cfg.model.attention_dropout
        return [torch.bernoulli(torch.full(m.shape, keep, device=m.device, dtype=m.dtype)) / keep for m in masks]

    def grad_norm(self) -> torch.Tensor:
        grads = [p.grad for p in self.model.parameters() if p.grad is not None]
        return torch.nn.utils.get_total_norm(grads) if grads else torch.zeros((), device=self.ctx.device)

    def state(self) -> dict:
        return {
            "model": self.model.state_dict(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
        }


def gradient_step(trainers: list[Trainer], forward_losses: Callable[[], tuple[list[torch.Tensor], Any]]):
    """One optimization step of `trainers` together (one for a solo run, a pack's members in
    hyla.train.packed): zero their gradients; under autocast, `forward_losses()` runs the forward and
    returns (each trainer's loss, each trainer's predictions); backpropagate the sum of the losses
    (trainer i's loss reaches trainer i's parameters only); every trainer's optimizer steps. Returns
    (losses, predictions) as `forward_losses` gave them. (What a whole-step CUDA graph captures.)"""
    for trainer in trainers:
        trainer.optimizer.zero_grad(set_to_none=True)
    with autocast(trainers[0].cfg.train.precision, trainers[0].ctx.device):
        losses, preds = forward_losses()
    # one loss is backpropagated as it is: a sum over one tensor would add operations
    (losses[0] if len(losses) == 1 else torch.stack(losses).sum()).backward()
    for trainer in trainers:
        trainer.optimizer.step()
    return losses, preds


class EagerUpdate:
    """The update of one run with its model, eagerly: `inputs` (the step's batch and, drawn ahead
    when `masks_ahead`, its dropout masks) and `gradient_step` on them, which a graphed update
    captures (hyla.train.graphed). `kind`: what it is, for the numerics."""

    def __init__(self, trainer: Trainer, masks_ahead: bool = False):
        self.trainer, self.forward, self.masks_ahead = trainer, trainer.module, masks_ahead
        self.kind: dict[str, Any] = {"compile": False, "compile_mode": None}

    def __call__(self, trainers: list[Trainer], steps: list[int]) -> list[tuple[torch.Tensor, torch.Tensor, Any]]:
        batches, inputs = self.inputs(trainers, steps)
        copies = self.begin_step()
        losses, preds = gradient_step(trainers, lambda: self.forward_losses(*inputs))
        return [
            (loss.detach(), pred.detach().clone() if copies else pred.detach(), batch)
            for loss, pred, batch in zip(losses, preds, batches)
        ]

    def begin_step(self) -> bool:
        """Before the forward: whether the step's predictions are to be copied (the next step
        overwrites them). An eager step's are not."""
        return False

    def inputs(self, trainers: list[Trainer], steps: list[int]) -> tuple[list, tuple]:
        """The batch of update steps[0] of the run, and its gradient step's inputs: (batch, masks)."""
        [trainer], [step] = trainers, steps
        batch = trainer.batch(step)
        return [batch], (batch, trainer.dropout_masks(step, batch.x.shape[1], drawn_in_forward=not self.masks_ahead))

    def gradient_step(self, trainers: list[Trainer], inputs: tuple) -> tuple[list, list]:
        return gradient_step(trainers, lambda: self.forward_losses(*inputs))

    def forward_losses(self, batch, masks: list[torch.Tensor] | None) -> tuple[list, list]:
        pred = self.forward(batch.x) if masks is None else self.forward(batch.x, dropout_masks=masks)
        return [self.trainer.task.loss(pred, batch)], [pred]


class CompiledUpdate(EagerUpdate):
    """The update of one run with its model compiled by torch.compile in `mode`. Under a mode that
    replays CUDA graphs, the predictions are copies (hyla.train.graphed.begin_compiled_step)."""

    def __init__(self, trainer: Trainer, mode: str):
        super().__init__(trainer)
        self.forward, self.mode = torch.compile(trainer.module, mode=mode), mode
        self.kind = {"compile": True, "compile_mode": mode}

    def begin_step(self) -> bool:
        return graphed.begin_compiled_step(self.mode)

    def warm_up(self, step: int) -> None:
        """Compile: the forward and backward of update `step`, without the optimizer's step; the
        gradients are cleared again."""
        _, (batch, masks) = self.inputs([self.trainer], [step])
        self.begin_step()
        with autocast(self.trainer.cfg.train.precision, self.trainer.ctx.device):
            [loss], _ = self.forward_losses(batch, masks)
        loss.backward()
        self.trainer.optimizer.zero_grad(set_to_none=True)


def choose_update(trainers: list[Trainer], steps: list[int]) -> Update:
    """The update function of a run (one trainer), chosen once, before update steps[0] (the
    session's first), as train.step says: eager; compiled, warmed up on that step's batch (a mode
    that fails falls back, with a warning, to the next of `compile_fallbacks`, the last eager); or
    graphed, captured on that step's inputs (hyla.train.graphed; eager where it cannot be). A pack's:
    hyla.train.packed.choose_packed_update."""
    [trainer], [step] = trainers, steps
    if trainer.cfg.train.step == "graphed":
        return graphed.replayed(EagerUpdate(trainer, masks_ahead=True), trainers, steps)
    modes = compile_fallbacks(trainer.cfg, trainer.ctx.device)
    for mode, fallback in zip(modes, modes[1:]):  # the last mode is eager (None)
        if trainer.ctx.is_main:
            say(f"compiling the model (torch.compile mode {mode}) on the first batch")
        update = CompiledUpdate(trainer, mode)
        try:
            update.warm_up(step)
            return update
        except Exception as e:  # noqa: BLE001 - any compiler failure falls back
            trainer.optimizer.zero_grad(set_to_none=True)
            warnings.warn(
                f"torch.compile failed (mode {mode}: {type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}); continuing with "
                f"{'mode ' + fallback if fallback else 'eager mode'}",
                RuntimeWarning,
                stacklevel=2,
            )
    return EagerUpdate(trainer)
