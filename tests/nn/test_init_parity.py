"""`paper_init` initializes every parameter of every paper preset as the authors' Flax model does.

The authors' modules keep Flax's default initializers. The expected statistics below are derived
from those initializers' definitions (jax.nn.initializers), not from hyla's code:

- Dense kernels, `lecun_normal()` = `variance_scaling(1, "fan_in", "truncated_normal")`: a normal
  truncated at +-2 of its standard deviations, that deviation set to sqrt(1/fan_in) / s2, where
  s2 is the standard deviation of a standard normal truncated to [-2, 2]; the samples therefore
  have standard deviation sqrt(1/fan_in) and never exceed 2 sqrt(1/fan_in) / s2 in magnitude.
  Flax's DenseGeneral flattens its kernel to [prod(input axes), prod(output axes)] first, so
  fan_in is the layer's total input width (hyla's `in_features`). Biases: zeros.
- Embedding tables, `default_embed_init` = `variance_scaling(1, "fan_in", "normal", out_axis=0)`:
  normal with variance 1/fan_in, fan_in computed by JAX's `_compute_fans` with in_axis=-2,
  out_axis=0 (see `flax_embed_fan_in`). The authors' tables: relative positions `[H, num_buckets]`,
  tokens `[vocab, D]`.
- LayerNorm: scale ones, bias zeros.
"""

from __future__ import annotations

import math
from dataclasses import replace

import numpy as np
import pytest
import torch
from torch import nn
from torch.torch_version import TorchVersion

from hyla.nn import RelativePositionBias
from hyla.nn.transformer import ModelConfig, Transformer, truncated_normal_
from hyla.train.configs import build_task, resolve_model
from hyla.train.presets import get_preset

PAPER_PRESETS = (
    "logic_3var_2term",
    "logic_4var_2term",
    "logic_5var_3term",
    "raven_3x3_4features",
    "wiki_wikitext103",
    "lm_c4_50m",
)


def truncated_normal_std(bound: float) -> float:
    """Standard deviation of a standard normal truncated to [-bound, bound] (closed form):
    sqrt(1 - 2 bound pdf(bound) / (cdf(bound) - cdf(-bound)))."""
    pdf = math.exp(-bound * bound / 2) / math.sqrt(2 * math.pi)
    mass = math.erf(bound / math.sqrt(2))
    return math.sqrt(1 - 2 * bound * pdf / mass)


def flax_embed_fan_in(shape: tuple[int, int]) -> float:
    """fan_in of JAX's `_compute_fans(shape, in_axis=-2, out_axis=0)` for a 2-d table:
    in_size = shape[-2], out_size = shape[0], receptive field = size / in_size / out_size,
    fan_in = in_size * receptive field (for [a, b] that is b, the second axis)."""
    in_size, out_size = shape[-2], shape[0]
    receptive_field = math.prod(shape) / in_size / out_size
    return in_size * receptive_field


def paper_model_config(name: str) -> ModelConfig:
    """The preset's model with the task's sizes; language models get the sizes their tokenizer
    and windows give (vocab_size, seq_len) without reading a corpus."""
    cfg = get_preset(name)
    if cfg.task == "text":
        return replace(
            cfg.model, vocab_size=cfg.text.vocab_size, seq_len=cfg.text.seq_len, input_dim=0, num_outputs=0, causal=True
        )
    return resolve_model(cfg.model, build_task(cfg))


def expected_init(model: Transformer, cfg: ModelConfig) -> dict[str, tuple[str, float]]:
    """{parameter name: (initializer, expected standard deviation or constant)} for every
    parameter, from the module it belongs to and the Flax definitions above."""
    expected = {}
    for prefix, module in model.named_modules():
        name = f"{prefix}." if prefix else ""
        if isinstance(module, nn.Linear):
            expected[name + "weight"] = ("truncated_normal", math.sqrt(1.0 / module.in_features))
            if module.bias is not None:
                expected[name + "bias"] = ("constant", 0.0)
        elif isinstance(module, nn.LayerNorm):
            expected[name + "weight"], expected[name + "bias"] = ("constant", 1.0), ("constant", 0.0)
        elif isinstance(module, RelativePositionBias):
            authors_shape = (cfg.num_heads, cfg.seq_len)  # [H, num_buckets], num_buckets = seq_len
            expected[name + "table.weight"] = ("normal", math.sqrt(1.0 / flax_embed_fan_in(authors_shape)))
    if cfg.vocab_size:
        expected["embed.weight"] = ("normal", math.sqrt(1.0 / flax_embed_fan_in((cfg.vocab_size, cfg.dim))))
    return expected


def check_parameter(name: str, value: torch.Tensor, kind: str, target: float) -> None:
    if kind == "constant":
        assert torch.all(value == target), f"{name}: expected all {target}"
        return
    x = value.detach().double().flatten()
    n = x.numel()
    # 6 standard errors: the sample std of n normal draws has relative standard error ~ 1/sqrt(2n)
    # (smaller for the truncated normal), the sample mean std/sqrt(n)
    assert x.std().item() == pytest.approx(target, rel=6 / math.sqrt(2 * n)), f"{name} ({kind}, n={n})"
    assert abs(x.mean().item()) < 6 * target / math.sqrt(n), name
    bound = 2 * target / truncated_normal_std(2.0)
    if kind == "truncated_normal":
        assert x.abs().max().item() <= bound * (1 + 1e-6), f"{name}: not truncated at 2 std"
        if n >= 4096:  # P(no draw within 5% of the bound) < 1e-9
            assert x.abs().max().item() > 0.95 * bound, f"{name}: truncated too early"


@pytest.mark.parametrize("name", PAPER_PRESETS)
def test_paper_init_matches_the_authors_initializers(name):
    cfg = paper_model_config(name)
    assert cfg.paper_init
    torch.manual_seed(0)
    model = Transformer(cfg)
    expected = expected_init(model, cfg)
    names = {n for n, _ in model.named_parameters()}
    assert names == set(expected), f"parameters without an expectation: {sorted(names - set(expected))}"
    for parameter_name, value in model.named_parameters():
        check_parameter(parameter_name, value, *expected[parameter_name])


@pytest.mark.parametrize("name, table_std", [("logic_4var_2term", 0.25), ("raven_3x3_4features", 1 / 6)])
def test_position_tables_are_untruncated_normals_of_the_authors_scale(name, table_std):
    """16 buckets: std 0.25; 36 buckets: 1/6 (the authors' model measured 0.17-0.18 RMS). Pooled over
    layers the tables are large enough to show values beyond 2 std, which a truncated init lacks."""
    torch.manual_seed(0)
    model = Transformer(paper_model_config(name))
    tables = torch.cat([block.position.table.weight.flatten() for block in model.blocks])
    assert tables.std().item() == pytest.approx(table_std, rel=6 / math.sqrt(2 * tables.numel()))
    assert tables.abs().max().item() > 2.2 * table_std


def test_token_embedding_std_is_one_over_sqrt_dim():
    cfg = paper_model_config("wiki_wikitext103")
    torch.manual_seed(0)
    weight = Transformer(cfg).embed.weight
    assert weight.shape == (6144, 128)
    assert weight.std().item() == pytest.approx(1 / math.sqrt(128), rel=0.01)  # 0.088


def test_without_paper_init_the_tables_keep_pytorchs_unit_normal():
    cfg = replace(paper_model_config("logic_4var_2term"), paper_init=False)
    torch.manual_seed(0)
    tables = torch.cat([block.position.table.weight.flatten() for block in Transformer(cfg).blocks])
    assert tables.std().item() == pytest.approx(1.0, rel=0.2)


def test_the_derived_statistics_agree_with_jax_initializers():
    """Checks this file's reading of the Flax definitions against JAX itself (optional oracle)."""
    jax = pytest.importorskip("jax")
    initializers = jax.nn.initializers
    embed_init = initializers.variance_scaling(1.0, "fan_in", "normal", out_axis=0)  # Flax default_embed_init
    for shape in [(8, 16), (16, 36), (6144, 128)]:
        repeats = max(1, 50_000 // math.prod(shape))
        draws = np.concatenate([np.asarray(embed_init(jax.random.PRNGKey(i), shape)).ravel() for i in range(repeats)])
        assert draws.std() == pytest.approx(math.sqrt(1 / flax_embed_fan_in(shape)), rel=0.02), shape
    lecun = initializers.lecun_normal()  # Flax default_kernel_init; kernel [in, out]
    for fan_in, fan_out in [(128, 16), (16, 128), (512, 3072)]:
        draws = np.asarray(lecun(jax.random.PRNGKey(0), (fan_in, fan_out)))
        target = math.sqrt(1 / fan_in)
        assert draws.std() == pytest.approx(target, rel=0.03)
        assert np.abs(draws).max() <= 2 * target / truncated_normal_std(2.0) * (1 + 1e-5)


def test_truncated_normal_is_the_same_draw_under_every_torch_version():
    """The dense kernels' truncated normal draws with `normal_` alone, so a seed gives the same
    weights under any torch version (torch 2.11's `nn.init.trunc_normal_` drew other numbers): it
    equals torch 2.13's `trunc_normal_` draw for draw, the generator's state after it included, and
    a seed-0 draw keeps the values it had with torch 2.13 (383 of its first 8,192 normals were
    out of range and redrawn)."""
    torch.manual_seed(0)
    weight = truncated_normal_(torch.empty(64, 128), std=0.1)
    after = torch.randn(3)
    assert weight.abs().max().item() <= 0.2
    first = [-0.11258398741483688, -0.11523602157831192, -0.025057857856154442, -0.04338788241147995]
    assert weight.flatten()[:4].tolist() == first
    assert weight.double().sum().item() == pytest.approx(-11.205495754107687, rel=1e-12)
    if TorchVersion(torch.__version__) >= "2.13":
        torch.manual_seed(0)
        assert torch.equal(nn.init.trunc_normal_(torch.empty(64, 128), std=0.1, a=-0.2, b=0.2), weight)
        assert torch.equal(torch.randn(3), after)
