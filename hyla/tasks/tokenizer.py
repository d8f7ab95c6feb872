"""Byte-level BPE tokenizers trained on a corpus with the `tokenizers` library, cached on disk.

Byte-level means every string can be encoded (no unknown token) and decoding gives the text
back exactly. Documents are separated by one special token, `END_OF_TEXT` (id 0).
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Iterator
from pathlib import Path

from tokenizers import Tokenizer, decoders, models, pre_tokenizers, trainers

END_OF_TEXT = "<|endoftext|>"
MIN_VOCAB_SIZE = 256 + 1  # the byte alphabet and END_OF_TEXT


def train_bpe(texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """A byte-level BPE tokenizer of at most `vocab_size` tokens trained on `texts`.

    The vocabulary can come out smaller than asked on a tiny corpus (no more merges to make);
    the model's embedding is sized with `Tokenizer.get_vocab_size()`, not the request.
    """
    if vocab_size < MIN_VOCAB_SIZE:
        raise ValueError(f"vocab_size must be at least {MIN_VOCAB_SIZE} (256 bytes + {END_OF_TEXT}), got {vocab_size}")
    tokenizer = Tokenizer(models.BPE())
    tokenizer.pre_tokenizer = pre_tokenizers.ByteLevel(add_prefix_space=False)
    tokenizer.decoder = decoders.ByteLevel()
    trainer = trainers.BpeTrainer(
        vocab_size=vocab_size,
        special_tokens=[END_OF_TEXT],
        initial_alphabet=pre_tokenizers.ByteLevel.alphabet(),
        show_progress=False,
    )
    tokenizer.train_from_iterator(texts, trainer=trainer)
    return tokenizer


def load_or_train_bpe(path: Path, texts: Iterable[str], vocab_size: int) -> Tokenizer:
    """The tokenizer cached at `path`, trained on `texts` and saved there first if missing.

    The caller keys `path` by the corpus hash and `vocab_size`, so a cached file always belongs
    to the same corpus. The file is written atomically (no half-written cache after a crash).
    """
    if path.exists():
        return Tokenizer.from_file(str(path))
    tokenizer = train_bpe(texts, vocab_size)
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_name(f"{path.name}.{os.getpid()}.partial")
    tokenizer.save(str(partial))
    os.replace(partial, path)
    return tokenizer


def end_of_text_id(tokenizer: Tokenizer) -> int:
    token_id = tokenizer.token_to_id(END_OF_TEXT)
    if token_id is None:
        raise ValueError(f"the tokenizer has no {END_OF_TEXT} token: was it trained by hyla?")
    return token_id


def encode_documents(tokenizer: Tokenizer, documents: Iterable[str], batch_size: int = 1024) -> Iterator[list[int]]:
    """Token ids of each document followed by END_OF_TEXT (batched: `encode_batch` is parallel)."""
    eot = end_of_text_id(tokenizer)
    batch: list[str] = []
    for document in documents:
        batch.append(document)
        if len(batch) == batch_size:
            yield from (encoding.ids + [eot] for encoding in tokenizer.encode_batch(batch))
            batch = []
    if batch:
        yield from (encoding.ids + [eot] for encoding in tokenizer.encode_batch(batch))
