"""benchmarks/repro_inductor_hyla_grad.py stands alone (no hyla import), runs on a CPU at a tiny shape,
reports each setting's errors as JSON, and tells a wrong gradient (FAIL) from a right one (PASS)."""

import ast
import importlib.util
import json
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[2] / "benchmarks" / "repro_inductor_hyla_grad.py"
TINY = ["--device", "cpu", "--batch", "2", "--seq", "4", "--heads", "2", "--dk", "2", "--dv", "2"]


def load_script():
    spec = importlib.util.spec_from_file_location("repro_inductor_hyla_grad", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module  # (dynamo looks a compiled function's module up by name)
    spec.loader.exec_module(module)
    return module


def test_the_script_imports_nothing_from_hyla():
    tree = ast.parse(SCRIPT.read_text())
    imported = [alias.name for node in ast.walk(tree) if isinstance(node, ast.Import) for alias in node.names]
    imported += [node.module for node in ast.walk(tree) if isinstance(node, ast.ImportFrom)]
    assert not [name for name in imported if name.split(".")[0] == "hyla"]


@pytest.mark.slow  # a subprocess (torch, dynamo) for the script's JSON; test_a_wrong_gradient_fails checks PASS / FAIL
def test_it_reports_passing_and_absent_settings_as_json_on_a_cpu():
    settings = ["--settings", "backend=aot_eager", "no_such_option=True"]
    out = subprocess.run([sys.executable, str(SCRIPT), *TINY, *settings], capture_output=True, text=True, check=True)
    report = json.loads(out.stdout)
    assert report["device"] == "cpu" and report["shape"]["heads"] == 2
    aot, absent = report["settings"]
    assert aot["status"] == "PASS" and set(aot["float32"]) == {"out", "grad_q", "grad_k", "grad_v", "grad_bias"}
    assert max(aot["float64"].values()) <= 1e-9
    assert absent == {"setting": "no_such_option=True", "status": "absent"}
    assert report["passing"] == ["backend=aot_eager"] and report["failing"] == []


def test_a_wrong_gradient_fails(monkeypatch):
    """A compiled function with the right output and half the gradient, against the right eager reference: FAIL."""
    script = load_script()
    right = script.hyla_attention

    def half_the_gradient(q, k, v, bias, keep):
        out = right(q, k, v, bias, keep)
        return out.detach() + (out - out.detach()) * 0.5

    inputs = script.make_inputs(script.parse_args(TINY), torch.device("cpu"))
    reference = script.output_and_grads(right, inputs, torch.float64)
    eager = {
        "float64": reference,
        "errors_float32": script.errors(script.output_and_grads(right, inputs, torch.float32), reference),
    }
    assert script.run_setting("backend=eager", inputs, eager)["status"] == "PASS"
    monkeypatch.setattr(script, "hyla_attention", half_the_gradient)
    row = script.run_setting("backend=eager", inputs, eager)
    assert row["status"] == "FAIL" and row["float64"]["out"] == 0.0 and row["float64"]["grad_v"] > 0.1
