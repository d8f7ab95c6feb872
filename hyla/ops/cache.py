"""Where hyla keeps what it prepares once per machine (tokenized corpora, compiled CPU kernels)."""

from __future__ import annotations

import os
from pathlib import Path


def default_cache_dir() -> Path:
    """`$HYLA_CACHE`, else ~/.cache/hyla."""
    return Path(os.environ.get("HYLA_CACHE", Path.home() / ".cache" / "hyla"))
