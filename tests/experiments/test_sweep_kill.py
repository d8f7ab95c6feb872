"""Trainings end with their sweep: after kill -9 of `hyla sweep` (or `hyla demo`, a sweep) its trainings
get SIGTERM, checkpoint and exit within seconds, and a re-run resumes every run, finishes the sweep and
leaves no `.running` marker behind."""

import json
import os
import signal
import socket
import subprocess
import sys
import time

import pytest
from helpers_train import TINY_RUN

from hyla.cli import main
from hyla.runs.launch import settle_markers
from hyla.runs.sweep import SweepSpec, alive, sweep_status

pytestmark = pytest.mark.skipif(not sys.platform.startswith("linux"), reason="the parent-death signal is Linux's")

TINY = json.dumps({**TINY_RUN, "log.every": 1, "train.steps": 400, "checkpoint.every": 5000})


def write_sweep(tmp_path):
    path = tmp_path / "sweep.yaml"
    path.write_text(
        f"name: t\npreset: logic_cpu\nout_dir: {tmp_path / 'runs'}\nparallel: 2\noverrides: {TINY}\n"
        "grid: {model.mixer: [hyla, softmax]}\n"
    )
    return path


def training_pids(runs, names) -> dict[str, int]:
    """{run: its training's pid} once every run trains (has a training record), else {}."""
    pids = {}
    for name in names:
        marker, metrics = runs / f"{name}.running", runs / name / "metrics.jsonl"
        if not (marker.exists() and metrics.exists() and metrics.read_text().strip()):
            return {}
        info = json.loads(marker.read_text())
        if "training_pid" not in info:
            return {}
        pids[name] = info["training_pid"]
    return pids


@pytest.mark.parametrize(
    "options",
    # packs: five more processes; their workers stop with the sweep through the same end_with_parent,
    # and a stopped pack's exact resume is tested in tests/train/test_packed.py
    [[], pytest.param(["--pack", "1"], marks=pytest.mark.slow)],
    ids=["runs", "packs"],
)
def test_kill_9_of_a_sweep_stops_its_trainings_and_a_rerun_finishes_it(tmp_path, capsys, options):
    path = write_sweep(tmp_path)
    spec, runs = SweepSpec.load(path), tmp_path / "runs"
    names = [run.name for run in spec.runs()]
    sweep = subprocess.Popen(
        [sys.executable, "-m", "hyla.cli", "sweep", str(path), *options],
        start_new_session=True,  # only for the cleanup below: the test kills the sweep alone
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    try:
        deadline = time.monotonic() + 120
        while not (pids := training_pids(runs, names)):
            assert sweep.poll() is None and time.monotonic() < deadline, "the runs never trained"
            time.sleep(0.05)
        os.kill(sweep.pid, signal.SIGKILL)  # the sweep alone, not its process group
        sweep.wait()
        killed = time.monotonic()
        while any(map(alive, pids.values())):
            assert time.monotonic() - killed < 15, "the trainings outlived their sweep"
            time.sleep(0.05)
    finally:
        if sweep.poll() is None:
            os.killpg(sweep.pid, signal.SIGKILL)
    for name in names:
        summary = json.loads((runs / name / "summary.json").read_text())
        assert summary["status"] == "interrupted" and summary["checkpoint_step"] == summary["step"] < 400, summary
        assert (runs / f"{name}.running").exists()  # left behind by the killed sweep
    assert set(sweep_status(spec).values()) == {"interrupted"}  # not running: resumable

    assert main(["sweep", str(path), *options]) == 0
    for name in names:
        assert json.loads((runs / name / "summary.json").read_text())["status"] == "completed"
        records = map(json.loads, (runs / name / "metrics.jsonl").read_text().splitlines())
        assert [r["step"] for r in records if r["split"] == "train"] == list(range(1, 401))
    assert not list(runs.glob("*.running"))


def dead_pid() -> int:
    process = subprocess.Popen(["true"])
    process.wait()
    return process.pid


def test_a_rerun_clears_stale_markers_and_waits_for_the_trainings_of_a_killed_sweep(tmp_path, capsys):
    path = tmp_path / "sweep.yaml"
    path.write_text(
        f"name: t\npreset: logic_cpu\nout_dir: {tmp_path}\ngrid: {{model.mixer: [hyla, softmax, linear]}}\n"
    )
    spec = SweepSpec.load(path)
    dead, stopping, alive = (tmp_path / f"{run.name}.running" for run in spec.runs())
    host = socket.gethostname()
    training = subprocess.Popen(["sleep", "1"])  # a killed sweep's training, checkpointing
    dead.write_text(json.dumps({"host": host, "pid": dead_pid(), "training_pid": dead_pid()}))
    stopping.write_text(json.dumps({"host": host, "pid": dead_pid(), "training_pid": training.pid}))
    alive.write_text(json.dumps({"host": host, "pid": os.getpid()}))  # another sweep's, running
    start = time.monotonic()
    settle_markers(spec)
    assert time.monotonic() - start > 0.5 and training.poll() is not None
    assert not dead.exists() and not stopping.exists() and alive.exists()
    assert "waiting for the trainings of a killed sweep to stop: mixer-softmax__s0\n" in capsys.readouterr().err
