"""Topographic similarity: ≈ 1 for an isometric code, ≈ 0 for a random one, with matching p-values."""

import numpy as np
from scipy.stats import spearmanr

from hyla.analysis.probes import random_stream
from hyla.analysis.topographic import (
    mantel_spearman,
    rule_hamming,
    rule_multiset,
    task_means,
    term_matching,
    topographic_similarity,
)


def _rule_tasks(rng, num_tasks=60, num_features=4, num_rules=8, samples_per_task=5):
    tasks = rng.integers(0, num_rules, size=(num_tasks, num_features))
    return np.repeat(tasks, samples_per_task, axis=0)


def test_isometric_code_scores_one_and_random_code_scores_zero():
    rng = np.random.default_rng(0)
    rules = _rule_tasks(rng)
    # one-hot rule per feature: squared Euclidean distance = 2 * Hamming distance of the rules
    isometric = np.eye(8)[rules].reshape(len(rules), -1)
    planted = topographic_similarity(isometric, rules, "rule_hamming", num_permutations=1000)
    assert planted["spearman"] > 0.999
    assert planted["p_value"] <= 2 / 1001
    assert planted["num_tasks"] == len(np.unique(rules, axis=0))
    # noise breaks the ties of the code distances, so the rank correlation drops below 1
    noisy = topographic_similarity(isometric + 0.1 * rng.normal(size=isometric.shape), rules, "rule_hamming")
    assert noisy["spearman"] > 0.7 and noisy["p_value"] <= 2 / 1001

    random = topographic_similarity(rng.normal(size=(len(rules), 32)), rules, "rule_hamming", num_permutations=1000)
    assert abs(random["spearman"]) < 0.1
    assert random["p_value"] > 0.05


def test_mantel_statistic_is_spearman_and_p_value_matches_a_loop():
    rng = np.random.default_rng(1)
    points = rng.normal(size=(25, 3))
    task_distance = np.abs(points[:, None, 0] - points[None, :, 0]).round(1)  # with ties
    code_distance = np.linalg.norm(points[:, None] - points[None], axis=-1)
    rows, cols = np.triu_indices(25, k=1)
    rho, p_value = mantel_spearman(task_distance, code_distance, num_permutations=300, seed=3)
    assert np.isclose(rho, spearmanr(task_distance[rows, cols], code_distance[rows, cols])[0])

    # the same permutations, one scipy call each (the vectorized version must agree)
    perm_rng = random_stream(3, "mantel permutations")
    exceed = 0
    for start in range(0, 300, 64):
        for perm in np.argsort(perm_rng.random((min(64, 300 - start), 25)), axis=1):
            permuted = task_distance[perm][:, perm]
            exceed += spearmanr(permuted[rows, cols], code_distance[rows, cols])[0] >= rho - 1e-12
    assert np.isclose(p_value, (1 + exceed) / 301)


def test_task_distances():
    rules = np.array([[0, 1, 2], [0, 1, 3], [5, 6, 7]])
    assert rule_hamming(rules).tolist() == [[0, 1, 3], [1, 0, 3], [3, 3, 0]]
    multisets = np.array([[0, 1, 1], [1, 0, 1], [1, 1, 2], [2, 2, 2]])
    assert rule_multiset(multisets).tolist() == [[0, 0, 1, 3], [0, 0, 1, 3], [1, 1, 0, 2], [3, 3, 2, 0]]
    # tasks are sets of terms: the order of the terms must not matter
    a = np.array([[0, 0, 1], [1, 1, 1]])
    b = np.array([[1, 1, 1], [0, 0, 0]])  # = a's terms swapped, second term one bit off
    distances = term_matching(np.stack([a, b, a[::-1]]))
    assert distances[0, 1] == 1 and distances[0, 2] == 0 and distances[1, 2] == 1


def test_task_means_groups_by_identity():
    codes = np.array([[1.0], [3.0], [10.0]])
    identities = np.array([[0, 1], [0, 1], [2, 2]])
    unique, means, counts = task_means(codes, identities)
    assert unique.tolist() == [[0, 1], [2, 2]]
    assert means[:, 0].tolist() == [2.0, 10.0] and counts.tolist() == [2, 1]


def test_rule_multisets_merge_orderings_and_pooled_rule_codes_score_high():
    rng = np.random.default_rng(4)
    multisets = np.sort(rng.integers(0, 8, size=(40, 4)), axis=1)
    rules = multisets[rng.integers(0, 40, size=400)]
    rules = np.take_along_axis(rules, rng.random(rules.shape).argsort(1), axis=1)  # random feature order
    pooled = np.eye(8)[rules].mean(1)  # mean of one-hot feature codes: no label used, order-free
    result = topographic_similarity(pooled, rules, "rule_multiset", num_permutations=500)
    assert result["num_tasks"] == len(np.unique(np.sort(rules, 1), axis=0))
    assert result["spearman"] > 0.8 and result["p_value"] <= 2 / 501
