"""Seeded task generators: in-context fuzzy logic regression, SRAVEN and text (docs/tasks.md).

`Text` is loaded on first use (PEP 562): it needs the tokenizers package of the workflow extra
(pip install 'hyla[workflow]'), the other tasks only torch."""

import importlib

from .ambiguity import ambiguity_rate, is_ambiguous
from .base import Batch, Task
from .evaluation import evaluate
from .fuzzy_logic import FuzzyLogic
from .registry import TASK_NAMES, build_task, task_class, task_from_config
from .sraven import SRaven

__all__ = [
    "TASK_NAMES",
    "Batch",
    "FuzzyLogic",
    "SRaven",
    "Task",
    "Text",
    "ambiguity_rate",
    "build_task",
    "evaluate",
    "is_ambiguous",
    "task_class",
    "task_from_config",
]


def __getattr__(name: str):
    if name != "Text":
        raise AttributeError(f"module 'hyla.tasks' has no attribute {name!r}")
    return importlib.import_module("hyla.tasks.text").Text


def __dir__() -> list[str]:
    return sorted([*globals(), "Text"])
