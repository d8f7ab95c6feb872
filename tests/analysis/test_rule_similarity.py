"""Paper Fig. 5E: the similarity of addition's and subtraction's mean codes and its permutation test
against the other rule pairs (hyla.analysis.measures.addition_subtraction), on SRAVEN codes built
so that the answer is known."""

import itertools

import numpy as np
import pytest

from hyla.analysis import figures
from hyla.analysis.measures import ADDITION, SUBTRACTION, label_similarity

RULES, FEATURES, LAYERS, HEADS = 8, 4, 2, 6


def sraven_codes(seed: int, shared: bool, samples: int = 400) -> dict:
    """Codes `[N, K, layers, 2, H]`: each rule its own random code plus noise; with `shared`,
    subtraction's code is addition's plus a little noise (they share a code)."""
    rng = np.random.default_rng(seed)
    rule_codes = rng.standard_normal((RULES, LAYERS, 2, HEADS))  # [R, layers, 2, H]
    if shared:
        rule_codes[SUBTRACTION] = rule_codes[ADDITION] + 0.1 * rng.standard_normal((LAYERS, 2, HEADS))
    rules = rng.integers(0, RULES, size=(samples, FEATURES))  # [N, K]
    codes = rule_codes[rules] + 0.5 * rng.standard_normal((samples, FEATURES, LAYERS, 2, HEADS))
    return {"codes": codes.astype(np.float32), "rules": rules, "task": np.array("sraven")}


def test_shared_codes_are_the_most_similar_pair_with_the_smallest_p_value():
    test = label_similarity(sraven_codes(0, shared=True))["all layers"]["addition_subtraction"]
    assert test["centered_cosine"] > 0.9 and test["rank_among_pairs"] == 1 and test["num_pairs"] == 28
    assert test["p_value"] == pytest.approx(1 / 28) and test["mean_of_pairs"] < 0
    assert test["most_similar_other_pair"] < test["centered_cosine"]


def test_shuffled_rules_give_p_values_spread_over_the_null():
    p_values = []
    for seed in range(20):
        data = sraven_codes(seed, shared=True)
        data["rules"] = np.random.default_rng(100 + seed).permutation(data["rules"].reshape(-1)).reshape(-1, FEATURES)
        p_values.append(label_similarity(data)["all layers"]["addition_subtraction"]["p_value"])
    assert 0.3 < np.mean(p_values) < 0.75  # uniform over 1/28 ... 28/28: mean 0.52
    assert sum(p < 0.05 for p in p_values) <= 3  # about 1 in 28 by chance


def test_p_value_is_the_exact_permutation_test_over_every_relabelling_of_the_rules():
    entry = label_similarity(sraven_codes(3, shared=False))["layer 1"]
    similarity, test = np.array(entry["centered_cosine"]), entry["addition_subtraction"]
    observed = similarity[ADDITION, SUBTRACTION]
    relabelled = np.array([similarity[p[ADDITION], p[SUBTRACTION]] for p in itertools.permutations(range(RULES))])
    assert test["p_value"] == pytest.approx(np.mean(relabelled >= observed - 1e-12))
    assert test["p_value"] == pytest.approx(test["rank_among_pairs"] / 28)  # no ties among random codes
    others = np.delete(relabelled, np.flatnonzero(np.isclose(relabelled, observed)))
    assert test["most_similar_other_pair"] == pytest.approx(others.max())


def test_the_figure_outlines_addition_and_subtraction_and_titles_the_test():
    similarity = {"valid": label_similarity(sraven_codes(0, shared=True))}
    fig = figures.rule_codes_figure({"valid": similarity["valid"]["all layers"]}, ["layer 0", "layer 1"], "t")
    codes_ax, matrix_ax = [ax for ax in fig.axes if ax.get_label() != "<colorbar>"]
    outlined = sorted((round(p.get_x() + 0.5), round(p.get_y() + 0.5)) for p in matrix_ax.patches)
    assert outlined == [(ADDITION, SUBTRACTION), (SUBTRACTION, ADDITION)]
    assert "rank 1 of 28 rule pairs, permutation p = 0.036" in matrix_ax.get_title()
    assert [t.get_text() for t in codes_ax.get_xticklabels()] == ["layer 0", "layer 1"]
    assert all(ax.get_xlabel() and ax.get_ylabel() for ax in (codes_ax, matrix_ax))
    assert all(ax.get_ylabel() for ax in fig.axes if ax.get_label() == "<colorbar>")
