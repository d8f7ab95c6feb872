"""`hyla demo`: its options and their parsing (the demo itself: hyla.runs.demo)."""

from __future__ import annotations

import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from tyro.conf import arg

from hyla.cli.options import check_positive, parse_options
from hyla.cli.sweep import run_configs
from hyla.ops.mixers import canonical_mixer_name
from hyla.runs.demo import DEFAULT_MIXERS, DEFAULT_PRESET, demo_sweep, train_overrides, write_outputs
from hyla.runs.launch import run_sweep
from hyla.train.configs import ConfigError
from hyla.train.presets import PRESETS, get_preset


@dataclass
class DemoOptions:
    """Softmax vs linear attention vs HYLA on a CPU-sized fuzzy logic preset: one model per mixer with
    the same data, seed and budget, then a comparison table and training curves. The defaults are
    sized for a few minutes on a small CPU (timings: README.md, "Quick start"). Re-running with the
    same --out skips finished runs and resumes interrupted ones."""

    preset: str = DEFAULT_PRESET
    mixers: list[str] = field(default_factory=lambda: list(DEFAULT_MIXERS))
    """mixer names (hyla or authors')"""
    steps: Annotated[int | None, arg(help_behavior_hint="(default: the preset's)")] = None
    """training steps per model"""
    seed: int = 0
    out: Annotated[Path | None, arg(help_behavior_hint="(default: runs/demo-<timestamp>)")] = None
    """output folder"""
    parallel: int = 0
    """runs trained at the same time, as separate processes (0: all of them; on 2 cores this beats one run at a
    time with 2 threads)"""
    threads: Annotated[int | None, arg(help_behavior_hint="(default: the cores divided by the runs at a time)")] = None
    """threads per run"""
    compile: bool = False
    """torch.compile the models"""
    eval_samples: Annotated[int | None, arg(help_behavior_hint="(default: the preset's)")] = None
    """samples per split at periodic evaluations"""
    final_eval_samples: Annotated[int | None, arg(help_behavior_hint="(default: the preset's)")] = None
    """samples per split at the final evaluation"""
    progress: bool = True
    """progress bars (--no-progress: none; not on a terminal: a line per run once its ETA
    is known, then every 30 s, and at its end)"""

    def __post_init__(self):
        if self.preset not in PRESETS:
            raise ConfigError(f"--preset {self.preset!r} is not valid; valid presets: {', '.join(PRESETS)}")
        check_positive(
            steps=self.steps,
            threads=self.threads,
            eval_samples=self.eval_samples,
            final_eval_samples=self.final_eval_samples,
        )
        if self.parallel < 0:
            raise ConfigError(f"--parallel={self.parallel} must be >= 0")
        try:
            self.mixers = [canonical_mixer_name(m) for m in self.mixers]
        except ValueError as e:
            raise ConfigError(str(e)) from None


def main(argv: list[str]) -> int:
    """`hyla demo [--preset P] [--mixers M ...] [--steps N] [--out DIR] ...`"""
    args = parse_options(DemoOptions, argv, "hyla demo")
    out = Path(args.out or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    base = get_preset(args.preset)
    overrides = train_overrides(
        base, args.steps, args.compile, args.eval_samples, args.final_eval_samples, args.threads
    )
    spec = demo_sweep(args.preset, args.mixers, args.seed, overrides, args.parallel, out)
    run_configs(spec, spec.local_threads())  # every run's config is valid
    steps = spec.overrides.get("train.steps", base.train.steps)
    print(
        f"hyla demo: {', '.join(args.mixers)} on {args.preset} ({base.task}), {steps} steps each, "
        f"{spec.parallel} at a time -> {out}",
        flush=True,
    )

    start = time.perf_counter()
    try:
        codes = run_sweep(spec, progress=args.progress)
    except KeyboardInterrupt:
        print(
            f"\ninterrupted; the runs keep their checkpoints: run `hyla demo --out {out}` with the same "
            "settings to continue",
            file=sys.stderr,
        )
        return 130
    wall = time.perf_counter() - start
    failed = {m: c for m, c in codes.items() if c != 0}
    write_outputs(spec, out, args.preset, steps, args.seed, wall)
    return 1 if failed else 0
