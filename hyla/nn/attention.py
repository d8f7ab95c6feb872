"""`MultiHeadAttention`: projections around `hyla.ops.attention`, any mixer, latent codes exposed."""

from __future__ import annotations

import functools

import torch
from torch import nn

from hyla.ops import attention, resolve_mixer


class MultiHeadAttention(nn.Module):
    """Drop-in multi-head attention over the whole attention family.

    Args:
        dim: input width D of the queries.
        num_heads: H.
        mixer: a mixer name (hyla or authors' name, e.g. "hyla", "linear_hypatt", "softmax"),
            optionally with `normalization` / `value_network` / `activation` overriding its axes;
            or mixer=None and the axes alone.
        qk_dim, v_dim: TOTAL query/key and value sizes over heads (default: dim); each must divide by H.
        out_dim: output width (default: dim).
        context_dim: width of the key/value input for cross-attention (default: dim).
        causal: mask keys after the query.
        dropout: attention dropout rate; one keep-mask [Tq, Tk] shared over batch and heads,
            so whole latent codes are dropped (the paper's semantics). Training only.

    forward(x [B, Tq, D], context [B, Tk, context_dim] | None, mask, bias, return_latents)
        -> y [B, Tq, out_dim] (and latent codes [B, H, Tq, Tk] when return_latents).
    """

    def __init__(
        self,
        dim: int,
        num_heads: int,
        mixer: str | None = "softmax",
        *,
        normalization: str | None = None,
        value_network: str | None = None,
        activation: str | None = None,
        qk_dim: int | None = None,
        v_dim: int | None = None,
        out_dim: int | None = None,
        context_dim: int | None = None,
        causal: bool = False,
        dropout: float = 0.0,
        implementation: str = "auto",
    ):
        super().__init__()
        self.mixer = resolve_mixer(
            mixer, normalization=normalization, value_network=value_network, activation=activation
        )
        qk_dim, v_dim = qk_dim or dim, v_dim or dim
        for what, size in (("qk_dim", qk_dim), ("v_dim", v_dim)):
            if size % num_heads:
                raise ValueError(f"{what}={size} is not divisible by num_heads={num_heads}")
        if not 0.0 <= dropout < 1.0:
            raise ValueError(f"dropout must be in [0, 1), got {dropout}")
        self.num_heads, self.causal, self.dropout, self.implementation = num_heads, causal, dropout, implementation
        # set only inside `hyla.analysis.patch_latents`: a callable that computes (out, codes) instead of `attention`
        self.latent_patch = None
        self.dim, self.context_dim = dim, context_dim or dim
        self.query = nn.Linear(dim, qk_dim)
        self.key = nn.Linear(self.context_dim, qk_dim)
        self.value = nn.Linear(self.context_dim, v_dim)
        self.out = nn.Linear(v_dim, out_dim or dim)

    def forward(
        self,
        x: torch.Tensor,
        context: torch.Tensor | None = None,
        *,
        mask: torch.Tensor | None = None,
        bias: torch.Tensor | None = None,
        return_latents: bool = False,
        kv_cache: dict | None = None,
        dropout_mask: torch.Tensor | None = None,
    ):
        """kv_cache: a dict this layer fills with its keys/values (incremental decoding); when it
        holds earlier steps, x is only the new tokens, placed after the cached ones.
        dropout_mask: a keep-mask [Tq, Tk] from `draw_dropout_mask` to apply instead of drawing one
        (packed training draws each member's masks outside `torch.func.vmap`)."""
        context = x if context is None else context
        self._check_shapes(x, context)
        q_len, heads = x.shape[1], self.num_heads
        q, k, v = self.query(x), self.key(context), self.value(context)
        q = q.unflatten(-1, (heads, -1))  # [B, Tq, H, Dk]
        k = k.unflatten(-1, (heads, -1))  # [B, Tk, H, Dk]
        v = v.unflatten(-1, (heads, -1))  # [B, Tk, H, Dv]
        if kv_cache is not None:
            if "k" in kv_cache:
                k, v = torch.cat([kv_cache["k"], k], 1), torch.cat([kv_cache["v"], v], 1)
            kv_cache["k"], kv_cache["v"] = k, v
        k_len = k.shape[1]
        if self.causal:
            causal = causal_mask(q_len, k_len, x.device)
            mask = causal if mask is None else mask & causal
        if dropout_mask is None and self.training and self.dropout > 0:
            dropout_mask = self.draw_dropout_mask(q_len, k_len, x.device, q.dtype)
        if self.latent_patch is not None:  # an intervention (hyla.analysis.interventions) replaces latent codes
            out, latents = self.latent_patch(q, k, v, bias=bias, mask=mask, dropout_mask=dropout_mask)
            latents = latents if return_latents else None
        else:
            result = attention(
                q,
                k,
                v,
                normalization=self.mixer.normalization,
                value_network=self.mixer.value_network,
                activation=self.mixer.activation,
                bias=bias,
                mask=mask,
                dropout_mask=dropout_mask,
                return_latents=return_latents,
                implementation=self.implementation,
            )
            out, latents = result if return_latents else (result, None)
        y = self.out(out.flatten(-2))  # [B, Tq, out_dim]
        return (y, latents) if return_latents else y

    def _check_shapes(self, x: torch.Tensor, context: torch.Tensor) -> None:
        if x.ndim != 3 or x.shape[-1] != self.dim:
            raise ValueError(f"expected x of shape [B, T, {self.dim}], got {tuple(x.shape)}")
        if context.ndim != 3 or context.shape[-1] != self.context_dim or context.shape[0] != x.shape[0]:
            raise ValueError(
                f"expected context of shape [{x.shape[0]}, T, {self.context_dim}], got {tuple(context.shape)}"
            )

    def draw_dropout_mask(self, q_len: int, k_len: int, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
        """This layer's attention-dropout keep-mask [q_len, k_len] (see `draw_dropout_mask`)."""
        return draw_dropout_mask(q_len, k_len, self.dropout, device, dtype)

    def extra_repr(self) -> str:
        m = self.mixer
        return (
            f"heads={self.num_heads}, normalization={m.normalization}, value_network={m.value_network}, "
            f"activation={m.activation}, causal={self.causal}"
        )


def causal_mask(q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
    """[q_len, k_len] bool, True = attend: the queries are the last q_len positions of the key
    sequence (all of it without a KV cache). Eagerly made once per length and device and shared
    (never written to); torch.compile traces the construction, which it folds into its graph."""
    if torch.compiler.is_compiling():
        return _causal_mask(q_len, k_len, device)
    return _cached_causal_mask(q_len, k_len, device)


def _causal_mask(q_len: int, k_len: int, device: torch.device) -> torch.Tensor:
    return torch.ones(q_len, k_len, dtype=torch.bool, device=device).tril(k_len - q_len)


_cached_causal_mask = functools.lru_cache(maxsize=64)(_causal_mask)


def draw_dropout_mask(q_len: int, k_len: int, rate: float, device: torch.device, dtype: torch.dtype) -> torch.Tensor:
    """An attention-dropout keep-mask [q_len, k_len] on `device`, scaled by 1 / keep (docs/math.md),
    from the CPU's global generator, so that a seed gives the same masks on every device. (Inside
    compiled code it is drawn on `device`, from that device's generator: a CUDA graph holds no CPU
    work.) Every hyla attention layer draws its masks here, the transformers integration's too."""
    keep = 1.0 - rate
    drawn_on = device if torch.compiler.is_compiling() else "cpu"
    return (torch.bernoulli(torch.full((q_len, k_len), keep, device=drawn_on, dtype=dtype)) / keep).to(device)
