"""JSON files of run folders and reports, one convention everywhere.

JSON has no NaN or infinity: every writer in hyla stores a non-finite number as `null` (what
standard JSON readers, pandas and jq expect), so a reader gets `None` for a metric that was NaN.
Tensors and numpy values become plain lists and numbers; dict keys become strings.
"""

from __future__ import annotations

import json
import math
import os
import warnings
from pathlib import Path
from typing import Any


def to_jsonable(value: Any) -> Any:
    """A copy of `value` that `json.dumps` accepts: non-finite floats -> None, tensors and numpy
    arrays -> lists, numpy scalars -> Python numbers, tuples -> lists, dict keys -> str."""
    if isinstance(value, dict):
        return {str(k): to_jsonable(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return [to_jsonable(v) for v in value]
    if hasattr(value, "tolist"):  # torch.Tensor, numpy arrays and numpy scalars
        return to_jsonable(value.tolist())
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


def dumps(value: Any, indent: int | None = None) -> str:
    """`json.dumps(to_jsonable(value))`, refusing anything that would still be non-standard JSON."""
    return json.dumps(to_jsonable(value), indent=indent, allow_nan=False)


def portable_path(path: str | Path) -> str:
    """`path` as committed JSON keeps it: relative to the working directory when it lies below it,
    else its last two parts (`<sweep folder>/<run name>` for a run folder); never an absolute path
    of the machine that wrote it. A relative path stays as given."""
    path = Path(path)
    if not path.is_absolute():
        return str(path)
    try:
        return str(path.resolve().relative_to(Path.cwd().resolve()))
    except ValueError:
        return str(Path(*path.parts[-2:]))


def write_text_atomic(path: str | Path, text: str) -> None:
    """Write through a temporary file and rename it over `path`: readers never see half a file."""
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}")
    tmp.write_text(text)
    os.replace(tmp, path)


def write_json(path: str | Path, data: Any, indent: int = 2) -> None:
    """Atomically write `data` as JSON (non-finite numbers as null), creating the folder."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    write_text_atomic(path, dumps(data, indent) + "\n")


def append_jsonl(path: str | Path, record: dict) -> None:
    """Append one record as one line (non-finite numbers as null)."""
    with open(path, "a", encoding="utf-8") as f:
        f.write(dumps(record) + "\n")


def read_jsonl(path: str | Path) -> list[dict]:
    """Every record of a JSON-lines file ([] if it does not exist).

    A process killed while appending leaves a torn last line: it is dropped with a warning. A bad
    line anywhere else means the file is damaged, and raises.
    """
    path = Path(path)
    if not path.exists():
        return []
    lines = [line for line in path.read_text(encoding="utf-8").splitlines() if line.strip()]
    records = []
    for number, line in enumerate(lines, 1):
        try:
            records.append(json.loads(line))
        except json.JSONDecodeError:
            if number < len(lines):
                raise ValueError(f"{path}: line {number} is not valid JSON") from None
            warnings.warn(f"{path}: dropped a torn last line (a writer was interrupted)", stacklevel=2)
    return records
