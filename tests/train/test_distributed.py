"""Data parallelism: `torchrun --nproc_per_node=2 hyla train` (gloo, CPU) trains the same model as
one process. Each rank draws its half of the same global batch and DDP averages the gradients, so
only the summation order differs: the weights agree to float32 rounding (asserted: max abs
difference < 1e-6 after 20 AdamW steps; about 6e-8 observed), not bit for bit. Every logged and
summarized number is global (reduced over ranks): the losses agree to 1e-6 relative."""

import json
import os
import subprocess
import sys
from dataclasses import replace

import pytest
import torch
from helpers_train import final_weights, tiny_config

from hyla.train import train
from hyla.train.configs import config_to_dict


def test_two_gloo_ranks_match_one_process(tmp_path):
    single = train(tiny_config(tmp_path, name="single", steps=20))
    cfg = replace(tiny_config(tmp_path, name="ddp", steps=20))
    config_file = tmp_path / "ddp.json"
    config_file.write_text(json.dumps(config_to_dict(cfg)))
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable,
        "-m",
        "torch.distributed.run",
        "--standalone",
        "--nproc_per_node",
        "2",
        "-m",
        "hyla.cli",
        "train",
        "--config",
        str(config_file),
    ]
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300)
    assert done.returncode == 0, done.stderr[-3000:]
    summary = json.loads((tmp_path / "ddp" / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["world_size"] == 2
    a, b = final_weights(single), final_weights(tmp_path / "ddp")
    worst = max((a[k] - b[k]).abs().max().item() for k in a)
    assert worst < 1e-6, f"max weight difference {worst}"
    # evaluation metrics are reduced over ranks: the same samples give the same numbers
    reference = json.loads((single / "summary.json").read_text())["final"]
    for split, metrics in summary["final"].items():
        assert abs(metrics["r2"] - reference[split]["r2"]) < 1e-3
    assert json.loads((single / "summary.json").read_text())["train_loss"] == pytest.approx(
        summary["train_loss"], rel=1e-6
    )
    rows = [_train_losses(run) for run in (single, tmp_path / "ddp")]
    assert rows[0] == pytest.approx(rows[1], rel=1e-6) and len(rows[0]) == 4
    assert sorted(p.name for p in (tmp_path / "ddp" / "checkpoints").iterdir()) == ["latest.pt", "previous.pt"]
    assert torch.load(tmp_path / "ddp" / "checkpoints" / "latest.pt", weights_only=True)["progress"]["step"] == 20


def _train_losses(run) -> list[float]:
    records = map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
    return [r["loss"] for r in records if r["split"] == "train"]
