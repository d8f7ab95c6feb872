"""Whole-step CUDA graphs (hyla.train.graphed): a graphed step is the eager step.

On a CPU, a stand-in for the CUDA graph (`StaticReplay`: capturing runs nothing, each replay runs
the step again and writes its outputs into the same tensors, as a replay does) exercises everything
but the capture itself: the static input buffers, the learning rates as tensors, the warm-up that
is undone, the copies of the outputs, recapture when a pack's members change, and the fallback
when capturing fails. Such runs equal eager runs bit for bit. The GPU tests at the end compare the
real graphs with eager steps at the paper's SRAVEN and fuzzy-logic shapes, dropout on.
"""

import json
import warnings
from contextlib import nullcontext
from dataclasses import replace

import pytest
import torch
from helpers_train import tiny_config
from test_exact_resume import assert_same_run

from hyla.train import graphed, train
from hyla.train.configs import build_task, resolve_model
from hyla.train.distributed import DistContext
from hyla.train.packed import train_packed
from hyla.train.presets import get_preset
from hyla.train.step import EagerUpdate, Trainer

CPU = DistContext(0, 1, torch.device("cpu"))


class StaticReplay:
    """CudaGraphs' stand-in on a CPU: no side stream; `capture` records the step without running
    it, and each replay runs it again and copies its outputs into the first replay's tensors."""

    def __init__(self, device=None):
        self.captures = 0

    def side_stream(self):
        return nullcontext()

    def capture(self, step):
        self.captures += 1
        outputs = []

        def replay():
            fresh = step()
            if not outputs:
                outputs.extend(fresh)
            else:
                for kept, new in zip(outputs, fresh):
                    kept.copy_(new)
            return tuple(outputs)

        return replay


class FailingCapture(StaticReplay):
    def capture(self, step):
        raise RuntimeError("operation not permitted when stream is capturing")


@pytest.fixture
def stand_in_graphs(monkeypatch):
    """train.step graphed replays through StaticReplay on the CPU; returns the backends made."""
    made = []

    def backend(device):
        made.append(StaticReplay())
        return made[-1]

    monkeypatch.setattr(graphed, "wanted", lambda device, world_size=1: True)
    monkeypatch.setattr(graphed, "CudaGraphs", backend)
    return made


def trainer(cfg) -> Trainer:
    task = build_task(cfg)
    cfg = replace(cfg, model=resolve_model(cfg.model, task))
    return Trainer(cfg, task, CPU)


def numerics(run) -> dict:
    return json.loads((run / "env.json").read_text())["numerics"]


@pytest.mark.parametrize("dropout", [0.1, 0.0])
def test_masks_drawn_ahead_give_the_losses_and_gradients_of_masks_drawn_in_the_forward(dropout):
    cfg = tiny_config(None, steps=5)
    cfg = replace(cfg, model=replace(cfg.model, attention_dropout=dropout))
    inside, ahead = trainer(cfg), trainer(cfg)
    batch = inside.batch(2)
    assert inside.dropout_masks(2, batch.x.shape[1], drawn_in_forward=True) is None  # the forward draws them
    losses = [inside.task.loss(inside.model(batch.x), batch)]
    masks = ahead.dropout_masks(2, batch.x.shape[1])
    assert (masks is None) == (dropout == 0.0)
    losses.append(ahead.task.loss(ahead.model(batch.x, dropout_masks=masks), batch))
    for loss in losses:
        loss.backward()
    assert torch.equal(losses[0], losses[1])
    for a, b in zip(inside.model.parameters(), ahead.model.parameters()):
        assert torch.equal(a.grad, b.grad)
    if dropout:  # the masks matter: another step's masks give another loss
        other = ahead.dropout_masks(3, batch.x.shape[1])
        assert not torch.equal(ahead.task.loss(ahead.model(batch.x, dropout_masks=other), batch), losses[0])


def test_graphed_steps_without_capture_equal_eager_steps(stand_in_graphs):
    cfg = tiny_config(None, steps=12)
    eager, graphs = trainer(cfg), trainer(cfg)
    eager_update = EagerUpdate(eager)
    graphed_update = graphed.replayed(EagerUpdate(graphs, masks_ahead=True), [graphs], [0])
    kept = []
    for n in range(12):
        [(loss_e, pred_e, _)] = eager_update([eager], [n])
        [(loss_g, pred_g, _)] = graphed_update([graphs], [n])
        for t in (eager, graphs):
            t.scheduler.step()
        assert torch.equal(loss_e, loss_g) and torch.equal(pred_e, pred_g), n
        for a, b in zip(eager.model.parameters(), graphs.model.parameters()):
            assert torch.equal(a, b) and torch.equal(a.grad, b.grad), n
        assert graphs.optimizer.param_groups[0]["lr"] == eager.optimizer.param_groups[0]["lr"]
        kept.append((loss_g, loss_g.clone()))
    assert [backend.captures for backend in stand_in_graphs] == [1]
    assert all(torch.equal(loss, copy) for loss, copy in kept)  # later replays did not overwrite them
    assert graphs.optimizer.state_dict()["param_groups"] == eager.optimizer.state_dict()["param_groups"]
    for a, b in zip(eager.optimizer.state.values(), graphs.optimizer.state.values()):
        assert all(torch.equal(a[key], b[key]) for key in a)


def test_a_graphed_run_equals_the_eager_run_and_resumes_exactly(tmp_path, stand_in_graphs):
    eager = train(tiny_config(tmp_path, name="eager"))
    graphs = train(tiny_config(tmp_path, name="graphs", step="graphed"))
    assert numerics(graphs) == {**numerics(eager), "cuda_graph": True}
    assert_same_run(eager, graphs)
    train(tiny_config(tmp_path, name="resumed", step="graphed", stop_at=8))
    resumed = train(replace(tiny_config(tmp_path, name="resumed", step="graphed"), resume=True))
    assert_same_run(eager, resumed)
    assert len(stand_in_graphs) == 3  # one capture per session


def test_a_graphed_pack_equals_the_eager_pack_and_captures_again_when_a_member_leaves(tmp_path, stand_in_graphs):
    def members(root, **settings):
        return [
            tiny_config(root, name="a", **settings),
            replace(tiny_config(root, name="b", **settings), seed=4),
            replace(tiny_config(root, name="c", steps=12, optim={"lr": 3e-3}, **settings), seed=5),
        ]

    eager = train_packed(members(tmp_path / "eager"))
    graphs = train_packed(members(tmp_path / "graphs", step="graphed"))
    for a, b in zip(eager, graphs):
        assert_same_run(a, b)
        assert numerics(b) == {**numerics(a), "cuda_graph": True}
    assert sum(backend.captures for backend in stand_in_graphs) == 2  # 3 members, then 2


def test_graphed_without_cuda_warns_once_and_trains_eagerly(tmp_path):
    eager = train(tiny_config(tmp_path, name="eager"))
    with pytest.warns(RuntimeWarning) as caught:
        run = train(tiny_config(tmp_path, name="asked", step="graphed"))
    messages = [str(w.message) for w in caught if "graphed" in str(w.message)]
    assert messages == ["train.step graphed needs a CUDA device; training eagerly on cpu"]
    assert numerics(run) == {**numerics(eager), "cuda_graph": False}
    assert_same_run(eager, run)


def test_eager_steps_record_no_cuda_graphs(tmp_path):
    with warnings.catch_warnings():
        warnings.simplefilter("error")
        run = train(tiny_config(tmp_path, step="eager"))
    assert "cuda_graph" not in numerics(run)


def test_a_failing_capture_warns_once_and_the_run_goes_on_eagerly(tmp_path, monkeypatch):
    monkeypatch.setattr(graphed, "wanted", lambda device, world_size=1: True)
    monkeypatch.setattr(graphed, "CudaGraphs", FailingCapture)
    eager = train(tiny_config(tmp_path, name="eager"))
    with pytest.warns(RuntimeWarning) as caught:
        run = train(tiny_config(tmp_path, name="failed", step="graphed"))
    messages = [str(w.message) for w in caught if "capture" in str(w.message)]
    assert messages == [
        "CUDA graph capture failed (RuntimeError: operation not permitted when stream is capturing); training eagerly"
    ]
    assert numerics(run)["cuda_graph"] is False
    assert_same_run(eager, run)  # the warm-up steps before the failed capture were undone


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(step="graphed", precision="bf16"), "train.step='graphed' covers fp32 and tf32 only"),
        (dict(step="always"), "train.step='always' is not valid; valid choices: eager, compiled, graphed"),
        (dict(dropout_masks="gpu"), "train.dropout_masks"),
    ],
)
def test_settings_cuda_graphs_cannot_honour_are_refused(tmp_path, settings, message):
    from hyla.train.configs import ConfigError

    with pytest.raises(ConfigError, match=message):
        train(tiny_config(tmp_path, **settings))


# ----------------------------------------------------------------------------- on a GPU

cuda = pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
GPU = DistContext(0, 1, torch.device("cuda")) if torch.cuda.is_available() else None
STEPS = 6  # replays of the graph captured (after its warm-up) before the first


def paper_trainer(preset: str, mixer: str, **train_settings) -> Trainer:
    cfg = get_preset(preset)
    cfg = replace(cfg, model=replace(cfg.model, mixer=mixer), train=replace(cfg.train, device="cuda", **train_settings))
    task = build_task(cfg, GPU.device)
    cfg = replace(cfg, model=resolve_model(cfg.model, task))
    assert cfg.model.attention_dropout > 0
    return Trainer(cfg, task, GPU)


def relative(a: torch.Tensor, b: torch.Tensor) -> float:
    return float((a.double() - b.double()).norm() / b.double().norm().clamp_min(1e-30))


@cuda
@pytest.mark.parametrize("preset", ["raven_3x3_4features", "logic_4var_2term"])
@pytest.mark.parametrize("mixer", ["hyla", "softmax"])
def test_graphed_steps_equal_eager_steps_on_cuda(preset, mixer):
    """Loss, gradients and weights of graphed steps against eager ones, from the same weights, batches
    and masks, to 1e-5 relative (the gradients as one vector: a parameter the loss does not depend on
    has a gradient of rounding noise). Under softmax the key bias is such a parameter (softmax is
    invariant to it): AdamW scales its noise up to steps of the learning rate's size, so its values
    are left out of the weights' comparison."""
    eager, graphs = paper_trainer(preset, mixer), paper_trainer(preset, mixer, step="graphed")
    eager_update = EagerUpdate(eager)
    graphed_update = graphed.replayed(EagerUpdate(graphs, masks_ahead=True), [graphs], [0])
    assert graphed_update.kind["cuda_graph"], "the capture failed"
    compared = [
        (name, a, b)
        for (name, a), b in zip(eager.model.named_parameters(), graphs.model.parameters())
        if not (mixer == "softmax" and name.endswith("attention.key.bias"))
    ]
    for n in range(STEPS):
        [(loss_e, _, _)] = eager_update([eager], [n])
        [(loss_g, _, _)] = graphed_update([graphs], [n])
        for t in (eager, graphs):
            t.scheduler.step()
        assert relative(loss_g, loss_e) < 1e-5, n
        grads_e, grads_g = (torch.cat([p.grad.flatten() for p in t.model.parameters()]) for t in (eager, graphs))
        assert relative(grads_g, grads_e) < 1e-5, n
        for name, a, b in compared:
            assert relative(b, a) < 1e-5, (n, name)


@cuda
def test_a_graphed_sraven_pack_equals_the_eager_pack_on_cuda(tmp_path):
    def members(root, **settings):
        cfg = get_preset("raven_3x3_4features")
        cfg = replace(
            cfg,
            out_dir=str(root),
            train=replace(cfg.train, steps=30, device="cuda", **settings),
            eval=replace(cfg.eval, every=0, final_samples=256),
            log=replace(cfg.log, every=5),
        )
        return [replace(cfg, name=f"s{seed}", seed=seed) for seed in (0, 1)]

    eager = train_packed(members(tmp_path / "eager"))
    graphs = train_packed(members(tmp_path / "graphs", step="graphed"))
    for a, b in zip(eager, graphs):
        assert numerics(b)["cuda_graph"] is True
        losses = [
            [
                r["loss"]
                for r in map(json.loads, (run / "metrics.jsonl").read_text().splitlines())
                if r["split"] == "train"
            ]
            for run in (a, b)
        ]
        assert losses[0] == pytest.approx(losses[1], rel=1e-4)
