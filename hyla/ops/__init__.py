"""Pure tensor functions: the attention family and its mixer table."""

from hyla.ops.attention import attention, attention_naive, attention_pointwise, hyla_fused, hyla_streamed
from hyla.ops.mixers import NAMED_MIXERS, Mixer, canonical_mixer_name, resolve_mixer

__all__ = [
    "attention",
    "attention_naive",
    "attention_pointwise",
    "hyla_fused",
    "hyla_streamed",
    "Mixer",
    "NAMED_MIXERS",
    "canonical_mixer_name",
    "resolve_mixer",
]
