"""A tiny trained run for the command-line tests (seconds)."""

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).parent / "train"))  # helpers_train

from helpers_train import tiny_config  # noqa: E402

from hyla.train import train  # noqa: E402


def tiny_run(tmp_path, name: str = "run", **train_overrides) -> Path:
    return train(tiny_config(tmp_path, name=name, steps=20, **train_overrides))
