"""Latent-code interventions (hyla/analysis/patching.py, hyla/analysis/interventions.py,
docs/interventions.md): patching with a model's own codes changes nothing, patching with other codes
is the formula of docs/math.md computed independently here in float64, bad input is a one-line
ValueError, and the experiments and the `hyla interventions` command run end to end on tiny
models."""

import json
import math
import re
import runpy
from pathlib import Path

import numpy as np
import pytest
import torch
from helpers_train import tiny_model_config

from hyla.analysis import interventions as iv
from hyla.analysis import patch_latents, patching
from hyla.analysis.intervention_report import group_stat, summarize, tables, verdict, verdict_lines
from hyla.nn import MultiHeadAttention
from hyla.nn.transformer import Transformer
from hyla.ops import NAMED_MIXERS
from hyla.tasks import FuzzyLogic, SRaven

MIXERS = list(NAMED_MIXERS)  # the eight named mixers of docs/math.md
MLP_IMPLEMENTATIONS = ("naive", "streamed", "cpp")
SEQ_LEN = 8


def tiny_model(mixer: str, dtype=torch.float32, **overrides) -> Transformer:
    torch.manual_seed(0)
    cfg = tiny_model_config(**{"mixer": mixer, "seq_len": SEQ_LEN, "input_dim": 4, **overrides})
    return Transformer(cfg).to(dtype).eval()


def inputs(batch: int = 6, seed: int = 1, dtype=torch.float32) -> torch.Tensor:
    return torch.rand(batch, SEQ_LEN, 4, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ----------------------------------------------------------------------------- (a) own codes: nothing changes
@pytest.mark.parametrize("mixer", MIXERS)
@torch.no_grad()
def test_own_codes_change_nothing_bit_for_bit(mixer, set_switch):
    """ "Nothing" = the same model under the same patch with codes=None (no code replaced; the patched
    layers compute their output from their own codes with the reference formula). Compared bit for
    bit: outputs and returned latents. Against the unpatched model: equal to float rounding (bit for
    bit where the unpatched layer runs the naive implementation, as the linear value network on CPU
    does with HYLA_CPP_LINEAR=0).
    Outputs at every position (return_latents=True) throughout: a plain `model(x)` computes its last
    layer for the last query only, and products of that shape may round differently (AVX2 CPUs)."""
    set_switch("HYLA_CPP_LINEAR", "0")
    model, x = tiny_model(mixer), inputs()
    plain, codes = model(x, return_latents=True)
    where = patching.pair_mask(torch.full((len(x),), SEQ_LEN - 1), SEQ_LEN)
    for layer in range(2):  # one layer: codes of a plain run are exactly what the patched layer computes
        for mask in (None, where):
            with patch_latents(model, layer=layer):
                reference = model(x, return_latents=True)[0]
            with patch_latents(model, layer=layer, codes=codes, where=mask):
                patched = model(x, return_latents=True)[0]
            assert torch.equal(patched, reference)
            torch.testing.assert_close(reference, plain, rtol=1e-5, atol=1e-5)
            if model.blocks[0].attention.mixer.value_network == "linear":
                assert torch.equal(reference, plain)
    # all layers: the own codes are those computed under the same patch (earlier patched layers round
    # differently from the implementation they replace)
    with patch_latents(model, layer="all"):
        reference, own = model(x, return_latents=True)
    with patch_latents(model, layer="all", codes=own):
        patched, returned = model(x, return_latents=True)
    assert torch.equal(patched, reference)
    assert all(torch.equal(a, b) for a, b in zip(returned, own))
    assert all(layer.latent_patch is None for layer in patching.attention_layers(model))


@pytest.mark.parametrize("implementation", MLP_IMPLEMENTATIONS)
@pytest.mark.parametrize("mixer", ["hyla", "hyla_identity_no_rms_head", "softmax_hyla"])
@torch.no_grad()
def test_patch_works_whatever_implementation_the_layer_runs(mixer, implementation):
    model, x = tiny_model(mixer), inputs()
    for layer in patching.attention_layers(model):
        layer.implementation = implementation
    if implementation == "cpp" and model.blocks[0].attention.mixer.normalization == "softmax":
        pytest.skip("the C++ kernel takes rms_head and none only")
    plain, codes = model(x, return_latents=True)
    donor = model(inputs(seed=2), return_latents=True)[1]
    with patch_latents(model, layer=1):
        reference = model(x, return_latents=True)[0]
    with patch_latents(model, layer=1, codes=codes):
        assert torch.equal(model(x, return_latents=True)[0], reference)
    with patch_latents(model, layer=1, codes=donor):
        moved = model(x, return_latents=True)[0]
    torch.testing.assert_close(reference, plain, rtol=1e-5, atol=1e-5)
    assert (moved - reference).abs().max() > 1e-4


# ----------------------------------------------------------------------------- (b) other codes: the formula
def normalize_float64(s: torch.Tensor, normalization: str) -> torch.Tensor:
    """docs/math.md "Scores and normalization", s [B, H, Tq, Tk]."""
    if normalization == "softmax":
        e = torch.exp(s - s.max(-1, keepdim=True).values)
        return e / e.sum(-1, keepdim=True)
    if normalization == "rms_head":
        return s / torch.sqrt((s * s).mean(1, keepdim=True) + 1e-6)
    return s


def attention_by_formula(module: MultiHeadAttention, x: torch.Tensor, codes, where, bias=None):
    """The module's output with the codes `where` replaced, written from docs/math.md (loops over
    the pairs for HYLA's value network). x [B, T, D]; codes [B, H, T, T]; where bool [B, 1, T, T]."""
    mixer, H = module.mixer, module.num_heads
    project = lambda linear, t: (t @ linear.weight.T + linear.bias).unflatten(-1, (H, -1))  # noqa: E731
    q, k, v = project(module.query, x), project(module.key, x), project(module.value, x)  # [B, T, H, d]
    s = torch.einsum("bqhd,bkhd->bhqk", q, k) / math.sqrt(q.shape[-1]) + (0 if bias is None else bias)
    a = torch.where(where, codes, normalize_float64(s, mixer.normalization))  # [B, H, T, T]
    B, T = x.shape[:2]
    y = torch.zeros(B, T, H, v.shape[-1], dtype=x.dtype)
    act = {"relu": torch.relu, "identity": lambda t: t}[mixer.activation]
    for b in range(B):
        for i in range(T):
            for j in range(T):
                if mixer.value_network == "linear":  # y_q,h = sum_k a_hqk v_k,h
                    y[b, i] += a[b, :, i, j, None] * v[b, j]
                else:  # u_qk = act(sum_h a_hqk v_k,h);  y_q,h = sum_k a_hqk u_qk
                    u = act((a[b, :, i, j, None] * v[b, j]).sum(0))
                    y[b, i] += a[b, :, i, j, None] * u
    return y.flatten(-2) @ module.out.weight.T + module.out.bias


@pytest.mark.parametrize("mixer", MIXERS)
@torch.no_grad()
def test_other_codes_give_the_formula_of_math_md(mixer):
    torch.manual_seed(0)
    module = MultiHeadAttention(12, 3, mixer, qk_dim=6, v_dim=9).double().eval()
    x1, x2 = torch.randn(2, 5, 12, dtype=torch.float64), torch.randn(2, 5, 12, dtype=torch.float64)
    _, donor = module(x2, return_latents=True)
    s2 = torch.einsum(
        "bqhd,bkhd->bhqk", module.query(x2).unflatten(-1, (3, 2)), module.key(x2).unflatten(-1, (3, 2))
    ) / math.sqrt(2)
    torch.testing.assert_close(donor, normalize_float64(s2, module.mixer.normalization), rtol=1e-12, atol=1e-12)
    where = torch.rand(2, 1, 5, 5, generator=torch.Generator().manual_seed(3)) < 0.5
    with patch_latents(module, layer=0, codes=donor, where=where):
        patched, returned = module(x1, return_latents=True)
    expected = attention_by_formula(module, x1, donor, where)
    torch.testing.assert_close(patched, expected, rtol=1e-12, atol=1e-12)
    torch.testing.assert_close(returned[where.expand_as(returned)], donor[where.expand_as(donor)], rtol=0, atol=0)


@pytest.mark.parametrize("mixer", ["hyla", "softmax"])
@torch.no_grad()
def test_patched_last_block_of_a_transformer_is_the_formula(mixer):
    """The last block computes only the read-out query (the model prunes the others): the patch takes
    the last rows of full-sequence codes. Blocks other than the patched attention run as modules."""
    model = tiny_model(mixer, torch.float64, num_outputs=2, output_dim=3)
    x1, x2 = inputs(dtype=torch.float64), inputs(seed=2, dtype=torch.float64)
    donor = model(x2, return_latents=True)[1]
    where = patching.pair_mask(torch.full((len(x1),), SEQ_LEN - 1), SEQ_LEN)  # the last query, every key
    with patch_latents(model, layer=1, codes=donor, where=where):
        pruned = model(x1)
        full = model(x1, return_latents=True)[0]
    block = model.blocks[1]
    h = model.blocks[0](model.embed(x1))[0]
    bias = block.position(SEQ_LEN, SEQ_LEN, 0)
    h = h + attention_by_formula(block.attention, block.attention_norm(h), donor[1], where, bias)
    h = h + block.feedforward(block.feedforward_norm(h))
    expected = model.head(model.final_norm(h)[:, -2:])
    torch.testing.assert_close(pruned, expected, rtol=1e-10, atol=1e-10)
    torch.testing.assert_close(full, expected, rtol=1e-10, atol=1e-10)


# ----------------------------------------------------------------------------- (c) errors: one line
def one_line_error(call, match: str) -> None:
    with pytest.raises(ValueError, match=match) as error:
        call()
    assert "\n" not in str(error.value)


@torch.no_grad()
def test_bad_input_is_a_one_line_value_error_and_patches_are_removed():
    model, x = tiny_model("hyla"), inputs()
    codes = model(x, return_latents=True)[1]

    def run(**kwargs):
        with patch_latents(model, **kwargs):
            model(x)

    one_line_error(lambda: run(layer=2), r"layer=2 is not valid; valid: 0\.\.1")
    one_line_error(lambda: run(layer="first"), "is not valid")
    one_line_error(lambda: run(layer=[0, 0]), "names a layer twice")
    one_line_error(lambda: run(layer="all", codes=codes[0]), "one codes tensor for 2 layers")
    one_line_error(lambda: run(layer=0, codes=codes[:1]), r"one entry per layer \(2\)")
    one_line_error(lambda: run(layer=0, codes=codes[0].long()), "must be a float tensor")
    one_line_error(lambda: run(layer=0, codes=codes[0][:, :3]), r"codes of layer 0 has shape \(6, 3, 8, 8\)")
    one_line_error(lambda: run(layer=1, codes=codes[1][:2]), "does not fit")
    one_line_error(lambda: run(layer=0, codes=codes, where=torch.ones(6, 1, 8, 8)), "where must be a bool")
    one_line_error(
        lambda: run(layer=0, codes=codes, where=torch.ones(6, 1, 7, 8, dtype=torch.bool)), "where of layer 0"
    )
    with patch_latents(model, layer=0):
        one_line_error(lambda: run(layer=[1, 0]), "layer 0 is already patched")
    model.train()
    one_line_error(lambda: run(layer=0), "training mode")
    model.eval()
    with pytest.raises(RuntimeError), patch_latents(model, layer="all", codes=codes):
        raise RuntimeError("an error inside the block")
    assert all(layer.latent_patch is None for layer in patching.attention_layers(model))


# ----------------------------------------------------------------------------- the experiments' pieces
def test_fuzzy_logic_sequences_are_the_tasks_and_pairs_share_one_term():
    task = FuzzyLogic(num_variables=3, num_terms=2, seq_len=SEQ_LEN, frac_held_out=0.3)
    batch = task.batch("valid", 64, 0)
    for row in range(64):
        x, y = iv.fuzzy_logic_sequences(batch.info["term_indices"][row], batch.x[row : row + 1, :, :3])
        assert torch.equal(x[0], batch.x[row]) and torch.equal(y, batch.y[row])
    tasks = task.split_tasks("valid")
    pairs = iv.sharing_pairs(tasks)
    assert len(pairs) > 0
    for i, j in pairs.tolist():
        assert len(set(tasks[i].tolist()) & set(tasks[j].tolist())) == 1


def test_implied_answers_contain_the_answer_of_every_rule():
    task = SRaven(num_features=4, permute=False)
    batch = task.batch("valid", 512, 0)
    panels, rules = batch.info["panels"], batch.info["rules"]  # [B, 3, 3, K], [B, K]
    for feature in range(4):
        implied = iv.implied_answers(panels[:, 2, 0, feature], panels[:, 2, 1, feature], 8)  # [B, 7, 2]
        ruled = rules[:, feature] < iv.DISTRIBUTE_THREE
        own = implied[ruled, rules[ruled, feature]]  # [n, 2]
        assert (own == panels[ruled, 2, 2, feature, None]).any(1).all()


# ----------------------------------------------------------------------------- the calibrated score
def test_scale_scores_per_query_between_start_and_end_and_skips_close_ones():
    """(value − start) / (end − start) per query, mean ± s.e. over queries whose start and end lie
    MIN_GAP apart. A constant prediction 0.5 against (start, end) = (0, 1) and (0.2, 0.6): 0.5 and
    0.75; the third query (gap 0.05) is left out."""
    scale = iv.Scale(lambda logits: logits, torch.tensor([0.0, 0.2, 0.3]), torch.tensor([1.0, 0.6, 0.35]), seed=0)
    assert scale.scored.tolist() == [True, True, False]
    constant = scale.of_values(torch.full((3,), 0.5))
    assert constant["mean"] == pytest.approx(0.625) and constant["se"] == pytest.approx(0.125)
    assert constant["scores"].tolist() == pytest.approx([0.5, 0.75]) and constant["median"] == pytest.approx(0.625)
    assert 0.5 <= constant["median_ci"][0] <= constant["median_ci"][1] <= 0.75
    assert statistics(scale.of_values(scale.start)) == (0.0, 0.0, 0.0, [0.0, 0.0])
    assert statistics(scale.of_values(scale.end)) == (1.0, 0.0, 1.0, [1.0, 1.0])
    assert iv.mean_se(torch.tensor([])) == {"mean": None, "se": None}
    assert iv.median_interval([np.array([])], 0) == {"median": None, "median_ci": None}


def statistics(stat: dict) -> tuple:
    return stat["mean"], stat["se"], stat["median"], stat["median_ci"]


def test_median_interval_covers_the_median_narrows_with_more_queries_and_is_seeded():
    """Synthetic heavy-tailed scores (Student t, 2 degrees of freedom, median 0.3): the percentile
    bootstrap interval holds the known median, narrows about as 1/sqrt(n), and is the same for the
    same seed; the mean of such scores is at the mercy of a few queries, the median is not."""
    rng = np.random.default_rng(7)
    widths = []
    for n in (100, 1600):
        scores = 0.3 + rng.standard_t(2, size=n)
        stat = iv.median_interval([scores], seed=3)
        low, high = stat["median_ci"]
        assert stat["median"] == pytest.approx(np.median(scores)) and low < stat["median"] < high
        assert low < 0.3 < high
        widths.append(high - low)
        assert iv.median_interval([scores], seed=3) == stat
        assert iv.median_interval([scores], seed=4) != stat
    assert widths[1] < widths[0] / 2.5  # 16 times the queries: about a quarter of the width
    outlier = np.append(np.zeros(99), 100.0)  # one wild query
    assert np.mean(outlier) == pytest.approx(1.0) and iv.median_interval([outlier], 0)["median_ci"] == [0.0, 0.0]


def test_median_interval_over_models_pools_them_and_widens_with_their_spread():
    """Several models: the median of all their queries; the interval draws models, then their
    queries, so models that disagree widen it beyond one model's interval of the same size."""
    rng = np.random.default_rng(0)
    same = [rng.normal(0.5, 0.1, 300) for _ in range(3)]
    apart = [rng.normal(centre, 0.1, 300) for centre in (0.0, 0.5, 1.0)]
    pooled = iv.median_interval([np.concatenate(same)], 0)
    over_same, over_apart = iv.median_interval(same, 0), iv.median_interval(apart, 0)
    assert over_same["median"] == pytest.approx(np.median(np.concatenate(same)))
    assert over_same["median_ci"][0] < 0.5 < over_same["median_ci"][1]
    width = lambda stat: stat["median_ci"][1] - stat["median_ci"][0]  # noqa: E731
    assert width(over_apart) > 5 * width(over_same) and width(over_same) < 2 * width(pooled)
    uneven = iv.median_interval([np.array([0.0, 1.0, 2.0]), np.array([5.0])], 0)  # sizes differ
    assert uneven["median"] == 1.5 and 0.0 <= uneven["median_ci"][0] <= uneven["median_ci"][1] <= 5.0


def test_sraven_reference_distributions_and_their_mass_on_b_answers():
    answers = torch.tensor([[3, 3], [1, 5]])  # one reading; two readings
    uniform = torch.full((2, 8), 1 / 8, dtype=torch.float64)
    assert iv.answer_mass(uniform, answers).tolist() == [0.125, 0.25]  # the chance of a random guess
    rule = iv.answers_distribution(answers, 8)
    assert rule[0, 3] == 1 and rule[1, 1] == rule[1, 5] == 0.5 and rule.sum(1).tolist() == [1, 1]
    assert iv.answer_mass(rule, answers).tolist() == [1.0, 1.0]
    assert iv.answer_mass(rule, torch.tensor([[1, 1], [5, 2]])).tolist() == [0.0, 0.5]


def codes_only_model(mixer: str) -> Transformer:
    """A tiny model whose attention values are one constant vector (value weights 0): what reaches
    the fuzzy-logic query, whose token A and B share, is set by its latent codes alone."""
    model = tiny_model(mixer)
    with torch.no_grad():
        for layer in patching.attention_layers(model):
            layer.value.weight.zero_()
            layer.value.bias.normal_(generator=torch.Generator().manual_seed(0))
        model.head.weight.mul_(50.0)  # predictions of A and B far enough apart to be scored
    return model


@torch.no_grad()
def test_score_is_0_for_own_codes_and_1_for_a_patch_that_reproduces_b():
    task = FuzzyLogic(num_variables=3, num_terms=2, seq_len=SEQ_LEN, frac_held_out=0.3)
    model = codes_only_model("hyla")
    entry = iv.fuzzy_logic_interventions(model, task, num_pairs=4, samples=8)["valid"]
    assert entry["num_scored"] >= 8
    assert statistics(entry["reference"]["unpatched"]) == (0.0, 0.0, 0.0, [0.0, 0.0])
    assert statistics(entry["reference"]["donor_run"]) == (1.0, 0.0, 1.0, [1.0, 1.0])
    # the query's codes to every key, in every layer, from B's run: the query's state is B's throughout
    patched = entry["sites"]["row"]["all layers"]["patched"]
    assert patched["mean"] == pytest.approx(1.0, abs=1e-4) and patched["se"] < 1e-4
    assert entry["reference_formula"]["mean"] == pytest.approx(0.0, abs=1e-4)
    # layer 0's query token is the same in A and B: B's query against A's keys is A's own code
    assert entry["sites"]["row"]["layer 0"]["query_side"]["mean"] == pytest.approx(0.0, abs=1e-4)
    # A's own codes patched in (one layer: exactly the codes the patched layer computes) score 0
    x, prediction = inputs(16), lambda logits: logits.reshape(-1).double()  # noqa: E731
    logits, codes = iv.model_codes(model, x, 8)
    donor = prediction(iv.model_codes(model, inputs(16, seed=5), 8)[0])
    scale = iv.Scale(prediction, prediction(logits), donor, seed=0)
    own = scale.of_logits(iv.patched_logits(model, x, [1], codes, None, 8))
    assert scale.scored.sum() >= 4 and own["mean"] == pytest.approx(0.0, abs=1e-4)


@torch.no_grad()
def test_query_side_codes_are_b_queries_against_a_keys():
    model, x_a, x_b = (
        tiny_model("softmax", torch.float64),
        inputs(dtype=torch.float64),
        inputs(seed=2, dtype=torch.float64),
    )
    codes = iv.query_side_codes(model, x_b, x_a, batch_size=4)
    own = iv.model_codes(model, x_a, 4)[1]
    torch.testing.assert_close(iv.query_side_codes(model, x_a, x_a, 4)[1], own[1], rtol=1e-12, atol=1e-12)
    layer, block = model.blocks[0].attention, model.blocks[0]
    project = lambda linear, x: linear(block.attention_norm(model.embed(x))).unflatten(-1, (4, -1))  # noqa: E731
    q_b, k_a = project(layer.query, x_b), project(layer.key, x_a)  # [B, T, H, d]
    s = torch.einsum("bqhd,bkhd->bhqk", q_b, k_a) / math.sqrt(q_b.shape[-1]) + block.position(SEQ_LEN, SEQ_LEN, 0)
    torch.testing.assert_close(codes[0], s.softmax(-1), rtol=1e-12, atol=1e-12)


def test_group_stat_is_over_models_and_keeps_each_models_number():
    first, second = (
        iv.query_stats(torch.tensor(scores, dtype=torch.float64), seed=0)
        for scores in ([0.1, 0.2, 0.3], [0.3, 0.5, 1.0])
    )
    two = group_stat([first, second], seed=0)
    assert two["mean"] == pytest.approx(0.4) and two["se"] == pytest.approx(0.2)
    assert two["per_model"] == [first["mean"], second["mean"]] and two["per_model_median"] == [0.2, 0.5]
    assert two["median"] == pytest.approx(0.3) and two["median_ci"][0] <= 0.3 <= two["median_ci"][1]
    one = group_stat([first], seed=0)
    assert statistics(one) == statistics(first) and one["per_model"] == [first["mean"]]


def interval(low: float, high: float) -> dict:
    return {"mean": (low + high) / 2, "se": 0.0, "median": (low + high) / 2, "median_ci": [low, high]}


def test_verdict_needs_the_patch_median_interval_above_every_control_and_reference_but_b_own():
    settings = {
        "layer 0": {"patched": interval(0.30, 0.40), "query_side": interval(0.0, 0.1)},
        "all layers": {"patched": interval(0.30, 0.40), "query_side": interval(0.25, 0.31)},  # reaches it
    }
    for conditions in settings.values():
        conditions |= {"random_donor": interval(0.0, 0.1), "shuffled_heads": interval(-0.1, 0.2)}
    reference = {"unpatched": interval(0, 0), "donor_target": interval(1, 1), "constant": interval(0.2, 0.29)}
    group = {"task": "sraven", "mixer": "hyla", "splits": {"ood": {"reference": reference, "sites": {}}}}
    group["splits"]["ood"]["sites"] = {"probe": settings, "row": settings}
    [result] = verdict(group).values()
    assert result == {"transfers": False, "blockers": ["query_side"], "passes_at": ["probe, layer 0", "row, layer 0"]}
    settings["all layers"]["query_side"] = interval(0.25, 0.29)
    assert verdict(group)["ood"]["transfers"]
    reference["constant"] = interval(0.2, 0.3)  # a reference reaching its lower bound blocks it, B's own (1) never
    assert verdict(group)["ood"]["blockers"] == ["constant"]
    assert "sraven, hyla, ood: does not transfer (interval reached by constant prediction)" in verdict_lines([group])


@torch.no_grad()
def test_sraven_experiment_runs_and_its_references_are_on_the_scale():
    task = SRaven(num_features=3)
    model = tiny_model("hyla", seq_len=27, input_dim=8, output_dim=8, num_outputs=3)
    results = iv.interventions(model, task, num_pairs=2, samples=16)
    assert results["layer_settings"] == ["layer 0", "layer 1", "all layers"]
    for split in ("valid", "ood"):
        entry = results["splits"][split]
        assert entry["num_sequences"] > 0 and sum(entry["rule_pairs"].values()) == entry["num_sequences"]
        assert entry["num_scored"] == entry["num_sequences"]  # an untrained model gives B's answers little
        reference = entry["reference"]
        assert set(reference) == set(iv.REFERENCES["sraven"])
        assert statistics(reference["unpatched"]) == (0.0, 0.0, 0.0, [0.0, 0.0])
        assert reference["donor_target"]["mean"] == reference["donor_target"]["median"] == 1.0
        assert entry["reference_formula"]["mean"] == pytest.approx(0.0, abs=1e-6)
        for site in iv.SITES:
            for conditions in entry["sites"][site].values():
                assert set(conditions) == set(iv.CONDITIONS)
                assert all(-1 <= c["mean"] <= 1 and -1 <= c["median"] <= 1 for c in conditions.values())


@torch.no_grad()
def test_fuzzy_logic_references_a_perfect_random_task_and_a_constant():
    task = FuzzyLogic(num_variables=3, num_terms=2, seq_len=SEQ_LEN, frac_held_out=0.3)
    results = iv.interventions(codes_only_model("softmax_hyla"), task, num_pairs=3, samples=8)
    entry = results["splits"]["valid"]
    assert entry["num_pairs"] == 3 and entry["num_sequences"] <= 24 and entry["num_scored"] > 0
    assert set(entry["reference"]) == set(iv.REFERENCES["fuzzy_logic"])
    assert all(c["mean"] is not None for s in entry["sites"].values() for c in s["all layers"].values())
    assert 0.2 < iv.mean_training_target(task, 0) < 0.8


# ----------------------------------------------------------------------------- the command
def test_interventions_command_over_several_models(tmp_path, capsys):
    from helpers_cli import tiny_run

    from hyla import cli

    runs = [
        tiny_run(tmp_path / "hyla"),
        tiny_run(tmp_path / "hyla", name="run_b", batch_size=8),  # another model of the same mixer
        tiny_run(tmp_path / "softmax", mixer="softmax"),
    ]
    out = tmp_path / "report"
    argv = ["interventions", *map(str, runs), "--tasks", "2", "--samples", "8", "--out", str(out)]
    assert cli.main(argv) == 0
    files = sorted(path.name for path in out.iterdir())
    assert files == [
        "inputs.json",
        "interventions_tasks2_samples8_seed0.json",
        "interventions_tasks2_samples8_seed0.png",
    ]
    assert json.loads((out / "inputs.json").read_text()) == {
        "inputs": sorted(f"../{run.parent.name}/{run.name}" for run in runs)
    }
    report = json.loads((out / files[1]).read_text())
    assert [m["model"]["label"] for m in report["models"]] == ["hyla-run", "hyla-run_b", "softmax-run"]
    assert all(not m["model"]["path"].startswith("/") for m in report["models"])
    hyla, softmax = report["groups"]
    assert (hyla["mixer"], hyla["models"], hyla["error_bars"]) == ("hyla", ["hyla-run", "hyla-run_b"], "models")
    assert softmax["error_bars"] == "queries"
    patched = hyla["splits"]["valid"]["sites"]["row"]["all layers"]["patched"]
    per_model = [m["splits"]["valid"]["sites"]["row"]["all layers"]["patched"]["mean"] for m in report["models"][:2]]
    assert patched["per_model"] == per_model and patched["mean"] == pytest.approx(sum(per_model) / 2)
    assert patched["per_model_median"] == [
        m["splits"]["valid"]["sites"]["row"]["all layers"]["patched"]["median"] for m in report["models"][:2]
    ]
    assert "scores" not in json.dumps(report)  # per-query scores stay in memory
    captured = capsys.readouterr()
    row = f"| valid | row | all layers | mean ± s.e. | {patched['mean']:.2f} ± {patched['se']:.2f} |"
    low, high = patched["median_ci"]
    assert row in captured.out  # the numbers, on the terminal, the median on the next row
    assert (
        f"| valid | row | all layers | median [95% CI] | {patched['median']:.2f} [{low:.2f}, {high:.2f}] |"
        in captured.out
    )
    assert captured.out.count("How to read the fuzzy logic tables (details: docs/interventions.md)") == 1
    assert "- site probe: the query's code to itself" in captured.out and "- leak control: " in captured.out
    err = captured.err.splitlines()
    assert err[0].startswith("interventions: 3 model(s), 2 task pairs x 8 sequences per split, seed 0, on cpu;")
    assert err[0].endswith(f"writes {out / 'interventions_tasks2_samples8_seed0'}.json and .png")
    models = [line for line in err if line.startswith("interventions: model ")]
    first = r"interventions: model 1/3: hyla-run \(fuzzy_logic, hyla, seed \d+\) \([\dms]+ elapsed\)"
    second = r"interventions: model 2/3: hyla-run_b \(fuzzy_logic, hyla, seed \d+\) \([\dms]+ elapsed, ETA [\dms]+\)"
    assert len(models) == 3 and re.fullmatch(first, models[0]) and re.fullmatch(second, models[1]), models
    # a log gets one line per model per stage (and an ETA line every 30 s: none in these seconds)
    assert sum(line.startswith("interventions: fuzzy logic valid: 2 task pairs") for line in err) == 3
    assert len(err) == 2 + 3 * 3 + 1, err  # the first line and loading; per model: itself, valid, ood; the summary
    script = runpy.run_path(str(Path(__file__).parents[2] / "experiments" / "interventions_table.py"))
    script["main"]([str(out)])
    assert tables(report["groups"]) in capsys.readouterr().out  # experiments/interventions_table.py: the same


def test_interventions_command_one_run_and_bad_input(tmp_path, capsys):
    from helpers_cli import tiny_run

    from hyla import cli

    run = tiny_run(tmp_path)
    assert cli.main(["interventions", str(run), "--tasks", "2", "--samples", "8", "--seed", "1"]) == 0
    files = sorted(path.name for path in (run / "interventions").iterdir())
    assert files == ["interventions_tasks2_samples8_seed1.json", "interventions_tasks2_samples8_seed1.png"]
    report = json.loads((run / "interventions" / files[0]).read_text())
    assert report["models"][0]["model"]["checkpoint_step"] == 20
    assert report["models"][0]["options"] == {"tasks": 2, "samples": 8, "seed": 1}
    assert "over queries (one model)" in capsys.readouterr().out
    for argv, message in (
        ([str(run), "--tasks", "0"], "--tasks=0 must be >= 1"),
        ([str(run), str(run)], "--out is needed with 2 models"),
        ([], "give a run folder or an exported model"),
    ):
        assert cli.main(["interventions", *argv]) == 2
        err = capsys.readouterr().err
        assert err.startswith("hyla interventions: error:") and message in err and err.count("\n") == 1
    assert cli.main(["interventions", str(run), str(run), "--out", str(tmp_path / "o")]) == 2
    assert "a model is named twice" in capsys.readouterr().err
    assert cli.main(["interventions", str(tmp_path / "nowhere")]) == 2
    *_, last = capsys.readouterr().err.splitlines()  # after the first line (what runs, where it writes)
    assert last.startswith("hyla interventions: error:") and "nowhere" in last


# ----------------------------------------------------------------------------- the figure
def synthetic_result(mixer: str, num_layers: int, seed: int, far: float) -> dict:
    """What `interventions` returns for one SRAVEN model, with random per-query scores; the patch
    in all layers of the ood row scores `far` on every query (a value beyond the figure's axis)."""
    rng = np.random.default_rng(seed)
    stats = lambda centre: iv.query_stats(torch.tensor(centre + rng.standard_t(3, 64) / 10), seed=0)  # noqa: E731
    settings = list(iv.layer_settings(num_layers))
    splits = {}
    for split in iv.SPLITS:
        sites = {site: {s: {c: stats(0.1) for c in iv.CONDITIONS} for s in settings} for site in iv.SITES}
        reference = {name: stats(0.15) for name in iv.REFERENCES["sraven"]}
        splits[split] = {"num_scored": 64, "reference": reference, "sites": sites}
    splits["ood"]["sites"]["row"]["all layers"]["patched"] = iv.query_stats(torch.full((64,), far), seed=0)
    model = {"label": f"{mixer}_s{seed}", "mixer": mixer}
    return {"task": "sraven", "model": model, "options": {"seed": 0}, "layer_settings": settings, "splits": splits}


def test_figure_defines_what_it_draws_marks_clipped_values_and_no_labels_overlap():
    """Every visible text of the rendered figure (titles, ticks, legends, notes, clip marks) stands
    clear of every other; each site, condition and reference has its line; the docs are named."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg
    from matplotlib.text import Text

    from hyla.analysis.intervention_figure import interventions_figure
    from hyla.analysis.intervention_terms import DEFINITIONS, LABELS

    results = [synthetic_result(mixer, 4, seed, 5.0) for mixer in ("hyla", "softmax") for seed in (0, 1)]
    figure = interventions_figure(summarize(results))
    canvas = FigureCanvasAgg(figure)
    canvas.draw()
    texts = [t for t in figure.findobj(Text) if t.get_visible() and t.get_text().strip()]
    boxes = [t.get_window_extent(canvas.get_renderer()) for t in texts]
    overlaps = [
        (texts[i].get_text(), texts[j].get_text())
        for i in range(len(texts))
        for j in range(i + 1, len(texts))
        if boxes[i].overlaps(boxes[j])
    ]
    assert not overlaps
    width = figure.get_figwidth() * figure.dpi
    assert all(0 <= box.x0 and box.x1 <= width for box in boxes)  # no note runs off the figure
    strings = {t.get_text() for t in texts}
    assert "5.00 ◆5.00" in strings  # the clipped patch: mean and median, with their value
    for name in (*iv.SPLITS, "probe", "row", *iv.CONDITIONS, *iv.REFERENCES["sraven"]):
        assert DEFINITIONS["sraven"].get(name, DEFINITIONS.get(name)) in strings
    assert {"constant prediction", "perfect random rule", "B's answer = 1"} <= strings  # the lines' legend
    assert {LABELS[c] for c in iv.CONDITIONS} <= strings and any("docs/interventions.md" in s for s in strings)
    assert {"0", "1", "2", "3", "all"} <= strings  # short layer ticks: "layer 3" and "all layers" overlapped
