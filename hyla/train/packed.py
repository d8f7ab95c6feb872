"""Packed training: runs of one architecture train together, as one batched model in one process.

    train_packed([cfg, ...]) -> [run folder, ...]
    plan_packs([cfg, ...], size) -> [[cfg, ...], ...]    group runs into packs (`hyla sweep --pack`)

The paper's models are tiny (~0.4M parameters): one run leaves a GPU mostly idle. A pack trains N
runs with one forward and one backward per step over a member axis (`torch.func.vmap`), so one
device runs a whole table at once.

Members share what fixes the parameter and input shapes (`pack_key`: the task, the model config,
the batch size) and the process settings (device, threads, deterministic mode, precision). Everything else
may differ: the seed (hence the data, the task split, the initialization and the dropout masks),
learning rate, weight decay, warmup, steps, evaluation, logging and checkpoint cadence.

How: each member keeps what its solo run has: its plain model, fused AdamW and schedule (a
`Trainer`), and its own `Session`, which writes an ordinary run folder (config, env, metrics,
summary, checkpoints); the loop that steps a solo run steps the pack (hyla.train.loop.run_steps).
The pack's update function (`PackedUpdate`) takes the place of a solo run's:
every step the members' parameters are stacked with `torch.stack` (so the gradients flow back into
each member's own tensors), one vmapped forward and backward computes all members, and each
member's optimizer takes its ordinary step (`hyla.train.step.gradient_step`); then each member's
schedule steps. A member draws its own batch, and
its own dropout masks from its own per-step seed in the order its solo forward draws them. A member
that reaches its end (train.steps, or train.stop_at) finishes (final evaluation, summary) and
leaves the pack; a member whose loss becomes non-finite leaves with a "diverged" summary, and
`train_packed` raises NonFiniteLossError once the others are done. When any member's checkpoint is
due, every member checkpoints, so that a stopped pack resumes with all members at one step.

What is guaranteed (tests/train/test_packed.py checks each; kill -9 as a simulated crash):
- A member follows its solo run (same config and seed): the same batches, dropout masks, learning
  rates and AdamW update arithmetic. Only the rounding of the forward and backward differs (batched
  kernels, and the plain matmul and reference attention, which vmap can batch, in place of the C++
  kernel): over the tests' 20 steps with dropout (hyla mixer), every weight, metric and summary
  value agrees with the solo run's to a relative 1e-4 (absolute 1e-5), Adam's moments and the
  logged gradient norm to 1e-3 (early in training the RMS-head normalization of small scores
  amplifies rounding in the gradients); the difference grows with training as any float32
  rounding difference does. One exception: a
  parameter the loss does not depend on (the key bias under softmax, which is invariant to it) has
  a zero gradient up to rounding noise, which AdamW scales up to steps of the learning rate's size,
  different in the two runs; such a parameter drifts apart (3e-4 after 20 steps of `logic_cpu`)
  without changing any output.
- Exact resume: a pack stopped by SIGINT / SIGTERM (every member checkpoints after the current step),
  `train.stop_at`, kill -9 or a crash, and continued with `train_packed` on the same configs with
  `resume=True` (or `hyla sweep --pack` again), ends with the same weights, optimizer states, metrics
  records and summaries as the uninterrupted pack (timing fields aside).
- A member's folder is an ordinary run folder: `hyla eval`, `hyla analyze`, `hyla results` read it,
  and `hyla resume` continues it alone (warning that it is then not bit-identical: env.json and the
  checkpoint record `"packed": true` among the numerics).

Limits: one process (no data parallelism), eager steps (train.step compiled is refused; train.step
graphed replays the eager step as a CUDA graph, hyla.train.graphed), and the reference
attention materializes HYLA's [B, Tq, Tk, Dv] hidden tensor for every member at once.
"""

from __future__ import annotations

import copy
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch.func import functional_call, vmap

from hyla.nn.attention import MultiHeadAttention
from hyla.nn.feedforward import GeluMLP, MixtureOfExperts
from hyla.nn.transformer import Transformer
from hyla.train import graphed
from hyla.train.configs import ConfigError, ExperimentConfig, build_task, resolve_model, validate
from hyla.train.loop import opened_runs, run_steps
from hyla.train.run_dir import RunDir
from hyla.train.session import AnalysisHook
from hyla.train.step import Trainer, Update, gradient_step

# Process-wide settings: one value per pack.
PROCESS_SETTINGS = ("device", "threads", "deterministic", "precision", "step")


def pack_key(cfg: ExperimentConfig) -> tuple:
    """Configs with equal keys can train in one pack: the same parameter and input shapes (task,
    resolved model config, batch size) and the same process settings."""
    model = resolve_model(cfg.model, build_task(cfg))
    return (
        cfg.task,
        tuple(sorted(asdict(model).items())),
        cfg.train.batch_size,
        *(getattr(cfg.train, name) for name in PROCESS_SETTINGS),
    )


def plan_packs(cfgs: list[ExperimentConfig], size: int) -> list[list[ExperimentConfig]]:
    """`cfgs` in packs of at most `size` members, in their order: grouped by `pack_key` and by the
    step a run resumes from (0 for a new run), so that the members of a stopped pack, which all
    checkpointed at one step, form a pack again."""
    if size < 1:
        raise ConfigError(f"a pack needs at least one member, got size {size}")
    groups: dict[tuple, list[ExperimentConfig]] = {}
    for cfg in cfgs:
        groups.setdefault((pack_key(cfg), _resume_step(cfg)), []).append(cfg)
    return [group[i : i + size] for group in groups.values() for i in range(0, len(group), size)]


def _resume_step(cfg: ExperimentConfig) -> int:
    run = RunDir.for_config(cfg)
    if not cfg.resume or not run.has_checkpoint():
        return 0
    return run.load_checkpoint()[0]["progress"]["step"]


def train_packed(cfgs: list[ExperimentConfig], analysis_hook: AnalysisHook | None = None) -> list[Path]:
    """Train (or, with resume=True, continue) the runs of `cfgs` as one pack; return their folders
    in the same order. Members that are complete are skipped. Raises ConfigError when the configs
    cannot share a pack, NonFiniteLossError (after the other members finished) when a member
    diverged, and KeyboardInterrupt after every member checkpointed when interrupted."""
    with opened_runs(_check_pack([validate(cfg) for cfg in cfgs]), analysis_hook, choose_packed_update) as opened:
        folders, sessions, update = opened
        if sessions:
            run_steps(sessions, update)
    return folders


def choose_packed_update(trainers: list[Trainer], steps: list[int]) -> Update:
    """The update function of a pack's members, chosen before their updates `steps`: one vmapped
    update of all (`PackedUpdate`), with train.step graphed replayed as CUDA graphs (captured on
    those steps' inputs; hyla.train.graphed)."""
    if trainers[0].ctx.distributed:
        raise ConfigError("packed training runs in one process: launch it without torchrun")
    update = PackedUpdate(trainers[0].model)
    return graphed.replayed(update, trainers, steps) if trainers[0].cfg.train.step == "graphed" else update


def _check_pack(cfgs: list[ExperimentConfig]) -> list[ExperimentConfig]:
    if not cfgs:
        raise ConfigError("train_packed needs at least one config")
    if any(cfg.train.step == "compiled" for cfg in cfgs):
        raise ConfigError("packed training does not compile: set train.step eager (or graphed)")
    keys = [pack_key(cfg) for cfg in cfgs]
    for cfg, key in zip(cfgs[1:], keys[1:]):
        if key != keys[0]:
            first = cfgs[0].name or cfgs[0].seed
            raise ConfigError(
                f"run {cfg.name or cfg.seed!r} cannot share a pack with {first!r}: "
                f"members need the same task, model, batch size and train.{'/'.join(PROCESS_SETTINGS)}"
            )
    folders = [RunDir.for_config(cfg).path for cfg in cfgs if cfg.name]
    if len(set(folders)) < len(folders):
        raise ConfigError("two members of the pack write to the same run folder: give them distinct names")
    return cfgs


def vmappable_copy(model: Transformer) -> Transformer:
    """A copy of `model` to call under `torch.func.vmap` with the members' stacked parameters.

    The fast attention paths are autograd Functions without batching rules, so the copy computes
    with the plain path they are tested against: the reference ("naive") attention instead of the
    C++ HYLA kernel, torch's GELU instead of the C++ GELU kernel; and mixtures of experts in their
    dense form (static shapes).
    """
    skeleton = copy.deepcopy(model)
    for module in skeleton.modules():
        if isinstance(module, MultiHeadAttention):
            module.implementation = "naive"
        elif isinstance(module, MixtureOfExperts):
            module.routed = False
        elif isinstance(module, GeluMLP):
            module.gelu_kernel = False
    return skeleton


class PackedUpdate:
    """The update function of a pack: one update of several members (their `Trainer`s) as one
    vmapped forward and backward: `inputs` (the members' batches and dropout masks, stacked) and
    `gradient_step` on them, which a graphed update captures (hyla.train.graphed)."""

    def __init__(self, model: Transformer):
        self.skeleton = vmappable_copy(model)
        self.names = [name for name, _ in self.skeleton.named_parameters()]
        self.kind: dict[str, Any] = {"compile": False, "compile_mode": None, "packed": True}

    def __call__(self, trainers: list[Trainer], steps: list[int]) -> list[tuple[torch.Tensor, torch.Tensor, Any]]:
        """Update number steps[i] of trainers[i], for every i: the members' batches and parameters
        are stacked, one vmapped forward and backward computes them all, then every member's AdamW
        steps (the caller steps the schedules). Returns each member's (loss, predictions, batch)."""
        batches, inputs = self.inputs(trainers, steps)
        losses, preds = self.gradient_step(trainers, inputs)
        return [(loss.detach(), pred.detach(), batch) for loss, pred, batch in zip(losses, preds, batches)]

    def inputs(self, trainers: list[Trainer], steps: list[int]) -> tuple[list, tuple]:
        """The members' batches, and the update's inputs: (x [M, B, T, ...], batches, masks)."""
        batches = [trainer.batch(step) for trainer, step in zip(trainers, steps)]
        x = _stack([batch.x for batch in batches], "inputs")  # [M, B, T, ...]
        # each member's masks as its solo run draws them at its step
        masks = [trainer.dropout_masks(step, x.shape[2]) for trainer, step in zip(trainers, steps)]
        masks = None if masks[0] is None else [torch.stack(layer) for layer in zip(*masks)]  # per layer [M, Tq, Tk]
        return batches, (x, batches, masks)

    def gradient_step(self, trainers: list[Trainer], inputs: tuple) -> tuple[list[torch.Tensor], torch.Tensor]:
        return gradient_step(trainers, lambda: self._forward_losses(trainers, inputs))

    def _member_forward(self, params: dict, x: torch.Tensor, dropout_masks: list | None) -> torch.Tensor:
        return functional_call(self.skeleton, params, (x,), {"dropout_masks": dropout_masks})

    def _forward_losses(self, trainers: list[Trainer], inputs: tuple) -> tuple[list[torch.Tensor], torch.Tensor]:
        x, batches, masks = inputs
        members = [dict(trainer.model.named_parameters()) for trainer in trainers]
        params = {name: torch.stack([member[name] for member in members]) for name in self.names}  # [M, ...]
        mask_dims = None if masks is None else 0  # (without dropout, no masks to batch)
        preds = vmap(self._member_forward, in_dims=(0, 0, mask_dims))(params, x, masks)  # [M, B, ...]
        return [trainer.task.loss(pred, batch) for trainer, pred, batch in zip(trainers, preds, batches)], preds


def _stack(tensors: list[torch.Tensor], what: str) -> torch.Tensor:
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) > 1:
        raise ConfigError(f"the members' {what} differ in shape ({sorted(shapes)}): they cannot share a pack")
    return torch.stack(tensors)


__all__ = ["PackedUpdate", "choose_packed_update", "pack_key", "plan_packs", "train_packed", "vmappable_copy"]
