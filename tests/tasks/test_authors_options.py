"""Options that reproduce the authors' data code where hyla deliberately differs by default."""

import pytest
import torch

from hyla.tasks import FuzzyLogic, SRaven
from hyla.train.configs import ConfigError, ExperimentConfig, FuzzyLogicConfig, SRavenConfig, build_task

L = 4


def test_per_seed_fixed_inputs_are_shared_by_every_split_and_step():
    task = FuzzyLogic(fixed_inputs="per_seed")
    queries = [
        task.batch(split, 8, step).x[:, -1, :L] for split in ("valid_fixed_query", "ood_fixed_query") for step in (0, 5)
    ]
    assert all(torch.equal(q, queries[0][:1].expand(8, -1)) for q in queries)
    contexts = [
        task.batch(split, 8, step).x[:, :-1, :L]
        for split in ("valid_fixed_context", "ood_fixed_context")
        for step in (0, 5)
    ]
    assert all(torch.equal(c, contexts[0][:1].expand(8, -1, -1)) for c in contexts)
    assert not torch.equal(
        contexts[0][0, 0], FuzzyLogic(fixed_inputs="per_seed", seed=1).batch("valid_fixed_context", 8, 0).x[0, 0, :L]
    )


def test_per_batch_fixed_inputs_differ_between_splits_and_the_default_stream_is_unchanged():
    default, per_batch = FuzzyLogic(), FuzzyLogic(fixed_inputs="per_batch")
    valid, ood = (default.batch(s, 8, 0).x[0, -1, :L] for s in ("valid_fixed_query", "ood_fixed_query"))
    assert not torch.equal(valid, ood)
    assert torch.equal(default.batch("ood_fixed_context", 8, 3).x, per_batch.batch("ood_fixed_context", 8, 3).x)


def test_sorted_rule_order_gives_feature_j_the_jth_smallest_rule():
    task = SRaven(rule_order="sorted")
    batch = task.batch("valid_unpermuted", 256, 0)
    rules = batch.info["rules"]
    assert torch.equal(rules, rules.sort(dim=1).values)
    assert torch.equal(rules, task.all_rule_sets[batch.info["rule_set_index"]])
    random_rules = SRaven().batch("valid_unpermuted", 256, 0).info["rules"]
    assert not torch.equal(random_rules, random_rules.sort(dim=1).values)


@pytest.mark.parametrize("rule_order", ["random", "sorted"])
def test_rules_hold_in_every_row_under_either_order(rule_order):
    """The rule of feature f (unpermuted) explains the values of f in every row: constant rows for
    rule 0, +1 progressions for rule 1 (the other rules are checked in test_sraven.py)."""
    task = SRaven(rule_order=rule_order)
    batch = task.batch("ood_unpermuted", 512, 1)
    panels, rules = batch.info["panels"], batch.info["rules"]  # [B, 3, 3, K], [B, K]
    rows = panels.permute(0, 3, 1, 2)  # [B, K, rows, cols]
    constant = rules == 0
    assert (rows[constant] == rows[constant][..., :1]).all()
    plus_one = rules == 1
    assert ((rows[plus_one][..., 1:] - rows[plus_one][..., :-1]) % 8 == 1).all()


def test_options_reach_the_tasks_through_the_config_and_are_checked():
    logic = ExperimentConfig(task="fuzzy_logic", fuzzy_logic=FuzzyLogicConfig(fixed_inputs="per_seed"))
    raven = ExperimentConfig(task="sraven", sraven=SRavenConfig(rule_order="sorted"))
    assert build_task(logic).fixed_inputs == "per_seed"
    assert build_task(raven).rule_order == "sorted"
    with pytest.raises(ConfigError, match="fixed_inputs"):
        FuzzyLogicConfig(fixed_inputs="per_step").validate()
    with pytest.raises(ConfigError, match="rule_order"):
        SRavenConfig(rule_order="lexicographic").validate()
    with pytest.raises(ValueError, match="rule_order"):
        SRaven(rule_order="lexicographic")
