"""Sampling from a language model with a key/value cache (used by `hyla sample`).

Every mixer decodes incrementally the same way: each layer keeps the keys and values of the
tokens seen so far, and a new token's query attends over all of them. HYLA has no recurrent
(constant-memory) form — its value network is nonlinear per (query, key) pair — so, like
softmax, its cache grows by one key and one value per token and layer:
layers × 2 × B × T × H × D_head × bytes per element.

The relative position table covers `seq_len` positions, so a sequence never grows past it: when
the cache is full, generation slides the window, re-encoding the last `seq_len // 2` tokens
without a cache and continuing from there.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from hyla.nn.transformer import Transformer


@dataclass
class GenerationStats:
    prompt_tokens: int
    new_tokens: int
    cache_bytes: int
    """the largest the key/value cache grew (all layers, keys and values)"""
    window_slides: int


def cache_bytes(kv_caches: list[dict]) -> int:
    """Bytes held by the key/value caches (layers × 2 × B × T × H × D × element size)."""
    return sum(t.numel() * t.element_size() for cache in kv_caches for t in cache.values())


@torch.no_grad()
def generate(
    model: Transformer,
    prompt: torch.Tensor,
    num_tokens: int,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    generator: torch.Generator | None = None,
    use_cache: bool = True,
) -> tuple[torch.Tensor, GenerationStats]:
    """Continue `prompt` [B, T0] (long) by `num_tokens` sampled tokens -> ([B, T0 + num_tokens], stats).

    temperature 0 is greedy decoding; top_k keeps the k most likely tokens before sampling.
    use_cache=False re-runs the whole sequence every step (the reference the cache is tested
    against; past seq_len it slides by one token a step, so the two differ there).
    """
    cfg = model.cfg
    if cfg.vocab_size <= 0 or not cfg.causal or cfg.num_outputs != 0:
        raise ValueError(
            "generation needs a causal token model that predicts every position "
            "(vocab_size > 0, causal=True, num_outputs=0)"
        )
    if prompt.ndim != 2 or prompt.dtype != torch.long:
        raise ValueError(f"expected prompt token ids [B, T] (long), got {tuple(prompt.shape)} {prompt.dtype}")
    if prompt.shape[1] == 0:
        raise ValueError("the prompt is empty: give at least one token")
    if prompt.shape[1] > cfg.seq_len:
        raise ValueError(
            f"the prompt has {prompt.shape[1]} tokens, longer than the model's context "
            f"(seq_len={cfg.seq_len}): shorten it"
        )
    if num_tokens < 0 or temperature < 0 or (top_k is not None and top_k < 1):
        raise ValueError(
            f"need num_tokens >= 0, temperature >= 0, top_k >= 1; got {num_tokens}, {temperature}, {top_k}"
        )
    was_training = model.training
    model.eval()
    tokens = prompt
    kv_caches = [{} for _ in range(cfg.num_layers)] if use_cache else None
    pending = tokens  # tokens not yet in the cache
    peak_cache, slides = 0, 0
    for _ in range(num_tokens):
        if use_cache and _cached_length(kv_caches) + pending.shape[1] > cfg.seq_len:
            kv_caches = [{} for _ in range(cfg.num_layers)]
            pending = tokens[:, -(cfg.seq_len // 2 or 1) :]
            slides += 1
        if use_cache:
            logits = model(pending, kv_caches=kv_caches)[:, -1]  # [B, V]
            peak_cache = max(peak_cache, cache_bytes(kv_caches))
        else:
            logits = model(tokens[:, -cfg.seq_len :])[:, -1]
        next_token = sample_next(logits, temperature, top_k, generator)  # [B, 1]
        tokens = torch.cat([tokens, next_token], 1)
        pending = next_token
    model.train(was_training)
    return tokens, GenerationStats(prompt.shape[1], num_tokens, peak_cache, slides)


def _cached_length(kv_caches: list[dict]) -> int:
    return kv_caches[0]["k"].shape[1] if kv_caches and "k" in kv_caches[0] else 0


def sample_next(
    logits: torch.Tensor, temperature: float, top_k: int | None, generator: torch.Generator | None
) -> torch.Tensor:
    """One token per row of logits [B, V] -> [B, 1]."""
    if temperature == 0:
        return logits.argmax(-1, keepdim=True)
    logits = logits.float() / temperature
    if top_k is not None and top_k < logits.shape[-1]:
        threshold = logits.topk(top_k, dim=-1).values[:, -1:]
        logits = logits.masked_fill(logits < threshold, float("-inf"))
    probabilities = logits.softmax(-1)
    return torch.multinomial(probabilities.cpu(), 1, generator=generator).to(logits.device)


def sample_text(
    model: Transformer,
    task,
    prompt: str,
    num_tokens: int = 100,
    *,
    temperature: float = 1.0,
    top_k: int | None = None,
    seed: int = 0,
) -> tuple[str, GenerationStats]:
    """Continue the text `prompt` with a model trained on a `hyla.tasks.Text` task -> (continuation, stats)."""
    task.check_vocab(model.cfg.vocab_size)
    ids = task.encode(prompt) if prompt else [task.end_of_text]
    device = next(model.parameters()).device
    prompt_ids = torch.tensor([ids], dtype=torch.long, device=device)
    generator = torch.Generator().manual_seed(seed)
    tokens, stats = generate(model, prompt_ids, num_tokens, temperature=temperature, top_k=top_k, generator=generator)
    return task.decode(tokens[0, len(ids) :].tolist()), stats
