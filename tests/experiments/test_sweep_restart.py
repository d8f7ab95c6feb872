"""A sweep restarts from any kill, and a bad sweep file is refused before anything launches: a run
killed before its first checkpoint starts again from scratch, one killed after it resumes, and
`--status` tells done, running, stale and failed apart."""

import json
import os
import signal
import subprocess
import sys
import time

import pytest
from helpers_train import TINY_RUN

from hyla.cli import main
from hyla.runs.sweep import SweepSpec, print_status, sweep_status

TINY = {**TINY_RUN, "log.every": 1, "train.steps": 300}


def write_sweep(tmp_path, grid: str = "{model.mixer: [hyla]}", overrides: dict | str = TINY, checkpoint_every=1000):
    """A sweep file of `grid` with `overrides` (a dict: with checkpoint.every; a str: as written)."""
    path = tmp_path / "sweep.yaml"
    if isinstance(overrides, dict):
        overrides = json.dumps({**overrides, "checkpoint.every": checkpoint_every})
    path.write_text(f"name: t\npreset: logic_cpu\nout_dir: {tmp_path / 'runs'}\noverrides: {overrides}\ngrid: {grid}\n")
    return path


@pytest.mark.parametrize(
    "grid, overrides, entry, needles",
    [
        ("{model.mixer: [hyla, sofmax]}", TINY, "grid entry model.mixer: 'sofmax'", ("valid names", "softmax")),
        (
            "{model.mixer: [hyla]}",
            "{model.mixr: hyla}",
            "overrides entry model.mixr: unknown key",
            ("valid fields of model", "mixer"),
        ),
        ("{model.num_heads: [4, 3]}", TINY, "grid entry model.num_heads: 3", ("divisible",)),
    ],
)
@pytest.mark.parametrize("options", [["--dry-run"], [], ["--pack", "2", "--dry-run"]])
def test_a_bad_entry_is_one_line_before_anything_launches(tmp_path, capsys, grid, overrides, entry, needles, options):
    path = write_sweep(tmp_path, grid, overrides)
    assert main(["sweep", str(path), *options]) == 2
    captured = capsys.readouterr()
    err = captured.err.strip()
    assert len(err.splitlines()) == 1 and "Traceback" not in err, err
    assert err.startswith(f"hyla sweep: error: {path}: {entry}"), err
    assert all(needle in err for needle in needles), err
    assert captured.out == "" and not (tmp_path / "runs").exists()


@pytest.mark.parametrize("options", [[], ["--pack", "2"]])
def test_a_dry_run_of_a_valid_file_prints_the_runs_and_writes_nothing(tmp_path, capsys, options):
    path = write_sweep(tmp_path, "{model.mixer: [hyla, softmax]}")
    before = sorted(tmp_path.rglob("*"))
    assert main(["sweep", str(path), "--dry-run", *options]) == 0
    out = capsys.readouterr().out
    assert "2 to run" in out and "mixer-hyla" in out and "mixer-softmax" in out, out
    assert sorted(tmp_path.rglob("*")) == before and not (tmp_path / "runs").exists()


def start_sweep(path) -> subprocess.Popen:
    return subprocess.Popen(
        [sys.executable, "-m", "hyla.cli", "sweep", str(path)],
        start_new_session=True,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )


def kill_when(sweep: subprocess.Popen, condition, what: str) -> None:
    """kill -9 the sweep and its training once `condition()` holds."""
    deadline = time.monotonic() + 120
    while not condition():
        assert sweep.poll() is None, f"the sweep ended before {what}"
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.02)
    os.killpg(sweep.pid, signal.SIGKILL)
    sweep.wait()
    while subprocess.run(["pgrep", "-g", str(sweep.pid)], capture_output=True).returncode == 0:
        time.sleep(0.02)  # the training dies too


def trained_records(run) -> int:
    metrics = run / "metrics.jsonl"
    return len(metrics.read_text().splitlines()) if metrics.exists() else 0


@pytest.mark.parametrize(
    "checkpoint_every, state, then",
    [(1000, "started", "starting again from scratch"), (20, "partial", "resuming at step")],
)
def test_a_killed_sweep_is_stale_and_a_rerun_finishes_it(tmp_path, capsys, checkpoint_every, state, then):
    path = write_sweep(tmp_path, checkpoint_every=checkpoint_every)
    spec = SweepSpec.load(path)
    (name,) = [run.name for run in spec.runs()]
    run = tmp_path / "runs" / name
    if checkpoint_every < 300:
        kill_when(start_sweep(path), lambda: (run / "checkpoints" / "latest.pt").exists(), "a checkpoint")
    else:
        kill_when(start_sweep(path), lambda: trained_records(run) >= 1, "the first training record")
    assert sweep_status(spec) == {name: state}
    assert print_status(spec)["stale"] == 1
    assert main(["sweep", str(path)]) == 0
    assert then in (tmp_path / "runs" / f"{name}.log").read_text()
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert [
        r["step"] for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines()) if r["split"] == "train"
    ] == list(range(1, 301))
    assert print_status(spec)["done"] == 1
