"""Figures that do not mislead: constant codes get no matrix of rounding noise, one outlier does
not squash a probe plot, every axis is labeled, a single seed gets no error bar."""

import itertools

import numpy as np
import pytest
from matplotlib.collections import PolyCollection
from matplotlib.container import BarContainer, ErrorbarContainer
from matplotlib.image import AxesImage

from hyla.analysis import figures, measures, pipeline
from hyla.analysis.latent_report import figure as latent_figure
from hyla.analysis.plots import curves_figure
from hyla.analysis.report import _mean_code_lines
from hyla.runs.result_figures import final_figure


def _texts(ax) -> list[str]:
    return [t.get_text() for t in ax.texts]


def _unlabeled(fig) -> list[str]:
    """Titles of the axes that lack an x or y label (colorbars: a label along the bar)."""
    missing = []
    for ax in fig.axes:
        if ax.get_label() == "<colorbar>":
            ok = bool(ax.get_ylabel() or ax.get_xlabel())
        else:
            ok = bool(ax.get_xlabel()) and bool(ax.get_ylabel())
        if not ok:
            missing.append(ax.get_title() or ax.get_label())
    return missing


def _fuzzy_data(rows: int = 80, heads: int = 6) -> dict:
    """Latent codes of 2 layers: layer 0 constant up to float32 rounding, layer 1 informative."""
    rng = np.random.default_rng(0)
    term_indices = np.stack([rng.choice(4, size=2, replace=False) for _ in range(rows)])
    terms = rng.integers(0, 2, size=(rows, 2, 2))
    constant = np.full((rows, heads), 0.7) + 1e-5 * rng.standard_normal((rows, heads))
    informative = rng.standard_normal((rows, heads))
    return {
        "codes": np.stack([constant, informative], 1).astype(np.float32),
        "terms": terms,
        "term_indices": term_indices,
        "task": np.array("fuzzy_logic"),
    }


@pytest.mark.parametrize("scale", [1e-3, 1.0, 1e3])
def test_constant_codes_are_judged_relative_to_their_scale(scale):
    rng = np.random.default_rng(0)
    base = scale * (1.0 + rng.random(16))  # [16] per-dimension values
    noise = rng.standard_normal((200, 16))
    assert figures.is_constant(base + 1e-5 * scale * noise)  # float32 rounding level
    assert not figures.is_constant(base + 1e-2 * scale * noise)  # real, if small, variation
    assert figures.embed(base + 1e-5 * scale * noise, "pca") is None
    assert figures.is_constant(np.zeros((5, 3))) and figures.is_constant(np.full((5, 3), np.nan))


def test_constant_codes_get_the_constant_panel_in_similarity_heatmaps(tmp_path, monkeypatch):
    drawn = []
    monkeypatch.setattr(figures, "save_figure", lambda fig, path, **kwargs: drawn.append(fig) or path)
    similarity = measures.label_similarity(_fuzzy_data())
    assert similarity["layer 0"]["constant_codes"] and not similarity["layer 1"]["constant_codes"]
    pipeline.draw_similarity("valid_fixed_query", similarity, "fuzzy_logic", tmp_path)
    cosines, means = drawn
    panels = {ax.get_title(): ax for ax in cosines.axes if ax.get_label() != "<colorbar>"}
    assert "constant codes" in _texts(panels["layer 0"]) and not panels["layer 0"].get_images()
    assert isinstance(panels["layer 1"].get_images()[0], AxesImage)
    # the shared color scale comes from the drawn panels only
    assert panels["layer 1"].get_images()[0].get_clim()[1] == pytest.approx(
        np.abs(np.array(similarity["layer 1"]["centered_cosine"])).max()
    )
    mean_panels = [ax for ax in means.axes if ax.get_label() != "<colorbar>"]
    assert [t.get_text() for t in mean_panels[0].get_xticklabels()] == [f"h{h}" for h in range(6)]
    assert not _unlabeled(cosines) and not _unlabeled(means)
    assert "Constant codes on valid_fixed_query (no similarity matrix: it would show rounding noise): layer 0." in (
        _mean_code_lines("valid_fixed_query", similarity)
    )


def test_probe_plot_clips_an_outlier_and_writes_its_value():
    fig = figures.probe_layers_figure(
        ["layer 0", "layer 1", "all layers"],
        {"R²": [-7.8, 0.5, 0.9], "F1": [0.4, 0.6, 0.7]},
        {"R²": [-0.1, -0.05, -0.2]},
        "probe score",
        "probes",
    )
    ax = fig.axes[0]
    low, high = ax.get_ylim()
    assert -1.2 < low < -1.0 and 1.0 < high < 1.2
    assert "-7.80" in _texts(ax)
    markers = [line for line in ax.get_lines() if line.get_marker() == "v"]
    assert len(markers) == 1 and list(markers[0].get_ydata()) == [-1.0]
    unclipped = figures.probe_layers_figure(["a", "b"], {"F1": [0.4, 0.6]}, {}, "F1", "probes").axes[0]
    assert not unclipped.texts and unclipped.get_ylim()[0] > 0.3


def test_values_clipped_at_one_code_set_are_stacked_not_overlapping_and_the_legend_says_clipped():
    fig = figures.probe_layers_figure(
        ["layer 0", "layer 1", "all layers"],
        {"R² (in dist.)": [0.2, 0.5, 0.9], "R² (held out)": [-56.62, -2.5, 0.1]},
        {"R² (held out)": [-1.31, -0.2, -0.1]},
        "probe score",
        "probes",
        trivial={"R² 0: predicting the mean": 0.0},
    )
    ax = fig.axes[0]
    fig.draw_without_rendering()
    boxes = {text.get_text(): text.get_window_extent() for text in ax.texts}
    assert set(boxes) == {"-56.62", "chance -1.31", "-2.50"}  # the chance line's value says so
    assert not any(a.overlaps(b) for a, b in itertools.combinations(boxes.values(), 2))
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert "below -1: clipped, drawn at -1, value written above" in legend
    assert "R² 0: predicting the mean" in legend and "R² (held out): chance (shuffled labels)" in legend


def test_the_summary_figure_draws_every_baseline_across_its_bar():
    rows = [
        {
            "task": "sraven",
            "mixer": mixer,
            "measure": "held-out probe (accuracy)",
            "split": "valid->ood",
            "code_set": code_set,
            "mean": 0.6,
            "se": None,
            "baselines": {"chance": 0.12, "majority rule": 0.11},
            "per_model": [{"value": 0.6}],
        }
        for mixer in ("hyla", "softmax")
        for code_set in ("layer 0", "all layers")
    ]
    ax = latent_figure(rows).axes[0]
    levels = sorted(round(float(seg[0][1]), 2) for c in ax.collections for seg in c.get_segments())
    assert levels == [0.11] * 4 + [0.12] * 4  # one short line per bar and baseline
    legend = [text.get_text() for text in ax.get_legend().get_texts()]
    assert legend == ["hyla", "softmax", "chance", "majority rule"]
    assert not _unlabeled(latent_figure(rows))


def test_every_figure_labels_every_axis():
    rng = np.random.default_rng(0)
    xy = rng.standard_normal((30, 2))
    embeddings = {("pca", "layer 0"): None, ("pca", "layer 1"): xy, ("tsne", "layer 0"): None, ("tsne", "layer 1"): xy}
    records = [{"split": "train", "step": s, "loss": 1.0 / s} for s in (1, 2)]
    records += [{"split": "valid", "step": 2, "r2": 0.5}]
    rows = [{"group": {"model.mixer": "hyla"}, "values": {"valid/r2": (0.5, 0.1)}}]
    built = {
        "embeddings (continuous)": figures.embeddings_figure(
            embeddings, rng.random(30), False, "t", color_label="target"
        ),
        "embeddings (classes)": figures.embeddings_figure(embeddings, rng.integers(0, 3, 30), True, "t"),
        "matrices": figures.matrices_figure({"a": np.eye(3), "b": None}, list("xyz"), list("xyz"), "t", "rule", "rule"),
        "probes": figures.probe_layers_figure(["layer 0"], {"R²": [0.3]}, {}, "R²", "t"),
        "curves": curves_figure({"hyla": [records]}, "r2"),
        "final": final_figure(rows, "r2", ["model.mixer"]),
    }
    assert {name: _unlabeled(fig) for name, fig in built.items()} == {name: [] for name in built}


def _row(mixer: str, mean: float, se: float | None) -> dict:
    return {"group": {"model.mixer": mixer}, "values": {"valid/r2": (mean, se), "ood/r2": (mean - 0.1, se)}}


def test_a_single_seed_gets_no_error_bar():
    ax = final_figure(
        [_row("hyla", 0.8, 0.02), _row("softmax", 0.6, None), _row("linear", 0.4, 0.05)], "r2", ["model.mixer"]
    ).axes[0]
    assert all(bar.errorbar is None for bar in ax.containers if isinstance(bar, BarContainer))
    errorbars = [c for c in ax.containers if isinstance(c, ErrorbarContainer)]
    assert len(errorbars) == 2  # one per split, each over the two groups with a standard error
    for container in errorbars:
        _, caps, (bars,) = container.lines
        assert len(bars.get_segments()) == 2 and len(caps) == 2 and len(caps[0].get_xdata()) == 2
    alone = final_figure([_row("hyla", 0.8, None)], "r2", ["model.mixer"]).axes[0]
    assert not [c for c in alone.containers if isinstance(c, ErrorbarContainer)]


def test_curves_get_a_standard_error_band_only_with_two_seeds():
    def records(value):
        return [{"split": "valid", "step": s, "r2": value + s / 10} for s in (1, 2, 3)]

    ax = curves_figure({"one seed": [records(0.1)]}, "r2").axes[0]
    assert not [c for c in ax.collections if isinstance(c, PolyCollection)]
    ax = curves_figure({"two seeds": [records(0.1), records(0.3)]}, "r2").axes[0]
    assert len([c for c in ax.collections if isinstance(c, PolyCollection)]) == 1


def test_curves_count_training_examples_on_a_top_axis_given_the_batch_size():
    records = [{"split": "valid", "step": s, "r2": s / 10} for s in (100, 200)]
    assert not [c for c in curves_figure({"a": [records]}, "r2").axes[0].child_axes]
    fig = curves_figure({"a": [records]}, "r2", batch_size=128)
    fig.draw_without_rendering()  # lays out the secondary axis
    ax = fig.axes[0]
    (top,) = ax.child_axes
    assert top.get_xlabel() == "training examples seen (millions)"
    assert top.transData.transform((0.0256, 0))[0] == pytest.approx(ax.transData.transform((200, 0))[0])
