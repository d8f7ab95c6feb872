"""Linear probes on latent codes, each with its chance level beside it.

Chance is the SAME probe fitted on training labels shuffled across samples (so any relation
between codes and labels is destroyed while the label distribution is kept) and scored on the
real test labels. Classification probes also report the majority-class baseline; per-label F1
probes also report the F1 of always answering "present" (`2p / (1 + p)` for prevalence p),
the best F1 a probe that ignores its input can reach.

Features are standardized (fitted on the training set) before every probe, so one
regularization strength fits codes of any scale.
"""

from __future__ import annotations

import warnings
import zlib

import numpy as np
from sklearn.exceptions import ConvergenceWarning
from sklearn.linear_model import LogisticRegression, Ridge
from sklearn.metrics import accuracy_score, f1_score
from sklearn.pipeline import make_pipeline
from sklearn.preprocessing import StandardScaler


def random_stream(seed: int, purpose: str) -> np.random.Generator:
    """An independent generator per (seed, purpose). Generators seeded alike are NOT independent
    across sizes: `default_rng(0).permutation(600)[:300]` and `default_rng(0).permutation(300)`
    draw from the same raw stream, which once gave a shuffled-label probe a spurious R² > 0."""
    return np.random.default_rng([seed, zlib.crc32(purpose.encode())])


def _shuffled(labels: np.ndarray, seed: int, purpose: str = "shuffle") -> np.ndarray:
    return labels[random_stream(seed, purpose).permutation(len(labels))]


def multioutput_r2(y_true: np.ndarray, y_pred: np.ndarray) -> float:
    """R² averaged over outputs with nonzero test variance (a constant output has no R²)."""
    y_true, y_pred = y_true.reshape(len(y_true), -1), y_pred.reshape(len(y_pred), -1)
    variance = y_true.var(axis=0)
    keep = variance > 1e-12
    if not keep.any():
        return float("nan")
    residual = ((y_true - y_pred) ** 2).mean(axis=0)
    return float(np.mean(1.0 - residual[keep] / variance[keep]))


def ridge_probe(
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, alpha: float = 1.0, seed: int = 0
) -> dict[str, float]:
    """Multi-output ridge regression codes -> targets.

    x `[N, D]`, y `[N, M]` (or `[N]`). Returns `r2` (test R² averaged over outputs) and
    `chance` (same probe on shuffled training targets).
    """

    def fit_score(labels):
        probe = make_pipeline(StandardScaler(), Ridge(alpha=alpha)).fit(x_train, labels)
        return multioutput_r2(y_test, probe.predict(x_test))

    y_train = y_train.reshape(len(y_train), -1).astype(np.float64)
    y_test = y_test.reshape(len(y_test), -1).astype(np.float64)
    return {"r2": fit_score(y_train), "chance": fit_score(_shuffled(y_train, seed))}


def _logistic(max_iter: int = 1000, C: float = 1.0, class_weight: str | None = None):
    return make_pipeline(StandardScaler(), LogisticRegression(C=C, max_iter=max_iter, class_weight=class_weight))


def _fit(probe, x, y):
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", ConvergenceWarning)
        return probe.fit(x, y)


def logistic_f1_per_label(
    x_train: np.ndarray,
    labels_train: np.ndarray,
    x_test: np.ndarray,
    labels_test: np.ndarray,
    names: list | None = None,
    C: float = 1.0,
    seed: int = 0,
) -> dict:
    """One binary logistic probe per label column (e.g. "term t is part of the task").

    labels `[N, M]` in {0, 1}. Classes are weighted by inverse frequency: a term is part of few
    tasks, and an unweighted probe would rather answer "absent" everywhere (F1 = 0) than learn
    it. A column is probed only if it has both classes in the training
    set and at least one positive in the test set. Returns per-label `f1`, `chance`
    (shuffled training labels) and `always_positive`, and their means over probed labels.
    """
    names = list(range(labels_train.shape[1])) if names is None else list(names)
    per_label = {}
    for column, name in enumerate(names):
        train, test = labels_train[:, column], labels_test[:, column]
        if len(np.unique(train)) < 2 or test.sum() == 0:
            continue
        scores = {}
        for what, fit_labels in (("f1", train), ("chance", _shuffled(train, seed, f"shuffle label {column}"))):
            probe = _fit(_logistic(C=C, class_weight="balanced"), x_train, fit_labels)
            scores[what] = float(f1_score(test, probe.predict(x_test), zero_division=0.0))
        prevalence = float(test.mean())
        scores["always_positive"] = 2 * prevalence / (1 + prevalence)
        per_label[str(name)] = scores
    mean = {
        key: float(np.mean([s[key] for s in per_label.values()])) if per_label else float("nan")
        for key in ("f1", "chance", "always_positive")
    }
    return {"per_label": per_label, **{f"mean_{key}": value for key, value in mean.items()}}


def logistic_classification_probe(
    x_train: np.ndarray, y_train: np.ndarray, x_test: np.ndarray, y_test: np.ndarray, C: float = 1.0, seed: int = 0
) -> dict:
    """Multinomial logistic probe codes -> class.

    Returns test `accuracy` and `macro_f1`, their shuffled-label `chance_*` counterparts, the
    `majority` baseline (accuracy of the most frequent training class on the test set), and the
    per-class `confusion` (rows: true class, over the union of classes seen).
    """
    probe = _fit(_logistic(C=C), x_train, y_train)
    predicted = probe.predict(x_test)
    chance = _fit(_logistic(C=C), x_train, _shuffled(y_train, seed)).predict(x_test)
    classes, counts = np.unique(y_train, return_counts=True)
    majority = classes[np.argmax(counts)]
    labels = np.union1d(classes, np.unique(y_test))
    index = {label: i for i, label in enumerate(labels)}
    confusion = np.zeros((len(labels), len(labels)), dtype=int)
    np.add.at(confusion, ([index[v] for v in y_test], [index[v] for v in predicted]), 1)
    return {
        "accuracy": float(accuracy_score(y_test, predicted)),
        "macro_f1": float(f1_score(y_test, predicted, average="macro", zero_division=0.0)),
        "chance_accuracy": float(accuracy_score(y_test, chance)),
        "chance_macro_f1": float(f1_score(y_test, chance, average="macro", zero_division=0.0)),
        "majority": float(np.mean(y_test == majority)),
        "classes": labels.tolist(),
        "confusion": confusion.tolist(),
    }
