"""The GPU validation and benchmark suite: the GPU tests, measurements and training runs that a
CPU cannot make, in stages of at most 10 minutes each, every stage writing JSON (and logs) to
`--out DIR`.

    python benchmarks/gpu_suite.py STAGE [--out DIR] [--budget SECONDS] [--wheels DIR] [--authors DIR]
                                         [--resume-from DIR] [--cpu-smoke]

Stages (docs/gpu.md has what each measures and the time it takes):
  graphs        whole-step CUDA graphs against eager steps: the GPU tests of tests/train/test_graphed.py
                (SRAVEN and fuzzy-logic shapes, dropout on), then steps/s of SRAVEN HYLA eager and graphed
  repro         benchmarks/repro_inductor_hyla_grad.py over its settings (max_autotune apart: repro-tuned);
                minify: the same under PyTorch's accuracy minifier, its files as minify.tar.gz
  speed-raven   benchmarks/bench_vs_authors.py, 1,000 steps, 3 repeats: HYLA graphed, a pack of 16 and 2
  speed-logic   processes x packs of 8 (graphed), beside the authors' code where --authors names it
  speed-mixers  softmax and linear attention, graphed against compiled (CUDA graphs by inductor), both presets,
                1,000 steps, one repeat: which of the two becomes their default
  masks         the mask question: one graphed pack of SRAVEN HYLA seeds 0, 1, 2 with masks from the CPU's
                and from the GPU's generator (6 members), 10,000 steps of the 40k schedule
  paper         the 9 paper-budget SRAVEN rows (softmax, linear, HYLA x seeds 0-2, 156,250 steps), a stage's
                budget at a time: stops before the budget with a checkpoint and writes the runs to --out as
                one tar.gz per mixer; `--resume-from` an earlier call's --out continues them

`masks` resumes the same way. Each stage stops its work `--budget` seconds after it starts (540 by
default), in time to checkpoint. The suite runs from the repository's root without installing hyla;
where the GPU's Python lacks a package the stage needs (tyro and its dependencies for hyla's command
line; ml_collections for the authors' configs), it names them and installs them from the wheels in
`--wheels DIR`. `--cpu-smoke` runs a stage at toy sizes on the CPU: its dry run.
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import os
import signal
import subprocess
import sys
import tarfile
import time
from dataclasses import replace
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
WORK = ROOT / "runs" / "gpu_suite"
"""run folders, specs and the installed wheels (runs/ is not committed)"""
MASK_STEPS = (2000, 4000, 6000, 8000, 10000)
STOP_MARGIN_S = 75  # before the budget ends: checkpointing, packing the tars
NEEDED = {
    "tyro": "tyro docstring-parser typeguard typing_extensions (hyla's command line)",
    "ml_collections": "ml_collections (the authors' configs, for the speed stages with --authors)",
}
"""module: the wheels that provide it, and what for"""


def missing_modules(authors: Path | None) -> list[str]:
    """The modules of NEEDED this Python lacks (ml_collections only where the authors' code runs)."""
    wanted = ["tyro"] + (["ml_collections"] if authors else [])
    return [name for name in wanted if importlib.util.find_spec(name) is None]


def prepare(wheels: Path | None = None, authors: Path | None = None) -> None:
    """hyla importable (from this tree) in this process and its children; the packages it lacks
    installed from the wheels in `wheels`, or a one-line error naming them."""
    paths, site = [str(ROOT)], WORK / "site"
    missing = missing_modules(authors)
    if missing:
        found = sorted(str(p) for p in wheels.glob("*.whl")) if wheels else []
        if not found:
            names = "; ".join(NEEDED[name] for name in missing)
            sys.exit(f"gpu_suite: this Python lacks {', '.join(missing)}: pass --wheels DIR with the wheels of {names}")
        pip = [sys.executable, "-m", "pip", "install", "-q", "--no-index", "--no-deps", "--no-compile"]
        subprocess.run([*pip, "--upgrade", "--target", str(site), *found], check=True)
    if site.is_dir():
        paths.append(str(site))
    sys.path[:0] = paths
    os.environ["PYTHONPATH"] = os.pathsep.join([*paths, os.environ.get("PYTHONPATH", "")]).rstrip(os.pathsep)


def write(out: Path, name: str, data: dict) -> None:
    (out / name).write_text(json.dumps(data, indent=1) + "\n")
    print(f"wrote {out / name}", flush=True)


def environment() -> dict:
    import torch

    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else None
    return {"torch": torch.__version__, "gpu": gpu, "time": time.strftime("%Y-%m-%dT%H:%M:%S%z")}


def run(command: list[str], deadline: float, log: Path, env: dict | None = None, cwd: Path = ROOT) -> int:
    """Run `command` in `cwd` until it ends or `deadline` (then SIGTERM, SIGKILL after 60 s); its
    output appended to `log`. Returns its exit code (stopped at the deadline: -15 or -9)."""
    with open(log, "a") as f:
        f.write(f"$ {' '.join(command)}\n")
        f.flush()
        process = subprocess.Popen(
            command, cwd=cwd, stdout=f, stderr=subprocess.STDOUT, env={**os.environ, **(env or {})}
        )
        try:
            return process.wait(timeout=max(1.0, deadline - time.time()))
        except subprocess.TimeoutExpired:
            process.send_signal(signal.SIGTERM)
            try:
                return process.wait(timeout=60)
            except subprocess.TimeoutExpired:
                process.kill()
                return process.wait()


# ----------------------------------------------------------------------------- (a) graphs


def stage_graphs(args, out: Path, deadline: float) -> None:
    junit = out / "graphs_junit.xml"
    tests = [sys.executable, "-m", "pytest", "-q", "-p", "no:cacheprovider", "tests/train/test_graphed.py"]
    code = run([*tests, f"--junitxml={junit}"], deadline - 120, out / "graphs.log")
    speeds = {}
    for graphs in ("off", "on"):
        speeds[graphs] = speed_probe(args, graphs, out)
    write(
        out,
        "graphs.json",
        {
            "environment": environment(),
            "pytest_exit_code": code,
            "outcomes": junit_outcomes(junit),
            "steps_per_second": speeds,
        },
    )


def junit_outcomes(path: Path) -> dict[str, str]:
    import xml.etree.ElementTree as ElementTree

    if not path.exists():
        return {}
    outcomes = {}
    for case in ElementTree.parse(path).iter("testcase"):
        kinds = [child.tag for child in case if child.tag in ("failure", "error", "skipped")]
        detail = next((child.get("message", "") for child in case if child.tag in ("failure", "error")), "")
        outcomes[case.get("name")] = (kinds[0] if kinds else "passed") + (f": {detail[:300]}" if detail else "")
    return outcomes


def speed_probe(args, graphs: str, out: Path) -> dict:
    """steps/s of one SRAVEN HYLA run (300 steps; the CPU smoke: the tiny fuzzy-logic run, 20 steps)."""
    from hyla.train import train
    from hyla.train.presets import get_preset

    cfg = get_preset("logic_cpu" if args.cpu_smoke else "raven_3x3_4features")
    steps = 20 if args.cpu_smoke else 300
    device = "cpu" if args.cpu_smoke else "cuda"
    cfg = replace(
        cfg,
        model=replace(cfg.model, mixer="hyla"),
        train=replace(cfg.train, steps=steps, step="graphed" if graphs == "on" else "eager", device=device),
        eval=replace(cfg.eval, every=0, final_samples=128),
        log=replace(cfg.log, progress=False),
        checkpoint=replace(cfg.checkpoint, every=steps),
        out_dir=str(WORK / "probes"),
        name=f"probe-{graphs}-{time.monotonic_ns()}",
    )
    run_dir = train(cfg)
    summary = json.loads((run_dir / "summary.json").read_text())
    numerics = json.loads((run_dir / "env.json").read_text())["numerics"]
    return {"steps": steps, "steps_per_second": summary["steps_per_second"], "cuda_graph": numerics.get("cuda_graph")}


# ----------------------------------------------------------------------------- (b) the inductor reproduction

REPRO_SETTINGS = [
    "baseline",
    "backend=aot_eager",
    "backend=aot_eager_decomp_partition",
    "split_reductions=False",
    "triton.persistent_reductions=False",
    "triton.mix_order_reduction=False",
    "fallback_random=True",
    "aggressive_fusion=True",
    "triton.multi_kernel=1",
]


def repro_command(args, settings: list[str], json_out: Path) -> list[str]:
    tiny = ["--device", "cpu", "--batch", "2", "--seq", "4", "--heads", "2", "--dk", "2", "--dv", "2"]
    script = str(ROOT / "benchmarks" / "repro_inductor_hyla_grad.py")
    return [sys.executable, script, *(tiny if args.cpu_smoke else []), "--settings", *settings, "--out", str(json_out)]


def stage_repro(args, out: Path, deadline: float) -> None:
    settings = ["backend=aot_eager", "no_such_option=True"] if args.cpu_smoke else REPRO_SETTINGS
    run(repro_command(args, settings, out / "repro.json"), deadline, out / "repro.log")


def stage_repro_tuned(args, out: Path, deadline: float) -> None:
    run(repro_command(args, ["max_autotune=True"], out / "repro_tuned.json"), deadline, out / "repro_tuned.log")


def stage_minify(args, out: Path, deadline: float) -> None:
    """The baseline under PyTorch's accuracy minifier (after AOT autograd, level 4: compare with eager)."""
    work = WORK / "minify"
    work.mkdir(parents=True, exist_ok=True)
    env = {"TORCHDYNAMO_REPRO_AFTER": "aot", "TORCHDYNAMO_REPRO_LEVEL": "4", "TORCH_COMPILE_DEBUG_DIR": str(work)}
    # in `work`: the minifier also writes under the working directory's torch_compile_debug/
    code = run(repro_command(args, ["baseline"], out / "minify.json"), deadline - 30, out / "minify.log", env, work)
    with tarfile.open(out / "minify.tar.gz", "w:gz") as tar:
        tar.add(work, arcname="minify")
    write(out, "minify_status.json", {"exit_code": code, "bytes": (out / "minify.tar.gz").stat().st_size})


# ----------------------------------------------------------------------------- (c) speed


def stage_speed(args, out: Path, deadline: float, preset: str) -> None:
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "bench_vs_authors.py"),
        "--device",
        "cpu" if args.cpu_smoke else "cuda",
    ]
    command += [
        "--presets",
        preset,
        "--modes",
        "graphed",
        "--packs",
        "16",
        "--packs-cuda-graph",
        "--parallel-packs",
        "2x8",
    ]
    command += (
        ["--smoke", "--packs", "2", "--parallel-packs", "2x2"]
        if args.cpu_smoke
        else ["--steps", "1000", "--repeats", "3"]
    )
    if args.authors and not args.cpu_smoke:
        command += ["--authors", str(args.authors), "--jax-python", sys.executable]
    env = {"XLA_PYTHON_CLIENT_PREALLOCATE": "false"}
    run([*command, "--out", str(out / f"vs_authors_{preset}.json")], deadline, out / f"speed_{preset}.log", env)


def stage_speed_mixers(args, out: Path, deadline: float) -> None:
    command = [
        sys.executable,
        str(ROOT / "benchmarks" / "bench_vs_authors.py"),
        "--device",
        "cpu" if args.cpu_smoke else "cuda",
    ]
    command += ["--modes", "graphed", "compiled"] + (
        ["--smoke"] if args.cpu_smoke else ["--steps", "1000", "--repeats", "1"]
    )
    for mixer in ("softmax", "linear"):
        log = out / f"speed_{mixer}.log"
        run([*command, "--mixer", mixer, "--out", str(out / f"vs_authors_{mixer}.json")], deadline, log)


# ----------------------------------------------------------------------------- (d), (e): time-bounded packs


def train_packs_until(packs: list[list], deadline: float, out: Path, log_name: str) -> list[int]:
    """Train each pack (a list of configs) in a process of its own, all at once, until they end or
    the deadline (then SIGTERM: every member checkpoints and stops; `hyla resume` continues)."""
    from hyla.train.configs import config_to_dict

    processes = []
    for i, pack in enumerate(packs):
        spec = WORK / f"{log_name}_pack{i}.json"
        spec.parent.mkdir(parents=True, exist_ok=True)
        spec.write_text(json.dumps([config_to_dict(cfg) for cfg in pack]))
        log = open(out / f"{log_name}_pack{i}.log", "a")
        command = [sys.executable, str(Path(__file__).resolve()), "_pack", str(spec)]
        processes.append((subprocess.Popen(command, cwd=ROOT, stdout=log, stderr=subprocess.STDOUT), log))
    codes = []
    for process, log in processes:
        try:
            codes.append(process.wait(timeout=max(1.0, deadline - time.time())))
        except subprocess.TimeoutExpired:
            for other, _ in processes:
                if other.poll() is None:
                    other.send_signal(signal.SIGTERM)
            codes.append(process.wait())
        log.close()
    return codes


def pack_worker(spec: str) -> int:
    """`_pack SPEC`: train the configs in SPEC (JSON) as one pack; a stop by SIGTERM ends it cleanly."""
    prepare()
    from hyla.train import train_packed
    from hyla.train.configs import config_from_dict

    cfgs = [config_from_dict(data) for data in json.loads(Path(spec).read_text())]
    try:
        train_packed(cfgs)
    except KeyboardInterrupt:
        print("stopped with a checkpoint", flush=True)
    return 0


def restore(source: Path | None, into: Path, prefix: str) -> list[str]:
    """Unpack the run folders of an earlier call, `source`/PREFIX*.tar.gz, into `into` (their paths are
    relative to the tree's root); the names of the files read."""
    names = []
    for tar_path in sorted(source.glob(f"{prefix}*.tar.gz")) if source else []:
        with tarfile.open(tar_path) as tar:
            tar.extractall(into, filter="data")
        names.append(tar_path.name)
    return names


def pack_back(run_dirs: list[Path], tar_path: Path, root: Path) -> int:
    """The run folders (config, env, metrics, summary, the latest checkpoint) as one tar.gz; its size."""
    with tarfile.open(tar_path, "w:gz") as tar:
        for run_dir in run_dirs:
            for path in sorted(run_dir.rglob("*")):
                if path.is_file() and (path.parent.name != "checkpoints" or path.name == "latest.pt"):
                    tar.add(path, arcname=str(path.relative_to(root)))
    return tar_path.stat().st_size


def progress_of(run_dir: Path, at_steps: tuple[int, ...]) -> dict:
    """A run's step, status, speed, whether CUDA graphs ran, and its training loss at `at_steps`."""
    summary = json.loads((run_dir / "summary.json").read_text()) if (run_dir / "summary.json").exists() else {}
    env = json.loads((run_dir / "env.json").read_text()) if (run_dir / "env.json").exists() else {}
    records = (
        [json.loads(line) for line in (run_dir / "metrics.jsonl").read_text().splitlines()]
        if (run_dir / "metrics.jsonl").exists()
        else []
    )
    losses = {r["step"]: r["loss"] for r in records if r["split"] == "train"}
    return {
        "status": summary.get("status"),
        "step": summary.get("step"),
        "steps_per_second": summary.get("steps_per_second"),
        "cuda_graph": env.get("numerics", {}).get("cuda_graph"),
        "train_loss_at": {str(step): losses.get(step) for step in at_steps},
        "last_eval": summary.get("last_eval"),
        "final": summary.get("final"),
    }


def mask_configs(args) -> list:
    from hyla.train.presets import get_preset

    cfg = get_preset("raven_3x3_4features")
    steps, stop_at = (40, 20) if args.cpu_smoke else (40_000, MASK_STEPS[-1])
    settings = dict(steps=steps, stop_at=stop_at, step="graphed", threads=8)
    cfg = replace(
        cfg,
        model=replace(cfg.model, mixer="hyla"),
        eval=replace(cfg.eval, every=0),
        log=replace(cfg.log, progress=False),
        out_dir=str(WORK / "masks"),
    )
    if args.cpu_smoke:
        settings.update(batch_size=8, device="cpu", threads=1)
        cfg = replace(
            cfg,
            eval=replace(cfg.eval, final_samples=16),
            log=replace(cfg.log, every=10),
            checkpoint=replace(cfg.checkpoint, every=10),
        )
    return [
        replace(
            cfg,
            seed=seed,
            name=f"hyla_masks-{source}_s{seed}",
            resume=True,
            train=replace(cfg.train, **settings, dropout_masks=source),
        )
        for source in ("cpu", "device")
        for seed in (0, 1, 2)
    ]


def stage_masks(args, out: Path, deadline: float) -> None:
    cfgs = mask_configs(args)
    restored = restore(args.resume_from, ROOT, "masks_")
    codes = train_packs_until([cfgs], deadline - STOP_MARGIN_S, out, "masks")
    at = (10, 20) if args.cpu_smoke else MASK_STEPS
    runs = {
        cfg.name: {
            "seed": cfg.seed,
            "dropout_masks": cfg.train.dropout_masks,
            **progress_of(Path(cfg.out_dir) / cfg.name, at),
        }
        for cfg in cfgs
    }
    folders = [Path(cfg.out_dir) / cfg.name for cfg in cfgs]
    sizes = {}
    for source in ("cpu", "device"):  # two files: 3 checkpoints of ~5 MB each
        name = f"masks_{source}.tar.gz"
        sizes[name] = pack_back([f for f in folders if f.name.startswith(f"hyla_masks-{source}")], out / name, ROOT)
    write(
        out,
        "masks.json",
        {"environment": environment(), "restored": restored, "exit_codes": codes, "runs": runs, "tar_bytes": sizes},
    )


def paper_configs(args) -> dict[str, list]:
    """The runs of experiments/sweeps/table_a1_raven_gpu.yaml by mixer, graphed, continuing where they are."""
    from hyla.cli.train_args import parse_train_args
    from hyla.runs.sweep import SweepSpec, train_args

    spec = SweepSpec.load(ROOT / "experiments" / "sweeps" / "table_a1_raven_gpu.yaml")
    spec.out_dir = str(WORK / "smoke_paper" if args.cpu_smoke else ROOT / spec.out_dir)
    by_mixer: dict[str, list] = {}
    for one in spec.runs():
        cfg, _ = parse_train_args(train_args(spec, one, 1 if args.cpu_smoke else 5))
        cfg = replace(cfg, resume=True, train=replace(cfg.train, step="graphed"), log=replace(cfg.log, progress=False))
        if args.cpu_smoke:
            cfg = replace(
                cfg,
                train=replace(cfg.train, steps=2000, batch_size=8, device="cpu"),
                eval=replace(cfg.eval, every=0, samples=16, final_samples=16),
                log=replace(cfg.log, every=10),
                checkpoint=replace(cfg.checkpoint, every=50),
            )
        by_mixer.setdefault(cfg.model.mixer, []).append(cfg)
    return by_mixer


def stage_paper(args, out: Path, deadline: float) -> None:
    by_mixer = paper_configs(args)
    restored = restore(args.resume_from, ROOT, "paper_")
    codes = train_packs_until(list(by_mixer.values()), deadline - STOP_MARGIN_S, out, "paper")
    runs, sizes = {}, {}
    for mixer, cfgs in by_mixer.items():
        folders = [Path(cfg.out_dir) / cfg.name for cfg in cfgs]
        runs.update({folder.name: progress_of(folder, ()) for folder in folders})
        sizes[f"paper_{mixer}.tar.gz"] = pack_back(folders, out / f"paper_{mixer}.tar.gz", ROOT)
    write(
        out,
        "paper.json",
        {"environment": environment(), "restored": restored, "exit_codes": codes, "runs": runs, "tar_bytes": sizes},
    )


STAGES = {
    "graphs": stage_graphs,
    "repro": stage_repro,
    "repro-tuned": stage_repro_tuned,
    "minify": stage_minify,
    "speed-raven": lambda args, out, deadline: stage_speed(args, out, deadline, "raven_3x3_4features"),
    "speed-logic": lambda args, out, deadline: stage_speed(args, out, deadline, "logic_4var_2term"),
    "speed-mixers": stage_speed_mixers,
    "masks": stage_masks,
    "paper": stage_paper,
}


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else argv
    if argv[:1] == ["_pack"]:
        return pack_worker(argv[1])
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("stage", choices=list(STAGES))
    parser.add_argument(
        "--out", type=Path, default=WORK / "results", help="where the stage writes its JSON, logs and tars"
    )
    parser.add_argument("--budget", type=float, default=540.0, help="seconds the stage may take")
    parser.add_argument("--wheels", type=Path, help="a folder of wheels for the packages this Python lacks")
    parser.add_argument("--authors", type=Path, help="the authors' checkout, for the speed stages")
    parser.add_argument("--resume-from", type=Path, help="the --out of an earlier masks or paper call, to continue")
    parser.add_argument("--cpu-smoke", action="store_true", help="toy sizes on the CPU: the stage's dry run")
    args = parser.parse_args(argv)
    deadline = time.time() + args.budget
    args.out.mkdir(parents=True, exist_ok=True)
    prepare(args.wheels, args.authors)
    STAGES[args.stage](args, args.out, deadline)
    return 0


if __name__ == "__main__":
    sys.exit(main())
