"""Typed experiment configuration: the schema and its validation.

One `ExperimentConfig` describes a run completely: which task, its settings, the model, and the
run in small typed sections, each checking itself in `__post_init__`: `train` (what is trained, for
how long, how a step runs), `optim`, `eval`, `log`, `checkpoint` and `analysis`; then the run folder.
Configs of the older flat train section still load (`upgrade_config`, MOVED_FIELDS). The named
presets are in `hyla.train.presets`; `hyla train` starts from one and applies `--section.field value`
overrides on top (parsed in hyla.cli.options; see `hyla train --help`).

Task registry: every field of `ExperimentConfig` whose type is a `TaskConfig` subclass is a task,
selected by `task=<field name>`. Registering a task is therefore one line, e.g.

    text: TextConfig = field(default_factory=TextConfig)

where `TextConfig(TaskConfig)` implements `build(seed) -> Task`.
"""

from __future__ import annotations

import dataclasses
import typing
from dataclasses import asdict, dataclass, field, fields, replace
from typing import Any, Literal

import torch

from hyla.nn.feedforward import FEEDFORWARDS
from hyla.nn.transformer import ModelConfig
from hyla.ops.mixers import ACTIVATIONS, NAMED_MIXERS, NORMALIZATIONS, VALUE_NETWORKS, canonical_mixer_name
from hyla.utils import ConfigError


class TaskConfig:
    """Base of the per-task settings: dataclasses whose fields are the keyword arguments of the task
    class that `hyla.tasks.task_class` files under the name of their ExperimentConfig field (`build_task`)."""

    def validate(self) -> None:
        """Raise ConfigError for invalid values (called before `build_task`)."""


@dataclass
class FuzzyLogicConfig(TaskConfig):
    """In-context fuzzy logic regression (docs/tasks.md)."""

    num_variables: int = 4
    """L: variables per term"""
    num_terms: int = 2
    """K: terms per task"""
    seq_len: int = 16
    """examples per sequence (the last one is the query)"""
    frac_held_out: float = 0.5
    """fraction of the seen-term tasks held out as the `ood` split"""
    frac_unseen_terms: float = 0.25
    """fraction of terms never used for training (the `novel_terms` split)"""
    fixed_inputs: str = "per_batch"
    """where the shared inputs of the *_fixed_context / *_fixed_query analysis splits come from:
    per_batch (drawn with every batch) | per_seed (one draw for all splits and steps, the authors' code)"""

    def validate(self) -> None:
        _check(self.num_variables >= 1, "fuzzy_logic.num_variables", self.num_variables, "must be >= 1")
        _check(self.num_terms >= 1, "fuzzy_logic.num_terms", self.num_terms, "must be >= 1")
        _check(self.seq_len >= 2, "fuzzy_logic.seq_len", self.seq_len, "must be >= 2")
        _check(0.0 <= self.frac_held_out < 1.0, "fuzzy_logic.frac_held_out", self.frac_held_out, "must lie in [0, 1)")
        _check(
            0.0 <= self.frac_unseen_terms < 1.0,
            "fuzzy_logic.frac_unseen_terms",
            self.frac_unseen_terms,
            "must lie in [0, 1)",
        )
        from hyla.tasks.fuzzy_logic import FIXED_INPUTS

        _check_choice("fuzzy_logic.fixed_inputs", self.fixed_inputs, FIXED_INPUTS)


@dataclass
class SRavenConfig(TaskConfig):
    """Symbolic Raven progressive matrices (docs/tasks.md)."""

    num_features: int = 4
    """K: features per panel"""
    num_values: int = 8
    """F: values per feature"""
    grid_size: int = 3
    permute: bool = True
    """permute the features of every grid column (paper default)"""
    frac_ood: float = 0.25
    """fraction of the rule multisets held out as the `ood` split"""
    rule_order: str = "random"
    """how a multiset's rules are assigned to the features: random | sorted (feature j gets the j-th
    smallest rule, the authors' code; matters only on the *_unpermuted analysis splits)"""

    def validate(self) -> None:
        _check(self.num_features >= 1, "sraven.num_features", self.num_features, "must be >= 1")
        _check(
            self.num_values >= 5,
            "sraven.num_values",
            self.num_values,
            "must be >= 5 (below 5 the four progressions are not distinct rules)",
        )
        _check(
            self.grid_size == 3,
            "sraven.grid_size",
            self.grid_size,
            "must be 3 (addition, subtraction and distribute-three are rules over rows of three)",
        )
        _check(0.0 <= self.frac_ood < 1.0, "sraven.frac_ood", self.frac_ood, "must lie in [0, 1)")
        from hyla.tasks.sraven import RULE_ORDERS

        _check_choice("sraven.rule_order", self.rule_order, RULE_ORDERS)


# ============================================================================= language modeling
# (the `text` task: hyla/tasks/text.py; its presets are at the end of the presets section)


@dataclass
class TextConfig(TaskConfig):
    """Language modeling on a text corpus (docs/tasks.md): byte-level BPE, packed windows, next-token NLL."""

    corpus: str = "builtin:python_docs"
    """a text file or folder, builtin:python_docs | builtin:pydoc_topics, or hf:NAME[:CONFIG]
    (e.g. hf:wikitext:wikitext-103-raw-v1, hf:allenai/c4:en; needs pip install 'hyla[hf]')"""
    seq_len: int = 128
    """tokens per training window (the model's context)"""
    vocab_size: int = 6144
    """BPE vocabulary size (the tokenizer is trained on the corpus and cached)"""
    valid_fraction: float = 0.05
    """the last fraction of the text held out for `valid` (hf datasets use their own validation split)"""
    max_chars: int = 0
    """read at most this many characters of the corpus (0: all)"""
    cache_dir: str = ""
    """where tokenizers and token streams are cached (empty: $HYLA_CACHE/text or ~/.cache/hyla/text)"""

    def validate(self) -> None:
        _check(bool(self.corpus), "text.corpus", self.corpus, "must name a corpus")
        _check(self.seq_len >= 1, "text.seq_len", self.seq_len, "must be >= 1")
        _check(self.vocab_size >= 257, "text.vocab_size", self.vocab_size, "must be >= 257 (256 bytes + end-of-text)")
        _check(0.0 < self.valid_fraction < 1.0, "text.valid_fraction", self.valid_fraction, "must lie in (0, 1)")
        _check(self.max_chars >= 0, "text.max_chars", self.max_chars, "must be >= 0")


# ============================================================================= end of language modeling


# How a training step runs (hyla.train.step.choose_update): eagerly, compiled with torch.compile
# (train.compile_mode), or eagerly with the whole step replayed as one CUDA graph (hyla.train.graphed)
StepKind = Literal["eager", "compiled", "graphed"]
# auto: reduce-overhead (inductor with CUDA graphs) on CUDA, default elsewhere (hyla.train.step.resolve_compile_mode)
CompileMode = Literal["auto", "default", "reduce-overhead", "max-autotune", "max-autotune-no-cudagraphs"]
# fp32: float32 matmuls in full precision; tf32: TensorFloat-32 matmuls on CUDA; bf16: autocast to bfloat16
Precision = Literal["fp32", "tf32", "bf16"]
# where attention-dropout masks are drawn: the CPU's generator (the same masks on every device) or the device's
DropoutMaskSource = Literal["cpu", "device"]


@dataclass
class TrainConfig:
    """What is trained, for how long, and how a step runs (the paper presets: docs/paper_fidelity.md)."""

    steps: int = 50_000
    batch_size: int = 128
    """global batch size (split across data-parallel ranks)"""
    stop_at: int = 0
    """> 0: end this session at that step with a checkpoint (resume later with `hyla resume`)"""
    step: StepKind = "eager"
    """eager | compiled | graphed: how each training step runs. compiled: torch.compile the model with
    train.compile_mode (recommended on a GPU; on a CPU it helps HYLA a little and slows the SRAVEN model's
    softmax and linear attention, docs/speed.md; a mode that fails falls back to default, then to eager, with a
    warning). graphed: on CUDA, capture each step (forward, backward, AdamW) as one CUDA graph and replay it,
    without torch.compile (docs/gpu.md); where capture is not possible (a CPU) or fails, training warns once
    and runs eagerly"""
    compile_mode: CompileMode = "auto"
    """the torch.compile mode of train.step compiled; auto: reduce-overhead (CUDA graphs) on CUDA, default elsewhere"""
    precision: Precision = "fp32"
    """fp32 | tf32 (TensorFloat-32 matmuls on CUDA) | bf16 (bfloat16 autocast of the forward and loss; weights and
    optimizer state stay float32); docs/gpu.md says what each does to results"""
    dropout_masks: DropoutMaskSource = "cpu"
    """cpu | device: the generator attention-dropout masks come from (cpu: the same masks on every device;
    device: the training device's, to reproduce runs that drew them there: docs/gpu.md, "Eager HYLA on CUDA")"""
    deterministic: bool = False
    """torch.use_deterministic_algorithms(True)"""
    device: str = "auto"
    """auto | cpu | cuda | cuda:N (auto: cuda if available)"""
    threads: int = 0
    """torch.set_num_threads; 0: the cores this process may use, divided among the ranks on this machine
    (a function of the machine, never of timing: the same command gives the same weights)"""

    def __post_init__(self) -> None:
        """ConfigError for an invalid setting: the counts, how a step runs, the numerics and the device
        (checked whenever a TrainConfig is made: parsed, loaded or replaced)."""
        _check_at_least(1, "train", self, ("steps", "batch_size"))
        _check_at_least(0, "train", self, ("stop_at",))
        _check(self.threads >= 0, "train.threads", self.threads, "must be >= 0 (0: one per core this process may use)")
        for name, kind in (
            ("step", StepKind),
            ("compile_mode", CompileMode),
            ("precision", Precision),
            ("dropout_masks", DropoutMaskSource),
        ):
            _check_choice(f"train.{name}", getattr(self, name), typing.get_args(kind))
        graphed = self.step == "graphed"
        _check(not (graphed and self.precision == "bf16"), "train.step", self.step, "covers fp32 and tf32 only")
        device = self.device.split(":")[0]
        _check_choice("train.device", device, ("auto", "cpu", "cuda"))
        _check(
            self.device.count(":") == 0 or (device == "cuda" and self.device.split(":")[1].isdigit()),
            "train.device",
            self.device,
            "must be auto, cpu, cuda or cuda:N",
        )


@dataclass
class OptimConfig:
    """AdamW and its learning-rate schedule."""

    lr: float = 1e-3
    weight_decay: float = 0.1
    """AdamW decay, applied to tensors with >= 2 dims only"""
    warmup_steps: int = 100
    """linear warmup from 0 to optim.lr, then cosine decay reaching final_lr_fraction * lr at step
    train.steps - warmup_steps (the authors' optax schedule), constant after"""
    final_lr_fraction: float = 0.1
    beta1: float = 0.9
    beta2: float = 0.999
    eps: float = 1e-8

    def __post_init__(self) -> None:
        """ConfigError for an invalid setting (checked whenever an OptimConfig is made)."""
        _check(self.lr > 0, "optim.lr", self.lr, "must be > 0")
        _check(self.weight_decay >= 0, "optim.weight_decay", self.weight_decay, "must be >= 0")
        _check_at_least(0, "optim", self, ("warmup_steps",))
        _check(
            0.0 <= self.final_lr_fraction <= 1.0,
            "optim.final_lr_fraction",
            self.final_lr_fraction,
            "must lie in [0, 1]",
        )
        betas = (self.beta1, self.beta2)
        _check(all(0.0 <= b < 1.0 for b in betas), "optim.beta1/beta2", betas, "must lie in [0, 1)")
        _check(self.eps > 0, "optim.eps", self.eps, "must be > 0")


@dataclass
class EvalConfig:
    """The evaluations of every split along training and at its end."""

    every: int = 1000
    """evaluate every split every this many steps (0: only at the end)"""
    samples: int = 2048
    """samples per split at the periodic evaluations"""
    final_samples: int = 16_000
    """samples per split at the final evaluation"""
    batch_size: int = 1024
    """samples per evaluation batch"""

    def __post_init__(self) -> None:
        """ConfigError for an invalid setting (checked whenever an EvalConfig is made)."""
        _check_at_least(0, "eval", self, ("every",))
        _check_at_least(1, "eval", self, ("samples", "final_samples", "batch_size"))


@dataclass
class LogConfig:
    """Training metrics and where they go besides metrics.jsonl."""

    every: int = 100
    """write training metrics (and check the loss is finite) every this many steps"""
    train_loss_window: int = 100
    """the summary's final training loss is the mean over this many last steps"""
    tensorboard: bool = False
    """also log to TensorBoard (needs the tensorboard package)"""
    wandb: str = ""
    """also log to this Weights & Biases project ("": off; needs the wandb package; WANDB_MODE=offline works)"""
    progress: bool = True
    """show a progress bar"""

    def __post_init__(self) -> None:
        """ConfigError for an invalid setting (checked whenever a LogConfig is made)."""
        _check_at_least(1, "log", self, ("every", "train_loss_window"))


@dataclass
class CheckpointConfig:
    """When a run saves its state (RUN/checkpoints/latest.pt; also at the end and at train.stop_at)."""

    every: int = 1000
    """save a checkpoint every this many steps"""

    def __post_init__(self) -> None:
        """ConfigError for an invalid setting (checked whenever a CheckpointConfig is made)."""
        _check_at_least(1, "checkpoint", self, ("every",))


@dataclass
class AnalysisConfig:
    """The latent-code probes along training (hyla.analysis.analysis_hook, into RUN/analysis/)."""

    every: int = 0
    """> 0: run the probes every this many steps"""
    samples: int = 1024
    """samples per split the probes read"""

    def __post_init__(self) -> None:
        """ConfigError for an invalid setting (checked whenever an AnalysisConfig is made)."""
        _check_at_least(0, "analysis", self, ("every", "samples"))


@dataclass
class ExperimentConfig:
    """A complete run: task, model, training, optimization, evaluation, logging, checkpoints, analysis
    and where to write."""

    task: str = "fuzzy_logic"
    """which task section below is used"""
    fuzzy_logic: FuzzyLogicConfig = field(default_factory=FuzzyLogicConfig)
    sraven: SRavenConfig = field(default_factory=SRavenConfig)
    text: TextConfig = field(default_factory=TextConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    optim: OptimConfig = field(default_factory=OptimConfig)
    eval: EvalConfig = field(default_factory=EvalConfig)
    log: LogConfig = field(default_factory=LogConfig)
    checkpoint: CheckpointConfig = field(default_factory=CheckpointConfig)
    analysis: AnalysisConfig = field(default_factory=AnalysisConfig)
    seed: int = 0
    """seeds the task split, the initialization and the per-step randomness (dropout)"""
    out_dir: str = "runs"
    """parent folder of run folders"""
    name: str = ""
    """run folder name (empty: <preset>-<mixer>-s<seed>-<timestamp>)"""
    preset: str = ""
    """the preset this config started from (recorded by `hyla train --preset`, informative only; not an option)"""
    resume: bool = False
    """continue the run in out_dir/name from its latest checkpoint"""

    @property
    def task_config(self) -> TaskConfig:
        return getattr(self, self.task)


# Settings that may change when a run is resumed: they do not change what the run computes (threads,
# device, how a step runs and precision may change its floating-point rounding: resume warns). Where
# the run lives (out_dir, name) is not a training setting: a run folder may be moved or renamed.
RESUMABLE_CHANGES = (
    "out_dir",
    "name",
    "resume",
    "train.stop_at",
    "train.threads",
    "train.step",
    "train.compile_mode",
    "train.device",
    "train.precision",
    "log.progress",
    "log.tensorboard",
    "log.wandb",
    "log.every",
    "analysis.every",
    "analysis.samples",
    "eval.every",
    "eval.samples",
    "eval.final_samples",
    "eval.batch_size",
    "checkpoint.every",
)


def check_resumable(saved: ExperimentConfig | None, cfg: ExperimentConfig, run: str) -> None:
    """ConfigError when `cfg` differs from `saved`, the config of the run it resumes (None: none
    yet), in settings that change training (all but RESUMABLE_CHANGES)."""
    changed = {k: v for k, v in config_diff(saved, cfg).items() if k not in RESUMABLE_CHANGES} if saved else {}
    if changed:
        lines = "\n".join(f"  {k}: {a!r} in the run, {b!r} now" for k, (a, b) in changed.items())
        raise ConfigError(f"cannot resume {run}: the config differs in settings that change training:\n{lines}")


# Model fields that are properties of the task, filled in by `resolve_model`.
TASK_DERIVED_MODEL_FIELDS = ("input_dim", "seq_len", "output_dim", "num_outputs", "vocab_size", "causal")


def task_names() -> tuple[str, ...]:
    """The registered tasks: the fields of ExperimentConfig holding a TaskConfig."""
    hints = typing.get_type_hints(ExperimentConfig)
    return tuple(
        f.name
        for f in fields(ExperimentConfig)
        if isinstance(hints[f.name], type) and issubclass(hints[f.name], TaskConfig)
    )


def build_task(cfg: ExperimentConfig, device: str | torch.device = "cpu"):
    """The task of `cfg`, generating its batches on `device` (`hyla.tasks.build_task`)."""
    from hyla import tasks

    return tasks.build_task(cfg.task, asdict(cfg.task_config), cfg.seed, device)


def resolve_model(model: ModelConfig, task) -> ModelConfig:
    """The model config with the task's sizes filled in (input size, length, outputs, vocab)."""
    return replace(
        model,
        input_dim=int(getattr(task, "input_dim", 0)),
        seq_len=int(task.seq_len),
        output_dim=int(getattr(task, "output_dim", 1)),
        num_outputs=int(getattr(task, "num_outputs", 1)),
        vocab_size=int(getattr(task, "vocab_size", 0)),
        causal=bool(getattr(task, "causal", False)),
    )


# ----------------------------------------------------------------------------- validation


def _check(ok: bool, name: str, value, requirement: str) -> None:
    if not ok:
        raise ConfigError(f"{name}={value!r} {requirement}")


def _check_at_least(least: int, section: str, settings, names: tuple[str, ...]) -> None:
    """ConfigError naming `section.name` for the first of the `names` of `settings` below `least`."""
    for name in names:
        value = getattr(settings, name)
        _check(value >= least, f"{section}.{name}", value, f"must be >= {least}")


def _check_choice(name: str, value, choices) -> None:
    if value not in choices:
        raise ConfigError(f"{name}={value!r} is not valid; valid choices: {', '.join(map(str, choices))}")


def validate(cfg: ExperimentConfig) -> ExperimentConfig:
    """Check every field; return a copy with the mixer name in its canonical (hyla) form.

    Raises ConfigError naming the field and its valid values.
    """
    _check_choice("task", cfg.task, task_names())
    cfg.task_config.validate()
    _validate_model(cfg.model)
    _check("/" not in cfg.name and cfg.name not in (".", ".."), "name", cfg.name, "must be a plain folder name")
    try:
        mixer = canonical_mixer_name(cfg.model.mixer)
    except ValueError as e:
        raise ConfigError(f"model.mixer: {e}") from None
    return replace(cfg, model=replace(cfg.model, mixer=mixer))


def _validate_model(m: ModelConfig) -> None:
    """Check the model section (the mixer's name: `validate`)."""
    for name, value, choices in (
        ("normalization", m.normalization, NORMALIZATIONS),
        ("value_network", m.value_network, VALUE_NETWORKS),
        ("activation", m.activation, ACTIVATIONS),
    ):
        if value is not None:
            _check_choice(f"model.{name}", value, choices)
    _check_choice("model.feedforward", m.feedforward, FEEDFORWARDS)
    _validate_model_sizes(m)
    _check(0.0 <= m.attention_dropout < 1.0, "model.attention_dropout", m.attention_dropout, "must lie in [0, 1)")


def _validate_model_sizes(m: ModelConfig) -> None:
    """Positive sizes, head dimensions that divide evenly, and a valid mixture of experts."""
    for name in ("num_layers", "dim", "num_heads", "qk_dim", "v_dim", "mlp_dim"):
        _check(getattr(m, name) >= 1, f"model.{name}", getattr(m, name), "must be >= 1")
    for name in ("qk_dim", "v_dim"):
        _check(
            getattr(m, name) % m.num_heads == 0,
            f"model.{name}",
            getattr(m, name),
            f"must be divisible by model.num_heads={m.num_heads}",
        )
    _check(m.num_experts >= 0, "model.num_experts", m.num_experts, "must be >= 0")
    if m.num_experts:
        _check(
            1 <= m.experts_top_k <= m.num_experts,
            "model.experts_top_k",
            m.experts_top_k,
            f"must lie in 1..model.num_experts={m.num_experts}",
        )


# ----------------------------------------------------------------------------- (de)serialization


# Fields that moved out of the flat train section into sections of their own: {old path: new
# path}. A config dict that has them still loads (`upgrade_config`); an option or a sweep entry naming one
# is refused with the new path (hyla.cli.train_args.check_replaced).
MOVED_FIELDS = {
    "train.lr": "optim.lr",
    "train.weight_decay": "optim.weight_decay",
    "train.warmup_steps": "optim.warmup_steps",
    "train.final_lr_fraction": "optim.final_lr_fraction",
    "train.beta1": "optim.beta1",
    "train.beta2": "optim.beta2",
    "train.eps": "optim.eps",
    "train.eval_every": "eval.every",
    "train.eval_samples": "eval.samples",
    "train.final_eval_samples": "eval.final_samples",
    "train.eval_batch_size": "eval.batch_size",
    "train.log_every": "log.every",
    "train.train_loss_window": "log.train_loss_window",
    "train.tensorboard": "log.tensorboard",
    "train.wandb": "log.wandb",
    "train.progress": "log.progress",
    "train.checkpoint_every": "checkpoint.every",
    "train.analysis_every": "analysis.every",
    "train.analysis_samples": "analysis.samples",
}


def config_to_dict(cfg: ExperimentConfig) -> dict[str, Any]:
    return asdict(cfg)


def config_from_dict(data: dict[str, Any], cls: type = ExperimentConfig):
    """Rebuild a (nested) config dataclass from `config_to_dict` output; unknown keys are errors.
    A config of an older layout reads as its current one (`upgrade_config`)."""
    if cls is ExperimentConfig:
        data = upgrade_config(data)
    hints = typing.get_type_hints(cls)
    known = {f.name for f in fields(cls)}
    unknown = sorted(set(data) - known)
    if unknown:
        raise ConfigError(f"unknown {cls.__name__} keys {unknown}; valid: {', '.join(sorted(known))}")
    kwargs = {}
    for name, value in data.items():
        kind = hints[name]
        kwargs[name] = config_from_dict(value, kind) if dataclasses.is_dataclass(kind) else value
    return cls(**kwargs)


def upgrade_config(data: dict[str, Any]) -> dict[str, Any]:
    """A config dict (a run folder's config.json, a run record's or an export's "config", a --config
    file) in the current layout: the fields of its train section that moved (MOVED_FIELDS) in their
    new sections, and a train section written before train.step with its step (`upgrade_train_section`).
    Every record and run folder of an older version reads through here; a current dict is returned as
    it is (`data` is never modified)."""
    train = data.get("train")
    if not isinstance(train, dict):
        return data
    data, train = dict(data), upgrade_train_section(train)
    sections = {}
    for old, new in MOVED_FIELDS.items():
        name = old.removeprefix("train.")
        if name in train:
            section, field_name = new.split(".")
            sections.setdefault(section, {})[field_name] = train[name]
    for section, moved in sections.items():
        data[section] = {**moved, **data.get(section, {})}
    data["train"] = {k: v for k, v in train.items() if f"train.{k}" not in MOVED_FIELDS}
    return data


def upgrade_train_section(data: dict[str, Any]) -> dict[str, Any]:
    """A train section of a config written before train.step (compile: bool, cuda_graph: auto | on |
    off; auto was off) with the step it ran: compiled, graphed (cuda_graph on) or eager."""
    if "compile" not in data and "cuda_graph" not in data:
        return data
    data = dict(data)
    compiled, graphs = data.pop("compile", False), data.pop("cuda_graph", "auto")
    data.setdefault("step", "compiled" if compiled else "graphed" if graphs == "on" else "eager")
    return data


def config_diff(a: ExperimentConfig, b: ExperimentConfig) -> dict[str, tuple[Any, Any]]:
    """{"section.field": (value in a, value in b)} for every leaf that differs."""

    def leaves(d, prefix=""):
        for key, value in d.items():
            if isinstance(value, dict):
                yield from leaves(value, f"{prefix}{key}.")
            else:
                yield f"{prefix}{key}", value

    left, right = dict(leaves(asdict(a))), dict(leaves(asdict(b)))
    return {
        key: (left.get(key), right.get(key))
        for key in sorted(left.keys() | right.keys())
        if left.get(key) != right.get(key)
    }


def describe_mixers() -> list[tuple[str, str, str, str, str]]:
    """(hyla name, authors' name, normalization, value network, activation) of every named mixer."""
    return [
        (name, author, m.normalization, m.value_network, m.activation if m.value_network == "mlp" else "-")
        for name, (author, m) in NAMED_MIXERS.items()
    ]
