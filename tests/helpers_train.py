"""A tiny fuzzy-logic experiment that trains in seconds (shared by the training tests)."""

from __future__ import annotations

from dataclasses import replace

import torch

from hyla.train.configs import ExperimentConfig, FuzzyLogicConfig, TrainConfig
from hyla.train.presets import get_preset


def tiny_config(tmp_path, name: str = "run", mixer: str = "hyla", steps: int = 20, **train) -> ExperimentConfig:
    cfg = get_preset("logic_cpu")
    return replace(
        cfg,
        out_dir=str(tmp_path),
        name=name,
        seed=3,
        fuzzy_logic=FuzzyLogicConfig(num_variables=3, num_terms=2, seq_len=8, frac_held_out=0.3),
        model=replace(
            cfg.model,
            num_layers=2,
            dim=16,
            num_heads=4,
            qk_dim=8,
            v_dim=8,
            mlp_dim=32,
            mixer=mixer,
            attention_dropout=0.1,
        ),
        train=replace(
            TrainConfig(),
            **{
                **dict(
                    steps=steps,
                    batch_size=16,
                    warmup_steps=3,
                    eval_every=10,
                    eval_samples=32,
                    final_eval_samples=64,
                    eval_batch_size=32,
                    log_every=5,
                    checkpoint_every=5,
                    progress=False,
                    device="cpu",
                    threads=1,
                ),
                **train,
            },
        ),
    )


def final_weights(run_dir) -> dict[str, torch.Tensor]:
    return torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=True)["model"]


def assert_same_weights(a: dict, b: dict) -> None:
    assert a.keys() == b.keys()
    for key in a:
        assert torch.equal(a[key], b[key]), f"{key} differs"


class TaskWrapper:
    """A task seen through `batch`: subclasses override `batch` to watch or change the batches of
    given steps. The trainer asks for each step's batch inside its own step."""

    def __init__(self, task):
        self.task = task

    def __getattr__(self, name):
        return getattr(self.task, name)

    def batch(self, split, batch_size, step, rank=0, world_size=1):
        return self.task.batch(split, batch_size, step, rank, world_size)
