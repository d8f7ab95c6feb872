"""`hyla.utils` (one JSON convention: non-finite numbers are null), `hyla.analysis.tables` and figures
drawn without pyplot."""

import json
import subprocess
import sys

import numpy as np
import pytest
import torch

from hyla.analysis.tables import markdown_table
from hyla.utils import append_jsonl, read_jsonl, to_jsonable, write_json


def test_non_finite_numbers_become_null_everywhere(tmp_path):
    value = {
        "nan": float("nan"),
        3: [float("inf"), np.float32(-np.inf), 1.5],
        "t": torch.tensor([1.0, float("nan")]),
        "np": np.array([[1, 2]]),
        "i": np.int64(7),
        "tuple": (1, "a"),
    }
    expected = {"nan": None, "3": [None, None, 1.5], "t": [1.0, None], "np": [[1, 2]], "i": 7, "tuple": [1, "a"]}
    assert to_jsonable(value) == expected
    write_json(tmp_path / "sub" / "a.json", value)
    text = (tmp_path / "sub" / "a.json").read_text()
    assert "NaN" not in text and "Infinity" not in text and json.loads(text) == expected
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["a.json"]  # the temporary file was renamed


def test_read_jsonl_drops_only_a_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert read_jsonl(path) == []
    append_jsonl(path, {"step": 1, "loss": float("nan")})
    append_jsonl(path, {"step": 2, "loss": 0.5})
    assert read_jsonl(path) == [{"step": 1, "loss": None}, {"step": 2, "loss": 0.5}]
    with open(path, "a") as f:
        f.write('{"step": 3, "lo')  # a writer killed mid-line
    with pytest.warns(UserWarning, match="torn last line"):
        assert [r["step"] for r in read_jsonl(path)] == [1, 2]
    path.write_text('{"step": 1}\n{"ste\n{"step": 3}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_jsonl(path)


def test_markdown_table():
    assert markdown_table(["a", "b"], [[1, "x"], ["–", 2.5]]) == "| a | b |\n|---|---|\n| 1 | x |\n| – | 2.5 |"
    with pytest.raises(ValueError, match="3 cells"):
        markdown_table(["a", "b"], [[1, 2, 3]])


def test_importing_and_plotting_leaves_matplotlib_global_state_alone(tmp_path):
    """No backend switch and no pyplot (a process-wide figure registry) at import or when drawing."""
    code = f"""
import sys, matplotlib
backend = matplotlib.rcParams._get_backend_or_none()
import hyla, hyla.analysis, hyla.experiments.demo, hyla.experiments.results
from hyla.analysis.plots import plot_curves
records = [{{"step": s, "split": "train", "loss": 1 / s}} for s in (1, 2)] + [{{"step": 2, "split": "ood", "r2": 0.5}}]
assert plot_curves({str(tmp_path / "c.png")!r}, {{"a": [records]}}, "r2").exists()
assert "matplotlib.pyplot" not in sys.modules, "pyplot was imported"
assert matplotlib.rcParams._get_backend_or_none() == backend, "the backend was switched"
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
