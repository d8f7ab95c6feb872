"""Tasks by name and from a run's config: what `hyla.load` rebuilds an exported model's task with."""

import inspect
from dataclasses import asdict, fields

import pytest
import torch

from hyla.tasks import FuzzyLogic, build_task, task_class, task_from_config
from hyla.train.configs import ExperimentConfig, config_to_dict, task_names
from hyla.train.presets import get_preset


@pytest.mark.parametrize("name", task_names())
def test_every_setting_of_a_task_section_is_a_keyword_of_its_task_class(name):
    settings = {f.name for f in fields(getattr(ExperimentConfig(), name))}
    keywords = set(inspect.signature(task_class(name)).parameters) - {"seed", "device"}
    assert settings == keywords


def test_a_run_config_gives_the_runs_task_with_its_seed():
    cfg = get_preset("logic_4var_2term")
    config = {**config_to_dict(cfg), "seed": 5}
    task = task_from_config(config)
    direct = FuzzyLogic(**asdict(cfg.fuzzy_logic), seed=5)
    assert type(task) is FuzzyLogic and task.seed == 5 and task.seq_len == cfg.fuzzy_logic.seq_len
    assert torch.equal(task.batch("ood", 8, 3).x, direct.batch("ood", 8, 3).x)
    assert not torch.equal(task.batch("ood", 8, 3).x, task_from_config(config_to_dict(cfg)).batch("ood", 8, 3).x)


def test_unknown_tasks_and_configs_are_refused_in_one_line():
    with pytest.raises(ValueError, match="unknown task 'chess'; known: fuzzy_logic, sraven, text"):
        build_task("chess", {}, seed=0)
    with pytest.raises(ValueError, match="not a hyla run config"):
        task_from_config({"task": "sraven", "sraven": {}})  # no seed
    with pytest.raises(TypeError, match="num_colours"):
        build_task("sraven", {"num_colours": 3}, seed=0)
