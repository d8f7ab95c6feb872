"""What `analyze` measures on the latent codes it collected: the code sets (per layer and all
layers), the probes that decode the task from them, their topographic similarity, and the
similarity of the mean codes per rule (SRAVEN) or per term (fuzzy logic)."""

from __future__ import annotations

import numpy as np

from hyla.analysis import figures
from hyla.analysis.collect import FUZZY_LOGIC, SRAVEN
from hyla.analysis.probes import logistic_classification_probe, logistic_f1_per_label, random_stream, ridge_probe
from hyla.analysis.topographic import topographic_similarity

SUFFIXES = {FUZZY_LOGIC: ("_fixed_query", "", "_fixed_context"), SRAVEN: ("_unpermuted", "")}
ADDITION, SUBTRACTION = 5, 6


def no_tick() -> None:
    """The default progress `tick`."""


# ----------------------------------------------------------------------------- code sets
def code_sets(data: dict[str, np.ndarray], feature: int | None = None) -> dict[str, np.ndarray]:
    """Probe inputs per layer and for all layers concatenated.

    Fuzzy logic: `[N, H]` per layer, `[N, layers·H]` for all. SRAVEN: one row per (sample,
    feature) — `[N·K, 2H]` per layer (codes towards panels (2,0) and (2,1)), `[N·K, layers·2H]`
    for all — or only feature `feature` (`[N, ...]`; the paper used the last one).
    """
    codes = data["codes"]
    if str(data["task"]) == SRAVEN:
        if feature is not None:
            codes = codes[:, feature : feature + 1]
        codes = codes.reshape((-1,) + codes.shape[2:])  # [N·K, layers, 2, H]
    sets = {f"layer {layer}": codes[:, layer].reshape(len(codes), -1) for layer in range(codes.shape[1])}
    sets["all layers"] = codes.reshape(len(codes), -1)
    return sets


def per_feature(values: np.ndarray, feature: int | None = None) -> np.ndarray:
    """`[N, K]` per-feature values -> rows matching `code_sets` of SRAVEN."""
    return (values if feature is None else values[:, feature : feature + 1]).reshape(-1)


def term_membership(data: dict[str, np.ndarray]) -> np.ndarray:
    """`[N, 2^L]` in {0, 1}: which terms make up each sample's task."""
    num_terms_total = 2 ** data["terms"].shape[2]
    membership = np.zeros((len(data["term_indices"]), num_terms_total), dtype=np.int64)
    np.put_along_axis(membership, data["term_indices"], 1, axis=1)
    return membership


# ----------------------------------------------------------------------------- probes
def probe_pairs(data: dict[str, dict], kind: str) -> list[tuple[str, str]]:
    return [(f"valid{s}", f"ood{s}") for s in SUFFIXES[kind] if f"valid{s}" in data and f"ood{s}" in data]


def fuzzy_logic_probes(train: dict, test: dict, seed: int = 0, tick=no_tick) -> dict:
    """Per code set: ridge R² to the K·L term bits, in distribution (the training split halved,
    as the authors' callback) and transferred to held-out tasks; per-term logistic F1 trained on
    training tasks and tested on held-out tasks. Each with its chance level."""
    results = {}
    train_sets, test_sets = code_sets(train), code_sets(test)
    bits_train = train["terms"].reshape(len(train["terms"]), -1)
    bits_test = test["terms"].reshape(len(test["terms"]), -1)
    # a random half, not the first half: fixed-context/-query inputs are drawn per batch, and both
    # halves should see the same mix of them
    order = random_stream(seed, "in-distribution halves").permutation(len(bits_train))
    fit, held = order[: len(order) // 2], order[len(order) // 2 :]
    for name, x_train in train_sets.items():
        x_test = test_sets[name]
        results[name] = {
            "ridge_term_bits_in_distribution": ridge_probe(
                x_train[fit], bits_train[fit], x_train[held], bits_train[held], seed=seed
            ),
            "ridge_term_bits_held_out": ridge_probe(x_train, bits_train, x_test, bits_test, seed=seed),
            "term_f1_held_out": logistic_f1_per_label(
                x_train, term_membership(train), x_test, term_membership(test), seed=seed
            ),
        }
        tick()
    return results


def sraven_probes(train: dict, test: dict, feature: int | None = None, seed: int = 0, tick=no_tick) -> dict:
    """Per code set: logistic decoding of a feature's rule, trained on `train` tasks and tested
    on `test` tasks, with its chance level and the majority baseline."""
    train_sets, test_sets = code_sets(train, feature), code_sets(test, feature)
    y_train, y_test = per_feature(train["rules"], feature), per_feature(test["rules"], feature)
    results = {}
    for name, x in train_sets.items():
        results[name] = logistic_classification_probe(x, y_train, test_sets[name], y_test, seed=seed)
        tick()
    return results


def run_probes(data: dict[str, dict], kind: str, seed: int = 0, feature: int | None = None, tick=no_tick) -> dict:
    """Probes for every (valid<suffix>, ood<suffix>) pair; `feature`: SRAVEN only, probe that
    underlying feature alone (the paper: the last) instead of all K; `tick()` after each code set."""
    results = {}
    for train_split, test_split in probe_pairs(data, kind):
        train, test = data[train_split], data[test_split]
        results[f"{train_split}->{test_split}"] = (
            fuzzy_logic_probes(train, test, seed, tick)
            if kind == FUZZY_LOGIC
            else sraven_probes(train, test, feature, seed, tick)
        )
    return results


# ----------------------------------------------------------------------------- structure
def topographic(data: dict, num_permutations: int = 1000, seed: int = 0, tick=no_tick) -> dict:
    """Per code set of one split (see `hyla.analysis.topographic`). SRAVEN: a task is a rule
    multiset and a sample's code is the mean of its K feature codes."""
    if str(data["task"]) == SRAVEN:
        codes = data["codes"].mean(1)  # [N, layers, 2, H]
        sets = {f"layer {layer}": codes[:, layer].reshape(len(codes), -1) for layer in range(codes.shape[1])}
        sets["all layers"] = codes.reshape(len(codes), -1)
        identities, distance = data["rules"], "rule_multiset"
    else:
        sets, identities, distance = code_sets(data), data["terms"], "term_matching"
    results = {}
    for name, codes in sets.items():
        results[name] = topographic_similarity(codes, identities, distance, num_permutations, seed=seed)
        tick()
    return results


def mean_codes(codes: np.ndarray, labels: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Mean code per label. codes `[N, D]`; labels `[N]` (classes) or `[N, M]` in {0, 1}
    (multi-label: mean over the samples carrying each label). -> (labels present, means)."""
    if labels.ndim == 1:
        present = np.unique(labels)
        return present, np.stack([codes[labels == c].mean(0) for c in present])
    present = np.flatnonzero(labels.sum(0) > 0)
    return present, np.stack([codes[labels[:, c] == 1].mean(0) for c in present])


def cosine_matrix(means: np.ndarray, centered: bool) -> np.ndarray:
    """Cosine similarity between rows; `centered` subtracts the mean over rows first, so the
    code component shared by every label does not make all labels look alike."""
    if centered:
        means = means - means.mean(0, keepdims=True)
    unit = means / (np.linalg.norm(means, axis=1, keepdims=True) + 1e-12)
    return unit @ unit.T


def label_similarity(data: dict) -> dict:
    """Per code set: mean code per rule (SRAVEN) / per term (fuzzy logic) and the cosine
    similarity matrices, raw and centered, and whether the codes are constant (then the cosines
    are those of rounding noise: figures show no matrix). SRAVEN also gets the addition-vs-
    subtraction claim (paper Fig. 5E): their centered cosine, the rank of that pair among all rule
    pairs and its permutation p-value (`addition_subtraction`; not for constant codes)."""
    kind = str(data["task"])
    labels = per_feature(data["rules"]) if kind == SRAVEN else term_membership(data)
    results = {}
    for name, codes in code_sets(data).items():
        present, means = mean_codes(codes, labels)
        raw, centered = cosine_matrix(means, False), cosine_matrix(means, True)
        constant = figures.is_constant(codes)
        entry = {
            "labels": present.tolist(),
            "mean_codes": means.tolist(),
            "cosine": raw.tolist(),
            "centered_cosine": centered.tolist(),
            "constant_codes": constant,
        }
        index = {int(label): i for i, label in enumerate(present)}
        if kind == SRAVEN and ADDITION in index and SUBTRACTION in index and not constant:
            entry["addition_subtraction"] = addition_subtraction(present, raw, centered, index)
        results[name] = entry
    return results


def addition_subtraction(present: np.ndarray, raw: np.ndarray, centered: np.ndarray, index: dict) -> dict:
    """Paper Fig. 5E, "addition and subtraction share similar codes": the centered cosine of their
    mean codes, its rank among all rule pairs, and a permutation test of it against the other pairs.

    The test permutes the rule names: under H0 the names "addition" and "subtraction" are as good as
    any other two, so a random relabelling of the R rules (all R! equally likely) sends the pair to
    each of the R(R-1)/2 unordered pairs with the same probability. Its null distribution is thus
    exactly the similarities of all pairs (no sampling, no seed), and the one-sided p-value is the
    share of pairs at least as similar as (addition, subtraction): rank / pairs, 1/28 at best for 8
    rules (one similarity matrix cannot say more). Shuffling rule labels across samples would test
    instead whether the codes carry the rule at all (the probes do): its null sits at the
    similarity of rule-free codes, about -1/(R-1), which any pair of a rule-coding model may beat.
    """
    a, s = index[ADDITION], index[SUBTRACTION]
    rows, cols = np.triu_indices(len(present), k=1)
    upper = centered[rows, cols]  # [R(R-1)/2]: every rule pair once
    others = upper[(rows != min(a, s)) | (cols != max(a, s))]
    nearest = centered[a].copy()
    nearest[a] = -np.inf
    observed = centered[a, s]
    return {
        "rules": [ADDITION, SUBTRACTION],
        "cosine": float(raw[a, s]),
        "centered_cosine": float(observed),
        "rank_among_pairs": int(1 + np.sum(upper > observed)),
        "num_pairs": int(len(upper)),
        "p_value": float(np.mean(upper >= observed - 1e-12)),
        "mean_of_pairs": float(upper.mean()),
        "most_similar_other_pair": float(others.max()),
        "nearest_rule_to_addition": int(present[np.argmax(nearest)]),
    }
