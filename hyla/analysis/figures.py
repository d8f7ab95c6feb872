"""Figures of latent codes (PNG, drawn on `matplotlib.figure.Figure`, no pyplot: see hyla.analysis.plots):
2-D embeddings, mean codes per label, similarity matrices and probe scores per layer."""

from __future__ import annotations

from pathlib import Path

import numpy as np
from matplotlib import colormaps
from matplotlib.cm import ScalarMappable
from matplotlib.colors import Normalize
from matplotlib.figure import Figure
from matplotlib.lines import Line2D
from sklearn.decomposition import PCA
from sklearn.manifold import TSNE

from hyla.analysis.plots import save_figure

RULE_NAMES = ("A const", "B +1", "C +2", "D -1", "E -2", "F add", "G sub", "H dist3")


# float32 codes: a dot product of length D rounds with a relative error of about sqrt(D)·6e-8 (1e-6
# to 1e-5 at our widths), so a spread 1e-4 of the codes' scale is a decade above rounding noise and
# far below any variation that carries information
CONSTANT_RTOL = 1e-4


def is_constant(codes: np.ndarray, rtol: float = CONSTANT_RTOL) -> bool:
    """Whether codes `[N, D]` are constant up to rounding: the largest per-dimension standard
    deviation over the N rows is at most `rtol` times the codes' root mean square (e.g. a layer-0
    code whose query token carries no input, on `*_fixed_query` splits). Non-finite codes count
    as constant: nothing about them can be drawn."""
    codes = np.asarray(codes, dtype=np.float64)
    if codes.size == 0 or not np.isfinite(codes).all():
        return True
    return float(codes.std(0).max()) <= rtol * float(np.sqrt(np.mean(codes**2)))


def embed(codes: np.ndarray, method: str, seed: int = 0) -> np.ndarray | None:
    """codes `[N, D]` -> `[N, 2]` by 'pca' or 'tsne' (t-SNE on standardized codes); None when
    the codes are constant (`is_constant`)."""
    if method not in ("pca", "tsne"):
        raise ValueError(f"unknown embedding method {method!r} (pca | tsne)")
    codes = codes.astype(np.float64)
    if is_constant(codes):
        return None
    if codes.shape[1] < 2:
        codes = np.concatenate([codes, np.zeros((len(codes), 2 - codes.shape[1]))], axis=1)
    if method == "pca":
        return PCA(n_components=2, random_state=seed).fit_transform(codes)
    scaled = (codes - codes.mean(0)) / (codes.std(0) + 1e-8)
    perplexity = float(min(30.0, max(2.0, (len(codes) - 1) / 3)))
    return TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed).fit_transform(scaled)


def constant_panel(ax, title: str) -> None:
    """The panel drawn for constant codes (embeddings and similarity matrices alike)."""
    ax.set_xticks([]), ax.set_yticks([])
    ax.text(0.5, 0.5, "constant codes", ha="center", va="center", transform=ax.transAxes)
    ax.set_title(title, fontsize=9)


AXIS_NAMES = {"pca": "PC", "tsne": "t-SNE"}
OTHER_COLOR = (0.85, 0.85, 0.85, 1.0)  # points of no class drawn (-1): e.g. the less frequent tasks


def embeddings_figure(
    embeddings: dict[tuple[str, str], np.ndarray | None],
    color: np.ndarray,
    categorical: bool,
    title: str,
    category_names: dict | None = None,
    color_label: str = "color",
) -> Figure:
    """A grid of scatter plots: rows = methods, columns = code sets (e.g. layers).

    embeddings: {(method, code set): [N, 2], or None for constant codes}; color `[N]` (class
    labels or a continuous value; for categorical colors, -1 = "other", drawn grey).
    """
    methods = list(dict.fromkeys(m for m, _ in embeddings))
    code_sets = list(dict.fromkeys(c for _, c in embeddings))
    fig = Figure(figsize=(3.2 * len(code_sets) + 1.5, 3.0 * len(methods)))
    axes = fig.subplots(len(methods), len(code_sets), squeeze=False)
    classes = [c for c in np.unique(color) if c >= 0] if categorical else []
    cmap = colormaps["tab10" if len(classes) <= 10 else "tab20"]
    for i, method in enumerate(methods):
        for j, code_set in enumerate(code_sets):
            ax, xy = axes[i, j], embeddings.get((method, code_set))
            axis = AXIS_NAMES.get(method, method)
            ax.set_xlabel(f"{axis} 1", fontsize=8), ax.set_ylabel(f"{axis} 2", fontsize=8)
            if xy is None:
                constant_panel(ax, f"{method.upper()} · {code_set}")
                continue
            ax.set_xticks([]), ax.set_yticks([])
            ax.set_title(f"{method.upper()} · {code_set}", fontsize=9)
            if categorical:
                _scatter_classes(ax, xy, color, classes, cmap)
            else:
                _scatter_values(ax, xy, color)
    if categorical and classes:
        _class_legend(axes[0, -1], classes, cmap, category_names, other=bool(np.any(color < 0)))
    elif not categorical:
        mappable = ScalarMappable(Normalize(float(np.min(color)), float(np.max(color))), "viridis")
        fig.colorbar(mappable, ax=axes[:, -1].tolist(), shrink=0.8, label=color_label)
    fig.suptitle(title, fontsize=10, y=1.0 + 0.06 / len(methods))
    return fig


def _scatter_classes(ax, xy: np.ndarray, color: np.ndarray, classes: list, cmap) -> None:
    """Points colored by class (-1 and any value not in `classes`: grey), in one scatter in random
    order, so no class is drawn over all the others."""
    palette = {value: cmap(k % cmap.N) for k, value in enumerate(classes)}
    point_colors = [palette.get(value, OTHER_COLOR) for value in color]
    order = np.random.default_rng(0).permutation(len(xy))
    ax.scatter(xy[order, 0], xy[order, 1], s=4, c=[point_colors[i] for i in order], lw=0)


def _scatter_values(ax, xy: np.ndarray, color: np.ndarray) -> None:
    """Points colored by a continuous value (viridis, over the values' full range)."""
    ax.scatter(
        xy[:, 0],
        xy[:, 1],
        s=4,
        c=color,
        cmap="viridis",
        lw=0,
        vmin=float(np.min(color)),
        vmax=float(np.max(color)),
    )


def _class_legend(ax, classes: list, cmap, category_names: dict | None, other: bool = False) -> None:
    """A legend right of `ax`: one marker per class, named by `category_names` (default: the value),
    and with `other` a grey one for the points of no class drawn (named by category_names[-1])."""
    names = category_names or {}
    colors = [cmap(k % cmap.N) for k in range(len(classes))] + ([OTHER_COLOR] if other else [])
    labels = [names.get(int(value), str(value)) for value in classes] + ([names.get(-1, "other")] if other else [])
    handles = [Line2D([], [], ls="", marker="o", ms=5, color=c, label=label) for c, label in zip(colors, labels)]
    ax.legend(handles=handles, loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=7, frameon=False)


def plot_embeddings(
    embeddings: dict[tuple[str, str], np.ndarray | None],
    color: np.ndarray,
    categorical: bool,
    title: str,
    path: str | Path,
    category_names: dict | None = None,
    color_label: str = "color",
) -> Path:
    """`embeddings_figure` written to `path`."""
    return save_figure(
        embeddings_figure(embeddings, color, categorical, title, category_names, color_label), path, dpi=110, tight=True
    )


def matrices_figure(
    matrices: dict[str, np.ndarray | None],
    row_names: list[str],
    col_names: list[str],
    title: str,
    xlabel: str,
    ylabel: str,
    annotate: bool = True,
    value_label: str = "value",
    groups: int = 1,
) -> Figure:
    """Heatmaps, one per {panel title: matrix `[rows, cols]`}, with a diverging color map centered at
    0 (e.g. cosine similarity matrices per layer): side by side, or two per row when the matrices
    are wide (more than 16 columns); a None matrix gets the "constant codes" panel; small matrices
    get their values written in; `groups` > 1 splits the columns into that many equal groups, with
    a line between them. Every column is labeled, and the layout keeps labels off each other."""
    drawn = {name: m for name, m in matrices.items() if m is not None}
    rows, cols = next(iter(drawn.values())).shape if drawn else (len(row_names), len(col_names))
    per_row = len(matrices) if cols <= 16 else min(2, len(matrices))
    grid_rows = -(-len(matrices) // per_row)
    panel_width, panel_height = max(3.0, 0.2 * cols + 1.2), max(2.8, 0.3 * rows + 1.4)
    fig = Figure(figsize=(panel_width * per_row + 1.0, panel_height * grid_rows), layout="constrained")
    axes = fig.subplots(grid_rows, per_row, squeeze=False).ravel()
    for spare in axes[len(matrices) :]:
        spare.remove()
    limit = max((float(np.nanmax(np.abs(m))) for m in drawn.values()), default=1.0) or 1.0
    image = None
    for ax, (name, matrix) in zip(axes, matrices.items()):
        ax.set_xlabel(xlabel, fontsize=8), ax.set_ylabel(ylabel, fontsize=8)
        if matrix is None:
            constant_panel(ax, name)
            continue
        image = ax.imshow(matrix, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest")
        ax.set_yticks(range(len(row_names)), row_names, fontsize=7)
        ax.set_xticks(range(len(col_names)), col_names, fontsize=7 if len(col_names) <= 16 else 6, rotation=90)
        for boundary in range(cols // groups, cols, cols // groups) if groups > 1 else ():
            ax.axvline(boundary - 0.5, color="black", lw=1.0)
        if annotate and max(matrix.shape) <= 10:
            for (r, c), value in np.ndenumerate(matrix):
                color = "white" if abs(value) > 0.6 * limit else "black"
                ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=6, color=color)
        ax.set_title(name, fontsize=9)
    if image is not None:
        fig.colorbar(image, ax=axes[: len(matrices)].tolist(), shrink=0.8, label=value_label)
    fig.suptitle(title, fontsize=10)
    return fig


def plot_matrices(
    matrices: dict[str, np.ndarray | None],
    row_names: list[str],
    col_names: list[str],
    title: str,
    path: str | Path,
    xlabel: str,
    ylabel: str,
    annotate: bool = True,
    value_label: str = "value",
    groups: int = 1,
) -> Path:
    """`matrices_figure` written to `path`."""
    return save_figure(
        matrices_figure(matrices, row_names, col_names, title, xlabel, ylabel, annotate, value_label, groups),
        path,
        dpi=110,
        tight=True,
    )


def rule_codes_figure(panels: dict[str, dict], column_groups: list[str], title: str) -> Figure:
    """Paper Fig. 5E, a row per split: the mean code of each rule minus the mean over the rules (rules
    x code dimensions, the dimensions grouped as `column_groups`, e.g. one group per layer), and the
    cosine similarity of those centered mean codes, the addition/subtraction cells outlined and the
    test of their similarity (`measures.addition_subtraction`) in the panel's title.

    panels: {split: a `measures.label_similarity` entry of SRAVEN with `addition_subtraction`}."""
    fig = Figure(figsize=(12.0, 3.9 * len(panels)), layout="constrained")
    axes = fig.subplots(len(panels), 2, squeeze=False, width_ratios=[1.6, 1.0])
    for (ax_codes, ax_similarity), (split, entry) in zip(axes, panels.items()):
        names = [RULE_NAMES[r] for r in entry["labels"]]
        means = np.array(entry["mean_codes"])  # [R, D]
        centered = means - means.mean(0, keepdims=True)
        limit = float(np.abs(centered).max()) or 1.0
        image = ax_codes.imshow(
            centered, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto", interpolation="nearest"
        )
        fig.colorbar(image, ax=ax_codes, shrink=0.85, label="mean code − mean over rules")
        width = means.shape[1] // len(column_groups)
        for boundary in range(width, means.shape[1], width):
            ax_codes.axvline(boundary - 0.5, color="black", lw=0.8)
        ax_codes.set_xticks([width * (g + 0.5) - 0.5 for g in range(len(column_groups))], column_groups, fontsize=7)
        ax_codes.set_yticks(range(len(names)), names, fontsize=7)
        ax_codes.set(xlabel="code dimension", ylabel="rule")
        ax_codes.set_title(f"{split}: mean code per rule, centered (what the similarity compares)", fontsize=9)
        _similarity_panel(fig, ax_similarity, np.array(entry["centered_cosine"]), names, entry, split)
    fig.suptitle(title, fontsize=10)
    return fig


def _similarity_panel(fig: Figure, ax, similarity: np.ndarray, names: list[str], entry: dict, split: str) -> None:
    """The rules' centered cosine matrix with its values, the (addition, subtraction) cells outlined."""
    from matplotlib.patches import Rectangle

    image = ax.imshow(similarity, cmap="RdBu_r", vmin=-1, vmax=1)
    fig.colorbar(image, ax=ax, shrink=0.85, label="cosine similarity (centered)")
    for (r, c), value in np.ndenumerate(similarity):
        color = "white" if abs(value) > 0.6 else "black"
        ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=6, color=color)
    test = entry["addition_subtraction"]
    a, s = (entry["labels"].index(rule) for rule in test["rules"])
    for r, c in ((a, s), (s, a)):
        ax.add_patch(Rectangle((c - 0.5, r - 0.5), 1, 1, fill=False, ec="gold", lw=2.5))
    ax.set_xticks(range(len(names)), names, fontsize=7, rotation=90)
    ax.set_yticks(range(len(names)), names, fontsize=7)
    ax.set(xlabel="rule", ylabel="rule")
    ax.set_title(
        f"{split}: cos(add, sub) = {test['centered_cosine']:.2f} (outlined),\n"
        f"rank {test['rank_among_pairs']} of {test['num_pairs']} rule pairs, permutation p = {test['p_value']:.3f}",
        fontsize=8,
    )


def probe_layers_figure(
    layer_names: list[str],
    curves: dict[str, list[float]],
    chance: dict[str, list[float]],
    ylabel: str,
    title: str,
    floor: float | None = -1.0,
    trivial: dict[str, float] | None = None,
) -> Figure:
    """Probe score per code set (solid) with its chance level (dashed, same color: the probe fitted
    on shuffled labels) and the score of each trivial answer (`trivial`: {label: score}, grey dotted
    lines, e.g. always naming the most frequent rule).

    floor: the lowest score shown (R² is unbounded below; one R² of -8 would squash every other
    line): a score below it is drawn at the floor as a down-pointing marker with its value written
    above (several at one code set: stacked), and the legend says so. None: no floor."""
    fig = Figure(figsize=(6.6, 3.4))
    ax = fig.subplots()
    x = np.arange(len(layer_names))
    stacked = np.zeros(len(x), dtype=int)  # [code sets]: clipped values written so far at each
    for k, (name, values) in enumerate(curves.items()):
        color = colormaps["tab10"](k)
        _clipped_line(ax, x, values, floor, stacked, dict(color=color, marker="o", ls="-", label=name))
        if name in chance:
            style = dict(color=color, marker="x", ls="--", alpha=0.6, label=f"{name}: chance (shuffled labels)")
            _clipped_line(ax, x, chance[name], floor, stacked, style, "chance ")
    for k, (label, value) in enumerate((trivial or {}).items()):
        ax.axhline(value, color="0.35", ls=(0, (1, 1 + 2 * k)), lw=1.2, label=label)
    handles, labels = ax.get_legend_handles_labels()
    if stacked.any():
        margin = 0.05 * (1.0 - floor)
        ax.set_ylim(floor - margin, max(ax.get_ylim()[1], 1.0 + margin))
        handles.append(Line2D([], [], ls="", marker="v", ms=7, color="0.3"))
        labels.append(f"below {floor:g}: clipped, drawn at {floor:g}, value written above")
    ax.set_xticks(x, layer_names)
    ax.set_xlabel("latent codes of")
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(handles, labels, fontsize=7, frameon=False, loc="upper left", bbox_to_anchor=(1.02, 1.0))
    return fig


def _clipped_line(
    ax, x: np.ndarray, values: list[float], floor: float | None, stacked: np.ndarray, style: dict, prefix: str = ""
) -> None:
    """Draw one line with its values below `floor` at the floor, each marked and its value written
    (after `prefix`) above the marker, one row higher per value already written at that x (`stacked`,
    updated)."""
    values = np.asarray(values, dtype=np.float64)
    below = np.flatnonzero(values < floor) if floor is not None else np.array([], dtype=int)
    shown = values if floor is None else np.where(values < floor, floor, values)
    ax.plot(x, shown, **style)
    for i in below:
        ax.plot(x[i], floor, ls="", marker="v", ms=8, color=style["color"], alpha=style.get("alpha", 1.0))
        ax.annotate(
            f"{prefix}{values[i]:.2f}",
            (x[i], floor),
            xytext=(0, 7 + 10 * stacked[i]),
            textcoords="offset points",
            ha="center",
            fontsize=7,
            color=style["color"],
            bbox=dict(boxstyle="square,pad=0.1", fc="white", ec="none", alpha=0.85),
        )
        stacked[i] += 1


def plot_probe_layers(
    layer_names: list[str],
    curves: dict[str, list[float]],
    chance: dict[str, list[float]],
    ylabel: str,
    title: str,
    path: str | Path,
    floor: float | None = -1.0,
    trivial: dict[str, float] | None = None,
) -> Path:
    """`probe_layers_figure` written to `path`."""
    return save_figure(
        probe_layers_figure(layer_names, curves, chance, ylabel, title, floor, trivial), path, dpi=110, tight=True
    )
