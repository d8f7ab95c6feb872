"""Figures of latent codes (PNG, drawn on `matplotlib.figure.Figure`, no pyplot: see hyla.plots):
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

from hyla.plots import save_figure

RULE_NAMES = ("A const", "B +1", "C +2", "D -1", "E -2", "F add", "G sub", "H dist3")


def embed(codes: np.ndarray, method: str, seed: int = 0) -> np.ndarray | None:
    """codes `[N, D]` -> `[N, 2]` by 'pca' or 'tsne' (t-SNE on standardized codes); None when
    the codes are (numerically) constant, e.g. a layer-0 code whose query token carries no input."""
    codes = codes.astype(np.float64)
    if not np.isfinite(codes).all() or codes.std(0).max() < 1e-7:
        return None
    if codes.shape[1] < 2:
        codes = np.concatenate([codes, np.zeros((len(codes), 2 - codes.shape[1]))], axis=1)
    if method == "pca":
        return PCA(n_components=2, random_state=seed).fit_transform(codes)
    if method == "tsne":
        scaled = (codes - codes.mean(0)) / (codes.std(0) + 1e-8)
        perplexity = float(min(30.0, max(2.0, (len(codes) - 1) / 3)))
        return TSNE(n_components=2, perplexity=perplexity, init="pca", random_state=seed).fit_transform(scaled)
    raise ValueError(f"unknown embedding method {method!r} (pca | tsne)")


def plot_embeddings(embeddings: dict[tuple[str, str], np.ndarray], color: np.ndarray, categorical: bool,
                    title: str, path: str | Path, category_names: dict | None = None) -> Path:
    """A grid of scatter plots: rows = methods, columns = code sets (e.g. layers).

    embeddings: {(method, code set): [N, 2]}; color `[N]` (class labels or a continuous value;
    for categorical colors, -1 = "other", drawn grey).
    """
    methods = list(dict.fromkeys(m for m, _ in embeddings))
    code_sets = list(dict.fromkeys(c for _, c in embeddings))
    fig = Figure(figsize=(3.2 * len(code_sets) + 1.5, 3.0 * len(methods)))
    axes = fig.subplots(len(methods), len(code_sets), squeeze=False)
    classes = [c for c in np.unique(color) if c >= 0] if categorical else []
    cmap = colormaps["tab10" if len(classes) <= 10 else "tab20"]
    for i, method in enumerate(methods):
        for j, code_set in enumerate(code_sets):
            ax = axes[i, j]
            xy = embeddings.get((method, code_set))
            ax.set_xticks([]), ax.set_yticks([])
            ax.set_title(f"{method.upper()} · {code_set}", fontsize=9)
            if xy is None:
                ax.text(0.5, 0.5, "constant codes", ha="center", va="center", transform=ax.transAxes)
                continue
            if categorical:
                # one scatter in random order, so no class is drawn over all the others
                palette = {value: cmap(k % cmap.N) for k, value in enumerate(classes)}
                point_colors = [palette.get(value, (0.85, 0.85, 0.85, 1.0)) for value in color]
                order = np.random.default_rng(0).permutation(len(xy))
                ax.scatter(xy[order, 0], xy[order, 1], s=4, c=[point_colors[i] for i in order], lw=0)
            else:
                ax.scatter(xy[:, 0], xy[:, 1], s=4, c=color, cmap="viridis", lw=0,
                           vmin=float(np.min(color)), vmax=float(np.max(color)))
    if categorical and classes:
        handles = [Line2D([], [], ls="", marker="o", ms=5, color=cmap(k % cmap.N),
                              label=(category_names or {}).get(int(value), str(value)))
                   for k, value in enumerate(classes)]
        axes[0, -1].legend(handles=handles, loc="center left", bbox_to_anchor=(1.02, 0.5), fontsize=7,
                           frameon=False)
    elif not categorical:
        mappable = ScalarMappable(Normalize(float(np.min(color)), float(np.max(color))), "viridis")
        fig.colorbar(mappable, ax=axes[:, -1].tolist(), shrink=0.8)
    fig.suptitle(title, fontsize=10, y=1.0 + 0.06 / len(methods))
    return save_figure(fig, path, dpi=110, tight=True)


def plot_matrices(matrices: dict[str, np.ndarray], row_names: list[str], col_names: list[str] | None, title: str,
                  path: str | Path, annotate: bool = True) -> Path:
    """Heatmaps side by side, one per {panel title: matrix}, with a diverging color map centered
    at 0 (e.g. cosine similarity matrices per layer); small matrices get their values written in."""
    rows, cols = next(iter(matrices.values())).shape
    panel_width, panel_height = max(3.0, 0.4 * cols + 1.5), max(2.8, 0.35 * rows + 1.2)
    fig = Figure(figsize=(panel_width * len(matrices) + 1.0, panel_height))
    axes = fig.subplots(1, len(matrices), squeeze=False)
    limit = max(float(np.nanmax(np.abs(m))) for m in matrices.values()) or 1.0
    for ax, (name, matrix) in zip(axes[0], matrices.items()):
        image = ax.imshow(matrix, cmap="RdBu_r", vmin=-limit, vmax=limit, aspect="auto")
        ax.set_yticks(range(len(row_names)), row_names, fontsize=7)
        if col_names is not None:
            ax.set_xticks(range(len(col_names)), col_names, fontsize=7, rotation=90)
        else:
            ax.set_xticks([])
        if annotate and max(matrix.shape) <= 10:
            for (r, c), value in np.ndenumerate(matrix):
                ax.text(c, r, f"{value:.2f}", ha="center", va="center", fontsize=6)
        ax.set_title(name, fontsize=9)
    fig.colorbar(image, ax=axes[0].tolist(), shrink=0.8)
    fig.suptitle(title, fontsize=10)
    return save_figure(fig, path, dpi=110, tight=True)


def plot_probe_layers(layer_names: list[str], curves: dict[str, list[float]], chance: dict[str, list[float]],
                      ylabel: str, title: str, path: str | Path) -> Path:
    """Probe score per layer (solid) with its chance level (dashed, same color)."""
    fig = Figure(figsize=(4.5, 3.2))
    ax = fig.subplots()
    x = np.arange(len(layer_names))
    for k, (name, values) in enumerate(curves.items()):
        color = colormaps["tab10"](k)
        ax.plot(x, values, "o-", color=color, label=name)
        if name in chance:
            ax.plot(x, chance[name], "x--", color=color, alpha=0.6, label=f"{name} (chance)")
    ax.set_xticks(x, layer_names)
    ax.set_ylabel(ylabel)
    ax.set_title(title, fontsize=9)
    ax.legend(fontsize=7, frameon=False)
    return save_figure(fig, path, dpi=110, tight=True)
