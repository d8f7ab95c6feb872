"""HYLA and the attention family as attention implementations of Hugging Face transformers models.

    import hyla.integrations.transformers as hyla_hf
    hyla_hf.register()                     # explicit: importing hyla registers nothing
    model = LlamaForCausalLM(LlamaConfig(...), attn_implementation="hyla")

`register()` adds every named hyla mixer to transformers' attention registry (AttentionInterface)
and its mask registry (AttentionMaskInterface), as `IMPLEMENTATIONS`: `hyla` (HYLA), and
`hyla_<name>` for the others (`hyla_softmax`, `hyla_linear`, `hyla_linear_rms_head`,
`hyla_softmax_hyla`, ...). Any model whose attention calls the registry (Llama, Mistral, Qwen2,
Gemma, GPT-2, ... in recent transformers) then runs `hyla.ops.attention` in place of softmax
attention, with the model's own projections, positions (RoPE) and KV cache.

How transformers' conventions map onto hyla's:
- layout: transformers passes q [B, H, Tq, D], k and v [B, Hkv, Tk, D]; hyla takes [B, T, H, D] and
  returns [B, Tq, H, D], which is what transformers expects back.
- grouped-query attention (num_key_value_heads < num_attention_heads): k and v are repeated to H
  heads. Exact for softmax; for HYLA this changes the model: the RMS-head normalization and the
  first value-network layer mix all H heads, and repeated heads enter them several times (a
  one-line warning says so, once per mixer and head counts).
- scaling: hyla divides the scores by sqrt(D); transformers' `scaling` (usually D^-1/2, but
  model-specific) replaces it, applied to the scores before normalization as for softmax (HYLA's
  normalization is not a softmax, so the scale changes its output, not only its sharpness).
- masks: the registered mask function builds a boolean mask (True = attend) of shape
  [B, 1, Tq, Tk], with causality and padding always materialized; a float additive mask (older
  transformers) is read as boolean where it is above the dtype's minimum / 2. Fully masked query
  rows give zeros.
- dropout: transformers' attention-dropout rate, as hyla's: one keep-mask [Tq, Tk] shared over the
  batch and the heads (it drops whole latent codes).
- not supported (a clear error): logit soft-capping (Gemma 2's attn_logit_softcapping).
- attention weights: with output_attentions the function returns hyla's latent codes
  [B, H, Tq, Tk] (normalized scores; this takes the naive form, slower).
"""

from __future__ import annotations

import functools
import math
import warnings

import torch

from hyla.nn.attention import draw_dropout_mask
from hyla.ops import NAMED_MIXERS, attention, resolve_mixer


def implementation_name(mixer: str) -> str:
    """The attention-implementation name of a hyla mixer: itself if it starts with "hyla", else hyla_<mixer>."""
    return mixer if mixer.startswith("hyla") else f"hyla_{mixer}"


IMPLEMENTATIONS: dict[str, str] = {implementation_name(m): m for m in NAMED_MIXERS}  # name -> hyla mixer


def _boolean_mask(attention_mask: torch.Tensor | None) -> torch.Tensor | None:
    if attention_mask is None or attention_mask.dtype == torch.bool:
        return attention_mask
    return attention_mask > torch.finfo(attention_mask.dtype).min / 2


def _repeat_heads(t: torch.Tensor, heads: int) -> torch.Tensor:
    """[B, Hkv, T, D] -> [B, heads, T, D], each key/value head repeated for its group of query heads."""
    if t.shape[1] == heads:
        return t
    if heads % t.shape[1]:
        raise ValueError(f"{heads} query heads are not a multiple of {t.shape[1]} key/value heads")
    return t.repeat_interleave(heads // t.shape[1], dim=1)


@functools.cache
def warn_grouped_query(mixer: str, heads: int, kv_heads: int) -> None:
    """Once per mixer and head counts: repeating key/value heads is exact for a mixer that treats heads
    apart (softmax, linear), and changes the model of one that mixes them (HYLA)."""
    spec = resolve_mixer(mixer)
    if spec.normalization == "rms_head" or spec.value_network == "mlp":
        warnings.warn(
            f"attn_implementation={implementation_name(mixer)!r} under grouped-query attention ({heads} query "
            f"heads, {kv_heads} key/value heads): the key/value heads are repeated, and {mixer} mixes heads, so "
            "repeated heads count several times: a different model from the same one without grouping",
            UserWarning,
            stacklevel=3,
        )


def hyla_attention_forward(
    module: torch.nn.Module,
    query: torch.Tensor,
    key: torch.Tensor,
    value: torch.Tensor,
    attention_mask: torch.Tensor | None,
    scaling: float | None = None,
    dropout: float = 0.0,
    *,
    mixer: str,
    **kwargs,
) -> tuple[torch.Tensor, torch.Tensor | None]:
    """transformers' attention-function signature for hyla mixer `mixer`: query [B, H, Tq, D], key and
    value [B, Hkv, Tk, D(v)], attention_mask bool or additive [B, 1|H, Tq, Tk] -> ([B, Tq, H, Dv], latent
    codes [B, H, Tq, Tk] with output_attentions else None)."""
    if kwargs.get("softcap") is not None:
        raise ValueError(
            f"attn_implementation={implementation_name(mixer)!r} does not support logit soft-capping "
            "(this model's config sets it: e.g. attn_logit_softcapping=None turns it off)"
        )
    spec = resolve_mixer(mixer)
    heads, q_len, head_dim = query.shape[1], query.shape[2], query.shape[3]
    if key.shape[1] != heads:
        warn_grouped_query(mixer, heads, key.shape[1])
    key, value = _repeat_heads(key, heads), _repeat_heads(value, heads)
    if scaling is not None:  # hyla divides by sqrt(D): pre-scale q so the scores are scaled by `scaling`
        query = query * (scaling * math.sqrt(head_dim))
    q, k, v = (t.transpose(1, 2) for t in (query, key, value))  # [B, T, H, D]
    dropout_mask = None
    if dropout > 0.0 and module.training:
        dropout_mask = draw_dropout_mask(q_len, k.shape[1], dropout, q.device, q.dtype)
    want_codes = bool(kwargs.get("output_attentions"))
    result = attention(
        q,
        k,
        v,
        normalization=spec.normalization,
        value_network=spec.value_network,
        activation=spec.activation,
        mask=_boolean_mask(attention_mask),
        dropout_mask=dropout_mask,
        return_latents=want_codes,
    )
    out, codes = result if want_codes else (result, None)
    return out, codes  # [B, Tq, H, Dv]


def _materialized_boolean_mask(*args, **kwargs):
    """transformers' boolean (sdpa) mask, never skipped: hyla has no implicit causal flag."""
    from transformers.masking_utils import sdpa_mask

    kwargs.update(allow_is_causal_skip=False)
    return sdpa_mask(*args, **kwargs)


def register() -> list[str]:
    """Register every hyla mixer with transformers (attention and mask functions); returns the
    names for `attn_implementation`. Calling it again re-registers the same functions."""
    try:
        from transformers import AttentionInterface
        from transformers.masking_utils import AttentionMaskInterface
    except ImportError as e:
        raise ImportError(
            "hyla.integrations.transformers needs transformers >= 4.53 (its attention and mask registries): "
            "pip install 'hyla[transformers]'"
        ) from e
    for name, mixer in IMPLEMENTATIONS.items():
        AttentionInterface.register(name, functools.partial(hyla_attention_forward, mixer=mixer))
        AttentionMaskInterface.register(name, _materialized_boolean_mask)
    return list(IMPLEMENTATIONS)
