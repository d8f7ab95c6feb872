"""Language modeling on a text corpus (docs/tasks.md): corpus → BPE tokenizer → cached token stream → windows.

Corpus sources (the `corpus` string):
- a local file or folder (every `*.txt`, `*.md`, `*.rst`, `*.text` file below it, sorted by
  path; each file is one document);
- `builtin:python_docs`: the Python documentation that ships with the interpreter — the
  language-reference topics of `pydoc_data.topics` plus the docstrings of the standard library
  (≈1.8 MB of English technical prose, no network, always installed); `builtin:pydoc_topics`
  is the topics alone (≈0.46 MB);
- `hf:NAME[:CONFIG]`, a Hugging Face dataset with a `text` column, e.g.
  `hf:wikitext:wikitext-103-raw-v1` or `hf:allenai/c4:en` (needs `pip install 'hyla[hf]'` and the
  network; streamed, so `max_chars` can cut C4 to a size that fits).

Preparation happens once and is cached under `cache_dir` (default `$HYLA_CACHE` or
`~/.cache/hyla`), in a folder keyed by a hash of the corpus content (local files) or of its
name (builtin: with the Python version; hf: with `max_chars`) and of `valid_fraction`:
`bpe-<V>.json` (the tokenizer), `tokens-bpe-<V>-{train,valid}.bin` (the token streams: raw
uint16 — uint32 past 65,536 tokens — read memory-mapped). Documents are separated by the
end-of-text token. Sources are streamed while tokenizing, so a corpus need not fit in memory.

Splits: `valid` is the last `valid_fraction` of the corpus text, cut at a line break (a dataset's
own `validation` split for hf sources that have one); `train` is everything before it. The
tokenizer is trained on `train` only, so nothing of `valid` leaks into training.

Batches (x [B, seq_len] long, y [B, seq_len] = x shifted by one): `train` rows are random windows
of seq_len + 1 tokens, their starts drawn from the task's `RandomStream` for (seed, split, step);
`valid` tiles the validation stream into consecutive windows (stride seq_len), so steps 0, 1, …
cover it exactly once (`num_windows("valid")` windows) before wrapping around. Both are pure
functions of (seed, split, step); rank r of W computes rows r·B/W … (r+1)·B/W of the global batch.
The token streams stay memory-mapped on the host (a corpus can be far larger than a GPU's
memory): a batch's window starts are drawn and its windows gathered there, from the same random
bits as on any device, and only the [B, seq_len + 1] windows are copied to the task's device.
"""

from __future__ import annotations

import ast
import hashlib
import json
import math
import os
import sys
import sysconfig
from collections.abc import Callable, Iterable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
import torch.nn.functional as F
from tokenizers import Tokenizer

from hyla.tasks.base import Batch, Task
from hyla.tasks.random import integers
from hyla.tasks.tokenizer import encode_documents, end_of_text_id, load_or_train_bpe
from hyla.utils import switches

TEXT_SUFFIXES = (".txt", ".md", ".rst", ".text")
BUILTIN_CORPORA = ("python_docs", "pydoc_topics")
CACHE_FORMAT = 1  # bump when the cached files change meaning
TOKENIZER_TRAIN_CHARS = 500_000_000
"""the tokenizer is trained on at most the first 500 MB of the train text (C4 is far larger)"""


# ---------------------------------------------------------------------------------------------
# Corpus sources


@dataclass
class Corpus:
    """A corpus before tokenization.

    name: short readable name (used in the cache folder name).
    key: hex digest that changes whenever the documents can change.
    splits: () -> (train documents, valid documents), fresh iterables at every call (large hf
        corpora are streamed, never held in memory).
    """

    name: str
    key: str
    splits: Callable[[], tuple[Iterable[str], Iterable[str]]]


def open_corpus(source: str, valid_fraction: float = 0.05, max_chars: int | None = None) -> Corpus:
    """Resolve a corpus string (see the module docstring) without tokenizing anything."""
    if not 0.0 < valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must lie in (0, 1), got {valid_fraction}")
    if source.startswith("hf:"):
        parts = source.removeprefix("hf:").split(":")
        if len(parts) > 2 or not parts[0]:
            raise ValueError(f"expected hf:NAME or hf:NAME:CONFIG, got {source!r}")
        name, config = parts[0], (parts[1] if len(parts) == 2 else None)
        key = _digest("hf", name, config, max_chars, valid_fraction)
        return Corpus(
            name.replace("/", "_") + (f"-{config}" if config else ""),
            key,
            lambda: _hf_splits(name, config, valid_fraction, max_chars),
        )
    if source.startswith("builtin:"):
        name = source.removeprefix("builtin:")
        if name not in BUILTIN_CORPORA:
            raise ValueError(f"unknown builtin corpus {name!r}; valid: {', '.join(BUILTIN_CORPORA)}")
        key = _digest("builtin", name, sys.version, max_chars, valid_fraction)
        return Corpus(name, key, lambda: split_documents(_cap(_builtin_documents(name), max_chars), valid_fraction))
    documents, content_key = _local_documents(Path(source).expanduser())
    key = _digest("local", content_key, max_chars, valid_fraction)
    return Corpus(
        Path(source).name or "corpus", key, lambda: split_documents(_cap(documents, max_chars), valid_fraction)
    )


def _digest(*parts) -> str:
    return hashlib.sha256(repr(parts).encode()).hexdigest()


def _cap(documents: Iterable[str], max_chars: int | None) -> Iterator[str]:
    """The leading documents holding at most max_chars characters (the last one cut)."""
    total = 0
    for document in documents:
        if max_chars is not None and total + len(document) >= max_chars:
            if max_chars > total:
                yield document[: max_chars - total]
            return
        total += len(document)
        yield document


def _local_documents(path: Path) -> tuple[list[str], str]:
    if not path.exists():
        raise FileNotFoundError(
            f"corpus path {str(path)!r} does not exist (a text file, a folder of "
            f"{'/'.join(TEXT_SUFFIXES)} files, builtin:NAME or hf:NAME[:CONFIG])"
        )
    if path.is_file():
        files = [path]
    else:
        files = sorted(
            p
            for p in path.rglob("*")
            if p.is_file()
            and p.suffix.lower() in TEXT_SUFFIXES
            and not any(part.startswith(".") for part in p.relative_to(path).parts)
        )
        if not files:
            raise FileNotFoundError(f"corpus folder {str(path)!r} holds no text files ({', '.join(TEXT_SUFFIXES)})")
    documents, digest = [], hashlib.sha256()
    for file in files:
        raw = file.read_bytes()
        try:
            text = raw.decode("utf-8")
        except UnicodeDecodeError as error:
            raise ValueError(f"corpus file {str(file)!r} is not UTF-8 text: {error}") from None
        if text.strip():
            documents.append(text)
            digest.update(str(file.relative_to(path) if path.is_dir() else file.name).encode() + b"\0")
            digest.update(raw + b"\0")
        elif path.is_file():
            raise ValueError(f"corpus file {str(file)!r} is empty")
    if not documents:
        raise ValueError(f"every text file in corpus folder {str(path)!r} is empty")
    return documents, digest.hexdigest()


def _builtin_documents(name: str) -> list[str]:
    """The Python documentation shipped with this interpreter (no network, no install)."""
    from pydoc_data.topics import topics

    documents = [topics[key] for key in sorted(topics)]
    if name == "pydoc_topics":
        return documents
    stdlib = Path(sysconfig.get_paths()["stdlib"])
    return documents + source_docstrings(stdlib, {"test", "tests", "idle_test", "site-packages", "dist-packages"})


def source_docstrings(root: Path, skipped: set[str]) -> list[str]:
    """The docstrings of >= 100 characters (one-liners such as "Return self." are left out) of every
    module, class and function in the .py files below `root`, except in folders named in `skipped`."""
    documents = []
    for file in sorted(root.rglob("*.py")):
        if skipped & set(file.relative_to(root).parts):
            continue
        try:
            tree = ast.parse(file.read_text(encoding="utf-8"))
        except (SyntaxError, UnicodeDecodeError, ValueError):
            continue
        for node in ast.walk(tree):
            if isinstance(node, (ast.Module, ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)):
                docstring = ast.get_docstring(node)
                if docstring and len(docstring) >= 100:
                    documents.append(docstring)
    return documents


def _hf_splits(
    name: str, config: str | None, valid_fraction: float, max_chars: int | None
) -> tuple[Iterable[str], Iterable[str]]:
    try:
        import datasets
    except ImportError:
        raise ImportError(
            f"corpus hf:{name} needs the `datasets` package: pip install 'hyla[hf]' "
            "(or point corpus at local text files or builtin:python_docs)"
        ) from None
    try:
        splits = datasets.load_dataset(name, config, streaming=True)
    except Exception as error:  # the network, the hub or the dataset name: all end the same way
        raise RuntimeError(
            f"could not load the Hugging Face dataset {name!r} (config {config!r}): {error}. "
            "Without network access, point corpus at local text files or builtin:python_docs"
        ) from error
    # WikiText rows are single lines (an article spans many rows): join them into chunks;
    # other datasets (C4) have one document per row.
    rows_are_lines = "wikitext" in name.lower()

    def documents(split: str) -> Iterator[str]:
        chunk = []
        for row in splits[split]:
            text = row["text"]
            if not rows_are_lines:
                if text.strip():
                    yield text
                continue
            chunk.append(text)
            if len(chunk) == 10_000:
                yield "".join(chunk)
                chunk = []
        if chunk:
            yield "".join(chunk)

    if "validation" not in splits:  # hold out the tail, as for local corpora (in memory)
        return split_documents(list(_cap(documents("train"), max_chars)), valid_fraction)
    valid_chars = None if max_chars is None else max(int(max_chars * valid_fraction), 1)
    return _Reiterable(lambda: _cap(documents("train"), max_chars)), _Reiterable(
        lambda: _cap(documents("validation"), valid_chars)
    )


class _Reiterable:
    """An iterable that restarts a generator at every iteration (a stream read more than once)."""

    def __init__(self, make: Callable[[], Iterator[str]]):
        self.make = make

    def __iter__(self) -> Iterator[str]:
        return self.make()


def split_documents(documents: Iterable[str], valid_fraction: float) -> tuple[list[str], list[str]]:
    """(train, valid): valid is the last `valid_fraction` of the text, cut at a line break."""
    if not 0.0 < valid_fraction < 1.0:
        raise ValueError(f"valid_fraction must lie in (0, 1), got {valid_fraction}")
    documents = list(documents)
    total = sum(len(d) for d in documents)
    cut = total - math.ceil(total * valid_fraction)  # character position of the cut
    seen = 0
    train, valid = documents, []
    for index, document in enumerate(documents):
        if seen + len(document) > cut:
            newline = document.find("\n", cut - seen)
            position = len(document) if newline < 0 else newline + 1
            train = documents[:index] + [document[:position]]
            valid = [document[position:]] + documents[index + 1 :]
            break
        seen += len(document)
    train = [d for d in train if d]
    valid = [d for d in valid if d]
    if not train or not valid:
        raise ValueError(f"the corpus ({total} characters) is too small to hold out valid_fraction={valid_fraction}")
    return train, valid


# ---------------------------------------------------------------------------------------------
# Tokenized, cached corpus


@dataclass
class TokenizedCorpus:
    tokenizer: Tokenizer
    train: np.ndarray
    """token ids [N_train] (memory-mapped)"""
    valid: np.ndarray
    """token ids [N_valid] (memory-mapped)"""
    folder: Path


def prepare_corpus(
    source: str,
    vocab_size: int,
    valid_fraction: float = 0.05,
    cache_dir: str | Path | None = None,
    max_chars: int | None = None,
) -> TokenizedCorpus:
    """Tokenizer + token streams of `source`, read from the cache or made (once) and cached."""
    corpus = open_corpus(source, valid_fraction, max_chars)
    folder = Path(cache_dir) if cache_dir is not None else switches().cache / "text"
    folder = folder / f"{corpus.name}-{_digest(CACHE_FORMAT, corpus.key)[:16]}"
    tokenizer_path = folder / f"bpe-{vocab_size}.json"
    stream_paths = {split: folder / f"tokens-bpe-{vocab_size}-{split}.bin" for split in ("train", "valid")}
    if not (tokenizer_path.exists() and all(p.exists() for p in stream_paths.values())):
        print(f"preparing corpus {source!r} (once; cached in {folder})", file=sys.stderr)
        train, valid = corpus.splits()
        tokenizer = load_or_train_bpe(tokenizer_path, _cap(train, TOKENIZER_TRAIN_CHARS), vocab_size)
        for split, documents in (("train", train), ("valid", valid)):
            write_token_stream(tokenizer, documents, stream_paths[split])
        meta = {
            "source": source,
            "max_chars": max_chars,
            "valid_fraction": valid_fraction,
            "tokens": {
                split: int(path.stat().st_size // _token_dtype(vocab_size).itemsize)
                for split, path in stream_paths.items()
            },
        }
        (folder / f"corpus-bpe-{vocab_size}.json").write_text(json.dumps(meta, indent=1))
    tokenizer = Tokenizer.from_file(str(tokenizer_path))
    dtype = _token_dtype(tokenizer.get_vocab_size())
    # copy-on-write: a writable mapping (torch.from_numpy warns about read-only arrays) that
    # never writes to the file
    streams = {
        split: np.memmap(path, dtype=dtype, mode="c") if path.stat().st_size else np.zeros(0, dtype)
        for split, path in stream_paths.items()
    }
    return TokenizedCorpus(tokenizer, streams["train"], streams["valid"], folder)


def _token_dtype(vocab_size: int) -> np.dtype:
    return np.dtype(np.uint16 if vocab_size <= np.iinfo(np.uint16).max + 1 else np.uint32)


def write_token_stream(tokenizer: Tokenizer, documents: Iterable[str], path: Path) -> None:
    """Write every document, each followed by end-of-text, as one flat raw array of token ids
    (uint16 when the vocabulary fits, else uint32), streamed and written atomically."""
    dtype = _token_dtype(tokenizer.get_vocab_size())
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    with open(partial, "wb") as file:
        pending = []
        for ids in encode_documents(tokenizer, documents):
            pending.extend(ids)
            if len(pending) >= 1 << 20:  # keep Python int lists short: 1M ids at a time
                file.write(np.asarray(pending, dtype=dtype).tobytes())
                pending = []
        file.write(np.asarray(pending, dtype=dtype).tobytes())
    os.replace(partial, path)


# ---------------------------------------------------------------------------------------------
# The task


class Text(Task):
    """Next-token prediction on a tokenized corpus.

    Args:
        corpus: a local file/folder, `builtin:NAME` or `hf:NAME[:CONFIG]` (module docstring).
        seq_len: tokens per input row T (each window holds T + 1 tokens).
        vocab_size: BPE vocabulary size requested; `self.vocab_size` is the tokenizer's actual
            size (smaller only for a corpus too tiny to learn that many merges).
        valid_fraction: last fraction of the text held out for `valid`.
        seed: seeds the train windows.
        cache_dir: where tokenizer and token streams are cached (None or "": `$HYLA_CACHE/text`).
        max_chars: read at most this many characters of the corpus (large hf corpora; None or 0: all).

    batch(...) -> Batch(x [B, T] long, y [B, T] long (x shifted by one), info {"start": [B]}).
    """

    name = "text"
    splits = ("train", "valid")
    eval_splits = ("valid",)
    metric_name = "nll"
    input_dim = 0
    num_outputs = 0
    causal = True

    def __init__(
        self,
        corpus: str = "builtin:python_docs",
        seq_len: int = 128,
        vocab_size: int = 6144,
        valid_fraction: float = 0.05,
        seed: int = 0,
        cache_dir: str | Path | None = None,
        max_chars: int | None = None,
        device: torch.device | str = "cpu",
    ):
        if seq_len < 1:
            raise ValueError(f"seq_len must be positive, got {seq_len}")
        self.corpus, self.seq_len, self.seed, self.device = corpus, seq_len, seed, torch.device(device)
        prepared = prepare_corpus(corpus, vocab_size, valid_fraction, cache_dir or None, max_chars or None)
        self.tokenizer = prepared.tokenizer
        self.streams = {"train": prepared.train, "valid": prepared.valid}
        self._tokens = {split: _signed_tokens(stream) for split, stream in self.streams.items()}
        self.cache_folder = prepared.folder
        self.vocab_size = self.output_dim = self.tokenizer.get_vocab_size()
        self.end_of_text = end_of_text_id(self.tokenizer)
        for split, stream in self.streams.items():
            if len(stream) < seq_len + 1:
                raise ValueError(
                    f"the {split} split has {len(stream)} tokens, fewer than one window of "
                    f"seq_len + 1 = {seq_len + 1}: use a larger corpus or a shorter seq_len"
                )

    def num_windows(self, split: str) -> int:
        """train: distinct window starts; valid: windows in one full pass (stride seq_len)."""
        self.check_split(split)
        n = len(self.streams[split])
        return n - self.seq_len if split == "train" else (n - 1) // self.seq_len

    def _generate(self, split: str, step: int, batch_size: int, rows: tuple[int, int]) -> Batch:
        if split == "train":
            bits = self.random_stream(split, step, "cpu").bits((batch_size,), rows)
            starts = integers(bits, self.num_windows(split))
        else:
            first = step * batch_size
            starts = (torch.arange(first + rows[0], first + rows[1]) % self.num_windows(split)) * self.seq_len
        offsets = starts[:, None] + torch.arange(self.seq_len + 1)  # [B, T + 1]
        windows = gather_ids(self._tokens[split], offsets)
        return Batch(windows[:, :-1], windows[:, 1:], {"start": starts}).to(self.device)

    def loss(self, pred: torch.Tensor, batch: Batch) -> torch.Tensor:
        """Mean next-token cross-entropy; pred: logits [B, T, V]."""
        return F.cross_entropy(pred.flatten(0, 1).float(), batch.y.flatten())

    def metrics(self, pred: torch.Tensor, batch: Batch) -> dict[str, torch.Tensor]:
        """Per sequence [B]: mean nll (nats/token) and next-token accuracy."""
        nll = F.cross_entropy(pred.transpose(1, 2).float(), batch.y, reduction="none")  # [B, T]
        accuracy = (pred.argmax(-1) == batch.y).float()
        return {"nll": nll.mean(1), "accuracy": accuracy.mean(1)}

    def encode(self, text: str) -> list[int]:
        return self.tokenizer.encode(text).ids

    def decode(self, ids) -> str:
        return self.tokenizer.decode(list(ids), skip_special_tokens=False)

    def check_vocab(self, vocab_size: int) -> None:
        """Raise when a model's vocabulary does not match this tokenizer's."""
        if vocab_size != self.vocab_size:
            raise ValueError(
                f"the model has a vocabulary of {vocab_size} tokens but the tokenizer of "
                f"{self.corpus!r} has {self.vocab_size} ({self.cache_folder}): "
                "the run was trained with another tokenizer or vocab_size"
            )


def _signed_tokens(stream: np.ndarray) -> torch.Tensor:
    """A token stream (uint16 or uint32 ids) as a CPU tensor sharing its memory (mapping) and
    holding the same bits in the signed type of that width (which torch can index)."""
    return torch.from_numpy(stream.view(np.int16 if stream.dtype.itemsize == 2 else np.int32))


def gather_ids(tokens: torch.Tensor, offsets: torch.Tensor) -> torch.Tensor:
    """The token ids at `offsets` of a stream from `_signed_tokens`, as int64 (the bits of the
    signed values read back as unsigned)."""
    return tokens[offsets].long() & ((1 << (8 * tokens.element_size())) - 1)
