"""benchmarks/bench_trees.py times two checkouts side by side and writes each round's rates and ratios."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.slow  # six training subprocesses; the timing itself is bench_training.py's, tested beside it
def test_two_checkouts_are_timed_mixer_by_mixer_with_their_ratio(tmp_path):
    out = tmp_path / "trees.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "bench_trees.py"), str(ROOT), str(ROOT)]
    command += ["--mixers", "hyla", "linear", "--rounds", "1", "--steps", "2", "--repeats", "1", "--out", str(out)]
    subprocess.run(command, check=True, capture_output=True, cwd=ROOT / "benchmarks")
    rows = json.loads(out.read_text())["rows"]
    assert [r["mixer"] for r in rows] == ["hyla", "linear"]
    for row in rows:
        (a,), (b,) = row["a"]["steps_per_second"], row["b"]["steps_per_second"]
        assert a > 0 and b > 0 and row["ratios"] == [b / a] and row["a"]["commit"] == row["b"]["commit"]
