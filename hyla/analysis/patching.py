"""Patching latent codes: run a model with the latent codes of some layers replaced, the API of the
interventions (hyla.analysis.interventions, docs/interventions.md).

    with patch_latents(model, layer=1, codes=donor_codes, where=pairs):   # a[B, H, Tq, Tk] replaced
        logits = model(x)

`patch_latents` works for every mixer and whatever implementation `attention(implementation="auto")`
would pick: while a layer is patched it computes its output from the (patched) codes with the
reference formula, `attention_from_codes` of `hyla/ops/kernels/naive.py`. `pair_mask` builds the
query-key pairs to replace.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from contextlib import contextmanager

import torch

from hyla.nn.attention import MultiHeadAttention
from hyla.ops.kernels.naive import attention_from_codes, normalize, raw_scores

ALL_LAYERS = "all"


class LatentPatch:
    """What a patched `MultiHeadAttention` runs instead of `attention`: its own codes
    `normalize(raw_scores(q, k, bias))`, the pairs `where` replaced by `codes`, then `attention_from_codes`.

    codes `[B, H, T, Tk]` (None: nothing replaced) and where (bool, broadcastable to codes, True =
    replace) cover every query of the sequence; a layer that computes only the last Tq queries (the
    model's last block when only those are read out) takes their last Tq rows."""

    def __init__(self, module: MultiHeadAttention, index: int, codes: torch.Tensor | None, where: torch.Tensor | None):
        self.module, self.index, self.codes, self.where = module, index, codes, where

    def __call__(self, q, k, v, *, bias=None, mask=None, dropout_mask=None) -> tuple[torch.Tensor, torch.Tensor]:
        mixer = self.module.mixer
        a = normalize(raw_scores(q, k, bias), mixer.normalization, mask)  # [B, H, Tq, Tk]
        if self.codes is not None:
            codes = self._rows(self.codes, a, "codes")
            if self.where is None:
                a = codes.to(a)
            else:
                a = torch.where(self._rows(self.where, a, "where").to(a.device), codes.to(a), a)
        return attention_from_codes(a, v, mixer.value_network, mixer.activation, dropout_mask), a

    def _rows(self, tensor: torch.Tensor, a: torch.Tensor, name: str) -> torch.Tensor:
        """The rows of `tensor` [..., T, Tk] for the Tq queries the layer computes, checked against a."""
        B, H, q_len, k_len = a.shape
        rows = tensor if tensor.shape[-2] == 1 else tensor[..., -q_len:, :]
        try:
            fits = torch.broadcast_shapes(rows.shape, a.shape) == a.shape and tensor.shape[-2] in (1, q_len, k_len)
        except RuntimeError:
            fits = False
        if name == "codes":  # no broadcasting: a code for every (sample, head, query, key)
            fits = fits and tensor.shape[:2] == (B, H) and tensor.shape[-2] in (q_len, k_len)
        if not fits:
            raise ValueError(
                f"patch_latents: {name} of layer {self.index} has shape {tuple(tensor.shape)}, "
                f"which does not fit its latent codes [B={B}, H={H}, T={max(q_len, k_len)}, Tk={k_len}]"
            )
        return rows


def attention_layers(model: torch.nn.Module) -> list[MultiHeadAttention]:
    """The `MultiHeadAttention` modules of `model` in order (a `Transformer`: one per block)."""
    return [m for m in model.modules() if isinstance(m, MultiHeadAttention)]


def _layer_indices(layer, num_layers: int) -> list[int]:
    if layer == ALL_LAYERS:
        return list(range(num_layers))
    indices = [layer] if isinstance(layer, int) else list(layer) if isinstance(layer, Sequence) else None
    if not indices or any(isinstance(i, bool) or not isinstance(i, int) or not 0 <= i < num_layers for i in indices):
        raise ValueError(
            f"patch_latents: layer={layer!r} is not valid; valid: 0..{num_layers - 1}, a list of "
            f"them, or {ALL_LAYERS!r}"
        )
    if len(set(indices)) != len(indices):
        raise ValueError(f"patch_latents: layer={layer!r} names a layer twice")
    return indices


def _codes_by_layer(codes, indices: list[int], num_layers: int) -> dict[int, torch.Tensor | None]:
    """codes: None | a tensor (one layer) | one tensor per model layer | {layer: tensor}."""
    if codes is None:
        return dict.fromkeys(indices)
    if isinstance(codes, torch.Tensor):
        if len(indices) != 1:
            raise ValueError(
                f"patch_latents: one codes tensor for {len(indices)} layers; give one per layer "
                "(a list as Transformer(..., return_latents=True) returns, or {layer: codes})"
            )
        codes = {indices[0]: codes}
    elif isinstance(codes, Sequence):
        if len(codes) != num_layers:
            raise ValueError(
                f"patch_latents: a list of codes needs one entry per layer ({num_layers}), got {len(codes)}"
            )
        codes = dict(enumerate(codes))
    if not isinstance(codes, dict) or any(i not in codes for i in indices):
        raise ValueError(f"patch_latents: codes must give the codes of every patched layer {indices}")
    for i in indices:
        tensor = codes[i]
        if not isinstance(tensor, torch.Tensor) or tensor.ndim != 4 or not tensor.is_floating_point():
            what = (
                f"a {tensor.dtype} tensor of shape {tuple(tensor.shape)}"
                if isinstance(tensor, torch.Tensor)
                else type(tensor).__name__
            )
            raise ValueError(f"patch_latents: the codes of layer {i} must be a float tensor [B, H, T, Tk], got {what}")
    return {i: codes[i] for i in indices}


@contextmanager
def patch_latents(
    model: torch.nn.Module, layer: int | Sequence[int] | str, codes=None, where: torch.Tensor | None = None
) -> Iterator[torch.nn.Module]:
    """Run `model` with the latent codes of some layers and query-key pairs replaced.

    Inside the block, each patched layer computes its codes `a [B, H, T, Tk]` as usual, replaces
    the pairs `where` by `codes`, and computes its output from them with the reference formula
    (`attention_from_codes`, docs/math.md), whatever implementation it would otherwise run; its
    returned latents (`return_latents=True`) are the patched codes. Layers not patched run as usual.

    Args:
        model: a `Transformer` (its layers are its blocks' attentions), or any module holding
            `MultiHeadAttention`s (numbered in `model.modules()` order). Must be in eval mode.
        layer: a layer index, a list of them, or "all".
        codes: the replacement codes. None: nothing is replaced (the patched layers only switch to
            the reference formula: the baseline to compare a replacement with, bit for bit); a
            tensor `[B, H, T, Tk]` when one layer is patched; otherwise one tensor per model layer
            (the list `model(x, return_latents=True)` returns; only the patched layers are read) or
            a dict {layer: tensor}. Cast to the model's dtype and device.
        where: bool, broadcastable to `[B, H, T, Tk]`, True = replace that pair's code (the same
            pairs in every patched layer); None = every pair. `pair_mask` builds one.

    Replacement happens after masking and normalization (a masked pair that `where` selects gets
    the donor's code). The patches are removed on exit, also after an error; a one-line ValueError
    names a bad layer, a codes or where tensor that does not fit the layer, or a model in training.
    """
    layers = attention_layers(model)
    if not layers:
        raise ValueError(f"patch_latents: {type(model).__name__} has no MultiHeadAttention layer")
    if model.training:
        raise ValueError("patch_latents: the model is in training mode; call model.eval() (no attention dropout)")
    indices = _layer_indices(layer, len(layers))
    by_layer = _codes_by_layer(codes, indices, len(layers))
    if where is not None and (not isinstance(where, torch.Tensor) or where.dtype != torch.bool or where.ndim != 4):
        raise ValueError("patch_latents: where must be a bool tensor broadcastable to [B, H, T, Tk] (True = replace)")
    for i in indices:
        if layers[i].latent_patch is not None:
            raise ValueError(f"patch_latents: layer {i} is already patched (nested patch_latents on one layer)")
    try:
        for i in indices:
            layers[i].latent_patch = LatentPatch(layers[i], i, by_layer[i], where)
        yield model
    finally:
        for i in indices:
            layers[i].latent_patch = None


def pair_mask(queries: torch.Tensor, seq_len: int, keys: torch.Tensor | None = None) -> torch.Tensor:
    """A `where` for `patch_latents`: per sample the pairs (query, key) of the given positions.

    queries `[B]` (one query per sample); keys `[B, M]` key positions of that query, or None = all
    keys -> bool `[B, 1, seq_len, seq_len]` (the same pairs in every head)."""
    B = len(queries)
    mask = torch.zeros(B, 1, seq_len, seq_len, dtype=torch.bool, device=queries.device)
    rows = torch.arange(B, device=queries.device)
    if keys is None:
        mask[rows, 0, queries] = True
    else:
        mask[rows[:, None], 0, queries[:, None], keys] = True
    return mask
