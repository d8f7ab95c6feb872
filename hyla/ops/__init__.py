"""Pure tensor functions: the attention family and its mixer table."""

from hyla.ops.dispatch import attention
from hyla.ops.kernels.naive import attention_naive
from hyla.ops.kernels.streamed import hyla_streamed
from hyla.ops.mixers import NAMED_MIXERS, Mixer, canonical_mixer_name, resolve_mixer

__all__ = [
    "attention",
    "attention_naive",
    "hyla_streamed",
    "Mixer",
    "NAMED_MIXERS",
    "canonical_mixer_name",
    "resolve_mixer",
]
