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
    # A step touches 6 x 1024 pages. With glibc's defaults they are faulted in again in every step
    # (183,367 faults) or, with some address-space layouts, in some (7,143); once the thresholds
    # are set, at most the pages of one more block.
    plain, tuned = page_faults("plain"), page_faults("tuned")
    assert tuned < 4 * 1024 < plain


@glibc
def test_turned_off_by_the_environment(set_switch):
    set_switch("HYLA_MALLOC_TUNING", "0")
    assert keep_freed_memory.__wrapped__() is False


@pytest.mark.parametrize("device, expected", [("cpu", 1), ("meta", 0)])
def test_training_on_the_cpu_sets_it(monkeypatch, tmp_path, device, expected):
    import torch
    from helpers_train import tiny_config

    from hyla.train import numerics
    from hyla.train.distributed import DistContext

    calls = []
    monkeypatch.setattr(numerics, "keep_freed_memory", lambda: calls.append(1))
    with numerics.process_settings(tiny_config(tmp_path), DistContext(0, 1, torch.device(device))):
        pass
    assert len(calls) == expected
