"""The implementations of `hyla.ops.attention`, one per file: `naive.py` (the reference) and the
fast and memory-bounded forms tested against it. Which one runs is decided in `hyla.ops.dispatch`."""
