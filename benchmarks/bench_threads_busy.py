"""The default thread count on busy and idle cores: `hyla train` steps/s with the default
(`--train.threads 0`: every core) against one thread, with what the `hyla` command sets
(GOMP_SPINCOUNT=10000: waiting threads spin briefly, then sleep), with OMP_WAIT_POLICY=PASSIVE
(they sleep at once) and with OpenMP's default (they spin a long while).

    python benchmarks/bench_threads_busy.py    # JSON into benchmarks/results/threads_busy.json

"Busy": one busy-loop process per core runs beside the training (other users' jobs). Every
measurement is a fresh `hyla train` process (OpenMP reads the policy when torch loads), alternated
over the settings in each round so that drift of the machine's speed falls on all of them. The
default is right when, busy or idle, it trains at least half as fast as one thread.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
from contextlib import contextmanager
from pathlib import Path

from bench_optimizer import write_results

RESULTS = Path(__file__).parent / "results" / "threads_busy.json"
# the environment of each setting: "bounded" is what the `hyla` command sets on Linux
# (GOMP_SPINCOUNT, hyla.cli.bound_openmp_waiting); "" is a value libgomp rejects (with a message) and
# replaces by its default, and that the `hyla` command leaves alone: a process started without hyla
POLICIES = {"bounded": {}, "passive": {"OMP_WAIT_POLICY": "PASSIVE"}, "default": {"OMP_WAIT_POLICY": ""}}


@contextmanager
def busy_cores(busy: bool):
    """One busy-loop process per core while inside (none when not `busy`)."""
    loops = (
        [subprocess.Popen([sys.executable, "-c", "while True: pass"]) for _ in range(os.cpu_count() or 1)]
        if busy
        else []
    )
    try:
        yield
    finally:
        for loop in loops:
            loop.kill()
            loop.wait()


def steps_per_second(preset: str, steps: int, threads: int, policy: dict[str, str]) -> float:
    """A fresh `hyla train` (eager HYLA, no evaluation), as its summary reports it."""
    inherited = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT")}
    env = {**inherited, **policy}
    with tempfile.TemporaryDirectory() as out:
        subprocess.run(
            [
                sys.executable,
                "-m",
                "hyla.cli",
                "train",
                "--preset",
                preset,
                "--model.mixer",
                "hyla",
                "--train.steps",
                str(steps),
                "--train.threads",
                str(threads),
                "--eval.every",
                "0",
                "--eval.final_samples",
                "128",
                "--checkpoint.every",
                str(10 * steps),
                "--log.no-progress",
                "--train.device",
                "cpu",
                "--out_dir",
                out,
                "--name",
                "run",
            ],
            env=env,
            check=True,
            capture_output=True,
        )
        return json.loads((Path(out) / "run" / "summary.json").read_text())["steps_per_second"]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--preset", default="logic_4var_2term")
    parser.add_argument("--steps", type=int, default=200)
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--out", default=str(RESULTS))
    args = parser.parse_args(argv)
    cores = os.cpu_count() or 1
    settings = [(policy, threads) for policy in POLICIES for threads in (cores, 1)]
    rows = []
    for load in ("idle", "busy"):
        rates = {setting: [] for setting in settings}
        with busy_cores(load == "busy"):
            for _ in range(args.rounds):
                for policy, threads in settings:
                    rates[policy, threads].append(steps_per_second(args.preset, args.steps, threads, POLICIES[policy]))
        for policy, threads in settings:
            median = statistics.median(rates[policy, threads])
            one = statistics.median(rates[policy, 1])
            rows.append(
                {
                    "load": load,
                    "omp_wait_policy": policy,
                    "threads": threads,
                    "steps_per_second": median,
                    "all": rates[policy, threads],
                    "vs_one_thread": median / one,
                }
            )
            print(
                f"{load:<5} {policy:<9} {threads} threads: {median:7.2f} steps/s ({median / one:.2f}x one thread)",
                flush=True,
            )
    write_results(
        args.out, cores, [{"preset": args.preset, "steps": args.steps, "rounds": args.rounds, **row} for row in rows]
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
