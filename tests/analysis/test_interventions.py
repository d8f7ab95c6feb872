"""Latent-code interventions (hyla/analysis/interventions.py, docs/interventions.md): patching with a
model's own codes changes nothing, patching with other codes is the formula of docs/math.md computed
independently here in float64, bad input is a one-line ValueError, and the experiments and the
`hyla interventions` command run end to end on tiny models."""

import json
import math

import pytest
import torch

from hyla.analysis import interventions as iv
from hyla.analysis import patch_latents
from hyla.nn import MultiHeadAttention
from hyla.nn.transformer import ModelConfig, Transformer
from hyla.ops import NAMED_MIXERS
from hyla.tasks import FuzzyLogic, SRaven

MIXERS = list(NAMED_MIXERS)  # the eight named mixers of docs/math.md
MLP_IMPLEMENTATIONS = ("naive", "pointwise", "fused", "streamed", "cpp")
SEQ_LEN = 8


def tiny_model(mixer: str, dtype=torch.float32, **overrides) -> Transformer:
    torch.manual_seed(0)
    cfg = dict(
        num_layers=2, dim=16, num_heads=4, qk_dim=8, v_dim=8, mlp_dim=32, mixer=mixer, seq_len=SEQ_LEN, input_dim=4
    )
    return Transformer(ModelConfig(**{**cfg, **overrides})).to(dtype).eval()


def inputs(batch: int = 6, seed: int = 1, dtype=torch.float32) -> torch.Tensor:
    return torch.rand(batch, SEQ_LEN, 4, generator=torch.Generator().manual_seed(seed), dtype=dtype)


# ----------------------------------------------------------------------------- (a) own codes: nothing changes
@pytest.mark.parametrize("mixer", MIXERS)
@torch.no_grad()
def test_own_codes_change_nothing_bit_for_bit(mixer):
    """ "Nothing" = the same model under the same patch with codes=None (no code replaced; the patched
    layers compute their output from their own codes with the reference formula). Compared bit for
    bit: outputs and returned latents. Against the unpatched model: equal to float rounding (bit for
    bit where the unpatched layer runs the naive implementation, as the linear value network on CPU).
    Outputs at every position (return_latents=True) throughout: a plain `model(x)` computes its last
    layer for the last query only, and products of that shape may round differently (AVX2 CPUs)."""
    model, x = tiny_model(mixer), inputs()
    plain, codes = model(x, return_latents=True)
    where = iv.pair_mask(torch.full((len(x),), SEQ_LEN - 1), SEQ_LEN)
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
    assert all(layer.latent_patch is None for layer in iv.attention_layers(model))


@pytest.mark.parametrize("implementation", MLP_IMPLEMENTATIONS)
@pytest.mark.parametrize("mixer", ["hyla", "hyla_identity_no_rms_head", "softmax_hyla"])
@torch.no_grad()
def test_patch_works_whatever_implementation_the_layer_runs(mixer, implementation):
    model, x = tiny_model(mixer), inputs()
    for layer in iv.attention_layers(model):
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
    where = iv.pair_mask(torch.full((len(x1),), SEQ_LEN - 1), SEQ_LEN)  # the last query, every key
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
    assert all(layer.latent_patch is None for layer in iv.attention_layers(model))


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
    y_a, y_b = torch.tensor([0.0, 1.0]), torch.tensor([1.0, 0.0])
    assert iv.transfer_scores(y_a, y_a, y_b)["transfer"] == 0 and iv.transfer_scores(y_b, y_a, y_b)["transfer"] == 1
    halfway = iv.transfer_scores((y_a + y_b) / 2, y_a, y_b)
    assert halfway["transfer"] == 0.5 and halfway["projection"] == 0.5


def test_implied_answers_contain_the_answer_of_every_rule():
    task = SRaven(num_features=4, permute=False)
    batch = task.batch("valid", 512, 0)
    panels, rules = batch.info["panels"], batch.info["rules"]  # [B, 3, 3, K], [B, K]
    for feature in range(4):
        implied = iv.implied_answers(panels[:, 2, 0, feature], panels[:, 2, 1, feature], 8)  # [B, 7, 2]
        ruled = rules[:, feature] < iv.DISTRIBUTE_THREE
        own = implied[ruled, rules[ruled, feature]]  # [n, 2]
        assert (own == panels[ruled, 2, 2, feature, None]).any(1).all()


@torch.no_grad()
def test_sraven_experiment_runs_and_scores_are_rates():
    task = SRaven(num_features=3)
    model = tiny_model("hyla", seq_len=27, input_dim=8, output_dim=8, num_outputs=3)
    results = iv.interventions(model, task, None, num_pairs=2, samples=16, progress=False)
    assert results["layer_settings"] == ["layer 0", "layer 1", "all layers"]
    for split in ("valid", "ood"):
        entry = results["splits"][split]
        assert entry["num_sequences"] > 0 and sum(entry["rule_pairs"].values()) == entry["num_sequences"]
        assert entry["reference"]["reference_formula"] == entry["reference"]["unpatched"]
        for site in iv.SITES:
            for conditions in entry["sites"][site].values():
                assert set(conditions) == set(iv.CONDITIONS)
                assert all(0 <= c["transfer"] <= 1 and 0 <= c["kept"] <= 1 for c in conditions.values())


@torch.no_grad()
def test_fuzzy_logic_experiment_runs_and_donor_run_transfers():
    task = FuzzyLogic(num_variables=3, num_terms=2, seq_len=SEQ_LEN, frac_held_out=0.3)
    results = iv.interventions(tiny_model("softmax"), task, None, num_pairs=3, samples=8, progress=False)
    entry = results["splits"]["valid"]
    assert entry["num_pairs"] == 3 and entry["num_sequences"] <= 24
    reference = entry["reference"]
    assert reference["reference_formula"]["transfer"] == pytest.approx(reference["unpatched"]["transfer"])
    scores = [c["transfer"] for site in entry["sites"].values() for s in site.values() for c in s.values()]
    assert all(0 <= t <= 1 for t in scores)


# ----------------------------------------------------------------------------- the command
def test_interventions_command_end_to_end(tmp_path, capsys):
    from helpers_cli import tiny_run

    from hyla import cli

    run = tiny_run(tmp_path)
    assert cli.main(["interventions", str(run), "--tasks", "2", "--samples", "8"]) == 0
    assert cli.main(["interventions", str(run), "--tasks", "2", "--samples", "8", "--seed", "1"]) == 0
    files = sorted((run / "interventions").iterdir())
    assert [f.name for f in files] == [
        f"interventions_tasks2_samples8_seed{seed}.{suffix}" for seed in (0, 1) for suffix in ("json", "png")
    ]
    results = json.loads(files[0].read_text())
    assert {"task", "conditions", "sites", "layer_settings", "options", "run", "splits"} <= results.keys()
    assert results["run"]["checkpoint_step"] == 20 and results["options"] == {"tasks": 2, "samples": 8, "seed": 0}
    valid = results["splits"]["valid"]
    assert {"unpatched", "donor_run", "reference_formula"} <= valid["reference"].keys()
    assert set(valid["sites"]["row"]) == {"layer 0", "layer 1", "all layers"}
    assert set(valid["sites"]["row"]["all layers"]["patched"]) == {"transfer", "projection", "mse_a", "mse_b"}
    err = capsys.readouterr().err
    assert "interventions: fuzzy logic valid" in err and "interventions: figure" in err
    assert cli.main(["interventions", str(run), "--tasks", "0"]) == 2
    err = capsys.readouterr().err
    assert err.startswith("hyla interventions: error:") and "--tasks=0 must be >= 1" in err and err.count("\n") == 1
    assert cli.main(["interventions", str(tmp_path / "nowhere")]) == 2
    assert capsys.readouterr().err.startswith("hyla interventions: error:")
