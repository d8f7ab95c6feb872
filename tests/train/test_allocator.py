"""hyla.train.allocator: on glibc, training keeps freed memory in the process instead of faulting
its pages in again every step."""

import platform
import subprocess
import sys

import pytest

from hyla.train.allocator import keep_freed_memory

glibc = pytest.mark.skipif(platform.libc_ver()[0] != "glibc", reason="glibc's malloc only")

# 30 times: allocates and touches six 4 MiB tensors (a step's activations), then frees them; prints
# the minor page faults of the loop. (glibc's own adaptive thresholds serve one block size freed
# and allocated again from its heap, but give the heap's top back once more than twice the
# largest block is free.)
FAULTS = """
import resource, sys, torch
from hyla.train.allocator import keep_freed_memory
if sys.argv[1] == "tuned":
    assert keep_freed_memory()
def step():
    blocks = [torch.empty(1 << 20).fill_(1.0) for _ in range(6)]
step()  # the first allocations fault in either case
before = resource.getrusage(resource.RUSAGE_SELF).ru_minflt
for _ in range(30):
    step()
print(resource.getrusage(resource.RUSAGE_SELF).ru_minflt - before)
"""


def page_faults(mode: str) -> int:
    done = subprocess.run([sys.executable, "-c", FAULTS, mode], capture_output=True, text=True, check=True)
    return int(done.stdout.strip())


@glibc
def test_freed_blocks_are_reused_without_page_faults():
    plain, tuned = page_faults("plain"), page_faults("tuned")
    assert plain > 30 * 1000  # 6 x 1024 pages each step, most of them faulted in again
    assert tuned < plain / 20


@glibc
def test_turned_off_by_the_environment(monkeypatch):
    monkeypatch.setenv("HYLA_MALLOC_TUNING", "0")
    assert keep_freed_memory.__wrapped__() is False
