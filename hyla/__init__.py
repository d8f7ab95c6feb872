"""hyla: attention as a hypernetwork (Schug et al., ICLR 2025) in PyTorch."""

from __future__ import annotations

import importlib

# Loaded on first use (PEP 562), so that importing the `hyla` command does not load torch: the
# command sets OpenMP's wait policy first (hyla.cli), which OpenMP reads once, when torch loads.
_EXPORTS = {
    "ops": "hyla.ops",
    "MultiHeadAttention": "hyla.nn",
    "Transformer": "hyla.nn.transformer",
    "ModelConfig": "hyla.nn.transformer",
    "evaluate": "hyla.tasks",
}

__all__ = [*_EXPORTS, "load", "__version__"]


def load(path):
    """(model, task) of an exported model (a folder written by `hyla export`) or of a run folder:
    the model on the CPU, in eval mode; the task it was trained on, with the run's seed, so that
    `hyla.evaluate(model, task, split, num_samples)` with the run's `eval.final_samples`
    repeats its final evaluation. An export needs the library alone (its files checked against
    their sha256); a run folder's checkpoint is read by the workflow (`hyla.train.load_run`)."""
    from hyla.nn.pretrained import is_export, load_export

    if is_export(path):
        return load_export(path)
    from hyla.train import load_run

    _, model, task = load_run(path)
    return model, task


def _version() -> str:
    """The installed distribution's version (from its metadata: one source, pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("hyla")
    except PackageNotFoundError:
        return "unknown (not installed; pip install -e .)"


def __getattr__(name: str):
    if name == "__version__":  # read from the metadata when asked for, not at import
        return _version()
    if name not in _EXPORTS:
        raise AttributeError(f"module 'hyla' has no attribute {name!r}")
    module = importlib.import_module(_EXPORTS[name])
    return module if name == "ops" else getattr(module, name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS, "__version__"])
