"""A tiny trained run for the command-line tests (seconds)."""

from pathlib import Path

from helpers_train import tiny_config

from hyla.train import train


def tiny_run(tmp_path, name: str = "run", **train_overrides) -> Path:
    return train(tiny_config(tmp_path, name=name, steps=20, **train_overrides))
