"""Shared test setup: one intra-op thread, every test starts from the same random state, and
without a GPU Triton kernels run in Triton's interpreter (chosen when triton is first imported,
which other tests' imports may do before tests/ops/test_triton_attention.py is collected)."""

import os

import pytest
import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")

# Test tensors are tiny: extra threads only add synchronization overhead, and on a shared machine
# they make the suite's time depend on the load (4 s vs 20 s for the attention tests on 2 cores).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)


@pytest.fixture
def set_switch(monkeypatch):
    """set_switch(NAME, value) sets a fast path's environment switch (None: unsets it). hyla reads
    the switches once per process, so the cache is cleared here and when the test ends."""
    from hyla.ops.kernels.common import environment_switch

    def set_(name: str, value: str | None) -> None:
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
        environment_switch.cache_clear()

    yield set_
    environment_switch.cache_clear()
