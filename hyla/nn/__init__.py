"""Modules that own parameters."""

from hyla.nn.attention import MultiHeadAttention
from hyla.nn.feedforward import GeluMLP, MixtureOfExperts, SwiGLU, make_feedforward
from hyla.nn.position import RelativePositionBias

__all__ = ["MultiHeadAttention", "RelativePositionBias", "GeluMLP", "SwiGLU", "MixtureOfExperts", "make_feedforward"]
