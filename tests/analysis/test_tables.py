"""`hyla.analysis.tables`, and figures drawn without pyplot."""

import subprocess
import sys

import pytest

from hyla.analysis.tables import markdown_table


def test_markdown_table():
    assert markdown_table(["a", "b"], [[1, "x"], ["–", 2.5]]) == "| a | b |\n|---|---|\n| 1 | x |\n| – | 2.5 |"
    with pytest.raises(ValueError, match="3 cells"):
        markdown_table(["a", "b"], [[1, 2, 3]])


def test_importing_and_plotting_leaves_matplotlib_global_state_alone(tmp_path):
    """No backend switch and no pyplot (a process-wide figure registry) at import or when drawing."""
    code = f"""
import sys, matplotlib
backend = matplotlib.rcParams._get_backend_or_none()
import hyla, hyla.analysis, hyla.runs.demo, hyla.runs.results
from hyla.analysis.plots import plot_curves
records = [{{"step": s, "split": "train", "loss": 1 / s}} for s in (1, 2)] + [{{"step": 2, "split": "ood", "r2": 0.5}}]
assert plot_curves({str(tmp_path / "c.png")!r}, {{"a": [records]}}, "r2").exists()
assert "matplotlib.pyplot" not in sys.modules, "pyplot was imported"
assert matplotlib.rcParams._get_backend_or_none() == backend, "the backend was switched"
"""
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
    assert result.returncode == 0, result.stderr
