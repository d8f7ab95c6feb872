"""Bit-identical short trainings of two checkouts of hyla: behaviour must not change (issue 55).

For one representative preset per family (and, where dispatch differs per mixer, each of softmax,
linear and HYLA) this trains the same command in both checkouts,

    python -m hyla.cli train --preset P --model.mixer M --seed 0 --train.steps 200 --train.threads 1
        --train.device cpu --eval.every 0 --eval.final_samples 256 --log.every 1 ...

(compiled cases with --train.step compiled; a pack of 2 as `train_packed` of those options with the
seeds 0 and 1), and compares the two runs (a pack's: each member's) bitwise: every tensor of the
final checkpoint (weights, optimizer state, schedule; torch.equal on each), every value of every
metrics.jsonl record (the loss of every step with --log.every 1, and the final evaluation)
and of summary.json and of the checkpoint's progress (the per-step losses it keeps), timings
excepted. It prints a table and writes JSON.

Usage:

    PYTHONPATH=. python experiments/bit_identical.py --before OLD_CHECKOUT --after NEW_CHECKOUT \\
        --after-python .venv/bin/python --out experiments/results/bit_identical/<commit>.json
    python experiments/bit_identical.py --before D --after D --only logic_cpu:hyla --steps 20   # quick
    python experiments/bit_identical.py --list                                                 # the cases

A checkout from before train.step (issue 80) gets the options it spelled otherwise (--train.compile
for --train.step compiled: BEFORE_TRAIN_STEP), and one from before the config sections (issue 80)
the train.* names of the fields that moved (--train.eval_every for --eval.every; run this script with
PYTHONPATH=. : hyla.train.configs.MOVED_FIELDS has them). --parallel trains a case's two runs at once.

Each checkout runs with its own python (--before-python / --after-python; default DIR/.venv/bin/python
where it exists, else this interpreter) and PYTHONPATH=DIR, so the code of that checkout is what runs
(checked: hyla must import from DIR). Every run's cwd, out_dir and HYLA_CACHE (tokenizers, the C++
kernel) lie in a temporary folder and PYTHONDONTWRITEBYTECODE=1, so nothing is written into the
checkouts. The JSON names each side by its commit, not by where it lay on the machine.

Exit status: 0 when every case is identical, 1 when one differs, 2 when a run failed.
"""

from __future__ import annotations

import argparse
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field
from pathlib import Path

import torch

# One representative preset per family. Fuzzy logic and SRAVEN run every mixer (attention dispatches
# per mixer: the C++ HYLA kernel, the PyTorch paths); the paper presets of the same families
# (logic_*var_*term, raven_3x3_4features) build the same modules at other sizes and are left out.
# The text family's other presets (wiki_wikitext103, lm_c4_50m) need a download: lm_cpu reads the
# Python docs shipped with Python. The mixture of experts is a model option, not a preset: lm_cpu
# with 4 experts (the routed CPU path). Each family also trains compiled (train.step compiled) and as
# a pack of 2 (seeds 0 and 1, hyla.train.packed.train_packed; each member is compared).


@dataclass(frozen=True)
class Case:
    family: str
    preset: str
    mixer: str
    extra: tuple[str, ...] = ()  # more `hyla train` options, as the newest hyla spells them
    pack: int = 1  # > 1: trained as a pack of this many runs, seeds 0, 1, ...


CASES: dict[str, Case] = {}
for _mixer in ("softmax", "linear", "hyla"):
    CASES[f"logic_cpu:{_mixer}"] = Case("fuzzy logic", "logic_cpu", _mixer)
for _mixer in ("softmax", "linear", "hyla"):
    CASES[f"raven_cpu:{_mixer}"] = Case("SRAVEN", "raven_cpu", _mixer)
CASES["lm_cpu:softmax"] = Case("text", "lm_cpu", "softmax")
CASES["lm_cpu:hyla"] = Case("text", "lm_cpu", "hyla")
CASES["lm_cpu:softmax+moe4"] = Case("text, mixture of experts", "lm_cpu", "softmax", ("--model.num_experts", "4"))
for _family, _preset, _mixer in (
    ("fuzzy logic", "logic_cpu", "hyla"),
    ("SRAVEN", "raven_cpu", "softmax"),
    ("text", "lm_cpu", "softmax"),
):
    CASES[f"{_preset}:{_mixer}+compiled"] = Case(f"{_family}, compiled", _preset, _mixer, ("--train.step", "compiled"))
for _family, _preset, _mixer in (
    ("fuzzy logic", "logic_cpu", "hyla"),
    ("SRAVEN", "raven_cpu", "hyla"),
    ("text", "lm_cpu", "softmax"),
):
    CASES[f"{_preset}:{_mixer}+pack2"] = Case(f"{_family}, a pack of 2", _preset, _mixer, pack=2)

# The options of a checkout from before train.step (issue 80) for those of its successors.
BEFORE_TRAIN_STEP = {
    ("--train.step", "compiled"): ["--train.compile"],
    ("--train.step", "graphed"): ["--train.cuda_graph", "on"],
}
# A pack of the `hyla train` options after the pack's size, members named run0, run1, ... seeded 0, 1, ...
PACK = (
    "import sys; from dataclasses import replace; from hyla.cli.train_args import parse_train_args; "
    "from hyla.train.packed import train_packed; cfg = parse_train_args(sys.argv[2:])[0]; "
    "train_packed([replace(cfg, name=f'run{i}', seed=i) for i in range(int(sys.argv[1]))])"
)

FINAL_EVAL_SAMPLES = 256
# Values that measure time, not behaviour.
TIMING = re.compile(r"(^|_)(time|wall|seconds?|per_second|elapsed)(_|$)")
# Checkpoint entries that describe the run, not its state (the config gains fields, the numerics record
# the environment, the sha256 is of the whole checkpoint, config included); compared only where the
# state lives: model, optimizer, scheduler, progress.
CHECKPOINT_SKIP = ("config", "numerics", "format", "sha256")


@dataclass
class Side:
    label: str
    root: Path
    python: str
    info: dict = field(default_factory=dict)


def run(cmd: list[str], *, cwd: Path, env: dict, log: Path, timeout: float) -> int:
    """Run cmd with its output in log; the exit code, -9 when it ran past timeout seconds."""
    with open(log, "w") as out:
        try:
            return subprocess.run(
                cmd, cwd=cwd, env=env, stdout=out, stderr=subprocess.STDOUT, timeout=timeout
            ).returncode
        except subprocess.TimeoutExpired:
            return -9


def environment(side: Side, cache: Path) -> dict:
    env = dict(os.environ)
    env.update(
        PYTHONPATH=str(side.root),
        PYTHONDONTWRITEBYTECODE="1",
        HYLA_CACHE=str(cache),
        OMP_NUM_THREADS="1",
        MKL_NUM_THREADS="1",
        RAYON_NUM_THREADS="1",
        TOKENIZERS_PARALLELISM="false",
        CUDA_VISIBLE_DEVICES="",
        COLUMNS="200",
        NO_COLOR="1",
    )
    for name in ("PYTHONHOME", "VIRTUAL_ENV"):
        env.pop(name, None)
    return env


def probe(side: Side, tmp: Path) -> None:
    """Which hyla, torch and commit this side runs; fails unless hyla imports from the checkout."""
    code = (
        "import json, sys, torch, hyla; "
        "from hyla.train.configs import ExperimentConfig, TrainConfig; "
        "print(json.dumps({'hyla_file': hyla.__file__, 'torch': torch.__version__, 'python': sys.version.split()[0], "
        "'train_step': 'step' in TrainConfig.__dataclass_fields__, "
        "'sections': 'optim' in ExperimentConfig.__dataclass_fields__}))"
    )
    env = environment(side, tmp / f"cache_{side.label}")
    out = subprocess.run([side.python, "-c", code], cwd=tmp, env=env, capture_output=True, text=True, check=True)
    info = json.loads(out.stdout.strip().splitlines()[-1])
    hyla_file = Path(info.pop("hyla_file")).resolve()
    side.info = info
    if side.root.resolve() not in hyla_file.parents:
        sys.exit(f"{side.label}: hyla imports from {hyla_file}, not from {side.root}")

    def git(*args: str) -> str:
        # without GIT_DIR and the like, which `git bisect run` passes on: the checkout's own repository
        clean = {k: v for k, v in os.environ.items() if not k.startswith("GIT_")}
        cmd = ["git", "--no-optional-locks", "-C", str(side.root), *args]
        result = subprocess.run(cmd, capture_output=True, text=True, env=clean)
        return result.stdout.strip() if result.returncode == 0 else ""

    side.info["commit"] = git("rev-parse", "HEAD")
    side.info["modified_tracked_files"] = git("status", "--porcelain", "--untracked-files=no").splitlines()


def train_command(preset: str, mixer: str, extra: list[str], steps: int) -> list[str]:
    return [
        "--preset", preset,
        "--model.mixer", mixer,
        *extra,
        "--seed", "0",
        "--train.steps", str(steps),
        "--train.threads", "1",
        "--train.device", "cpu",
        "--eval.every", "0",
        "--eval.samples", str(FINAL_EVAL_SAMPLES),
        "--eval.final_samples", str(FINAL_EVAL_SAMPLES),
        "--log.every", "1",
        "--checkpoint.every", str(steps),
        "--log.no-progress",
        "--out_dir", "runs",
        "--name", "run",
    ]  # fmt: skip


def flatten(value, prefix: str = "") -> dict[str, object]:
    """Nested dicts and lists as {path: leaf}."""
    if isinstance(value, dict):
        items = value.items()
    elif isinstance(value, (list, tuple)):
        items = enumerate(value)
    else:
        return {prefix: value}
    flat: dict[str, object] = {}
    for key, item in items:
        flat.update(flatten(item, f"{prefix}.{key}" if prefix else str(key)))
    if not flat:  # an empty container is a leaf
        flat[prefix] = value
    return flat


def same_leaf(a, b) -> bool:
    """Bitwise equality of two non-tensor leaves (floats by their bits; NaN equals NaN)."""
    if isinstance(a, float) and isinstance(b, float):
        return a.hex() == b.hex() if not (math.isnan(a) and math.isnan(b)) else True
    return type(a) is type(b) and a == b


def compare_leaves(before: dict, after: dict, skip=lambda key: False) -> dict:
    """Differences between two flattened records: tensors with torch.equal, other leaves bitwise."""
    keys_b = {k for k in before if not skip(k)}
    keys_a = {k for k in after if not skip(k)}
    differing, max_diff = [], {}
    for key in sorted(keys_b & keys_a):
        x, y = before[key], after[key]
        if isinstance(x, torch.Tensor) or isinstance(y, torch.Tensor):
            if not (isinstance(x, torch.Tensor) and isinstance(y, torch.Tensor)):
                differing.append(key)
            elif x.dtype != y.dtype or x.shape != y.shape:
                differing.append(key)
            elif not torch.equal(x, y):
                differing.append(key)
                if x.is_floating_point():
                    max_diff[key] = (x.double() - y.double()).abs().max().item()
        elif not same_leaf(x, y):
            differing.append(key)
    return {
        "compared": len(keys_b & keys_a),
        "differing": differing,
        "only_before": sorted(keys_b - keys_a),
        "only_after": sorted(keys_a - keys_b),
        "max_abs_diff": max_diff,
    }


def timing_key(key: str) -> bool:
    return bool(TIMING.search(key.rsplit(".", 1)[-1]))


def compare_runs(run_b: Path, run_a: Path) -> dict:
    ckpt_b = torch.load(run_b / "checkpoints" / "latest.pt", map_location="cpu", weights_only=True)
    ckpt_a = torch.load(run_a / "checkpoints" / "latest.pt", map_location="cpu", weights_only=True)
    flat_b, flat_a = flatten(ckpt_b), flatten(ckpt_a)

    def skip(key: str) -> bool:
        return key.split(".", 1)[0] in CHECKPOINT_SKIP or timing_key(key)

    checkpoint = compare_leaves(flat_b, flat_a, skip)
    tensors = [k for k, v in {**flat_b, **flat_a}.items() if isinstance(v, torch.Tensor) and not skip(k)]
    # non-tensor entries on one side only (e.g. a new hyperparameter key) are listed, tensors count
    missing_tensors = [k for k in checkpoint["only_before"] + checkpoint["only_after"] if k in tensors]
    model_diffs = [v for k, v in checkpoint["max_abs_diff"].items() if k.startswith("model.")]
    weights_differ = [k for k in checkpoint["differing"] if k.startswith("model.")]

    rows_b = [json.loads(line) for line in (run_b / "metrics.jsonl").read_text().splitlines() if line.strip()]
    rows_a = [json.loads(line) for line in (run_a / "metrics.jsonl").read_text().splitlines() if line.strip()]
    metrics = compare_leaves(flatten(rows_b), flatten(rows_a), timing_key)
    metrics["rows"] = [len(rows_b), len(rows_a)]
    loss_b = [r["loss"] for r in rows_b if r.get("split") == "train" and "loss" in r]
    loss_a = [r["loss"] for r in rows_a if r.get("split") == "train" and "loss" in r]
    summary = compare_leaves(
        flatten(json.loads((run_b / "summary.json").read_text())),
        flatten(json.loads((run_a / "summary.json").read_text())),
        timing_key,
    )
    identical = (
        not checkpoint["differing"]
        and not missing_tensors
        and not metrics["differing"]
        and len(rows_b) == len(rows_a)
        and not summary["differing"]
    )
    return {
        "identical": identical,
        "weights_identical": not weights_differ and not [k for k in missing_tensors if k.startswith("model.")],
        "tensors_compared": len([k for k in tensors if k in flat_b and k in flat_a]),
        "max_abs_diff_params": max(model_diffs) if model_diffs else (0.0 if not weights_differ else None),
        "train_losses": [len(loss_b), len(loss_a)],
        "train_losses_identical": loss_b == loss_a,
        "first_differing_train_step": next(
            (r["step"] for r, s in zip(rows_b, rows_a) if r.get("split") == "train" and r.get("loss") != s.get("loss")),
            None,
        ),
        "final_train_loss": [loss_b[-1] if loss_b else None, loss_a[-1] if loss_a else None],
        "checkpoint": {
            **checkpoint,
            "differing_count": len(checkpoint["differing"]),
            "differing": checkpoint["differing"][:50],
            "tensors_on_one_side": missing_tensors,
        },
        "metrics": {**metrics, "differing_count": len(metrics["differing"]), "differing": metrics["differing"][:50]},
        "summary": summary,
    }


def tail(path: Path, n: int = 3000) -> str:
    text = path.read_text(errors="replace") if path.exists() else ""
    return text[-n:]


def command_without_paths(sides: list[Side], out: Path, keep: Path | None = None) -> str:
    """This script's command line with each checkout, its python and the --keep folder named, not located."""
    names = {os.path.abspath(s.root): f"{s.label.upper()}_CHECKOUT" for s in sides}
    names |= {os.path.abspath(keep): "KEEP"} if keep else {}
    names |= {os.path.abspath(s.python): f"{s.label.upper()}_PYTHON" for s in sides}
    names[os.path.abspath(out)] = f"experiments/results/bit_identical/{out.name}"
    return " ".join(["python experiments/bit_identical.py", *(names.get(os.path.abspath(a), a) for a in sys.argv[1:])])


def side_options(options: list[str], side: Side) -> list[str]:
    """`options` as `side`'s checkout takes them (one from before train.step: BEFORE_TRAIN_STEP; one
    from before the config sections: the train.* names of the fields that moved, MOVED_FIELDS)."""
    if not side.info["sections"]:
        from hyla.train.configs import MOVED_FIELDS

        old_names = {f"--{new}": f"--{old}" for old, new in MOVED_FIELDS.items()}
        old_names |= {
            f"--{new.replace('.', '.no-')}": f"--{old.replace('.', '.no-')}" for old, new in MOVED_FIELDS.items()
        }
        options = [old_names.get(option, option) for option in options]
    if side.info["train_step"]:
        return options
    out = []
    for option in options:
        if out and (out[-1], option) in BEFORE_TRAIN_STEP:
            out[-1:] = BEFORE_TRAIN_STEP[(out[-1], option)]
        else:
            out.append(option)
    return out


def train_side(name: str, case: Case, side: Side, tmp: Path, args) -> tuple[dict, list[Path]]:
    """Train `case` in `side`'s checkout: what ran ({command, returncode, seconds[, log_tail]})
    and the run folders (a pack's members in order)."""
    options = side_options(train_command(case.preset, case.mixer, list(case.extra), args.steps), side)
    folder = tmp / side.label / name.replace(":", "_").replace("+", "_")
    shutil.rmtree(folder, ignore_errors=True)
    folder.mkdir(parents=True)
    if case.pack > 1:
        cmd, command = [side.python, "-c", PACK, str(case.pack)], f"train_packed of {case.pack}: "
        runs = [folder / "runs" / f"run{i}" for i in range(case.pack)]
    else:
        cmd, command, runs = (
            [side.python, "-m", "hyla.cli", "train"],
            "python -m hyla.cli train ",
            [folder / "runs" / "run"],
        )
    t0 = time.time()
    env = environment(side, tmp / f"cache_{side.label}")
    rc = run(cmd + options, cwd=folder, env=env, log=folder / "train.log", timeout=args.timeout)
    ran = {"command": command + " ".join(options), "returncode": rc, "seconds": round(time.time() - t0, 1)}
    if rc != 0:
        ran["log_tail"] = tail(folder / "train.log")
    print(f"  {name} {side.label}: rc {rc}, {time.time() - t0:.0f} s", flush=True)
    return ran, runs


def train_case(name: str, case: Case, sides: list[Side], tmp: Path, args) -> list[dict]:
    """Train `case` in both checkouts (at once with --parallel) and compare: one result per run (a
    pack's members: NAME#0, NAME#1, ...)."""
    with ThreadPoolExecutor(len(sides) if args.parallel else 1) as pool:
        trained = dict(zip([s.label for s in sides], pool.map(lambda s: train_side(name, case, s, tmp, args), sides)))
    about = {"family": case.family, "preset": case.preset, "mixer": case.mixer, "extra": list(case.extra)}
    results = []
    for i in range(case.pack):
        member = f"{name}#{i}" if case.pack > 1 else name
        result = {"case": member, **about, "sides": {label: ran for label, (ran, _) in trained.items()}}
        if all(ran["returncode"] == 0 for ran, _ in trained.values()):
            result.update(compare_runs(trained["before"][1][i], trained["after"][1][i]))
        else:
            result["identical"] = None
        results.append(result)
    return results


def arguments() -> argparse.Namespace:
    """The command line, with `cases`: those --only picks (all by default)."""
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0], epilog="See the module docstring.")
    parser.add_argument("--before", type=Path, help="the checkout before the change")
    parser.add_argument("--after", type=Path, help="the checkout after the change")
    parser.add_argument("--before-python", help="python for --before (default: DIR/.venv/bin/python or this one)")
    parser.add_argument("--after-python", help="python for --after (default: DIR/.venv/bin/python or this one)")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--only", action="append", default=[], help="a case name, or a preset (repeatable)")
    parser.add_argument("--out", type=Path, help="write the results as JSON here")
    parser.add_argument("--timeout", type=float, default=3600, help="seconds a run may take")
    parser.add_argument("--keep", type=Path, help="keep the runs in this folder (default: a temporary one, removed)")
    parser.add_argument("--list", action="store_true", help="list the cases and exit")
    parser.add_argument("--parallel", action="store_true", help="train a case's two runs at once (two processes)")
    args = parser.parse_args()
    if args.list:
        return args
    if args.before is None or args.after is None:
        parser.error("--before and --after are required")
    args.cases = {n: c for n, c in CASES.items() if not args.only or n in args.only or c.preset in args.only}
    if not args.cases:
        parser.error(f"--only matches no case; the cases: {', '.join(CASES)}")
    return args


def python_for(root: Path, given: str | None) -> str:
    """The python a checkout runs with: `given`, else DIR/.venv/bin/python where it exists, else this one."""
    venv = root / ".venv" / "bin" / "python"
    python = given or (str(venv) if venv.exists() else sys.executable)
    return os.path.abspath(python) if os.sep in python else python  # the runs' cwd is elsewhere


def table(results: list[dict], wall: float) -> list[str]:
    """The lines of the printed table: a case a line, then the wall time."""
    header = f"{'preset':10} {'mixer':8} {'variant':14} {'identical':9}  {'max |dparam|':12}  notes"
    lines = [header, "-" * len(header)]
    for r in results:
        variant = r["case"].partition("+")[2] or "-"  # moe4, compiled, pack2#0 (a pack's first member), ...
        if r["identical"] is None:
            verdict, diff, note = "FAILED", "", "a run failed (see the JSON's log_tail)"
        else:
            verdict = "yes" if r["identical"] else "NO"
            diff = "" if r["identical"] else f"{r['max_abs_diff_params']:.3g}" if r["max_abs_diff_params"] else "0"
            note = f"{r['tensors_compared']} tensors, {r['train_losses'][1]} train losses"
            if not r["identical"]:
                note += f"; first differing train step {r['first_differing_train_step']}"
                ckpt = r["checkpoint"]
                note += f"; {ckpt['differing_count']} of {ckpt['compared']} checkpoint entries differ"
        lines.append(f"{r['preset']:10} {r['mixer']:8} {variant:14} {verdict:9}  {diff:12}  {note}")
    return [*lines, f"wall time {wall / 60:.1f} min"]


def write_report(args: argparse.Namespace, sides: list[Side], results: list[dict], lines: list[str], wall: float):
    args.out.parent.mkdir(parents=True, exist_ok=True)
    report = {
        "command": command_without_paths(sides, args.out, args.keep),
        "steps": args.steps,
        "seed": 0,
        "threads": 1,
        "sides": {s.label: s.info for s in sides},
        "wall_time_s": round(wall, 1),
        "all_identical": all(r["identical"] for r in results),
        "table": lines,
        "cases": results,
    }
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"wrote {args.out}")


def main() -> int:
    args = arguments()
    if args.list:
        for name, c in CASES.items():
            print(f"{name:28} {c.family:28} {c.preset} {c.mixer} {' '.join(c.extra)}")
        return 0
    sides = [
        Side("before", args.before.resolve(), python_for(args.before, args.before_python)),
        Side("after", args.after.resolve(), python_for(args.after, args.after_python)),
    ]
    tmp = Path(args.keep or tempfile.mkdtemp(prefix="bit_identical_")).resolve()
    tmp.mkdir(parents=True, exist_ok=True)
    started = time.time()
    for side in sides:
        probe(side, tmp)
        print(f"{side.label}: {side.root} at {side.info['commit'][:10] or '?'} with {side.python}", flush=True)
    results = [result for name, case in args.cases.items() for result in train_case(name, case, sides, tmp, args)]
    wall = time.time() - started
    lines = table(results, wall)
    print("\n".join(lines))
    if args.out:
        write_report(args, sides, results, lines, wall)
    if args.keep is None:
        shutil.rmtree(tmp, ignore_errors=True)
    if any(r["identical"] is None for r in results):
        return 2
    return 0 if all(r["identical"] for r in results) else 1


if __name__ == "__main__":
    sys.exit(main())
