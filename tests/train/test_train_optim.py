"""Learning-rate schedule and weight-decay grouping (docs/paper_fidelity.md)."""

import math

import pytest
import torch

from hyla.configs import TrainConfig
from hyla.model import ModelConfig, Transformer
from hyla.train.optim import lr_multiplier, make_optimizer, parameter_groups


def test_schedule_warms_up_from_zero_then_decays_to_a_tenth():
    steps, warmup = 1000, 100
    values = [lr_multiplier(s, steps, warmup, 0.1) for s in range(steps + 1)]
    assert values[0] == 0.0
    assert values[50] == pytest.approx(0.5)
    assert values[warmup] == pytest.approx(1.0)
    assert values[steps] == pytest.approx(0.1)
    assert all(b <= a + 1e-12 for a, b in zip(values[warmup:], values[warmup + 1:]))  # monotone decay
    assert values[(steps + warmup) // 2] == pytest.approx(0.55)  # cosine midpoint
    assert max(values) == pytest.approx(1.0)


def test_scheduler_drives_the_optimizer_lr():
    model = torch.nn.Linear(3, 3)
    optimizer, scheduler = make_optimizer(model, TrainConfig(steps=10, warmup_steps=2, lr=1e-2))
    lrs = []
    for _ in range(10):
        lrs.append(optimizer.param_groups[0]["lr"])
        optimizer.step()
        scheduler.step()
    assert lrs[0] == 0.0 and lrs[1] == pytest.approx(5e-3) and lrs[2] == pytest.approx(1e-2)
    assert optimizer.param_groups[0]["lr"] == pytest.approx(1e-3)  # after the last update: 0.1 * lr


def test_weight_decay_only_on_matrices():
    model = Transformer(ModelConfig(num_layers=1, dim=16, num_heads=2, qk_dim=8, v_dim=8, mlp_dim=32,
                                    input_dim=3, seq_len=4))
    decay, no_decay = parameter_groups(model, 0.1)
    assert decay["weight_decay"] == 0.1 and no_decay["weight_decay"] == 0.0
    assert all(p.ndim >= 2 for p in decay["params"]) and all(p.ndim < 2 for p in no_decay["params"])
    assert len(decay["params"]) + len(no_decay["params"]) == len(list(model.parameters()))
    names = {id(p): n for n, p in model.named_parameters()}
    assert any("norm" in names[id(p)] for p in no_decay["params"])
    assert any(names[id(p)].endswith("bias") for p in no_decay["params"])
    assert any("position" in names[id(p)] for p in decay["params"])  # 2-d table, decayed as in the Flax code


def test_adamw_settings():
    optimizer, _ = make_optimizer(torch.nn.Linear(2, 2), TrainConfig())
    group = optimizer.param_groups[0]
    assert group["betas"] == (0.9, 0.999) and group["eps"] == 1e-8
    assert math.isclose(group["initial_lr"], 1e-3)
