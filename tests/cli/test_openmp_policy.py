"""Threads that survive a shared machine: before torch loads, the `hyla` command bounds how long
OpenMP's waiting threads spin (GOMP_SPINCOUNT=10000 on Linux, OMP_WAIT_POLICY=PASSIVE elsewhere),
unless the user chose (either variable set), and the run folder records both among its numerics."""

import json
import os
import subprocess
import sys

import pytest
from test_cli import TINY

from hyla.cli import bound_openmp_waiting, main


def test_the_command_loads_torch_only_after_choosing_the_policy():
    code = "import sys, hyla.cli; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


DEFAULT = (None, "10000") if sys.platform.startswith("linux") else ("PASSIVE", None)
ARGS = ["--preset", "logic_cpu", "--train.steps", "2", "--name", "run", *TINY]


def test_the_run_records_the_policy_the_command_chose(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    command = [sys.executable, "-m", "hyla.cli", "train", *ARGS, "--out_dir", str(tmp_path)]
    subprocess.run(command, env=env, check=True, capture_output=True)
    numerics = json.loads((tmp_path / "run" / "env.json").read_text())["numerics"]
    assert (numerics["omp_wait_policy"], numerics["gomp_spincount"]) == DEFAULT


@pytest.mark.parametrize(
    "users_choice, recorded",
    [({"OMP_WAIT_POLICY": "ACTIVE"}, ("ACTIVE", None)), ({"GOMP_SPINCOUNT": "5"}, (None, "5"))],
)
def test_the_users_choice_is_kept_and_recorded(tmp_path, monkeypatch, users_choice, recorded):
    """What the command does before torch loads (the test above runs it in a process of its own),
    here with torch hidden from bound_openmp_waiting; then a training in this process records it."""
    for name in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT"):
        monkeypatch.delenv(name, raising=False)
    for name, value in users_choice.items():
        monkeypatch.setenv(name, value)
    with monkeypatch.context() as hidden:
        hidden.delitem(sys.modules, "torch")
        bound_openmp_waiting()
    assert main(["train", *ARGS, "--out_dir", str(tmp_path)]) == 0
    numerics = json.loads((tmp_path / "run" / "env.json").read_text())["numerics"]
    assert (numerics["omp_wait_policy"], numerics["gomp_spincount"]) == recorded
