"""Probes recover planted linear structure and fall to chance without it."""

import numpy as np

from hyla.analysis.probes import logistic_classification_probe, logistic_f1_per_label, multioutput_r2, ridge_probe


def _split(rng, n=1200, d=8):
    x = rng.normal(size=(n, d))
    return x[: n // 2], x[n // 2 :]


def test_ridge_recovers_linear_map_and_shuffled_is_chance():
    rng = np.random.default_rng(0)
    x_train, x_test = _split(rng)
    weights = rng.normal(size=(8, 5))
    y_train = x_train @ weights + 0.05 * rng.normal(size=(len(x_train), 5))
    y_test = x_test @ weights + 0.05 * rng.normal(size=(len(x_test), 5))
    result = ridge_probe(x_train, y_train, x_test, y_test)
    assert result["r2"] > 0.99
    assert -0.2 < result["chance"] < 0.05  # shuffled targets: no better than predicting the mean

    unrelated = ridge_probe(x_train, rng.normal(size=y_train.shape), x_test, y_test)
    assert unrelated["r2"] < 0.05


def test_multioutput_r2_ignores_constant_outputs():
    y = np.stack([np.arange(10.0), np.ones(10)], axis=1)
    assert multioutput_r2(y, y) == 1.0
    assert np.isclose(multioutput_r2(y, np.zeros_like(y) + y.mean(0)), 0.0)


def test_logistic_classification_recovers_planted_classes():
    rng = np.random.default_rng(1)
    x_train, x_test = _split(rng)
    directions = rng.normal(size=(8, 4))
    y_train, y_test = (x_train @ directions).argmax(1), (x_test @ directions).argmax(1)
    result = logistic_classification_probe(x_train, y_train, x_test, y_test)
    assert result["accuracy"] > 0.9
    assert result["chance_accuracy"] < 0.4  # 4 roughly balanced classes
    assert np.sum(result["confusion"]) == len(y_test)
    assert np.trace(result["confusion"]) == round(result["accuracy"] * len(y_test))

    random_labels = rng.integers(0, 4, size=len(y_train))
    assert logistic_classification_probe(x_train, random_labels, x_test, y_test)["accuracy"] < 0.4


def test_logistic_f1_per_label_recovers_planted_labels():
    rng = np.random.default_rng(2)
    x_train, x_test = _split(rng)
    directions = rng.normal(size=(8, 3))
    labels_train, labels_test = (x_train @ directions > 0.5).astype(int), (x_test @ directions > 0.5).astype(int)
    labels_train[:, 2] = 0  # a label without positives in training is not probed
    result = logistic_f1_per_label(x_train, labels_train, x_test, labels_test, names=["a", "b", "c"])
    assert set(result["per_label"]) == {"a", "b"}
    for scores in result["per_label"].values():
        assert scores["f1"] > 0.85
        assert scores["chance"] < 0.6
        assert 0.0 < scores["always_positive"] < 1.0
    assert result["mean_f1"] > 0.85 > result["mean_chance"]
