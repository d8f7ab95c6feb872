"""The progress of `hyla sweep` and `hyla demo`: bars on a terminal, one line per finished run elsewhere."""

import sys

from hyla.sweep import RunProgress


def test_progress_is_lines_when_not_a_terminal(capsys):
    progress = RunProgress({"softmax": 10, "hyla": 10})
    progress.update("softmax", 5)
    progress.finished("softmax", 10, 0)
    progress.finished("hyla", 3, 1)
    progress.close()
    captured = capsys.readouterr()
    assert captured.err.splitlines() == ["softmax: step 5/10, 0s elapsed", "softmax: finished at step 10",
                                         "hyla: exited with code 1 at step 3"]
    assert captured.out == ""


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
    progress.finished("softmax", 10, 0)
    progress.close()
    assert capsys.readouterr().err == ""
