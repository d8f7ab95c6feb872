"""The speed ledger's measurements (docs/speed.md): every mechanism beyond the reference, on against
off, as a paired A/B ratio of whole training steps/s on the paper presets, on this machine.

    python benchmarks/bench_ledger.py                          # every mechanism -> benchmarks/results/ledger.json
    python benchmarks/bench_ledger.py --quick                  # a few steps each: checks it runs, measures nothing
    python benchmarks/bench_ledger.py --mechanisms cpp_kernel gelu_tanh --repeats 5
    python benchmarks/bench_ledger.py --off-tree removed_x=/tmp/tree_without_x   # a mechanism removed

Every measurement is a fresh `hyla train` process (batch 128, the mechanism's mixer, compiled or
eager as the mechanism runs in training, `--threads`); its steps/s is the run's summary.json
`steps_per_second` (the first step, with compilation, is not timed) and its peak memory the
process's maximum resident set. "on" is the default; "off" the same command with the mechanism
turned off: by its environment switch (hyla.utils.Switches), by taking it out in the training
process before it starts (`OFF_PATCHES`: an implementation dropped from
`hyla.ops.dispatch.BACKENDS`), or by running another checkout (`--off-tree NAME=DIR`). The sides
alternate (on off on off ...), so a drift of a shared machine's speed falls on both; the ratio
on/off is taken pair by pair and its min / median / max reported, with the memory ratio. Packing is
measured by bench_packed.py (a pack of 8 runs against one run, model-steps/s). The JSON is rewritten
after every row; numbers taken while the machine is busy (`load_average` in the JSON) are not
measurements.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
OUT = ROOT / "benchmarks" / "results" / "ledger.json"
QUICK_OUT = ROOT / "benchmarks" / "results" / "ledger_quick.json"
STEPS = {"logic_4var_2term": 600, "raven_3x3_4features": 120}
QUICK_STEPS = {"logic_4var_2term": 6, "raven_3x3_4features": 4}


@dataclass(frozen=True)
class Mechanism:
    """How to run one mechanism's rows. off_env: the environment that turns it off; off_patch: a
    key of OFF_PATCHES applied in the training process instead; compiled: None follows --eager;
    overrides: extra `hyla train` options per preset (presets without an entry are skipped when
    the dict is not empty); steps: the preset's steps where they differ from STEPS."""

    what: str
    mixer: str = "hyla"
    off_env: dict = field(default_factory=dict)
    off_patch: str | None = None
    compiled: bool | None = None
    overrides: dict = field(default_factory=dict)
    steps: dict = field(default_factory=dict)


MECHANISMS = {
    "cpp_kernel": Mechanism("the C++ HYLA kernel", off_env={"HYLA_CPP_KERNEL": "0"}),
    "cpp_linear": Mechanism(
        "the C++ kernel for multi-head attention", mixer="linear", off_env={"HYLA_CPP_LINEAR": "0"}, compiled=False
    ),
    "adamw_kernel": Mechanism("hyla's AdamW step calling torch's fused kernel", off_env={"HYLA_ADAMW_KERNEL": "0"}),
    "allocator": Mechanism("glibc malloc thresholds", off_env={"HYLA_MALLOC_TUNING": "0"}),
    # a memory mechanism, taken only above STREAM_THRESHOLD (B*T*T*Dv > 2^24): fuzzy logic (Dv = 2) at T = 320
    "streamed": Mechanism(
        "HYLA streamed over key blocks",
        mixer="softmax_hyla",
        off_patch="streamed",
        compiled=False,
        overrides={"logic_4var_2term": ["--fuzzy_logic.seq_len", "320"]},
        steps={"logic_4var_2term": 40},  # at T = 320 a step takes about a second; the row is for memory
    ),
    "gelu_tanh": Mechanism(
        "gelu_tanh as x*sigmoid(2z) under torch.compile", off_env={"HYLA_GELU_SIGMOID": "0"}, compiled=True
    ),
    "gelu_kernel": Mechanism(
        "eager GELU (tanh) as hyla's C++ kernel", off_env={"HYLA_GELU_KERNEL": "0"}, compiled=False
    ),
    "query_pruning": Mechanism(
        "the last block computes the read-out positions only", off_env={"HYLA_QUERY_PRUNING": "0"}
    ),
    "packing": Mechanism("8 runs trained as one vmapped pack (bench_packed.py) against one run"),
}


def _drop_backend(name: str) -> None:
    from hyla.ops import dispatch

    dispatch.BACKENDS[:] = [backend for backend in dispatch.BACKENDS if backend.name != name]


# mechanism -> what takes it out of the training process (run before `hyla train` parses anything)
OFF_PATCHES = {
    "streamed": lambda: _drop_backend("streamed"),
}


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--mechanisms", nargs="*", default=list(MECHANISMS), choices=list(MECHANISMS))
    p.add_argument(
        "--off-tree",
        nargs="*",
        default=[],
        metavar="NAME=DIR",
        help="a mechanism measured against another checkout that lacks it",
    )
    p.add_argument("--presets", nargs="+", default=list(STEPS), choices=list(STEPS))
    p.add_argument("--repeats", type=int, default=3, help="pairs per mechanism and preset")
    p.add_argument("--threads", type=int, default=2)
    p.add_argument("--eager", action="store_true", help="mechanisms that run either way: train without torch.compile")
    p.add_argument("--quick", action="store_true", help="a few steps, one pair: checks that every row runs")
    p.add_argument("--out", type=Path, default=None, help=f"default {OUT.name} ({QUICK_OUT.name} with --quick)")
    args = p.parse_args(argv)
    if args.quick:
        args.repeats = 1
    args.out = args.out or (QUICK_OUT if args.quick else OUT)
    args.steps = QUICK_STEPS if args.quick else STEPS
    return args


def train_command(preset: str, mechanism: Mechanism, args, scratch: str, off_patch: str | None) -> list[str]:
    """A `hyla train` process of the preset's steps, with the mechanism's mixer and compile setting."""
    steps = str(args.steps[preset] if args.quick else mechanism.steps.get(preset, args.steps[preset]))
    compiled = (not args.eager) if mechanism.compiled is None else mechanism.compiled
    options = [
        "--preset",
        preset,
        "--model.mixer",
        mechanism.mixer,
        "--train.steps",
        steps,
        "--eval.every",
        "0",
        "--eval.final_samples",
        "128",
        "--checkpoint.every",
        steps,
        "--train.step",
        "compiled" if compiled else "eager",
        "--train.threads",
        str(args.threads),
        "--log.no-progress",
        "--out_dir",
        scratch,
        "--name",
        "run",
        *mechanism.overrides.get(preset, []),
    ]
    if off_patch:
        return [sys.executable, str(Path(__file__).resolve()), "--train-without", off_patch, "--", *options]
    return [sys.executable, "-m", "hyla.cli", "train", *options]


def run_measured(command: list[str], cwd: Path, env: dict) -> tuple[int, str, int]:
    """Run `command`; (exit status, the end of its stderr, its peak resident memory in KiB)."""
    with tempfile.TemporaryFile("w+") as err:
        process = subprocess.Popen(command, cwd=cwd, env={**os.environ, **env}, stdout=subprocess.DEVNULL, stderr=err)
        _, status, usage = os.wait4(process.pid, 0)
        process.returncode = os.waitstatus_to_exitcode(status)
        err.seek(0)
        return process.returncode, err.read()[-2000:], usage.ru_maxrss


def training_speed(preset: str, mechanism: Mechanism, args, side: str, cwd: Path) -> tuple[float, int, list]:
    """One training process, on or off: (its timed steps/s, its peak memory in KiB, the attention
    implementations it ran as env.json records them)."""
    with tempfile.TemporaryDirectory() as scratch:
        off = side == "off"
        command = train_command(preset, mechanism, args, scratch, mechanism.off_patch if off else None)
        code, stderr, peak = run_measured(command, cwd, mechanism.off_env if off else {})
        if code:
            raise RuntimeError(f"{' '.join(command)} failed:\n{stderr}")
        run = Path(scratch) / "run"
        ran = json.loads((run / "env.json").read_text()).get("numerics", {}).get("attention", [])
        return json.loads((run / "summary.json").read_text())["steps_per_second"], peak, ran


def measure(name: str, preset: str, mechanism: Mechanism, off_cwd: Path, args) -> dict:
    """`args.repeats` pairs (on, off) -> the row of one mechanism and preset."""
    on, off, on_memory, off_memory = [], [], [], []
    for _ in range(args.repeats):
        speed, memory, on_ran = training_speed(preset, mechanism, args, "on", ROOT)
        on.append(speed), on_memory.append(memory)
        speed, memory, off_ran = training_speed(preset, mechanism, args, "off", off_cwd)
        off.append(speed), off_memory.append(memory)
        print(f"{name} {preset}: on {on[-1]:.1f}, off {off[-1]:.1f} steps/s", flush=True)
    ratios = sorted(a / b for a, b in zip(on, off))
    return {
        "mechanism": name,
        "what": mechanism.what,
        "preset": preset,
        "mixer": mechanism.mixer,
        "overrides": mechanism.overrides.get(preset, []),
        "off": mechanism.off_env or mechanism.off_patch or str(off_cwd),
        "on_steps_per_second": on,
        "off_steps_per_second": off,
        "ratio_min": ratios[0],
        "ratio_median": statistics.median(ratios),
        "ratio_max": ratios[-1],
        "on_peak_memory_kib": on_memory,
        "off_peak_memory_kib": off_memory,
        "memory_ratio_median": statistics.median(a / b for a, b in zip(on_memory, off_memory)),
        # what attention ran on each side: a row whose sides ran the same did not exercise the mechanism
        "on_attention_ran": on_ran,
        "off_attention_ran": off_ran,
    }


def measure_packing(preset: str, args) -> dict:
    """bench_packed.py on the preset's CPU-sized sibling: a pack of 8 against one run, model-steps/s."""
    cpu_preset = "logic_cpu" if preset.startswith("logic") else "raven_cpu"
    with tempfile.TemporaryDirectory() as scratch:
        out = Path(scratch) / "packed.json"
        steps, repeats = ("1", "1") if args.quick else ("5", str(max(3, args.repeats)))
        command = [sys.executable, str(ROOT / "benchmarks" / "bench_packed.py"), "--preset", cpu_preset]
        command += ["--sizes", "8", "--threads", str(args.threads), "--steps", steps, "--repeats", repeats]
        code, stderr, _ = run_measured(command + ["--out", str(out)], ROOT / "benchmarks", {})
        if code:
            raise RuntimeError(f"{' '.join(command)} failed:\n{stderr}")
        rows = {row["case"]: row for row in json.loads(out.read_text())["rows"]}
    ratios = sorted(rows["pack of 8"]["vs_solo_per_round"])
    return {
        "mechanism": "packing",
        "what": MECHANISMS["packing"].what,
        "preset": cpu_preset,
        "off": "solo runs",
        "on_steps_per_second": [rows["pack of 8"]["model_steps_per_second"]],
        "off_steps_per_second": [rows["solo"]["model_steps_per_second"]],
        "ratio_min": ratios[0],
        "ratio_median": statistics.median(ratios),
        "ratio_max": ratios[-1],
    }


def rows_of(args):
    """(name, preset, mechanism, off checkout) of every row asked for, in order."""
    cases = [(name, MECHANISMS[name], ROOT) for name in args.mechanisms]
    for spec in args.off_tree:
        name, folder = spec.split("=", 1)
        cases.append((name, Mechanism(f"removed in {folder}"), Path(folder).resolve()))
    for name, mechanism, cwd in cases:
        presets = [p for p in args.presets if not mechanism.overrides or p in mechanism.overrides]
        if name == "packing":
            presets = presets[:1] if args.quick else presets
        for preset in presets:
            yield name, preset, mechanism, cwd


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    rows = []
    for name, preset, mechanism, cwd in rows_of(args):
        rows.append(measure_packing(preset, args) if name == "packing" else measure(name, preset, mechanism, cwd, args))
        write(args, rows)
    for row in rows:
        print(
            f"{row['mechanism']:18} {row['preset']:20} on/off {row['ratio_median']:.3f} "
            f"({row['ratio_min']:.3f}-{row['ratio_max']:.3f})"
            + (f", memory {row['memory_ratio_median']:.2f}" if "memory_ratio_median" in row else "")
        )
    if args.quick:
        print("--quick: a check that every row runs; its numbers are not measurements")
    return 0


def write(args, rows: list[dict]) -> None:
    from hyla.train.run_dir import cpu_name, git_commit

    info = {
        "cpu": cpu_name(),
        "threads": args.threads,
        "git_commit": git_commit(),
        "steps": args.steps,
        "quick": args.quick,
        "load_average": os.getloadavg(),
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps({"machine": info, "rows": rows}, indent=1) + "\n")


def train_without(patch: str, options: list[str]) -> int:
    """The training process of an "off" side: the mechanism taken out, then `hyla train OPTIONS`."""
    from hyla.cli import bound_openmp_waiting
    from hyla.cli import main as hyla_main

    bound_openmp_waiting()  # before torch loads, as the `hyla` command does
    OFF_PATCHES[patch]()
    return hyla_main(["train", *options])


if __name__ == "__main__":
    if sys.argv[1:2] == ["--train-without"]:
        sys.exit(train_without(sys.argv[2], sys.argv[4:]))
    sys.exit(main())
