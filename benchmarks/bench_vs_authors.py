"""Side by side: hyla's training against the authors' JAX code, steps/s on the same machine.

    python benchmarks/bench_vs_authors.py --authors /tmp/authors --jax-python /tmp/jaxvenv/bin/python
    python benchmarks/bench_vs_authors.py                          # hyla only (no --authors)
    python benchmarks/bench_vs_authors.py --authors A --device cuda --packs 1 3 8 16 --parallel-packs 2x8 4x8

Both paper presets (fuzzy logic `logic_4var_2term`, SRAVEN `raven_3x3_4features`), batch 128, HYLA
(`--model.mixer hyla`; the authors' `linear_hypatt`). Every measurement is a fresh process that
trains `--steps` steps:
- hyla: the `hyla train` command, eager, with `--train.step compiled` (`--compile-mode`, default
  auto: CUDA graphs on CUDA) and/or `graphed` (`--train.step graphed`: the eager step replayed as
  one CUDA graph, hyla.train.graphed); steps/s is the run's summary.json `steps_per_second` (its first
  step, which includes compilation, is not timed).
- authors: their `run.setup` (model, data, optax optimizer exactly as their `run.py` builds them,
  from their ml_collections config), then their jitted `Experiment.train_step` on their data
  loader in a loop; steps/s over steps 2..N, from the end of the first step (compilation) to the
  end of the last one (`jax.block_until_ready`). A driver, generated at run time in a temporary
  folder, imports their modules; their files are not modified.
- packs (`--packs`): N runs of seeds 0..N-1 trained as one pack (eager; with `--packs-cuda-graph`,
  replayed as CUDA graphs, for the processes x packs too); reported as aggregate model-steps/s (N x
  the pack's steps/s).
- processes x packs (`--parallel-packs PxN`): `hyla sweep --pack N --parallel P` over P*N seeds, P
  processes each training a pack of N at once; aggregate model-steps/s is the sum over the runs of
  their summaries' rates (each process's rate over its own timed steps, so the processes' start-up
  is not counted; `wall_model_steps_per_second` divides all model-steps by the command's wall time,
  start-up and compilation included, a lower bound).
`--smoke`: the same measurements at toy sizes (3 steps, hyla at batch 16), for a CPU check.

Order: per repeat, per preset, every hyla variant then the authors (A B A B ...), so slow drift of
a shared machine's load falls on both; each hyla measurement is divided by the authors'
measurement of the same repeat, and the ratios' min / median / max are reported. Both sides are
pinned to the same `--threads` cores (when fewer than the process may use) and hyla uses that many
intra-op threads. The models' parameter counts are compared (they must match at the paper presets).
JSON (commands, versions, machine, load average, every measurement) goes to
benchmarks/results/vs_authors_<device>.json, one entry of its "runs" per setting (threads,
OMP_WAIT_POLICY, GOMP_SPINCOUNT, glibc's MALLOC_* variables, mixer, presets, steps, modes, compile mode, packs,
processes x packs, smoke; a new run of the same setting replaces the old one), rewritten after
every measurement.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results"
# hyla preset -> the authors' config file and dataset name (their `--config FILE:DATA;MIXER`)
AUTHORS_CONFIGS = {
    "logic_4var_2term": ("configs/logic.py", "logic_4var_2term"),
    "raven_3x3_4features": ("configs/raven.py", "raven_3x3_4features"),
}
AUTHORS_MIXERS = {"hyla": "linear_hypatt", "softmax": "softmax_attention", "linear": "linear_attention"}
# Steps per measurement: on the 2-core CPU ~25 s of the authors' code and ~5 s of hyla's compiled
# training, long enough that a burst of load on a shared machine does not decide a measurement
DEFAULT_STEPS = {"logic_4var_2term": 1000, "raven_3x3_4features": 100}

# The authors' side, run by --jax-python with the authors' checkout as working directory: their run
# module, imported as experiments/authors_curve.py does (empty stand-ins for the wandb, TensorFlow
# and WikiText imports that a logic or SRAVEN run does not use).
AUTHORS_DRIVER = r"""
import json, sys, time
authors, config_arg, steps, experiments = sys.argv[1], sys.argv[2], int(sys.argv[3]), sys.argv[4]
sys.path.insert(0, experiments)
from authors_curve import import_authors
run = import_authors(authors)
import flax, jax, optax
from absl import flags

flags.FLAGS(["run.py", "--config=" + config_arg])
config = flags.FLAGS.config
exp = run.setup(config, logger=[], callbacks=[])
state = exp.reset(jax.random.PRNGKey(config.seed))
batches = iter(exp.train_loader)
start = time.perf_counter()
state, metrics = exp.train_step(state, next(batches))
jax.block_until_ready(metrics["loss"])
first_step_s = time.perf_counter() - start
start = time.perf_counter()
for _ in range(steps - 1):
    state, metrics = exp.train_step(state, next(batches))
jax.block_until_ready((state, metrics))
elapsed = time.perf_counter() - start
print(json.dumps({
    "steps_per_second": (steps - 1) / elapsed, "first_step_s": first_step_s, "loss": float(metrics["loss"]),
    "num_parameters": int(sum(x.size for x in jax.tree_util.tree_leaves(state.params["params"]))),
    "batch_size": config.batch_size, "seq_len": config.data.seq_len, "backend": jax.default_backend(),
    "devices": [str(d) for d in jax.devices()],
    "versions": {"python": sys.version.split()[0], "jax": jax.__version__, "flax": flax.__version__,
                 "optax": optax.__version__}}))
"""


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument(
        "--authors", type=Path, help="checkout of github.com/smonsays/hypernetwork-attention (omitted: hyla only)"
    )
    parser.add_argument(
        "--jax-python",
        default=sys.executable,
        help="python with jax, flax, optax, chex, ml_collections, einops (default: this one)",
    )
    parser.add_argument("--presets", nargs="+", default=list(AUTHORS_CONFIGS), choices=list(AUTHORS_CONFIGS))
    parser.add_argument("--mixer", default="hyla", choices=list(AUTHORS_MIXERS))
    parser.add_argument("--modes", nargs="+", default=["eager", "compiled"], choices=["eager", "compiled", "graphed"])
    parser.add_argument(
        "--compile-mode",
        default="auto",
        help="hyla's --train.compile-mode for the compiled "
        "variant (auto: reduce-overhead, i.e. CUDA graphs, on CUDA; default on CPU)",
    )
    parser.add_argument("--packs", nargs="*", type=int, default=[], help="pack sizes (hyla.train.train_packed)")
    parser.add_argument(
        "--packs-cuda-graph",
        action="store_true",
        help="packs and processes x packs replay their steps as CUDA graphs (--train.step graphed)",
    )
    parser.add_argument(
        "--parallel-packs",
        nargs="*",
        type=processes_by_pack,
        default=[],
        metavar="PxN",
        help="P processes each training a pack of N at once (hyla sweep --pack N --parallel P)",
    )
    parser.add_argument(
        "--smoke", action="store_true", help="toy sizes for a quick CPU check: 3 steps, 1 repeat, hyla at batch 16"
    )
    parser.add_argument("--steps", type=int, help=f"steps per measurement (default: {DEFAULT_STEPS})")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    parser.add_argument(
        "--threads",
        type=int,
        default=len(os.sched_getaffinity(0)),
        help="cores for each process and hyla's intra-op threads (default: all usable)",
    )
    parser.add_argument("--out", type=Path, help="JSON (default: benchmarks/results/vs_authors_<device>.json)")
    parser.add_argument("--pack-worker", nargs=argparse.REMAINDER, help=argparse.SUPPRESS)
    args = parser.parse_args(argv)
    if args.smoke:
        args.steps, args.repeats = args.steps or 3, 1
    if args.steps is not None and args.steps < 2:
        parser.error("--steps must be >= 2 (the first step is not timed)")
    if args.threads < 1:
        parser.error("--threads must be >= 1")
    if args.authors is not None and not (args.authors / "run.py").is_file():
        parser.error(f"--authors {args.authors}: no run.py there (expected their repository's checkout)")
    return args


def pinned(threads: int):
    """preexec_fn pinning a child process to `threads` of this process's cores (None: all of them)."""
    cores = sorted(os.sched_getaffinity(0))
    if threads >= len(cores):
        return None
    return lambda: os.sched_setaffinity(0, cores[:threads])


def run_child(command: list[str], threads: int, cwd: Path, env: dict | None = None) -> tuple[str, float]:
    """Run a measurement process; return its stdout and wall time. Fails with its stderr's tail."""
    start = time.perf_counter()
    done = subprocess.run(
        command,
        cwd=cwd,
        env={**os.environ, **(env or {})},
        preexec_fn=pinned(threads),
        capture_output=True,
        text=True,
        check=False,
    )
    wall = time.perf_counter() - start
    if done.returncode:
        tail = "\n".join(done.stderr.strip().splitlines()[-15:])
        raise RuntimeError(f"{' '.join(command)} failed (exit {done.returncode}):\n{tail}")
    return done.stdout, wall


def processes_by_pack(text: str) -> tuple[int, int]:
    """ "PxN" -> (P, N), both >= 1."""
    parts = text.lower().split("x")
    if len(parts) != 2 or not all(p.isdigit() and int(p) >= 1 for p in parts):
        raise argparse.ArgumentTypeError(f"expected PxN (processes x pack size, e.g. 4x8), got {text!r}")
    return int(parts[0]), int(parts[1])


def hyla_settings(args: argparse.Namespace, steps: int, packed: bool = False) -> dict:
    """The `hyla train` settings of one measurement: `steps` steps, no evaluation but a minimal
    final one, one checkpoint at the end (`--smoke`: batch 16); `packed`: of a pack."""
    settings = {
        "model.mixer": args.mixer,
        "train.steps": steps,
        "eval.every": 0,
        "eval.final_samples": 128,
        "eval.batch_size": 128,
        "checkpoint.every": steps,
        "train.device": args.device,
    }
    if args.smoke:
        settings.update({"train.batch_size": 16, "eval.final_samples": 16})
    if packed and args.packs_cuda_graph:
        settings["train.step"] = "graphed"
    return settings


def hyla_flags(args: argparse.Namespace, preset: str, steps: int, out_dir: Path, packed: bool = False) -> list[str]:
    """`hyla train` options of one measurement (run folder `out_dir/run`)."""
    from hyla.runs.sweep import override_flags

    settings = hyla_settings(args, steps, packed)
    flags = [flag for key, value in settings.items() for flag in override_flags(key, value)]
    return [
        "--preset",
        preset,
        *flags,
        "--train.threads",
        str(args.threads),
        "--log.no-progress",
        "--out-dir",
        str(out_dir),
        "--name",
        "run",
    ]


def sweep_file(args: argparse.Namespace, preset: str, steps: int, runs: int, out_dir: Path) -> Path:
    """A sweep of `runs` seeds of the measurement's settings, its runs in `out_dir`."""
    spec = {
        "name": out_dir.name,
        "preset": preset,
        "out_dir": str(out_dir),
        "seeds": list(range(runs)),
        "overrides": hyla_settings(args, steps, packed=True),
    }
    path = out_dir.with_suffix(".yaml")
    path.write_text(json.dumps(spec))  # JSON is YAML
    return path


def hyla_command(args: argparse.Namespace, preset: str, variant: str, steps: int, out_dir: Path) -> list[str]:
    """The process of one measurement: "eager", "compiled", "pack<N>" or "<P>x<N>" (hyla sweep)."""
    if "x" in variant:
        processes, size = processes_by_pack(variant)
        spec = sweep_file(args, preset, steps, processes * size, out_dir)
        return [sys.executable, "-m", "hyla.cli", "sweep", str(spec), "--pack", str(size), "--parallel", str(processes)]
    flags = hyla_flags(args, preset, steps, out_dir, packed=variant.startswith("pack"))
    if variant.startswith("pack"):
        return [sys.executable, str(Path(__file__).resolve()), "--pack-worker", variant[4:], *flags]
    mode = {
        "compiled": ["--train.step", "compiled", "--train.compile-mode", args.compile_mode],
        "graphed": ["--train.step", "graphed"],
    }
    return [sys.executable, "-m", "hyla.cli", "train", *flags, *mode.get(variant, [])]


def measure_hyla(args: argparse.Namespace, preset: str, variant: str, steps: int, scratch: Path) -> dict:
    """One hyla measurement: steps/s of a single run, or aggregate model-steps/s of packs."""
    from hyla.train.run_dir import RunDir

    out_dir = scratch / f"{preset}-{variant}-{time.monotonic_ns()}"
    command = hyla_command(args, preset, variant, steps, out_dir)
    _, wall = run_child(command, args.threads, ROOT)
    members = sorted(out_dir.glob("*/summary.json"))
    summaries = [json.loads(path.read_text()) for path in members]
    if not summaries or any(s["status"] != "completed" for s in summaries):
        raise RuntimeError(f"{' '.join(command)}: the runs did not complete ({[s['status'] for s in summaries]})")
    env = json.loads((members[0].parent / "env.json").read_text())
    return {
        "side": "hyla",
        "preset": preset,
        "variant": variant,
        "command": portable_command(command),
        "process_wall_s": wall,
        # every member of a pack records the pack's rate: the sum is the aggregate model-steps/s
        "steps_per_second": sum(s["steps_per_second"] for s in summaries),
        "wall_model_steps_per_second": len(summaries) * steps / wall,
        "numerics": env["numerics"],
        "num_parameters": summaries[0]["num_parameters"],
        "train_loss": summaries[0]["train_loss"],
        "batch_size": RunDir(members[0].parent).read_config_dict()["train"]["batch_size"],
        "run_wall_time_s": summaries[0]["wall_time_s"],
        "members": len(summaries),
    }


def pack_worker(argv: list[str]) -> int:
    """--pack-worker N <hyla train options>: train N runs (seeds 0..N-1) of those options as one pack."""
    from dataclasses import replace

    from hyla.cli.train_args import parse_train_args
    from hyla.train import train_packed

    size, flags = int(argv[0]), argv[1:]
    cfg, _ = parse_train_args(flags)
    train_packed([replace(cfg, seed=i, name=f"m{i}") for i in range(size)])
    return 0


def portable_command(command: list[str]) -> list[str]:
    """The command as the committed report keeps it: no absolute path of this machine."""
    from hyla.utils import portable_path

    return [portable_path(part) if os.path.isabs(part) else part for part in command]


def measure_authors(args: argparse.Namespace, preset: str, steps: int, driver: Path) -> dict:
    config_file, data = AUTHORS_CONFIGS[preset]
    config_arg = f"{config_file}:{data};{AUTHORS_MIXERS[args.mixer]}"
    command = [
        args.jax_python,
        str(driver),
        str(args.authors.resolve()),
        config_arg,
        str(steps),
        str(ROOT / "experiments"),
    ]
    platform_env = {"JAX_PLATFORMS": "cuda" if args.device == "cuda" else "cpu"}
    stdout, wall = run_child(command, args.threads, args.authors, platform_env)
    result = json.loads(stdout.strip().splitlines()[-1])
    return {
        "side": "authors",
        "preset": preset,
        "variant": AUTHORS_MIXERS[args.mixer],
        "command": portable_command(command),
        "env": platform_env,
        "process_wall_s": wall,
        **result,
    }


def variants(args: argparse.Namespace) -> list[str]:
    return [*args.modes, *(f"pack{n}" for n in args.packs), *(f"{p}x{n}" for p, n in args.parallel_packs)]


def ratios(measurements: list[dict], presets: list[str], hyla_variants: list[str]) -> list[dict]:
    """Per preset and hyla variant: hyla / authors of the same repeat, and their min / median / max."""
    rows = []
    for preset in presets:
        peers = [m for m in measurements if m["side"] == "authors" and m["preset"] == preset]
        for variant in hyla_variants:
            ours = [
                m for m in measurements if m["side"] == "hyla" and m["preset"] == preset and m["variant"] == variant
            ]
            pairs = [h["steps_per_second"] / a["steps_per_second"] for h, a in zip(ours, peers)]
            row = {
                "preset": preset,
                "variant": variant,
                "hyla_steps_per_second": [m["steps_per_second"] for m in ours],
                "authors_steps_per_second": [m["steps_per_second"] for m in peers],
                "ratios": pairs,
            }
            if pairs:
                row.update(ratio_min=min(pairs), ratio_median=statistics.median(pairs), ratio_max=max(pairs))
            rows.append(row)
    return rows


def shape_check(measurements: list[dict]) -> list[str]:
    """One line per preset: both sides' parameter counts and batch sizes, and whether they match."""
    lines = []
    for preset in dict.fromkeys(m["preset"] for m in measurements):
        for key in ("num_parameters", "batch_size"):
            seen = {
                side: sorted({m[key] for m in measurements if m["preset"] == preset and m["side"] == side})
                for side in ("hyla", "authors")
            }
            if seen["authors"]:
                verdict = "match" if seen["hyla"] == seen["authors"] else "MISMATCH: not the same training"
                lines.append(f"{preset}: {key} hyla {seen['hyla']}, authors {seen['authors']}: {verdict}")
    return lines


def machine(args: argparse.Namespace) -> dict:
    import torch

    import hyla
    from hyla.train.run_dir import cpu_name, git_commit
    from hyla.utils import portable_path

    gpu = torch.cuda.get_device_name() if args.device == "cuda" and torch.cuda.is_available() else None
    authors_commit = None  # stays None for an exported (non-git) checkout
    if args.authors is not None and (args.authors / ".git").exists():
        authors_commit = (
            subprocess.run(
                ["git", "rev-parse", "HEAD"], cwd=args.authors, capture_output=True, text=True, check=False
            ).stdout.strip()
            or None
        )
    return {
        "cpu": cpu_name(),
        "gpu": gpu,
        "cpu_count": os.cpu_count(),
        "usable_cores": len(os.sched_getaffinity(0)),
        "platform": platform.platform(),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "hyla": portable_path(hyla.__file__),
        "hyla_git_commit": git_commit(),
        "authors_checkout": portable_path(args.authors) if args.authors else None,
        "authors_git_commit": authors_commit,
        "omp_wait_policy": os.environ.get("OMP_WAIT_POLICY"),
        "gomp_spincount": os.environ.get("GOMP_SPINCOUNT"),  # unset: hyla's bounded waiting (hyla.cli)
        "malloc_env": malloc_env(),
        "load_average_start": os.getloadavg(),
        "time_start": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
    }


def malloc_env() -> dict:
    """glibc malloc settings given to both sides through the environment (hyla's training sets its
    own, hyla.train.allocator; the authors' code runs with whatever the environment says)."""
    return {name: value for name, value in os.environ.items() if name.startswith("MALLOC_")}


def report(rows: list[dict], checks: list[str]) -> str:
    lines = [
        "| preset | hyla variant | hyla steps/s (packs: model-steps/s) | authors steps/s | ratio min | median | max |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in rows:
        ours = ", ".join(f"{v:.2f}" for v in r["hyla_steps_per_second"])
        peers = ", ".join(f"{v:.2f}" for v in r["authors_steps_per_second"]) or "–"
        spread = (
            f"{r['ratio_min']:.2f} | **{r['ratio_median']:.2f}** | {r['ratio_max']:.2f}" if r["ratios"] else "– | – | –"
        )
        lines.append(f"| {r['preset']} | {r['variant']} | {ours} | {peers} | {spread} |")
    return "\n".join(lines + [""] + checks)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    sys.path.insert(0, str(ROOT))  # the hyla beside this script, as the `python -m hyla.cli` children use
    if args.pack_worker is not None:
        return pack_worker(args.pack_worker)
    info = machine(args)
    print(
        f"{info['gpu'] or info['cpu']}, {info['usable_cores']} usable cores, threads {args.threads}, "
        f"load average {info['load_average_start']}",
        file=sys.stderr,
    )
    out = args.out or RESULTS / f"vs_authors_{args.device}.json"
    measurements: list[dict] = []
    with tempfile.TemporaryDirectory(prefix="bench_vs_authors_") as tmp:
        driver = Path(tmp) / "authors_driver.py"
        driver.write_text(AUTHORS_DRIVER)
        for repeat in range(args.repeats):
            for preset in args.presets:
                steps = args.steps or DEFAULT_STEPS[preset]
                todo = [("hyla", v) for v in variants(args)] + ([("authors", None)] if args.authors else [])
                for side, variant in todo:
                    m = (
                        measure_hyla(args, preset, variant, steps, Path(tmp))
                        if side == "hyla"
                        else measure_authors(args, preset, steps, driver)
                    )
                    m.update(repeat=repeat, steps=steps, load_average=os.getloadavg())
                    measurements.append(m)
                    print(
                        f"repeat {repeat} {preset} {side} {m['variant']}: {m['steps_per_second']:.2f} steps/s "
                        f"(process {m['process_wall_s']:.0f} s, load {m['load_average'][0]:.1f})",
                        file=sys.stderr,
                        flush=True,
                    )
                    write_run(out, record(args, info, measurements))  # so far: a cut-off run keeps its measurements
    print(record(args, info, measurements)["table"])
    print(f"wrote {out}", file=sys.stderr)
    return 0


def record(args: argparse.Namespace, info: dict, measurements: list[dict]) -> dict:
    """The JSON entry of this invocation: its setting, the machine, the ratios and every measurement."""
    info = {**info, "load_average_end": os.getloadavg(), "time_end": time.strftime("%Y-%m-%dT%H:%M:%S%z")}
    rows = ratios(measurements, args.presets, variants(args))
    checks = shape_check(measurements)
    setting = {
        "threads": args.threads,
        "omp_wait_policy": info["omp_wait_policy"],
        "gomp_spincount": info["gomp_spincount"],
        "malloc_env": info["malloc_env"],
        "mixer": args.mixer,
        "presets": args.presets,
        "modes": args.modes,
        "compile_mode": args.compile_mode,
        "packs": args.packs,
        "packs_cuda_graph": args.packs_cuda_graph,
        "parallel_packs": [f"{p}x{n}" for p, n in args.parallel_packs],
        "smoke": args.smoke,
        "steps": {preset: args.steps or DEFAULT_STEPS[preset] for preset in args.presets},
    }
    return {
        "command": portable_command([sys.executable, *sys.argv]),
        "setting": setting,
        "machine": info,
        "summary": rows,
        "shape_check": checks,
        "table": report(rows, checks),
        "measurements": measurements,
    }


def write_run(out: Path, run: dict) -> None:
    """Add `run` to the JSON file's runs, replacing an earlier run of the same setting and keeping
    the others."""
    runs = json.loads(out.read_text())["runs"] if out.exists() else []
    runs = [r for r in runs if r.get("setting") != run["setting"]] + [run]
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(json.dumps({"runs": runs}, indent=2) + "\n")


if __name__ == "__main__":
    sys.exit(main())
