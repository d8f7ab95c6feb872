"""hyla's attention family inside Hugging Face transformers models (tiny random Llama, CPU):
hyla's softmax equals transformers' own attention (layout, scaling, grouped-query heads, padding
mask), HYLA trains, the causal and padding masks hold, KV-cache generation equals uncached, and
the example script runs."""

import runpy
import sys
import warnings
from pathlib import Path

import pytest
import torch

transformers = pytest.importorskip("transformers")
from transformers import LlamaConfig, LlamaForCausalLM  # noqa: E402

from hyla.integrations.transformers import IMPLEMENTATIONS, register  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def registered():
    return register()


def tiny_llama(attn_implementation: str, seed: int = 0) -> LlamaForCausalLM:
    torch.manual_seed(seed)
    config = LlamaConfig(
        vocab_size=48,
        hidden_size=32,
        intermediate_size=64,
        num_hidden_layers=2,
        num_attention_heads=4,
        num_key_value_heads=2,
        max_position_embeddings=64,
        attn_implementation=attn_implementation,
    )
    return LlamaForCausalLM(config)


def left_padded_batch(seed: int = 1):
    g = torch.Generator().manual_seed(seed)
    ids = torch.randint(0, 48, (3, 11), generator=g)
    attention_mask = torch.ones(3, 11, dtype=torch.long)
    attention_mask[0, :4] = 0  # the first sequence is left-padded by 4
    position_ids = (attention_mask.cumsum(-1) - 1).clamp(min=0)
    return ids, attention_mask, position_ids


def test_register_names_every_mixer(registered):
    assert registered == list(IMPLEMENTATIONS) and "hyla" in registered and "hyla_softmax" in registered
    assert IMPLEMENTATIONS["hyla"] == "hyla" and IMPLEMENTATIONS["hyla_linear"] == "linear"
    assert register() == registered  # registering twice is harmless


def test_hyla_softmax_equals_transformers_sdpa_with_gqa_and_padding():
    ours, theirs = tiny_llama("hyla_softmax"), tiny_llama("sdpa")
    theirs.load_state_dict(ours.state_dict())
    assert ours.config._attn_implementation == "hyla_softmax" and theirs.config._attn_implementation == "sdpa"
    ids, mask, positions = left_padded_batch()
    got = ours(ids, attention_mask=mask, position_ids=positions).logits
    want = theirs(ids, attention_mask=mask, position_ids=positions).logits
    assert got.shape == (3, 11, 48)
    real = mask.bool()
    torch.testing.assert_close(got[real], want[real], rtol=1e-5, atol=1e-5)


def test_hyla_under_grouped_query_attention_warns_once_in_one_line():
    from hyla.integrations.transformers import warn_grouped_query

    warn_grouped_query.cache_clear()
    ids = torch.randint(0, 48, (1, 5), generator=torch.Generator().manual_seed(4))
    with pytest.warns(UserWarning) as caught:
        tiny_llama("hyla")(ids)  # 2 layers, 4 query heads, 2 key/value heads
    (warning,) = [str(w.message) for w in caught]
    assert "grouped-query attention (4 query heads, 2 key/value heads)" in warning and "\n" not in warning
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        tiny_llama("hyla_softmax")(ids)  # exact: no warning
        tiny_llama("hyla_linear")(ids)


@pytest.mark.parametrize("implementation", ["hyla", "hyla_linear", "hyla_softmax_hyla"])
def test_padding_and_causal_masks(implementation):
    model = tiny_llama(implementation).eval()
    ids, mask, positions = left_padded_batch()
    padded = model(ids, attention_mask=mask, position_ids=positions).logits
    alone = model(ids[:1, 4:]).logits  # the left-padded sequence without its padding
    torch.testing.assert_close(padded[0, 4:], alone[0], rtol=1e-4, atol=1e-5)
    changed = ids.clone()
    changed[:, -1] = (changed[:, -1] + 1) % 48  # a later token cannot change earlier outputs
    later = model(changed, attention_mask=mask, position_ids=positions).logits
    torch.testing.assert_close(later[:, :-1], padded[:, :-1], rtol=0, atol=0)
    assert not torch.allclose(later[1:, -1], padded[1:, -1])


def test_hyla_llama_trains():
    model = tiny_llama("hyla")
    ids = torch.randint(0, 48, (8, 16), generator=torch.Generator().manual_seed(2))
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3)
    losses = []
    for _ in range(15):
        loss = model(ids, labels=ids).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        losses.append(loss.item())
    assert losses[-1] < 0.8 * losses[0], losses
    assert all(p.grad is not None and torch.isfinite(p.grad).all() for p in model.parameters())


def test_kv_cache_generation_equals_uncached_and_latent_codes():
    model = tiny_llama("hyla").eval()
    prompt = torch.randint(0, 48, (2, 5), generator=torch.Generator().manual_seed(3))
    kwargs = dict(max_new_tokens=6, do_sample=False, pad_token_id=0, attention_mask=torch.ones_like(prompt))
    cached = model.generate(prompt, **kwargs)
    uncached = model.generate(prompt, use_cache=False, **kwargs)
    assert cached.shape == (2, 11) and torch.equal(cached, uncached)
    codes = model(prompt, output_attentions=True).attentions
    assert len(codes) == 2 and codes[0].shape == (2, 4, 5, 5)  # latent codes [B, H, Tq, Tk] per layer
    assert torch.all(codes[0][..., 0, 1:] == 0)  # causal: the first query sees only the first key


def test_example_script_runs(monkeypatch, capsys):
    """examples/hf_llama_hyla.py run as a script, in this process (torch and transformers are imported
    already: a fresh interpreter would spend most of the test importing them again)."""
    script = Path(__file__).resolve().parents[2] / "examples" / "hf_llama_hyla.py"
    monkeypatch.setattr(sys, "argv", [str(script), "--steps", "2", "--length", "3", "--batch-size", "4"])
    runpy.run_path(str(script), run_name="__main__")
    out = capsys.readouterr().out
    assert "step    1  copy loss" in out and "hyla: generated copies match" in out
