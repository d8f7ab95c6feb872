"""Configs: presets, CLI overrides on top of a preset, rejection of unknown keys, bad types and values."""

import json
from dataclasses import fields, replace

import pytest

from hyla.cli.train_args import parse_train_args
from hyla.train.configs import (
    ConfigError,
    ExperimentConfig,
    SRavenConfig,
    TaskConfig,
    TrainConfig,
    config_from_dict,
    config_to_dict,
    task_names,
    validate,
)
from hyla.train.presets import PRESETS, get_preset


def test_every_preset_is_valid():
    for name in PRESETS:
        cfg = validate(get_preset(name))
        assert cfg.preset == name and cfg.task in task_names()


def test_paper_presets_follow_the_spec():
    logic = get_preset("logic_4var_2term")
    assert (
        logic.model.num_layers,
        logic.model.dim,
        logic.model.num_heads,
        logic.model.qk_dim,
        logic.model.mlp_dim,
    ) == (2, 128, 8, 16, 256)
    assert (logic.train.steps, logic.train.lr, logic.train.weight_decay, logic.train.warmup_steps) == (
        50_000,
        1e-3,
        0.1,
        100,
    )
    assert logic.fuzzy_logic.seq_len == 16 and logic.fuzzy_logic.frac_held_out == 0.5
    assert logic.model.attention_dropout == 0.1 and not logic.model.bidirectional_position
    raven = get_preset("raven_3x3_4features")
    assert (raven.model.num_layers, raven.model.num_heads, raven.model.qk_dim, raven.model.v_dim) == (4, 16, 64, 64)
    assert (raven.train.steps, raven.train.warmup_steps, raven.train.batch_size) == (156_250, 1000, 128)
    assert raven.train.final_eval_samples == 51_200 and logic.train.final_eval_samples == 16_000


def test_overrides_apply_on_top_of_the_preset():
    cfg, _ = parse_train_args(
        [
            "--preset",
            "logic_4var_2term",
            "--model.mixer",
            "linear_hypatt",
            "--train.steps",
            "7",
            "--fuzzy_logic.seq-len",
            "32",
            "--train.step",
            "compiled",
            "--seed",
            "2",
        ]
    )
    assert cfg.model.mixer == "hyla"  # authors' name canonicalized
    assert cfg.train.steps == 7 and cfg.fuzzy_logic.seq_len == 32 and cfg.train.step == "compiled" and cfg.seed == 2
    assert cfg.model.num_heads == 8 and cfg.preset == "logic_4var_2term"  # untouched preset values stay


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model.mixer", "softmx"], "valid names"),
        (["--model.normalization", "rms"], "rms_head"),
        (["--model.activation", "swish"], "silu"),
        (["--model.feedforward", "mlp"], "gelu_mlp"),
        (["--task", "vision"], "fuzzy_logic"),
        (["--train.steps", "0"], "train.steps"),
        (["--train.compile_mode", "fast"], "reduce-overhead"),
        (["--train.step", "graph"], "graphed"),
        (["--train.device", "tpu"], "cuda"),
        (["--model.qk_dim", "10"], "divisible"),
        (["--model.seq_len", "64"], "set from the task"),
        (["--preset", "nope"], "logic_4var_2term"),
    ],
)
def test_invalid_values_are_rejected_with_the_choices(argv, message):
    with pytest.raises(ConfigError, match=message):
        parse_train_args(argv)


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--model.mixr", "hyla"], "Unrecognized options: --model.mixr"),
        (["--train.steps", "many"], "Error parsing --train.steps"),
        (["--train.lr"], "--train.lr"),
    ],
)
def test_unknown_keys_and_bad_types_are_config_errors(argv, message):
    with pytest.raises(ConfigError, match=message) as exc:
        parse_train_args(argv)
    assert "\n" not in str(exc.value)


def test_config_json_round_trip_and_unknown_keys():
    cfg = get_preset("raven_cpu")
    data = json.loads(json.dumps(config_to_dict(cfg)))
    assert config_from_dict(data) == cfg
    data["train"]["stepz"] = 3
    with pytest.raises(ConfigError, match="stepz"):
        config_from_dict(data)


def test_task_registry_is_the_task_fields():
    default = ExperimentConfig()
    sections = {f.name for f in fields(default) if isinstance(getattr(default, f.name), TaskConfig)}
    assert set(task_names()) == sections and {"fuzzy_logic", "sraven", "text"} <= sections
    assert not {"model", "train"} & set(task_names())
    for name in task_names():
        cfg = ExperimentConfig(task=name)
        assert cfg.task_config is getattr(cfg, name)  # the section that `task` names, no other
    raven = ExperimentConfig(task="sraven", sraven=SRavenConfig(num_features=3))
    assert type(raven.task_config) is SRavenConfig and raven.task_config.num_features == 3


@pytest.mark.parametrize(
    "old, step",
    [
        ({"compile": True, "compile_mode": "default", "cuda_graph": "auto"}, "compiled"),
        ({"compile": False, "cuda_graph": "on"}, "graphed"),
        ({"compile": False, "cuda_graph": "auto"}, "eager"),
        ({"compile": False}, "eager"),
    ],
)
def test_a_config_from_before_train_step_loads_as_its_step(old, step):
    """A run folder's config.json (or a run record's config) written with train.compile and
    train.cuda_graph reads as the step it trained with."""
    data = config_to_dict(get_preset("logic_cpu"))
    del data["train"]["step"]
    data["train"].update(old)
    cfg = config_from_dict(data)
    assert cfg.train.step == step and cfg == replace(get_preset("logic_cpu"), train=replace(cfg.train, step=step))


@pytest.mark.parametrize(
    "argv, message",
    [
        (["--train.compile"], "train.compile was replaced by train.step compiled"),
        (["--train.no-compile"], "train.compile was replaced by train.step compiled"),
        (["--train.cuda_graph", "on"], "train.cuda_graph was replaced by train.step graphed"),
        (["--train.cuda-graph=on"], "train.cuda_graph was replaced by train.step graphed"),
    ],
)
def test_the_options_train_step_replaced_fail_with_one_line_naming_it(argv, message):
    with pytest.raises(ConfigError, match=message) as exc:
        parse_train_args(["--preset", "logic_cpu", *argv])
    assert "\n" not in str(exc.value)


@pytest.mark.parametrize(
    "settings, message",
    [
        (dict(steps=0), "train.steps=0 must be >= 1"),
        (dict(step="graphed", precision="bf16"), "train.step='graphed' covers fp32 and tf32 only"),
        (dict(precision="fp16"), "train.precision='fp16' is not valid; valid choices: fp32, tf32, bf16"),
        (dict(device="tpu"), "train.device"),
    ],
)
def test_a_train_section_checks_itself_when_made(settings, message):
    with pytest.raises(ConfigError, match=message):
        TrainConfig(**settings)
    with pytest.raises(ConfigError, match=message):
        replace(TrainConfig(), **settings)


@pytest.mark.parametrize("entry", ["train.compile: true", "train.cuda_graph: on"])
def test_a_sweep_file_naming_a_replaced_field_fails_with_one_line_naming_train_step(tmp_path, entry):
    from hyla.cli.sweep import run_configs
    from hyla.runs.sweep import SweepSpec

    spec = tmp_path / "old.yaml"
    spec.write_text(f"name: old\npreset: logic_cpu\nseeds: [0]\noverrides: {{{entry}}}\n")
    with pytest.raises(ConfigError, match=f"entry {entry.split(':')[0]}: .* was replaced by train.step") as exc:
        run_configs(SweepSpec.load(spec), 1)
    assert "\n" not in str(exc.value)
