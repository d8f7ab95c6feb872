"""benchmarks/bench_moe.py runs both forms end to end at a few eager steps and prints one JSON line."""

import json
import subprocess
import sys
from pathlib import Path

import pytest

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "bench_moe.py"


@pytest.mark.slow  # training subprocesses that check the benchmark script; tests/nn guards both MoE forms
@pytest.mark.parametrize("form", ["routed", "dense"])
def test_bench_moe_prints_a_rate(form):
    command = [sys.executable, str(SCRIPT), "--form", form, "--steps", "2", "--warmup", "1", "--no-compile"]
    line = subprocess.run(command, capture_output=True, text=True, check=True).stdout.strip().splitlines()[-1]
    result = json.loads(line)
    assert result["form"] == form and result["steps_per_second"] > 0
