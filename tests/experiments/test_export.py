"""`hyla export`: weights + config + manifest (sha256, record, commit, step); exported folders load
like run folders in `hyla analyze`, `hyla interventions` and `hyla.Transformer.from_pretrained`."""

import json
import os
import subprocess
import sys
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from helpers_cli import tiny_run

import hyla
from hyla import Transformer
from hyla.cli import main
from hyla.nn.transformer import sha256_of
from hyla.runs.export import export_run
from hyla.tasks import FuzzyLogic
from hyla.train import load_run_at_step
from hyla.train.run_dir import RunError
from hyla.utils import portable_path


@pytest.fixture(scope="module")
def exported(tmp_path_factory):
    """(run folder, its export) of a tiny fuzzy-logic run of 20 steps."""
    tmp = tmp_path_factory.mktemp("export")
    run = tiny_run(tmp)
    assert main(["export", str(run), "--out", str(tmp / "model")]) == 0
    return run, tmp / "model"


def test_manifest_lists_checksums_record_commit_and_step(exported):
    run, out = exported
    assert sorted(p.name for p in out.iterdir()) == ["config.json", "manifest.json", "model.safetensors"]
    manifest = json.loads((out / "manifest.json").read_text())
    assert manifest["files"] == {name: sha256_of(out / name) for name in ("config.json", "model.safetensors")}
    assert manifest["run"] == f"{run.parent.name}/{run.name}" and manifest["step"] == 20
    env = json.loads((run / "env.json").read_text())
    assert manifest["hyla_commit"] == env["git_commit"]
    config = json.loads((run / "config.json").read_text())
    assert manifest["record"]["config"] == {**config, "out_dir": portable_path(config["out_dir"])}
    assert manifest["record"]["summary"]["status"] == "completed" and manifest["record"]["env"] == env


def test_an_export_loads_as_its_run(exported):
    run, out = exported
    cfg, model, task, step, source = load_run_at_step(run)
    cfg_e, model_e, task_e, step_e, source_e = load_run_at_step(out, task="fuzzy_logic")
    assert (replace(cfg_e, out_dir=cfg.out_dir), step_e) == (cfg, step) and type(task_e) is type(task)
    latest = run / "checkpoints" / "latest.pt"
    assert source == {"path": str(run.resolve()), "file": "checkpoints/latest.pt", "sha256": sha256_of(latest)}
    recorded = json.loads((out / "manifest.json").read_text())["files"]["model.safetensors"]
    assert source_e == {"path": str(out.resolve()), "file": "model.safetensors", "sha256": recorded}
    x = task.batch("ood", 8, 0).x
    assert torch.equal(model(x), model_e(x)) and torch.equal(model(x), Transformer.from_pretrained(out)(x))
    with pytest.raises(RunError, match="is a fuzzy_logic run; this command needs a sraven run"):
        load_run_at_step(out, task="sraven")


def test_hyla_load_gives_the_model_and_task_that_repeat_the_runs_evaluation(exported, tmp_path):
    run, out = exported
    evaluation = json.loads((run / "config.json").read_text())["eval"]
    final = json.loads((run / "summary.json").read_text())["final"]
    x = FuzzyLogic(num_variables=3, num_terms=2, seq_len=8, frac_held_out=0.3, seed=3).batch("ood", 8, 0).x
    outputs = []
    for path in (out, run):
        model, task = hyla.load(path)
        assert isinstance(model, Transformer) and not model.training and (type(task), task.seed) == (FuzzyLogic, 3)
        outputs.append(model(x))
        for split in task.eval_splits:
            result = hyla.evaluate(model, task, split, evaluation["final_samples"], evaluation["batch_size"])
            assert result == pytest.approx(final[split], rel=1e-5, abs=1e-7)
    assert torch.equal(*outputs)
    with pytest.raises(RunError, match="does not exist"):
        hyla.load(tmp_path / "nowhere")


def test_an_export_loads_without_the_workflow(exported):
    """`hyla.load` of an export imports neither the workflow nor its packages (a library install)."""
    _, out = exported
    code = (
        "import sys, hyla; model, task = hyla.load(sys.argv[1]); hyla.evaluate(model, task, 'ood', 8); "
        "print(sorted(m for m in sys.modules if m.split('.')[0] in "
        "{'tyro', 'yaml', 'matplotlib', 'sklearn'} or m.startswith(('hyla.train', 'hyla.runs'))))"
    )
    env = {**os.environ, "PYTHONPATH": str(Path(hyla.__file__).parents[1])}
    done = subprocess.run([sys.executable, "-c", code, str(out)], capture_output=True, text=True, env=env, check=True)
    assert done.stdout.split() == ["[]"], done.stdout


def test_a_damaged_manifest_is_refused_in_one_line(exported, tmp_path):
    _, out = exported
    damaged = tmp_path / "damaged"
    damaged.mkdir()
    for p in out.iterdir():
        (damaged / p.name).write_bytes(p.read_bytes())
    manifest = json.loads((damaged / "manifest.json").read_text())
    manifest["record"]["config"]["model"]["dim"] = 32
    (damaged / "manifest.json").write_text(json.dumps(manifest))
    with pytest.raises(ValueError, match="config.json and the model config in manifest.json differ"):
        hyla.load(damaged)
    (damaged / "manifest.json").write_text("{")
    with pytest.raises(ValueError, match="manifest.json is not a readable hyla manifest"):
        hyla.load(damaged)


def test_a_changed_file_is_refused_in_one_line(exported, tmp_path, capsys):
    _, out = exported
    changed = tmp_path / "changed"
    changed.mkdir()
    for p in out.iterdir():
        (changed / p.name).write_bytes(p.read_bytes())
    weights = bytearray((changed / "model.safetensors").read_bytes())
    weights[-1] ^= 1  # one bit of the last weight
    (changed / "model.safetensors").write_bytes(bytes(weights))
    with pytest.raises(ValueError, match="model.safetensors does not match its sha256 in manifest.json"):
        Transformer.from_pretrained(changed)
    Transformer.from_pretrained(changed, verify=False)  # the bytes are still a readable model
    assert main(["analyze", str(changed), "--samples", "64"]) == 2
    first, *others = capsys.readouterr().err.strip().splitlines()  # what runs, then the error in one line
    assert first.startswith("analyze: 1 model") and len(others) == 1 and "does not match its sha256" in others[0]


def test_export_refuses_an_existing_folder_unless_replacing_an_export(exported, tmp_path):
    run, out = exported
    with pytest.raises(FileExistsError):
        export_run(run, out)
    with pytest.raises(RunError, match="is an export already"):
        export_run(out, tmp_path / "again")
    (tmp_path / "notes").mkdir()
    (tmp_path / "notes" / "keep.txt").write_text("mine")
    with pytest.raises(FileExistsError):
        export_run(run, tmp_path / "notes", replace=True)  # not an export: never removed
    copy = tmp_path / "copy"
    export_run(run, copy)
    (copy / "model.safetensors").write_bytes(b"stale")
    export_run(run, copy, replace=True)
    assert (copy / "model.safetensors").read_bytes() == (out / "model.safetensors").read_bytes()
    assert not list(tmp_path.glob(".copy.tmp-*"))


def test_eval_analyze_and_interventions_take_an_exported_folder(exported, tmp_path, monkeypatch, capsys):
    _, out = exported
    model = tmp_path / "model"
    model.mkdir()
    for p in out.iterdir():
        (model / p.name).write_bytes(p.read_bytes())
    work = tmp_path / "work"
    work.mkdir()
    monkeypatch.chdir(work)  # an exported model's analyses go to the working folder, never into the model
    assert main(["analyze", str(model), "--samples", "64", "--permutations", "20", "--split", "valid"]) == 0
    folder = Path("analysis-model") / "step20-samples64-permutations20-splits-valid"
    analysis = json.loads((folder / "analysis.json").read_text())
    assert analysis["task"] == "fuzzy_logic" and analysis["run"]["checkpoint_step"] == 20
    assert analysis["run"]["path"] == f"{tmp_path.name}/model"  # not the machine's absolute path
    assert f"writing into {folder}/" in capsys.readouterr().err
    assert main(["interventions", str(model), "--tasks", "2", "--samples", "8"]) == 0
    assert "writes interventions-model/interventions_" in capsys.readouterr().err
    assert sorted(p.name for p in model.iterdir()) == ["config.json", "manifest.json", "model.safetensors"]
    # (the layout of the interventions JSON is interventions.py's; here: it ran on the export's step)
    [written] = [json.loads(f.read_text()) for f in Path("interventions-model").glob("interventions_*.json")]
    [about] = [m["model"] for m in written["models"]]
    assert about["checkpoint_step"] == 20 and about["path"] == f"{tmp_path.name}/model"  # the path as portable
    assert about["source"]["path"] == str(model.resolve())  # and what was read, in full (issue 78)
    assert main(["eval", str(model), "--split", "ood", "--samples", "16"]) == 0
    assert set(json.loads(Path("eval-model/eval-step20-n16.json").read_text())["splits"]) == {"ood"}
    assert main(["eval", str(model), "--split", "valid", "--samples", "16", "--out", "elsewhere"]) == 0
    assert set(json.loads(Path("elsewhere/eval-step20-n16.json").read_text())["splits"]) == {"valid"}
    assert sorted(p.name for p in model.iterdir()) == ["config.json", "manifest.json", "model.safetensors"]


def test_analyze_summarizes_several_models_and_a_run_equals_its_export(exported, tmp_path, capsys):
    run, out = exported
    options = ["--samples", "64", "--permutations", "20", "--split", "valid", "--split", "ood"]
    assert main(["analyze", str(run), str(out), *options]) == 2
    assert "--out is needed with 2 models" in capsys.readouterr().err
    assert main(["analyze", str(run), str(out), *options, "--out", str(tmp_path / "latent")]) == 0
    summary = json.loads((tmp_path / "latent" / "latent_summary.json").read_text())
    assert len(summary["models"]) == 2 and (tmp_path / "latent" / "latent_summary.png").exists()
    rows = summary["summary"]
    assert {r["measure"] for r in rows} == {"topographic similarity", "held-out probe (mean_f1)"}
    for row in rows:  # the same weights give the same codes: both models measure the same, s.e. 0
        first, second = row["per_model"]
        assert first["value"] == second["value"] and row["se"] == 0 and row["passes"] in ("0 of 2", "2 of 2")
    assert str(tmp_path) not in (tmp_path / "latent" / "latent_summary.json").read_text()


def test_every_committed_model_matches_its_manifest_loads_and_all_fit_50_mb():
    """The weights that RESULTS.md's analyses use ship with the repository, intact: `from_pretrained`
    checks each file against its manifest's sha256."""
    models = sorted(Path(__file__).resolve().parents[2].glob("experiments/results/weights_*/models/*"))
    assert len(models) >= 21  # fuzzy logic and raven_cpu × 3 mixers × 3 seeds, SRAVEN 40k × 3 mixers
    size = 0
    for model in models:
        assert (model / "manifest.json").is_file(), model
        assert isinstance(Transformer.from_pretrained(model), Transformer)
        size += sum(path.stat().st_size for path in model.iterdir())
    assert size <= 50 * 2**20
