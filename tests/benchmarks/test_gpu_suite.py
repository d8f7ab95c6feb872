"""benchmarks/gpu_suite.py's bookkeeping: run folders are written out as tar.gz with the latest
checkpoint only and a later call resumes them where they were; a run's progress and losses are read
from its files; the stages' pytest outcomes from the junit XML; a missing package is named."""

import json
import sys
import tarfile
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import gpu_suite  # noqa: E402


def fake_run(root: Path, name: str) -> Path:
    run = root / "runs" / "sweep" / name
    (run / "checkpoints").mkdir(parents=True)
    (run / "checkpoints" / "latest.pt").write_bytes(b"latest")
    (run / "checkpoints" / "previous.pt").write_bytes(b"previous")
    records = [{"step": 100, "split": "train", "loss": 2.0}, {"step": 200, "split": "train", "loss": 1.5}]
    (run / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    (run / "summary.json").write_text(json.dumps({"status": "interrupted", "step": 200, "steps_per_second": 9.0}))
    (run / "env.json").write_text(json.dumps({"numerics": {"cuda_graph": True}}))
    return run


def test_run_folders_are_written_out_with_their_latest_checkpoint_and_resume_where_they_were(tmp_path):
    here, there, out = tmp_path / "here", tmp_path / "there", tmp_path / "out"
    runs = [fake_run(here, "a"), fake_run(here, "b")]
    out.mkdir()
    size = gpu_suite.pack_back(runs, out / "paper_x.tar.gz", here)
    assert size == (out / "paper_x.tar.gz").stat().st_size
    with tarfile.open(out / "paper_x.tar.gz") as tar:
        names = tar.getnames()
    assert "runs/sweep/a/checkpoints/latest.pt" in names and not [n for n in names if "previous" in n]
    (out / "masks_y.tar.gz").write_bytes(b"not read by the paper stage")
    assert gpu_suite.restore(out, there, "paper_") == ["paper_x.tar.gz"]
    assert (there / "runs/sweep/b/checkpoints/latest.pt").read_bytes() == b"latest"
    assert gpu_suite.restore(None, there, "paper_") == []


def test_progress_of_a_run(tmp_path):
    progress = gpu_suite.progress_of(fake_run(tmp_path, "a"), (100, 200, 300))
    assert progress["status"] == "interrupted" and progress["step"] == 200 and progress["cuda_graph"] is True
    assert progress["train_loss_at"] == {"100": 2.0, "200": 1.5, "300": None}


def test_junit_outcomes(tmp_path):
    xml = tmp_path / "junit.xml"
    xml.write_text(
        '<testsuites><testsuite><testcase name="ok"/><testcase name="bad"><failure message="assert 1 == 2"/>'
        '</testcase><testcase name="gpu"><skipped message="needs CUDA"/></testcase></testsuite></testsuites>'
    )
    assert gpu_suite.junit_outcomes(xml) == {"ok": "passed", "bad": "failure: assert 1 == 2", "gpu": "skipped"}
    assert gpu_suite.junit_outcomes(tmp_path / "missing.xml") == {}


def test_a_missing_package_without_wheels_is_named(monkeypatch, tmp_path):
    monkeypatch.setattr(gpu_suite, "missing_modules", lambda authors: ["tyro", "ml_collections"])
    with pytest.raises(SystemExit) as stop:
        gpu_suite.prepare(tmp_path, tmp_path)  # an empty folder of wheels
    message = str(stop.value)
    assert "lacks tyro, ml_collections" in message and "docstring-parser" in message and "--wheels" in message
