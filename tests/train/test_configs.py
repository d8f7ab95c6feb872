"""Configs: presets, CLI overrides on top of a preset, rejection of unknown keys, bad types and values."""

import json
from dataclasses import fields, replace

import pytest

from hyla.cli.train_args import parse_train_args
from hyla.train.configs import (
    AnalysisConfig,
    CheckpointConfig,
    ConfigError,
    EvalConfig,
    ExperimentConfig,
    LogConfig,
    OptimConfig,
    SRavenConfig,
    TaskConfig,
    TrainConfig,
    config_from_dict,
    config_to_dict,
    task_names,
    upgrade_config,
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
    assert (logic.train.steps, logic.optim.lr, logic.optim.weight_decay, logic.optim.warmup_steps) == (
        50_000,
        1e-3,
        0.1,
        100,
    )
    assert logic.fuzzy_logic.seq_len == 16 and logic.fuzzy_logic.frac_held_out == 0.5
    assert logic.model.attention_dropout == 0.1 and not logic.model.bidirectional_position
    raven = get_preset("raven_3x3_4features")
    assert (raven.model.num_layers, raven.model.num_heads, raven.model.qk_dim, raven.model.v_dim) == (4, 16, 64, 64)
    assert (raven.train.steps, raven.optim.warmup_steps, raven.train.batch_size) == (156_250, 1000, 128)
    assert raven.eval.final_samples == 51_200 and logic.eval.final_samples == 16_000


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
        (["--optim.lr"], "--optim.lr"),
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
    assert upgrade_config(data) == data  # the current layout needs no upgrade
    assert {"train", "optim", "eval", "log", "checkpoint", "analysis"} <= data.keys()
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
        (["--train.lr", "1e-3"], "train.lr moved to optim.lr"),
        (["--train.eval-every", "100"], "train.eval_every moved to eval.every"),
        (["--train.final_eval_samples=64"], "train.final_eval_samples moved to eval.final_samples"),
        (["--train.no-progress"], "train.progress moved to log.progress"),
        (["--train.checkpoint_every", "5"], "train.checkpoint_every moved to checkpoint.every"),
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


@pytest.mark.parametrize(
    "section, settings, message",
    [
        (OptimConfig, dict(lr=-1), "optim.lr=-1 must be > 0"),
        (OptimConfig, dict(warmup_steps=-1), "optim.warmup_steps=-1 must be >= 0"),
        (OptimConfig, dict(beta2=1.0), r"optim.beta1/beta2=\(0.9, 1.0\) must lie in \[0, 1\)"),
        (EvalConfig, dict(every=-1), "eval.every=-1 must be >= 0"),
        (EvalConfig, dict(final_samples=0), "eval.final_samples=0 must be >= 1"),
        (LogConfig, dict(every=0), "log.every=0 must be >= 1"),
        (LogConfig, dict(train_loss_window=0), "log.train_loss_window=0 must be >= 1"),
        (CheckpointConfig, dict(every=0), "checkpoint.every=0 must be >= 1"),
        (AnalysisConfig, dict(samples=-1), "analysis.samples=-1 must be >= 0"),
    ],
)
def test_every_section_checks_itself_and_names_the_new_path(section, settings, message):
    with pytest.raises(ConfigError, match=f"^{message}$"):
        section(**settings)
    with pytest.raises(ConfigError, match=f"^{message}$"):
        replace(section(), **settings)


# The train section of a config.json written before the sections (issue 80), every value off its default
OLD_TRAIN = {
    "steps": 900, "batch_size": 32, "lr": 0.002, "weight_decay": 0.05, "warmup_steps": 30,
    "final_lr_fraction": 0.2, "beta1": 0.8, "beta2": 0.99, "eps": 1e-7, "eval_every": 300, "eval_samples": 512,
    "final_eval_samples": 4000, "eval_batch_size": 256, "log_every": 20, "checkpoint_every": 150,
    "train_loss_window": 40, "analysis_every": 450, "analysis_samples": 128, "stop_at": 600, "step": "compiled",
    "compile_mode": "default", "precision": "tf32", "dropout_masks": "device", "deterministic": True,
    "device": "cpu", "threads": 2, "tensorboard": True, "wandb": "project", "progress": False,
}  # fmt: skip


def test_an_old_flat_train_section_loads_as_its_sections():
    """A run folder's config.json, a run record's or an export's config, a --config file of the flat
    layout read as the same settings in their sections; the dict itself is left as it was."""
    old = {**config_to_dict(get_preset("logic_cpu")), "train": dict(OLD_TRAIN)}
    for section in ("optim", "eval", "log", "checkpoint", "analysis"):
        del old[section]
    before = json.dumps(old)
    cfg = config_from_dict(old)
    assert json.dumps(old) == before
    assert cfg.train == TrainConfig(
        steps=900, batch_size=32, stop_at=600, step="compiled", compile_mode="default", precision="tf32",
        dropout_masks="device", deterministic=True, device="cpu", threads=2,
    )  # fmt: skip
    assert cfg.optim == OptimConfig(
        lr=0.002, weight_decay=0.05, warmup_steps=30, final_lr_fraction=0.2, beta1=0.8, beta2=0.99, eps=1e-7
    )
    assert cfg.eval == EvalConfig(every=300, samples=512, final_samples=4000, batch_size=256)
    assert cfg.log == LogConfig(every=20, train_loss_window=40, tensorboard=True, wandb="project", progress=False)
    assert cfg.checkpoint == CheckpointConfig(every=150) and cfg.analysis == AnalysisConfig(every=450, samples=128)
    assert config_from_dict(json.loads(json.dumps(config_to_dict(cfg)))) == cfg  # and round-trips as the new layout
    assert (cfg.model, cfg.fuzzy_logic) == (get_preset("logic_cpu").model, get_preset("logic_cpu").fuzzy_logic)


@pytest.mark.parametrize(
    "entry, message",
    [
        ("train.compile: true", "was replaced by train.step"),
        ("train.cuda_graph: on", "was replaced by train.step"),
        ("train.eval_every: 100", "train.eval_every moved to eval.every"),
        ("train.lr: 0.002", "train.lr moved to optim.lr"),
    ],
)
def test_a_sweep_file_naming_a_replaced_or_moved_field_fails_with_one_line_naming_the_new_one(tmp_path, entry, message):
    from hyla.cli.sweep import run_configs
    from hyla.runs.sweep import SweepSpec

    spec = tmp_path / "old.yaml"
    for where in (f"overrides: {{{entry}}}", f"grid: {{{entry.replace(': ', ': [')}]}}"):
        spec.write_text(f"name: old\npreset: logic_cpu\nseeds: [0]\n{where}\n")
        with pytest.raises(ConfigError, match=f"entry {entry.split(':')[0]}: .*{message}") as exc:
            run_configs(SweepSpec.load(spec), 1)
        assert "\n" not in str(exc.value)
