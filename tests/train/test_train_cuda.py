"""Training on a CUDA device: eager, compiled and CUDA-graph runs learn, at every precision, and
record the compile mode that trained (auto: CUDA graphs); a resumed run (deterministic mode)
reaches exactly the weights of an uninterrupted one."""

import json
import warnings
from dataclasses import replace

import pytest
import torch
from helpers_train import assert_same_weights, final_weights, tiny_config

from hyla.train.loop import train

pytestmark = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")


@pytest.mark.parametrize("compile, compile_mode, precision, trained_mode", [
    (False, "auto", "fp32", None), (True, "default", "fp32", "default"),
    (True, "reduce-overhead", "fp32", "reduce-overhead"), (True, "auto", "fp32", "reduce-overhead"),
    (True, "auto", "tf32", "reduce-overhead"), (True, "auto", "bf16", "reduce-overhead"), (False, "auto", "bf16", None),
], ids=["eager", "compiled", "cuda-graphs", "auto", "auto-tf32", "auto-bf16", "eager-bf16"])
def test_cuda_training_learns(tmp_path, compile, compile_mode, precision, trained_mode):
    warnings.filterwarnings("error", message="torch.compile failed")  # no silent fallback
    run = train(tiny_config(tmp_path, steps=60, device="cuda", compile=compile, compile_mode=compile_mode, lr=3e-3,
                            precision=precision))
    summary = json.loads((run / "summary.json").read_text())
    losses = [r["loss"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
              if r["split"] == "train"]
    assert summary["status"] == "completed" and losses[-1] < losses[0]
    env = json.loads((run / "env.json").read_text())
    assert env["numerics"]["device"].startswith("cuda")
    assert (env["numerics"]["compile_mode"], env["numerics"]["precision"]) == (trained_mode, precision)


def test_cuda_resume_reaches_exactly_the_uninterrupted_weights(tmp_path):
    config = dict(steps=20, device="cuda", deterministic=True)
    full = train(tiny_config(tmp_path, name="full", **config))
    train(tiny_config(tmp_path, name="split", stop_at=10, **config))
    resumed = train(replace(tiny_config(tmp_path, name="split", **config), resume=True))
    assert_same_weights(final_weights(full), final_weights(resumed))
