"""One optimization step: what a run trains (`Trainer`) and the update functions it chooses from, once.

    update(step, batch) -> (loss, predictions)     update number `step` (0-based) on this rank's batch
    choose_update(trainer, step) -> (update, what it is)

Every update zeroes the gradients, runs the forward and the loss (under autocast for bf16),
backpropagates and takes the optimizer's step (`gradient_step`); the loop that calls it steps the
schedule. `choose_update` picks, before the first step, the eager model, the compiled model
(train.compile: the modes of `compile_fallbacks` in turn, each warmed up on the first step's batch,
falling back when compiling fails) or whole-step CUDA graphs (train.cuda_graph on, on CUDA:
hyla.train.graphed). A pack's members step together through `gradient_step` (hyla.train.packed).
The loop around the update (records, evaluations, checkpoints): hyla.train.loop.
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

Update = Callable[[int, Any], tuple[torch.Tensor, torch.Tensor]]

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
    """The compile modes to try in turn until one compiles the first step: the configured mode, then
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
        self.optimizer, self.scheduler = make_optimizer(self.model, cfg.train, state)
        self.module = self.model
        if ctx.distributed:
            from torch.nn.parallel import DistributedDataParallel

            devices = [ctx.device] if ctx.device.type == "cuda" else None
            self.module = DistributedDataParallel(self.model, device_ids=devices)

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


class ModelUpdate:
    """The update of one run with its model, eager or compiled with `compile_mode` (None: eager).
    Under a mode that replays CUDA graphs, every step begins a new graph generation and its
    predictions are copied (the next replay overwrites them)."""

    def __init__(self, trainer: Trainer, compile_mode: str | None = None):
        self.trainer = trainer
        self.forward = trainer.module if compile_mode is None else torch.compile(trainer.module, mode=compile_mode)
        self.replays_graphs = compile_mode in CUDA_GRAPH_MODES

    def __call__(self, step: int, batch) -> tuple[torch.Tensor, torch.Tensor]:
        masks = self.masks(step, batch)
        if self.replays_graphs:
            torch.compiler.cudagraph_mark_step_begin()  # this step's replay may reuse the last step's memory
        [loss], [pred] = gradient_step([self.trainer], lambda: self.forward_losses(batch, masks))
        return loss.detach(), pred.detach().clone() if self.replays_graphs else pred.detach()

    def warm_up(self, step: int, batch) -> None:
        """Compile: the forward and backward of update `step` on `batch`, without the optimizer's
        step; the gradients are cleared again."""
        masks = self.masks(step, batch)
        if self.replays_graphs:
            torch.compiler.cudagraph_mark_step_begin()
        with autocast(self.trainer.cfg.train.precision, self.trainer.ctx.device):
            [loss], _ = self.forward_losses(batch, masks)
        loss.backward()
        self.trainer.optimizer.zero_grad(set_to_none=True)

    def masks(self, step: int, batch) -> list[torch.Tensor] | None:
        """The dropout masks to hand the forward: None where it draws them itself (train.dropout_masks
        cpu: its generator seeded from the step)."""
        if self.trainer.cfg.train.dropout_masks == "cpu":
            self.trainer.seed_dropout(step)
            return None
        return self.trainer.dropout_masks(step, batch.x.shape[1])

    def forward_losses(self, batch, masks: list[torch.Tensor] | None) -> tuple[list, list]:
        pred = self.forward(batch.x) if masks is None else self.forward(batch.x, dropout_masks=masks)
        return [self.trainer.task.loss(pred, batch)], [pred]


def choose_update(trainer: Trainer, step: int) -> tuple[Update, dict[str, Any]]:
    """The update function of a run, chosen once, before update `step` (the session's first), and
    what it is (it joins the numerics: compile, compile_mode and, with train.cuda_graph on,
    cuda_graph). A compiled or graphed update is warmed up on that step's batch; one that fails
    falls back, with a warning: a compile mode to the next of `compile_fallbacks`, graphs to eager."""
    cfg, ctx = trainer.cfg, trainer.ctx
    eager = {"compile": False, "compile_mode": None}
    if cfg.train.cuda_graph == "on":
        update = graphed_update(trainer, step) if graphed.wanted("on", ctx.device, ctx.world_size) else None
        if update is not None:
            return update, {**eager, "cuda_graph": True}
        return ModelUpdate(trainer), {**eager, "cuda_graph": False}
    modes = compile_fallbacks(cfg, ctx.device)
    for mode, fallback in zip(modes, modes[1:]):  # the last mode is eager (None)
        if ctx.is_main:
            say(f"compiling the model (torch.compile mode {mode}) on the first batch")
        update = ModelUpdate(trainer, mode)
        try:
            update.warm_up(step, trainer.batch(step))
            return update, {"compile": True, "compile_mode": mode}
        except Exception as e:  # noqa: BLE001 - any compiler failure falls back
            trainer.optimizer.zero_grad(set_to_none=True)
            warnings.warn(
                f"torch.compile failed (mode {mode}: {type(e).__name__}: "
                f"{str(e).splitlines()[0] if str(e) else ''}); continuing with "
                f"{'mode ' + fallback if fallback else 'eager mode'}",
                RuntimeWarning,
                stacklevel=2,
            )
    return ModelUpdate(trainer), eager


def graphed_update(trainer: Trainer, step: int) -> Update | None:
    """The eager update replayed as one CUDA graph per step (hyla.train.graphed), captured on update
    `step`'s inputs; None when capturing failed (it warned). The dropout masks are drawn ahead,
    outside the graph (`Trainer.dropout_masks`)."""
    eager = ModelUpdate(trainer)

    def step_on(inputs: tuple) -> tuple[list, list]:
        return gradient_step([trainer], lambda: eager.forward_losses(*inputs))

    def inputs(step: int, batch) -> tuple:
        return batch, trainer.dropout_masks(step, batch.x.shape[1])

    graph = graphed.GraphedUpdate([trainer], step_on)

    def update(step: int, batch) -> tuple[torch.Tensor, torch.Tensor]:
        [(loss, pred)] = graph(inputs(step, batch))
        return loss, pred

    return update if graph.capture(inputs(step, trainer.batch(step))) else None
