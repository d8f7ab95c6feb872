"""The text pipeline: corpus → cached BPE tokenizer → cached token streams → seeded windows."""

import random
import sys
import types

import numpy as np
import pytest
import torch

from hyla.tasks import text as text_module
from hyla.tasks import tokenizer as tokenizer_module
from hyla.tasks.text import Text, open_corpus, split_documents
from hyla.tasks.tokenizer import END_OF_TEXT

WORDS = (
    "the model attends to every key and the value network maps each token while a "
    "hypernetwork generates weights from latent codes so heads compose into new functions"
).split()


def make_corpus(folder, files=3, sentences=150, seed=0):
    """A few files of random sentences (deterministic): enough text for a 300-token BPE."""
    rng = random.Random(seed)
    folder.mkdir(parents=True, exist_ok=True)
    for i in range(files):
        lines = [
            " ".join(rng.choice(WORDS) for _ in range(rng.randint(4, 12))).capitalize() + "." for _ in range(sentences)
        ]
        (folder / f"part{i}.txt").write_text("\n".join(lines) + "\n")
    return folder


@pytest.fixture
def corpus(tmp_path):
    return make_corpus(tmp_path / "corpus")


@pytest.fixture
def task(corpus, tmp_path):
    return Text(str(corpus), seq_len=16, vocab_size=300, valid_fraction=0.1, seed=0, cache_dir=tmp_path / "cache")


def test_tokenizer_trains_and_is_cached(corpus, tmp_path, monkeypatch):
    first = Text(str(corpus), seq_len=16, vocab_size=300, cache_dir=tmp_path / "cache")
    assert first.vocab_size == 300
    assert (first.cache_folder / "bpe-300.json").exists()
    assert (first.cache_folder / "tokens-bpe-300-train.bin").exists()
    assert first.tokenizer.token_to_id(END_OF_TEXT) == first.end_of_text

    def no_training(*args, **kwargs):
        raise AssertionError("the cached tokenizer should have been used")

    monkeypatch.setattr(tokenizer_module, "train_bpe", no_training)
    monkeypatch.setattr(text_module, "write_token_stream", no_training)
    second = Text(str(corpus), seq_len=16, vocab_size=300, cache_dir=tmp_path / "cache")
    assert second.cache_folder == first.cache_folder
    np.testing.assert_array_equal(second.streams["train"], first.streams["train"])
    assert second.tokenizer.to_str() == first.tokenizer.to_str()


def test_cache_is_keyed_by_content_and_vocab_size(corpus, tmp_path):
    cache = tmp_path / "cache"
    a = Text(str(corpus), seq_len=16, vocab_size=300, cache_dir=cache)
    b = Text(str(corpus), seq_len=16, vocab_size=280, cache_dir=cache)
    assert a.cache_folder == b.cache_folder and b.vocab_size == 280
    (corpus / "part0.txt").write_text((corpus / "part0.txt").read_text() + "One more line.\n")
    c = Text(str(corpus), seq_len=16, vocab_size=300, cache_dir=cache)
    assert c.cache_folder != a.cache_folder


def test_round_trip_and_valid_is_the_disjoint_tail(corpus, task):
    """Decoding train then valid gives the corpus back: the two splits partition it, valid last."""
    original = "".join(p.read_text() for p in sorted(corpus.glob("*.txt")))
    train_text = task.decode(task.streams["train"]).replace(END_OF_TEXT, "")
    valid_text = task.decode(task.streams["valid"]).replace(END_OF_TEXT, "")
    assert train_text + valid_text == original
    assert 0.05 < len(valid_text) / len(original) < 0.15
    assert valid_text.startswith(original[len(train_text) : len(train_text) + 50])


def test_split_documents_cuts_at_a_line_break():
    train, valid = split_documents(["aaaa\nbbbb\n", "cccc\ndddd\n"], 0.3)
    assert train == ["aaaa\nbbbb\n", "cccc\n"] and valid == ["dddd\n"]
    with pytest.raises(ValueError, match="too small"):
        split_documents(["abc"], 0.5)


def test_packing_targets_shift_by_one(task):
    batch = task.batch("train", 8, step=3)
    assert batch.x.shape == batch.y.shape == (8, 16) and batch.x.dtype == torch.long
    torch.testing.assert_close(batch.y[:, :-1], batch.x[:, 1:])
    stream = torch.from_numpy(task.streams["train"].astype(np.int64))
    for row, start in enumerate(batch.info["start"].tolist()):
        torch.testing.assert_close(batch.x[row], stream[start : start + 16])
        assert batch.y[row, -1] == stream[start + 16]


@pytest.mark.parametrize("dtype", [np.uint16, np.uint32])
def test_ids_past_the_signed_range_survive_the_signed_view(dtype):
    top = np.iinfo(dtype).max
    ids = np.array([0, 1, 300, top // 2, top // 2 + 1, top - 1, top], dtype=dtype)
    tokens = text_module._signed_tokens(ids)
    offsets = torch.tensor([[6, 0, 4], [3, 5, 2]])
    assert torch.equal(text_module.gather_ids(tokens, offsets), torch.from_numpy(ids.astype(np.int64))[offsets])


def test_batches_are_deterministic_and_seeded(task, corpus, tmp_path):
    a, b = task.batch("train", 8, step=5), task.batch("train", 8, step=5)
    torch.testing.assert_close(a.x, b.x)
    assert not torch.equal(a.x, task.batch("train", 8, step=6).x)
    other_seed = Text(str(corpus), seq_len=16, vocab_size=300, valid_fraction=0.1, seed=1, cache_dir=tmp_path / "cache")
    assert not torch.equal(a.x, other_seed.batch("train", 8, step=5).x)


@pytest.mark.parametrize("split", ["train", "valid"])
def test_rank_slices_make_the_global_batch(task, split):
    full = task.batch(split, 8, step=2)
    parts = [task.batch(split, 8, step=2, rank=r, world_size=4) for r in range(4)]
    torch.testing.assert_close(torch.cat([p.x for p in parts]), full.x)
    torch.testing.assert_close(torch.cat([p.y for p in parts]), full.y)
    with pytest.raises(ValueError):
        task.batch(split, 6, step=0, rank=0, world_size=4)


def test_valid_windows_tile_the_split_once(task):
    windows = task.num_windows("valid")
    batch_size = 4
    steps = -(-windows // batch_size)
    starts = torch.cat([task.batch("valid", batch_size, s).info["start"] for s in range(steps)])[:windows]
    assert starts.tolist() == [w * task.seq_len for w in range(windows)]
    assert starts.max() + task.seq_len + 1 <= len(task.streams["valid"])


def test_loss_and_metrics(task):
    batch = task.batch("valid", 4, step=0)
    logits = torch.zeros(4, 16, task.vocab_size)
    assert task.loss(logits, batch).item() == pytest.approx(np.log(task.vocab_size), rel=1e-5)
    metrics = task.metrics(logits, batch)
    assert metrics["nll"].shape == (4,)
    torch.testing.assert_close(metrics["nll"], torch.full((4,), float(np.log(task.vocab_size))))
    assert task.input_dim == 0 and task.num_outputs == 0 and task.causal and task.output_dim == task.vocab_size
    assert task.eval_splits == ("valid",) and task.metric_name == "nll"


def test_missing_corpus_path(tmp_path):
    with pytest.raises(FileNotFoundError, match="does not exist"):
        Text(str(tmp_path / "nowhere.txt"), cache_dir=tmp_path / "cache")


def test_empty_file_and_folder_without_text(tmp_path):
    empty = tmp_path / "empty.txt"
    empty.write_text("  \n")
    with pytest.raises(ValueError, match="is empty"):
        Text(str(empty), cache_dir=tmp_path / "cache")
    folder = tmp_path / "folder"
    folder.mkdir()
    (folder / "data.bin").write_bytes(b"\x00\x01")
    with pytest.raises(FileNotFoundError, match="no text files"):
        Text(str(folder), cache_dir=tmp_path / "cache")
    (folder / "a.txt").write_text("")
    with pytest.raises(ValueError, match="empty"):
        Text(str(folder), cache_dir=tmp_path / "cache")


def test_corpus_too_small_for_a_window(corpus, tmp_path):
    with pytest.raises(ValueError, match="fewer than one window"):
        Text(str(corpus), seq_len=5000, vocab_size=300, cache_dir=tmp_path / "cache")


def test_vocab_mismatch(task):
    task.check_vocab(task.vocab_size)
    with pytest.raises(ValueError, match="vocabulary"):
        task.check_vocab(task.vocab_size + 1)


def test_hf_source_without_datasets(monkeypatch):
    monkeypatch.setitem(sys.modules, "datasets", None)  # import datasets -> ImportError
    corpus = open_corpus("hf:wikitext:wikitext-103-raw-v1")
    with pytest.raises(ImportError, match="hyla\\[hf\\]"):
        corpus.splits()
    with pytest.raises(ValueError, match="hf:NAME"):
        open_corpus("hf:a:b:c")


def fake_datasets(rows, fail=False):
    """A stand-in for the `datasets` package: load_dataset(name, config, streaming=True)."""

    def load_dataset(name, config=None, streaming=False):
        if fail:
            raise ConnectionError("no network")
        assert streaming
        return rows

    return types.SimpleNamespace(load_dataset=load_dataset)


def test_hf_source_streams_its_own_splits(monkeypatch, tmp_path):
    rng = random.Random(0)
    line = lambda: " ".join(rng.choice(WORDS) for _ in range(10)) + "\n"  # noqa: E731
    rows = {"train": [{"text": line()} for _ in range(600)], "validation": [{"text": line()} for _ in range(60)]}
    monkeypatch.setitem(sys.modules, "datasets", fake_datasets(rows))
    task = Text("hf:wikitext:wikitext-2-raw-v1", seq_len=16, vocab_size=300, cache_dir=tmp_path)
    assert task.cache_folder.name.startswith("wikitext-wikitext-2-raw-v1-")
    valid_text = task.decode(task.streams["valid"]).replace(END_OF_TEXT, "")
    assert valid_text == "".join(r["text"] for r in rows["validation"])
    # C4-like rows are documents; max_chars cuts the stream
    monkeypatch.setitem(sys.modules, "datasets", fake_datasets(rows))
    capped = Text("hf:allenai/c4:en", seq_len=16, vocab_size=300, cache_dir=tmp_path, max_chars=20_000)
    train_text = capped.decode(capped.streams["train"])
    assert train_text.count(END_OF_TEXT) < 600 and len(train_text.replace(END_OF_TEXT, "")) == 20_000


def test_hf_source_unreachable(monkeypatch, tmp_path):
    monkeypatch.setitem(sys.modules, "datasets", fake_datasets({}, fail=True))
    with pytest.raises(RuntimeError, match="could not load the Hugging Face dataset"):
        Text("hf:allenai/c4:en", cache_dir=tmp_path)


def test_builtin_corpus_is_there():
    train, valid = open_corpus("builtin:pydoc_topics").splits()
    assert sum(map(len, train)) > 300_000 and sum(map(len, valid)) > 10_000
    with pytest.raises(ValueError, match="unknown builtin"):
        open_corpus("builtin:nope")


@pytest.mark.slow
def test_builtin_python_docs_tokenizes(tmp_path):
    task = Text("builtin:python_docs", seq_len=64, vocab_size=4096, cache_dir=tmp_path)
    assert task.vocab_size == 4096 and len(task.streams["train"]) > 400_000


def test_tokenizer_training_is_deterministic(corpus):
    """A deleted cache is rebuilt identically, so a run's checkpoint keeps matching its tokenizer."""
    train, _ = open_corpus(str(corpus)).splits()
    first, second = tokenizer_module.train_bpe(train, 300), tokenizer_module.train_bpe(train, 300)
    assert first.to_str() == second.to_str()
