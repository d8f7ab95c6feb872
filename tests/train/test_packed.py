"""Packed training: every member follows its solo run (to float32 rounding), a stopped or crashed
pack resumes exactly, and a member's folder is an ordinary run folder.

The pack: three members with different seeds (so different data, task splits and dropout masks),
one with another learning rate, checkpoint interval and fewer steps (it finishes first and leaves
the pack), dropout on.
"""

import json
import signal
from dataclasses import replace

import pytest
import torch
from helpers_train import TINY_RUN, tiny_config
from test_exact_resume import (
    CrashAt,
    SignalAt,
    assert_same_run,
    stop_with,
    without_timing,
)

from hyla.cli.sweep import run_configs
from hyla.nn.transformer import Transformer
from hyla.runs import records
from hyla.runs.launch import run_packed_sweep
from hyla.runs.result_tables import aggregate, find_runs
from hyla.runs.sweep import SweepSpec, run_status
from hyla.train import NonFiniteLossError, RunDir, load_run, train
from hyla.train import checkpoint as ckpt
from hyla.train.configs import ConfigError, build_task, resolve_model
from hyla.train.packed import plan_packs, train_packed

# A member against its solo run: float32 rounding of batched vs solo kernels, over 20 steps. Weights
# agree to RTOL / ATOL. Gradients (hence Adam's moments and the logged gradient norm) are less well
# conditioned: early in training the RMS-head normalization of small scores amplifies rounding
# (up to 3e-4 relative seen with the paper initialization): they are compared to GRAD_RTOL.
RTOL, ATOL, GRAD_RTOL = 1e-4, 1e-5, 1e-3


def member_configs(tmp_path, **train_overrides):
    def member(name, seed, **overrides):
        settings = {"steps": 20, "checkpoint": {"every": 7}, **overrides, **train_overrides}
        return replace(tiny_config(tmp_path, name=name, **settings), seed=seed)

    return [member("a", 0), member("b", 1), member("c", 2, optim={"lr": 3e-3}, steps=15, checkpoint={"every": 5})]


def resumed(cfgs):
    return [replace(cfg, resume=True) for cfg in cfgs]


@pytest.fixture(scope="module")
def solo(tmp_path_factory):
    return [train(cfg) for cfg in member_configs(tmp_path_factory.mktemp("solo"))]


@pytest.fixture(scope="module")
def packed(tmp_path_factory):
    return train_packed(member_configs(tmp_path_factory.mktemp("packed")))


def assert_close_run(a, b) -> None:
    """Weights, optimizer state, metrics records and summary equal to float32 rounding (timing aside)."""
    state_a, state_b = (ckpt.load(r / "checkpoints" / "latest.pt") for r in (a, b))
    assert state_a["progress"]["step"] == state_b["progress"]["step"]
    for key in ("model", "scheduler"):
        torch.testing.assert_close(state_a[key], state_b[key], rtol=RTOL, atol=ATOL, msg=key)
    torch.testing.assert_close(state_a["optimizer"], state_b["optimizer"], rtol=GRAD_RTOL, atol=10 * ATOL)
    rows_a, rows_b = (
        [without_timing(json.loads(line)) for line in (r / "metrics.jsonl").read_text().splitlines()] for r in (a, b)
    )
    assert_close_values(rows_a, rows_b, "metrics.jsonl")
    summary_a, summary_b = (without_timing(json.loads((r / "summary.json").read_text())) for r in (a, b))
    assert summary_a["status"] == "completed"
    assert_close_values(summary_a, summary_b, "summary")


def assert_close_values(x, y, where: str) -> None:
    """Equal structure, strings and integers; floats equal to RTOL / ATOL."""
    if isinstance(x, dict):
        assert isinstance(y, dict) and x.keys() == y.keys(), where
        for key in x:
            assert_close_values(x[key], y[key], f"{where}.{key}")
    elif isinstance(x, list):
        assert isinstance(y, list) and len(x) == len(y), where
        for i, (u, v) in enumerate(zip(x, y)):
            assert_close_values(u, v, f"{where}[{i}]")
    elif isinstance(x, float):
        rtol = GRAD_RTOL if where.endswith("grad_norm") else RTOL
        assert y == pytest.approx(x, rel=rtol, abs=ATOL), where
    else:
        assert x == y, where


def test_each_member_follows_its_solo_run(solo, packed):
    for alone, member in zip(solo, packed):
        assert_close_run(alone, member)
    files = {p.relative_to(solo[0]) for p in solo[0].rglob("*") if p.is_file()}
    assert files == {p.relative_to(packed[0]) for p in packed[0].rglob("*") if p.is_file()}
    assert json.loads((packed[0] / "env.json").read_text())["numerics"]["packed"] is True


def test_a_pack_of_mixture_of_experts_models_follows_its_solo_runs(tmp_path):
    """Solo runs route each token to its experts (the routed form); under vmap the pack computes the
    dense form (static shapes): the same function, so the members follow their solo runs."""

    def with_experts(cfg):
        return replace(cfg, model=replace(cfg.model, num_experts=3, experts_top_k=2))

    solo = [train(with_experts(cfg)) for cfg in member_configs(tmp_path / "solo", steps=8)[:2]]
    packed = train_packed([with_experts(cfg) for cfg in member_configs(tmp_path / "packed", steps=8)[:2]])
    for alone, member in zip(solo, packed):
        assert_close_run(alone, member)


def test_a_pack_of_models_without_dropout_follows_its_solo_runs(tmp_path):
    def without_dropout(cfg):
        return replace(cfg, model=replace(cfg.model, attention_dropout=0.0))

    solo = [train(without_dropout(cfg)) for cfg in member_configs(tmp_path / "solo", steps=8)[:2]]
    packed = train_packed([without_dropout(cfg) for cfg in member_configs(tmp_path / "packed", steps=8)[:2]])
    for alone, member in zip(solo, packed):
        assert_close_run(alone, member)


def test_members_differ_from_each_other(packed):
    a, b = (ckpt.load(r / "checkpoints" / "latest.pt")["model"] for r in packed[:2])
    assert not torch.allclose(a["embed.weight"], b["embed.weight"])


@pytest.mark.parametrize("how, step", [("sigterm", 9), ("crash", 12)])
def test_a_stopped_pack_resumes_exactly(tmp_path, monkeypatch, packed, how, step):
    """SIGTERM: every member checkpoints after the step; a crash: they continue from the pack's last
    checkpoint (step 10: member c's is due, so all checkpoint). Either way the resumed pack ends
    bit-identical to the uninterrupted one."""
    stopper = (
        (lambda task: SignalAt(task, "train", step, signal.SIGTERM))
        if how == "sigterm"
        else (lambda task: CrashAt(task, "train", step))
    )
    restore = stop_with(monkeypatch, lambda task: stopper(task) if task.seed == 1 else task)
    cfgs = member_configs(tmp_path)
    with pytest.raises(KeyboardInterrupt if how == "sigterm" else RuntimeError):
        train_packed(cfgs)
    restore()
    summaries = [json.loads((tmp_path / cfg.name / "summary.json").read_text()) for cfg in cfgs]
    assert {s["status"] for s in summaries} == {"interrupted" if how == "sigterm" else "failed"}
    assert {s["checkpoint_step"] for s in summaries} == {step + 1 if how == "sigterm" else 10}
    for member, reference in zip(train_packed(resumed(cfgs)), packed):
        assert_same_run(reference, member)


def test_stop_at_then_a_packed_resume_is_exact(tmp_path, packed):
    cfgs = member_configs(tmp_path, stop_at=10)
    train_packed(cfgs)
    continued = [replace(cfg, train=replace(cfg.train, stop_at=0)) for cfg in cfgs]
    for member, reference in zip(train_packed(resumed(continued)), packed):
        assert_same_run(reference, member)


class NanFrom(SignalAt):
    """Wraps a task: its training inputs are NaN from batch `step` on."""

    def batch(self, split, batch_size, step, rank=0, world_size=1):
        batch = self.task.batch(split, batch_size, step, rank, world_size)
        if split == self.split and step >= self.step:
            batch.x.fill_(float("nan"))
        return batch


def test_a_diverged_member_leaves_and_the_others_finish(tmp_path, monkeypatch, solo):
    restore = stop_with(monkeypatch, lambda task: NanFrom(task, "train", 7) if task.seed == 1 else task)
    with pytest.raises(NonFiniteLossError, match="last good checkpoint \\(step 7\\)"):
        train_packed(member_configs(tmp_path))
    restore()
    summary = json.loads((tmp_path / "b" / "summary.json").read_text())
    assert summary["status"] == "diverged" and summary["step"] == 10
    for alone, name in ((solo[0], "a"), (solo[2], "c")):
        assert_close_run(alone, tmp_path / name)


def test_a_member_folder_resumes_alone(tmp_path, solo):
    cfgs = member_configs(tmp_path, stop_at=10)
    runs = train_packed(cfgs)
    assert {json.loads((r / "summary.json").read_text())["status"] for r in runs} == {"stopped"}
    with pytest.warns(RuntimeWarning, match="packed None \\(was True\\)"):
        alone = train(replace(cfgs[0], train=replace(cfgs[0].train, stop_at=0), resume=True))
    assert_close_run(solo[0], alone)


def test_results_and_load_run_read_member_folders(packed):
    cfg, model, _ = load_run(packed[2])
    assert cfg.name == "c" and torch.equal(
        model.embed.weight, ckpt.load(packed[2] / "checkpoints" / "latest.pt")["model"]["embed.weight"]
    )
    runs = find_runs([packed[0].parent])
    fields, rows = aggregate(runs)
    assert len(runs) == 3 and "optim.lr" in fields
    assert sorted(row["n"] for row in rows) == [1, 2]  # a and b differ by seed only


def test_a_completed_pack_is_skipped(packed):
    before = {p: p.read_bytes() for r in packed for p in r.rglob("*") if p.is_file()}
    cfgs = [replace(RunDir(r).read_config(), resume=True) for r in packed]
    assert train_packed(cfgs) == packed
    assert {p: p.read_bytes() for r in packed for p in r.rglob("*") if p.is_file()} == before


def test_incompatible_members_are_refused(tmp_path):
    a, b, _ = member_configs(tmp_path)
    wider = replace(b, model=replace(b.model, dim=32))
    with pytest.raises(ConfigError, match="cannot share a pack"):
        train_packed([a, wider])
    with pytest.raises(ConfigError, match="distinct names"):
        train_packed([a, replace(b, name="a")])
    with pytest.raises(ConfigError, match="train.step eager"):
        train_packed([a, replace(b, train=replace(b.train, step="compiled"))])
    assert not any(tmp_path.iterdir())


def test_plan_packs_groups_compatible_runs_and_stopped_packs(tmp_path):
    a, b, c = member_configs(tmp_path)
    wide = replace(c, name="wide", model=replace(c.model, dim=32))
    plan = plan_packs([a, wide, b, c], 2)
    assert [[cfg.name for cfg in pack] for pack in plan] == [["a", "b"], ["c"], ["wide"]]
    train_packed([replace(a, train=replace(a.train, stop_at=7))])
    plan = plan_packs(resumed([a, b, c]), 3)  # a resumes from step 7: not with b and c, which start
    assert [[cfg.name for cfg in pack] for pack in plan] == [["a"], ["b", "c"]]


def test_sweep_packs_compatible_runs_and_two_processes_train_the_same(tmp_path, capsys):
    """`--pack 2` plans packs of compatible runs and trains them; with `--parallel 2` (two processes,
    each training packs) the same runs end with the same weights."""
    tiny = {**TINY_RUN, "train.steps": 4, "optim.warmup_steps": 1, "eval.samples": 64, "log.every": 2}
    spec = SweepSpec(
        name="tiny",
        preset="logic_cpu",
        out_dir=str(tmp_path / "runs"),
        seeds=[0, 1, 2],
        overrides=tiny,
        grid=[{"model.mixer": ["softmax", "hyla"]}],
        results=str(tmp_path / "results"),
    )
    codes = run_packed_sweep(spec, run_configs(spec, spec.local_threads()), 2)
    assert codes == dict.fromkeys((run.name for run in spec.runs()), 0)
    packs = [line for line in capsys.readouterr().out.splitlines() if line.startswith("pack: ")]
    assert packs == [
        "pack: mixer-softmax__s0, mixer-softmax__s1",
        "pack: mixer-softmax__s2",
        "pack: mixer-hyla__s0, mixer-hyla__s1",
        "pack: mixer-hyla__s2",
    ]
    assert all(run_status(tmp_path / "runs" / name) == "completed" for name in codes)
    assert not list((tmp_path / "runs").glob("*.running"))
    assert run_packed_sweep(spec, run_configs(spec, spec.local_threads()), 2) == {}  # nothing left to run
    assert [path.name for path in records.find(tmp_path / "results")] == sorted(f"{n}.run.json" for n in codes)

    # the two full packs again, two processes at once
    parallel = replace(spec, out_dir=str(tmp_path / "parallel"), seeds=[0, 1], parallel=2, results=None)
    parallel_codes = run_packed_sweep(parallel, run_configs(parallel, parallel.local_threads()), 2)
    assert parallel_codes == dict.fromkeys((run.name for run in parallel.runs()), 0) and len(parallel_codes) == 4
    out = capsys.readouterr().out
    assert "4 to run in packs of at most 2, 2 at a time" in out and out.count("\npack: ") == 2
    for name in parallel_codes:
        a, b = (ckpt.load(tmp_path / out / name / "checkpoints" / "latest.pt")["model"] for out in ("runs", "parallel"))
        assert all(torch.equal(a[k], b[k]) for k in a), name


def test_drawn_dropout_masks_are_the_ones_a_training_forward_draws(tmp_path):
    cfg = member_configs(tmp_path)[0]
    model = Transformer(resolve_model(cfg.model, build_task(cfg))).train()
    x = torch.randn(4, model.cfg.seq_len, model.cfg.input_dim)  # [B, T, input_dim]
    torch.manual_seed(5)
    drawn = model(x)
    torch.manual_seed(5)
    masks = model.draw_dropout_masks(x.shape[1])
    assert [tuple(m.shape) for m in masks] == [(8, 8), (1, 8)]  # the last layer computes the read-out only
    assert torch.equal(model(x, dropout_masks=masks), drawn)
