"""The `hyla train | resume | eval | list` subcommands."""

from __future__ import annotations

import argparse
import json
import sys
import time
from dataclasses import replace
from pathlib import Path

from hyla.configs import (
    PRESETS, TASK_DERIVED_MODEL_FIELDS, ConfigError, ExperimentConfig, config_from_dict, config_to_dict,
    describe_mixers,
    get_preset, positive_int, task_names, validate,
)

TRAIN_HELP = """Train a model. Start from a preset (--preset NAME) or a config file (--config
config.json, e.g. from a run folder), then override any field with --section.field VALUE
(e.g. --model.mixer hyla --train.steps 2000 --fuzzy_logic.seq_len 32). --print-config prints the
resolved config and exits. Under `torchrun --nproc_per_node=N` the same command trains data-parallel.
Presets: {presets}."""


def _pop_option(argv: list[str], name: str) -> tuple[str | None, list[str]]:
    """Remove `--name VALUE` / `--name=VALUE` from argv; return (VALUE or None, the rest)."""
    rest, value, i = [], None, 0
    while i < len(argv):
        arg = argv[i]
        if arg == name:
            if i + 1 >= len(argv):
                raise ConfigError(f"{name} needs a value")
            value, i = argv[i + 1], i + 2
            continue
        if arg.startswith(name + "="):
            value = arg.split("=", 1)[1]
        else:
            rest.append(arg)
        i += 1
    return value, rest


def _pop_flag(argv: list[str], name: str) -> tuple[bool, list[str]]:
    return name in argv, [a for a in argv if a != name]


def parse_overrides(base: ExperimentConfig, argv: list[str], prog: str, description: str) -> ExperimentConfig:
    """Apply `--section.field VALUE` overrides to `base` (tyro); unknown keys and bad types exit
    with a message; values are validated (ConfigError)."""
    cfg = _tyro_cli(base, argv, prog, description)
    for name in TASK_DERIVED_MODEL_FIELDS:
        if getattr(cfg.model, name) != getattr(base.model, name):
            raise ConfigError(f"model.{name} is set from the task; change the task's settings instead "
                              f"(e.g. --{cfg.task}.seq_len) ")
    return validate(cfg)


def _tyro_cli(base: ExperimentConfig, argv: list[str], prog: str, description: str) -> ExperimentConfig:
    """tyro's parse, with its boxed error message turned into a ConfigError of one line."""
    import contextlib
    import io

    import tyro

    messages = io.StringIO()
    try:
        with contextlib.redirect_stderr(messages):
            return tyro.cli(ExperimentConfig, default=base, args=argv, prog=prog, description=description)
    except SystemExit as e:
        if e.code:
            lines = [line.strip(" │╭╮╰╯") for line in messages.getvalue().splitlines()]
            lines = [line for line in lines if line.strip("─-") and not line.startswith("For full helptext")]
            text = " ".join(lines[1:])  # the first line is the box's title
            raise ConfigError(f"{text} (see {prog} --help)") from None
        raise


def parse_train_args(argv: list[str]) -> tuple[ExperimentConfig, bool]:
    """(config, print_config) from `hyla train` arguments."""
    preset_name, argv = _pop_option(argv, "--preset")
    config_file, argv = _pop_option(argv, "--config")
    print_config, argv = _pop_flag(argv, "--print-config")
    if preset_name and config_file:
        raise ConfigError("give --preset or --config, not both")
    if config_file:
        try:
            base = config_from_dict(json.loads(Path(config_file).read_text()))
        except (OSError, ValueError) as e:
            raise ConfigError(f"--config {config_file}: {e}") from None
    else:
        base = get_preset(preset_name) if preset_name else ExperimentConfig()
    description = TRAIN_HELP.format(presets=", ".join(PRESETS))
    return parse_overrides(base, argv, "hyla train", description), print_config


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


RESUME_USAGE = """usage: hyla resume RUN [--train.stop_at N] [--train.no-progress] [...]
Continue a run from its latest checkpoint (the previous one if the latest is damaged), exactly:
the run ends as if it had never stopped. Overrides that would change the trained weights (model,
data, optimization, train.steps) are refused. Evaluation, logging and checkpoint settings may
change; threads, device and compile settings too, with a warning (the result is then no longer
bit-identical). A completed run is left as it is."""


def resume_main(argv: list[str]) -> int:
    """hyla resume RUN [--section.field VALUE ...]: continue RUN from its latest checkpoint."""
    from hyla.train.run_dir import RunDir

    if not argv or argv[0].startswith("-"):
        print(RESUME_USAGE, file=sys.stderr)
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    run = RunDir(argv[0])
    saved = run.read_config()
    # the stop_at of the session that stopped is spent: continue to the end unless given again
    base = replace(saved, out_dir=str(run.path.parent), name=run.path.name, resume=True,
                   train=replace(saved.train, stop_at=0))
    cfg = parse_overrides(base, argv[1:], f"hyla resume {run.path}", "Continue a run; overrides apply on top of its config.")
    return _run_training(replace(cfg, resume=True))


def eval_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="hyla eval", description="Re-evaluate a run's latest checkpoint; prints a "
                                     "table and writes eval-step<STEP>.json into the run folder.")
    parser.add_argument("run", help="run folder")
    parser.add_argument("--split", nargs="+", default=None, help="splits to evaluate (default: the task's eval splits)")
    parser.add_argument("--samples", type=positive_int, default=None,
                        help="samples per split (default: train.final_eval_samples)")
    parser.add_argument("--batch-size", type=positive_int, default=None, help="default: train.eval_batch_size")
    parser.add_argument("--device", default="cpu", help="cpu | cuda | cuda:N")
    args = parser.parse_args(argv)

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
    model = model.to(torch.device(args.device))
    results = {}
    for split in splits:
        start = time.perf_counter()
        results[split] = evaluate(model, task, split, samples, batch_size, progress=True)
        print(f"  {split}: {time.perf_counter() - start:.1f}s", file=sys.stderr)
    print(format_table(results, task.metric_name))
    out = Path(args.run) / f"eval-step{step}.json"
    previous = json.loads(out.read_text()) if out.exists() else {}
    merged = {**previous.get("splits", {}), **results}
    write_json(out, {"run": str(args.run), "step": step, "samples": samples, "splits": merged})
    print(f"wrote {out}")
    return 0


def export_main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(
        prog="hyla export", description="Write a run's trained weights as safetensors plus the model config (JSON): "
        "files that load without running code. Load with hyla.Transformer.from_pretrained(OUT).")
    parser.add_argument("run", help="run folder")
    parser.add_argument("--out", default=None, help="output folder (default: RUN/export)")
    args = parser.parse_args(argv)

    from hyla.train import load_run_at_step

    _, model, _, step = load_run_at_step(args.run)
    out = Path(args.out) if args.out else Path(args.run) / "export"
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


def list_main(argv: list[str]) -> int:
    if argv and argv[0] in ("-h", "--help"):
        print("usage: hyla list\nShow the presets, tasks and attention mixers.")
        return 0
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
