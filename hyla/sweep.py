"""`hyla sweep FILE`: a grid of runs (preset × grid × seeds), several at once, restartable.

A sweep file (YAML) looks like

    name: table_a1_logic_cpu
    preset: logic_cpu
    out_dir: runs/table_a1_logic_cpu      # default: runs/<name>
    seeds: [0, 1, 2]
    overrides: {train.steps: 3000}        # applied to every run
    grid:                                  # cartesian product; a list of such dicts = their union
      model.mixer: [softmax, linear, hyla]
    parallel: 2                            # runs at once (default: 1)

Every run is a subprocess `hyla train` (or `hyla resume` when a checkpoint exists) writing to
`<out_dir>/<run name>`, with its output in `<out_dir>/<run name>.log`. Completed runs are
skipped, so re-running the same command after an interruption finishes the sweep.
"""

from __future__ import annotations

import argparse
import itertools
import os
import subprocess
import sys
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml
from tqdm import tqdm

SPEC_KEYS = ("name", "preset", "out_dir", "seeds", "overrides", "grid", "parallel")


@dataclass
class Run:
    name: str
    seed: int
    overrides: dict[str, Any]


@dataclass
class SweepSpec:
    name: str
    preset: str
    out_dir: str
    seeds: list[int] = field(default_factory=lambda: [0])
    overrides: dict[str, Any] = field(default_factory=dict)
    grid: list[dict[str, list]] = field(default_factory=lambda: [{}])
    parallel: int = 1

    @staticmethod
    def load(path: str | Path) -> "SweepSpec":
        data = yaml.safe_load(Path(path).read_text()) or {}
        unknown = sorted(set(data) - set(SPEC_KEYS))
        if unknown:
            raise ValueError(f"{path}: unknown keys {unknown}; valid: {', '.join(SPEC_KEYS)}")
        for key in ("name", "preset"):
            if key not in data:
                raise ValueError(f"{path}: missing required key {key!r}")
        grid = data.get("grid") or {}
        grids = grid if isinstance(grid, list) else [grid]
        for g in grids:
            for key, values in g.items():
                if not isinstance(values, list) or not values:
                    raise ValueError(f"{path}: grid.{key} must be a non-empty list, got {values!r}")
        return SweepSpec(
            name=data["name"], preset=data["preset"], out_dir=data.get("out_dir") or f"runs/{data['name']}",
            seeds=list(data.get("seeds", [0])), overrides=dict(data.get("overrides") or {}), grid=grids,
            parallel=int(data.get("parallel", 1)),
        )

    def runs(self) -> list[Run]:
        """Every (seed, grid point), named by the grid values that vary."""
        points = [dict(zip(grid, values)) for grid in self.grid for values in itertools.product(*grid.values())]
        runs, seen = [], set()
        for seed in self.seeds:  # seed-major: a sweep cut short has every configuration at the first seeds
            for point in points:
                label = "__".join(f"{k.split('.')[-1]}-{v}" for k, v in point.items()) or "base"
                name = f"{label}__s{seed}"
                if name not in seen:
                    seen.add(name)
                    runs.append(Run(name, seed, {**self.overrides, **point}))
        return runs


def override_flags(key: str, value: Any) -> list[str]:
    """`hyla train` flags setting one dotted field (booleans are tyro flags: --a.b / --a.no-b)."""
    if isinstance(value, bool):
        section, _, name = key.rpartition(".")
        return [f"--{key}" if value else f"--{section + '.' if section else ''}no-{name}"]
    return [f"--{key}", str(value)]


def run_command(spec: SweepSpec, run: Run, threads: int) -> list[str]:
    """The `hyla` command line that trains (or resumes) one run of the sweep."""
    run_dir = Path(spec.out_dir) / run.name
    hyla = [sys.executable, "-m", "hyla.cli"]
    common = ["--train.no-progress", "--train.threads", str(threads)]
    if (run_dir / "checkpoints" / "latest.pt").exists():
        return hyla + ["resume", str(run_dir)] + common
    args = hyla + ["train", "--preset", spec.preset, "--seed", str(run.seed), "--out_dir", spec.out_dir,
                   "--name", run.name] + common
    for key, value in run.overrides.items():
        args += override_flags(key, value)
    return args


def run_status(run_dir: Path) -> str:
    """completed | partial (has a checkpoint) | new."""
    import json

    summary = run_dir / "summary.json"
    if summary.exists() and json.loads(summary.read_text()).get("status") == "completed":
        return "completed"
    return "partial" if (run_dir / "checkpoints" / "latest.pt").exists() else "new"


def run_sweep(spec: SweepSpec, dry_run: bool = False) -> dict[str, int]:
    """Train every run of the sweep that is not complete; returns {run name: exit code}."""
    out = Path(spec.out_dir)
    out.mkdir(parents=True, exist_ok=True)
    runs = spec.runs()
    todo = [r for r in runs if run_status(out / r.name) != "completed"]
    threads = max(1, (os.cpu_count() or 1) // max(1, spec.parallel))
    print(f"sweep {spec.name}: {len(runs)} runs, {len(runs) - len(todo)} complete, {len(todo)} to run "
          f"({spec.parallel} at once, {threads} threads each) in {out}")
    if dry_run:
        for r in todo:
            print(" ".join(run_command(spec, r, threads)))
        return {}

    def launch(run: Run) -> tuple[str, int]:
        with open(out / f"{run.name}.log", "a") as log:
            code = subprocess.run(run_command(spec, run, threads), stdout=log, stderr=subprocess.STDOUT).returncode
        return run.name, code

    codes = {}
    with ThreadPoolExecutor(max_workers=max(1, spec.parallel)) as pool, tqdm(total=len(todo), unit="run") as bar:
        for name, code in pool.map(launch, todo):
            codes[name] = code
            bar.set_postfix_str(f"{name}: {'ok' if code == 0 else f'exit {code}'}")
            bar.update()
    failed = {n: c for n, c in codes.items() if c != 0}
    if failed:
        print(f"{len(failed)} runs failed (see their .log files): {', '.join(failed)}", file=sys.stderr)
    return codes


def main(argv: list[str]) -> int:
    parser = argparse.ArgumentParser(prog="hyla sweep", description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("spec", help="sweep file (YAML)")
    parser.add_argument("--parallel", type=int, default=None, help="runs at once (overrides the file)")
    parser.add_argument("--out-dir", default=None, help="overrides the file's out_dir")
    parser.add_argument("--dry-run", action="store_true", help="print the commands, run nothing")
    args = parser.parse_args(argv)
    try:
        spec = SweepSpec.load(args.spec)
    except (OSError, ValueError, yaml.YAMLError) as e:
        print(f"hyla sweep: error: {e}", file=sys.stderr)
        return 2
    if args.parallel:
        spec.parallel = args.parallel
    if args.out_dir:
        spec.out_dir = args.out_dir
    codes = run_sweep(spec, args.dry_run)
    return 1 if any(codes.values()) else 0
