"""benchmarks/bench_training.py measures a preset with overrides (a sweep's setting) end to end, and
rejects a bad override in one line before measuring anything."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_training.py"


def bench(*args: str, out: Path | None = None) -> subprocess.CompletedProcess:
    command = [sys.executable, str(SCRIPT), "--out", str(out or ""), *args]
    return subprocess.run(command, capture_output=True, text=True)


@pytest.mark.slow  # a training subprocess that checks the benchmark script, not hyla
def test_an_override_is_measured_and_recorded(tmp_path):
    out = tmp_path / "training.json"
    args = ["--presets", "logic_4var_2term", "--mixers", "linear", "--modes", "eager", "--threads", "1"]
    done = bench(*args, "--steps", "1", "--repeats", "1", "--set", "fuzzy_logic.seq_len=32", out=out)
    assert done.returncode == 0, done.stderr
    (row,) = json.loads(out.read_text())["rows"]
    assert row["overrides"] == ["fuzzy_logic.seq_len=32"] and row["steps_per_second"] > 0
    assert row["compile_mode"] is None  # eager
    assert "| logic_4var_2term fuzzy_logic.seq_len=32 | linear | eager |" in done.stdout


@pytest.mark.slow  # two subprocesses that check the benchmark script, not hyla
def test_a_bad_override_is_one_line():
    for bad in ["fuzzy_logic.seq_len", "fuzzy_logic.no_such_field=3"]:
        done = bench("--presets", "logic_4var_2term", "--set", bad)
        assert done.returncode != 0
        assert "Traceback" not in done.stderr and done.stderr.strip().count("\n") == 0, done.stderr
        assert "bench_training.py: --set" in done.stderr
