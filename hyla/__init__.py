"""hyla: attention as a hypernetwork (Schug et al., ICLR 2025) in PyTorch."""

import os

# Idle OpenMP threads sleep instead of spinning (takes effect when torch is imported after this):
# on a machine shared with other work, spinning threads wait on cores that others hold, and two
# threads trained 10x slower than one on a loaded 2-core machine. Set OMP_WAIT_POLICY to override.
os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")

from hyla import ops  # noqa: E402
from hyla.model import ModelConfig, Transformer  # noqa: E402
from hyla.nn import MultiHeadAttention  # noqa: E402

__all__ = ["ops", "MultiHeadAttention", "Transformer", "ModelConfig"]
