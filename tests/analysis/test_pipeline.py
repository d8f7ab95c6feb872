"""The whole analysis on models whose latent codes carry the task by construction (so every number
has a known answer), then on a tiny checkpoint trained in the test."""

import json
import math
import re
import time

import numpy as np
import pytest
import torch
from helpers_train import quick_config
from torch import nn

from hyla.analysis import analysis_hook, analyze, measures, pipeline
from hyla.tasks import FuzzyLogic, SRaven
from hyla.train import progress

LAYERS = 2


class Recorder:
    """A task that remembers its last batch, so a planted model can read the task identity
    (the planted model needs that batch whole: keep batch_size >= num_samples)."""

    def __init__(self, task):
        self.task, self.last = task, None

    def __getattr__(self, name):
        return getattr(self.task, name)

    def batch(self, split, batch_size, step):
        self.last = self.task.batch(split, batch_size, step)
        return self.last


class PlantedModel(nn.Module):
    """Random latent codes everywhere, except that layer 1 holds the task at the docs/tasks.md probe
    positions: fuzzy logic, the last token's self-code = (term bits, term membership) + noise;
    SRAVEN, the code from the answer token of feature f to the tokens of feature f in panels
    (2,0), (2,1) = one-hot(rule of f) + noise (positions found from `perm` here, independently)."""

    def __init__(self, recorder: Recorder, num_heads: int, num_outputs: int, output_dim: int):
        super().__init__()
        self.recorder, self.num_heads = recorder, num_heads
        self.num_outputs, self.output_dim = num_outputs, output_dim
        self.weight = nn.Parameter(torch.zeros(()))
        self.generator = torch.Generator().manual_seed(0)

    def forward(self, x, return_latents=False):
        B, T, _ = x.shape
        info = self.recorder.last.info
        latents = [torch.randn(B, self.num_heads, T, T, generator=self.generator) for _ in range(LAYERS)]
        if "terms" in info:
            bits = info["terms"].reshape(B, -1).float()
            membership = torch.zeros(B, 16).scatter_(1, info["term_indices"], 1.0)
            latents[1][:, :, -1, -1] = torch.cat([bits, membership], 1) + 0.1 * latents[1][:, :, -1, -1]
        else:
            K = info["rules"].shape[1]
            for b in range(B):
                shown = info["perm"][b].argsort(-1)  # [3, K]: position of feature f in column c
                for f in range(K):
                    code = torch.eye(self.num_heads)[info["rules"][b, f]]
                    for column in range(2):
                        query, key = 8 * K + shown[2, f], (6 + column) * K + shown[column, f]
                        latents[1][b, :, query, key] = code + 0.1 * latents[1][b, :, query, key]
        logits = torch.zeros(B, self.num_outputs, self.output_dim)
        return (logits, latents) if return_latents else logits


def _check_outputs(out_dir, results):
    saved = json.loads((out_dir / "analysis.json").read_text())
    assert saved["probes"].keys() == results["probes"].keys()
    report = (out_dir / "report.md").read_text()
    linked = re.findall(r"!\[[^]]*\]\(([^)]+)\)", report)
    assert linked and all((out_dir / name).exists() for name in linked)
    assert all((out_dir / name).exists() for name in results["figures"])
    assert _unexplained_columns(report) == []


def _unexplained_columns(report: str) -> list[str]:
    """The header cells of the report's tables that the "Columns: ..." line after the table does not
    name (as *name*)."""
    lines, missing = report.splitlines(), []
    for i, line in enumerate(lines):
        if line.startswith("| ") and not lines[i - 1].startswith("|"):
            explanation = next((later for later in lines[i:] if later.startswith("Columns: ")), "")
            missing += [cell for cell in line.strip("| ").split(" | ") if f"*{cell}*" not in explanation]
    return missing


def test_fuzzy_logic_analysis_recovers_planted_terms(tmp_path):
    task = Recorder(FuzzyLogic(seq_len=8, frac_held_out=0.5))
    model = PlantedModel(task, num_heads=24, num_outputs=1, output_dim=1)
    assert pipeline.resolve_splits(task, None) == ("valid_fixed_query", "ood_fixed_query", "valid", "ood")
    results = analyze(
        model,
        task,
        tmp_path,
        splits=["valid_fixed_query", "ood_fixed_query", "valid"],
        num_samples=600,
        batch_size=600,
        tsne=False,
        num_permutations=200,
        progress=False,
    )
    probes = results["probes"]["valid_fixed_query->ood_fixed_query"]
    planted, noise = probes["layer 1"], probes["layer 0"]
    assert planted["ridge_term_bits_in_distribution"]["r2"] > 0.9
    assert planted["ridge_term_bits_in_distribution"]["chance"] < 0.05
    assert planted["term_f1_held_out"]["mean_f1"] > 0.9 > planted["term_f1_held_out"]["mean_always_positive"]
    assert noise["ridge_term_bits_in_distribution"]["r2"] < 0.05
    assert noise["term_f1_held_out"]["mean_f1"] < 0.5
    topographic = results["topographic_similarity"]["valid"]
    assert topographic["layer 1"]["spearman"] > 0.5 and topographic["layer 1"]["p_value"] < 0.01
    assert topographic["layer 0"]["p_value"] > 0.01
    assert (tmp_path / "latents_ood_fixed_query.npz").exists()
    _check_outputs(tmp_path, results)


def test_sraven_analysis_recovers_planted_rules_through_permutations(tmp_path):
    task = Recorder(SRaven())
    assert pipeline.resolve_splits(task, None) == ("valid_unpermuted", "ood_unpermuted")
    model = PlantedModel(task, num_heads=8, num_outputs=4, output_dim=8)
    results = analyze(
        model,
        task,
        tmp_path,
        splits=["valid", "ood"],
        num_samples=160,
        batch_size=160,
        tsne=True,
        plot_samples=120,
        num_permutations=200,
        progress=False,
    )
    probes = results["probes"]["valid->ood"]
    assert probes["layer 1"]["accuracy"] > 0.95 and probes["layer 1"]["chance_accuracy"] < 0.3
    assert probes["layer 0"]["accuracy"] < 0.3
    similarity = results["label_similarity"]["valid"]["layer 1"]
    # one-hot rule codes: distinct rules are orthogonal (negative after centering)
    assert similarity["addition_subtraction"]["centered_cosine"] < 0
    assert np.allclose(np.diag(similarity["cosine"]), 1.0)
    topographic = results["topographic_similarity"]["valid"]["layer 1"]
    assert topographic["spearman"] > 0.5 and topographic["p_value"] < 0.01
    assert "addition_subtraction.png" in results["figures"]
    _check_outputs(tmp_path, results)


def test_analysis_hook_writes_probe_metrics(tmp_path):
    task = Recorder(SRaven())
    model = PlantedModel(task, num_heads=8, num_outputs=4, output_dim=8).train()
    metrics = analysis_hook(model, task, step=7, out_dir=tmp_path, num_samples=100)
    assert model.training
    assert metrics["probe/layer 1/rule_accuracy"] > 0.9 > metrics["probe/layer 1/rule_accuracy_chance"]
    analysis_hook(model, task, step=8, out_dir=tmp_path, num_samples=100)
    lines = [json.loads(line) for line in (tmp_path / "analysis_hook.jsonl").read_text().splitlines()]
    assert [line["step"] for line in lines] == [7, 8]
    assert all(math.isfinite(v) for v in metrics.values())


def test_end_to_end_on_a_trained_checkpoint(tmp_path):
    train = pytest.importorskip("hyla.train")
    cli = pytest.importorskip("hyla.cli")
    from hyla.analysis import analysis_hook

    cfg = quick_config(  # logic_cpu at a width of 32
        tmp_path,
        model={"dim": 32, "mlp_dim": 64},
        train={"steps": 30, "batch_size": 32},
        optim={"warmup_steps": 5},
        eval={"every": 0, "samples": 64, "final_samples": 64, "batch_size": 64},
        log={"every": 10},
        checkpoint={"every": 30},
        analysis={"every": 15, "samples": 64},
    )
    run = train.train(cfg, analysis_hook)
    code = cli.main(
        [
            "analyze",
            str(run),
            "--samples",
            "256",
            "--permutations",
            "100",
            "--split",
            "valid_fixed_query",
            "--split",
            "ood_fixed_query",
            "--split",
            "valid",
        ]
    )
    assert code == 0
    hook_lines = [json.loads(line) for line in (run / "analysis" / "analysis_hook.jsonl").read_text().splitlines()]
    assert [line["step"] for line in hook_lines] == [15, 30]  # the training loop's periodic hook
    out_dir = run / "analysis" / "step30-samples256-permutations100-splits-valid_fixed_query+ood_fixed_query+valid"
    results = json.loads((out_dir / "analysis.json").read_text())
    assert results["task"] == "fuzzy_logic" and results["splits"]["valid"]["num_samples"] == 256
    probe = results["probes"]["valid_fixed_query->ood_fixed_query"]["all layers"]
    assert {"r2", "chance"} <= probe["ridge_term_bits_held_out"].keys()
    assert (out_dir / "report.md").exists() and (out_dir / "latents_valid.npz").exists()
    # other options: another folder, the first one untouched
    before = (out_dir / "analysis.json").read_bytes()
    assert cli.main(["analyze", str(run), "--samples", "64", "--permutations", "20", "--split", "valid"]) == 0
    assert (run / "analysis" / "step30-samples64-permutations20-splits-valid" / "report.md").exists()
    assert (out_dir / "analysis.json").read_bytes() == before


def test_analysis_folder_is_named_by_its_options_and_never_overwritten(tmp_path):
    assert pipeline.output_name(30, {"num_samples": 2048, "device": "cpu", "tsne": False}) == "step30"
    assert pipeline.output_name(
        7,
        {
            "num_samples": 64,
            "tsne": True,
            "seed": 1,
            "probe_feature": 2,
            "device": "cuda:0",
            "splits": ["valid", "ood"],
        },
    ) == ("step7-samples64-tsne-seed1-feature2-device-cuda_0-splits-valid+ood")
    out_dir = tmp_path / "step30"
    pipeline.claim_output(out_dir, {"checkpoint_step": 30, "num_samples": 64, "splits": ["valid"]})
    pipeline.claim_output(out_dir, {"checkpoint_step": 30, "num_samples": 64, "splits": ["valid"]})  # same: fine
    with pytest.raises(FileExistsError, match=r"other options \(num_samples differ\)") as error:
        pipeline.claim_output(out_dir, {"checkpoint_step": 30, "num_samples": 128, "splits": ["valid"]})
    assert "\n" not in str(error.value)
    (tmp_path / "old").mkdir()
    (tmp_path / "old" / "report.md").write_text("by hand")
    with pytest.raises(FileExistsError, match="without options.json"):
        pipeline.claim_output(tmp_path / "old", {"checkpoint_step": 30})


def test_progress_lines_have_elapsed_time_eta_and_keep_coming_in_long_stages(tmp_path, monkeypatch, capsys):
    slow = measures.topographic_similarity

    def slow_topographic(*args, **kwargs):  # a long stage: three items of 0.3 s
        time.sleep(0.3)
        return slow(*args, **kwargs)

    monkeypatch.setattr(measures, "topographic_similarity", slow_topographic)
    monkeypatch.setattr(progress, "PROGRESS_EVERY", 0.1)
    task = Recorder(SRaven())
    model = PlantedModel(task, num_heads=8, num_outputs=4, output_dim=8)
    analyze(
        model,
        task,
        tmp_path,
        splits=["valid"],
        num_samples=32,
        batch_size=32,
        tsne=False,
        plot_samples=32,
        num_permutations=10,
        progress=True,
    )
    err = capsys.readouterr().err
    assert "\r" not in err  # outside a terminal: plain lines, no bars redrawn in place
    lines = err.splitlines()
    assert all(line.startswith("analyze: ") for line in lines)
    assert lines[0] == "analyze: latent codes of valid (32 sequences, split 1/1) (0s elapsed)"
    assert lines[-1].startswith("analyze: report (")
    # inside the slow stage: a line every 0.1 s, with the items done and an ETA once one is done
    counted = [line for line in lines if line.startswith("analyze: topographic similarity of code sets ")]
    assert len(counted) >= 2
    assert any(
        re.fullmatch(r"analyze: topographic similarity of code sets [12]/3 \(\d+%\), \d+s elapsed, ETA \d+s", line)
        for line in counted
    )


def test_progress_stops_its_thread_and_is_silent_when_disabled(capsys):
    with progress.Stages(True, every=0.01) as stage:
        stage("probes")
        tick = stage.counter("code sets", 3)
        tick()
        tick()
        time.sleep(0.05)
    assert not stage.thread.is_alive()
    assert "analyze: code sets 2/3 (66%), 0s elapsed, ETA 0s" in capsys.readouterr().err.splitlines()
    with progress.Stages(False, every=0.01) as stage:
        stage("probes")
        stage.counter("code sets", 2)()
        time.sleep(0.05)
    assert capsys.readouterr().err == ""


def test_outside_a_terminal_a_stage_prints_one_line_however_many_items_it_has(capsys):
    with progress.Stages(True) as stage:  # the ETA line comes every 30 s: not in this short stage
        assert stage.every == 30
        stage("probes")
        tick = stage.counter("code sets", 300)
        for _ in range(300):
            tick()
        stage("figures")
    assert capsys.readouterr().err.splitlines() == ["analyze: probes (0s elapsed)", "analyze: figures (0s elapsed)"]
