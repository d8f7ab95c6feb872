"""`hyla demo`: softmax vs linear attention vs HYLA on a CPU-sized fuzzy logic preset.

Trains one model per mixer with the same data, seed and budget, then writes a comparison table
(Markdown + JSON) and the training curves (PNG) into the output folder. Re-running with the same
--out skips finished runs and resumes interrupted ones.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
from dataclasses import dataclass, field, replace
from pathlib import Path

from hyla.configs import PRESETS, ConfigError, check_positive, get_preset, parse_options
from hyla.jsonio import read_jsonl, write_json
from hyla.ops.mixers import canonical_mixer_name
from hyla.plots import plot_curves
from hyla.tables import markdown_table

DEFAULT_PRESET = "logic_cpu"
DEFAULT_MIXERS = ("softmax", "linear", "hyla")
PERCENT_METRICS = ("r2", "acc", "feature_acc")  # shown ×100, as in the paper's tables


@dataclass
class DemoOptions:
    """Softmax vs linear attention vs HYLA on a CPU-sized fuzzy logic preset: one model per mixer with
    the same data, seed and budget, then a comparison table and training curves. About 5 minutes on
    a 2-core CPU with the defaults. Re-running with the same --out skips finished runs and resumes
    interrupted ones."""

    preset: str = DEFAULT_PRESET
    mixers: list[str] = field(default_factory=lambda: list(DEFAULT_MIXERS))
    """mixer names (hyla or authors')"""
    steps: int | None = None
    """training steps per model (default: the preset's)"""
    seed: int = 0
    out: Path | None = None
    """output folder (default: runs/demo-<timestamp>)"""
    parallel: int = 0
    """runs trained at the same time, as separate processes (0: all of them; on 2 cores this beats one run at a
    time with 2 threads)"""
    threads: int | None = None
    """threads per run (default: 1 when runs go in parallel, else one per core)"""
    compile: bool = False
    """torch.compile the models"""
    eval_samples: int | None = None
    """samples per split at periodic evaluations (default: the preset's)"""
    final_eval_samples: int | None = None
    """default: the preset's"""
    progress: bool = True
    """progress bars (--no-progress: none; when the output is not a terminal, one line per finished run)"""

    def __post_init__(self):
        if self.preset not in PRESETS:
            raise ConfigError(f"--preset {self.preset!r} is not valid; valid presets: {', '.join(PRESETS)}")
        check_positive(steps=self.steps, threads=self.threads, eval_samples=self.eval_samples,
                       final_eval_samples=self.final_eval_samples)
        if self.parallel < 0:
            raise ConfigError(f"--parallel={self.parallel} must be >= 0")
        try:
            self.mixers = [canonical_mixer_name(m) for m in self.mixers]
        except ValueError as e:
            raise ConfigError(str(e)) from None


def main(argv: list[str]) -> int:
    args = parse_options(DemoOptions, argv, "hyla demo")
    out = Path(args.out or f"runs/demo-{time.strftime('%Y%m%d-%H%M%S')}")
    base = get_preset(args.preset)
    train_cfg = base.train
    if args.steps is not None:
        scale = args.steps / train_cfg.steps
        train_cfg = replace(train_cfg, steps=args.steps, warmup_steps=min(train_cfg.warmup_steps, max(1, args.steps // 10)),
                            eval_every=max(1, round(train_cfg.eval_every * scale)),
                            log_every=max(1, min(train_cfg.log_every, args.steps // 10 or 1)),
                            checkpoint_every=max(1, round(train_cfg.checkpoint_every * scale)))
    if args.eval_samples is not None:
        train_cfg = replace(train_cfg, eval_samples=args.eval_samples)
    if args.final_eval_samples is not None:
        train_cfg = replace(train_cfg, final_eval_samples=args.final_eval_samples)
    parallel = args.parallel or len(args.mixers)
    threads = args.threads if args.threads is not None else (1 if parallel > 1 else 0)
    train_cfg = replace(train_cfg, threads=threads, compile=args.compile, progress=False)
    configs = {mixer: replace(base, seed=args.seed, out_dir=str(out), name=mixer, train=train_cfg,
                              model=replace(base.model, mixer=mixer)) for mixer in args.mixers}
    print(f"hyla demo: {', '.join(args.mixers)} on {args.preset} ({base.task}), {train_cfg.steps} steps each, "
          f"{parallel} at a time -> {out}")

    start = time.perf_counter()
    try:
        codes = run_all(configs, out, parallel, progress=args.progress)
    except KeyboardInterrupt:
        print(f"\ninterrupted; the runs keep their checkpoints: run `hyla demo --out {out}` with the same "
              "settings to continue", file=sys.stderr)
        return 130
    wall = time.perf_counter() - start
    failed = {m: c for m, c in codes.items() if c != 0}
    for mixer, code in failed.items():
        print(f"{mixer}: training exited with code {code}; see {out / (mixer + '.log')}", file=sys.stderr)

    rows = collect_rows(out, args.mixers)
    metric = rows[0]["metric_name"] if rows else "r2"
    table = comparison_table(rows, metric)
    reading = describe_ordering(rows, metric)
    note = (f"{parallel} runs trained at a time, {threads if threads > 0 else 'auto'} thread(s) each; steps/s is "
            "each run's own rate under that sharing." if parallel > 1 else "")
    report = {"preset": args.preset, "steps": train_cfg.steps, "seed": args.seed, "wall_time_s": wall,
              "parallel": parallel, "metric": metric, "rows": rows, "reading": reading,
              "load_average": os.getloadavg()}
    write_json(out / "demo.json", report)
    (out / "demo.md").write_text(f"# hyla demo: {args.preset}, {train_cfg.steps} steps, seed {args.seed}\n\n"
                                 f"{table}\n\n{reading}\n\n{note}\nTotal wall time {wall:.0f} s.\n")
    plot_curves(out / "curves.png", {m: [read_jsonl(out / m / "metrics.jsonl")] for m in args.mixers}, metric)
    print("\n" + table + "\n\n" + reading + ("\n" + note if note else ""))
    print(f"\nwrote {out / 'demo.md'}, {out / 'demo.json'}, {out / 'curves.png'} ({wall:.0f} s)")
    return 1 if failed else 0


def run_all(configs: dict, out: Path, parallel: int, progress: bool = True) -> dict[str, int]:
    """Train every config (skipping finished runs, resuming interrupted ones), `parallel` at a time
    as `hyla train` subprocesses; progress is read from each run's metrics.jsonl."""
    from hyla.configs import config_to_dict
    from hyla.train.run_dir import RunDir

    out.mkdir(parents=True, exist_ok=True)
    pending, running, codes = list(configs), {}, {}
    bars = RunProgress({mixer: cfg.train.steps for mixer, cfg in configs.items()}, progress)
    try:
        while pending or running:
            while pending and len(running) < parallel:
                mixer = pending.pop(0)
                run = RunDir(out / mixer)
                if run.read_summary().get("status") == "completed":
                    codes[mixer] = 0
                    bars.finished(mixer, configs[mixer].train.steps, 0)
                    continue
                config_file = out / f"{mixer}.config.json"
                write_json(config_file, config_to_dict(configs[mixer]))
                command = [sys.executable, "-m", "hyla.cli"] + (
                    ["resume", str(run.path)] if run.checkpoint_file.exists() else ["train", "--config", str(config_file)])
                log = open(out / f"{mixer}.log", "a")
                running[mixer] = (subprocess.Popen(command, stdout=log, stderr=subprocess.STDOUT), log)
            time.sleep(0.5)
            for mixer in list(running):
                process, log = running[mixer]
                bars.update(mixer, last_train_step(out / mixer))
                if process.poll() is not None:
                    codes[mixer] = process.returncode
                    log.close()
                    del running[mixer]
                    bars.finished(mixer, last_train_step(out / mixer), process.returncode)
    except KeyboardInterrupt:
        # the children got the same Ctrl-C (same process group): let them checkpoint and exit
        for process, log in running.values():
            try:
                process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.terminate()
            log.close()
        raise
    finally:
        bars.close()
    return codes


class RunProgress:
    """One progress bar per run on a terminal. Elsewhere (a log file, CI) bars redrawn in place
    would garble the output, so each run gets one line when it finishes instead."""

    def __init__(self, total_steps: dict[str, int], enabled: bool = True):
        self.as_lines = enabled and not sys.stderr.isatty()
        self.bars = {}
        if enabled and not self.as_lines:
            from tqdm.auto import tqdm

            self.bars = {mixer: tqdm(total=total, desc=f"{mixer:>8}", position=position, unit="step",
                                     dynamic_ncols=True, leave=True)
                         for position, (mixer, total) in enumerate(total_steps.items())}

    def update(self, mixer: str, step: int) -> None:
        bar = self.bars.get(mixer)
        if bar is not None and step > bar.n:
            bar.update(step - bar.n)

    def finished(self, mixer: str, step: int, code: int) -> None:
        self.update(mixer, step)
        if self.as_lines:
            outcome = "finished" if code == 0 else f"exited with code {code}"
            print(f"{mixer}: {outcome} at step {step}", file=sys.stderr, flush=True)

    def close(self) -> None:
        for bar in self.bars.values():
            bar.close()


def last_train_step(run: Path) -> int:
    """The step of the last training record in run/metrics.jsonl (0 if none)."""
    try:
        lines = (run / "metrics.jsonl").read_text().splitlines()
    except OSError:
        return 0
    for line in reversed(lines):
        if '"split": "train"' in line:
            try:
                return json.loads(line)["step"]
            except json.JSONDecodeError:  # the line being written right now
                continue
    return 0


def collect_rows(out: Path, mixers: list[str]) -> list[dict]:
    rows = []
    for mixer in mixers:
        summary_file = out / mixer / "summary.json"
        if not summary_file.exists():
            continue
        s = json.loads(summary_file.read_text())
        rows.append({"mixer": mixer, "status": s["status"], "metric_name": s["metric_name"],
                     "final": s.get("final", {}), "train_loss": s.get("train_loss"),
                     "steps_per_second": s.get("steps_per_second"), "wall_time_s": s.get("wall_time_s"),
                     "num_parameters": s.get("num_parameters")})
    return rows


def _value(row: dict, split: str, metric: str) -> float | None:
    return row["final"].get(split, {}).get(metric)


def comparison_table(rows: list[dict], metric: str) -> str:
    """One row per mixer: the final metric per split, training loss, speed, wall time and status."""
    splits = [s for s in ("valid", "ood", "novel_terms") if any(_value(r, s, metric) is not None for r in rows)]
    scale = 100 if metric in PERCENT_METRICS else 1
    unit = " ×100" if scale == 100 else ""
    header = ["mixer"] + [f"{s} {metric}{unit}" for s in splits] + ["final train loss", "steps/s", "wall s", "status"]
    cells = []
    for r in rows:
        row = [r["mixer"]]
        row += [f"{scale * v:.2f}" if (v := _value(r, s, metric)) is not None else "–" for s in splits]
        row.append(f"{r['train_loss']:.4g}" if r["train_loss"] is not None else "–")
        row.append(f"{r['steps_per_second']:.1f}" if r["steps_per_second"] else "–")
        row.append(f"{r['wall_time_s']:.0f}" if r["wall_time_s"] else "–")
        row.append(r["status"])
        cells.append(row)
    return markdown_table(header, cells)


def describe_ordering(rows: list[dict], metric: str) -> str:
    """One honest sentence per split: the mixers ordered by the metric (whatever the order is)."""
    lower_is_better = metric in ("nll", "loss", "mse")
    lines = []
    for split in ("ood", "valid"):
        scored = [(r["mixer"], v) for r in rows if (v := _value(r, split, metric)) is not None]
        if len(scored) < 2:
            continue
        scored.sort(key=lambda mv: mv[1], reverse=not lower_is_better)
        lines.append(f"{split} {metric}: " + " > ".join(f"{m} ({v:.3f})" for m, v in scored)
                     + (" (lower is better)" if lower_is_better else ""))
    losses = sorted((r["train_loss"], r["mixer"]) for r in rows if r["train_loss"] is not None)
    if len(losses) >= 2:
        lines.append("final training loss: " + " < ".join(f"{m} ({v:.4g})" for v, m in losses))
    return "\n".join(lines)
