"""Seeded task generators: in-context fuzzy logic regression, SRAVEN and text (docs/tasks.md)."""

from .ambiguity import ambiguity_rate, is_ambiguous
from .base import Batch, Task
from .evaluation import evaluate
from .fuzzy_logic import FuzzyLogic
from .registry import TASKS, build_task, task_from_config
from .sraven import SRaven
from .text import Text

__all__ = [
    "TASKS",
    "Batch",
    "FuzzyLogic",
    "SRaven",
    "Task",
    "Text",
    "ambiguity_rate",
    "build_task",
    "evaluate",
    "is_ambiguous",
    "task_from_config",
]
