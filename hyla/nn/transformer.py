"""The transformer used in every experiment (docs/math.md, "The transformer around it"): pre-norm
blocks of any attention mixer."""

from __future__ import annotations

import json
import math
from dataclasses import asdict, dataclass, fields, replace
from pathlib import Path

import torch
from torch import nn

from hyla.nn import MixtureOfExperts, MultiHeadAttention, RelativePositionBias, make_feedforward
from hyla.ops.torch_internals import switched_off

LAYERNORM_EPS = 1e-6
PRETRAINED_CONFIG, PRETRAINED_WEIGHTS = "config.json", "model.safetensors"
PRETRAINED_MANIFEST = "manifest.json"
"""written by `hyla export` beside the two files above: their sha256, the run's record, the commit"""


@dataclass
class ModelConfig:
    """Sizes follow the authors' configs: qk_dim and v_dim are TOTALS over heads."""

    num_layers: int = 2
    dim: int = 128
    num_heads: int = 8
    qk_dim: int = 16
    v_dim: int = 16
    mlp_dim: int = 256
    mixer: str = "softmax"
    """a mixer name (hyla or authors' name); the three fields below override its axes"""
    normalization: str | None = None
    """None: the mixer's"""
    value_network: str | None = None
    """None: the mixer's"""
    activation: str | None = None
    """None: the mixer's"""
    feedforward: str = "gelu_mlp"
    """gelu_mlp | swiglu"""
    num_experts: int = 0
    """> 0: a top-k mixture of this many feed-forward experts in every block"""
    experts_top_k: int = 2
    attention_dropout: float = 0.0
    seq_len: int = 16
    """size of the relative position table (num_buckets = max_distance = seq_len)"""
    bidirectional_position: bool = False
    """False: the paper's one-directional buckets (keys after the query share distance 0)"""
    causal: bool = False
    input_dim: int = 0
    """> 0: continuous tokens of this size, embedded by a Linear layer"""
    vocab_size: int = 0
    """> 0: token ids, embedding tied to the output (logits = h E^T / sqrt(D))"""
    output_dim: int = 1
    num_outputs: int = 1
    """the model reads the last num_outputs positions; 0 = every position"""
    paper_init: bool = True
    """initialize as the authors' Flax code: kernels truncated normal with variance 1/fan_in ("lecun
    normal"), zero biases; position tables and token embeddings normal with variance 1/(feature axis)"""

    def scaled(self, width_multiplier: int) -> ModelConfig:
        """Scale D, H, qk_dim, v_dim and the MLP width together (paper Fig. 4)."""
        m = width_multiplier
        return replace(
            self,
            dim=self.dim * m,
            num_heads=self.num_heads * m,
            qk_dim=self.qk_dim * m,
            v_dim=self.v_dim * m,
            mlp_dim=self.mlp_dim * m,
        )


class Block(nn.Module):
    def __init__(self, cfg: ModelConfig):
        super().__init__()
        self.attention_norm = nn.LayerNorm(cfg.dim, eps=LAYERNORM_EPS)
        self.attention = MultiHeadAttention(
            cfg.dim,
            cfg.num_heads,
            cfg.mixer,
            normalization=cfg.normalization,
            value_network=cfg.value_network,
            activation=cfg.activation,
            qk_dim=cfg.qk_dim,
            v_dim=cfg.v_dim,
            causal=cfg.causal,
            dropout=cfg.attention_dropout,
        )
        self.position = RelativePositionBias(cfg.num_heads, cfg.seq_len, cfg.bidirectional_position)
        self.feedforward_norm = nn.LayerNorm(cfg.dim, eps=LAYERNORM_EPS)
        self.feedforward = (
            MixtureOfExperts(cfg.feedforward, cfg.dim, cfg.mlp_dim, cfg.num_experts, cfg.experts_top_k)
            if cfg.num_experts > 0
            else make_feedforward(cfg.feedforward, cfg.dim, cfg.mlp_dim)
        )

    def forward(
        self,
        x: torch.Tensor,
        return_latents: bool = False,
        kv_cache: dict | None = None,
        num_queries: int = 0,
        dropout_mask: torch.Tensor | None = None,
    ):
        """num_queries > 0: compute only the last num_queries positions (attending to all of them);
        returns [B, num_queries, D]. The model's last block uses it when only those are read out.
        dropout_mask: the attention's keep-mask (see `MultiHeadAttention.forward`)."""
        if num_queries:
            normed = self.attention_norm(x)
            queries = normed[:, -num_queries:]
            bias = self.position(num_queries, x.shape[1], x.shape[1] - num_queries)  # [1, H, n, T]
            x = x[:, -num_queries:] + self.attention(queries, normed, bias=bias, dropout_mask=dropout_mask)
            return x + self.feedforward(self.feedforward_norm(x)), None
        offset = 0 if kv_cache is None or "k" not in kv_cache else kv_cache["k"].shape[1]
        bias = self.position(x.shape[1], offset + x.shape[1], offset)  # [1, H, T, offset + T]
        mixed = self.attention(
            self.attention_norm(x),
            bias=bias,
            return_latents=return_latents,
            kv_cache=kv_cache,
            dropout_mask=dropout_mask,
        )
        mixed, latents = mixed if return_latents else (mixed, None)
        x = x + mixed
        x = x + self.feedforward(self.feedforward_norm(x))
        return x, latents


class Transformer(nn.Module):
    """Continuous-input (fuzzy logic, SRAVEN) or token-input (language modeling) transformer.

    forward(x [B, T, input_dim] float | [B, T] long) -> logits [B, num_outputs, output_dim]
    ([B, T, vocab_size] for token input with num_outputs=0); with return_latents=True also the
    latent codes of every layer, a list of [B, H, T, T].
    """

    def __init__(self, cfg: ModelConfig):
        super().__init__()
        if (cfg.input_dim > 0) == (cfg.vocab_size > 0):
            raise ValueError("set exactly one of input_dim (continuous tokens) and vocab_size (token ids)")
        if cfg.num_outputs < 0 or cfg.num_outputs > cfg.seq_len:
            raise ValueError(f"num_outputs must be in 0..seq_len={cfg.seq_len}, got {cfg.num_outputs}")
        self.cfg = cfg
        if cfg.vocab_size > 0:
            self.embed = nn.Embedding(cfg.vocab_size, cfg.dim)
            self.head = None  # tied to the embedding
        else:
            self.embed = nn.Linear(cfg.input_dim, cfg.dim)
            self.head = nn.Linear(cfg.dim, cfg.output_dim)
        self.blocks = nn.ModuleList(Block(cfg) for _ in range(cfg.num_layers))
        self.final_norm = nn.LayerNorm(cfg.dim, eps=LAYERNORM_EPS)
        if cfg.paper_init:
            self._paper_init()

    def forward(
        self,
        x: torch.Tensor,
        return_latents: bool = False,
        kv_caches: list[dict] | None = None,
        dropout_masks: list[torch.Tensor] | None = None,
    ):
        """kv_caches: one dict per layer for incremental decoding (see `MultiHeadAttention`).
        dropout_masks: the attention keep-masks from `draw_dropout_masks`, used instead of drawing them."""
        self._check_input(x, kv_caches)
        h = self.embed(x)  # [B, T, D]
        latents = []
        prune = self._pruned_queries(x.shape[1], return_latents, kv_caches)
        for i, block in enumerate(self.blocks):
            last = i == len(self.blocks) - 1
            h, layer_latents = block(
                h,
                return_latents,
                None if kv_caches is None else kv_caches[i],
                num_queries=prune if last else 0,
                dropout_mask=None if dropout_masks is None else dropout_masks[i],
            )
            latents.append(layer_latents)
        h = self.final_norm(h)
        if self.cfg.num_outputs:
            h = h[:, -self.cfg.num_outputs :]
        logits = self.head(h) if self.head is not None else h @ self.embed.weight.T / math.sqrt(self.cfg.dim)
        return (logits, latents) if return_latents else logits

    def _pruned_queries(self, seq_len: int, return_latents: bool, kv_caches) -> int:
        """How many last positions the last block computes (0: all). Only the last num_outputs
        positions are read out, so the last block need not compute the others (same outputs; unless
        the latent codes or a KV cache want every position, or HYLA_QUERY_PRUNING=0)."""
        wanted = self.cfg.num_outputs
        if return_latents or kv_caches is not None or seq_len <= wanted or switched_off("query_pruning"):
            return 0
        return wanted

    def draw_dropout_masks(self, seq_len: int) -> list[torch.Tensor] | None:
        """The attention-dropout keep-masks that a training forward of `seq_len` tokens would draw,
        drawn in the same order from the global generator: one [Tq, Tk] per layer (None when the
        model has no dropout or is in eval mode). Packed training draws them outside `vmap`."""
        if not (self.training and self.cfg.attention_dropout > 0):
            return None
        prune = self._pruned_queries(seq_len, False, None)
        weight = self.final_norm.weight
        return [
            block.attention.draw_dropout_mask(
                prune if prune and i == len(self.blocks) - 1 else seq_len, seq_len, weight.device, weight.dtype
            )
            for i, block in enumerate(self.blocks)
        ]

    def _check_input(self, x: torch.Tensor, kv_caches) -> None:
        cfg = self.cfg
        if cfg.vocab_size > 0 and (x.ndim != 2 or x.dtype != torch.long):
            raise ValueError(f"expected token ids [B, T] (long), got {tuple(x.shape)} {x.dtype}")
        if cfg.input_dim > 0 and (x.ndim != 3 or x.shape[-1] != cfg.input_dim):
            raise ValueError(f"expected inputs [B, T, {cfg.input_dim}], got {tuple(x.shape)}")
        cached = 0 if not kv_caches or "k" not in kv_caches[0] else kv_caches[0]["k"].shape[1]
        if cached + x.shape[1] > cfg.seq_len:
            raise ValueError(
                f"sequence of {cached + x.shape[1]} tokens is longer than the model's seq_len={cfg.seq_len}"
            )
        if kv_caches is not None and len(kv_caches) != cfg.num_layers:
            raise ValueError(f"need one kv cache per layer ({cfg.num_layers}), got {len(kv_caches)}")

    def num_parameters(self) -> int:
        return sum(p.numel() for p in self.parameters())

    def save_pretrained(self, folder: str | Path) -> None:
        """Write `model.safetensors` (the weights) and `config.json` (the ModelConfig): files that
        load without running any code, to share a trained model."""
        from safetensors.torch import save_model

        folder = Path(folder)
        folder.mkdir(parents=True, exist_ok=True)
        (folder / PRETRAINED_CONFIG).write_text(json.dumps(asdict(self.cfg), indent=2) + "\n")
        save_model(self, str(folder / PRETRAINED_WEIGHTS))

    @classmethod
    def from_pretrained(cls, folder: str | Path, verify: bool = True) -> Transformer:
        """The model written by `save_pretrained` (or `hyla export`), on the CPU, in eval mode.
        verify: where the folder has a manifest.json (`hyla export`), check each file's sha256
        against it first (ValueError on a mismatch: a changed or damaged file)."""
        from safetensors.torch import load_model

        folder = Path(folder)
        for name in (PRETRAINED_CONFIG, PRETRAINED_WEIGHTS):
            if not (folder / name).exists():
                raise FileNotFoundError(f"{folder} has no {name}: not a folder written by hyla export")
        if verify and (folder / PRETRAINED_MANIFEST).exists():
            check_checksums(folder)
        data = json.loads((folder / PRETRAINED_CONFIG).read_text())
        known = {f.name for f in fields(ModelConfig)}
        if not isinstance(data, dict) or set(data) - known:
            raise ValueError(f"{folder / PRETRAINED_CONFIG} is not a hyla ModelConfig")
        model = cls(ModelConfig(**data))
        load_model(model, str(folder / PRETRAINED_WEIGHTS))
        return model.eval()

    def _paper_init(self) -> None:
        """The initializers of the authors' Flax model (its modules keep Flax's defaults).

        Dense kernels: `lecun_normal` = variance_scaling(1, "fan_in", "truncated_normal"): normal
        truncated at +-2 std, rescaled so that the truncated variance is exactly 1/fan_in; biases 0.
        Embedding tables: Flax's `default_embed_init` = variance_scaling(1, "fan_in", "normal",
        out_axis=0), whose fan_in is the size of the table's second axis in the authors' layout:
        `[H, num_buckets]` for a position table (std 1/sqrt(num_buckets)), `[vocab, D]` for the token
        embedding (std 1/sqrt(D)). LayerNorm: scale 1, bias 0 (PyTorch's defaults too).
        """
        for module in self.modules():
            if isinstance(module, nn.Linear):
                _lecun_normal_(module.weight)
                if module.bias is not None:
                    nn.init.zeros_(module.bias)
            elif isinstance(module, RelativePositionBias):
                nn.init.normal_(module.table.weight, std=1.0 / math.sqrt(module.num_buckets))  # [buckets, H]
        if self.cfg.vocab_size > 0:
            nn.init.normal_(self.embed.weight, std=1.0 / math.sqrt(self.cfg.dim))  # [vocab, D]


def sha256_of(path: str | Path) -> str:
    import hashlib

    digest = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def check_checksums(folder: Path) -> None:
    """ValueError unless every file that `folder/manifest.json` lists under "files" has its sha256."""
    try:
        listed = json.loads((folder / PRETRAINED_MANIFEST).read_text())["files"]
    except (ValueError, KeyError, TypeError):
        raise ValueError(f"{folder / PRETRAINED_MANIFEST} is damaged (no readable 'files')") from None
    for name, expected in listed.items():
        path = folder / name
        if not path.is_file() or sha256_of(path) != expected:
            raise ValueError(f"{path} does not match its sha256 in {PRETRAINED_MANIFEST}: changed or damaged")


# std of a standard normal truncated to [-2, 2]: sqrt(1 - 4 phi(2) / (2 Phi(2) - 1))
_TRUNCATED_NORMAL_STD = 0.87962566103423978


def _lecun_normal_(weight: torch.Tensor) -> None:
    """weight [out, in]: truncated at 2 std, std rescaled so the truncated variance is 1/fan_in."""
    std = 1.0 / math.sqrt(weight.shape[1]) / _TRUNCATED_NORMAL_STD
    truncated_normal_(weight, std)


@torch.no_grad()
def truncated_normal_(weight: torch.Tensor, std: float) -> torch.Tensor:
    """Normal(0, std) truncated to [-2 std, 2 std]: out-of-range entries are replaced from whole fresh
    draws until none is left. The numbers `nn.init.trunc_normal_` draws since torch 2.13, on every
    torch version, because only `normal_` draws (torch 2.11's trunc_normal_ drew others, through
    an inverse CDF); so a seed gives the same initial weights under any torch version."""
    low, high = (weight.new_tensor(bound, device="cpu").item() for bound in (-2 * std, 2 * std))
    weight.normal_(0.0, std)
    while (outside := (weight < low) | (weight > high)).any():
        weight.copy_(torch.where(outside, torch.empty_like(weight).normal_(0.0, std), weight))
    return weight
