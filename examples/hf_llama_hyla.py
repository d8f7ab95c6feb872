"""Train a small Hugging Face Llama with HYLA attention on a copy task, then generate with its KV cache.

    pip install 'hyla[transformers]'
    python examples/hf_llama_hyla.py                      # HYLA
    python examples/hf_llama_hyla.py --attn hyla_softmax  # any name from hyla.integrations.transformers
    python examples/hf_llama_hyla.py --attn sdpa          # transformers' own softmax attention

Each sequence is a random prefix of `--length` tokens, a separator, and the prefix again: the second
half can only be predicted by attending back. The loss counts the copied half only.
"""

from __future__ import annotations

import argparse
import time

import torch
from transformers import LlamaConfig, LlamaForCausalLM

from hyla.integrations.transformers import register

VOCAB, SEPARATOR = 32, 0


def copy_batch(batch_size: int, length: int, generator: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    """input ids [B, 2L+1] = prefix, separator, prefix; labels = -100 (ignored) except on the copy."""
    prefix = torch.randint(1, VOCAB, (batch_size, length), generator=generator)
    ids = torch.cat([prefix, torch.full((batch_size, 1), SEPARATOR), prefix], dim=1)
    labels = ids.clone()
    labels[:, : length + 1] = -100
    return ids, labels


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--attn", default="hyla", help="attn_implementation (default: hyla)")
    parser.add_argument("--steps", type=int, default=150)
    parser.add_argument("--length", type=int, default=8)
    parser.add_argument("--batch-size", type=int, default=64)
    args = parser.parse_args()

    names = register()
    print(f"registered attention implementations: {', '.join(names)}")
    torch.manual_seed(0)
    config = LlamaConfig(
        vocab_size=VOCAB,
        hidden_size=64,
        intermediate_size=128,
        num_hidden_layers=2,
        num_attention_heads=8,
        num_key_value_heads=8,
        max_position_embeddings=64,
        attn_implementation=args.attn,
    )
    model = LlamaForCausalLM(config)
    optimizer = torch.optim.AdamW(model.parameters(), lr=3e-3, weight_decay=0.0)
    generator = torch.Generator().manual_seed(1)
    start = time.perf_counter()
    for step in range(1, args.steps + 1):
        ids, labels = copy_batch(args.batch_size, args.length, generator)
        loss = model(ids, labels=labels).loss
        optimizer.zero_grad()
        loss.backward()
        optimizer.step()
        if step % 50 == 0 or step == 1:
            print(f"step {step:4d}  copy loss {loss.item():.4f}  ({time.perf_counter() - start:.0f} s)")

    model.eval()
    ids, _ = copy_batch(4, args.length, torch.Generator().manual_seed(2))
    prompt = ids[:, : args.length + 1]
    with torch.no_grad():
        out = model.generate(
            prompt,
            attention_mask=torch.ones_like(prompt),
            max_new_tokens=args.length,
            do_sample=False,
            pad_token_id=SEPARATOR,
        )  # uses the KV cache
    copied = out[:, args.length + 1 :]
    accuracy = (copied == prompt[:, : args.length]).float().mean().item()
    print(f"{args.attn}: generated copies match the prefix on {accuracy:.0%} of the tokens")
    print("prefix   ", prompt[0, : args.length].tolist())
    print("generated", copied[0].tolist())


if __name__ == "__main__":
    main()
