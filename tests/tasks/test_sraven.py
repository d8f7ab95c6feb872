import itertools

import pytest
import torch

from hyla.tasks import Batch, SRaven, is_ambiguous

K, F = 4, 8


@pytest.fixture(scope="module")
def task():
    return SRaven()


def _unpermute(panels: torch.Tensor, perm: torch.Tensor) -> torch.Tensor:
    """Invert `panels[b, r, c, j] = unpermuted[b, r, c, perm[b, c, j]]`."""
    B = panels.shape[0]
    return torch.empty_like(panels).scatter_(3, perm[:, None].expand(B, 3, 3, K), panels)


def _check_rules(grid: torch.Tensor, rules: torch.Tensor) -> None:
    """Recompute every row of every feature from its rule. grid `[B, 3, 3, K]` unpermuted."""
    assert grid.min() >= 0 and grid.max() < F
    for k in range(K):
        for rule in range(8):
            rows = grid[rules[:, k] == rule][..., k]  # [n, 3 rows, 3 columns]
            a, b, c = rows.unbind(-1)
            if rule == 0:
                assert torch.equal(a, b) and torch.equal(b, c)
            elif rule in (1, 2, 3, 4):
                step = {1: 1, 2: 2, 3: -1, 4: -2}[rule]
                assert torch.equal(b, (a + step) % F) and torch.equal(c, (a + 2 * step) % F)
            elif rule == 5:
                assert torch.equal(c, (a + b) % F)
            elif rule == 6:
                assert torch.equal(c, (a - b) % F)
            else:
                values = rows.sort(dim=-1).values
                assert (values.diff(dim=-1) > 0).all()  # three distinct values
                assert torch.equal(values, values[:, :1].expand_as(values))  # same set every row
                # rows are independent orderings: all 6 appear in the middle row
                assert len({tuple(row) for row in rows[:, 1].argsort(-1).tolist()}) == 6


def test_split_sizes_and_disjointness(task):
    all_sets = task.all_rule_sets
    assert all_sets.shape == (330, K)
    multisets = itertools.combinations_with_replacement(range(8), K)
    assert all_sets.tolist() == [list(c) for c in multisets]
    train, ood = task.split_tasks("train"), task.split_tasks("ood")
    assert len(train) == 248 and len(ood) == 82
    assert torch.equal(task.split_tasks("valid"), train)
    assert torch.equal(task.split_tasks("train_unpermuted"), train)
    assert torch.equal(task.split_tasks("ood_unpermuted"), ood)
    train_sets, ood_sets = set(map(tuple, train.tolist())), set(map(tuple, ood.tolist()))
    assert not train_sets & ood_sets and len(train_sets | ood_sets) == 330
    assert train.tolist() == sorted(train.tolist())
    assert torch.equal(train, train.sort(dim=1).values)
    assert not torch.equal(SRaven(seed=1).split_tasks("ood"), ood)


@pytest.mark.parametrize("split", ["train", "ood_unpermuted", "valid"])
def test_every_rule_holds_on_generated_grids(task, split):
    batch = task.batch(split, 4096, 7)
    rules, panels, perm = batch.info["rules"], batch.info["panels"], batch.info["perm"]
    assert torch.equal(rules.sort(dim=1).values, task.all_rule_sets[batch.info["rule_set_index"]])
    assert torch.equal(perm.sort(dim=2).values, torch.arange(K).expand_as(perm))
    if split.endswith("unpermuted"):
        assert torch.equal(perm, torch.arange(K).expand_as(perm))
    else:
        assert (perm != torch.arange(K)).any(dim=2).float().mean() > 0.9
    # one permutation per column for all three rows: undoing it makes every row obey its rule
    _check_rules(_unpermute(panels, perm), rules)
    assert set(rules.flatten().tolist()) == set(range(8))


def test_tokens_and_targets(task):
    batch = task.batch("train", 256, 0)
    assert isinstance(batch, Batch)
    assert batch.x.shape == (256, 9 * K, F) and batch.x.dtype == torch.float32
    assert batch.y.shape == (256, K) and batch.y.dtype == torch.long
    panels = batch.info["panels"]
    tokens = panels.reshape(256, 9 * K)
    one_hot = torch.nn.functional.one_hot(tokens[:, : 8 * K], F).float()
    assert torch.equal(batch.x[:, : 8 * K], one_hot)
    assert (batch.x[:, 8 * K :] == 0).all()
    assert torch.equal(batch.y, panels[:, 2, 2])
    assert (task.input_dim, task.seq_len, task.output_dim, task.num_outputs) == (F, 36, F, K)
    assert task.eval_splits == ("valid", "ood") and task.metric_name == "acc"


# 131,072 samples here; a million (8 batches) in the slow set
@pytest.mark.parametrize("batches", [1, pytest.param(8, marks=pytest.mark.slow)], ids=["131k", "1M"])
def test_no_held_out_rule_set_in_the_training_samples(task, batches):
    ood = task._rule_set_indices["ood"]
    for step in range(batches):
        info = task.batch("train", 131_072, step).info
        assert not torch.isin(info["rule_set_index"], ood).any()
        multisets = task.all_rule_sets[info["rule_set_index"]]
        assert torch.equal(info["rules"].sort(dim=1).values, multisets)
    assert torch.isin(task.batch("ood", 4096, 0).info["rule_set_index"], ood).all()


def test_determinism_and_rank_slicing(task):
    a, b = task.batch("train", 64, 5), task.batch("train", 64, 5)
    assert torch.equal(a.x, b.x) and all(torch.equal(a.info[k], b.info[k]) for k in a.info)
    assert not torch.equal(a.x, task.batch("train", 64, 6).x)
    assert not torch.equal(a.x, task.batch("valid", 64, 5).x)
    assert torch.equal(SRaven().batch("train", 64, 5).x, a.x)
    shards = [task.batch("train", 64, 5, rank=r, world_size=4) for r in range(4)]
    assert torch.equal(torch.cat([s.x for s in shards]), a.x)
    assert torch.equal(torch.cat([s.y for s in shards]), a.y)
    for key in a.info:
        assert torch.equal(torch.cat([s.info[key] for s in shards]), a.info[key])
    with pytest.raises(ValueError, match="divisible"):
        task.batch("train", 10, 0, rank=0, world_size=4)


def test_loss_and_metrics(task):
    batch = task.batch("valid", 128, 0)
    oracle = 20.0 * torch.nn.functional.one_hot(batch.y, F).float()  # [B, K, F] logits
    assert task.loss(oracle, batch) < 1e-6
    metrics = task.metrics(oracle, batch)
    assert set(metrics) == {"acc", "feature_acc"} and (metrics["acc"] == 1).all()
    assert all(value.shape == (128,) for value in metrics.values())  # per sequence
    wrong = oracle.clone()
    wrong[:, 0] = oracle[:, 0].roll(1, dims=-1)  # first feature always wrong
    metrics = task.metrics(wrong, batch)
    assert (metrics["acc"] == 0).all()
    assert torch.allclose(metrics["feature_acc"], torch.tensor(0.75))
    uniform = torch.zeros(128, K, F)
    assert task.loss(uniform, batch).item() == pytest.approx(torch.log(torch.tensor(8.0)).item())


def test_errors():
    task = SRaven()
    with pytest.raises(ValueError, match="valid splits: train, valid, ood"):
        task.batch("test", 8, 0)
    with pytest.raises(ValueError, match="grid_size"):
        SRaven(grid_size=4)
    with pytest.raises(ValueError, match="num_values"):
        SRaven(num_values=4)
    no_ood = SRaven(frac_ood=0.0)
    assert no_ood.eval_splits == ("valid",) and len(no_ood.split_tasks("ood")) == 0
    with pytest.raises(ValueError, match="no rule sets"):
        no_ood.batch("ood", 8, 0)


def test_other_sizes():
    task = SRaven(num_features=3, num_values=5)
    batch = task.batch("train", 512, 0)
    assert batch.x.shape == (512, 27, 5) and len(task.all_rule_sets) == 120
    grid = torch.empty_like(batch.info["panels"]).scatter_(
        3, batch.info["perm"][:, None].expand(512, 3, 3, 3), batch.info["panels"]
    )
    assert grid.max() < 5
    # addition is still right mod 5
    add = batch.info["rules"] == 5
    rows = grid.permute(0, 3, 1, 2)[add]
    assert torch.equal(rows[..., 2], (rows[..., 0] + rows[..., 1]) % 5)


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_batches_equal_cpu_batches():
    cpu, cuda = SRaven().batch("ood", 256, 2), SRaven(device="cuda").batch("ood", 256, 2, with_ambiguity=True)
    assert cuda.x.is_cuda and torch.equal(cuda.x.cpu(), cpu.x)
    assert torch.equal(cuda.info["ambiguous"].cpu(), is_ambiguous(cpu.info["panels"], F))
