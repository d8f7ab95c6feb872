"""Learning-rate schedule (the authors' optax schedule) and weight-decay grouping."""

import math

import pytest
import torch
from helpers_train import tiny_model_config

from hyla.nn.transformer import Transformer
from hyla.train import optim
from hyla.train.configs import OptimConfig
from hyla.train.optim import fused_adamw_step, lr_multiplier, make_optimizer, parameter_groups


def optax_warmup_cosine_decay(step, init_value, peak_value, warmup_steps, decay_steps, end_value):
    """optax.warmup_cosine_decay_schedule as its documentation defines it, written out here
    independently of hyla: `join_schedules([linear_schedule(init_value, peak_value, warmup_steps),
    cosine_decay_schedule(peak_value, decay_steps - warmup_steps, alpha=end_value / peak_value)],
    boundaries=[warmup_steps])`; join_schedules hands step - boundary to the later schedule;
    cosine_decay_schedule(init, n, alpha)(t) = init * ((1 - alpha) * 0.5 * (1 + cos(pi * min(t, n) / n)) + alpha)."""
    if step < warmup_steps:
        return init_value + (peak_value - init_value) * step / warmup_steps
    alpha = end_value / peak_value
    n = decay_steps - warmup_steps
    t = min(step - warmup_steps, n)
    return peak_value * ((1 - alpha) * 0.5 * (1 + math.cos(math.pi * t / n)) + alpha)


def authors_schedule(steps, warmup, lr=1.0):
    """The authors' run script: decay_steps = train_steps - warmup_steps, end 0.1 * lr."""
    return [optax_warmup_cosine_decay(s, 0.0, lr, warmup, steps - warmup, 0.1 * lr) for s in range(steps + 1)]


@pytest.mark.parametrize("steps, warmup", [(1000, 100), (50_000, 100), (156_250, 1000), (39_000, 1000), (3000, 100)])
def test_schedule_is_the_authors_optax_schedule(steps, warmup):
    expected = authors_schedule(steps, warmup)
    stride = max(1, steps // 2000)  # every step of the short schedules, a dense grid of the long ones
    for step in list(range(0, steps + 1, stride)) + [warmup - 1, warmup, steps - warmup - 1, steps - warmup, steps]:
        assert lr_multiplier(step, steps, warmup, 0.1) == pytest.approx(expected[step], abs=1e-12), step


def test_schedule_landmarks_at_1000_steps_with_warmup_100():
    values = [lr_multiplier(s, 1000, 100, 0.1) for s in range(1001)]
    assert values[0] == 0.0 and values[50] == pytest.approx(0.5) and values[100] == pytest.approx(1.0)
    assert values[500] == pytest.approx(0.55)  # the cosine midpoint: (100 + 900) / 2
    assert all(v == pytest.approx(0.1) for v in values[900:])  # flat for the last warmup_steps updates
    assert values[899] > 0.1
    assert all(b <= a + 1e-12 for a, b in zip(values[100:], values[101:]))  # monotone decay
    assert max(values) == pytest.approx(1.0)


def test_schedule_matches_optax_itself():
    optax = pytest.importorskip("optax")
    for steps, warmup in [(1000, 100), (3000, 100), (20_000, 1000)]:
        schedule = optax.warmup_cosine_decay_schedule(
            init_value=0.0, peak_value=1e-3, warmup_steps=warmup, decay_steps=steps - warmup, end_value=1e-4
        )
        for step in range(0, steps + 1, 7):
            assert 1e-3 * lr_multiplier(step, steps, warmup, 0.1) == pytest.approx(
                float(schedule(step)), rel=1e-5, abs=1e-10
            )


def test_schedule_without_room_for_a_cosine_drops_to_the_end_value_after_warmup():
    assert lr_multiplier(5, 10, 10, 0.1) == pytest.approx(0.5)  # still warming up
    assert lr_multiplier(10, 15, 10, 0.1) == pytest.approx(0.1)


def test_scheduler_drives_the_optimizer_lr():
    model = torch.nn.Linear(3, 3)
    optimizer, scheduler = make_optimizer(model, OptimConfig(warmup_steps=2, lr=1e-2), steps=10)
    lrs = []
    for _ in range(10):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == 0.0 and lrs[1] == pytest.approx(5e-3) and lrs[2] == pytest.approx(1e-2)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)  # after the last update: 0.1 * lr


def test_weight_decay_only_on_matrices():
    model = Transformer(tiny_model_config(num_layers=1, num_heads=2, input_dim=3, seq_len=4))
    decay, no_decay = parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim < 2 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    names = {id(p): n for n, p in model.named_parameters()}
    assert any("norm" in names[id(p)] for p in no_decay["params"])
    assert any(names[id(p)].endswith("bias") for p in no_decay["params"])
    assert any("position" in names[id(p)] for p in decay["params"])  # 2-d table, decayed as in the Flax code


def test_adamw_settings():
    optimizer, _ = make_optimizer(torch.nn.Linear(2, 2), OptimConfig(), steps=10)
    group = optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.999) and group["eps"] == 1e-8
    assert math.isclose(group["initial_lr"], 1e-3)


@pytest.mark.parametrize("switch", [None, ("HYLA_ADAMW_KERNEL", "0"), ("HYLA_ADAMW_KERNEL", "1")], ids=str)
def test_adamw_equals_torch_fused_adamw_bit_for_bit(monkeypatch, set_switch, tmp_path, switch):
    """hyla's AdamW against torch.optim.AdamW(fused=True): two parameter groups, small tensors
    (updated on one thread) and large ones, a step with a parameter left without gradient (torch's
    path), a state_dict saved and loaded mid-way. HYLA_ADAMW_KERNEL=0 turns off hyla's own kernel
    call: every step is torch's."""
    kernel_calls = []
    monkeypatch.setattr(
        optim, "fused_adamw_step", lambda *a, **kw: kernel_calls.append(1) or fused_adamw_step(*a, **kw)
    )
    switched_off = switch == ("HYLA_ADAMW_KERNEL", "0")
    if switch:
        set_switch(*switch)
    torch.manual_seed(0)
    models = [
        Transformer(tiny_model_config(num_layers=1, num_heads=2, mlp_dim=2560, input_dim=3, seq_len=4))
        for _ in range(2)
    ]
    models[1].load_state_dict(models[0].state_dict())
    cfg = OptimConfig(warmup_steps=2, lr=1e-2, weight_decay=0.1)
    ours, our_schedule = make_optimizer(models[0], cfg, steps=8)
    theirs = torch.optim.AdamW(
        parameter_groups(models[1], cfg.weight_decay), lr=cfg.lr, betas=(cfg.beta1, cfg.beta2), eps=cfg.eps, fused=True
    )
    their_schedule = torch.optim.lr_scheduler.LambdaLR(theirs, our_schedule.lr_lambdas[0])
    for step in range(8):
        grads = [torch.randn_like(p) for p in models[0].parameters()]
        if step == 3:
            grads[0] = None
        for model, optimizer, schedule in ((models[0], ours, our_schedule), (models[1], theirs, their_schedule)):
            for p, g in zip(model.parameters(), grads):
                p.grad = None if g is None else g.clone()
            optimizer.step()
            schedule.step()
        if step == 5:
            torch.save(ours.state_dict(), tmp_path / "optimizer.pt")
            ours.load_state_dict(torch.load(tmp_path / "optimizer.pt", weights_only=True))
    assert (not kernel_calls) == switched_off  # hyla's kernel call ran (or, switched off, never)
    if not switched_off:
        assert [part[-1] for part in ours._groups[0][0]] == [True, False]  # small, then the 16 x 2560 MLP weights
    for a, b in zip(models[0].parameters(), models[1].parameters()):
        assert torch.equal(a, b)
    for a, b in zip(ours.state.values(), theirs.state.values()):
        assert a.keys() == b.keys() and all(torch.equal(a[key], b[key]) for key in a)
