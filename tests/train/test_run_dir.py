"""A run folder is self-contained: `hyla resume PATH` continues it from any directory, by any
absolute or relative path, after it was moved or renamed, and ends exactly where an uninterrupted
run ends. `--name` / `--out_dir` given to `resume` name that folder or are refused."""

import json
import shutil

from helpers_cli import tiny_run
from helpers_train import assert_same_weights, final_weights

from hyla.cli import main


def summary(run) -> dict:
    return json.loads((run / "summary.json").read_text())


def test_resume_by_absolute_and_relative_path_from_anywhere(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    stopped = tiny_run("runs", name="a", stop_at=10)  # out_dir "runs", relative, as a new user types it
    elsewhere = tmp_path / "elsewhere"
    elsewhere.mkdir()
    monkeypatch.chdir(elsewhere)
    assert main(["resume", str(tmp_path / stopped)]) == 0
    assert summary(tmp_path / stopped)["status"] == "completed"
    reference = tiny_run(tmp_path / "reference")
    assert_same_weights(final_weights(reference), final_weights(tmp_path / stopped))

    tiny_run(tmp_path / "runs", name="b", stop_at=10)
    assert main(["resume", "../runs/b/"]) == 0
    assert summary(tmp_path / "runs" / "b")["status"] == "completed"


def test_a_moved_and_renamed_run_resumes_exactly(tmp_path, monkeypatch):
    stopped = tiny_run(tmp_path / "home", name="m", stop_at=10)
    moved = tmp_path / "scratch" / "moved"
    moved.parent.mkdir()
    shutil.move(stopped, moved)
    monkeypatch.chdir(moved)
    assert main(["resume", "."]) == 0
    assert summary(moved)["status"] == "completed"
    assert json.loads((moved / "config.json").read_text())["name"] == "moved"
    assert_same_weights(final_weights(tiny_run(tmp_path / "reference")), final_weights(moved))


def test_name_or_out_dir_naming_another_folder_is_refused(tmp_path, capsys):
    tiny_run(tmp_path / "c2", name="st", stop_at=10)
    truncated = tiny_run(tmp_path / "c2", name="st_trunc", stop_at=10)
    before = (tmp_path / "c2" / "st" / "summary.json").read_text()
    assert main(["resume", str(truncated), "--name", "st"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "--name" in err and str(tmp_path / "c2" / "st") in err, err
    assert main(["resume", str(truncated), "--out_dir", str(tmp_path / "other")]) == 2
    assert (tmp_path / "c2" / "st" / "summary.json").read_text() == before
    assert summary(truncated)["status"] == "stopped" and not (tmp_path / "other").exists()
    assert main(["resume", str(truncated), "--name", "st_trunc", "--out_dir", str(tmp_path / "c2")]) == 0
    assert summary(truncated)["status"] == "completed"
