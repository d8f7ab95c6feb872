"""Progress reports of the long commands. `hyla sweep` and `hyla demo` (a demo is a sweep) show the
progress of their runs with `RunProgress`: on a terminal a bar per run; elsewhere (a log file, CI) a
line per run with its step, elapsed time and ETA, at most every `every` seconds, and a line when it
finishes or fails; with progress turned off, nothing. `hyla analyze` prints a line per stage."""

import sys

from helpers_cli import tiny_run

from hyla.cli import main
from hyla.experiments.sweep import RunProgress


def test_progress_is_lines_when_not_a_terminal(capsys):
    progress = RunProgress({"softmax": 10, "hyla": 10})
    progress.update("softmax", 0)
    progress.update("softmax", 5)
    progress.finished("softmax", 10, 0)
    progress.finished("hyla", 3, 1)
    progress.close()
    captured = capsys.readouterr()
    assert captured.err.splitlines() == [
        "softmax: step 5/10, 0s elapsed, ETA 0s",
        "softmax: finished at step 10",
        "hyla: exited with code 1 at step 3",
    ]
    assert captured.out == ""


def test_runs_get_lines_with_elapsed_time_and_eta(capsys):
    progress = RunProgress({"a": 100, "b": 50}, every=0.0)
    progress.update("a", 0)  # queued: no line yet
    progress.update("a", 10)
    progress.update("a", 40)
    progress.finished("b", 50, 1)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0].startswith("a: step 10/100, 0s elapsed, ETA ")
    assert lines[1].startswith("a: step 40/100, 0s elapsed, ETA ") and lines[2:] == ["b: exited with code 1 at step 50"]
    quiet = RunProgress({"a": 100}, every=3600.0)
    quiet.update("a", 0)
    quiet.update("a", 10)
    quiet.update("a", 20)  # within the interval: no second line
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_a_run_waiting_to_resume_is_timed_from_when_it_moves(capsys, monkeypatch):
    """A run queued with a checkpoint at step 4,600 prints nothing while it waits; its ETA counts
    only the time since it moved (here 10 s for 100 steps: 100 s for the last 1,000)."""
    clock = iter([0.0, 3000.0, 3010.0])
    monkeypatch.setattr("hyla.experiments.sweep.time.monotonic", lambda: next(clock))
    progress = RunProgress({"a": 5700}, every=0.0)
    progress.update("a", 4600)  # seen at the sweep's start, queued
    progress.update("a", 4600)  # 50 minutes later its turn comes: still at its checkpoint
    progress.update("a", 4700)
    assert capsys.readouterr().err.splitlines() == ["a: step 4700/5700, 10s elapsed, ETA 1m40s"]


def test_progress_draws_bars_on_a_terminal(capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    progress = RunProgress({"softmax": 10, "hyla": 10})
    progress.update("hyla", 4)
    progress.finished("softmax", 10, 0)
    assert [bar.n for bar in progress.bars.values()] == [10, 4]
    progress.close()
    assert "finished" not in capsys.readouterr().err


def test_no_progress_prints_nothing(capsys):
    progress = RunProgress({"softmax": 10}, enabled=False)
    progress.update("softmax", 5)
    progress.finished("softmax", 10, 0)
    progress.close()
    assert capsys.readouterr().err == "" and not progress.bars


def test_analyze_reports_each_stage(tmp_path, capsys):
    run = tiny_run(tmp_path)
    assert main(["analyze", str(run), "--samples", "64", "--no-tsne", "--permutations", "10"]) == 0
    stages = [line for line in capsys.readouterr().err.splitlines() if line.startswith("analyze: ")]
    assert stages[0].startswith("analyze: latent codes of ") and stages[-1].startswith("analyze: report (")
    assert any(line.startswith("analyze: probes (") and line.endswith(" s elapsed)") for line in stages)
