"""Threads that survive a shared machine: the `hyla` command makes OpenMP's waiting threads sleep
(OMP_WAIT_POLICY=PASSIVE) before torch loads, unless the user chose a policy, and the run folder
records the policy among its numerics."""

import json
import os
import subprocess
import sys

import pytest
from test_cli import TINY


def test_the_command_loads_torch_only_after_choosing_the_policy():
    code = "import sys, hyla.cli; print('torch' in sys.modules)"
    assert subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout == "False\n"


@pytest.mark.parametrize("users_policy, recorded", [(None, "PASSIVE"), ("ACTIVE", "ACTIVE")])
def test_the_run_records_the_policy_it_trained_with(tmp_path, users_policy, recorded):
    env = {k: v for k, v in os.environ.items() if k != "OMP_WAIT_POLICY"}
    if users_policy:
        env["OMP_WAIT_POLICY"] = users_policy
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
    assert numerics["omp_wait_policy"] == recorded
