"""Outputs that cannot collide: two different models in folders of the same name never write into
one output folder unnoticed (`analyze`, `interventions`, `eval`, `results`), and every output
records the full path and sha256 of what it read."""

import json

import pytest
from helpers_cli import tiny_run

from hyla.cli import main
from hyla.experiments.export import export_run
from hyla.nn.transformer import sha256_of


@pytest.fixture(scope="module")
def twins(tmp_path_factory):
    """Two exported models of different runs (mixers), each in a folder named `model`, and the
    folders of their runs, each named `runs`."""
    tmp = tmp_path_factory.mktemp("twins")
    models, runs = [], []
    for place, mixer in (("a", "hyla"), ("b", "softmax")):
        run = tiny_run(tmp / place / "runs", mixer=mixer)
        export_run(run, tmp / place / "model")
        models.append(tmp / place / "model")
        runs.append(tmp / place / "runs")
    return models, runs


def refused(capsys, argv, folder: str) -> None:
    assert main(argv) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert f"error: {folder} holds outputs of" in last and "--out" in last and "--overwrite" in last, last


def inputs(folder) -> list[str]:
    return json.loads((folder / "inputs.json").read_text())["inputs"]


def test_eval_of_a_same_named_model_is_refused_and_records_what_it_read(twins, tmp_path, capsys, monkeypatch):
    (a, b), _ = twins
    monkeypatch.chdir(tmp_path)
    options = ["--split", "ood", "--samples", "16"]
    assert main(["eval", str(a), *options]) == 0
    written = json.loads((tmp_path / "eval-model" / "eval-step20-n16.json").read_text())
    assert written["source"] == {
        "path": str(a),
        "file": "model.safetensors",
        "sha256": sha256_of(a / "model.safetensors"),
    }
    before = (tmp_path / "eval-model" / "eval-step20-n16.json").read_bytes()
    refused(capsys, ["eval", str(b), *options], "eval-model")
    assert (tmp_path / "eval-model" / "eval-step20-n16.json").read_bytes() == before
    assert main(["eval", str(b), *options, "--out", "eval-b"]) == 0
    assert inputs(tmp_path / "eval-b") == [str(b)]
    assert main(["eval", str(b), *options, "--overwrite"]) == 0
    assert inputs(tmp_path / "eval-model") == [str(b)]


def test_analyze_of_a_same_named_model_is_refused(twins, tmp_path, capsys, monkeypatch):
    (a, b), _ = twins
    monkeypatch.chdir(tmp_path)
    options = ["--samples", "64", "--permutations", "10", "--plot-samples", "64"]
    assert main(["analyze", str(a), *options]) == 0
    report = (tmp_path / "analysis-model" / "step20-samples64-plot-samples64-permutations10" / "report.md").read_text()
    assert f"Read: `{a}/model.safetensors`, sha256 `{sha256_of(a / 'model.safetensors')}`" in report
    refused(capsys, ["analyze", str(b), *options], "analysis-model")
    assert inputs(tmp_path / "analysis-model") == [str(a)]
    assert main(["analyze", str(a), *options]) == 0  # the same model again: its own folder


def test_interventions_of_a_same_named_model_are_refused(twins, tmp_path, capsys, monkeypatch):
    (a, b), _ = twins
    monkeypatch.chdir(tmp_path)
    options = ["--tasks", "2", "--samples", "4"]
    assert main(["interventions", str(a), *options]) == 0
    written = json.loads((tmp_path / "interventions-model" / "interventions_tasks2_samples4_seed0.json").read_text())
    assert written["models"][0]["model"]["source"]["path"] == str(a)
    refused(capsys, ["interventions", str(b), *options], "interventions-model")
    assert main(["interventions", str(b), *options, "--overwrite"]) == 0
    assert inputs(tmp_path / "interventions-model") == [str(b)]


def test_results_of_same_named_folders_are_refused(twins, tmp_path, capsys, monkeypatch):
    _, (a, b) = twins
    monkeypatch.chdir(tmp_path)
    assert main(["results", str(a)]) == 0
    record = json.loads((tmp_path / "results" / "runs" / "inputs.json").read_text())
    assert record["inputs"] == [str(a)] and record["read"]["runs"] == 1 and len(record["read"]["sha256"]) == 64
    refused(capsys, ["results", str(b)], "results/runs")
    assert main(["results", str(b), "--out", "results/runs-b"]) == 0
