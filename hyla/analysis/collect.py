"""Collect latent codes (docs/math.md) of a trained model at the probe positions of docs/tasks.md.

The latent code of the pair (q, k) is `z_qk = a[b, :, q, k]` in R^H, the normalized attention
scores read across heads (`Transformer.forward(x, return_latents=True)`, eval mode, so no
dropout).

Fuzzy logic: the code of the last token (the query) attending to itself, in every layer:
`codes [N, num_layers, H]`.

SRAVEN: the code of each answer (query) token attending to the tokens that show the SAME
underlying feature in the first two panels of the last row, in every layer:
`codes [N, K, num_layers, 2, H]`, indexed by the underlying (unpermuted) feature f and the
column c in {0, 1} of the key panel. Token layout: panel p = 3r + c (row-major, 8 context
panels) holds its K shown features at positions p·K + j; the answer panel's query tokens are
8K + j. With the feature permutation (docs/tasks.md) the shown position j of column c holds feature
`perm[b, c, j]`, so feature f sits at position `inverse_perm[b, c, f]` of column c: query token
`8K + inverse_perm[b, 2, f]` attends to keys `6K + inverse_perm[b, 0, f]` and
`7K + inverse_perm[b, 1, f]`. On `*_unpermuted` splits (the paper's choice for this analysis)
every permutation is the identity and this is simply query j -> keys 6K + j, 7K + j. The label
of feature f is `rules[b, f]`. Every per-feature array (codes, rules, targets, predictions) is
stored in underlying feature order; `query_positions [N, K]` gives the shown position of f.
The paper's callback used only the last feature (wlog); we keep all K.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import torch
from tqdm.auto import tqdm

FUZZY_LOGIC = "fuzzy_logic"
SRAVEN = "sraven"


def task_kind(task) -> str:
    """'fuzzy_logic' or 'sraven', from the task's `name` (or its info fields as a fallback)."""
    name = getattr(task, "name", "").lower()
    if "fuzzy" in name or "logic" in name:
        return FUZZY_LOGIC
    if "raven" in name:
        return SRAVEN
    raise ValueError(f"latent analysis supports fuzzy logic and SRAVEN tasks, got {name!r}")


def fuzzy_logic_codes(latents: list[torch.Tensor]) -> torch.Tensor:
    """Code of the last token attending to itself.

    latents: per layer `[B, H, T, T]` -> `[B, num_layers, H]`.
    """
    return torch.stack([a[:, :, -1, -1] for a in latents], dim=1)


def inverse_permutation(perm: torch.Tensor) -> torch.Tensor:
    """`inv[..., perm[..., j]] = j` for permutations along the last axis."""
    positions = torch.arange(perm.shape[-1], device=perm.device).expand_as(perm)
    return torch.empty_like(perm).scatter_(-1, perm, positions)


def sraven_positions(perm: torch.Tensor, num_features: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Token indices of SRAVEN's probe pairs, in underlying feature order.

    perm: `[B, 3, K]` column permutations (`panels[b,r,c,j] = unpermuted[b,r,c,perm[b,c,j]]`).
    Returns query `[B, K]` (answer token showing feature f) and keys `[B, K, 2]` (tokens showing
    feature f in panels (2, 0) and (2, 1)).
    """
    K = num_features
    shown = inverse_permutation(perm)  # [B, 3, K]: shown position of feature f in column c
    query = 8 * K + shown[:, 2]  # [B, K]
    keys = torch.stack([6 * K + shown[:, 0], 7 * K + shown[:, 1]], dim=-1)  # [B, K, 2]
    return query, keys


def sraven_codes(latents: list[torch.Tensor], perm: torch.Tensor, num_features: int) -> torch.Tensor:
    """latents: per layer `[B, H, T, T]`; perm `[B, 3, K]` -> codes `[B, K, num_layers, 2, H]`."""
    query, keys = sraven_positions(perm, num_features)
    batch = torch.arange(perm.shape[0], device=perm.device)[:, None, None]  # [B, 1, 1]
    per_layer = []
    for a in latents:
        a = a.permute(0, 2, 3, 1)  # [B, T, T, H]
        per_layer.append(a[batch, query[:, :, None], keys])  # [B, K, 2, H]
    return torch.stack(per_layer, dim=2)


@torch.no_grad()
def collect_latents(
    model: torch.nn.Module,
    task,
    split: str,
    num_samples: int = 4096,
    batch_size: int = 512,
    progress: bool = True,
    tick=None,
) -> dict[str, np.ndarray]:
    """Run `model` on `num_samples` sequences of `split` and return the codes with task
    identities, targets, predictions and per-sample metrics (numpy). `progress`: a tqdm bar;
    `tick()`: called after each chunk of `batch_size` sequences.

    The sequences are ONE task batch (step 0), run through the model in chunks of `batch_size`:
    on `*_fixed_context` / `*_fixed_query` splits every sample then shares the same context /
    query (they are drawn per batch), as "fixed" means.

    Fuzzy logic: `codes [N, layers, H]`, `terms [N, K, L]`, `term_indices [N, K]`,
    `targets [N]`, `predictions [N]` (+ `task_index [N]` when the task provides it).
    SRAVEN: `codes [N, K, layers, 2, H]`, `rules [N, K]`, `perm [N, 3, K]`,
    `query_positions [N, K]`, `targets [N, K]`, `predictions [N, K]` (feature order).
    Both: `metric_<name> [N]` for every per-sequence metric of `task.metrics`, and the 0-d
    strings `task` and `split`.
    """
    kind = task_kind(task)
    device = next(model.parameters()).device
    was_training = model.training
    model.eval()
    parts: dict[str, list[np.ndarray]] = {}
    everything = task.batch(split, num_samples, 0)
    try:
        for start in tqdm(
            range(0, num_samples, batch_size), desc=f"latents {split}", disable=not progress, leave=False
        ):
            batch = everything.rows(start, start + batch_size)
            logits, latents = model(batch.x.to(device), return_latents=True)
            latents = [a.float() for a in latents]
            fields = (_fuzzy_fields if kind == FUZZY_LOGIC else _sraven_fields)(logits, latents, batch)
            if hasattr(task, "metrics"):
                for name, value in task.metrics(logits, batch.to(device)).items():
                    fields[f"metric_{name}"] = value
            for name, value in fields.items():
                parts.setdefault(name, []).append(value.detach().cpu().numpy())
            if tick is not None:
                tick()
    finally:
        model.train(was_training)
    data = {name: np.concatenate(values) for name, values in parts.items()}
    data["task"], data["split"] = np.array(kind), np.array(split)
    return data


def _fuzzy_fields(logits, latents, batch) -> dict[str, torch.Tensor]:
    info = batch.info
    fields = {
        "codes": fuzzy_logic_codes(latents),
        "terms": info["terms"],
        "term_indices": info["term_indices"],
        "targets": batch.y.reshape(-1),
        "predictions": logits.float().reshape(-1),
    }
    if "task_index" in info:
        fields["task_index"] = info["task_index"]
    return fields


def _sraven_fields(logits, latents, batch) -> dict[str, torch.Tensor]:
    rules = batch.info["rules"]  # [B, K], unpermuted order
    K = rules.shape[1]
    perm = batch.info.get("perm")
    if perm is None:  # a task without permutation information shows features unpermuted
        perm = torch.arange(K).expand(rules.shape[0], 3, K)
    perm = perm.to(latents[0].device)
    query, _ = sraven_positions(perm, K)
    shown = (query - 8 * K).cpu()  # [B, K]: answer position of feature f
    return {
        "codes": sraven_codes(latents, perm, K),
        "rules": rules,
        "perm": perm,
        "query_positions": shown,
        "targets": batch.y.cpu().gather(1, shown),
        "predictions": logits.argmax(-1).cpu().gather(1, shown),
    }


def save_latents(path: str | Path, data: dict[str, np.ndarray]) -> Path:
    """Write collected codes to a compressed npz file."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(path, **data)
    return path


def load_latents(path: str | Path) -> dict[str, np.ndarray]:
    with np.load(path) as archive:
        return {name: archive[name] for name in archive.files}
