"""The counter-based random stream behind every task batch (hyla/tasks/random.py).

The torch path uses only int64 integer ops, so matching a pure-Python SplitMix64 bit for bit on
the CPU is the argument that every device gives the same bits; the CUDA test checks it directly.
"""

import math
import random

import pytest
import torch

from hyla.tasks import FuzzyLogic, SRaven, Text
from hyla.tasks.base import stable_seed
from hyla.tasks.random import MAX_INTEGERS_N, RandomStream, integers, permutations, uniform

MASK64 = 2**64 - 1


def splitmix64_reference(key: int, counter: int) -> int:
    """Output number `counter` of SplitMix64 seeded with `key`, on Python ints (unsigned)."""
    z = (key + (counter + 1) * 0x9E3779B97F4A7C15) & MASK64
    z = ((z ^ (z >> 30)) * 0xBF58476D1CE4E5B9) & MASK64
    z = ((z ^ (z >> 27)) * 0x94D049BB133111EB) & MASK64
    return z ^ (z >> 31)


def unsigned(values: torch.Tensor) -> list[int]:
    return [v & MASK64 for v in values.flatten().tolist()]


def test_published_splitmix64_outputs():
    """The first outputs of SplitMix64 seeded with 1234567 (Vigna's splitmix64.c)."""
    expected = [
        6457827717110365317,
        3203168211198807973,
        9817491932198370423,
        4593380528125082431,
        16408922859458223821,
    ]
    assert [splitmix64_reference(1234567, c) for c in range(5)] == expected
    assert unsigned(RandomStream(1234567).bits((5,))) == expected


@pytest.mark.parametrize("key", [0, 1, stable_seed(0, "fuzzy_logic", "train", 3), 2**63 - 1, 2**64 - 1])
def test_bits_equal_the_python_reference(key):
    stream = RandomStream(key)
    first = stream.bits((3, 700))  # counters 0 .. 2099
    second = stream.bits((2, 500))  # the next block: 2100 .. 3099
    assert unsigned(first) == [splitmix64_reference(key, c) for c in range(2100)]
    assert unsigned(second) == [splitmix64_reference(key, c) for c in range(2100, 3100)]
    assert stream.offset == 3100


def test_rows_are_the_slice_of_the_full_draw_and_advance_the_stream_fully():
    whole, parts = RandomStream(7), [RandomStream(7) for _ in range(4)]
    expected = [whole.bits((8, 3, 5)), whole.bits((8, 2)), whole.bits((8,))]
    for rank, stream in enumerate(parts):
        rows = (2 * rank, 2 * rank + 2)
        drawn = [stream.bits((8, 3, 5), rows), stream.bits((8, 2), rows), stream.bits((8,), rows)]
        for full, part in zip(expected, drawn):
            assert torch.equal(part, full[rows[0] : rows[1]])
    assert RandomStream(7).bits((8, 3, 5), (3, 3)).shape == (0, 3, 5)
    with pytest.raises(ValueError, match="outside"):
        RandomStream(7).bits((8, 2), (6, 9))
    with pytest.raises(ValueError, match="shape"):
        RandomStream(7).bits(())


def test_uniform_is_the_top_24_bits():
    bits = RandomStream(11).bits((4096,))
    values = uniform(bits)
    assert values.dtype == torch.float32
    assert [int(u * 2**24) for u in values.tolist()] == [b >> 40 for b in unsigned(bits)]
    assert values.min() >= 0 and values.max() < 1


@pytest.mark.parametrize("n", [1, 2, 6, 330, 2**31 - 1, 2**31, 2**31 + 1, 7_500_000_019, 3 << 59, MAX_INTEGERS_N])
def test_integers_are_floor_of_r_times_n_over_2_to_the_62(n):
    bits = RandomStream(5).bits((2000,))
    values = integers(bits, n)
    assert values.dtype == torch.int64
    assert values.tolist() == [((b >> 2) * n) >> 62 for b in unsigned(bits)]
    assert values.min() >= 0 and values.max() < n


def test_integers_reject_bad_n():
    for n in (0, -3, MAX_INTEGERS_N + 1):
        with pytest.raises(ValueError, match="1 <= n"):
            integers(RandomStream(0).bits((4,)), n)


def test_permutations_are_permutations_that_sort_the_random_bits():
    bits = RandomStream(3).bits((500, 3, 7))
    perms = permutations(bits)
    assert torch.equal(perms.sort(dim=-1).values, torch.arange(7).expand(500, 3, 7))
    ordered = bits.gather(-1, perms)
    assert (ordered[..., 1:] > ordered[..., :-1]).all()
    assert torch.equal(permutations(RandomStream(0).bits((0,))), torch.zeros(0, dtype=torch.long))


def chi_square(counts: torch.Tensor) -> float:
    expected = counts.sum().item() / len(counts)
    return ((counts.double() - expected) ** 2 / expected).sum().item()


def check_chi_square(counts: torch.Tensor) -> None:
    """Within ±6 standard deviations (sqrt(2 dof)) of its mean: a real defect (a stuck bit, a
    biased bucket, a repeated block) lands far outside; a sound stream fails with p < 1e-6."""
    dof = len(counts) - 1
    assert abs(chi_square(counts) - dof) < 6 * math.sqrt(2 * dof), counts


def test_uniform_statistics():
    u = uniform(RandomStream(stable_seed("statistics")).bits((200_000,))).double()
    n = len(u)
    assert abs(u.mean().item() - 0.5) < 5 * math.sqrt(1 / 12 / n)
    assert abs(u.var().item() - 1 / 12) < 5 * math.sqrt(1 / 180 / n)
    check_chi_square(torch.bincount((u * 64).long(), minlength=64))
    check_chi_square(torch.bincount((u * 2**20).long() % 97, minlength=97))  # low-order bits too


def test_every_bit_is_fair():
    bits = RandomStream(stable_seed("bits")).bits((100_000,))
    ones = torch.stack([(bits >> i) & 1 for i in range(64)]).double().mean(dim=1)  # [64]
    assert ((ones - 0.5).abs() < 5 * math.sqrt(0.25 / 100_000)).all(), ones


def test_integer_and_permutation_statistics():
    stream = RandomStream(stable_seed("integers"))
    check_chi_square(torch.bincount(integers(stream.bits((60_000,)), 6), minlength=6))
    check_chi_square(torch.bincount(integers(stream.bits((99_000,)), 330), minlength=330))
    big = 7_500_000_019  # > 2^32: the windows of a C4-sized corpus
    check_chi_square(torch.bincount(integers(stream.bits((50_000,)), big) * 50 // big, minlength=50))
    perms = permutations(stream.bits((60_000, 3)))
    codes = perms[:, 0] * 3 + perms[:, 1]  # which of the 6 permutations
    check_chi_square(torch.bincount(codes, minlength=9)[[1, 2, 3, 5, 6, 7]])


def correlation(a: torch.Tensor, b: torch.Tensor) -> float:
    return torch.corrcoef(torch.stack([a.double(), b.double()]))[0, 1].item()


def test_no_correlation_between_neighbouring_draws_calls_and_keys():
    n = 100_000
    bound = 5 / math.sqrt(n)
    stream = RandomStream(12345)
    first, second = uniform(stream.bits((n,))), uniform(stream.bits((n,)))
    assert abs(correlation(first[:-1], first[1:])) < bound  # neighbouring counters
    assert abs(correlation(first, second)) < bound  # successive calls
    neighbour_key = uniform(RandomStream(12346).bits((n,)))  # keys one apart: states one apart
    assert abs(correlation(first, neighbour_key)) < bound
    assert (first == neighbour_key).float().mean() < 1e-3
    # the same count of equal pairs as independent 24-bit draws would give (~n / 2^24)
    assert (first == second).sum() < 10


# ------------------------------------------------------------------------------------------
# Batches of every task


@pytest.mark.slow  # batches of ~10k-25k samples per task; the stream's statistics tests above guard the generator
def test_task_draws_are_uniform_where_the_task_definitions_say_so():
    """What the tasks draw from the stream: fuzzy-logic tasks uniform over the split and inputs
    uniform on [0, 1); SRAVEN rule sets uniform over the split, column orders uniform over the
    K! permutations, affine row starts uniform over the F values."""
    fuzzy = FuzzyLogic()
    batch = fuzzy.batch("train", 33 * 300, 0)
    train_index = fuzzy._task_index["train"]  # sorted
    check_chi_square(
        torch.bincount(torch.searchsorted(train_index, batch.info["task_index"]), minlength=len(train_index))
    )
    check_chi_square(torch.bincount((batch.x[..., :4] * 16).long().flatten(), minlength=16))

    sraven = SRaven()
    info = sraven.batch("train", 248 * 100, 0).info
    train_sets = sraven._rule_set_indices["train"]  # sorted
    check_chi_square(torch.bincount(torch.searchsorted(train_sets, info["rule_set_index"]), minlength=len(train_sets)))
    perm = info["perm"].reshape(-1, 4)
    codes = ((perm[:, 0] * 4 + perm[:, 1]) * 4 + perm[:, 2]) * 4 + perm[:, 3]
    counts = torch.bincount(codes, minlength=256)
    assert (counts > 0).sum() == 24
    check_chi_square(counts[counts > 0])
    unpermuted = sraven.batch("train_unpermuted", 20_000, 0).info
    affine = unpermuted["rules"] < 7  # [B, K]
    starts = unpermuted["panels"][:, 0, 0, :][affine]  # u of row 0 of every affine feature
    check_chi_square(torch.bincount(starts, minlength=8))


@pytest.fixture(scope="module")
def corpus(tmp_path_factory):
    folder = tmp_path_factory.mktemp("corpus")
    rng = random.Random(0)
    words = "the model attends to every key while a hypernetwork generates the value network".split()
    (folder / "text.txt").write_text(
        "\n".join(" ".join(rng.choice(words) for _ in range(9)) for _ in range(400)) + "\n"
    )
    return folder


def make_tasks(corpus, device: str = "cpu") -> list:
    """Every task, with the options that change how batches are drawn."""
    text = Text(
        str(corpus / "text.txt"),
        seq_len=16,
        vocab_size=280,
        valid_fraction=0.1,
        cache_dir=corpus / "cache",
        device=device,
    )
    return [
        FuzzyLogic(device=device),
        FuzzyLogic(fixed_inputs="per_seed", device=device),
        SRaven(device=device),
        SRaven(rule_order="sorted", permute=False, device=device),
        text,
    ]


@pytest.fixture(scope="module")
def tasks(corpus):
    return make_tasks(corpus)


def batches(task, world_size: int = 1, batch_size: int = 8) -> list:
    """Rank slices of one batch of every split, concatenated per field."""
    out = []
    for split in task.splits:
        parts = [task.batch(split, batch_size, 3, rank, world_size) for rank in range(world_size)]
        out.append([torch.cat(field) for field in zip(*[(p.x, p.y, *p.info.values()) for p in parts])])
    return out


def assert_same(first: list, second: list) -> None:
    assert len(first) == len(second)
    for fields_a, fields_b in zip(first, second):
        assert all(a.dtype == b.dtype and torch.equal(a.cpu(), b.cpu()) for a, b in zip(fields_a, fields_b))


def test_batches_do_not_depend_on_the_thread_count(tasks):
    """Batches of 2048: large enough for torch to split the elementwise ops and sorts over threads."""
    threads = torch.get_num_threads()
    try:
        torch.set_num_threads(1)
        one = [batches(task, batch_size=2048) for task in tasks]
        torch.set_num_threads(2)
        two = [batches(task, batch_size=2048) for task in tasks]
    finally:
        torch.set_num_threads(threads)
    for a, b in zip(one, two):
        assert_same(a, b)


@pytest.mark.parametrize("world_size", [2, 4, 8])
def test_rank_slices_generated_alone_equal_the_global_batch(tasks, world_size):
    for task in tasks:
        assert_same(batches(task, world_size), batches(task))


def test_batches_are_made_on_the_task_device(corpus):
    """On the meta device every op of batch generation must run there: a CPU tensor mixed in
    raises, and a batch sampled on the CPU and copied would need real data."""
    for task in make_tasks(corpus, "meta"):
        for split in task.splits:
            batch = task.batch(split, 8, 0, rank=1, world_size=2)
            assert {t.device.type for t in (batch.x, batch.y, *batch.info.values())} == {"meta"}


@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs CUDA")
def test_cuda_batches_are_bit_identical_to_cpu_batches(corpus, tasks):
    draws = [
        lambda s: s.bits((3, 1000)),
        lambda s: uniform(s.bits((5000,))),
        lambda s: integers(s.bits((5000,)), 7_500_000_019),
        lambda s: permutations(s.bits((500, 9))),
    ]
    for draw in draws:
        assert torch.equal(draw(RandomStream(99, "cuda")).cpu(), draw(RandomStream(99)))
    for on_cuda, on_cpu in zip(make_tasks(corpus, "cuda"), tasks):
        cuda_batches = batches(on_cuda)
        assert cuda_batches[0][0].is_cuda
        assert_same(cuda_batches, batches(on_cpu))
        assert_same(batches(on_cuda, 4), batches(on_cpu))
