"""Latent-code interventions: test the hypernetwork hypothesis causally (docs/interventions.md).

If the latent code `z_qk = a[b, :, q, k]` (docs/math.md) tells the value network which operation to
carry out, then running a query on task A with the codes that the same query computes on task B
should make the network carry out B's operation.

    with patch_latents(model, layer=1, codes=donor_codes, where=pairs):   # a[B, H, Tq, Tk] replaced
        logits = model(x)

`patch_latents` works for every mixer and whatever implementation `attention(implementation="auto")`
would pick: while a layer is patched it computes its output from the (patched) codes with the
reference formula of `hyla/ops/kernels/naive.py` (`attention_from_codes`). The experiments
(`fuzzy_logic_interventions`, `sraven_interventions`) and `hyla interventions RUN` measure how far
the prediction moves toward B's answer, against two controls: codes from a random other task, and
B's codes with their heads shuffled.
"""

from __future__ import annotations

import sys
import time
from collections.abc import Iterator, Sequence
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
from hyla.train.jsonio import portable_path, write_json

ALL_LAYERS = "all"
CONDITIONS = ("patched", "random_task", "shuffled_heads")
SITES = ("probe", "row")
SPLITS = ("valid", "ood")
MIN_TARGET_GAP = 0.1
"""fuzzy logic: a query counts only where A's and B's targets differ by at least this much"""
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
    has no third); only queries where A's and B's targets differ by MIN_TARGET_GAP. None: no pair."""
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
        (x_a, y_a), (x_b, y_b), (x_c, _) = (fuzzy_logic_sequences(t, inputs) for t in (tasks[a], tasks[b], c))
        keep = torch.nonzero((y_a - y_b).abs() >= MIN_TARGET_GAP)[:samples, 0]
        for name, value in (("x_a", x_a), ("x_b", x_b), ("x_c", x_c), ("y_a", y_a), ("y_b", y_b)):
            parts.setdefault(name, []).append(value[keep])
        parts.setdefault("pairs", []).append(
            {"a": tasks[a].tolist(), "b": tasks[b].tolist(), "random_task": c.tolist(), "sequences": len(keep)}
        )
    data = {name: torch.cat(values) for name, values in parts.items() if name != "pairs"}
    return {**data, "pairs": parts["pairs"]}


def transfer_scores(pred: torch.Tensor, y_a: torch.Tensor, y_b: torch.Tensor) -> dict[str, float]:
    """pred, y_a, y_b [N]: transfer = mse_A / (mse_A + mse_B) in [0, 1] (0: at A's targets, 1: at
    B's, 0.5: as far from both); projection = mean((pred - y_a)(y_b - y_a)) / mean((y_b - y_a)^2)
    (unclipped: 0 at A, 1 at B)."""
    pred, y_a, y_b = (t.double().reshape(-1).cpu() for t in (pred, y_a, y_b))
    mse_a, mse_b = (pred - y_a).square().mean().item(), (pred - y_b).square().mean().item()
    gap = y_b - y_a
    return {
        "transfer": mse_a / max(mse_a + mse_b, 1e-30),
        "mse_a": mse_a,
        "mse_b": mse_b,
        "projection": ((pred - y_a) * gap).mean().item() / max(gap.square().mean().item(), 1e-30),
    }


def fuzzy_logic_interventions(
    model, task, num_pairs: int = 16, samples: int = 32, seed: int = 0, batch_size: int = 512, stage=None
) -> dict:
    """The fuzzy-logic experiment (docs/interventions.md) on the splits `valid` (pairs of training
    tasks) and `ood` (pairs of held-out combinations): A's context, the query's codes from B's
    context (same inputs), per site, layer setting and condition: `transfer_scores`."""
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    results = {}
    for split in SPLITS:
        data = fuzzy_logic_pairs(task, split, num_pairs, samples, generator) if len(task.split_tasks(split)) else None
        if data is None:
            results[split] = {"num_pairs": 0, "num_sequences": 0}
            continue
        (stage or _quiet)(f"fuzzy logic {split}: {len(data['pairs'])} task pairs, {len(data['y_a'])} sequences")
        x_a, x_b, x_c = (data[name].to(device) for name in ("x_a", "x_b", "x_c"))
        score = lambda logits: transfer_scores(logits, data["y_a"], data["y_b"])  # noqa: E731
        (logits_a, _), (logits_b, codes_b), (_, codes_c) = (model_codes(model, x, batch_size) for x in (x_a, x_b, x_c))
        donors = {"patched": codes_b, "random_task": codes_c, "shuffled_heads": shuffle_heads(codes_b, generator)}
        T, N = task.seq_len, len(x_a)
        last = torch.full((N,), T - 1, device=device)
        wheres = {"probe": pair_mask(last, T, last[:, None]), "row": pair_mask(last, T)}
        reference = {
            "unpatched": score(logits_a),
            "donor_run": score(logits_b),
            "reference_formula": score(
                patched_logits(model, x_a, layer_settings(len(codes_b))["all layers"], None, None, batch_size)
            ),
        }
        results[split] = {
            "num_pairs": len(data["pairs"]),
            "num_sequences": N,
            "pairs": data["pairs"],
            "reference": reference,
            "sites": intervene(model, x_a, donors, wheres, score, batch_size),
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
        "implied_b": implied[keep, rule_b],
    }


def answer_scores(logits: torch.Tensor, data: dict) -> dict[str, float]:
    """logits [N, K, F] -> transfer: how often feature f's predicted value is one the donor's rule
    implies (`implied_b`); kept: how often it is still A's answer."""
    pred = logits.argmax(-1).cpu()[torch.arange(len(logits)), data["feature"]]  # [N]
    hit = (pred[:, None] == data["implied_b"]).any(1)
    return {"transfer": hit.double().mean().item(), "kept": (pred == data["target_a"]).double().mean().item()}


def sraven_interventions(model, task, count: int = 512, seed: int = 0, batch_size: int = 512, stage=None) -> dict:
    """The SRAVEN experiment (docs/interventions.md) on `valid_unpermuted` and `ood_unpermuted`:
    A's grid, the answer token of feature f patched with the donor's codes of that token, per site
    (probe: its codes to feature f in panels (2,0), (2,1); row: to every key), layer setting and
    condition: `answer_scores`."""
    device = next(model.parameters()).device
    generator = torch.Generator().manual_seed(seed)
    K, results = task.num_features, {}
    for split in SPLITS:
        data = sraven_pairs(task, split, count, seed, generator) if len(task.split_tasks(split)) else None
        if data is None:
            results[split] = {"num_sequences": 0}
            continue
        N, T = len(data["x_a"]), task.seq_len
        (stage or _quiet)(f"SRAVEN {split}: {N} grids")
        (logits_a, _), (_, codes_b), (_, codes_c) = (
            model_codes(model, data[x].to(device), batch_size) for x in ("x_a", "x_b", "x_c")
        )
        donors = {"patched": codes_b, "random_task": codes_c, "shuffled_heads": shuffle_heads(codes_b, generator)}
        query = (8 * K + data["feature"]).to(device)
        keys = torch.stack([6 * K + data["feature"], 7 * K + data["feature"]], 1).to(device)
        wheres = {"probe": pair_mask(query, T, keys), "row": pair_mask(query, T)}
        score = lambda logits: answer_scores(logits, data)  # noqa: E731
        rule_pairs, counts = torch.unique(torch.stack([data["rule_a"], data["rule_b"]], 1), dim=0, return_counts=True)
        results[split] = {
            "num_sequences": N,
            "rule_pairs": {f"{a}->{b}": n for (a, b), n in zip(rule_pairs.tolist(), counts.tolist())},
            "reference": {
                "unpatched": score(logits_a),
                "reference_formula": score(
                    patched_logits(model, data["x_a"].to(device), list(range(len(codes_b))), None, None, batch_size)
                ),
            },
            "sites": intervene(model, data["x_a"].to(device), donors, wheres, score, batch_size),
        }
    return results


# ============================================================================= figure, files, command
def interventions_figure(results: dict):
    """Bars of the transfer score per layer setting and condition; a panel per (site, split); the
    unpatched model (and, fuzzy logic, the donor's own run) as dashed lines."""
    from matplotlib.figure import Figure

    splits = [s for s in SPLITS if "sites" in results["splits"].get(s, {})]
    fig = Figure(figsize=(4.2 * max(len(splits), 1), 3.2 * len(SITES)))
    axes = fig.subplots(len(SITES), max(len(splits), 1), squeeze=False)
    for column, split in enumerate(splits):
        entry = results["splits"][split]
        for row, site in enumerate(SITES):
            ax, per_setting = axes[row, column], entry["sites"][site]
            settings = list(per_setting)
            width = 0.8 / len(CONDITIONS)
            for i, condition in enumerate(CONDITIONS):
                values = [per_setting[s][condition]["transfer"] for s in settings]
                ax.bar([j + (i - 1) * width for j in range(len(settings))], values, width, label=condition)
            for name, style in (("unpatched", "k--"), ("donor_run", "g:")):
                if name in entry["reference"]:
                    ax.axhline(entry["reference"][name]["transfer"], color=style[0], ls=style[1:], lw=1, label=name)
            ax.set_xticks(range(len(settings)), settings, fontsize=8)
            ax.set_ylim(0, 1)
            ax.set_title(f"{split}: {site} codes ({entry['num_sequences']} sequences)", fontsize=9)
            ax.set_ylabel("transfer score" if results["task"] == FUZZY_LOGIC else "donor-rule answers", fontsize=8)
    if splits:
        axes[0, -1].legend(fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.0, 1.0))
    fig.suptitle(f"latent-code interventions: {results['task']}", fontsize=10)
    return fig


def interventions(
    model,
    task,
    out_dir: str | Path | None = None,
    num_pairs: int = 16,
    samples: int = 32,
    seed: int = 0,
    batch_size: int = 512,
    progress: bool = True,
    metadata: dict | None = None,
) -> dict:
    """Both experiments' entry point: the results dict, and with `out_dir` the files
    `interventions_tasks{num_pairs}_samples{samples}_seed{seed}.json` / `.png` there.
    num_pairs: task pairs per split (fuzzy logic); SRAVEN uses num_pairs·samples grids per split."""
    from hyla.analysis.plots import save_figure

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
    results = {
        "task": kind,
        "conditions": list(CONDITIONS),
        "sites": list(SITES),
        "layer_settings": list(layer_settings(len(attention_layers(model)))),
        "options": {"tasks": num_pairs, "samples": samples, "seed": seed},
        "run": metadata or {},
        "splits": splits,
    }
    if out_dir is not None:
        stage("figure")
        stem = Path(out_dir) / f"interventions_tasks{num_pairs}_samples{samples}_seed{seed}"
        write_json(stem.with_suffix(".json"), results, indent=1)
        save_figure(interventions_figure(results), stem.with_suffix(".png"), tight=True)
        results["files"] = [str(stem.with_suffix(".json")), str(stem.with_suffix(".png"))]
    return results


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


@dataclass
class InterventionsOptions:
    """Latent-code interventions on a trained run: patch a query's codes with another task's, measure the transfer."""

    run: Positional[Path]
    """run folder (written by `hyla train`; fuzzy logic or SRAVEN)"""
    out: Annotated[Path | None, arg(help_behavior_hint="(default: RUN/interventions)")] = None
    """output folder; file names carry --tasks, --samples and --seed"""
    tasks: int = 16
    """task pairs per split (fuzzy logic); SRAVEN: tasks x samples grids per split"""
    samples: int = 32
    """sequences per task pair"""
    seed: int = 0
    batch_size: int = 512
    device: str = "cpu"
    """cpu | cuda | cuda:N | auto"""

    def __post_init__(self):
        check_positive(tasks=self.tasks, samples=self.samples, batch_size=self.batch_size)
        if self.seed < 0:
            raise ConfigError(f"--seed={self.seed} must be >= 0")


def main(argv: list[str]) -> int:
    """`hyla interventions RUN [--out DIR] [--tasks N] [--samples M] [--seed S]`"""
    from hyla.train import load_run_at_step  # train depends on the model; analysis only needs it here

    args = parse_options(InterventionsOptions, argv, "hyla interventions")
    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device
    cfg, model, task, step = load_run_at_step(args.run, task=(FUZZY_LOGIC, SRAVEN))
    metadata = {
        "path": portable_path(args.run),
        "task": cfg.task,
        "mixer": cfg.model.mixer,
        "seed": cfg.seed,
        "checkpoint_step": step,
    }
    results = interventions(
        model.to(device),
        task,
        args.out or Path(args.run) / "interventions",
        args.tasks,
        args.samples,
        args.seed,
        args.batch_size,
        metadata=metadata,
    )
    print(f"wrote {results['files'][0]} and {results['files'][1]}")
    return 0
