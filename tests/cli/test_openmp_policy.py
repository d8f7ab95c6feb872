"""Threads that survive a shared machine: before torch loads, the `hyla` command bounds how long
OpenMP's waiting threads spin (GOMP_SPINCOUNT=10000 on Linux, OMP_WAIT_POLICY=PASSIVE elsewhere),
unless the user chose (either variable set), and the run folder records both among its numerics."""

import json
import os
import subprocess
import sys

import pytest
from test_cli import TINY


def test_the_command_loads_torch_only_after_choosing_the_policy():
    code = "import sys, hyla.cli; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


DEFAULT = (None, "10000") if sys.platform.startswith("linux") else ("PASSIVE", None)


@pytest.mark.parametrize(
    "users_choice, recorded",
    [({}, DEFAULT), ({"OMP_WAIT_POLICY": "ACTIVE"}, ("ACTIVE", None)), ({"GOMP_SPINCOUNT": "5"}, (None, "5"))],
)
def test_the_run_records_the_policy_it_trained_with(tmp_path, users_choice, recorded):
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env.update(users_choice)
    subprocess.run(
        [
            sys.executable,
            "-m",
            "hyla.cli",
            "train",
            "--preset",
            "logic_cpu",
            "--train.steps",
            "2",
            "--out_dir",
            str(tmp_path),
            "--name",
            "run",
            *TINY,
        ],
        env=env,
        check=True,
        capture_output=True,
    )
    numerics = json.loads((tmp_path / "run" / "env.json").read_text())["numerics"]
    assert (numerics["omp_wait_policy"], numerics["gomp_spincount"]) == recorded
