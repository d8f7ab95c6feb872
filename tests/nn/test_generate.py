"""Incremental decoding: the key/value cache gives the logits of a full forward pass, every mixer."""

import pytest
import torch
from helpers_train import tiny_model_config

from hyla.nn.generate import cache_bytes, generate, sample_next
from hyla.nn.transformer import Transformer
from hyla.ops.mixers import NAMED_MIXERS

VOCAB, SEQ_LEN = 40, 16
LANGUAGE_MODEL = dict(dim=32, qk_dim=16, v_dim=16, mlp_dim=48, feedforward="swiglu", seq_len=SEQ_LEN, causal=True)


def make_model(mixer: str, **overrides) -> Transformer:
    outputs = dict(vocab_size=VOCAB, output_dim=VOCAB, num_outputs=0)
    return Transformer(tiny_model_config(**{**LANGUAGE_MODEL, **outputs, "mixer": mixer, **overrides})).eval()


@pytest.mark.parametrize("mixer", sorted(NAMED_MIXERS))
def test_cached_logits_match_uncached(mixer):
    model = make_model(mixer)
    tokens = torch.randint(VOCAB, (2, 9))
    full = model(tokens)  # [B, 9, V]
    caches = [{} for _ in range(model.cfg.num_layers)]
    prompt_logits = model(tokens[:, :5], kv_caches=caches)
    torch.testing.assert_close(prompt_logits, full[:, :5], rtol=1e-4, atol=1e-5)
    for t in range(5, 9):
        step_logits = model(tokens[:, t : t + 1], kv_caches=caches)
        torch.testing.assert_close(step_logits[:, 0], full[:, t], rtol=1e-4, atol=1e-5)


@pytest.mark.parametrize("mixer", ["softmax", "linear", "hyla"])
def test_greedy_generation_same_with_and_without_cache(mixer):
    model = make_model(mixer)
    prompt = torch.randint(VOCAB, (3, 4))
    cached, stats = generate(model, prompt, 10, temperature=0)
    uncached, _ = generate(model, prompt, 10, temperature=0, use_cache=False)
    assert cached.shape == (3, 14)
    torch.testing.assert_close(cached, uncached)
    assert torch.equal(cached[:, :4], prompt)
    # at its largest the cache held the first 13 tokens (the last one is sampled, never fed back)
    assert stats.cache_bytes == sum(k.nbytes + v.nbytes for k, v in keys_and_values(model, cached[:, :13]))


def keys_and_values(model: Transformer, tokens: torch.Tensor) -> list[tuple[torch.Tensor, torch.Tensor]]:
    """Per layer, the keys and values [B, T, H, D] a full (uncached) forward computes for `tokens`:
    by definition what a cache that has seen these tokens must hold."""
    contexts = []  # per layer: (attention module, the sequence its keys and values are computed from)

    def capture(module, args, kwargs):
        context = args[1] if len(args) > 1 else kwargs.get("context")
        contexts.append((module, args[0] if context is None else context))

    hooks = [block.attention.register_forward_pre_hook(capture, with_kwargs=True) for block in model.blocks]
    try:
        model(tokens)
    finally:
        for hook in hooks:
            hook.remove()
    heads = model.cfg.num_heads
    return [(m.key(c).unflatten(-1, (heads, -1)), m.value(c).unflatten(-1, (heads, -1))) for m, c in contexts]


def test_cache_holds_exactly_the_keys_and_values_of_the_fed_tokens():
    model = make_model("hyla", v_dim=24)  # values wider than keys: the two must not be confused
    tokens = torch.randint(VOCAB, (2, 9))
    caches = [{} for _ in range(model.cfg.num_layers)]
    model(tokens[:, :5], kv_caches=caches)
    for t in range(5, 9):
        model(tokens[:, t : t + 1], kv_caches=caches)
    expected = keys_and_values(model, tokens)
    for cache, (keys, values) in zip(caches, expected):
        assert cache.keys() == {"k", "v"}
        torch.testing.assert_close(cache["k"], keys, rtol=1e-5, atol=1e-6)
        torch.testing.assert_close(cache["v"], values, rtol=1e-5, atol=1e-6)
    assert cache_bytes(caches) == sum(k.nbytes + v.nbytes for k, v in expected)
    assert cache_bytes([{k: t.half() for k, t in cache.items()} for cache in caches]) == cache_bytes(caches) // 2


def test_generation_slides_past_the_context():
    model = make_model("hyla")
    tokens, stats = generate(
        model, torch.randint(VOCAB, (1, 10)), 20, temperature=1.0, generator=torch.Generator().manual_seed(0)
    )
    assert tokens.shape == (1, 30) and stats.window_slides >= 1
    # never more than the keys and values of a full context
    assert stats.cache_bytes <= sum(k.nbytes + v.nbytes for k, v in keys_and_values(model, tokens[:, :SEQ_LEN]))


def test_sampling_is_seeded_and_top_k_restricts():
    logits = torch.tensor([[0.0, 5.0, 4.0, -1.0]]).repeat(200, 1)
    draws = sample_next(logits, 1.0, 2, torch.Generator().manual_seed(0))
    assert set(draws.flatten().tolist()) <= {1, 2}
    again = sample_next(logits, 1.0, 2, torch.Generator().manual_seed(0))
    assert torch.equal(draws, again)
    assert sample_next(logits[:1], 0.0, None, None).item() == 1


def test_prompt_longer_than_the_context():
    model = make_model("softmax")
    with pytest.raises(ValueError, match="longer than the model's context"):
        generate(model, torch.randint(VOCAB, (1, SEQ_LEN + 1)), 1)
    with pytest.raises(ValueError, match="empty"):
        generate(model, torch.zeros(1, 0, dtype=torch.long), 1)


def test_sample_text_checks_the_vocabulary(tmp_path):
    from hyla.nn.generate import sample_text
    from hyla.tasks.text import Text

    words = "the model attends to keys and values while heads compose new functions".split()
    generator = torch.Generator().manual_seed(0)
    lines = [" ".join(words[i] for i in torch.randint(len(words), (8,), generator=generator)) for _ in range(400)]
    (tmp_path / "corpus.txt").write_text("\n".join(lines))
    task = Text(str(tmp_path / "corpus.txt"), seq_len=SEQ_LEN, vocab_size=300, cache_dir=tmp_path / "cache")
    with pytest.raises(ValueError, match="vocabulary"):
        sample_text(make_model("softmax"), task, "the model", 5)
    model = make_model("hyla", vocab_size=task.vocab_size, output_dim=task.vocab_size)
    text, stats = sample_text(model, task, "the model", 5, temperature=0.8, top_k=20)
    assert isinstance(text, str) and stats.new_tokens == 5 and stats.cache_bytes > 0


def test_hyla_sample_command(tmp_path, capsys):
    """Train a tiny language model for a few steps, then `hyla sample` it."""
    from helpers_train import quick_config

    from hyla.cli import main
    from hyla.train import train
    from hyla.train.configs import TextConfig

    words = "the model attends to keys and values while heads compose new functions".split()
    generator = torch.Generator().manual_seed(0)
    lines = [" ".join(words[i] for i in torch.randint(len(words), (8,), generator=generator)) for _ in range(400)]
    (tmp_path / "corpus.txt").write_text("\n".join(lines))
    text = TextConfig(
        corpus=str(tmp_path / "corpus.txt"), seq_len=16, vocab_size=300, cache_dir=str(tmp_path / "cache")
    )
    model = dict(num_layers=1, dim=32, num_heads=4, qk_dim=16, v_dim=16, mlp_dim=32, mixer="hyla")
    cfg = quick_config(
        tmp_path / "runs",
        "lm_cpu",
        "tiny",
        model=model,
        train={"steps": 3},
        optim={"warmup_steps": 1},
        eval={"every": 0, "samples": 8, "final_samples": 8, "batch_size": 8},
        log={"every": 1},
        checkpoint={"every": 3},
        text=text,
    )
    run = train(cfg)
    capsys.readouterr()
    assert main(["sample", str(run), "--prompt", "the model", "--tokens", "5", "--temperature", "0"]) == 0
    captured = capsys.readouterr()
    assert captured.out.startswith("the model") and "key/value cache" in captured.err
    assert main(["sample", str(run), "--prompt", "the model " * 20, "--tokens", "1"]) == 2
    assert "longer than the model's context" in capsys.readouterr().err
