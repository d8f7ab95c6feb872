"""Language-model training steps at the paper's shapes on one GPU: peak memory, tokens/s and what
the paper's token budget would cost, for softmax, linear attention and HYLA.

    python benchmarks/bench_lm_gpu.py                                   # lm_c4_50m, bfloat16 autocast
    python benchmarks/bench_lm_gpu.py --variants hyla:triton softmax:sdpa --steps 20 --compile
    python benchmarks/bench_lm_gpu.py --device cpu --layers 1 --dim 64 --heads 4 --seq-len 32 \\
        --batch 4 --micro-batch 2 --vocab 512 --steps 2 --warmup 1      # smoke run (interpreter)

The model is the `lm_c4_50m` preset's (6 layers, D=512, 8 heads, qk=v=512, SwiGLU 3072, relative
position bias, causal, tied 32k embedding; seq_len 512, batch 256 = 131,072 tokens a step), trained
on random token ids (speed and memory do not depend on the text) with the preset's AdamW. A step
is the whole batch; --micro-batch splits it into accumulated micro-batches when it does not fit.

Variants (mixer:attention implementation):
- `softmax:naive` - hyla's einsum softmax attention (what the trainer runs today);
- `softmax:sdpa` - the same model through `F.scaled_dot_product_attention` with the bias and the
  causal mask as a float mask (PyTorch's memory-efficient kernel: flash takes no bias);
- `softmax:flash` - SDPA with `is_causal=True` and the position bias LEFT OUT (a slightly different
  model: the fastest softmax attention PyTorch has, the yardstick of the <= 2x target);
- `linear:naive`, `hyla:triton`, `hyla:streamed`, `hyla:naive`.
Step time: the median of --steps timed steps after --warmup steps (CUDA-synchronized). Peak memory:
`torch.cuda.max_memory_allocated` over the run (model, optimizer state and activations).
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from contextlib import nullcontext
from dataclasses import replace
from pathlib import Path

import torch
import torch.nn.functional as F

VARIANTS = (
    "softmax:naive",
    "softmax:sdpa",
    "softmax:flash",
    "linear:naive",
    "hyla:triton",
    "hyla:streamed",
    "hyla:naive",
)
DEFAULT_VARIANTS = ("softmax:sdpa", "softmax:flash", "linear:naive", "hyla:triton")
OUT = Path(__file__).parent / "results" / "lm_gpu.json"
PAPER_TOKENS = 130e9  # the paper's C4 budget (16 TPUs, 3-4 days)


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--variants", nargs="+", default=list(DEFAULT_VARIANTS), choices=VARIANTS)
    p.add_argument("--preset", default="lm_c4_50m")
    p.add_argument("--batch", type=int, default=None, help="sequences per step (default: the preset's)")
    p.add_argument("--micro-batch", type=int, default=None, help="sequences per forward/backward (default: --batch)")
    p.add_argument("--seq-len", type=int, default=None)
    p.add_argument("--layers", type=int, default=None)
    p.add_argument("--dim", type=int, default=None, help="model width; qk_dim = v_dim = dim")
    p.add_argument("--heads", type=int, default=None)
    p.add_argument("--mlp-dim", type=int, default=None)
    p.add_argument("--vocab", type=int, default=None)
    p.add_argument("--dtype", default="bfloat16", choices=["bfloat16", "float32"], help="autocast dtype")
    p.add_argument("--compile", action="store_true", help="torch.compile the model")
    p.add_argument("--tf32", action="store_true", help="torch.set_float32_matmul_precision('high')")
    p.add_argument("--steps", type=int, default=10, help="timed steps")
    p.add_argument("--warmup", type=int, default=3, help="untimed steps first (compilation, allocator)")
    p.add_argument("--device", default="cuda")
    p.add_argument("--out", type=Path, default=OUT)
    return p.parse_args(argv)


def experiment_config(args):
    from hyla.train.presets import get_preset

    cfg = get_preset(args.preset)
    text = cfg.text
    dim = args.dim or cfg.model.dim
    model = replace(
        cfg.model,
        num_layers=args.layers or cfg.model.num_layers,
        dim=dim,
        num_heads=args.heads or cfg.model.num_heads,
        qk_dim=dim if args.dim else cfg.model.qk_dim,
        v_dim=dim if args.dim else cfg.model.v_dim,
        mlp_dim=args.mlp_dim or cfg.model.mlp_dim,
        seq_len=args.seq_len or text.seq_len,
        vocab_size=args.vocab or text.vocab_size,
        input_dim=0,
        num_outputs=0,
        causal=True,
    )
    return replace(cfg, model=model, train=replace(cfg.train, batch_size=args.batch or cfg.train.batch_size))


def sdpa_attention(original, keep_bias: bool):
    """`hyla.ops.attention` with softmax + linear value network routed to PyTorch's SDPA."""

    def attention(q, k, v, *, normalization, value_network, bias=None, mask=None, dropout_mask=None, **kwargs):
        if normalization != "softmax" or value_network != "linear" or dropout_mask is not None:
            return original(
                q,
                k,
                v,
                normalization=normalization,
                value_network=value_network,
                bias=bias,
                mask=mask,
                dropout_mask=dropout_mask,
                **kwargs,
            )
        q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B, H, T, D]
        if keep_bias:
            float_mask = bias.to(q.dtype).masked_fill(~mask, float("-inf"))
            out = F.scaled_dot_product_attention(q, k, v, attn_mask=float_mask)
        else:
            out = F.scaled_dot_product_attention(q, k, v, is_causal=True)
        return out.transpose(1, 2)

    return attention


def build(variant: str, cfg, device):
    import hyla.nn.attention as attention_module
    from hyla.nn.attention import MultiHeadAttention
    from hyla.train.optim import make_optimizer
    from hyla.train.step import build_model

    mixer, implementation = variant.split(":")
    attention_module.attention = ORIGINAL_ATTENTION
    if implementation in ("sdpa", "flash"):
        attention_module.attention = sdpa_attention(ORIGINAL_ATTENTION, keep_bias=implementation == "sdpa")
    cfg = replace(cfg, model=replace(cfg.model, mixer=mixer))
    model = build_model(cfg).to(device)
    for module in model.modules():
        if isinstance(module, MultiHeadAttention) and implementation not in ("sdpa", "flash"):
            module.implementation = implementation
    optimizer, _ = make_optimizer(model, cfg.optim, cfg.train.steps)
    return model, optimizer


def train_steps(model, optimizer, cfg, args, device):
    """Per-step seconds of args.warmup + args.steps full steps (random tokens)."""
    batch, seq_len, vocab = cfg.train.batch_size, cfg.model.seq_len, cfg.model.vocab_size
    micro = args.micro_batch or batch
    if batch % micro:
        sys.exit(f"--micro-batch {micro} must divide the batch {batch}")
    forward = torch.compile(model) if args.compile else model
    autocast = torch.autocast(device, dtype=torch.bfloat16) if args.dtype == "bfloat16" else nullcontext()
    generator = torch.Generator(device="cpu").manual_seed(0)
    times = []
    for _ in range(args.warmup + args.steps):
        tokens = torch.randint(vocab, (batch, seq_len + 1), generator=generator).to(device)
        synchronize(device)
        start = time.perf_counter()
        for chunk in tokens.split(micro):
            with autocast:
                logits = forward(chunk[:, :-1])
                loss = F.cross_entropy(logits.float().flatten(0, 1), chunk[:, 1:].flatten()) * (len(chunk) / batch)
            loss.backward()
        optimizer.step()
        optimizer.zero_grad(set_to_none=True)
        synchronize(device)
        times.append(time.perf_counter() - start)
    return times[args.warmup :]


def synchronize(device):
    if device == "cuda":
        torch.cuda.synchronize()


def run_variant(variant, cfg, args):
    device = args.device
    row = dict(
        variant=variant,
        batch=cfg.train.batch_size,
        micro_batch=args.micro_batch or cfg.train.batch_size,
        seq_len=cfg.model.seq_len,
    )
    if device == "cuda":
        torch.cuda.empty_cache()
        torch.cuda.reset_peak_memory_stats()
    try:
        model, optimizer = build(variant, cfg, device)
        row["parameters"] = sum(p.numel() for p in model.parameters())
        times = train_steps(model, optimizer, cfg, args, device)
    except torch.OutOfMemoryError:
        return dict(row, status="out of memory")
    step = statistics.median(times)
    tokens_per_s = cfg.train.batch_size * cfg.model.seq_len / step
    return dict(
        row,
        status="ok",
        step_s=step,
        times_s=times,
        tokens_per_s=tokens_per_s,
        peak_gib=torch.cuda.max_memory_allocated() / 2**30 if device == "cuda" else None,
        preset_budget_gpu_hours=cfg.train.steps * cfg.train.batch_size * cfg.model.seq_len / tokens_per_s / 3600,
        paper_budget_gpu_hours=PAPER_TOKENS / tokens_per_s / 3600,
    )


def main(argv=None):
    args = parse_args(argv)
    if args.device == "cpu":
        os.environ["TRITON_INTERPRET"] = "1"  # hyla:triton on CPU tensors, before triton is imported
    elif not torch.cuda.is_available():
        sys.exit("no CUDA device: run on a GPU, or --device cpu for a smoke run")
    import hyla.nn.attention as attention_module

    if args.tf32:
        torch.set_float32_matmul_precision("high")
    global ORIGINAL_ATTENTION
    ORIGINAL_ATTENTION = attention_module.attention
    cfg = experiment_config(args)
    rows = []
    for variant in args.variants:
        rows.append(run_variant(variant, cfg, args))
        r = rows[-1]
        print(
            f"{variant:15} {r['status']:14} step {r.get('step_s', float('nan')):.4g} s  "
            f"{r.get('tokens_per_s', 0):,.0f} tok/s  peak {r.get('peak_gib') or float('nan'):.2f} GiB  "
            f"preset budget {r.get('preset_budget_gpu_hours', float('nan')):.1f} GPU-h  "
            f"paper 130B tokens {r.get('paper_budget_gpu_hours', float('nan')):.0f} GPU-h",
            flush=True,
        )
    result = dict(
        benchmark="lm_gpu",
        preset=args.preset,
        model={k: v for k, v in vars(cfg.model).items()},
        batch=cfg.train.batch_size,
        micro_batch=args.micro_batch,
        dtype=args.dtype,
        compile=args.compile,
        float32_matmul_precision=torch.get_float32_matmul_precision(),
        device=torch.cuda.get_device_name() if args.device == "cuda" else "cpu",
        torch=torch.__version__,
        preset_tokens=cfg.train.steps * cfg.train.batch_size * cfg.model.seq_len,
        paper_tokens=PAPER_TOKENS,
        rows=rows,
    )
    by_name = {r["variant"]: r for r in rows if r["status"] == "ok"}
    if "hyla:triton" in by_name and "softmax:flash" in by_name:
        result["hyla_over_flash_step"] = by_name["hyla:triton"]["step_s"] / by_name["softmax:flash"]["step_s"]
        print(f"HYLA (triton) step / softmax (flash) step: {result['hyla_over_flash_step']:.2f} (target <= 2)")
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(result, indent=1))
    print(f"-> {args.out}")


ORIGINAL_ATTENTION = None

if __name__ == "__main__":
    main()
