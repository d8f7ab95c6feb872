"""`hyla sweep FILE`: its options and their parsing, and the parsing of every run's `hyla train`
arguments (`run_configs`) before anything launches (the sweep file's format and the planning:
hyla.runs.sweep; launching: hyla.runs.launch)."""

from __future__ import annotations

import dataclasses
import re
import typing
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import yaml
from tyro.conf import Positional, arg

from hyla.cli.options import check_positive, parse_options
from hyla.cli.train_args import check_replaced, parse_train_args
from hyla.runs.launch import run_packed_sweep, run_sweep, slurm_executor, submit_sweep
from hyla.runs.sweep import Run, SweepSpec, print_status, train_args
from hyla.train.configs import ConfigError, ExperimentConfig


@dataclass
class SweepOptions:
    """Train a grid of runs from a sweep file (YAML, see `hyla/runs/sweep.py`), skipping finished ones:
    locally, several at once, or as Slurm jobs."""

    spec: Positional[Path]
    """sweep file (YAML)"""
    launcher: Literal["local", "slurm"] = "local"
    """where runs train"""
    status: bool = False
    """show which runs are done, running, pending and failed, and exit"""
    parallel: Annotated[int | None, arg(help_behavior_hint="(default: the file's)")] = None
    """runs at once with the local launcher, or with --pack packs at once, each in its own process"""
    threads: Annotated[int | None, arg(help_behavior_hint="(default: this machine's cores / parallel)")] = None
    """CPU threads of each run or pack; lower it when other work shares the machine"""
    out_dir: Annotated[str | None, arg(help_behavior_hint="(default: the file's)")] = None
    """parent folder of the sweep's run folders"""
    pack: Annotated[int | None, arg(help_behavior_hint="(default: no packs)")] = None
    """train runs that share an architecture as packs of up to N (one batched model each), --parallel packs at
    a time, local launcher"""
    only: list[str] = field(default_factory=list)
    """train (or with --status, show) only the runs whose names match one of these glob patterns, e.g.
    'mixer-hyla__*' or mixer-hyla__s0 (the names --status lists)"""
    dry_run: bool = False
    """print the commands, run nothing"""

    def __post_init__(self):
        check_positive(parallel=self.parallel, threads=self.threads, pack=self.pack)


def main(argv: list[str]) -> int:
    args = parse_options(SweepOptions, argv, "hyla sweep")
    try:
        spec = SweepSpec.load(args.spec)
        spec.select(args.only)
    except (OSError, ValueError, yaml.YAMLError) as e:
        raise ConfigError(f"{args.spec}: {e}") from None
    if args.parallel:
        spec.parallel = args.parallel
    spec.threads = args.threads
    if args.out_dir:
        spec.out_dir = args.out_dir
    if args.status:
        print_status(spec)
        return 0
    if args.pack and args.launcher != "local":
        raise ConfigError("--pack works with the local launcher")
    configs = run_configs(spec, spec.local_threads())  # every run's, before anything launches
    if args.launcher == "slurm":
        submit_sweep(spec, slurm_executor(spec), args.dry_run)
        return 0
    codes = run_packed_sweep(spec, configs, args.pack, args.dry_run) if args.pack else run_sweep(spec, args.dry_run)
    return 1 if any(codes.values()) else 0


def run_configs(spec: SweepSpec, threads: int) -> dict[str, ExperimentConfig]:
    """{run name: its config}, each parsed from the run's `hyla train` arguments and validated;
    ConfigError naming the sweep file and the grid or overrides entry (else the run) that is
    invalid, with the valid choices."""
    configs = {}
    for run in spec.runs():
        for key in run.overrides:
            _check_key(spec, run, key)
        try:
            configs[run.name] = parse_train_args(train_args(spec, run, threads))[0]
        except ConfigError as e:
            raise ConfigError(f"{spec.source}: {_entry(run, str(e))}: {e}") from None
    return configs


def _check_key(spec: SweepSpec, run: Run, key: str) -> None:
    """ConfigError unless `key` names a config field ("section.field"), listing the valid ones (or
    naming the one that replaced it, or where it moved: `check_replaced`)."""
    try:
        check_replaced(key)
    except ConfigError as e:
        raise ConfigError(f"{spec.source}: {_where(run, key)} entry {key}: {e}") from None
    kind, path = ExperimentConfig, []
    for part in key.split("."):
        names = [f.name for f in dataclasses.fields(kind)] if dataclasses.is_dataclass(kind) else []
        if part not in names:
            where = f"fields of {'.'.join(path)}" if path else "sections and fields"
            raise ConfigError(
                f"{spec.source}: {_where(run, key)} entry {key}: unknown key; valid {where}: {', '.join(names)}"
            )
        kind, path = typing.get_type_hints(kind)[part], [*path, part]


def _where(run: Run, key: str) -> str:
    return "grid" if key in run.point else "overrides"


def _entry(run: Run, message: str) -> str:
    """The sweep-file entry that an error message names first, grid entries before overrides (they
    are what differs from the runs that pass), else the run."""
    found = {}
    for key in run.overrides:
        match = re.search(rf"(?<![\w.]){re.escape(key)}(?!\w)", message)
        if match:
            found[key] = (key not in run.point, match.start())
    if not found:
        return f"run {run.name}"
    key = min(found, key=found.get)
    return f"{_where(run, key)} entry {key}: {run.overrides[key]!r} (run {run.name})"
