"""The training loop: run folder contents, exact resume, atomic checkpoints, divergence, interrupts."""

import json
import math
import os
from dataclasses import replace
from pathlib import Path

import pytest
import torch
from helpers_train import TaskWrapper, assert_same_weights, final_weights, tiny_config

import hyla
from hyla.ops.kernels import cpp
from hyla.tasks.evaluation import fresh_offset
from hyla.train import NonFiniteLossError, evaluate, load_run, train
from hyla.train import checkpoint as ckpt
from hyla.train.configs import ConfigError, build_task, resolve_model
from hyla.train.distributed import DistContext
from hyla.train.step import EagerUpdate, Trainer, gradient_step


def test_run_folder_contents(tmp_path):
    run = train(tiny_config(tmp_path, steps=20))
    for name in ("config.json", "env.json", "metrics.jsonl", "summary.json", "checkpoints/latest.pt"):
        assert (run / name).exists(), name
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["step"] == 20
    assert set(summary["final"]) == {"valid", "ood", "novel_terms"}
    assert "r2" in summary["final"]["ood"] and summary["metric_name"] == "r2"
    assert summary["train_loss_window"] == 20 and math.isfinite(summary["train_loss"])
    assert summary["steps_per_second"] > 0 and summary["wall_time_s"] > 0
    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    train_records = [r for r in records if r["split"] == "train"]
    assert [r["step"] for r in train_records] == [5, 10, 15, 20]
    assert {"loss", "r2", "mse", "grad_norm", "lr", "steps_per_second"} <= train_records[0].keys()
    assert {(r["step"], r["split"]) for r in records if r["split"] != "train"} == {
        (10, "valid"),
        (10, "ood"),
        (10, "novel_terms"),
        (20, "valid"),
        (20, "ood"),
        (20, "novel_terms"),
    }
    config = json.loads((run / "config.json").read_text())
    assert config["model"]["seq_len"] == 8 and config["model"]["input_dim"] == 4  # resolved from the task
    env = json.loads((run / "env.json").read_text())
    assert {"torch", "cpu", "git_commit", "numerics"} <= env.keys()
    assert env["numerics"] == {
        "threads": 1,
        "device": "cpu",
        "compile": False,
        "compile_mode": None,
        "precision": "fp32",
        "deterministic": False,
        "world_size": 1,
        "torch": torch.__version__,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "gomp_spincount": os.environ.get("GOMP_SPINCOUNT"),
        "query_pruning": True,
        "gelu_kernel": cpp.available(),  # (eager, a GELU MLP in float32 on a CPU)
        "cpp_kernel": cpp.available(),  # (a HYLA model on a CPU)
        "attention": ["cpp" if cpp.available() else "naive"],
    }  # what ran
    state = torch.load(run / "checkpoints" / "latest.pt", weights_only=True)
    assert {"model", "optimizer", "scheduler", "progress", "config", "numerics"} <= state.keys()
    assert state["progress"]["step"] == 20


def test_resume_reaches_exactly_the_uninterrupted_weights(tmp_path):
    full = train(tiny_config(tmp_path, name="full", steps=20))
    stopped = train(tiny_config(tmp_path, name="split", steps=20, stop_at=10))
    assert json.loads((stopped / "summary.json").read_text())["status"] == "stopped"
    resumed = train(replace(tiny_config(tmp_path, name="split", steps=20), resume=True))
    assert_same_weights(final_weights(full), final_weights(resumed))
    a, b = (json.loads((r / "summary.json").read_text()) for r in (full, resumed))
    assert a["train_loss"] == b["train_loss"] and a["final"] == b["final"]
    steps = [
        r["step"]
        for r in map(json.loads, (resumed / "metrics.jsonl").read_text().splitlines())
        if r["split"] == "train"
    ]
    assert steps == [5, 10, 15, 20]


def test_resume_refuses_a_changed_config(tmp_path):
    train(tiny_config(tmp_path, name="run", steps=10, stop_at=5))
    changed = tiny_config(tmp_path, name="run", steps=10, optim={"lr": 5e-3})
    with pytest.raises(ConfigError, match="optim.lr"):
        train(replace(changed, resume=True))
    with pytest.raises(FileExistsError, match="--resume"):
        train(tiny_config(tmp_path, name="run", steps=10))


class _InterruptAt(TaskWrapper):
    """Wraps a task; raises KeyboardInterrupt when the training batch of `step` is requested."""

    def __init__(self, task, step):
        super().__init__(task)
        self.step = step

    def batch(self, split, batch_size, step, rank=0, world_size=1):
        if split == "train" and step == self.step:
            raise KeyboardInterrupt
        return self.task.batch(split, batch_size, step, rank, world_size)


def test_an_interrupt_inside_a_step_resumes_from_the_last_checkpoint(tmp_path, monkeypatch):
    import hyla.train.session as session

    full = train(tiny_config(tmp_path, name="full", steps=20))
    build = session.build_task
    monkeypatch.setattr(session, "build_task", lambda cfg, device: _InterruptAt(build(cfg, device), 13))
    with pytest.raises(KeyboardInterrupt):
        train(tiny_config(tmp_path, name="killed", steps=20))
    killed = tmp_path / "killed"
    summary = json.loads((killed / "summary.json").read_text())
    assert summary["status"] == "interrupted" and summary["checkpoint_step"] == 10
    assert ckpt.load(killed / "checkpoints" / "latest.pt")["progress"]["step"] == 10
    monkeypatch.setattr(session, "build_task", build)
    resumed = train(replace(tiny_config(tmp_path, name="killed", steps=20), resume=True))
    assert_same_weights(final_weights(full), final_weights(resumed))


def test_a_crash_while_writing_keeps_the_previous_checkpoints(tmp_path, monkeypatch):
    latest, previous = tmp_path / "checkpoints" / "latest.pt", tmp_path / "checkpoints" / "previous.pt"
    ckpt.save({"step": 1, "weights": torch.ones(3)}, latest, previous)
    ckpt.save({"step": 2, "weights": torch.full((3,), 2.0)}, latest, previous)
    written = []

    def torn_save(obj, f):
        written.append(Path(f.name).name)
        f.write(b"PK\x03\x04 half a checkpoint")
        raise OSError("disk full")

    monkeypatch.setattr(torch, "save", torn_save)
    with pytest.raises(OSError, match="disk full"):
        ckpt.save({"step": 3, "weights": torch.zeros(3)}, latest, previous)
    monkeypatch.undo()
    assert written and written[0].startswith(".latest.pt.tmp-")  # the save really wrote a temporary file
    assert ckpt.load(latest)["step"] == 2 and ckpt.load(previous)["step"] == 1
    assert sorted(p.name for p in latest.parent.iterdir()) == ["latest.pt", "previous.pt"]  # temporary file removed


class _NanFrom(_InterruptAt):
    """Wraps a task; training inputs are NaN from `step` on."""

    def batch(self, split, batch_size, step, rank=0, world_size=1):
        batch = self.task.batch(split, batch_size, step, rank, world_size)
        if split == "train" and step >= self.step:
            batch.x.fill_(float("nan"))
        return batch


def test_non_finite_loss_stops_and_keeps_the_last_good_checkpoint(tmp_path, monkeypatch):
    import hyla.train.session as session

    build = session.build_task
    monkeypatch.setattr(session, "build_task", lambda cfg, device: _NanFrom(build(cfg, device), 7))
    with pytest.raises(NonFiniteLossError, match="non-finite") as exc:
        train(tiny_config(tmp_path, steps=40))
    assert "last good checkpoint (step 5)" in str(exc.value)
    summary = json.loads((tmp_path / "run" / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["step"] == 10 and "lower --optim.lr" in summary["message"]
    state = ckpt.load(tmp_path / "run" / "checkpoints" / "latest.pt")
    assert state["progress"]["step"] == 5 and all(torch.isfinite(v).all() for v in state["model"].values())


def test_load_run_and_evaluate(tmp_path):
    run = train(tiny_config(tmp_path, steps=10))
    cfg, model, task = load_run(run)
    assert not model.training and next(model.parameters()).device.type == "cpu"
    assert cfg.model.mixer == "hyla"
    result = evaluate(model, task, "ood", num_samples=50, batch_size=16)
    assert {"loss", "r2", "mse"} <= result.keys()
    summary = json.loads((run / "summary.json").read_text())
    again = evaluate(model, task, "ood", num_samples=64, batch_size=32)
    assert again["r2"] == pytest.approx(summary["final"]["ood"]["r2"], rel=1e-9)  # same samples, same result


def test_evaluate_reports_perplexity_for_nll():
    class NllTask:
        def batch(self, split, batch_size, step, rank=0, world_size=1):
            from hyla.tasks.base import Batch

            return Batch(torch.zeros(batch_size, 2, 1), torch.zeros(batch_size), {})

        def loss(self, pred, batch):
            return pred.mean()

        def metrics(self, pred, batch):
            return {"nll": torch.full((pred.shape[0],), 2.0)}

    model = torch.nn.Linear(1, 1)
    result = evaluate(model, NllTask(), "valid", num_samples=10, batch_size=4)
    assert result["nll"] == pytest.approx(2.0) and result["ppl"] == pytest.approx(math.exp(2.0))


def test_compile_failure_falls_back_to_eager_with_a_warning(tmp_path, monkeypatch):
    def broken_compile(module, **kwargs):
        def fail(*args, **kw):
            raise RuntimeError("no C++ compiler")

        return fail

    monkeypatch.setattr(torch, "compile", broken_compile)
    with pytest.warns(RuntimeWarning, match="torch.compile failed.*no C\\+\\+ compiler"):
        run = train(tiny_config(tmp_path, name="compiled", steps=10, step="compiled"))
    eager = train(tiny_config(tmp_path, name="eager", steps=10))
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"
    assert_same_weights(final_weights(run), final_weights(eager))


@pytest.mark.slow
@pytest.mark.parametrize("mixer", ["softmax", "hyla"])
def test_compiled_training_compiles(tmp_path, mixer):
    import warnings

    with warnings.catch_warnings():
        warnings.simplefilter("error", RuntimeWarning)  # a fallback to eager would warn
        run = train(tiny_config(tmp_path, name=mixer, mixer=mixer, steps=6, step="compiled"))
    assert json.loads((run / "summary.json").read_text())["status"] == "completed"


def _trainer(seed: int) -> Trainer:
    cfg = replace(tiny_config(None), seed=seed)
    task = build_task(cfg)
    cfg = replace(cfg, model=resolve_model(cfg.model, task))
    return Trainer(cfg, task, DistContext(0, 1, torch.device("cpu")))


def test_one_gradient_step_of_two_trainers_equals_their_solo_updates():
    """`gradient_step` steps several trainers with one backward of their summed losses (as a pack
    does); the two computations share no tensor, so each trainer's loss, predictions and weights are
    bit for bit those of its solo updates (`EagerUpdate`, which calls `gradient_step` with one)."""
    together, alone = [_trainer(0), _trainer(1)], [_trainer(0), _trainer(1)]
    solo_updates = [EagerUpdate(trainer) for trainer in alone]
    for step in range(3):
        batches = [trainer.batch(step) for trainer in together]

        def forward_losses(step=step, batches=batches):
            preds = []
            for trainer, batch in zip(together, batches):
                trainer.dropout_masks(step, batch.x.shape[1], drawn_in_forward=True)  # seeded as in its solo step
                preds.append(trainer.module(batch.x))
            return [trainer.task.loss(pred, batch) for trainer, pred, batch in zip(together, preds, batches)], preds

        losses, preds = gradient_step(together, forward_losses)
        for trainer, update, loss, pred in zip(alone, solo_updates, losses, preds):
            [(solo_loss, solo_pred, _)] = update([trainer], [step])
            assert torch.equal(loss, solo_loss) and torch.equal(pred, solo_pred)
    for a, b in zip(together, alone):
        assert_same_weights(a.model.state_dict(), b.model.state_dict())


def test_an_offset_reads_batches_further_along_the_stream():
    class StepTask:
        steps = []

        def batch(self, split, batch_size, step, rank=0, world_size=1):
            from hyla.tasks.base import Batch

            self.steps.append(step)
            return Batch(torch.full((batch_size, 2, 1), float(step)), torch.zeros(batch_size), {})

        def loss(self, pred, batch):
            return pred.mean()

        def metrics(self, pred, batch):
            return {"step": batch.x[:, 0, 0]}

    model, task = torch.nn.Identity(), StepTask()
    model.register_parameter("p", torch.nn.Parameter(torch.zeros(1)))  # (evaluate reads the device from one)
    assert hyla.evaluate(model, task, "valid", num_samples=10, batch_size=4)["step"] == pytest.approx(0.8)
    assert hyla.evaluate(model, task, "valid", num_samples=10, batch_size=4, offset=12)["step"] == pytest.approx(3.8)
    assert task.steps == [0, 1, 2, 3, 4, 5]
    assert fresh_offset(16_000, 1024) == 16_384 and fresh_offset(2048, 1024) == 2048
    with pytest.raises(ValueError, match="multiple of the batch size 4"):
        hyla.evaluate(model, task, "valid", num_samples=10, batch_size=4, offset=6)
