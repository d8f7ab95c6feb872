"""Seeded task generators: in-context fuzzy logic regression, SRAVEN and text (docs/tasks.md)."""

from .ambiguity import ambiguity_rate, is_ambiguous
from .base import Batch, Task
from .fuzzy_logic import FuzzyLogic
from .sraven import SRaven
from .text import Text

__all__ = ["Batch", "FuzzyLogic", "SRaven", "Task", "Text", "ambiguity_rate", "is_ambiguous"]
