"""hyla: attention as a hypernetwork (Schug et al., ICLR 2025) in PyTorch."""

import importlib

# Loaded on first use (PEP 562), so that importing the `hyla` command does not load torch: the
# command sets OpenMP's wait policy first (hyla.cli), which OpenMP reads once, when torch loads.
_EXPORTS = {
    "ops": "hyla.ops",
    "MultiHeadAttention": "hyla.nn",
    "Transformer": "hyla.nn.transformer",
    "ModelConfig": "hyla.nn.transformer",
}

__all__ = list(_EXPORTS)


def __getattr__(name: str):
    if name not in _EXPORTS:
        raise AttributeError(f"module 'hyla' has no attribute {name!r}")
    module = importlib.import_module(_EXPORTS[name])
    return module if name == "ops" else getattr(module, name)


def __dir__() -> list[str]:
    return sorted([*globals(), *_EXPORTS])
