import itertools

import pytest
import torch

from hyla.tasks import Batch, FuzzyLogic

L, K, T = 4, 2, 16


@pytest.fixture(scope="module")
def task():
    return FuzzyLogic()


@pytest.mark.parametrize("frac_held_out, num_ood, num_train", [(0.5, 33, 33), (0.7, 46, 20), (0.3, 19, 47)])
def test_split_sizes_and_disjointness(frac_held_out, num_ood, num_train):
    task = FuzzyLogic(frac_held_out=frac_held_out)
    train, ood, novel = (task.split_tasks(s) for s in ("train", "ood", "novel_terms"))
    assert (len(ood), len(train), len(novel)) == (num_ood, num_train, 6)
    assert torch.equal(task.split_tasks("valid"), train)
    assert torch.equal(task.split_tasks("valid_fixed_query"), train)
    train_set, ood_set = set(map(tuple, train.tolist())), set(map(tuple, ood.tolist()))
    assert not train_set & ood_set
    assert train_set | ood_set == set(itertools.combinations(range(12), K))  # terms 12-15 unseen
    assert set(map(tuple, novel.tolist())) == set(itertools.combinations(range(12, 16), K))
    assert train.tolist() == sorted(train.tolist())


def test_split_depends_on_seed():
    ood_0, ood_1 = (FuzzyLogic(seed=seed).split_tasks("ood") for seed in (0, 1))
    assert not torch.equal(ood_0, ood_1)


def _zadeh(term_indices: list[int], inputs: list[float]) -> float:
    """f(x) = max over terms of min over literals, digits of the term index read MSB first."""
    values = []
    for term in term_indices:
        digits = [int(bit) for bit in format(term, f"0{L}b")]
        values.append(min(x if d else 1.0 - x for d, x in zip(digits, inputs)))
    return max(values)


@pytest.mark.parametrize("split", ["train", "ood", "novel_terms", "valid_fixed_context"])
def test_targets_match_a_direct_zadeh_computation(task, split):
    batch = task.batch(split, 32, 3)
    assert isinstance(batch, Batch)
    assert batch.x.shape == (32, T, L + 1) and batch.y.shape == (32, 1)
    term_indices = batch.info["term_indices"]
    for b in range(32):
        for t in range(T):
            expected = _zadeh(term_indices[b].tolist(), batch.x[b, t, :L].tolist())
            assert batch.info["targets"][b, t].item() == pytest.approx(expected, abs=1e-6)
    assert torch.equal(batch.x[:, :-1, L], batch.info["targets"][:, :-1])
    assert (batch.x[:, -1, L] == 0).all()
    assert torch.equal(batch.y[:, 0], batch.info["targets"][:, -1])
    assert ((batch.x[..., :L] >= 0) & (batch.x[..., :L] < 1)).all()


def test_task_info(task):
    info = task.batch("train", 512, 0).info
    digits = torch.tensor([[int(bit) for bit in format(t, f"0{L}b")] for t in range(2**L)])
    assert torch.equal(info["terms"], digits[info["term_indices"]])
    assert (info["term_indices"][:, 0] < info["term_indices"][:, 1]).all()
    all_tasks = list(itertools.combinations(range(2**L), K))
    indexed = [all_tasks[i] for i in info["task_index"].tolist()]
    assert indexed == list(map(tuple, info["term_indices"].tolist()))
    assert (task.input_dim, task.seq_len, task.output_dim, task.num_outputs) == (L + 1, T, 1, 1)
    assert task.eval_splits == ("valid", "ood", "novel_terms") and task.metric_name == "r2"


def test_fixed_context_and_fixed_query(task):
    context = task.batch("ood_fixed_context", 64, 0).x[..., :L]
    assert torch.equal(context[:, :-1], context[:1, :-1].expand(64, -1, -1))
    assert not torch.equal(context[0, -1], context[1, -1])
    assert not torch.equal(context[0, 0], task.batch("ood_fixed_context", 64, 1).x[0, 0, :L])
    query = task.batch("valid_fixed_query", 64, 0).x[..., :L]
    assert torch.equal(query[:, -1], query[:1, -1].expand(64, -1))
    assert not torch.equal(query[0, 0], query[1, 0])


# 131,072 samples here; a million (8 batches) in the slow set
@pytest.mark.parametrize("batches", [1, pytest.param(8, marks=pytest.mark.slow)], ids=["131k", "1M"])
def test_no_held_out_task_in_the_training_samples(task, batches):
    held_out = torch.cat([task._task_index["ood"], task._task_index["novel_terms"]])
    for step in range(batches):
        assert not torch.isin(task.batch("train", 131_072, step).info["task_index"], held_out).any()
    assert torch.isin(task.batch("ood", 4096, 0).info["task_index"], task._task_index["ood"]).all()


def test_determinism_and_rank_slicing(task):
    a, b = task.batch("train", 64, 5), task.batch("train", 64, 5)
    assert torch.equal(a.x, b.x) and torch.equal(a.info["task_index"], b.info["task_index"])
    assert not torch.equal(a.x, task.batch("train", 64, 6).x)
    assert not torch.equal(a.x, task.batch("valid", 64, 5).x)
    assert torch.equal(FuzzyLogic().batch("train", 64, 5).x, a.x)
    shards = [task.batch("train", 64, 5, rank=r, world_size=2) for r in range(2)]
    assert torch.equal(torch.cat([s.x for s in shards]), a.x)
    assert torch.equal(torch.cat([s.y for s in shards]), a.y)
    for key in a.info:
        assert torch.equal(torch.cat([s.info[key] for s in shards]), a.info[key])
    with pytest.raises(ValueError, match="divisible"):
        task.batch("train", 63, 0, rank=0, world_size=2)
    with pytest.raises(ValueError, match="rank"):
        task.batch("train", 64, 0, rank=2, world_size=2)


def test_r2_and_loss(task):
    batch = task.batch("ood", 16_000, 0)
    oracle = batch.y[:, :, None]  # [B, 1, 1]
    metrics = task.metrics(oracle, batch)
    assert metrics["r2"].shape == metrics["mse"].shape == (16_000,)  # per sequence
    assert torch.allclose(metrics["r2"], torch.ones(16_000)) and (metrics["mse"] == 0).all()
    assert task.loss(oracle, batch) == 0
    sequence_mean = batch.info["targets"].mean(dim=1)[:, None, None]
    assert abs(task.metrics(sequence_mean, batch)["r2"].mean().item()) < 0.05
    zeros = torch.zeros(16_000, 1, 1)
    assert task.loss(zeros, batch) == pytest.approx(batch.y.square().mean().item())


def test_errors():
    task = FuzzyLogic()
    with pytest.raises(ValueError, match="valid splits: train, train_fixed_context"):
        task.batch("test", 8, 0)
    with pytest.raises(ValueError, match="unknown split"):
        task.split_tasks("ood_fixed")
    no_ood = FuzzyLogic(frac_held_out=0.0)
    assert no_ood.eval_splits == ("valid", "novel_terms")
    with pytest.raises(ValueError, match="no tasks"):
        no_ood.batch("ood_fixed_query", 8, 0)
    with pytest.raises(ValueError, match="no tasks"):
        FuzzyLogic(frac_held_out=1.0).batch("train", 8, 0)
    assert FuzzyLogic(frac_unseen_terms=0.0).eval_splits == ("valid", "ood")


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_batches_equal_cpu_batches():
    cpu, cuda = FuzzyLogic().batch("ood", 256, 2), FuzzyLogic(device="cuda").batch("ood", 256, 2)
    assert cuda.x.is_cuda and torch.equal(cuda.x.cpu(), cpu.x)
    assert torch.equal(cuda.info["targets"].cpu(), cpu.info["targets"])
