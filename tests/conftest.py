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
    """set_switch(NAME, value) sets one of hyla's environment variables (hyla.utils.ENV_NAMES, e.g.
    HYLA_CPP_KERNEL or HYLA_CACHE; None: unsets it), the one way tests change them. hyla reads them
    once per process, so the record is read again after each change and when the test ends."""
    from hyla.utils import ENV_NAMES, switches

    def set_(name: str, value: str | None) -> None:
        assert name in ENV_NAMES, f"{name} is not one of hyla's switches: {ENV_NAMES}"
        if value is None:
            monkeypatch.delenv(name, raising=False)
        else:
            monkeypatch.setenv(name, value)
        switches.cache_clear()

    yield set_
    switches.cache_clear()  # (monkeypatch restores the variables after this; the record is read lazily)
