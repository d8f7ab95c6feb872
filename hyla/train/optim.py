"""AdamW with decay on matrices only, and the authors' warmup + cosine learning-rate schedule."""

from __future__ import annotations

import contextlib
import functools
import math

import torch
from torch import nn

from hyla.train.configs import OptimConfig
from hyla.utils import switches


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


def fused_adamw_step(
    params: list[torch.Tensor],
    grads: list[torch.Tensor],
    exp_avgs: list[torch.Tensor],
    exp_avg_sqs: list[torch.Tensor],
    steps: list[torch.Tensor],
    *,
    lr: float,
    beta1: float,
    beta2: float,
    weight_decay: float,
    eps: float,
) -> None:
    """One AdamW update of the tensors in place, by the kernel torch.optim.AdamW(fused=True) calls,
    `torch._fused_adamw_` (hyla's one private PyTorch operator; docs/speed.md), its step counts
    already advanced; only call it where `fused_adamw_available()`."""
    torch._fused_adamw_(
        params,
        grads,
        exp_avgs,
        exp_avg_sqs,
        [],
        steps,
        amsgrad=False,
        lr=lr,
        beta1=beta1,
        beta2=beta2,
        weight_decay=weight_decay,
        eps=eps,
        maximize=False,
        grad_scale=None,
        found_inf=None,
    )


@functools.cache
def _fused_adamw_works() -> bool:
    """Whether this PyTorch has the kernel with the signature hyla calls (probed on first use)."""
    try:
        p, g, m, v, step = torch.ones(3), torch.ones(3), torch.zeros(3), torch.zeros(3), torch.ones(())
        fused_adamw_step([p], [g], [m], [v], [step], lr=0.5, beta1=0.9, beta2=0.999, weight_decay=0.0, eps=1e-8)
        return torch.allclose(p, torch.full((3,), 0.5))  # the first Adam step moves by lr
    except (AttributeError, RuntimeError, NotImplementedError, TypeError):
        return False


def fused_adamw_available() -> bool:
    """Whether this PyTorch's fused AdamW kernel is there as hyla calls it and not switched off
    (HYLA_ADAMW_KERNEL=0: every step is torch.optim.AdamW's)."""
    return not switches().off("adamw_kernel") and _fused_adamw_works()


SMALL_TENSOR = 32768
"""Below this many elements a tensor's AdamW update runs on one thread: torch's CPU kernel starts
the thread team for every tensor, which costs more than the whole update of a small tensor; one
thread is faster up to about this size (benchmarks/README.md, `bench_optimizer.py`)."""


@contextlib.contextmanager
def one_thread():
    """torch's intra-op thread count set to 1 inside the block (the count does not change results)."""
    threads = torch.get_num_threads()
    if threads > 1:
        torch.set_num_threads(1)
    try:
        yield
    finally:
        if threads > 1:
            torch.set_num_threads(threads)


class AdamW(torch.optim.AdamW):
    """torch.optim.AdamW(fused=True) with less bookkeeping per step on the CPU: the same results
    bit for bit (tests/train/test_optim.py), without torch's per-step Python work, which takes
    longer than the arithmetic for the paper's small models (docs/speed.md).

    From the second step on, when every parameter has a gradient and the group options are the
    plain ones, `step` calls the kernel torch's own step calls (`torch._fused_adamw_`) with the
    same arguments, without torch's per-step Python work: once for a group's small tensors on one
    thread (`SMALL_TENSOR`), once for the others on all threads. The step counts of a group live
    in one tensor (views of it are the per-parameter "step" entries of the state), so counting a
    step is one addition instead of one per parameter. The state and its state_dict are torch's;
    anything else takes torch's step.
    """

    def __init__(self, *args, **kwargs):
        super().__init__(*args, **kwargs)
        self._groups: list[tuple] | None = None  # per group: its parts (see _shared_step_counts), counter

    @torch.no_grad()
    def step(self, closure=None):
        if closure is None and self._fast_path_ready():
            for group, (parts, counter) in zip(self.param_groups, self._groups):
                counter.add_(1)
                beta1, beta2 = group["betas"]
                for params, exp_avgs, exp_avg_sqs, steps, small in parts:
                    with one_thread() if small else contextlib.nullcontext():
                        fused_adamw_step(
                            params,
                            [p.grad for p in params],
                            exp_avgs,
                            exp_avg_sqs,
                            steps,
                            lr=group["lr"],
                            beta1=beta1,
                            beta2=beta2,
                            weight_decay=group["weight_decay"],
                            eps=group["eps"],
                        )
            return None
        loss = super().step(closure)
        self._groups = self._shared_step_counts()
        return loss

    def load_state_dict(self, state_dict: dict) -> None:
        super().load_state_dict(state_dict)
        self._groups = None

    def _fast_path_ready(self) -> bool:
        # (a GradScaler hands a fused optimizer its scale and inf flag as attributes: torch's step reads them)
        return (
            self._groups is not None
            and getattr(self, "grad_scale", None) is None
            and getattr(self, "found_inf", None) is None
            and all(p.grad is not None for group in self.param_groups for p in group["params"])
        )

    def _shared_step_counts(self) -> list[tuple] | None:
        """Per group: its tensor lists, split into small and other tensors, and the one tensor its
        step counts moved into; None when the fast path does not apply (then every step is torch's)."""
        groups = []
        for group in self.param_groups:
            params = group["params"]
            plain = (
                fused_adamw_available()
                and group["fused"]
                and not group["amsgrad"]
                and not group["maximize"]
                and not group["capturable"]
                and not group["differentiable"]
                and not torch.is_tensor(group["lr"])
            )
            if not (
                plain
                and params
                and all(
                    p.device.type == "cpu" and p.grad is not None and p in self.state and p.dtype == params[0].dtype
                    for p in params
                )
            ):
                return None
            states = [self.state[p] for p in params]
            counter = torch.stack([state["step"] for state in states])  # [P]
            for i, state in enumerate(states):
                state["step"] = counter[i]
            parts = []
            for small in (True, False):
                members = [i for i, p in enumerate(params) if (p.numel() < SMALL_TENSOR) == small]
                if members:
                    parts.append(
                        (
                            [params[i] for i in members],
                            [states[i]["exp_avg"] for i in members],
                            [states[i]["exp_avg_sq"] for i in members],
                            [states[i]["step"] for i in members],
                            small,
                        )
                    )
            groups.append((parts, counter))
        return groups


def make_optimizer(
    model: nn.Module, cfg: OptimConfig, steps: int, state: dict | None = None
) -> tuple[torch.optim.Optimizer, torch.optim.lr_scheduler.LRScheduler]:
    """AdamW (no gradient clipping) and its LambdaLR schedule over a run of `steps` steps; call
    scheduler.step() after every update. `state`: a checkpoint whose "optimizer" and "scheduler"
    states they continue from."""
    device_type = next(model.parameters()).device.type
    optimizer = AdamW(
        parameter_groups(model, cfg.weight_decay),
        lr=cfg.lr,
        betas=(cfg.beta1, cfg.beta2),
        eps=cfg.eps,
        # fused: one kernel for all tensors; the CPU and CUDA fused kernels are deterministic.
        fused=device_type in ("cpu", "cuda"),
    )
    scheduler = torch.optim.lr_scheduler.LambdaLR(
        optimizer, lambda step: lr_multiplier(step, steps, cfg.warmup_steps, cfg.final_lr_fraction)
    )
    if state is not None:
        optimizer.load_state_dict(state["optimizer"])
        scheduler.load_state_dict(state["scheduler"])
    return optimizer, scheduler
