"""The `hyla train | resume | eval | export | list` subcommands (options parsed by tyro)."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path

import tyro
from tyro.conf import Positional

from hyla.configs import (
    PRESETS, TASK_DERIVED_MODEL_FIELDS, ConfigError, ExperimentConfig, config_from_dict, config_to_dict,
    check_positive, describe_mixers, get_preset, parse_options, task_names, validate,
)

TRAIN_HELP = """Train a model. Start from a preset (--preset NAME) or a config file (--config
config.json, e.g. from a run folder), then override any field with --section.field VALUE
(e.g. --model.mixer hyla --train.steps 2000 --fuzzy_logic.seq_len 32). --print-config prints the
resolved config and exits. Under `torchrun --nproc_per_node=N` the same command trains data-parallel.
Presets: {presets}."""


@dataclass
class TrainSource:
    preset: str | None = None
    """start from this preset"""
    config: Path | None = None
    """start from this config file (e.g. a run folder's config.json)"""
    print_config: bool = False
    """print the resolved config and exit"""


def parse_overrides(base: ExperimentConfig, argv: list[str], prog: str, description: str) -> ExperimentConfig:
    """Apply `--section.field VALUE` overrides to `base`; invalid keys, types and values are
    ConfigErrors."""
    cfg = parse_options(ExperimentConfig, argv, prog, description, default=base)
    for name in TASK_DERIVED_MODEL_FIELDS:
        if getattr(cfg.model, name) != getattr(base.model, name):
            raise ConfigError(f"model.{name} is set from the task; change the task's settings instead "
                              f"(e.g. --{cfg.task}.seq_len) ")
    return validate(cfg)


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


def _run_training(cfg: ExperimentConfig) -> int:
    from hyla.train import NonFiniteLossError, train

    hook = None
    if cfg.train.analysis_every:
        from hyla.analysis import analysis_hook as hook
    try:
        path = train(cfg, hook)
    except NonFiniteLossError as e:
        print(f"hyla: {e}", file=sys.stderr)
        return 1
    print(path)
    return 0


def train_main(argv: list[str]) -> int:
    cfg, print_config = parse_train_args(argv)
    if print_config:
        from hyla.configs import build_task, resolve_model

        cfg = replace(cfg, model=resolve_model(cfg.model, build_task(cfg)))
        print(json.dumps(config_to_dict(cfg), indent=2))
        return 0
    return _run_training(cfg)


RESUME_HELP = """Continue RUN from its latest checkpoint (the previous one if the latest is damaged),
exactly: the run ends as if it had never stopped. Overrides go on top of the run's config; those
that would change the trained weights (model, data, optimization, train.steps) are refused.
Evaluation, logging and checkpoint settings may change; threads, device, compile and precision settings too,
with a warning (the result is then no longer bit-identical). A completed run is left as it is."""


def resume_main(argv: list[str]) -> int:
    """hyla resume RUN [--section.field VALUE ...]: continue RUN from its latest checkpoint."""
    from hyla.train.run_dir import RunDir

    if not argv or argv[0].startswith("-"):
        print(f"usage: hyla resume RUN [--train.stop_at N] [--train.no-progress] [...]\n\n{RESUME_HELP}")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    run = RunDir(os.path.abspath(argv[0]))
    saved = run.read_config()
    # the folder given is the run, wherever it lives now; the stop_at of the session that stopped is
    # spent: continue to the end unless given again
    base = replace(saved, out_dir=str(run.path.parent), name=run.path.name, resume=True,
                   train=replace(saved.train, stop_at=0))
    cfg = parse_overrides(base, argv[1:], f"hyla resume {argv[0]}", RESUME_HELP)
    named = Path(os.path.abspath(RunDir.for_config(cfg).path))
    if named != run.path:
        raise ConfigError(f"--out_dir/--name name {named}, not the run given ({run.path}); to resume that "
                          f"folder: hyla resume {named}")
    return _run_training(replace(cfg, resume=True))


@dataclass
class EvalOptions:
    """Re-evaluate a run's latest checkpoint: prints a table and writes eval-step<STEP>-n<SAMPLES>.json into the
    run folder (the splits of earlier calls with the same options are kept; other options are refused)."""

    run: Positional[Path]
    """run folder"""
    split: list[str] | None = None
    """splits to evaluate (default: the task's evaluation splits)"""
    samples: int | None = None
    """samples per split (default: the run's train.final_eval_samples)"""
    batch_size: int | None = None
    """default: the run's train.eval_batch_size"""
    device: str = "cpu"
    """cpu | cuda | cuda:N"""

    def __post_init__(self):
        check_positive(samples=self.samples, batch_size=self.batch_size)


def eval_main(argv: list[str]) -> int:
    args = parse_options(EvalOptions, argv, "hyla eval")
    import torch

    from hyla.train import evaluate, load_run_at_step
    from hyla.train.run_dir import write_json

    cfg, model, task, step = load_run_at_step(args.run)
    splits = args.split or list(task.eval_splits)
    for split in splits:
        try:
            task.check_split(split)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    samples = args.samples or cfg.train.final_eval_samples
    batch_size = args.batch_size or cfg.train.eval_batch_size
    out = args.run / f"eval-step{step}-n{samples}.json"
    options = {"run": str(args.run), "step": step, "samples": samples, "batch_size": batch_size, "device": args.device}
    previous = _earlier_evaluation(out, options)
    model = model.to(torch.device(args.device))
    results = {}
    for split in splits:
        start = time.perf_counter()
        results[split] = evaluate(model, task, split, samples, batch_size, progress=True)
        print(f"  {split}: {time.perf_counter() - start:.1f}s", file=sys.stderr)
    print(format_table(results, task.metric_name))
    write_json(out, {**options, "splits": {**previous, **results}})
    print(f"wrote {out}")
    return 0


def _earlier_evaluation(out: Path, options: dict) -> dict:
    """The splits already in `out` (an earlier `hyla eval`), or ConfigError when it used other options."""
    if not out.exists():
        return {}
    try:
        earlier = json.loads(out.read_text())
    except ValueError:
        raise ConfigError(f"{out} is damaged; remove it to evaluate again") from None
    differ = [f"--{k.replace('_', '-')} {earlier.get(k)}" for k in ("batch_size", "device")
              if earlier.get(k) != options[k]]
    if differ:
        raise ConfigError(f"{out} holds results of {', '.join(differ)}; pass the same options, or move it away")
    return earlier.get("splits", {})


@dataclass
class ExportOptions:
    """Write a run's trained weights as safetensors plus the model config (JSON): files that load
    without running code. Load them with hyla.Transformer.from_pretrained(OUT)."""

    run: Positional[Path]
    """run folder"""
    out: Path | None = None
    """output folder (default: RUN/export); one that is not empty is refused"""


def export_main(argv: list[str]) -> int:
    args = parse_options(ExportOptions, argv, "hyla export")
    from hyla.train import load_run_at_step

    out = args.out or args.run / "export"
    if out.exists() and (not out.is_dir() or any(out.iterdir())):
        raise FileExistsError(f"{out} exists (an earlier export?); remove it or choose another --out")
    _, model, _, step = load_run_at_step(args.run)
    model.save_pretrained(out)
    print(f"wrote {out} (weights of step {step})")
    return 0


def format_table(results: dict[str, dict[str, float]], metric_name: str) -> str:
    """Markdown table, one row per split, the headline metric first."""
    from hyla.tables import markdown_table

    names = [metric_name] + sorted({k for m in results.values() for k in m} - {metric_name})
    return markdown_table(["split", *names], [[split, *(_fmt(metrics.get(n)) for n in names)]
                                              for split, metrics in results.items()])


def _fmt(value) -> str:
    return "-" if value is None else f"{value:.4f}" if isinstance(value, float) else str(value)


@dataclass
class ListOptions:
    """Show the presets, tasks and attention mixers."""


def list_main(argv: list[str]) -> int:
    parse_options(ListOptions, argv, "hyla list")
    print("presets (hyla train --preset NAME):")
    width = max(map(len, PRESETS))
    for name, fn in PRESETS.items():
        doc = (fn.__doc__ or "").strip().splitlines()[0] if fn.__doc__ else ""
        print(f"  {name:<{width}}  {doc}")
    print(f"\ntasks (--task NAME): {', '.join(task_names())}")
    print("\nmixers (--model.mixer NAME, hyla or authors' name; --model.normalization/value_network/activation "
          "override the axes):")
    rows = [("hyla name", "authors' name", "normalization", "value_network", "activation")] + describe_mixers()
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for row in rows:
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0
