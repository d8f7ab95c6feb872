"""Checkpoints that are safe to open and survive a crash at any moment.

Safe: a checkpoint holds tensors and plain containers of numbers and strings only (the config as a
plain dict; no RNG state: every random draw is seeded from (seed, step)), so it loads with
`torch.load(weights_only=True)`, which never runs code from the file. `CheckpointError` refuses, each
called by its name: an unsafe file, one that needs more (an arbitrary pickled object, or the format
of hyla before commit `70d6945`, which pickled numpy's RNG state); a damaged one, no complete
checkpoint (cut short or random bytes, or contents that do not match the sha256 stored with them);
and a checkpoint of a run whose data came from hyla's earlier random stream (format 2): resumed or
evaluated now, it would see other batches and other held-out tasks.

Proven intact: `save` stores the sha256 of the checkpoint's contents (every tensor's dtype, shape and
bytes, and every other value, keys and order included) in the checkpoint itself, so it is written
atomically with them; `load` recomputes it, and contents that differ are damage, wherever the bytes
changed (the optimizer's moments, say, which torch's reader does not check). A checkpoint written
before hyla stored the sha256 still loads, with a warning that it cannot be verified.

Durable: `save` writes a temporary file, flushes it to disk, renames the current `latest.pt` to
`previous.pt` and the new file to `latest.pt`. A crash at any moment leaves at least one complete
checkpoint; `load_latest` falls back to `previous.pt` when `latest.pt` is missing or unreadable.
"""

from __future__ import annotations

import hashlib
import os
import pickle
import warnings
from pathlib import Path
from typing import Any

import torch

# 1: hyla before commit 70d6945 (full pickle, numpy and python RNG states); 2: plain data, batches from torch's CPU
# generator; 3: batches from the counter-based stream (hyla.tasks.random).
FORMAT = 3
EARLIER_STREAM_FORMAT = 2
CHECKSUM = "sha256"
"""the key of the contents' sha256 (`content_sha256` of the rest of the checkpoint)"""


class CheckpointError(RuntimeError):
    """A checkpoint that cannot be loaded safely or at all; the message says why."""


def save(state: dict[str, Any], latest: Path, previous: Path) -> None:
    """Write `state` as the new `latest`, keeping the old one as `previous`."""
    _check_plain(state)
    latest.parent.mkdir(parents=True, exist_ok=True)
    tmp = latest.with_name(f".{latest.name}.tmp-{os.getpid()}")
    try:
        with open(tmp, "wb") as f:
            contents = {**state, "format": FORMAT}
            torch.save({**contents, CHECKSUM: content_sha256(contents)}, f)
            f.flush()
            os.fsync(f.fileno())
        if latest.exists():
            os.replace(latest, previous)
        os.replace(tmp, latest)
    finally:
        tmp.unlink(missing_ok=True)
    _fsync_dir(latest.parent)  # make the renames themselves durable


def load(path: Path, map_location: str | torch.device = "cpu") -> dict[str, Any]:
    """The checkpoint at `path`, loaded without unpickling anything but tensors and plain data."""
    try:
        state = torch.load(path, map_location=map_location, weights_only=True)
    except FileNotFoundError:
        raise CheckpointError(f"{path} does not exist") from None
    except pickle.UnpicklingError as e:
        if "Unsupported global" not in str(e):  # a byte that is no pickle instruction: not a pickle at all
            raise CheckpointError(_damaged(path)) from None
        raise CheckpointError(
            f"{path} needs unsafe unpickling ({_unsafe_global(e)}); hyla never runs code from a checkpoint "
            "(checkpoints from before commit 70d6945 are refused for this reason: re-train, or resume that run "
            "with hyla from before it)"
        ) from None
    except Exception:  # noqa: BLE001 - damaged bytes fail anywhere in torch's reader (KeyError, struct.error, ...)
        raise CheckpointError(_damaged(path)) from None
    if isinstance(state, dict) and state.get("format") == EARLIER_STREAM_FORMAT:
        raise CheckpointError(
            f"{path} is from a run whose batches and held-out tasks came from hyla's earlier random stream; "
            "this version would resume or evaluate it on other data: use hyla at commit 1f7890a or earlier"
        )
    if not isinstance(state, dict) or state.get("format") != FORMAT:
        raise CheckpointError(f"{path} is not a hyla checkpoint of format {FORMAT}")
    return _verified(state, path)


def content_sha256(value) -> str:
    """sha256 of a checkpoint's contents: tensors by dtype, shape and bytes (wherever they are), the
    rest by type and value, containers in order."""
    digest = hashlib.sha256()
    _hash_into(digest, value)
    return digest.hexdigest()


def _hash_into(digest, value) -> None:
    if isinstance(value, torch.Tensor):
        tensor = value.detach().cpu().contiguous().reshape(-1)
        digest.update(f"tensor {tensor.dtype} {tuple(value.shape)};".encode())
        digest.update(tensor.view(torch.uint8).numpy())
    elif isinstance(value, dict):
        digest.update(f"dict {len(value)};".encode())
        for key, item in value.items():
            _hash_into(digest, key)
            _hash_into(digest, item)
    elif isinstance(value, (list, tuple)):
        digest.update(f"{type(value).__name__} {len(value)};".encode())
        for item in value:
            _hash_into(digest, item)
    else:
        digest.update(f"{type(value).__name__} {value!r};".encode())


def _verified(state: dict, path: Path) -> dict:
    """`state` without its sha256, once its contents match it; CheckpointError when they do not."""
    stored = state.pop(CHECKSUM, None)
    if stored is None:
        unverified = f"{path} has no sha256 (written before hyla stored one): its contents cannot be verified"
        warnings.warn(unverified, stacklevel=4)
    elif stored != content_sha256(state):
        raise CheckpointError(f"{path} is damaged (its contents do not match the sha256 stored with them)")
    return state


def load_latest(latest: Path, previous: Path, map_location: str | torch.device = "cpu") -> tuple[dict, Path, str]:
    """(state, the file it came from, a note: "" or why `latest` was skipped).

    Falls back to `previous` when `latest` is missing or unreadable; raises CheckpointError when
    neither loads.
    """
    try:
        return load(latest, map_location), latest, ""
    except CheckpointError as error:
        if not previous.exists():
            raise
        note = f"{error}; using the previous checkpoint {previous}"
        try:
            return load(previous, map_location), previous, note
        except CheckpointError as second:
            too = str(second).replace(str(previous), previous.name)  # one line: its folder was named already
            raise CheckpointError(f"{error}; the previous checkpoint is unusable too: {too}") from None


PLAIN_TYPES = (str, int, float, bool, type(None), torch.Tensor)


def _check_plain(value, where: str = "state") -> None:
    """Refuse to write what `weights_only=True` could not read back: anything but tensors, numbers,
    strings and dicts / lists / tuples of them (exact types: a str subclass is pickled as its class)."""
    if isinstance(value, dict):
        for key, item in value.items():
            _check_plain(key, f"{where} key")
            _check_plain(item, f"{where}[{key!r}]")
    elif isinstance(value, (list, tuple)) and type(value) in (list, tuple):
        for index, item in enumerate(value):
            _check_plain(item, f"{where}[{index}]")
    elif type(value) not in PLAIN_TYPES and not isinstance(value, torch.Tensor):
        raise TypeError(f"{where} is a {type(value).__name__}: checkpoints hold tensors and plain data only")


def _unsafe_global(error: pickle.UnpicklingError) -> str:
    """The object torch refused to unpickle, from its long message."""
    for line in str(error).splitlines():
        if "Unsupported global" in line:
            return line.split("error:")[-1].strip().split(" was not an allowed")[0]
    return "an object that is not a tensor or plain data"


def _damaged(path: Path) -> str:
    """What a file that does not load as a checkpoint is (torch's reason names its internals only)."""
    try:
        size = f"{path.stat().st_size:,} bytes"
    except OSError as e:
        return f"{path} is unreadable ({e.strerror})"
    return f"{path} is damaged ({size}: cut short, overwritten, or not a checkpoint)"


def _fsync_dir(folder: Path) -> None:
    try:
        fd = os.open(folder, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)
