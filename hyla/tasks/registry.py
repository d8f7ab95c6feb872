"""The tasks by name, and a task rebuilt from a run's config.

A run's config (its `config.json`, or an exported model's manifest.json `record["config"]`) names
its task (`task`), holds that task's settings under the same name and the run's `seed`; the
settings are the task class's keyword arguments.
"""

from __future__ import annotations

from typing import Any

import torch

from .base import Task
from .fuzzy_logic import FuzzyLogic
from .sraven import SRaven

TASK_NAMES = ("fuzzy_logic", "sraven", "text")


def task_class(name: str) -> type[Task]:
    """The task class filed under `name`; `text` is imported here, on first use: it needs the
    tokenizers package of the workflow extra."""
    if name == "text":
        from .text import Text

        return Text
    if name not in TASK_NAMES:
        raise ValueError(f"unknown task {name!r}; known: {', '.join(TASK_NAMES)}")
    return {"fuzzy_logic": FuzzyLogic, "sraven": SRaven}[name]


def build_task(name: str, settings: dict[str, Any], seed: int, device: str | torch.device = "cpu") -> Task:
    """Task `name` made with `settings` (its keyword arguments) and `seed`, generating its batches on
    `device`."""
    return task_class(name)(**settings, seed=seed, device=device)


def task_from_config(config: dict[str, Any], device: str | torch.device = "cpu") -> Task:
    """The task of a run's config, given as a dict: the task the run trained and evaluated on,
    with the run's seed (so its evaluation batches are the run's)."""
    try:
        name = config["task"]
        return build_task(name, config[name], config["seed"], device)
    except (KeyError, TypeError) as e:
        raise ValueError(f"not a hyla run config ({type(e).__name__}: {e})") from None
