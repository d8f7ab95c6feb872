import itertools

import pytest
import torch

from hyla.tasks import SRaven, ambiguity_rate, is_ambiguous

F = 8


def _row_obeys(rule: int, row: tuple[int, int, int]) -> bool:
    """Whether one complete row obeys a rule (distribute-three is checked across rows)."""
    a, b, c = row
    if rule == 0:
        return a == b == c
    if rule in (1, 2, 3, 4):
        step = {1: 1, 2: 2, 3: -1, 4: -2}[rule]
        return (b - a) % F == step % F and (c - b) % F == step % F
    if rule == 5:
        return c == (a + b) % F
    return c == (a - b) % F


def _answers(chain_rows: list[tuple[int, ...]]) -> set[int]:
    """All answers z for which some rule explains the completed rows of one chain."""
    top, middle, (a2, b2) = chain_rows
    answers = set()
    for z in range(F):
        rows = [top, middle, (a2, b2, z)]
        if any(all(_row_obeys(rule, row) for row in rows) for rule in range(7)):
            answers.add(z)
        if len(set(top)) == 3 and all(sorted(row) == sorted(top) for row in rows):
            answers.add(z)  # distribute-three
    return answers


def _brute_force(panels: torch.Tensor) -> tuple[bool, bool]:
    """(ambiguous, every feature differs) for one instance `[3, 3, K]`, by trying every
    correspondence of all three columns and every answer value."""
    p = panels.tolist()
    K = len(p[0][0])
    answers = {
        (i, j, k): _answers(
            [(p[0][0][i], p[0][1][j], p[0][2][k]), (p[1][0][i], p[1][1][j], p[1][2][k]), (p[2][0][i], p[2][1][j])]
        )
        for i, j, k in itertools.product(range(K), repeat=3)
    }
    any_found = every_found = False
    for perm1, perm2 in itertools.product(itertools.permutations(range(K)), repeat=2):
        chains = [(answers[i, perm1[i], perm2[i]], p[2][2][perm2[i]]) for i in range(K)]
        if all(chain_answers for chain_answers, _ in chains):
            differs = [bool(chain_answers - {shown}) for chain_answers, shown in chains]
            any_found |= any(differs)
            every_found |= all(differs)
    return any_found, every_found


def test_matches_brute_force_on_generated_instances():
    task = SRaven()
    panels = torch.cat(
        [task.batch("valid", 200, 0).info["panels"], task.batch("ood_unpermuted", 100, 0).info["panels"]]
    )
    expected = [_brute_force(instance) for instance in panels]
    ambiguous = is_ambiguous(panels, F)
    assert ambiguous.tolist() == [a for a, _ in expected]
    assert is_ambiguous(panels, F, every_feature=True).tolist() == [e for _, e in expected]
    assert 40 <= int(ambiguous.sum()) <= 110  # the sample does contain ambiguous instances


def _grid(features: list[list[tuple[int, ...]]]) -> torch.Tensor:
    """Panels `[1, 3, 3, K]` from per-feature rows (the last row has 3 values, the answer last)."""
    return torch.tensor(features).permute(1, 2, 0)[None]


def test_hand_constructed_ambiguous_instance():
    # feature 0: addition with b in {0, 4} in both complete rows also obeys subtraction, which
    # predicts 1 - 2 = 7 instead of 3; the other features are plain progressions
    ambiguous = _grid(
        [
            [(3, 4, 7), (5, 0, 5), (1, 2, 3)],
            [(0, 1, 2), (3, 4, 5), (6, 7, 0)],
            [(5, 7, 1), (2, 4, 6), (0, 2, 4)],
            [(7, 5, 3), (4, 2, 0), (6, 4, 2)],
        ]
    )
    assert is_ambiguous(ambiguous, F).tolist() == [True]
    assert is_ambiguous(ambiguous, F, every_feature=True).tolist() == [False]


def test_hand_constructed_instance_ambiguous_in_every_feature():
    # every feature is an addition with b in {0, 4} in the complete rows: subtraction fits all
    # of them and changes every answer
    every = _grid(
        [
            [(3, 4, 7), (5, 0, 5), (1, 2, 3)],
            [(1, 0, 1), (2, 4, 6), (0, 1, 1)],
            [(6, 4, 2), (7, 0, 7), (2, 3, 5)],
            [(0, 4, 4), (3, 4, 7), (4, 1, 5)],
        ]
    )
    assert _brute_force(every[0]) == (True, True)
    assert is_ambiguous(every, F, every_feature=True).tolist() == [True]


def test_hand_constructed_unambiguous_instance():
    # four distinct progressions with different starts in every row
    unambiguous = _grid(
        [
            [(2, 3, 4), (6, 7, 0), (1, 2, 3)],
            [(0, 2, 4), (5, 7, 1), (3, 5, 7)],
            [(7, 6, 5), (3, 2, 1), (4, 3, 2)],
            [(6, 4, 2), (1, 7, 5), (0, 6, 4)],
        ]
    )
    assert _brute_force(unambiguous[0]) == (False, False)
    assert is_ambiguous(unambiguous, F).tolist() == [False]
    # the same instance shown with shuffled feature orders per column is still unambiguous
    perms = torch.tensor([[3, 1, 0, 2], [2, 0, 3, 1], [1, 3, 2, 0]])  # per column
    shuffled = unambiguous.gather(3, perms[None, None].expand(1, 3, 3, 4))
    assert is_ambiguous(shuffled, F).tolist() == [False]


def test_ambiguity_rates_for_the_defaults():
    """Reported in hyla/tasks/ambiguity.py (there on 200,000 samples)."""
    task = SRaven()
    assert 0.20 < ambiguity_rate(task, "valid", 20_000) < 0.28
    assert 0.001 < ambiguity_rate(task, "valid", 20_000, every_feature=True) < 0.004


def test_batch_flag_and_metrics():
    task = SRaven()
    batch = task.batch("valid", 512, 3, with_ambiguity=True)
    assert torch.equal(batch.info["ambiguous"], is_ambiguous(batch.info["panels"], F))
    oracle = torch.nn.functional.one_hot(batch.y, F).float()
    metrics = task.metrics(oracle, batch)
    means = task.summarize({key: float(value.mean()) for key, value in metrics.items()})
    assert means["acc_unambiguous"] == pytest.approx(1.0)
    assert means["unambiguous"] == pytest.approx(1 - batch.info["ambiguous"].float().mean().item())
