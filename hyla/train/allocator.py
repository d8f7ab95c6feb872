"""Keep freed memory in the process for reuse: glibc's malloc settings for training on the CPU.

A training step allocates and frees the same large tensors every step. glibc's malloc serves
blocks above its mmap threshold with fresh mappings and returns them to the system when freed,
and trims the top of its heap once more than its trim threshold is free; either way every step
faults its pages in again, a large share of a CPU step (docs/speed.md). With a fixed mmap threshold of 32 MiB
(glibc's largest) and a 1 GiB trim threshold, a block up to 32 MiB, once freed, stays in the
process for the next step.

The setting is for the whole process and stays after the run: the process keeps up to its peak
memory of blocks under 32 MiB until it exits. `HYLA_MALLOC_TUNING=0` leaves malloc as it is.
Elsewhere than glibc (macOS, musl) nothing changes.
"""

from __future__ import annotations

import ctypes
import functools
import sys

from hyla.utils import switches

# mallopt parameters (glibc's malloc.h)
_M_TRIM_THRESHOLD, _M_MMAP_THRESHOLD = -1, -3
MMAP_THRESHOLD = 32 << 20  # bytes: glibc's maximum
TRIM_THRESHOLD = 1 << 30  # bytes


@functools.cache
def keep_freed_memory() -> bool:
    """Set glibc's mmap and trim thresholds as the module docstring says, once per process.
    Returns whether they are set."""
    if switches().off("malloc_tuning") or not sys.platform.startswith("linux"):
        return False
    try:
        mallopt = ctypes.CDLL(None).mallopt
    except (OSError, AttributeError):
        return False
    mallopt.argtypes, mallopt.restype = [ctypes.c_int, ctypes.c_int], ctypes.c_int
    # (musl's mallopt does nothing and returns 0)
    return bool(mallopt(_M_MMAP_THRESHOLD, MMAP_THRESHOLD)) and bool(mallopt(_M_TRIM_THRESHOLD, TRIM_THRESHOLD))
