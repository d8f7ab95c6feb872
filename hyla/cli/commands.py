"""The `hyla train | resume | eval | export | list | sample` subcommands (options parsed by tyro)."""

from __future__ import annotations

import json
import os
import sys
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Annotated

from tyro.conf import Positional, arg

from hyla.cli.folders import claim_output_folder, is_export, record_inputs
from hyla.cli.options import check_positive, parse_options
from hyla.cli.train_args import parse_overrides, parse_train_args
from hyla.train.configs import ConfigError, ExperimentConfig, config_to_dict, describe_mixers, task_names
from hyla.train.presets import PRESETS


def _run_training(cfg: ExperimentConfig) -> int:
    from hyla.train import NonFiniteLossError, train
    from hyla.train.distributed import torchrun_env

    hook = None
    if cfg.analysis.every:
        from hyla.analysis import analysis_hook as hook
    try:
        path = train(cfg, hook)
    except NonFiniteLossError as e:
        print(f"hyla: {e}", file=sys.stderr)
        return 1
    curves = write_curves(path) if torchrun_env().rank == 0 else None  # (rank 0 writes the files)
    if curves is not None:
        print(f"curves: {curves}")
    print(path)
    return 0


def write_curves(run_dir: Path) -> Path | None:
    """The run's training loss and its metric on each evaluation split against the step
    (hyla.analysis.plots, as `hyla demo` draws them), as RUN/curves.png; None without a record."""
    from hyla.analysis.plots import plot_curves
    from hyla.train.run_dir import RunDir

    run = RunDir(run_dir)
    summary = run.read_summary()
    return plot_curves(run.path / "curves.png", {summary["mixer"]: [run.read_metrics()]}, summary["metric_name"])


def train_main(argv: list[str]) -> int:
    cfg, print_config = parse_train_args(argv)
    if print_config:
        from hyla.train.configs import build_task, resolve_model

        cfg = replace(cfg, model=resolve_model(cfg.model, build_task(cfg)))
        print(json.dumps(config_to_dict(cfg), indent=2))
        return 0
    return _run_training(cfg)


RESUME_HELP = """Continue RUN from its latest checkpoint (the previous one if the latest is damaged),
exactly: the run ends as if it had never stopped. Overrides go on top of the run's config; those
that would change the trained weights (model, data, optimization, train.steps) are refused.
Evaluation, logging and checkpoint settings may change; threads, device, compile and precision settings too,
with a warning (the result is then no longer bit-identical). A completed run is left as it is."""


def relative_run_path(given: str) -> Path:
    """A run folder as the run's config and messages name it: relative where given relative (`.` in
    the folder itself is `../<name>`), so that a committed or moved run names no path of this machine."""
    path = Path(given)
    if path.is_absolute():
        return path
    resolved = Path(os.path.abspath(path))
    return Path(os.path.relpath(resolved.parent)) / resolved.name


def resume_main(argv: list[str]) -> int:
    """hyla resume RUN [--section.field VALUE ...]: continue RUN from its latest checkpoint."""
    from hyla.train.run_dir import RunDir

    if not argv or argv[0].startswith("-"):
        print(f"usage: hyla resume RUN [--train.stop_at N] [--log.no-progress] [...]\n\n{RESUME_HELP}")
        return 0 if argv and argv[0] in ("-h", "--help") else 2
    run = RunDir(relative_run_path(argv[0]))
    saved = run.read_config()
    # the folder given is the run, wherever it lives now; the stop_at of the session that stopped is
    # spent: continue to the end unless given again
    base = replace(
        saved, out_dir=str(run.path.parent), name=run.path.name, resume=True, train=replace(saved.train, stop_at=0)
    )
    cfg = parse_overrides(base, argv[1:], f"hyla resume {argv[0]}", RESUME_HELP)
    named = Path(os.path.abspath(RunDir.for_config(cfg).path))
    if named != Path(os.path.abspath(run.path)):
        raise ConfigError(
            f"--out_dir/--name name {named}, not the run given ({run.path}); to resume that folder: hyla resume {named}"
        )
    return _run_training(replace(cfg, resume=True))


@dataclass
class EvalOptions:
    """Re-evaluate a run's latest checkpoint, or an exported model: prints a table and writes
    eval-step<STEP>-n<SAMPLES>.json (-b<BATCH SIZE>, -o<OFFSET> and -<DEVICE> join the name when not the
    run's evaluation batch size, 0 and the CPU) into the run folder, or for an exported model into
    ./eval-<its name>/ (never into the model); the splits of earlier calls with the same options are kept.
    Without --offset it reads the samples the run's own evaluations read (the start of each split's
    stream): a repeat, not an independent sample; --offset past them draws new ones."""

    run: Positional[Path]
    """run folder or exported model"""
    split: Annotated[list[str] | None, arg(help_behavior_hint="(default: the task's evaluation splits)")] = None
    """splits to evaluate"""
    samples: Annotated[int | None, arg(help_behavior_hint="(default: the run's eval.final_samples)")] = None
    """samples per split"""
    batch_size: Annotated[int | None, arg(help_behavior_hint="(default: the run's eval.batch_size)")] = None
    """evaluation batch size"""
    offset: int = 0
    """samples of each split's stream to skip first, a multiple of the batch size: 0 re-reads the
    run's own evaluation samples; its eval.final_samples rounded up to whole batches (16384 for
    16,000 in batches of 1024) or more gives samples no recorded evaluation read"""
    device: str = "cpu"
    """cpu | cuda | cuda:N"""
    out: Annotated[Path | None, arg(help_behavior_hint="(default: see above)")] = None
    """folder for the JSON"""
    overwrite: bool = False
    """write into an output folder that holds the outputs of another model (its inputs.json names it),
    first moving those aside to FOLDER.replaced-N"""

    def __post_init__(self):
        check_positive(samples=self.samples, batch_size=self.batch_size)
        if self.offset < 0:
            raise ConfigError(f"--offset={self.offset} must be >= 0")


def eval_main(argv: list[str]) -> int:
    args = parse_options(EvalOptions, argv, "hyla eval")
    import torch

    from hyla.tasks.evaluation import fresh_offset
    from hyla.train import evaluate, load_run_at_step
    from hyla.train.run_dir import write_json

    cfg, model, task, step, source = load_run_at_step(args.run)
    splits = args.split or list(task.eval_splits)
    for split in splits:
        try:
            task.check_split(split)
        except ValueError as e:
            raise ConfigError(str(e)) from None
    samples = args.samples or cfg.eval.final_samples
    batch_size = args.batch_size or cfg.eval.batch_size
    if args.offset % batch_size:
        fresh = fresh_offset(args.offset, batch_size)
        raise ConfigError(f"--offset {args.offset} is not a multiple of the batch size {batch_size}; try {fresh}")
    folder = args.out or (Path(f"eval-{args.run.resolve().name}") if is_export(args.run) else args.run)
    claim_output_folder(folder, [args.run], args.overwrite)
    name = eval_file_name(step, samples, batch_size, cfg.eval.batch_size, args.device, args.offset)
    out = folder / name
    options = {
        "run": str(args.run),
        "step": step,
        "samples": samples,
        "batch_size": batch_size,
        "offset": args.offset,
        "device": args.device,
    }
    previous = _earlier_evaluation(out, options)
    record_inputs(folder, [args.run])
    model = model.to(torch.device(args.device))
    results = {}
    for split in splits:
        start = time.perf_counter()
        results[split] = evaluate(model, task, split, samples, batch_size, progress=True, offset=args.offset)
        print(f"  {split}: {time.perf_counter() - start:.1f}s", file=sys.stderr)
    print(format_table(results, task.metric_name))
    write_json(out, {**options, "source": source, "splits": {**previous, **results}})
    print(f"wrote {out}")
    return 0


def eval_file_name(step: int, samples: int, batch_size: int, run_batch_size: int, device: str, offset: int = 0) -> str:
    """`eval-step<STEP>-n<SAMPLES>[-b<BATCH SIZE>][-o<OFFSET>][-<DEVICE>].json`: the batch size when not
    the run's eval.batch_size, the device when not the CPU (either may change the last digits),
    the offset when not 0 (other samples)."""
    batch = f"-b{batch_size}" if batch_size != run_batch_size else ""
    skipped = f"-o{offset}" if offset else ""
    where = f"-{device.replace(':', '')}" if device != "cpu" else ""
    return f"eval-step{step}-n{samples}{batch}{skipped}{where}.json"


def _earlier_evaluation(out: Path, options: dict) -> dict:
    """The splits already in `out` (an earlier `hyla eval`), or ConfigError when it used other options."""
    if not out.exists():
        return {}
    try:
        earlier = json.loads(out.read_text())
    except ValueError:
        raise ConfigError(f"{out} is damaged; remove it to evaluate again") from None
    differ = [
        f"--{k.replace('_', '-')} {earlier.get(k)}" for k in ("batch_size", "device") if earlier.get(k) != options[k]
    ]
    if differ:
        raise ConfigError(f"{out} holds results of {', '.join(differ)}; pass the same options, or move it away")
    return earlier.get("splits", {})


@dataclass
class ExportOptions:
    """Write a run's trained weights as safetensors plus the model config (JSON), files that load
    without running code, and manifest.json: their sha256, the run's config, environment and summary,
    the step and the commit. Load them with hyla.Transformer.from_pretrained(OUT); hyla analyze and
    hyla interventions take OUT in place of the run folder."""

    run: Positional[Path]
    """run folder"""
    out: Annotated[Path | None, arg(help_behavior_hint="(default: RUN/export)")] = None
    """output folder; one that is not empty is refused"""


def export_main(argv: list[str]) -> int:
    args = parse_options(ExportOptions, argv, "hyla export")
    from hyla.runs.export import export_run

    out = args.out or args.run / "export"
    manifest = export_run(args.run, out)
    print(f"wrote {out} (weights of step {manifest['step']}, with manifest.json)")
    return 0


def format_table(results: dict[str, dict[str, float]], metric_name: str) -> str:
    """Markdown table, one row per split, the headline metric first."""
    from hyla.analysis.tables import markdown_table

    names = [metric_name] + sorted({k for m in results.values() for k in m} - {metric_name})
    return markdown_table(
        ["split", *names], [[split, *(_fmt(metrics.get(n)) for n in names)] for split, metrics in results.items()]
    )


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
    print(
        "\nmixers (--model.mixer NAME, hyla or authors' name; --model.normalization/value_network/activation "
        "override the axes):"
    )
    rows = [("hyla name", "authors' name", "normalization", "value_network", "activation")] + describe_mixers()
    widths = [max(len(r[i]) for r in rows) for i in range(5)]
    for row in rows:
        print("  " + "  ".join(cell.ljust(w) for cell, w in zip(row, widths)).rstrip())
    return 0


@dataclass
class SampleOptions:
    """Continue a prompt with a trained language model (a run of the `text` task), decoding with a key/value cache."""

    run: Positional[Path]
    """the run folder"""
    prompt: str = ""
    """text to continue (empty: start a new document)"""
    tokens: int = 100
    """tokens to generate"""
    temperature: float = 0.8
    """0 = greedy"""
    top_k: Annotated[int | None, arg(help_behavior_hint="(default: all tokens)")] = None
    """sample among the k most likely tokens"""
    seed: int = 0
    device: str = "cpu"
    """cpu | cuda | cuda:N"""

    def __post_init__(self):
        check_positive(tokens=self.tokens, top_k=self.top_k)


def sample_main(argv: list[str]) -> int:
    """`hyla sample RUN --prompt TEXT [--tokens N --temperature T --top-k K --seed S --device D]`."""
    from hyla.nn.generate import sample_text
    from hyla.train import load_run

    args = parse_options(SampleOptions, argv, "hyla sample")
    cfg, model, task = load_run(args.run, task="text")
    try:
        text, stats = sample_text(
            model.to(args.device),
            task,
            args.prompt,
            args.tokens,
            temperature=args.temperature,
            top_k=args.top_k,
            seed=args.seed,
        )
    except ValueError as error:
        print(f"hyla sample: error: {error}", file=sys.stderr)
        return 2
    m = model.cfg
    print(args.prompt + text)
    head_dims = m.qk_dim // m.num_heads + m.v_dim // m.num_heads  # a key and a value per head
    element = next(model.parameters()).element_size()
    cached = stats.cache_bytes // (m.num_layers * m.num_heads * head_dims * element)
    print(
        f"\n[{cfg.model.mixer}: {stats.prompt_tokens} prompt + {stats.new_tokens} new tokens; key/value cache at most "
        f"{stats.cache_bytes:,} bytes = {m.num_layers} layers x 1 sequence x {cached} tokens x {m.num_heads} heads x "
        f"({m.qk_dim // m.num_heads} + {m.v_dim // m.num_heads}) dims (key + value) x {element} bytes; "
        f"context {m.seq_len} tokens, window slides: {stats.window_slides}]",
        file=sys.stderr,
    )
    return 0
