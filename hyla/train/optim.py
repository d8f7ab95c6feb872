"""AdamW with decay on matrices only, and the authors' warmup + cosine learning-rate schedule."""

from __future__ import annotations

import math

import torch
from torch import nn

from hyla.configs import TrainConfig


def parameter_groups(model: nn.Module, weight_decay: float) -> list[dict]:
    """Weight decay on tensors with >= 2 dims (kernels, embeddings); none on biases, norms, gains.

    Position-bias tables are 2-d and decayed, as in the authors' Flax code (it masks by ndim).
    """
    decay, no_decay = [], []
    for p in model.parameters():
        if p.requires_grad:
            (decay if p.ndim >= 2 else no_decay).append(p)
    return [{"params": decay, "weight_decay": weight_decay}, {"params": no_decay, "weight_decay": 0.0}]


def lr_multiplier(step: int, steps: int, warmup_steps: int, final_fraction: float) -> float:
    """Learning rate of update `step` (0-based) relative to the peak: the authors' schedule.

    Their run script calls `optax.warmup_cosine_decay_schedule(init_value=0, peak_value=lr,
    warmup_steps=W, decay_steps=steps - W, end_value=final_fraction * lr)`. optax counts
    `decay_steps` from step 0, warmup included, so the cosine lasts `steps - 2W` updates:
    linear warmup 0 -> 1 over W updates, cosine 1 -> final_fraction until update `steps - W`, then
    final_fraction for the last W updates. With 1,000 steps and W = 100: 0.55 at update 500,
    final_fraction from update 900 on. (When steps <= 2W the rate drops to final_fraction right
    after the warmup, where optax would refuse a non-positive cosine length.)
    """
    if step < warmup_steps:
        return step / warmup_steps
    cosine_steps = steps - 2 * warmup_steps
    progress = min(1.0, (step - warmup_steps) / cosine_steps) if cosine_steps > 0 else 1.0
    return final_fraction + (1.0 - final_fraction) * 0.5 * (1.0 + math.cos(math.pi * progress))


def make_optimizer(model: nn.Module, cfg: TrainConfig) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW (no gradient clipping) and its LambdaLR schedule; call scheduler.step() after every update."""
    device_type = next(model.parameters()).device.type
    optimizer = torch.optim.AdamW(
        parameter_groups(model, cfg.weight_decay), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps,
        # fused: one kernel for all tensors; the CPU and CUDA fused kernels are deterministic.
        fused=device_type in ("cpu", "cuda"),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_multiplier(step, cfg.steps, cfg.warmup_steps, cfg.final_lr_fraction))
    return optimizer, scheduler
