"""Seeded task generators: in-context fuzzy logic regression and SRAVEN (SPEC §4, §5)."""

from .ambiguity import ambiguity_rate, is_ambiguous
from .base import Batch, Task
from .fuzzy_logic import FuzzyLogic
from .sraven import SRaven

__all__ = ["Batch", "FuzzyLogic", "SRaven", "Task", "ambiguity_rate", "is_ambiguous"]
