"""What a training shows of its steps (hyla.train.progress.StepProgress): a bar on a terminal;
elsewhere (a log file that `tail -f` follows) plain lines, the first with its ETA once the pace after
the session's first step is measured, then one every interval; nothing when turned off."""

import sys

from hyla.train import progress
from hyla.train.progress import StepProgress


def test_lines_come_once_the_pace_is_measured_then_every_interval(capsys, monkeypatch):
    clock = iter([0.0, 3.0, 4.0, 8.0, 20.0, 40.0])  # at its start, then at each update
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    with StepProgress("hyla", 100, 0, first=5.0, every=30.0) as shown:
        shown.update(1)  # 3 s: the session's first step (warm-ups) ends; the pace is measured from here
        shown.update(2)  # 4 s: less than 5 s of pace
        shown.update(11, {"loss": "0.5"})  # 8 s: 10 steps in 5 s, 89 left: ETA 44.5 s
        shown.update(20)  # 20 s: within 30 s of the last line
        shown.update(50)  # 40 s: 49 steps in 37 s, 50 left
    assert capsys.readouterr().err.splitlines() == [
        "hyla: step 11/100 (11%), 8s elapsed, ETA 44s; loss 0.5",
        "hyla: step 50/100 (50%), 40s elapsed, ETA 37s; loss 0.5",
    ]


def test_a_resumed_session_counts_its_steps_from_where_it_resumed(capsys, monkeypatch):
    clock = iter([0.0, 2.0, 12.0])
    monkeypatch.setattr(progress.time, "perf_counter", lambda: next(clock))
    with StepProgress("pack of 3", 5700, 4600, first=5.0) as shown:
        shown.update(4601)
        shown.update(4701)  # 100 steps in 10 s, 999 left
    assert capsys.readouterr().err == "pack of 3: step 4701/5700 (82%), 12s elapsed, ETA 1m39s\n"


def test_a_terminal_gets_a_bar_and_no_lines(capsys, monkeypatch):
    monkeypatch.setattr(sys.stderr, "isatty", lambda: True)
    with StepProgress("hyla", 10, 0, first=0.0, every=0.0) as shown:
        for step in range(1, 11):
            shown.update(step)
        assert shown.bar.n == 10
    assert "step 10/10 (" not in capsys.readouterr().err


def test_turned_off_it_shows_nothing(capsys):
    with StepProgress("hyla", 10, 0, enabled=False, first=0.0, every=0.0) as shown:
        for step in range(1, 11):
            shown.update(step)
        assert shown.bar is None
    assert capsys.readouterr().err == ""
