"""Topographic similarity: do tasks that are close in their composition get close latent codes?

Samples are grouped by task identity (their full rule / term assignment); each task gets its
mean code; the score is the Spearman correlation between the pairwise task distances and the
pairwise Euclidean distances of the mean codes, over all pairs of tasks. Its p-value comes from
a permutation test that shuffles which task each mean code belongs to (the Mantel test),
one-sided (H1: positive correlation), vectorized over permutations.

Task distances:
- SRAVEN (`rule_multiset`, the default): a task is a MULTISET of K rules (docs/tasks.md; which feature
  gets which rule is drawn per sample), and the distance is the number of rules that must be
  replaced to turn one multiset into the other, `K - |A ∩ B|`. The matching code of a sample is
  the mean of its K feature codes: pooling makes it order-free without looking at any label (a
  code arranged by the true rules would correlate with the task distance whatever it contains).
- SRAVEN (`rule_hamming`): for ordered rule vectors `[K]` (features in underlying order), the
  number of features whose rule differs. Few samples share an ordered assignment (8^4 of them
  for K = 4), so per-task means are mostly single samples.
- Fuzzy logic (`term_matching`): the least total Hamming distance between the literal bits of
  the two tasks' terms over all one-to-one matchings of their K terms (tasks are SETS of terms,
  so the term order must not matter): 0 iff the tasks are equal, L·K at most.
"""

from __future__ import annotations

import itertools

import numpy as np
from scipy.stats import rankdata

from hyla.analysis.probes import random_stream


def rule_hamming(identities: np.ndarray) -> np.ndarray:
    """identities `[M, K]` rule vectors -> distances `[M, M]`."""
    return (identities[:, None, :] != identities[None, :, :]).sum(-1).astype(np.float64)


def rule_multiset(identities: np.ndarray) -> np.ndarray:
    """identities `[M, K]` rule vectors (order ignored) -> `K - |A ∩ B|` `[M, M]`."""
    num_rules = int(identities.max()) + 1
    counts = np.stack([(identities == r).sum(1) for r in range(num_rules)], axis=1)  # [M, R]
    overlap = np.minimum(counts[:, None], counts[None]).sum(-1)
    return (identities.shape[1] - overlap).astype(np.float64)


def term_matching(identities: np.ndarray) -> np.ndarray:
    """identities `[M, K, L]` term bits -> least matched Hamming distance `[M, M]`."""
    K = identities.shape[1]
    # bits[i, j, a, b] = Hamming(term a of task i, term b of task j)
    bits = (identities[:, None, :, None, :] != identities[None, :, None, :, :]).sum(-1)
    best = None
    for matching in itertools.permutations(range(K)):
        total = bits[:, :, np.arange(K), list(matching)].sum(-1)
        best = total if best is None else np.minimum(best, total)
    return best.astype(np.float64)


TASK_DISTANCES = {"rule_multiset": rule_multiset, "rule_hamming": rule_hamming, "term_matching": term_matching}


def task_means(codes: np.ndarray, identities: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Group samples by identity. codes `[N, D]`, identities `[N, ...]` ->
    (unique identities `[M, ...]`, mean codes `[M, D]`, samples per task `[M]`)."""
    flat = identities.reshape(len(identities), -1)
    unique, inverse, counts = np.unique(flat, axis=0, return_inverse=True, return_counts=True)
    inverse = inverse.reshape(-1)
    sums = np.zeros((len(unique), codes.shape[1]))
    np.add.at(sums, inverse, codes)
    return unique.reshape((-1,) + identities.shape[1:]), sums / counts[:, None], counts


def mantel_spearman(
    task_distance: np.ndarray, code_distance: np.ndarray, num_permutations: int = 1000, seed: int = 0, chunk: int = 64
) -> tuple[float, float]:
    """Spearman correlation between the upper triangles of two `[M, M]` distance matrices and
    its one-sided permutation p-value `(1 + #{rho_perm >= rho}) / (1 + P)`.

    Vectorized: permuting the tasks only re-indexes the pairs, so the ranks of the permuted task
    distances are the original ranks re-indexed, and each permuted correlation is one dot
    product with the (fixed) standardized code-distance ranks.
    """
    M = len(task_distance)
    rows, cols = np.triu_indices(M, k=1)
    code_ranks = rankdata(code_distance[rows, cols])
    task_ranks = np.zeros((M, M))
    task_ranks[rows, cols] = rankdata(task_distance[rows, cols])
    task_ranks = task_ranks + task_ranks.T
    code_z = (code_ranks - code_ranks.mean()) / (code_ranks.std() + 1e-300)
    task_values = task_ranks[rows, cols]
    task_mean, task_std = task_values.mean(), task_values.std()
    if task_std == 0 or code_ranks.std() == 0:
        return float("nan"), float("nan")
    rho = float(code_z @ (task_values - task_mean) / (len(rows) * task_std))
    rng = random_stream(seed, "mantel permutations")
    exceed = 0
    for start in range(0, num_permutations, chunk):
        perms = np.argsort(rng.random((min(chunk, num_permutations - start), M)), axis=1)  # [P, M]
        permuted = task_ranks[perms[:, rows], perms[:, cols]]  # [P, pairs]
        rho_perm = (permuted - task_mean) @ code_z / (len(rows) * task_std)
        exceed += int(np.sum(rho_perm >= rho - 1e-12))
    return rho, (1 + exceed) / (1 + num_permutations)


def topographic_similarity(
    codes: np.ndarray,
    identities: np.ndarray,
    distance: str,
    num_permutations: int = 1000,
    max_tasks: int = 400,
    seed: int = 0,
) -> dict:
    """codes `[N, D]`, identities `[N, ...]` (rule vectors `[N, K]` or term bits `[N, K, L]`),
    distance in `TASK_DISTANCES`. Samples with equal identities form one task (for
    `rule_multiset`, identities are sorted first so that orderings of a multiset are one task).
    At most `max_tasks` tasks (a seeded random subset, to bound the pairs) enter. Returns
    `spearman`, `p_value`, `num_tasks`, `num_pairs`, `samples_per_task` (mean)."""
    if distance == "rule_multiset":
        identities = np.sort(identities, axis=1)
    unique, means, counts = task_means(codes, identities)
    if len(unique) > max_tasks:
        keep = np.sort(random_stream(seed, "task subset").choice(len(unique), max_tasks, replace=False))
        unique, means, counts = unique[keep], means[keep], counts[keep]
    M = len(unique)
    result = {
        "num_tasks": int(M),
        "num_pairs": int(M * (M - 1) // 2),
        "samples_per_task": float(counts.mean()) if M else 0.0,
        "distance": distance,
        "num_permutations": int(num_permutations),
    }
    if M < 3:
        return {**result, "spearman": float("nan"), "p_value": float("nan")}
    code_distance = np.sqrt(((means[:, None] - means[None]) ** 2).sum(-1))
    rho, p_value = mantel_spearman(TASK_DISTANCES[distance](unique), code_distance, num_permutations, seed)
    return {**result, "spearman": rho, "p_value": p_value}
