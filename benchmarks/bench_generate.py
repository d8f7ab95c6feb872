"""Decoding speed with and without the key/value cache, and the cache's memory, per mixer.

    python benchmarks/bench_generate.py                          # the lm_cpu model, 4 sequences
    python benchmarks/bench_generate.py --seq-len 256 --batch 1 --mixers hyla softmax

A randomly initialized model of the `lm_cpu` preset's shape greedily generates from a short prompt
to the end of its context, once re-running the whole sequence every token (no cache) and once
with the cache. Correctness gates the report: both must produce the same tokens, otherwise no
speedup is printed for that mixer. Times are the minimum over repeats (the machine may be shared).
"""

from __future__ import annotations

import argparse
import json
import platform
import time
from pathlib import Path

import torch

from hyla.nn.generate import generate
from hyla.nn.transformer import ModelConfig, Transformer

OUT = Path(__file__).parent / "results" / "generate.json"


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--mixers", nargs="+", default=["softmax", "linear", "hyla"])
    p.add_argument("--seq-len", type=int, default=64)
    p.add_argument("--prompt", type=int, default=8, help="prompt tokens")
    p.add_argument("--batch", type=int, default=4)
    p.add_argument("--vocab", type=int, default=2048)
    p.add_argument("--repeats", type=int, default=3)
    p.add_argument("--threads", type=int, default=1)
    p.add_argument("--out", type=Path, default=OUT)
    return p.parse_args(argv)


def best_time(fn, repeats: int) -> float:
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        fn()
        times.append(time.perf_counter() - start)
    return min(times)


def main(argv=None) -> None:
    args = parse_args(argv)
    torch.set_num_threads(args.threads)
    new_tokens = args.seq_len - args.prompt
    rows = []
    for mixer in args.mixers:
        cfg = ModelConfig(
            num_layers=4,
            dim=128,
            num_heads=8,
            qk_dim=128,
            v_dim=128,
            mlp_dim=256,
            mixer=mixer,
            feedforward="swiglu",
            seq_len=args.seq_len,
            causal=True,
            vocab_size=args.vocab,
            output_dim=args.vocab,
            num_outputs=0,
        )
        torch.manual_seed(0)
        model = Transformer(cfg).eval()
        prompt = torch.randint(args.vocab, (args.batch, args.prompt))
        cached, stats = generate(model, prompt, new_tokens, temperature=0)
        uncached, _ = generate(model, prompt, new_tokens, temperature=0, use_cache=False)
        correct = torch.equal(cached, uncached)
        time_cached = best_time(lambda: generate(model, prompt, new_tokens, temperature=0), args.repeats)
        time_uncached = best_time(
            lambda: generate(model, prompt, new_tokens, temperature=0, use_cache=False), args.repeats
        )
        row = {
            "mixer": mixer,
            "correct": correct,
            "cache_bytes": stats.cache_bytes,
            "tokens_per_s_cached": args.batch * new_tokens / time_cached,
            "tokens_per_s_uncached": args.batch * new_tokens / time_uncached,
            "speedup": time_uncached / time_cached if correct else None,
        }
        rows.append(row)
        speedup = f"{row['speedup']:.2f}x" if correct else "n/a (cached and uncached tokens DIFFER)"
        print(
            f"{mixer:>8}: cached {row['tokens_per_s_cached']:8.0f} tok/s, uncached {row['tokens_per_s_uncached']:8.0f} "
            f"tok/s, speedup {speedup}, cache {stats.cache_bytes:,} bytes"
        )
    report = {
        "args": {k: str(v) for k, v in vars(args).items()},
        "torch": torch.__version__,
        "machine": platform.processor() or platform.machine(),
        "results": rows,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=1))
    print(f"wrote {args.out}")


if __name__ == "__main__":
    main()
