"""The tests' tiny configs, built one way: `tiny_model_config` (a ModelConfig of TINY_MODEL's
sizes), `quick_config` (an ExperimentConfig: a preset changed to train in seconds), `tiny_config`
(the tiny fuzzy-logic experiment the training tests share) and TINY_RUN (a tiny run as a sweep's
overrides or the command line's flags); and helpers of the training tests."""

from __future__ import annotations

from dataclasses import replace

import torch

from hyla.nn.transformer import ModelConfig
from hyla.train.configs import ExperimentConfig, FuzzyLogicConfig
from hyla.train.presets import get_preset

TINY_MODEL = dict(num_layers=2, dim=16, num_heads=4, qk_dim=8, v_dim=8, mlp_dim=32)
"""The sizes of the tests' tiny models."""


TINY_RUN = {
    "fuzzy_logic.num_variables": 3,
    "fuzzy_logic.seq_len": 8,
    **{f"model.{key}": value for key, value in TINY_MODEL.items()},
    "model.num_layers": 1,
    "model.mlp_dim": 16,
    "train.batch_size": 16,
    "optim.warmup_steps": 2,
    "eval.every": 0,
    "eval.final_samples": 64,
    "eval.batch_size": 64,
    "train.device": "cpu",
    "train.threads": 1,
}
"""A tiny run of logic_cpu (one layer) as dotted settings: a sweep file's overrides (JSON is YAML),
`hyla train`'s flags (hyla.runs.sweep.override_flags)."""


def tiny_model_config(**fields) -> ModelConfig:
    """A tiny model: TINY_MODEL's sizes, `fields` (any of ModelConfig's) on top."""
    return ModelConfig(**{**TINY_MODEL, **fields})


def quick_config(out_dir, preset: str = "logic_cpu", name: str = "run", **changes) -> ExperimentConfig:
    """`preset` training into `out_dir`/`name` with `changes`: a section's fields as a dict (model={"dim":
    32}, eval={"every": 0}: those fields changed) or any field of ExperimentConfig replaced (seed=3,
    fuzzy_logic=FuzzyLogicConfig(...)); quietly on one CPU thread unless `train` and `log` say otherwise
    (the machine's cores would be oversubscribed beside other tests)."""
    cfg = get_preset(preset)
    quiet = {"train": {"device": "cpu", "threads": 1}, "log": {"progress": False}}
    changes = {**changes, **{key: {**value, **changes.get(key, {})} for key, value in quiet.items()}}
    fields = {
        key: replace(getattr(cfg, key), **value) if isinstance(value, dict) else value for key, value in changes.items()
    }
    return replace(cfg, out_dir=str(out_dir), name=name, **fields)


def tiny_config(
    tmp_path,
    name: str = "run",
    mixer: str = "hyla",
    steps: int = 20,
    optim: dict | None = None,
    eval: dict | None = None,
    log: dict | None = None,
    checkpoint: dict | None = None,
    **train,
) -> ExperimentConfig:
    """A tiny fuzzy-logic experiment that trains in seconds (checkpoints every 5 steps, evaluates every
    10): `train` changes fields of its train section, `optim`, `eval`, `log` and `checkpoint` those of
    theirs (optim={"lr": 3e-3})."""
    return quick_config(
        tmp_path,
        name=name,
        seed=3,
        fuzzy_logic=FuzzyLogicConfig(num_variables=3, num_terms=2, seq_len=8, frac_held_out=0.3),
        model={**TINY_MODEL, "mixer": mixer, "attention_dropout": 0.1},
        train={"steps": steps, "batch_size": 16, **train},
        optim={"warmup_steps": 3, **(optim or {})},
        eval={"every": 10, "samples": 32, "final_samples": 64, "batch_size": 32, **(eval or {})},
        log={"every": 5, **(log or {})},
        checkpoint={"every": 5, **(checkpoint or {})},
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
