"""`hyla sweep FILE`: its options and their parsing (the sweep file's format and the planning:
hyla.experiments.sweep; launching: hyla.experiments.launch)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated, Literal

import yaml
from tyro.conf import Positional, arg

from hyla.experiments.launch import run_packed_sweep, run_sweep, slurm_executor, submit_sweep
from hyla.experiments.sweep import SweepSpec, print_status
from hyla.train.configs import ConfigError, check_positive, parse_options


@dataclass
class SweepOptions:
    """Train a grid of runs from a sweep file (YAML, see `hyla/experiments/sweep.py`), skipping finished ones:
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
    if args.launcher == "slurm":
        submit_sweep(spec, slurm_executor(spec), args.dry_run)
        return 0
    codes = run_packed_sweep(spec, args.pack, args.dry_run) if args.pack else run_sweep(spec, args.dry_run)
    return 1 if any(codes.values()) else 0
