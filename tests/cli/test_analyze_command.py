"""`hyla analyze` as a user meets it: bad folders refused before anything heavy loads, a first line
before the heavy imports, one progress line per item in a log, and the outputs of an exported model
(a shipped one, copied) in the working folder, never in the model's."""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

from hyla.cli import folders, main
from hyla.cli.folders import EXPORT_MANIFEST
from hyla.nn.transformer import PRETRAINED_MANIFEST

REPO = Path(__file__).resolve().parents[2]
SHIPPED = REPO / "experiments" / "results" / "weights_sraven_40k_cpu" / "models" / "mixer-softmax__s0"
HEAVY = ("torch", "numpy", "scipy", "sklearn", "matplotlib")
# runs the `hyla` command, saying on stderr when a heavy library starts loading, and at the end which loaded
WATCHED = f"""
import importlib.abc, sys
class Watch(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path, target=None):
        if name in {HEAVY!r}:
            print("loading " + name, file=sys.stderr, flush=True)
sys.meta_path.insert(0, Watch())
from hyla.cli import main
code = main(sys.argv[1:])
print("loaded:", *sorted(m for m in {HEAVY!r} if m in sys.modules), file=sys.stderr)
sys.exit(code)
"""


def hyla(*argv: str, cwd: Path) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(REPO)}
    return subprocess.run(
        [sys.executable, "-c", WATCHED, *argv], cwd=cwd, env=env, capture_output=True, text=True, timeout=600
    )


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def test_the_command_knows_an_exported_model_as_the_loader_does():
    assert EXPORT_MANIFEST == PRETRAINED_MANIFEST


def test_a_missing_or_empty_folder_is_refused_before_anything_heavy_loads(tmp_path):
    (tmp_path / "empty").mkdir()
    for folder, message in (("nosuchrun", "nosuchrun does not exist"), ("empty", "is not a run folder")):
        done = hyla("analyze", folder, cwd=tmp_path)
        *_, error, loaded = done.stderr.strip().splitlines()
        assert done.returncode == 2 and error.startswith("hyla analyze: error: ") and message in error
        assert loaded == "loaded:"  # none of torch, numpy, scikit-learn, matplotlib


def test_an_unreadable_model_is_refused_in_one_line(tmp_path, monkeypatch, capsys):
    """(The same check as a missing folder's, before the heavy imports; os.access is what it asks, and
    it grants root everything: the test answers for the file system.)"""
    model = tmp_path / "model"
    shutil.copytree(SHIPPED, model)
    monkeypatch.setattr(folders.os, "access", lambda path, mode: Path(path) != model / "manifest.json")
    assert main(["analyze", str(model)]) == 2
    assert capsys.readouterr().err == f"hyla analyze: error: {model}/manifest.json cannot be read (permissions)\n"


def test_an_exported_model_is_analyzed_into_the_working_folder_and_left_as_it_was(tmp_path):
    model = tmp_path / "models" / SHIPPED.name
    shutil.copytree(SHIPPED, model)
    before = snapshot(model)
    work = tmp_path / "work"
    work.mkdir()
    options = ["--samples", "16", "--batch-size", "8", "--permutations", "10", "--plot-samples", "40"]
    done = hyla("analyze", str(model), *options, cwd=work)
    assert done.returncode == 0, done.stderr
    lines = done.stderr.splitlines()
    folder = "analysis-mixer-softmax__s0/step40000-samples16-batch-size8-plot-samples40-permutations10"
    assert lines[0] == (
        "analyze: 1 model (16 sequences per split, PCA embeddings; --tsne adds t-SNE) into analysis-mixer-softmax__s0/"
    )
    assert lines[1].startswith("loading ")  # the first line came before any heavy import
    assert f"{model} (step 40000): writing into {folder}/" in done.stderr
    assert f"wrote {folder}/report.md" in done.stdout
    # outside a terminal: a plain line per stage (an ETA line every 30 s in a longer stage), none per item
    assert re.search(r"\nanalyze: latent codes of valid_unpermuted \(16 sequences, split \d/\d\) \(", done.stderr)
    stages = [line.split(" (")[0] for line in lines if line.startswith("analyze: ") and "ETA" not in line]
    assert len(stages) == len(set(stages)) and "batches 1/2" not in done.stderr, done.stderr
    assert "\r" not in done.stderr
    assert (work / folder / "addition_subtraction.png").exists() and (work / folder / "analysis.json").exists()
    done = hyla("interventions", str(model), "--tasks", "1", "--samples", "2", cwd=work)
    assert done.returncode == 0, done.stderr
    assert "writes interventions-mixer-softmax__s0/interventions_tasks1_samples2_seed0.json" in done.stderr
    assert list((work / "interventions-mixer-softmax__s0").glob("interventions_tasks1_samples2_seed0.*"))
    assert snapshot(model) == before and sorted(os.listdir(tmp_path)) == ["models", "work"]
