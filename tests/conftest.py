"""Shared test setup: one intra-op thread, and every test starts from the same random state."""

import pytest
import torch

# Test tensors are tiny: extra threads only add synchronization overhead, and on a shared machine
# they make the suite's time depend on the load (4 s vs 20 s for the attention tests on 2 cores).
torch.set_num_threads(1)


@pytest.fixture(autouse=True)
def seeded():
    torch.manual_seed(0)
