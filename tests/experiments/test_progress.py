"""Progress reports of the long commands, all through hyla.train.progress. `hyla sweep` and `hyla demo`
(a demo is a sweep) show the progress of their runs with `RunProgress`, a `StepProgress` per run: on a
terminal a bar per run; elsewhere (a log file, CI) a run's lines with its step, elapsed time and ETA
(the first as soon as the pace is measured), then every `every` seconds, and a line when it finishes
or fails; with progress turned off, nothing. `hyla train` shows its steps with `StepProgress`
(tests/train/test_progress_lines.py), `hyla results` its runs. `hyla analyze` prints a line per stage."""

import sys

from helpers_cli import tiny_run

from hyla.cli import main
from hyla.runs.launch import RunProgress
from hyla.runs.results import measure_runs


def test_progress_is_lines_when_not_a_terminal(capsys):
    progress = RunProgress({"softmax": 10, "hyla": 10})
    progress.update("softmax", 0)
    progress.update("softmax", 5)  # the first interval: no pace yet, no line
    progress.finished("softmax", 10, 0)
    progress.finished("hyla", 3, 1)
    progress.close()
    captured = capsys.readouterr()
    assert captured.err.splitlines() == ["softmax: finished at step 10", "hyla: exited with code 1 at step 3"]
    assert captured.out == ""


def test_runs_get_lines_with_elapsed_time_and_eta(capsys):
    progress = RunProgress({"a": 100, "b": 50}, every=0.0)
    progress.update("a", 0)  # launched: its clock starts
    progress.update("a", 10)
    progress.update("a", 40)
    progress.finished("b", 50, 1)
    lines = capsys.readouterr().err.splitlines()
    assert lines[0] == "a: step 10/100 (10%), 0s elapsed"
    assert lines[1].startswith("a: step 40/100 (40%), 0s elapsed, ETA ") and lines[2:] == [
        "b: exited with code 1 at step 50"
    ]
    quiet = RunProgress({"a": 100}, first=0.0, every=3600.0)
    quiet.update("a", 0)
    quiet.update("a", 10)
    quiet.update("a", 20)  # the pace is measured: its ETA is shown at once
    quiet.update("a", 30)  # within the interval: no second line
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and lines[0].startswith("a: step 20/100 (20%), 0s elapsed, ETA ")


def test_the_eta_comes_from_the_pace_after_the_first_interval(capsys, monkeypatch):
    """The first interval holds the run's start (10 s) and 25 steps its log shows at once; the
    monitor, polling, sees them half a second after its last look. From there on 25 steps take 2 s:
    950 steps left take 76 s."""
    clock = iter([0.0, 9.5, 10.0, 12.0])
    monkeypatch.setattr("hyla.train.progress.time.perf_counter", lambda: next(clock))
    progress = RunProgress({"a": 1000}, every=0.0)
    for step in (0, 0, 25, 50):
        progress.update("a", step)
    assert capsys.readouterr().err.splitlines() == [
        "a: step 0/1000 (0%), 9s elapsed",
        "a: step 25/1000 (2%), 10s elapsed",
        "a: step 50/1000 (5%), 12s elapsed, ETA 1m16s",
    ]


def test_a_resumed_run_is_paced_from_its_first_new_step(capsys, monkeypatch):
    clock = iter([0.0, 5.0, 10.0, 20.0])
    monkeypatch.setattr("hyla.train.progress.time.perf_counter", lambda: next(clock))
    progress = RunProgress({"a": 5700}, every=0.0)
    for step in (4600, 4600, 4625, 4725):  # launched at its checkpoint, loading, then 100 steps in 10 s
        progress.update("a", step)
    assert capsys.readouterr().err.splitlines()[-1] == "a: step 4725/5700 (82%), 20s elapsed, ETA 1m37s"


def test_progress_draws_bars_on_a_terminal(capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    progress = RunProgress({"softmax": 10, "hyla": 10})
    progress.update("hyla", 0)
    progress.update("hyla", 4)
    assert progress.runs["hyla"].bar.n == 4
    progress.finished("softmax", 10, 0)
    assert list(progress.runs) == ["hyla"]
    progress.close()
    assert "finished" not in capsys.readouterr().err


def test_no_progress_prints_nothing(capsys):
    progress = RunProgress({"softmax": 10}, enabled=False)
    progress.update("softmax", 5)
    progress.finished("softmax", 10, 0)
    progress.close()
    assert capsys.readouterr().err == "" and not progress.runs


def test_results_gets_a_line_per_run_paced_by_the_runs_measured(capsys, monkeypatch):
    """`hyla results` measures the runs that have no cached measurement: its ETA leaves out the
    cached ones (read in no time) and the first measured (its imports)."""
    clock = iter([0.0, 10.0, 11.0, 31.0, 51.0])  # at the start, then after each run
    monkeypatch.setattr("hyla.train.progress.time.perf_counter", lambda: next(clock))
    measured = iter([({}, False), ({}, True), ({}, False), ({}, False)])  # (entry, cached) of each run
    monkeypatch.setattr("hyla.runs.results._measure", lambda run, options: next(measured))
    monkeypatch.setattr(
        "hyla.runs.results._structure_point", lambda run, entry, split, cached: (None, f"{run['name']}: noted")
    )
    runs = [{"name": name} for name in ("a", "b", "c", "d")]
    assert measure_runs(runs, {"split": "valid"}) == ([], ["a: noted", "b: noted", "c: noted", "d: noted"])
    assert capsys.readouterr().err.splitlines() == [
        "latent structure: run 1/4 (25%), 10s elapsed; a: noted",
        "latent structure: run 2/4 (50%), 11s elapsed; b: noted",
        "latent structure: run 3/4 (75%), 31s elapsed, ETA 20s; c: noted",
        "latent structure: run 4/4 (100%), 51s elapsed, ETA 0s; d: noted",
    ]


def test_analyze_reports_each_stage(tmp_path, capsys):
    run = tiny_run(tmp_path)
    assert main(["analyze", str(run), "--samples", "64", "--permutations", "10"]) == 0
    stages = [line for line in capsys.readouterr().err.splitlines() if line.startswith("analyze: ")]
    assert stages[0].startswith("analyze: 1 model (64 sequences per split") and stages[0].endswith(
        f"into {run}/analysis/"
    )
    assert stages[1] == f"analyze: {run} (step 20): writing into {run}/analysis/step20-samples64-permutations10/"
    assert stages[2].startswith("analyze: latent codes of ") and stages[-1].startswith("analyze: report (")
    assert any(line.startswith("analyze: probes (") and line.endswith("s elapsed)") for line in stages)
