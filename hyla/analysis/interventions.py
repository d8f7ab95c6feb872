"""Latent-code interventions: test the hypernetwork hypothesis causally (docs/interventions.md).

If the latent code `z_qk = a[b, :, q, k]` (docs/math.md) tells the value network which operation to
carry out, then running a query on task A with the codes that the same query computes on task B
should make the network carry out B's operation.

    with patch_latents(model, layer=1, codes=donor_codes, where=pairs):   # a[B, H, Tq, Tk] replaced
        logits = model(x)

`patch_latents` works for every mixer and whatever implementation `attention(implementation="auto")`
would pick: while a layer is patched it computes its output from the (patched) codes with the
reference formula of `hyla/ops/kernels/naive.py` (`attention_from_codes`). The experiments
(`fuzzy_logic_interventions`, `sraven_interventions`) and `hyla interventions RUN [RUN ...]` score
how far the prediction moves toward B's on a calibrated scale (`Scale`: 0 = unpatched, 1 = B's own
prediction), beside three controls (the leak control: B's query against A's keys; a random other
task's codes; B's codes with the heads shuffled) and the scores of reference predictions (constant,
a perfect random task, wrecked). `hyla.analysis.intervention_report` summarizes several models.
"""

from __future__ import annotations

import os
import sys
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

import torch
from tyro.conf import Positional, arg

from hyla.analysis.collect import FUZZY_LOGIC, SRAVEN, task_kind
from hyla.nn.attention import MultiHeadAttention
from hyla.ops.kernels.common import ACTIVATION_FNS, normalize
from hyla.ops.kernels.common import raw_scores as scores
from hyla.train.configs import ConfigError, check_positive, parse_options
from hyla.train.jsonio import portable_path

ALL_LAYERS = "all"
CONDITIONS = ("patched", "query_side", "random_donor", "shuffled_heads")
"""what is patched into A's run: B's codes; the leak control (B's query state against A's keys);
a random other task's codes; B's codes with the heads permuted"""
REFERENCES = {
    FUZZY_LOGIC: ("unpatched", "donor_run", "constant", "random_task", "wrecked"),
    SRAVEN: ("unpatched", "donor_target", "constant", "random_rule", "wrecked"),
}
"""predictions scored beside the patches (docs/interventions.md): 0, 1, and what no transfer scores"""
SITES = ("probe", "row")
SPLITS = ("valid", "ood")
MIN_GAP = 0.1
"""a query is scored only where its 0 and 1 lie this far apart (and, fuzzy logic, A's and B's targets)"""
CONSTANT_SAMPLES = 4096
DISTRIBUTE_THREE = 7


# ============================================================================= the intervention API
def attention_from_codes(
    a: torch.Tensor,
    v: torch.Tensor,
    value_network: str,
    activation: str = "relu",
    dropout_mask: torch.Tensor | None = None,
) -> torch.Tensor:
    """The value network of docs/math.md given the latent codes: a [B, H, Tq, Tk], v [B, Tk, H, Dv]
    -> y [B, Tq, H, Dv] (before the output projection). The second half of `attention_naive`."""
    weights = a if dropout_mask is None else a * dropout_mask
    if value_network == "linear":  # Eq. 4-5
        return torch.einsum("bhqk,bkhd->bqhd", weights, v)
    hidden = ACTIVATION_FNS[activation](torch.einsum("bhqk,bkhd->bqkd", weights, v))  # [B, Tq, Tk, Dv], Eq. 6
    return torch.einsum("bhqk,bqkd->bqhd", weights, hidden)  # Eq. 7


class LatentPatch:
    """What a patched `MultiHeadAttention` runs instead of `attention`: its own codes
    `normalize(scores(q, k, bias))`, the pairs `where` replaced by `codes`, then `attention_from_codes`.

    codes `[B, H, T, Tk]` (None: nothing replaced) and where (bool, broadcastable to codes, True =
    replace) cover every query of the sequence; a layer that computes only the last Tq queries (the
    model's last block when only those are read out) takes their last Tq rows."""

    def __init__(self, module: MultiHeadAttention, index: int, codes: torch.Tensor | None, where: torch.Tensor | None):
        self.module, self.index, self.codes, self.where = module, index, codes, where

    def __call__(self, q, k, v, *, bias=None, mask=None, dropout_mask=None) -> tuple[torch.Tensor, torch.Tensor]:
        mixer = self.module.mixer
        a = normalize(scores(q, k, bias), mixer.normalization, mask)  # [B, H, Tq, Tk]
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


# ============================================================================= running patched models
def layer_settings(num_layers: int) -> dict[str, list[int]]:
    """{"layer 0": [0], ..., "all layers": [0, ..., L-1]}: each layer alone, then all together."""
    return {**{f"layer {i}": [i] for i in range(num_layers)}, "all layers": list(range(num_layers))}


@torch.no_grad()
def model_codes(model, x: torch.Tensor, batch_size: int) -> tuple[torch.Tensor, list[torch.Tensor]]:
    """(logits, codes per layer [N, H, T, T]) of an unpatched run, in chunks of batch_size."""
    logits, codes = [], []
    for start in range(0, len(x), batch_size):
        out, latents = model(x[start : start + batch_size], return_latents=True)
        logits.append(out)
        codes.append(latents)
    return torch.cat(logits), [torch.cat(layer) for layer in zip(*codes)]


@torch.no_grad()
def patched_logits(
    model,
    x: torch.Tensor,
    layers: list[int],
    codes: list[torch.Tensor] | None,
    where: torch.Tensor | None,
    batch_size: int,
) -> torch.Tensor:
    """Logits of `model(x)` with `layers` patched by `codes` (per model layer, [N, ...]) at `where`."""
    out = []
    for start in range(0, len(x), batch_size):
        rows = slice(start, start + batch_size)
        chunk = None if codes is None else {i: codes[i][rows] for i in layers}
        chunk_where = None if where is None else where[rows] if where.shape[0] > 1 else where
        with patch_latents(model, layer=layers, codes=chunk, where=chunk_where):
            out.append(model(x[rows]))
    return torch.cat(out)


def shuffle_heads(codes: list[torch.Tensor], generator: torch.Generator) -> list[torch.Tensor]:
    """The shuffled-heads control: per sample and layer a random permutation of the head axis of
    codes [N, H, T, T] (the code's values kept, their assignment to the heads' weights broken)."""
    shuffled = []
    for layer_codes in codes:
        N, H = layer_codes.shape[:2]
        perm = torch.rand(N, H, generator=generator).argsort(1).to(layer_codes.device)  # [N, H]
        shuffled.append(layer_codes.gather(1, perm[:, :, None, None].expand_as(layer_codes)))
    return shuffled


class ProjectionRecorder(LatentPatch):
    """A patch that replaces no code and keeps the queries, keys, bias and mask of its layer's call."""

    def __init__(self, module: MultiHeadAttention, index: int):
        super().__init__(module, index, None, None)
        self.inputs: tuple | None = None

    def __call__(self, q, k, v, *, bias=None, mask=None, dropout_mask=None):
        self.inputs = (q, k, bias, mask)
        return super().__call__(q, k, v, bias=bias, mask=mask, dropout_mask=dropout_mask)


def layer_projections(model, x: torch.Tensor) -> list[tuple]:
    """Per layer (q [B, T, H, Dk], k [B, T, H, Dk], bias, mask) of a run on x [B, T, ...]."""
    layers = attention_layers(model)
    recorders = [ProjectionRecorder(layer, i) for i, layer in enumerate(layers)]
    try:
        for layer, recorder in zip(layers, recorders):
            layer.latent_patch = recorder
        model(x, return_latents=True)  # every query position (a plain call prunes the last block's)
    finally:
        for layer in layers:
            layer.latent_patch = None
    return [recorder.inputs for recorder in recorders]


@torch.no_grad()
def query_side_codes(model, x_query: torch.Tensor, x_keys: torch.Tensor, batch_size: int) -> list[torch.Tensor]:
    """The leak control's codes, per layer [N, H, T, T]: the queries of the run on x_query (B's
    sequence) against the keys (and bias, mask) of the run on x_keys (A's), normalized as the layer
    normalizes. B's examples reach these codes only through what the query's own state has read of
    B's context, never through B's keys."""
    layers, chunks = attention_layers(model), []
    for start in range(0, len(x_keys), batch_size):
        rows = slice(start, start + batch_size)
        donor, own = layer_projections(model, x_query[rows]), layer_projections(model, x_keys[rows])
        chunks.append(
            [
                normalize(scores(q_donor, k_own, bias), layer.mixer.normalization, mask)
                for layer, (q_donor, *_), (_, k_own, bias, mask) in zip(layers, donor, own)
            ]
        )
    return [torch.cat(layer) for layer in zip(*chunks)]


def donor_conditions(model, x_a, x_b, codes_b, x_c, batch_size: int, generator) -> dict[str, list[torch.Tensor]]:
    """The codes per layer that each condition of CONDITIONS patches into A's run."""
    return {
        "patched": codes_b,
        "query_side": query_side_codes(model, x_b, x_a, batch_size),
        "random_donor": model_codes(model, x_c, batch_size)[1],
        "shuffled_heads": shuffle_heads(codes_b, generator),
    }


def intervene(
    model,
    x: torch.Tensor,
    donors: dict[str, list[torch.Tensor]],
    wheres: dict[str, torch.Tensor],
    score,
    batch_size: int,
) -> dict:
    """{site: {layer setting: {condition: score(logits)}}} for every site's `where`, every layer
    setting (`layer_settings`) and every donor condition (codes per layer)."""
    settings = layer_settings(len(attention_layers(model)))
    return {
        site: {
            name: {
                condition: score(patched_logits(model, x, layers, codes, where, batch_size))
                for condition, codes in donors.items()
            }
            for name, layers in settings.items()
        }
        for site, where in wheres.items()
    }


# ============================================================================= the calibrated score
def mean_se(values: torch.Tensor) -> dict[str, float | None]:
    """values [n] -> {"mean", "se"} (se = standard deviation / sqrt(n)); None where undefined."""
    n = len(values)
    return {
        "mean": values.mean().item() if n else None,
        "se": (values.std() / n**0.5).item() if n > 1 else None,
    }


@dataclass
class Scale:
    """The axis of the calibrated transfer score, per query: `measure(logits)` [N] is the quantity
    that moves, `start` [N] its unpatched value (score 0), `end` [N] its value for B's answer (score
    1). Queries whose start and end lie less than MIN_GAP apart are not scored (no move is visible)."""

    measure: Callable[[torch.Tensor], torch.Tensor]
    start: torch.Tensor
    end: torch.Tensor

    @property
    def scored(self) -> torch.Tensor:
        """bool [N]: the queries the score averages over."""
        return (self.end - self.start).abs() >= MIN_GAP

    def of_values(self, values: torch.Tensor) -> dict[str, float | None]:
        """values [N] of the measure -> mean ± s.e. over the scored queries of
        (value − start) / (end − start)."""
        keep = self.scored
        return mean_se((values - self.start)[keep] / (self.end - self.start)[keep])

    def of_logits(self, logits: torch.Tensor) -> dict[str, float | None]:
        return self.of_values(self.measure(logits))


# ============================================================================= fuzzy logic
def term_digits(term_indices: torch.Tensor, num_variables: int) -> torch.Tensor:
    """[..., K] term indices -> [..., K, L] digits (variable 0 most significant; 1 = literal x_i)."""
    shifts = torch.arange(num_variables - 1, -1, -1, device=term_indices.device)
    return (term_indices[..., None] >> shifts) & 1


def fuzzy_logic_targets(term_indices: torch.Tensor, inputs: torch.Tensor) -> torch.Tensor:
    """f(x) = max_k min_i literal_ki(x) of the task `term_indices` [K] at inputs [N, T, L] -> [N, T]."""
    digits = term_digits(term_indices, inputs.shape[-1]).to(inputs)  # [K, L]
    literals = 1.0 - (inputs[:, :, None, :] - digits).abs()  # [N, T, K, L]
    return literals.amin(-1).amax(-1)


def fuzzy_logic_sequences(term_indices: torch.Tensor, inputs: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """Sequences of one task on given inputs [N, T, L] -> (x [N, T, L+1] with the query's y zeroed,
    the query's target [N]), laid out as `FuzzyLogic.batch`."""
    targets = fuzzy_logic_targets(term_indices, inputs)  # [N, T]
    x = torch.cat([inputs, targets[..., None]], -1)
    x[:, -1, -1] = 0.0
    return x, targets[:, -1]


def sharing_pairs(tasks: torch.Tensor) -> torch.Tensor:
    """Ordered pairs (i, j) of rows of tasks [N, K] that share all but one term -> [P, 2]."""
    same = (tasks[:, None, :, None] == tasks[None, :, None, :]).any(-1).sum(-1)  # [N, N] shared terms
    return torch.nonzero(same == tasks.shape[1] - 1)


def fuzzy_logic_pairs(task, split: str, num_pairs: int, samples: int, generator: torch.Generator) -> dict | None:
    """Sequences for the pairs (A, B) of `split`'s tasks that share one term: the same inputs under
    A, under B, and under a random other task C of the split (or of all seen tasks when the split
    has no third); only queries where A's and B's targets differ by MIN_GAP. None: no pair."""
    tasks = task.split_tasks(split).cpu()  # [N, K]
    pairs = sharing_pairs(tasks)
    if not len(pairs):
        return None
    pairs = pairs[torch.randperm(len(pairs), generator=generator)[:num_pairs]]
    others = tasks if len(tasks) > 2 else torch.cat([task.split_tasks(s).cpu() for s in ("train", "ood")])
    parts: dict[str, list] = {}
    for a, b in pairs.tolist():
        candidates = [c for c in others.tolist() if c not in (tasks[a].tolist(), tasks[b].tolist())]
        candidates = candidates or [tasks[b].tolist()]  # (no third task: the control is B itself)
        c = torch.tensor(candidates[int(torch.randint(len(candidates), (), generator=generator))])
        inputs = torch.rand(8 * samples, task.seq_len, task.num_variables, generator=generator)
        (x_a, y_a), (x_b, y_b), (x_c, y_c) = (fuzzy_logic_sequences(t, inputs) for t in (tasks[a], tasks[b], c))
        keep = torch.nonzero((y_a - y_b).abs() >= MIN_GAP)[:samples, 0]
        for name, value in (("x_a", x_a), ("x_b", x_b), ("x_c", x_c), ("y_a", y_a), ("y_b", y_b), ("y_c", y_c)):
            parts.setdefault(name, []).append(value[keep])
        parts.setdefault("pairs", []).append(
            {"a": tasks[a].tolist(), "b": tasks[b].tolist(), "random_task": c.tolist(), "sequences": len(keep)}
        )
    data = {name: torch.cat(values) for name, values in parts.items() if name != "pairs"}
    return {**data, "pairs": parts["pairs"]}


def mean_training_target(task, seed: int) -> float:
    """The constant reference prediction: the mean query target of CONSTANT_SAMPLES training sequences."""
    return task.batch("train", CONSTANT_SAMPLES, seed).y.double().mean().item()


def fuzzy_logic_interventions(
    model, task, num_pairs: int = 16, samples: int = 32, seed: int = 0, batch_size: int = 512, stage=None
) -> dict:
    """The fuzzy-logic experiment (docs/interventions.md) on the splits `valid` (pairs of training
    tasks) and `ood` (pairs of held-out combinations): A's context, the query's codes from B's
    context (same inputs); per site, layer setting and condition the calibrated transfer (`Scale`:
    0 = the model's prediction on A's sequence, 1 = its prediction on B's), and the references."""
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    constant = mean_training_target(task, seed)
    results = {}
    for split in SPLITS:
        data = fuzzy_logic_pairs(task, split, num_pairs, samples, generator) if len(task.split_tasks(split)) else None
        if data is None:
            results[split] = {"num_pairs": 0, "num_sequences": 0}
            continue
        (stage or _quiet)(f"fuzzy logic {split}: {len(data['pairs'])} task pairs, {len(data['y_a'])} sequences")
        x_a, x_b, x_c = (data[name].to(device) for name in ("x_a", "x_b", "x_c"))
        (logits_a, _), (logits_b, codes_b) = model_codes(model, x_a, batch_size), model_codes(model, x_b, batch_size)
        prediction = lambda logits: logits.reshape(-1).double().cpu()  # noqa: E731  [N]
        scale = Scale(prediction, prediction(logits_a), prediction(logits_b))
        donors = donor_conditions(model, x_a, x_b, codes_b, x_c, batch_size, generator)
        T, N = task.seq_len, len(x_a)
        last = torch.full((N,), T - 1, device=device)
        wheres = {"probe": pair_mask(last, T, last[:, None]), "row": pair_mask(last, T)}
        reference = {
            "unpatched": scale.of_logits(logits_a),
            "donor_run": scale.of_logits(logits_b),
            "constant": scale.of_values(torch.full_like(scale.start, constant)),
            "random_task": scale.of_values(data["y_c"].double()),  # a model that carries out C exactly
            "wrecked": scale.of_values(scale.start[torch.randperm(N, generator=generator)]),
        }
        everything = layer_settings(len(codes_b))["all layers"]
        results[split] = {
            "num_pairs": len(data["pairs"]),
            "num_sequences": N,
            "num_scored": int(scale.scored.sum()),
            "pairs": data["pairs"],
            "reference": reference,
            "reference_formula": scale.of_logits(patched_logits(model, x_a, everything, None, None, batch_size)),
            "sites": intervene(model, x_a, donors, wheres, scale.of_logits, batch_size),
        }
    return results


# ============================================================================= SRAVEN
def implied_answers(first: torch.Tensor, second: torch.Tensor, num_values: int) -> torch.Tensor:
    """The answers each rule 0-6 implies for a row that starts (first, second) [N]: -> [N, 7, 2]
    (two readings per rule, equal where only one exists): constant (first | second), progression
    d (first + 2d | second + d), addition first + second, subtraction first - second (mod F)."""
    u, w = first[:, None], second[:, None]
    steps = torch.tensor([0, 1, 2, -1, -2], device=first.device)
    from_first = torch.cat([u + 2 * steps, u + w, u - w], 1)  # [N, 7]
    from_second = torch.cat([w + steps, u + w, u - w], 1)
    return torch.stack([from_first, from_second], -1).remainder(num_values)


def sraven_pairs(task, split: str, count: int, seed: int, generator: torch.Generator) -> dict | None:
    """Instances A of `<split>_unpermuted`, a feature f each, and from a pool of the same split a
    donor whose rule for f differs (rules 0-6, and A's answer not among the donor rule's
    `implied_answers` for A's row), plus a random other instance (control). None: no donor found."""
    K, F = task.num_features, task.num_values
    name = f"{split}_unpermuted"
    a_batch, pool = task.batch(name, count, 2 * seed), task.batch(name, 8 * count, 2 * seed + 1)
    rules_a, panels = a_batch.info["rules"].cpu(), a_batch.info["panels"].cpu()  # [N, K], [N, 3, 3, K]
    feature = torch.randint(K, (count,), generator=generator)
    rows = torch.arange(count)
    last_row = panels[rows, 2, :, feature]  # [N, 3]: feature f in the last row
    implied = implied_answers(last_row[:, 0], last_row[:, 1], F)  # [N, 7, 2]
    usable = (implied != last_row[:, 2, None, None]).all(-1)  # [N, 7]: rules that change A's answer
    usable &= torch.arange(7) != rules_a[rows, feature][:, None]
    pool_rules = pool.info["rules"].cpu()[:, feature].T  # [N, M]: the pool's rule of each A's feature
    candidate = (pool_rules < DISTRIBUTE_THREE) & usable.gather(1, pool_rules.clamp(max=6))
    donor = (torch.rand(candidate.shape, generator=generator) * candidate).argmax(1)  # [N]
    found = candidate[rows, donor]
    other = torch.randint(len(pool_rules[0]), (count,), generator=generator)
    other = torch.where(other == donor, (other + 1) % len(pool_rules[0]), other)
    if not found.any():
        return None
    keep = torch.nonzero(found)[:, 0]
    rule_b = pool_rules[keep, donor[keep]]
    return {
        "x_a": a_batch.x.cpu()[keep],
        "x_b": pool.x.cpu()[donor[keep]],
        "x_c": pool.x.cpu()[other[keep]],
        "feature": feature[keep],
        "rule_a": rules_a[keep, feature[keep]],
        "rule_b": rule_b,
        "target_a": last_row[keep, 2],
        "implied": implied[keep],
        "implied_b": implied[keep, rule_b],
    }


def feature_probabilities(logits: torch.Tensor, feature: torch.Tensor) -> torch.Tensor:
    """logits [N, K, F] -> the predicted distribution [N, F] (float64, CPU) of feature f per grid."""
    return logits.double().cpu()[torch.arange(len(logits)), feature].softmax(-1)


def answer_mass(probabilities: torch.Tensor, answers: torch.Tensor) -> torch.Tensor:
    """The probability [N] that distributions [N, F] give to a set of answers [N, 2] (two readings,
    equal where there is one)."""
    first, second = probabilities.gather(1, answers).unbind(1)
    return first + torch.where(answers[:, 0] != answers[:, 1], second, 0.0)


def answers_distribution(answers: torch.Tensor, num_values: int) -> torch.Tensor:
    """[N, 2] answers -> [N, F]: the distribution of a model that gives them (half each reading)."""
    probabilities = torch.zeros(len(answers), num_values, dtype=torch.float64)
    return probabilities.scatter_add_(1, answers, torch.full(answers.shape, 0.5, dtype=torch.float64))


def sraven_interventions(model, task, count: int = 512, seed: int = 0, batch_size: int = 512, stage=None) -> dict:
    """The SRAVEN experiment (docs/interventions.md) on `valid_unpermuted` and `ood_unpermuted`:
    A's grid, the answer token of feature f patched with the donor's codes of that token, per site
    (probe: its codes to feature f in panels (2,0), (2,1); row: to every key), layer setting and
    condition the calibrated transfer (`Scale` on the probability of B's answers: 0 = unpatched,
    1 = all of it on the answers B's rule implies for A's row), and the references."""
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    K, F, results = task.num_features, task.num_values, {}
    for split in SPLITS:
        data = sraven_pairs(task, split, count, seed, generator) if len(task.split_tasks(split)) else None
        if data is None:
            results[split] = {"num_sequences": 0}
            continue
        N, T = len(data["x_a"]), task.seq_len
        (stage or _quiet)(f"SRAVEN {split}: {N} grids")
        x_a, x_b, x_c = (data[name].to(device) for name in ("x_a", "x_b", "x_c"))
        (logits_a, _), (_, codes_b) = model_codes(model, x_a, batch_size), model_codes(model, x_b, batch_size)
        feature, answers_b = data["feature"], data["implied_b"]
        mass_on_b = lambda logits: answer_mass(feature_probabilities(logits, feature), answers_b)  # noqa: E731
        scale = Scale(mass_on_b, mass_on_b(logits_a), torch.ones(N, dtype=torch.float64))
        donors = donor_conditions(model, x_a, x_b, codes_b, x_c, batch_size, generator)
        query = (8 * K + feature).to(device)
        keys = torch.stack([6 * K + feature, 7 * K + feature], 1).to(device)
        wheres = {"probe": pair_mask(query, T, keys), "row": pair_mask(query, T)}
        random_rule = data["rule_b"][torch.randint(N, (N,), generator=generator)]  # drawn from the donor set
        random_answers = data["implied"][torch.arange(N), random_rule]  # [N, 2]
        reference = {
            "unpatched": scale.of_logits(logits_a),
            "donor_target": scale.of_values(scale.end),
            "constant": scale.of_values(answer_mass(torch.full((N, F), 1 / F, dtype=torch.float64), answers_b)),
            "random_rule": scale.of_values(answer_mass(answers_distribution(random_answers, F), answers_b)),
            "wrecked": scale.of_values(
                answer_mass(feature_probabilities(logits_a, feature)[torch.randperm(N, generator=generator)], answers_b)
            ),
        }
        rule_pairs, counts = torch.unique(torch.stack([data["rule_a"], data["rule_b"]], 1), dim=0, return_counts=True)
        results[split] = {
            "num_sequences": N,
            "num_scored": int(scale.scored.sum()),
            "rule_pairs": {f"{a}->{b}": n for (a, b), n in zip(rule_pairs.tolist(), counts.tolist())},
            "reference": reference,
            "reference_formula": scale.of_logits(
                patched_logits(model, x_a, list(range(len(codes_b))), None, None, batch_size)
            ),
            "sites": intervene(model, x_a, donors, wheres, scale.of_logits, batch_size),
        }
    return results


# ============================================================================= one model
def interventions(
    model,
    task,
    num_pairs: int = 16,
    samples: int = 32,
    seed: int = 0,
    batch_size: int = 512,
    progress: bool = True,
    metadata: dict | None = None,
) -> dict:
    """Both experiments' entry point for one model: {"task", "conditions", "references", "sites",
    "layer_settings", "options", "model": metadata, "splits": {split: ...}}.
    num_pairs: task pairs per split (fuzzy logic); SRAVEN uses num_pairs·samples grids per split."""
    stage, kind = Progress(progress), task_kind(task)
    was_training = model.training
    model.eval()
    try:
        if kind == FUZZY_LOGIC:
            splits = fuzzy_logic_interventions(model, task, num_pairs, samples, seed, batch_size, stage)
        else:
            splits = sraven_interventions(model, task, num_pairs * samples, seed, batch_size, stage)
    finally:
        model.train(was_training)
    return {
        "task": kind,
        "conditions": list(CONDITIONS),
        "references": list(REFERENCES[kind]),
        "sites": list(SITES),
        "layer_settings": list(layer_settings(len(attention_layers(model)))),
        "options": {"tasks": num_pairs, "samples": samples, "seed": seed},
        "model": metadata or {},
        "splits": splits,
    }


class Progress:
    """`stage(name)` prints `interventions: NAME (N s elapsed)` on stderr; nothing when not enabled."""

    def __init__(self, enabled: bool):
        self.enabled, self.start = enabled, time.perf_counter()

    def __call__(self, name: str) -> None:
        if self.enabled:
            print(
                f"interventions: {name} ({time.perf_counter() - self.start:.0f} s elapsed)", file=sys.stderr, flush=True
            )


def _quiet(name: str) -> None:
    pass


# ============================================================================= the command
@dataclass
class InterventionsOptions:
    """Latent-code interventions on trained models: patch a query's codes with another task's, score
    the transfer (0 = unpatched, 1 = B's own prediction) beside controls and references."""

    runs: Positional[Annotated[tuple[Path, ...], arg(metavar="RUN [RUN ...]", help_behavior_hint="(required)")]]
    """run folders (`hyla train`) or exported models (`hyla export`), fuzzy logic or SRAVEN; several
    (e.g. the training seeds of each mixer) are summarized as mean ± s.e. over models per mixer"""
    out: Annotated[Path | None, arg(help_behavior_hint="(default: RUN/interventions)")] = None
    """output folder, needed with several models; file names carry --tasks, --samples and --seed"""
    tasks: int = 16
    """task pairs per split (fuzzy logic); SRAVEN: tasks x samples grids per split"""
    samples: int = 32
    """sequences per task pair"""
    seed: int = 0
    batch_size: int = 512
    device: str = "cpu"
    """cpu | cuda | cuda:N | auto"""

    def __post_init__(self):
        if not self.runs:
            raise ConfigError("give a run folder or an exported model (or several)")
        check_positive(tasks=self.tasks, samples=self.samples, batch_size=self.batch_size)
        if self.seed < 0:
            raise ConfigError(f"--seed={self.seed} must be >= 0")
        if len(self.runs) > 1 and self.out is None:
            raise ConfigError(f"--out is needed with {len(self.runs)} models (their summary is written there)")
        resolved = [path.resolve() for path in self.runs]
        if len(set(resolved)) < len(resolved):
            raise ConfigError("a model is named twice")


def model_labels(paths: Sequence[Path]) -> list[str]:
    """A short distinct name per model: its path below the models' common folder, '/' as '-'."""
    resolved = [Path(path).resolve() for path in paths]
    if len(resolved) == 1:
        return [resolved[0].name]
    parent = Path(os.path.commonpath(resolved))
    return [str(path.relative_to(parent)).replace(os.sep, "-") for path in resolved]


def main(argv: list[str]) -> int:
    """`hyla interventions RUN [RUN ...] [--out DIR] [--tasks N] [--samples M] [--seed S]`"""
    from hyla.analysis.intervention_report import write_report
    from hyla.train import load_run_at_step  # train depends on the model; analysis only needs it here

    args = parse_options(InterventionsOptions, argv, "hyla interventions")
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    loaded = [load_run_at_step(path, task=(FUZZY_LOGIC, SRAVEN)) for path in args.runs]  # a bad one fails first
    per_model = []
    for path, label, (cfg, model, task, step) in zip(args.runs, model_labels(args.runs), loaded):
        print(f"interventions: {label} ({cfg.task}, {cfg.model.mixer}, seed {cfg.seed})", file=sys.stderr)
        metadata = {
            "label": label,
            "path": portable_path(path),
            "task": cfg.task,
            "mixer": cfg.model.mixer,
            "seed": cfg.seed,
            "checkpoint_step": step,
        }
        options = (args.tasks, args.samples, args.seed, args.batch_size)
        per_model.append(interventions(model.to(device), task, *options, metadata=metadata))
    out = args.out or Path(args.runs[0]) / "interventions"
    stem = out / f"interventions_tasks{args.tasks}_samples{args.samples}_seed{args.seed}"
    table = write_report(per_model, stem)
    print(table)
    print(f"wrote {stem.with_suffix('.json')} and {stem.with_suffix('.png')}")
    return 0
