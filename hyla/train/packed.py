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
`Trainer`), and its own `TrainingLoop`, which writes an ordinary run folder (config, env, metrics,
summary, checkpoints). Every step the members' parameters are stacked with `torch.stack` (so the
gradients flow back into each member's own tensors), one vmapped forward and backward computes all
members, and each member's optimizer takes its ordinary step. A member draws its own batch, and
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

Limits: one process (no data parallelism), eager steps (train.compile is refused; with
train.cuda_graph on, the eager step replayed as a CUDA graph, hyla.train.graphed), and the reference
attention materializes HYLA's [B, Tq, Tk, Dv] hidden tensor for every member at once.
"""

from __future__ import annotations

import copy
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch
from torch.func import functional_call, vmap
from tqdm.auto import tqdm

from hyla.nn.attention import MultiHeadAttention
from hyla.nn.feedforward import MixtureOfExperts
from hyla.nn.transformer import Transformer
from hyla.train import distributed, graphed
from hyla.train.configs import ConfigError, ExperimentConfig, build_task, resolve_model, validate
from hyla.train.loop import AnalysisHook, NonFiniteLossError, TrainingLoop, open_session
from hyla.train.numerics import process_settings
from hyla.train.run_dir import RunDir
from hyla.train.signals import StopSignal
from hyla.train.step import Trainer, gradient_step, update

# Process-wide settings: one value per pack.
PROCESS_SETTINGS = ("device", "threads", "deterministic", "precision", "cuda_graph")


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
    cfgs = _check_pack([validate(cfg) for cfg in cfgs], analysis_hook)
    ctx = distributed.setup(cfgs[0].train.device)
    try:
        if ctx.distributed:
            raise ConfigError("packed training runs in one process: launch it without torchrun")
        with process_settings(cfgs[0], ctx):
            graphs = graphed.wanted(cfgs[0].train.cuda_graph, ctx.device)
            sessions = [open_session(cfg, ctx, analysis_hook, packed=True, pack_graphs=graphs) for cfg in cfgs]
            loops = [loop for _, loop in sessions if loop is not None]
            if loops:
                Pack(loops, graphs).run()
            return [run.path for run, _ in sessions]
    finally:
        distributed.teardown(ctx)


def _check_pack(cfgs: list[ExperimentConfig], analysis_hook) -> list[ExperimentConfig]:
    if not cfgs:
        raise ConfigError("train_packed needs at least one config")
    if any(cfg.train.compile for cfg in cfgs):
        raise ConfigError("packed training runs eagerly: set train.compile false")
    if any(cfg.train.analysis_every for cfg in cfgs) and analysis_hook is None:
        raise ConfigError(
            "train.analysis_every > 0 needs an analysis hook: train_packed(cfgs, hyla.analysis.analysis_hook)"
        )
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
    C++ HYLA kernel; and mixtures of experts in their dense form (static shapes).
    """
    skeleton = copy.deepcopy(model)
    for module in skeleton.modules():
        if isinstance(module, MultiHeadAttention):
            module.implementation = "naive"
        elif isinstance(module, MixtureOfExperts):
            module.routed = False
    return skeleton


class PackedUpdate:
    """One update of several members (their `Trainer`s) as one vmapped forward and backward;
    with `graphs`, replayed as one CUDA graph (hyla.train.graphed), captured again whenever the
    members change (one leaves the pack)."""

    def __init__(self, model: Transformer, graphs: bool = False):
        self.skeleton = vmappable_copy(model)
        self.names = [name for name, _ in self.skeleton.named_parameters()]
        self.forward = vmap(self._member_forward)
        self.graphs = graphs
        self.graphed: graphed.GraphedUpdate | None = None

    def _member_forward(self, params: dict, x: torch.Tensor, dropout_masks: list | None) -> torch.Tensor:
        return functional_call(self.skeleton, params, (x,), {"dropout_masks": dropout_masks})

    def __call__(self, trainers: list[Trainer], steps: list[int]) -> list[tuple[torch.Tensor, torch.Tensor, Any]]:
        """Update number steps[i] of trainers[i], for every i: the members' batches and parameters
        are stacked, one vmapped forward and backward computes them all, then every member takes its
        own AdamW step and schedule step (`hyla.train.step.update`, as a solo run's step). Returns
        each member's (loss, predictions, batch)."""
        batches = [trainer.batch(step) for trainer, step in zip(trainers, steps)]
        x = _stack([batch.x for batch in batches], "inputs")  # [M, B, T, ...]
        # each member's masks as its solo run draws them at its step
        masks = [trainer.dropout_masks(step, x.shape[2]) for trainer, step in zip(trainers, steps)]
        masks = None if masks[0] is None else [torch.stack(layer) for layer in zip(*masks)]  # per layer [M, Tq, Tk]
        inputs = (x, batches, masks)
        graphs = self._graphed(trainers)
        if graphs is not None:
            results = graphs(inputs)
            for trainer in trainers:
                trainer.cuda_graph = graphs.active
        else:
            results = update(trainers, lambda: self._forward_losses(trainers, inputs))
        return [(loss, pred, batch) for (loss, pred), batch in zip(results, batches)]

    def _forward_losses(self, trainers: list[Trainer], inputs: tuple) -> tuple[list[torch.Tensor], torch.Tensor]:
        x, batches, masks = inputs
        members = [dict(trainer.model.named_parameters()) for trainer in trainers]
        params = {name: torch.stack([member[name] for member in members]) for name in self.names}  # [M, ...]
        preds = self.forward(params, x, masks)  # [M, B, ...]
        return [trainer.task.loss(pred, batch) for trainer, pred, batch in zip(trainers, preds, batches)], preds

    def _graphed(self, trainers: list[Trainer]) -> graphed.GraphedUpdate | None:
        """The graphed update of these members (None: eager), captured anew when they changed;
        once a capture failed, the pack trains eagerly."""
        if self.graphed is not None and not self.graphed.active:
            self.graphs = False
        if not self.graphs:
            return None
        if self.graphed is None or self.graphed.trainers != trainers:

            def step(inputs):
                return gradient_step(trainers, lambda: self._forward_losses(trainers, inputs))

            self.graphed = graphed.GraphedUpdate(list(trainers), step)
        return self.graphed


class Pack:
    """The live members of a pack (their `TrainingLoop`s): steps them together, does each one's
    records, finishes them one by one."""

    def __init__(self, loops: list[TrainingLoop], graphs: bool = False):
        self.loops = loops
        self.update = PackedUpdate(loops[0].trainer.model, graphs)
        self.diverged: list[NonFiniteLossError] = []

    def run(self) -> None:
        """Step the live members until each has reached its end, then raise for the diverged ones."""
        bar = tqdm(
            total=max(loop.end for loop in self.loops),
            initial=min(loop.progress.step for loop in self.loops),
            disable=not self.loops[0].cfg.train.progress,
            unit="step",
            desc=f"pack of {len(self.loops)}",
            dynamic_ncols=True,
        )
        stop = StopSignal()
        try:
            with stop.installed():
                while self._finish_ended():
                    self.step()
                    bar.update(1)
                    self._after_step(stop.requested)
                    if stop.requested:
                        raise stop.stopped()
        except (KeyboardInterrupt, Exception) as e:
            for loop in self.loops:
                loop.record_stop(e)
            raise
        finally:
            bar.close()
            for loop in self.loops:
                loop.close()
        if self.diverged:
            raise NonFiniteLossError("; ".join(map(str, self.diverged)))

    def step(self) -> None:
        """One update of every live member, each at its own next step."""
        tick = time.perf_counter()
        steps = [loop.progress.step for loop in self.loops]
        results = self.update([loop.trainer for loop in self.loops], steps)
        elapsed = time.perf_counter() - tick
        for loop, step, (loss, pred, batch) in zip(self.loops, steps, results):
            loop.record_step(step, loss, pred, batch, elapsed)

    def _after_step(self, stopping: bool) -> None:
        """Each member's records; every member checkpoints when any is due (or on a stop), so a
        stopped pack resumes with its members at one step. A diverged member leaves the pack."""
        force = stopping or any(loop.checkpoint_due() for loop in self.loops)
        for loop in list(self.loops):
            try:
                loop.after_step(force)
            except NonFiniteLossError as e:
                self.diverged.append(loop.diverged(e))
                self._leave(loop)

    def _finish_ended(self) -> bool:
        """Finish the members at their end (final evaluation or stop_at); True while any is left."""
        for loop in list(self.loops):
            if loop.progress.step >= loop.end:
                loop.finish()
                self._leave(loop)
        return bool(self.loops)

    def _leave(self, loop: TrainingLoop) -> None:
        loop.close()
        self.loops.remove(loop)


def _stack(tensors: list[torch.Tensor], what: str) -> torch.Tensor:
    shapes = {tuple(t.shape) for t in tensors}
    if len(shapes) > 1:
        raise ConfigError(f"the members' {what} differ in shape ({sorted(shapes)}): they cannot share a pack")
    return torch.stack(tensors)


__all__ = ["Pack", "PackedUpdate", "pack_key", "plan_packs", "train_packed", "vmappable_copy"]
