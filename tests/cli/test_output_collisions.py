"""Outputs that cannot collide: two different models in folders of the same name never write into
one output folder unnoticed (`analyze`, `interventions`, `eval`, `results`), and every output
records the path and sha256 of what it read: relative to the working folder when it lies below it
(inputs.json: relative to the output folder), so that committed outputs hold no path of the machine."""

import json

import pytest
from helpers_cli import tiny_run

from hyla.cli import main
from hyla.nn.transformer import sha256_of
from hyla.runs.export import export_run


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


def snapshot(folder) -> dict:
    return {path: path.read_bytes() for path in folder.rglob("*") if path.is_file()}


def inputs_recorded(folder) -> list[str]:
    recorded = json.loads((folder / "inputs.json").read_text())["inputs"]
    assert not any(path.startswith("/") for path in recorded), recorded
    return recorded


def inputs(folder) -> list[str]:
    """The full paths `folder`/inputs.json names, each recorded relative to `folder`."""
    return [str((folder / path).resolve()) for path in inputs_recorded(folder)]


ANALYSIS = "step20-samples64-plot-samples64-permutations10"
COMMANDS = {  # command: (options, default output folder, the source recorded in the output written)
    "eval": (
        ["--split", "ood", "--samples", "16"],
        "eval-model",
        lambda folder: json.loads((folder / "eval-step20-n16.json").read_text())["source"],
    ),
    "analyze": (
        ["--samples", "64", "--permutations", "10", "--plot-samples", "64"],
        "analysis-model",
        lambda folder: json.loads((folder / ANALYSIS / "analysis.json").read_text())["run"]["source"],
    ),
    "interventions": (
        ["--tasks", "2", "--samples", "4"],
        "interventions-model",
        lambda folder: json.loads((folder / "interventions_tasks2_samples4_seed0.json").read_text())["models"][0][
            "model"
        ]["source"],
    ),
}


@pytest.mark.parametrize("command", COMMANDS)
def test_a_same_named_model_is_refused_and_each_output_records_what_it_read(
    twins, tmp_path, capsys, monkeypatch, command
):
    (a, b), _ = twins
    options, default, source = COMMANDS[command]
    monkeypatch.chdir(tmp_path)
    assert main([command, str(a), *options]) == 0
    weights = {"file": "model.safetensors", "sha256": sha256_of(a / "model.safetensors")}
    assert source(tmp_path / default) == {"path": str(a), **weights}  # outside the working folder: in full
    if command == "analyze":  # the report, which named only the last model written there
        report = (tmp_path / default / ANALYSIS / "report.md").read_text()
        assert f"Read: `{a}/model.safetensors`, sha256 `{weights['sha256']}`" in report
    before = snapshot(tmp_path / default)
    refused(capsys, [command, str(b), *options], default)
    assert snapshot(tmp_path / default) == before
    assert main([command, str(b), *options, "--out", "elsewhere"]) == 0
    beneath = "model" if command == "analyze" else ""  # analyze --out DIR: DIR/<model>/, beside their summary
    assert inputs(tmp_path / "elsewhere") == [str(b)] and source(tmp_path / "elsewhere" / beneath)["path"] == str(b)
    assert main([command, str(b), *options, "--overwrite"]) == 0  # a's outputs moved aside, whole
    assert inputs(tmp_path / default) == [str(b)] and source(tmp_path / default)["path"] == str(b)
    aside = tmp_path / f"{default}.replaced-1"
    assert {p.relative_to(aside): data for p, data in snapshot(aside).items()} == {
        p.relative_to(tmp_path / default): data for p, data in before.items()
    }
    assert not any(str(a) in p.read_text() for p in (tmp_path / default).rglob("*.json")), "a's outputs left beside"
    monkeypatch.chdir(a.parent.parent)  # below the working folder: relative to it
    assert main([command, str(a), *options, "--out", str(tmp_path / "third")]) == 0
    assert source(tmp_path / "third" / beneath)["path"] == "a/model"


def test_results_of_same_named_folders_are_refused(twins, tmp_path, capsys, monkeypatch):
    _, (a, b) = twins
    monkeypatch.chdir(tmp_path)
    assert main(["results", str(a)]) == 0
    record = json.loads((tmp_path / "results" / "runs" / "inputs.json").read_text())
    assert (
        inputs(tmp_path / "results" / "runs") == [str(a)]
        and record["read"]["runs"] == 1
        and len(record["read"]["sha256"]) == 64
    )
    refused(capsys, ["results", str(b)], "results/runs")
    assert main(["results", str(b), "--out", "results/runs-b"]) == 0


def test_a_results_table_read_as_an_input_grows_though_it_names_no_inputs(twins, tmp_path, capsys, monkeypatch):
    """`hyla results RUNS T --out T` (experiments/README.md): T's records are an input, so T is not
    refused for lacking inputs.json, as a table committed before hyla recorded its inputs lacks it."""
    _, (a, b) = twins
    monkeypatch.chdir(tmp_path)
    assert main(["results", str(a), "--out", "table"]) == 0
    (tmp_path / "table" / "inputs.json").unlink()
    refused_unnamed = main(["results", str(b), "--out", "table"])
    assert refused_unnamed == 2 and "holds outputs whose inputs it does not name" in capsys.readouterr().err
    assert main(["results", str(b), "table", "--out", "table"]) == 0
    assert inputs(tmp_path / "table") == sorted([str(b), str(tmp_path / "table")])


def test_a_folder_is_refused_to_other_inputs_and_a_folder_inside_the_input_is_its_own(tmp_path):
    from hyla.cli.folders import claim_output_folder, record_inputs
    from hyla.utils import ConfigError

    first, second, out = tmp_path / "a" / "m", tmp_path / "b" / "m", tmp_path / "out"
    claim_output_folder(out, [second])  # no folder yet: anything may write there
    record_inputs(out, [first])
    claim_output_folder(out, [first])  # the same input again
    with pytest.raises(ConfigError, match=f"{out} holds outputs of {first}, not of {second}"):
        claim_output_folder(out, [second])
    record_inputs(first / "analysis", [first])
    assert not (first / "analysis").exists()
    (out / "inputs.json").write_text("{")
    with pytest.raises(ConfigError, match="inputs.json is damaged"):
        claim_output_folder(out, [second])
    claim_output_folder(out, [second], overwrite=True)  # moved aside, to the first free name
    (tmp_path / "out.replaced-2").mkdir()
    record_inputs(out, [first])
    claim_output_folder(out, [second], overwrite=True)
    assert not out.exists() and (tmp_path / "out.replaced-1" / "inputs.json").read_text() == "{"
    assert (tmp_path / "out.replaced-3" / "inputs.json").exists()


def test_a_folder_of_outputs_that_name_no_inputs_is_refused_and_an_empty_one_taken(tmp_path):
    """Outputs written before hyla recorded their inputs (or by hand) are not taken over unnoticed."""
    from hyla.cli.folders import claim_output_folder
    from hyla.utils import ConfigError

    out, model = tmp_path / "out", tmp_path / "m"
    out.mkdir()
    claim_output_folder(out, [model])  # empty: anything may write there
    (out / "latent_summary.json").write_text("{}")
    with pytest.raises(ConfigError, match=f"{out} holds outputs whose inputs it does not name \\(no inputs.json\\)"):
        claim_output_folder(out, [model])
    claim_output_folder(out, [model], overwrite=True)
    assert not out.exists() and (tmp_path / "out.replaced-1" / "latent_summary.json").exists()


def test_a_command_refuses_a_folder_of_unnamed_outputs(twins, tmp_path, capsys, monkeypatch):
    (a, _), _ = twins
    monkeypatch.chdir(tmp_path)
    (tmp_path / "eval-model").mkdir()
    (tmp_path / "eval-model" / "notes.txt").write_text("mine")
    assert main(["eval", str(a), "--split", "ood", "--samples", "16"]) == 2
    last = capsys.readouterr().err.strip().splitlines()[-1]
    assert "error: eval-model holds outputs whose inputs it does not name" in last and "--overwrite" in last, last
    assert snapshot(tmp_path / "eval-model") == {tmp_path / "eval-model" / "notes.txt": b"mine"}


def test_overwrite_never_moves_a_model_the_working_folder_or_an_input(tmp_path, monkeypatch):
    from hyla.cli.folders import claim_output_folder, record_inputs
    from hyla.utils import ConfigError

    model, other = tmp_path / "m", tmp_path / "other"
    for folder, why in ((tmp_path / "run", "it is a model"), (tmp_path / "work", "it holds"), (tmp_path, "it holds")):
        record_inputs(folder, [other])
        if folder.name == "run":
            (folder / "config.json").write_text("{}")
        if folder.name == "work":
            monkeypatch.chdir(folder)
        inputs = [model] if folder == tmp_path else [tmp_path / "elsewhere"]  # tmp_path holds the input m
        with pytest.raises(ConfigError, match=f"--overwrite cannot move {folder} aside \\({why}"):
            claim_output_folder(folder, inputs, overwrite=True)
        assert folder.is_dir()


def test_inputs_are_recorded_relative_to_the_output_so_a_moved_repository_still_matches(tmp_path):
    from hyla.cli.folders import claim_output_folder, record_inputs
    from hyla.utils import ConfigError

    record_inputs(tmp_path / "repo" / "out", [tmp_path / "repo" / "a" / "m"])
    assert inputs_recorded(tmp_path / "repo" / "out") == ["../a/m"]
    (tmp_path / "repo").rename(tmp_path / "clone")
    claim_output_folder(tmp_path / "clone" / "out", [tmp_path / "clone" / "a" / "m"])
    with pytest.raises(ConfigError, match="holds outputs of"):
        claim_output_folder(tmp_path / "clone" / "out", [tmp_path / "repo" / "a" / "m"])


def test_a_command_that_fails_leaves_no_output_folder(twins, tmp_path, capsys, monkeypatch):
    (a, _), (runs, _) = twins
    monkeypatch.chdir(tmp_path)
    changed = tmp_path / "changed"
    changed.mkdir()
    for path in a.iterdir():
        (changed / path.name).write_bytes(path.read_bytes())
    weights = (changed / "model.safetensors").read_bytes()
    (changed / "model.safetensors").write_bytes(weights[:-1] + bytes([weights[-1] ^ 1]))  # not its sha256
    for command in (["analyze", str(changed)], ["interventions", str(changed)], ["eval", str(changed)]):
        assert main(command) == 2, command
    assert main(["results", str(runs), "--only", "nothing*"]) == 2
    assert main(["results", str(runs), "--latent-structure", "--latent-split", "nope"]) == 2
    assert sorted(path.name for path in tmp_path.iterdir()) == ["changed"], capsys.readouterr().err
