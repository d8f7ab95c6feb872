"""Generic helpers that any part of hyla may import (they use the standard library only): the
environment switches, read once into one record; the cache folder; JSON files; durations.

Switches. `switches()` reads every `HYLA_*` environment variable once per process into a frozen
`Switches` record; no other module reads them. Each switch has one sense: unset is hyla's default,
`=0` turns the mechanism off, `=1` forces it on where that means something (HYLA_TRITON=1: `auto`
takes the Triton kernels on a GPU architecture not validated for them); any other value is an
error. What each mechanism buys: docs/speed.md, the speed ledger, which has a row for each.

    HYLA_CPP_KERNEL=0      `auto` never takes the C++ HYLA kernel (hyla.ops.kernels.cpp)
    HYLA_CPP_LINEAR=0      `auto` never takes it for multi-head attention (`cpp_linear`)
    HYLA_TRITON=0 | 1      `auto` never takes the Triton HYLA kernels | takes them on any GPU
    HYLA_ADAMW_KERNEL=0    every AdamW step is torch.optim.AdamW's (hyla.train.optim)
    HYLA_MALLOC_TUNING=0   glibc's malloc keeps its defaults (hyla.train.allocator)
    HYLA_GELU_SIGMOID=0    GELU (tanh) stays aten's kernel under torch.compile (hyla.nn.feedforward)
    HYLA_GELU_KERNEL=0     eager GELU (tanh) on the CPU is aten's kernel, not hyla's C++ one
                           (hyla.ops.kernels.gelu)
    HYLA_QUERY_PRUNING=0   the last block computes every position, not only those read out
                           (hyla.nn.transformer)
    HYLA_CACHE=DIR         where compiled kernels and tokenized corpora are kept (default ~/.cache/hyla)

JSON. JSON has no NaN or infinity: every writer in hyla stores a non-finite number as `null` (what
standard JSON readers, pandas and jq expect), so a reader gets `None` for a metric that was NaN.
Tensors and numpy values become plain lists and numbers; dict keys become strings.
"""

from __future__ import annotations

import dataclasses
import functools
import json
import math
import os
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any

PREFIX = "HYLA_"


@dataclass(frozen=True)
class Switches:
    """Every `HYLA_*` variable (the module docstring). A switch is None when unset (hyla's default),
    False for `=0` (off), True for `=1` (forced on); `cache` is a folder."""

    cache: Path
    cpp_kernel: bool | None = None
    cpp_linear: bool | None = None
    triton: bool | None = None
    adamw_kernel: bool | None = None
    malloc_tuning: bool | None = None
    gelu_sigmoid: bool | None = None
    gelu_kernel: bool | None = None
    query_pruning: bool | None = None

    def off(self, switch: str) -> bool:
        """Whether `switch` (a field name, e.g. "cpp_kernel") is set to 0."""
        return getattr(self, switch) is False

    def forced(self, switch: str) -> bool:
        """Whether `switch` is set to 1."""
        return getattr(self, switch) is True


class ConfigError(ValueError):
    """An invalid configuration value or command option; the message names the field and the valid
    choices (the `hyla` command prints it in one line)."""


def env_name(switch: str) -> str:
    """The environment variable of a `Switches` field: "cpp_kernel" -> "HYLA_CPP_KERNEL"."""
    return PREFIX + switch.upper()


SWITCHES = tuple(f.name for f in dataclasses.fields(Switches) if f.name != "cache")
ENV_NAMES = tuple(env_name(f.name) for f in dataclasses.fields(Switches))


@functools.cache
def switches() -> Switches:
    """The `HYLA_*` variables, read on the first call of the process. (Tests change them through the
    `set_switch` fixture, which clears this cache.) An unknown `HYLA_*` variable warns once."""
    for name in sorted(set(os.environ) - set(ENV_NAMES)):
        if name.startswith(PREFIX):
            warnings.warn(f"hyla reads no {name}; its switches are {', '.join(ENV_NAMES)}", UserWarning, stacklevel=2)
    cache = os.environ.get(env_name("cache")) or Path.home() / ".cache" / "hyla"
    return Switches(Path(cache), **{switch: _switch_value(env_name(switch)) for switch in SWITCHES})


def _switch_value(name: str) -> bool | None:
    value = os.environ.get(name, "")
    if value not in ("", "0", "1"):
        raise ValueError(f"{name}={value!r}: set it to 0 (off) or 1 (on), or unset it")
    return None if value == "" else value == "1"


# --- JSON files -------------------------------------------------------------------------------------


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


def path_from_cwd(path: str | Path) -> str:
    """`path` relative to the working directory when it lies below it, else its full path: what an
    output names as read, so that outputs written in a repository commit no path of the machine."""
    full, cwd = Path(path).resolve(), Path.cwd().resolve()
    return str(full.relative_to(cwd)) if full.is_relative_to(cwd) else str(full)


def portable_path(path: str | Path) -> str:
    """`path` as committed JSON keeps it: relative to the working directory when it lies below it,
    else its last two parts (`<sweep folder>/<run name>` for a run folder); never an absolute path
    of the machine that wrote it. A relative path stays as given."""
    if not Path(path).is_absolute():
        return str(path)
    shown = Path(path_from_cwd(path))
    return str(Path(*shown.parts[-2:])) if shown.is_absolute() else str(shown)


def duration(seconds: float) -> str:
    """A duration for progress lines, in whole seconds cut down: `42s`, `1m05s`, `27h03m`."""
    minutes, seconds = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    if hours:
        return f"{hours}h{minutes:02d}m"
    return f"{minutes}m{seconds:02d}s" if minutes else f"{seconds}s"


def elapsed_and_eta(elapsed: float, paced: tuple[float, int] | None, left: int) -> str:
    """`1m05s elapsed, ETA 2m10s`: the ETA of the `left` items at the pace `paced` (seconds, items
    done in them); none while no item has been timed."""
    text = f"{duration(elapsed)} elapsed"
    if paced is not None and paced[1] > 0:
        text += f", ETA {duration(paced[0] / paced[1] * left)}"
    return text


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
