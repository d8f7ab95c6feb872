"""The default training path (the C++ HYLA kernel, hyla's AdamW step calling torch's fused AdamW
kernel directly) and the plain reference path (the naive einsum attention, torch.optim.AdamW's own
step: HYLA_ADAMW_KERNEL=0) train the paper's CPU presets along the same curve: the training losses of
a few hundred steps agree to float rounding.

Measured on a 2-core Intel Xeon, largest relative difference over 300 steps: 1.4e-7 (logic_cpu);
raven_cpu follows to 1e-7 for ~35 steps, then its training amplifies float rounding: 1e-5 by step
80, at most 4.8e-5 up to step 300 (2026-11-25; earlier, 1.6e-4 by step 100 on another run; the
reference path alone moves by up to 8e-4 within 100 steps with 2 threads instead of 1). The
tolerances, 1e-5 (logic_cpu) and 1e-3 (raven_cpu), leave a margin for other CPUs, while a change of
the math (a wrong gradient term, a wrong normalization) moves the losses by far more within the
first logged steps."""

import json
from dataclasses import replace

import pytest

from hyla.ops import dispatch
from hyla.train import train
from hyla.train.presets import get_preset

TOLERANCE = {"logic_cpu": 1e-5, "raven_cpu": 1e-3}


def training_losses(tmp_path, preset: str, steps: int) -> tuple[list[float], list[str]]:
    """The logged training losses of `steps` steps of HYLA on `preset` (seed 0, one thread), and what
    attention ran."""
    cfg = get_preset(preset)
    cfg = replace(
        cfg,
        out_dir=str(tmp_path),
        name="run",
        seed=0,
        model=replace(cfg.model, mixer="hyla"),
        train=replace(cfg.train, steps=steps, threads=1),
        eval=replace(cfg.eval, every=0, final_samples=256, batch_size=256),
        log=replace(cfg.log, every=20, progress=False),
        checkpoint=replace(cfg.checkpoint, every=steps),
    )
    run = train(cfg)
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    attention = json.loads((run / "env.json").read_text())["numerics"]["attention"]
    return [r["loss"] for r in records if r["split"] == "train"], attention


@pytest.mark.slow  # 4 trainings of 300 steps; the float64 attention tests and AdamW's bit-for-bit test guard the pieces
@pytest.mark.parametrize("preset, steps", [("logic_cpu", 300), ("raven_cpu", 300)])
def test_default_and_reference_paths_train_along_the_same_curve(preset, steps, tmp_path, monkeypatch, set_switch):
    default, default_ran = training_losses(tmp_path / "default", preset, steps)
    set_switch("HYLA_ADAMW_KERNEL", "0")
    monkeypatch.setattr(dispatch, "BACKENDS", [b for b in dispatch.BACKENDS if b.name == "naive"])
    reference, reference_ran = training_losses(tmp_path / "reference", preset, steps)
    assert reference_ran == ["naive"] and default_ran != reference_ran
    assert len(default) == len(reference) == steps // 20
    assert reference[-1] < 0.9 * reference[0]  # (it trains)
    for step, (a, b) in enumerate(zip(default, reference), start=1):
        message = f"step {20 * step}: loss {a} on the default path, {b} on the reference"
        assert abs(a - b) <= TOLERANCE[preset] * abs(b), message
