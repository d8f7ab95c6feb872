"""Exact resume after every kind of stop: the resumed run ends with the same weights, optimizer
state, metrics.jsonl records and summary as the uninterrupted run (timing fields aside).

The reference run logs every 5 steps, evaluates every 10 and checkpoints every 7, so stops fall
before, on and between logs, evaluations and checkpoints.
"""

import json
import os
import signal
import subprocess
import sys
import time
import warnings
from dataclasses import replace

import pytest
import torch
from helpers_train import TaskWrapper, tiny_config

from hyla.train import checkpoint as ckpt
from hyla.train import train
from hyla.train.configs import MOVED_FIELDS, config_to_dict

TIMING = ("steps_per_second", "wall_time_s")
STEPS = 20


def config(tmp_path, name, **overrides):
    return tiny_config(tmp_path, name=name, **{"steps": STEPS, "checkpoint": {"every": 7}, **overrides})


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return train(config(tmp_path_factory.mktemp("reference"), "full"))


def resume(tmp_path, name, **train_overrides):
    return train(replace(config(tmp_path, name, **train_overrides), resume=True))


def without_timing(record: dict) -> dict:
    return {k: v for k, v in record.items() if k not in TIMING}


def assert_same_run(a, b) -> None:
    """Weights, optimizer state, metrics records and summary equal (timing aside)."""
    state_a, state_b = (ckpt.load(r / "checkpoints" / "latest.pt") for r in (a, b))
    for key in ("model", "optimizer", "scheduler"):
        _assert_equal(state_a[key], state_b[key], key)
    rows_a, rows_b = (
        [without_timing(json.loads(line)) for line in (r / "metrics.jsonl").read_text().splitlines()] for r in (a, b)
    )
    assert rows_a == rows_b
    summary_a, summary_b = (without_timing(json.loads((r / "summary.json").read_text())) for r in (a, b))
    assert summary_a == summary_b


def _assert_equal(x, y, where: str) -> None:
    if isinstance(x, torch.Tensor):
        assert torch.equal(x, y), where
    elif isinstance(x, dict):
        assert x.keys() == y.keys(), where
        for key in x:
            _assert_equal(x[key], y[key], f"{where}.{key}")
    elif isinstance(x, (list, tuple)):
        assert len(x) == len(y), where
        for i, (u, v) in enumerate(zip(x, y)):
            _assert_equal(u, v, f"{where}[{i}]")
    else:
        assert x == y, where


class SignalAt(TaskWrapper):
    """Wraps a task: sends `sig` to this process when batch `step` of `split` is drawn (inside the
    training step, or inside an evaluation)."""

    def __init__(self, task, split: str, step: int, sig=signal.SIGTERM, times: int = 1):
        super().__init__(task)
        self.split, self.step, self.sig, self.times = split, step, sig, times

    def batch(self, split, batch_size, step, rank=0, world_size=1):
        if split == self.split and step == self.step and self.times > 0:
            self.times -= 1
            for _ in range(self.sent_per_call):
                os.kill(os.getpid(), self.sig)
        return self.task.batch(split, batch_size, step, rank, world_size)

    sent_per_call = 1


def stop_with(monkeypatch, wrap):
    import hyla.train.session as session

    build = session.build_task
    monkeypatch.setattr(session, "build_task", lambda cfg, device: wrap(build(cfg, device)))
    return lambda: monkeypatch.setattr(session, "build_task", build)


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
@pytest.mark.parametrize("step", [2, 4, 9, 13, 19])  # before the first log, on a log, on an eval, between, last
def test_a_signal_stops_after_the_step_and_resume_is_exact(tmp_path, monkeypatch, reference, sig, step):
    restore = stop_with(monkeypatch, lambda task: SignalAt(task, "train", step, sig))
    with pytest.raises(KeyboardInterrupt):
        train(config(tmp_path, "stopped"))
    restore()
    summary = json.loads((tmp_path / "stopped" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["step"] == summary["checkpoint_step"] == step + 1
    assert_same_run(reference, resume(tmp_path, "stopped"))


def test_a_signal_during_an_evaluation_finishes_it_then_stops(tmp_path, monkeypatch, reference):
    restore = stop_with(monkeypatch, lambda task: SignalAt(task, "ood", 1))  # ood at step 10, 2nd batch
    with pytest.raises(KeyboardInterrupt):
        train(config(tmp_path, "stopped", eval={"samples": 64}))
    restore()
    rows = [json.loads(line) for line in (tmp_path / "stopped" / "metrics.jsonl").read_text().splitlines()]
    assert [(r["step"], r["split"]) for r in rows][-3:] == [(10, "valid"), (10, "ood"), (10, "novel_terms")]
    samples = {"eval": {"samples": 64}}
    assert_same_run(train(config(tmp_path, "full", **samples)), resume(tmp_path, "stopped", **samples))


def test_a_second_signal_aborts_at_once_and_the_last_checkpoint_resumes_exactly(tmp_path, monkeypatch, reference):
    class TwoSignals(SignalAt):
        sent_per_call = 2

    restore = stop_with(monkeypatch, lambda task: TwoSignals(task, "train", 11))
    with pytest.raises(KeyboardInterrupt):
        train(config(tmp_path, "aborted"))
    restore()
    summary = json.loads((tmp_path / "aborted" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["checkpoint_step"] == 7
    assert_same_run(reference, resume(tmp_path, "aborted"))


def test_repeats_of_the_sweep_ended_signal_stop_after_the_step_without_aborting(tmp_path, monkeypatch, reference):
    """A sweep killed with kill -9 sends each of its trainings SIGUSR1 once per thread it had: one stop."""
    from hyla.train.signals import SWEEP_ENDED, Stopped

    class Repeated(SignalAt):
        sent_per_call = 3

    restore = stop_with(monkeypatch, lambda task: Repeated(task, "train", 11, SWEEP_ENDED))
    with pytest.raises(Stopped):
        train(config(tmp_path, "stopped"))
    restore()
    summary = json.loads((tmp_path / "stopped" / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["step"] == summary["checkpoint_step"] == 12
    assert_same_run(reference, resume(tmp_path, "stopped"))


@pytest.mark.parametrize("stop_at", [3, 7, 10, 16])
def test_stop_at_then_resume_is_exact(tmp_path, reference, stop_at):
    train(config(tmp_path, "split", stop_at=stop_at))
    assert json.loads((tmp_path / "split" / "summary.json").read_text())["status"] == "stopped"
    assert_same_run(reference, resume(tmp_path, "split"))


class CrashAt(SignalAt):
    def batch(self, split, batch_size, step, rank=0, world_size=1):
        if split == self.split and step == self.step:
            raise RuntimeError("simulated crash")
        return self.task.batch(split, batch_size, step, rank, world_size)


@pytest.mark.parametrize("step", [9, 16])
def test_a_crash_resumes_exactly_from_the_last_checkpoint(tmp_path, monkeypatch, reference, step):
    restore = stop_with(monkeypatch, lambda task: CrashAt(task, "train", step))
    with pytest.raises(RuntimeError, match="simulated crash"):
        train(config(tmp_path, "crashed"))
    restore()
    assert json.loads((tmp_path / "crashed" / "summary.json").read_text())["status"] == "failed"
    assert_same_run(reference, resume(tmp_path, "crashed"))


def test_a_damaged_latest_checkpoint_falls_back_to_the_previous_one(tmp_path, reference, capsys):
    train(config(tmp_path, "damaged", stop_at=16))  # checkpoints at 7, 14 and 16
    latest = tmp_path / "damaged" / "checkpoints" / "latest.pt"
    latest.write_bytes(latest.read_bytes()[:1000])
    with open(tmp_path / "damaged" / "metrics.jsonl", "a") as f:
        f.write('{"step": 17, "split": "tr')  # and a torn last line, as after a crash mid-write
    with pytest.warns(UserWarning, match="torn last line"):
        resumed = resume(tmp_path, "damaged")
    assert "using the previous checkpoint" in capsys.readouterr().out
    assert_same_run(reference, resumed)


def test_resuming_a_completed_run_changes_nothing(tmp_path, capsys):
    run = train(config(tmp_path, "done"))
    before = {p: p.read_bytes() for p in run.rglob("*") if p.is_file()}
    resume(tmp_path, "done")
    assert "is complete" in capsys.readouterr().out
    assert {p: p.read_bytes() for p in run.rglob("*") if p.is_file()} == before


def flat_layout(data: dict) -> dict:
    """A config dict as hyla wrote it before the config sections (issue 80): every field that moved
    back in the train section under its old name, the sections it moved to gone."""
    moved = {new.split(".")[0] for new in MOVED_FIELDS.values()}
    train_section = dict(data["train"])
    for old, new in MOVED_FIELDS.items():
        section, name = new.split(".")
        train_section[old.removeprefix("train.")] = data[section][name]
    return {**{k: v for k, v in data.items() if k not in moved}, "train": train_section}


def test_a_run_folder_of_the_flat_layout_resumes_exactly(tmp_path, reference, capsys):
    """A run stopped by an older hyla (its config.json in the flat layout, as the long runs' folders
    are) continues with `hyla resume` and ends as if it had never stopped."""
    from hyla.cli import main

    run = tmp_path / "old"
    train(config(tmp_path, "old", stop_at=10))
    config_file = run / "config.json"
    config_file.write_text(json.dumps(flat_layout(json.loads(config_file.read_text()))))
    assert "optim" not in json.loads(config_file.read_text()) and "lr" in json.loads(config_file.read_text())["train"]
    assert main(["resume", str(run)]) == 0, capsys.readouterr().err
    assert_same_run(reference, run)


def test_resume_warns_when_numerics_change(tmp_path):
    train(config(tmp_path, "run", stop_at=7))
    with pytest.warns(RuntimeWarning, match="threads 2 \\(was 1\\).*not be bit-identical"):
        resume(tmp_path, "run", threads=2)


def test_resume_warns_when_the_cpp_kernel_comes_or_goes(tmp_path, set_switch):
    """HYLA runs as the C++ kernel where it builds and as PyTorch code where it does not: a run
    continued on the other path is not bit-identical, and says so."""
    from hyla.ops.kernels import cpp

    if not cpp.available():
        pytest.skip("the C++ kernel did not build on this machine")
    set_switch("HYLA_CPP_KERNEL", "0")
    train(config(tmp_path, "run", stop_at=7))
    set_switch("HYLA_CPP_KERNEL", None)
    with pytest.warns(RuntimeWarning, match="cpp_kernel True \\(was False\\).*not be bit-identical"):
        resume(tmp_path, "run")


def test_resume_warns_when_query_pruning_comes_or_goes_but_not_for_a_checkpoint_without_the_record(
    tmp_path, set_switch
):
    set_switch("HYLA_QUERY_PRUNING", "0")
    train(config(tmp_path, "run", stop_at=7))
    set_switch("HYLA_QUERY_PRUNING", None)
    with pytest.warns(RuntimeWarning, match="query_pruning True \\(was False\\).*not be bit-identical"):
        resume(tmp_path, "run")
    train(config(tmp_path, "older", stop_at=7))  # as a checkpoint written before the switch was recorded
    latest = tmp_path / "older" / "checkpoints" / "latest.pt"
    state = ckpt.load(latest)
    del state["numerics"]["query_pruning"]
    torch.save(state, latest)
    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)
        resume(tmp_path, "older")


def test_the_default_thread_count_is_a_function_of_the_machine(monkeypatch):
    from hyla.train.numerics import default_threads

    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: {0, 1, 2, 3}, raising=False)
    monkeypatch.delenv("LOCAL_WORLD_SIZE", raising=False)
    assert [default_threads(), default_threads(2), default_threads(8)] == [4, 2, 1]


def _start_cli(args, tmp_path):
    env = {**os.environ, "OMP_NUM_THREADS": "1"}
    return subprocess.Popen(
        [sys.executable, "-m", "hyla.cli", *args],
        env=env,
        cwd=tmp_path,
        stdout=subprocess.PIPE,
        stderr=subprocess.PIPE,
        text=True,
    )


def _wait_for_step(run, step: int, process, timeout: float = 120) -> None:
    deadline = time.monotonic() + timeout
    metrics = run / "metrics.jsonl"
    while time.monotonic() < deadline and process.poll() is None:
        if metrics.exists() and any(
            json.loads(line)["step"] >= step for line in metrics.read_text().splitlines() if line.endswith("}")
        ):
            return
        time.sleep(0.05)
    raise AssertionError(f"the run did not reach step {step}: {process.poll()}")


@pytest.mark.parametrize(
    "sig",
    # SIGKILL: three more `hyla` processes; the crash tests above and tests/experiments/test_sweep_restart.py
    # (kill -9 of a training after a checkpoint, then resumed) guard what it checks
    [signal.SIGTERM, pytest.param(signal.SIGKILL, marks=pytest.mark.slow)],
    ids=["SIGTERM", "SIGKILL"],
)
def test_real_signals_to_the_hyla_command(tmp_path, sig):
    """`hyla train` killed by a real SIGTERM (stops after the step) or SIGKILL (resumes from the last
    checkpoint); `hyla resume` then ends exactly like an uninterrupted run."""
    cfg = config(tmp_path, "real", steps=400, checkpoint={"every": 50}, eval={"every": 100})
    (tmp_path / "real.json").write_text(json.dumps(config_to_dict(cfg)))
    full = replace(cfg, name="full")
    process = _start_cli(["train", "--config", "real.json"], tmp_path)
    _wait_for_step(tmp_path / "real", 60, process)
    process.send_signal(sig)
    process.communicate(timeout=120)
    assert process.returncode == (128 + signal.SIGTERM if sig == signal.SIGTERM else -signal.SIGKILL)
    done = subprocess.run(
        [sys.executable, "-m", "hyla.cli", "resume", str(tmp_path / "real")],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1"},
        timeout=300,
    )
    assert done.returncode == 0, done.stderr[-2000:]
    train(full)  # the uninterrupted run, in this process (one thread, like the command's)
    assert_same_run(tmp_path / "full", tmp_path / "real")
