"""Progress outside a terminal: a sweep (and the demo, which is one) prints a line per run with its
step, elapsed time and ETA, at most every `every` seconds; `hyla analyze` a line per stage."""

from helpers_cli import tiny_run

from hyla.cli import main
from hyla.sweep import RunProgress


def test_runs_get_lines_with_elapsed_time_and_eta(capsys):
    progress = RunProgress({"a": 100, "b": 50}, every=0.0)
    progress.update("a", 0)  # queued: no line yet
    progress.update("a", 10)
    progress.update("a", 40)
    progress.finished("b", 50, 1)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "a: step 10/100, 0s elapsed"
    assert lines[1].startswith("a: step 40/100, 0s elapsed, ETA ") and lines[2:] == ["b: exited with code 1 at step 50"]
    quiet = RunProgress({"a": 100}, every=3600.0)
    quiet.update("a", 10)
    quiet.update("a", 20)  # within the interval: no second line
    assert len(capsys.readouterr().err.splitlines()) == 1


def test_analyze_reports_each_stage(tmp_path, capsys):
    run = tiny_run(tmp_path)
    assert main(["analyze", str(run), "--samples", "64", "--no-tsne", "--permutations", "10"]) == 0
    stages = [line for line in capsys.readouterr().err.splitlines() if line.startswith("analyze: ")]
    assert stages[0].startswith("analyze: latent codes of ") and stages[-1].startswith("analyze: report (")
    assert any(line.startswith("analyze: probes (") and line.endswith(" s elapsed)") for line in stages)
