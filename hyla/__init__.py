"""hyla: attention as a hypernetwork (Schug et al., ICLR 2025) in PyTorch."""

from hyla import ops
from hyla.model import ModelConfig, Transformer
from hyla.nn import MultiHeadAttention

__all__ = ["ops", "MultiHeadAttention", "Transformer", "ModelConfig"]
