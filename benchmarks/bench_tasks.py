"""Throughput of the task generators: samples per second per task, split and batch size.

    python benchmarks/bench_tasks.py [--out benchmarks/results/tasks.json] [--threads N]
    python benchmarks/bench_tasks.py --headline --threads 1 --out /tmp/headline.json
    python benchmarks/bench_tasks.py --headline --threads 1 --compare-with OLD --rounds 6 \
        --out benchmarks/results/tasks_headline_compare.json

Each measurement generates batches of consecutive steps for at least `--min-time` seconds, on
`--device` (batches are generated on the task's device, see hyla/tasks/base.py). A batch must
regenerate identically before its split is timed. `--headline` times only the two training
cases that matter most, in batches per second: fuzzy logic (seq_len 32) and SRAVEN (the
raven_3x3_4features task), `train` split, batch 128 (or `--batch-sizes`). It uses only the public task API, so
the same script can time two versions of hyla side by side: `--compare-with OLD` (a folder
holding another version's `hyla` package, e.g. `git archive REF hyla | tar -x -C OLD`) runs the
headline cases alternately in a subprocess on OLD and on this checkout, `--rounds` times, so that
both see the same machine load, and reports the median ratio new / old.

Two rates are reported: samples per wall-clock second, and samples per CPU-second used by this
process. On a shared machine the second is the steadier one (with `--threads 1` it is close to
what an idle core delivers); the JSON records the load average next to them. On a machine
shared with other busy processes, torch's OpenMP threads spin-wait and multi-threaded runs
collapse (50-100x slower on the 2-core development machine): use `--threads 1` or set
OMP_WAIT_POLICY=PASSIVE there.
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

import torch

import hyla
from hyla.tasks import FuzzyLogic, SRaven

FUZZY_SPLITS = ("train", "valid", "ood", "novel_terms", "valid_fixed_context", "valid_fixed_query")
SRAVEN_SPLITS = ("train", "valid", "ood", "train_unpermuted", "valid_unpermuted", "ood_unpermuted")


def samples_per_second(make_batch, batch_size: int, min_time: float) -> tuple[float, float]:
    """(samples per wall-clock second, samples per CPU-second of this process)."""
    make_batch(0)  # warm-up
    calls, start, cpu_start = 0, time.perf_counter(), time.process_time()
    while calls < 3 or time.perf_counter() - start < min_time:
        calls += 1
        make_batch(calls)
    samples = calls * batch_size
    return samples / (time.perf_counter() - start), samples / (time.process_time() - cpu_start)


def check_reproducible(task, split: str) -> None:
    first, again = task.batch(split, 64, 123), task.batch(split, 64, 123)
    if not (torch.equal(first.x, again.x) and torch.equal(first.y, again.y)):
        raise RuntimeError(f"{task.name}/{split}: a batch did not regenerate identically")


def headline(device: str, min_time: float, batch_sizes: list[int]) -> list[dict]:
    """Batches per second of the two training cases of `--headline`."""
    cases = [("fuzzy_logic", FuzzyLogic(seq_len=32, device=device)), ("sraven", SRaven(device=device))]
    results = []
    for name, task in cases:
        check_reproducible(task, "train")
        for batch_size in batch_sizes:
            rates = samples_per_second(lambda step: task.batch("train", batch_size, step), 1, min_time)
            results.append(
                {
                    "task": name,
                    "split": "train",
                    "batch_size": batch_size,
                    "batches_per_s": round(rates[0], 1),
                    "batches_per_cpu_s": round(rates[1], 1),
                }
            )
            print(f"{name:<12} batch {batch_size}: {rates[0]:>10,.1f} batches/s {rates[1]:>10,.1f} batches/cpu-s")
    return results


def compare(old: Path, rounds: int, passed: list[str]) -> dict:
    """Median headline rates of `old`'s hyla and of this checkout's, measured alternately."""
    trees = {"old": old.resolve(), "new": Path(__file__).resolve().parents[1]}
    runs: dict[str, list[list[dict]]] = {"old": [], "new": []}
    with tempfile.TemporaryDirectory() as folder:
        for index in range(rounds):
            for name, tree in trees.items():
                out = Path(folder) / f"{name}-{index}.json"
                env = {**os.environ, "PYTHONPATH": str(tree)}
                subprocess.run(
                    [sys.executable, __file__, "--headline", *passed, "--out", str(out)],
                    env=env,
                    check=True,
                    stdout=subprocess.DEVNULL,
                )
                report = json.loads(out.read_text())
                if Path(report["hyla"]) != tree / "hyla":
                    raise RuntimeError(f"timed {report['hyla']} instead of {tree / 'hyla'}")
                runs[name].append(report["results"])
    summary = []
    for case, first in enumerate(runs["new"][0]):
        rates = {name: [results[case]["batches_per_cpu_s"] for results in runs[name]] for name in runs}
        summary.append(
            {
                "task": first["task"],
                "batch_size": first["batch_size"],
                "old_batches_per_cpu_s": rates["old"],
                "new_batches_per_cpu_s": rates["new"],
                "median_ratio_new_over_old": round(
                    statistics.median(n / o for n, o in zip(rates["new"], rates["old"])), 3
                ),
            }
        )
        print(
            f"{first['task']:<12} batch {first['batch_size']}: new/old batches per CPU-second "
            f"{summary[-1]['median_ratio_new_over_old']}"
        )
    return {"old": str(trees["old"]), "new": str(trees["new"]), "rounds": rounds, "results": summary}


def parse_args() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/tasks.json"))
    parser.add_argument("--threads", type=int, default=None, help="torch intra-op threads")
    parser.add_argument(
        "--batch-sizes", type=int, nargs="+", default=None, help="default: 128 4096 (128 with --headline)"
    )
    parser.add_argument("--min-time", type=float, default=1.0, help="seconds per measurement")
    parser.add_argument("--device", default="cpu")
    parser.add_argument(
        "--headline",
        action="store_true",
        help="only fuzzy logic (batch 128, seq_len 32) and SRAVEN (batch 128), in batches/s",
    )
    parser.add_argument(
        "--compare-with",
        type=Path,
        default=None,
        help="with --headline: a folder holding another version's hyla package",
    )
    parser.add_argument("--rounds", type=int, default=6, help="alternations for --compare-with")
    return parser.parse_args()


def main() -> None:
    args = parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    info = {
        "hyla": str(Path(hyla.__file__).parent),
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "device": args.device,
        "cpu_count": os.cpu_count(),
        "machine": platform.processor() or platform.machine(),
    }
    if args.compare_with is not None:
        passed = [
            "--threads",
            str(torch.get_num_threads()),
            "--min-time",
            str(args.min_time),
            "--device",
            args.device,
            "--batch-sizes",
            *map(str, args.batch_sizes or [128]),
        ]
        load_before = os.getloadavg()
        report = compare(args.compare_with, args.rounds, passed)
        write(args.out, {**info, "load_average": [load_before, os.getloadavg()], **report})
        return
    if args.headline:
        results = headline(args.device, args.min_time, args.batch_sizes or [128])
        write(args.out, {**info, "load_average": os.getloadavg(), "results": results})
        return
    results = every_split(args.device, args.batch_sizes or [128, 4096], args.min_time)
    write(args.out, {**info, "load_average": os.getloadavg(), "results": results})


def every_split(device: str, batch_sizes: list[int], min_time: float) -> list[dict]:
    """Samples/s of every split of both tasks at every batch size (each split checked for
    reproducibility first), and of SRAVEN's validation batches with the ambiguity check."""
    cases = [(FuzzyLogic(seq_len=16, device=device), FUZZY_SPLITS), (SRaven(device=device), SRAVEN_SPLITS)]
    results = []
    print(f"{'task':<12} {'split':<22} {'batch':>6} {'samples/s':>12} {'samples/cpu-s':>14}")
    for task, splits in cases:
        for split in splits:
            check_reproducible(task, split)
            for batch_size in batch_sizes:
                rates = samples_per_second(lambda step: task.batch(split, batch_size, step), batch_size, min_time)
                record(results, task.name, split, batch_size, rates)
    sraven = cases[1][0]
    for batch_size in batch_sizes:  # the ambiguity check that evaluation may add
        rates = samples_per_second(
            lambda step: sraven.batch("valid", batch_size, step, with_ambiguity=True), batch_size, min_time
        )
        record(results, "sraven", "valid+ambiguity", batch_size, rates)
    return results


def record(results: list[dict], task_name: str, split: str, batch_size: int, rates: tuple[float, float]) -> None:
    """Append one measurement to `results` and print it as a table row."""
    results.append(
        {
            "task": task_name,
            "split": split,
            "batch_size": batch_size,
            "samples_per_s": round(rates[0]),
            "samples_per_cpu_s": round(rates[1]),
        }
    )
    print(f"{task_name:<12} {split:<22} {batch_size:>6} {rates[0]:>12,.0f} {rates[1]:>14,.0f}")


def write(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
