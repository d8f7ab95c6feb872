"""Run records (hyla.runs.records): `hyla results --out` keeps a compact copy of each completed
run, the tables come back from the records alone, and a sweep counts recorded runs as done."""

import json
import shutil
import subprocess
from pathlib import Path

import pytest
from test_sweep_results import fake_run, write_spec

from hyla.runs import records
from hyla.runs.results import summarize
from hyla.runs.sweep import SweepSpec, runs_to_launch, sweep_status


def test_thin_keeps_every_evaluation_the_training_rows_beside_them_and_the_last_training_row():
    rows = [{"step": s, "split": "train", "loss": 1.0 / s} for s in range(1, 1001)]
    rows += [{"step": s, "split": "ood", "r2": 0.5} for s in (250, 500, 1000)]
    kept = records.thin(rows, keep=200)
    train = [r["step"] for r in kept if r["split"] == "train"]
    assert len(train) == 200 and train[-1] == 1000 and train == sorted(train)
    few = [r["step"] for r in records.thin(rows, keep=7) if r["split"] == "train"]
    assert few == [142, 250, 285, 428, 500, 571, 714, 857, 1000]  # 7 evenly spaced, and 250 and 500 evaluated
    assert [r["step"] for r in kept if r["split"] == "ood"] == [250, 500, 1000]
    assert [r["loss"] for r in records.thin(rows[:3], keep=200)] == [1.0, 0.5, 0.333333]  # 6 digits


def test_tables_come_back_from_the_records_alone_and_a_folder_shadows_its_record(tmp_path):
    runs, out = tmp_path / "runs" / "sweep", tmp_path / "results"
    fake_run(runs, "a0", "hyla", 0, 0.8)
    fake_run(runs, "a1", "hyla", 1, 0.6)
    fake_run(runs, "b0", "softmax", 0, 0.5)
    fake_run(runs, "b1", "softmax", 1, 0.0, status="interrupted")  # not completed: no record
    first = summarize([runs], out)
    assert "Kept the record of each completed run (3)" in first
    kept = sorted(p.name for p in (out / "records" / "sweep").iterdir())
    assert kept == [f"{n}.run.json" for n in ("a0", "a1", "b0")]
    table = (out / "results.md").read_text().split("\n", 1)[1]  # the header names the folders read

    shutil.rmtree(tmp_path / "runs")  # the machine that trained them is gone
    summarize([out], out)
    assert (out / "results.md").read_text().split("\n", 1)[1] == table.replace(" (+1 unfinished)", "")  # b1 unrecorded

    fake_run(runs, "b1", "softmax", 1, 0.3)  # the run finished elsewhere, a run folder again
    fake_run(runs, "a0", "hyla", 0, 0.4)  # re-run: the folder is read, not its record
    text = summarize([runs, out], out)
    assert "| hyla | 2 | 50.00 ± 10.00 |" in text and "| softmax | 2 | 40.00 ± 10.00 |" in text
    assert json.loads(records.path_of(out, "sweep/a0").read_text())["summary"]["final"]["ood"]["r2"] == 0.4


def test_runs_and_records_of_the_flat_layout_mix_with_new_ones(tmp_path):
    """A run folder or record written before the config sections (issue 80: lr, eval_every, progress
    in the train section; the long runs write them) reads in the new layout: beside a new run of the
    same settings it is one group of the table, and its record is kept in the new layout."""
    runs, out = tmp_path / "runs" / "sweep", tmp_path / "results"
    for name, seed, r2 in (("old", 0, 0.8), ("new", 1, 0.6)):
        fake_run(runs, name, "hyla", seed, r2)
    new = json.loads((runs / "new" / "config.json").read_text())
    (runs / "new" / "config.json").write_text(json.dumps({**new, "optim": {"lr": 0.002}, "eval": {"every": 200}}))
    old = json.loads((runs / "old" / "config.json").read_text())
    flat = {**old["train"], "lr": 0.002, "eval_every": 100, **old.pop("log")}
    (runs / "old" / "config.json").write_text(json.dumps({**old, "train": flat}))
    text = summarize([runs], out)
    assert "| hyla | 2 | 70.00 ± 10.00 |" in text  # eval.every differs, a bookkeeping field: one group
    kept = [records.read(records.path_of(out, f"sweep/{name}"))["config"] for name in ("old", "new")]
    assert [(c["optim"], c["eval"]["every"]) for c in kept] == [({"lr": 0.002}, 100), ({"lr": 0.002}, 200)]
    assert "lr" not in kept[0]["train"] and kept[0]["log"] == {"progress": True}
    shutil.rmtree(tmp_path / "runs")
    assert "| hyla | 2 | 70.00 ± 10.00 |" in summarize([out], out)  # and from the records alone


def test_records_hold_no_absolute_path_of_the_machine(tmp_path, monkeypatch):
    from hyla.utils import portable_path

    runs = tmp_path / "repo" / "runs" / "sweep"
    fake_run(runs, "a0", "hyla", 0, 0.8)
    config = json.loads((runs / "a0" / "config.json").read_text())
    (runs / "a0" / "config.json").write_text(json.dumps({**config, "out_dir": str(runs)}))
    monkeypatch.chdir(tmp_path / "repo")  # the repository the run was started in
    assert records.from_folder(runs / "a0")["config"]["out_dir"] == "runs/sweep"
    monkeypatch.chdir(tmp_path)
    assert portable_path(runs / "a0") == "repo/runs/sweep/a0"
    (tmp_path / "elsewhere").mkdir()
    monkeypatch.chdir(tmp_path / "elsewhere")
    assert portable_path(runs / "a0") == "sweep/a0"  # outside the working directory: its run key
    assert portable_path("runs/sweep") == "runs/sweep"


def test_a_record_rewritten_from_a_folder_without_latent_caches_keeps_its_measurements(tmp_path):
    runs, out = tmp_path / "runs" / "sweep", tmp_path / "results"
    fake_run(runs, "a0", "hyla", 0, 0.8)
    cache = runs / "a0" / "latent_structure-step5-ood.json"
    cache.write_text(json.dumps({"similarity": 0.25}))
    records.write(records.from_folder(runs / "a0"), out)
    cache.unlink()  # e.g. measured on another machine, or the cache deleted
    records.write(records.from_folder(runs / "a0"), out)
    kept = json.loads(records.path_of(out, "sweep/a0").read_text())["latent_structure"]
    assert kept == {cache.name: {"similarity": 0.25}}

    shutil.rmtree(runs / "a0")
    fake_run(runs, "a0", "hyla", 1, 0.4)  # another run under the same name: its measurements are not these
    records.write(records.from_folder(runs / "a0"), out)
    assert json.loads(records.path_of(out, "sweep/a0").read_text())["latent_structure"] == {}


def test_a_sweep_counts_the_runs_recorded_in_its_results_folder_as_done(tmp_path):
    spec = SweepSpec.load(
        write_spec(
            tmp_path,
            f"""
name: sweep
preset: logic_cpu
out_dir: {tmp_path / "runs" / "sweep"}
results: {tmp_path / "results"}
seeds: [0]
overrides: {{train.steps: 10}}
grid: {{model.mixer: [softmax, hyla, linear]}}
""",
        )
    )
    for name, mixer, steps in (("mixer-softmax__s0", "softmax", 10), ("mixer-hyla__s0", "hyla", 20)):
        config = {"seed": 0, "model": {"mixer": mixer}, "train": {"steps": steps}}
        summary = {"status": "completed", "final": {}}
        records.write(
            {"run": f"sweep/{name}", "config": config, "summary": summary, "metrics": []}, tmp_path / "results"
        )
    states = sweep_status(spec)
    # hyla's record has other settings (20 steps): it trains again
    assert states == {"mixer-softmax__s0": "recorded", "mixer-hyla__s0": "new", "mixer-linear__s0": "new"}
    assert [run.name for run in runs_to_launch(spec)] == ["mixer-hyla__s0", "mixer-linear__s0"]


def test_records_in_the_source_tree_are_not_git_ignored():
    """A record is meant to be committed (and kept as an uncommitted change when a machine is lost):
    run folders are ignored (`runs/`), records must not be."""
    repo = Path(__file__).resolve().parents[2]
    if shutil.which("git") is None or not (repo / ".git").exists():
        pytest.skip("not a git checkout")
    record = records.path_of(repo / "experiments" / "results" / "table", "sweep/mixer-hyla__s0")
    check = subprocess.run(["git", "-C", str(repo), "check-ignore", "-q", str(record)], check=False)
    assert check.returncode == 1  # 1: not ignored (0: ignored)
    run_folder = repo / "runs" / "sweep" / "mixer-hyla__s0" / "config.json"
    assert subprocess.run(["git", "-C", str(repo), "check-ignore", "-q", str(run_folder)], check=False).returncode == 0
