"""`hyla sweep --launcher slurm` through submitit, tested with submitit's local executor: a job
preempted mid-run (its signal, as Slurm sends it) is requeued and resumes from its checkpoint to
exactly the weights of an uninterrupted run; `--status` tells pending, running, done and failed."""

import json
import os
import signal
import socket
import subprocess
import time

import pytest
import torch
from helpers_train import TINY_RUN

from hyla.cli.train_args import parse_train_args
from hyla.runs.launch import submit_sweep
from hyla.runs.sweep import SweepSpec, print_status, sweep_status, train_args
from hyla.train import train

submitit = pytest.importorskip("submitit")


def tiny_spec(out_dir, steps: int) -> SweepSpec:
    """One run on one thread (bitwise equal weights need the same thread count)."""
    return SweepSpec(
        name="tiny",
        preset="logic_cpu",
        out_dir=str(out_dir),
        seeds=[0],
        overrides={**TINY_RUN, "log.every": 10, "checkpoint.every": 10, "train.steps": steps},
        grid=[{"model.mixer": ["hyla"]}],
        slurm={"cpus_per_task": 1},
    )


def wait_for(condition, what: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while not condition():
        assert time.monotonic() < deadline, f"timed out waiting for {what}"
        time.sleep(0.05)


def test_preempted_job_is_requeued_and_resumes_exactly(tmp_path):
    spec = tiny_spec(tmp_path / "slurm", steps=300)
    (name,) = [r.name for r in spec.runs()]
    run_dir = tmp_path / "slurm" / name
    assert sweep_status(spec) == {name: "new"}
    executor = submitit.LocalExecutor(folder=tmp_path / "submitit")
    executor.update_parameters(timeout_min=10)
    (job,) = submit_sweep(spec, executor).values()
    wait_for(lambda: (run_dir / "checkpoints" / "latest.pt").exists(), "the first checkpoint")
    assert sweep_status(spec) == {name: "running"}
    job_pid = json.loads((tmp_path / "slurm" / f"{name}.running").read_text())["pid"]
    os.kill(job_pid, signal.SIGUSR2)  # what Slurm sends a submitit job before preempting it or at its time limit
    assert job.result() == 0  # the requeued job's exit code

    log = (tmp_path / "slurm" / f"{name}.log").read_text()
    assert "interrupted at step" in log
    resumed_at = int(log.split("resuming at step ")[1].split()[0])
    assert 0 < resumed_at < 300, log
    summary = json.loads((run_dir / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["step"] == 300
    assert sweep_status(spec) == {name: "completed"}
    steps = [
        r["step"]
        for r in map(json.loads, (run_dir / "metrics.jsonl").read_text().splitlines())
        if r["split"] == "train"
    ]
    assert steps == list(range(10, 301, 10))  # no record lost or repeated across the requeue

    reference = tiny_spec(tmp_path / "local", steps=300)
    (run,) = reference.runs()
    train(parse_train_args(train_args(reference, run, threads=1))[0])  # uninterrupted, in this process
    got = torch.load(run_dir / "checkpoints" / "latest.pt", weights_only=False)["model"]
    want = torch.load(tmp_path / "local" / name / "checkpoints" / "latest.pt", weights_only=False)["model"]
    assert got.keys() == want.keys() and all(torch.equal(got[k], want[k]) for k in got)


def test_status_groups_runs(tmp_path, capsys):
    spec = SweepSpec(
        name="s", preset="logic_cpu", out_dir=str(tmp_path), seeds=list(range(8)), grid=[{"model.mixer": ["hyla"]}]
    )
    names = [r.name for r in spec.runs()]
    for name, status in zip(names, ["completed", "failed", "interrupted"]):
        (tmp_path / name).mkdir()
        (tmp_path / name / "summary.json").write_text(json.dumps({"status": status, "step": 3, "steps": 9}))
    (tmp_path / f"{names[3]}.job").write_text(json.dumps({"job_id": "17"}))  # submitted, not started
    (tmp_path / names[5] / "checkpoints").mkdir(parents=True)  # killed after a checkpoint
    (tmp_path / names[5] / "checkpoints" / "previous.pt").write_bytes(b"")
    (tmp_path / names[6]).mkdir()  # killed before its first checkpoint, its owner gone
    (tmp_path / names[6] / "metrics.jsonl").write_text("")
    dead = subprocess.Popen(["true"])
    dead.wait()
    (tmp_path / f"{names[6]}.running").write_text(json.dumps({"host": socket.gethostname(), "pid": dead.pid}))
    (tmp_path / names[7]).mkdir()  # the same, with a live owner, at step 40 of 6,500
    (tmp_path / names[7] / "metrics.jsonl").write_text(json.dumps({"step": 40, "split": "train", "loss": 1.0}) + "\n")
    (tmp_path / f"{names[7]}.running").write_text(
        json.dumps({"host": socket.gethostname(), "pid": dead.pid, "training_pid": os.getpid()})
    )
    states = sweep_status(spec)
    assert list(states.values()) == [
        "completed",
        "failed",
        "interrupted",
        "queued",
        "new",
        "partial",
        "started",
        "running",
    ]
    assert print_status(spec) == {"done": 1, "running": 1, "pending": 3, "stale": 2, "failed": 1}
    out = capsys.readouterr().out
    assert "step 3/9" in out and f"{names[7]}  running  running      step 40/6500" in out
    assert "1 done, 1 running, 3 pending, 2 stale, 1 failed" in out


def test_status_shows_pace_eta_and_latest_evaluation(tmp_path, capsys):
    spec = SweepSpec(name="s", preset="raven_cpu", out_dir=str(tmp_path), seeds=[0, 1, 2])
    spec.overrides = {"train.steps": 1000}
    names = [r.name for r in spec.runs()]
    for name in names:
        (tmp_path / name).mkdir()
        (tmp_path / name / "config.json").write_text(json.dumps({"task": "sraven"}))
    train = [(100, 1), (200, 4)]
    rows = [{"step": step, "split": "train", "loss": 1.0, "steps_per_second": pace} for step, pace in train]
    rows += [{"step": 200, "split": split, "acc": acc} for split, acc in [("valid", 0.5), ("ood", 0.25)]]
    rows += [{"step": 300, "split": "train", "loss": 1.0, "steps_per_second": 4}]
    rows += [{"step": 300, "split": "valid", "acc": 0.75}]  # an evaluation under way: its ood split to come
    rows += [{"step": 400, "split": "va"}]
    for name in names[:2]:  # running, and killed after a checkpoint (a line torn mid-write)
        (tmp_path / name / "metrics.jsonl").write_text("\n".join(map(json.dumps, rows))[:-8] + "\n")
    (tmp_path / names[1] / "checkpoints").mkdir()
    (tmp_path / names[1] / "checkpoints" / "latest.pt").write_bytes(b"")
    (tmp_path / f"{names[0]}.running").write_text(json.dumps({"host": socket.gethostname(), "pid": os.getpid()}))
    final = {"valid": {"acc": 0.75, "loss": 0.5}, "ood": {"acc": 0.625, "loss": 0.6}}
    summary = {"status": "completed", "step": 1000, "steps": 1000, "metric_name": "acc", "final": final}
    (tmp_path / names[2] / "summary.json").write_text(json.dumps(summary))
    print_status(spec)
    out = capsys.readouterr().out.splitlines()
    # pace: the mean seconds per step of the last records, (1 + 1/4 + 1/4) / 3 = 0.5 s: 700 steps left, 5m50s
    assert out[0].endswith("step 300/1000, 2.00 steps/s, ETA 5m50s; at step 200: valid acc 0.5000, ood acc 0.2500")
    assert out[1].endswith("partial      step 300/1000; at step 200: valid acc 0.5000, ood acc 0.2500")
    assert out[2].endswith("step 1000/1000; final: valid acc 0.7500, ood acc 0.6250")


def test_status_estimates_the_training_left_from_the_completed_runs_pace(tmp_path, capsys):
    spec = SweepSpec(name="s", preset="logic_cpu", out_dir=str(tmp_path), seeds=list(range(5)), parallel=2)
    spec.overrides = {"train.steps": 100}
    names = [r.name for r in spec.runs()]
    for name, status, wall_time in zip(names, ["completed", "completed", "interrupted", "failed"], [200, 400, 0, 0]):
        (tmp_path / name).mkdir()
        summary = {"status": status, "step": 100 if status == "completed" else 40, "steps": 100}
        (tmp_path / name / "summary.json").write_text(json.dumps({**summary, "wall_time_s": wall_time}))
    (tmp_path / names[2] / "metrics.jsonl").write_text(json.dumps({"step": 40, "split": "train", "loss": 1.0}) + "\n")
    print_status(spec)  # left: 60 steps of the interrupted run and 100 of the new one (not the failed one's)
    out = capsys.readouterr().out  # at 3 s a step: 8 minutes; two at once: never sooner than the new run's 5
    assert "training left: about 8 min one run at a time (5 min with 2 at once), at the mean pace of the 2 runs" in out
    spec.only = [names[2]]  # the pace of the runs --only leaves out still counts; one run: no parallel estimate
    print_status(spec)
    assert "training left: about 3 min one run at a time, at the mean pace" in capsys.readouterr().out
    spec.only, spec.parallel = [], 5  # more slots than runs left: two at once, 5 min, not 8 / 5
    print_status(spec)
    assert "(5 min with 2 at once)" in capsys.readouterr().out
    spec.only = []
    for name in names[:2]:
        (tmp_path / name / "summary.json").unlink()
    print_status(spec)  # no completed run: no pace, no estimate
    assert "training left" not in capsys.readouterr().out


def test_slurm_launcher_without_slurm_is_a_clear_error(tmp_path, capsys):
    spec_file = tmp_path / "s.yaml"
    spec_file.write_text(f"name: s\npreset: logic_cpu\nout_dir: {tmp_path / 'runs'}\nslurm: {{timeout_min: 5}}\n")
    from hyla.cli import main as hyla

    assert hyla(["sweep", str(spec_file), "--launcher", "slurm"]) == 2
    err = capsys.readouterr().err.strip()
    assert "slurm" in err.lower() and len(err.splitlines()) == 1
