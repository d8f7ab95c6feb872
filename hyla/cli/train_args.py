"""`hyla train` arguments into an `ExperimentConfig`: a preset or a config file, then
`--section.field VALUE` overrides on top (hyla.train.configs has the schema and its validation,
hyla.train.presets the presets). A sweep's runs are `hyla train` arguments too (hyla.cli.sweep
parses them). The commands' own options: hyla.cli.options."""

from __future__ import annotations

import dataclasses
import json
from dataclasses import dataclass
from pathlib import Path

import tyro

from hyla.cli.options import parse_options
from hyla.train.configs import (
    MOVED_FIELDS,
    TASK_DERIVED_MODEL_FIELDS,
    ConfigError,
    ExperimentConfig,
    config_from_dict,
    validate,
)
from hyla.train.presets import PRESETS, get_preset


@dataclass
class _Overrides(ExperimentConfig):
    """ExperimentConfig as the command line sees it: `preset` is recorded, not an option."""

    preset: tyro.conf.Suppress[str] = ""


# Fields that train.step replaced, and what to set instead. A config that has them still loads
# (hyla.train.configs.upgrade_config, as one with the fields that moved: MOVED_FIELDS); an option or a
# sweep entry naming one is refused.
REPLACED_FIELDS = {"train.compile": "train.step compiled", "train.cuda_graph": "train.step graphed (or eager)"}


def check_replaced(option: str) -> None:
    """ConfigError of one line naming the new setting when `option` (--train.compile, --train.no-compile,
    train.cuda_graph=on, --train.eval-every, train.lr, ...) sets a field that train.step replaced or
    that moved to another section (MOVED_FIELDS: "train.eval_every moved to eval.every")."""
    key = option.split("=")[0].removeprefix("--").replace("-", "_").replace(".no_", ".")
    if key in REPLACED_FIELDS:
        raise ConfigError(f"{key} was replaced by {REPLACED_FIELDS[key]}; train.step: eager | compiled | graphed")
    if key in MOVED_FIELDS:
        raise ConfigError(f"{key} moved to {MOVED_FIELDS[key]}")


def parse_overrides(base: ExperimentConfig, argv: list[str], prog: str, description: str | None) -> ExperimentConfig:
    """Apply `--section.field VALUE` overrides to `base`; invalid keys, types and values (and the
    fields train.step replaced or that moved: `check_replaced`) are ConfigErrors of one line."""
    for arg in argv:
        if arg.startswith("--"):
            check_replaced(arg)
    default = _Overrides(**_shallow(base))
    cfg = ExperimentConfig(**_shallow(parse_options(_Overrides, argv, prog, description, default=default)))
    for name in TASK_DERIVED_MODEL_FIELDS:
        if getattr(cfg.model, name) != getattr(base.model, name):
            raise ConfigError(
                f"model.{name} is set from the task; change the task's settings instead (e.g. --{cfg.task}.seq_len) "
            )
    return validate(cfg)


def _shallow(cfg: ExperimentConfig) -> dict:
    return {f.name: getattr(cfg, f.name) for f in dataclasses.fields(ExperimentConfig)}


TRAIN_HELP = """Train a model. Start from a preset (--preset NAME) or a config file (--config
config.json, e.g. from a run folder), then override any field with --section.field VALUE
(e.g. --model.mixer hyla --train.steps 2000 --optim.lr 3e-4 --fuzzy_logic.seq_len 32). --print-config
prints the resolved config and exits. Under `torchrun --nproc_per_node=N` the same command trains data-parallel.
Presets: {presets}."""


@dataclass
class TrainSource:
    preset: str | None = None
    """start from this preset"""
    config: Path | None = None
    """start from this config file (e.g. a run folder's config.json)"""
    print_config: bool = False
    """print the resolved config and exit"""


def parse_train_args(argv: list[str]) -> tuple[ExperimentConfig, bool]:
    """(config, print_config) from `hyla train` arguments: where to start (--preset or --config),
    then the overrides on top of it."""
    source, overrides = tyro.cli(TrainSource, args=argv, return_unknown_args=True, add_help=False)
    if source.preset and source.config:
        raise ConfigError("give --preset or --config, not both")
    if source.config:
        try:
            base = config_from_dict(json.loads(source.config.read_text()))
        except (OSError, ValueError) as e:
            raise ConfigError(f"--config {source.config}: {e}") from None
    else:
        base = get_preset(source.preset) if source.preset else ExperimentConfig()
    description = TRAIN_HELP.format(presets=", ".join(PRESETS))
    return parse_overrides(base, overrides, "hyla train", description), source.print_config
