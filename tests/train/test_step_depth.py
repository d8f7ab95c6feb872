"""The training step stays shallow: from `train()` to the optimizer's step, at most 5 hyla frames."""

import sys
from pathlib import Path

import pytest
import torch
from helpers_train import tiny_config
from torch.optim.optimizer import register_optimizer_step_pre_hook

import hyla
from hyla.train import train
from hyla.train.optim import AdamW

HYLA = Path(hyla.__file__).resolve().parent
MAX_FRAMES = 5


def hyla_frames_from_train() -> list[str]:
    """The hyla frames on the stack, from the outermost `train()` inward (`file:function`)."""
    frames, frame = [], sys._getframe(1)
    while frame is not None:
        path = Path(frame.f_code.co_filename).resolve()
        if HYLA in path.parents:
            frames.append(f"{path.relative_to(HYLA)}:{frame.f_code.co_name}")
        frame = frame.f_back
    frames.reverse()
    return frames[frames.index("train/loop.py:train") :]


@pytest.mark.parametrize("compile", [False, True])
def test_train_reaches_the_optimizer_step_within_five_hyla_frames(tmp_path, monkeypatch, compile):
    if compile:  # the compiled path with the module as its own compilation (inductor is slow here)
        monkeypatch.setattr(torch, "compile", lambda module, mode=None: module)
    stacks = []

    def record(optimizer, args, kwargs):
        frames = hyla_frames_from_train()
        # (hyla's AdamW takes torch's step the first time: super().step() runs the hook again)
        if isinstance(optimizer, AdamW) and not any(frame.startswith("train/optim.py") for frame in frames):
            stacks.append([*frames, "train/optim.py:AdamW.step"])

    handle = register_optimizer_step_pre_hook(record)
    try:
        train(tiny_config(tmp_path, steps=3, step="compiled" if compile else "eager"))
    finally:
        handle.remove()
    assert len(stacks) == 3
    assert all(stack == stacks[0] for stack in stacks)
    assert len(stacks[0]) <= MAX_FRAMES, " -> ".join(stacks[0])
