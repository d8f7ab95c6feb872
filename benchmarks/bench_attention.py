"""Forward+backward time and peak memory of every attention mixer, naive vs memory-bounded HYLA.

    python benchmarks/bench_attention.py                      # T = 64 ... 4096, all 8 mixers
    python benchmarks/bench_attention.py --quick              # T = 64, 256, 1024
    python benchmarks/bench_attention.py --lengths 2048 --mixers hyla softmax --device cuda

Every case (mixer x implementation x length) runs in a fresh subprocess, so that its peak memory
is its own. On CPU: the process's peak resident set (VmHWM) is reset after the inputs are allocated
(`/proc/self/clear_refs`; where that is unavailable, `ru_maxrss`, which cannot be reset), and the
peak is its growth over the resident set at that point. On CUDA: `torch.cuda.max_memory_allocated`
over the memory allocated at that point. The first forward+backward measures memory (and warms
up); the timed repeats follow. Times are the minimum over repeats (on a shared machine the
minimum is the least disturbed run).

Correctness gates the report: before timing, streamed and naive HYLA are compared in float64 on
outputs and gradients at T=193 with blocks of 37 keys; if they disagree no speedup is reported.
At every benchmarked size where naive fits, the streamed outputs and gradients are compared with
the naive ones too (same seeded inputs): outputs as max |diff| / max |naive|, gradients as
||diff|| / ||naive||, since a ReLU pre-activation within rounding of 0 flips its derivative and
moves a few gradient entries by O(a) (a real rounding effect, present in the naive form too).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import resource
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

from hyla.ops import NAMED_MIXERS, attention, attention_naive, hyla_streamed

LENGTHS = (64, 256, 1024, 2048, 4096)
QUICK_LENGTHS = (64, 256, 1024)
OUT = Path(__file__).parent / "results" / "attention.json"
# Target of issue 2: memory-bounded HYLA at T=2048 vs the naive form.
TARGET = dict(mixer="hyla", length=2048, memory_ratio=8.0, time_ratio=1.5, relative_error=1e-5)
GATE_TOLERANCE = 1e-10  # float64, max |streamed - naive| / max |naive|


def parse_args(argv=None):
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--lengths", type=int, nargs="+", help=f"sequence lengths (default {LENGTHS})")
    p.add_argument("--quick", action="store_true", help=f"lengths {QUICK_LENGTHS}, one timed repeat")
    p.add_argument("--mixers", nargs="+", default=list(NAMED_MIXERS), choices=list(NAMED_MIXERS))
    p.add_argument("--batch", type=int, default=1)
    p.add_argument("--heads", type=int, default=8)
    p.add_argument("--head-dim", type=int, default=64, help="Dk = Dv")
    p.add_argument("--dtype", default="float32", choices=["float32", "float64", "bfloat16"])
    p.add_argument("--device", default="cpu")
    p.add_argument("--threads", type=int, default=torch.get_num_threads(), help="intra-op threads (CPU)")
    p.add_argument("--repeats", type=int, default=3, help="timed runs per case (fewer once a case passes --budget-s)")
    p.add_argument("--budget-s", type=float, default=30.0, help="stop repeating a case after this much timing")
    p.add_argument("--max-gib", type=float, default=8.0, help="skip naive cases estimated to need more memory")
    p.add_argument("--out", type=Path, default=OUT)
    p.add_argument("--case", help=argparse.SUPPRESS)  # internal: run one case, print a JSON line
    args = p.parse_args(argv)
    args.lengths = args.lengths or (QUICK_LENGTHS if args.quick else LENGTHS)
    if args.quick:
        args.repeats = 1
    return args


def axes(mixer: str) -> dict:
    m = NAMED_MIXERS[mixer][1]
    return dict(normalization=m.normalization, value_network=m.value_network, activation=m.activation)


def make_inputs(batch, length, heads, head_dim, dtype, device, seed=0):
    g = torch.Generator().manual_seed(seed)
    q, k, v, grad_out = (torch.randn(batch, length, heads, head_dim, generator=g, dtype=dtype) for _ in range(4))
    return [t.to(device).requires_grad_() for t in (q, k, v)], grad_out.to(device)


def relative_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual - expected).abs().max() / expected.abs().max().clamp_min(1e-30)).item()


def relative_l2_error(actual: torch.Tensor, expected: torch.Tensor) -> float:
    return ((actual - expected).norm() / expected.norm().clamp_min(1e-30)).item()


def _proc_status_bytes(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1]) * 1024
    raise KeyError(field)


class CpuPeakMemory:
    """Peak resident-set growth from `start()` on: VmHWM reset via clear_refs, else ru_maxrss."""

    def start(self) -> None:
        try:
            Path("/proc/self/clear_refs").write_text("5")  # resets VmHWM to the current VmRSS
            self.method, self.baseline = "VmHWM reset", _proc_status_bytes("VmRSS")
        except OSError:
            self.method = "ru_maxrss (not resettable: a lower bound)"
            self.baseline = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024

    def peak(self) -> int:
        if self.method == "VmHWM reset":
            return _proc_status_bytes("VmHWM") - self.baseline
        return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024 - self.baseline


def naive_peak_estimate_gib(mixer, batch, length, heads, head_dim, bytes_per) -> float:
    """Rough peak of the naive forward+backward: ~4 hidden tensors [B, T, T, Dv] for HYLA (pre- and
    post-activation and their gradients), ~6 score tensors [B, H, T, T] for every mixer."""
    scores = batch * heads * length * length * bytes_per
    hidden = batch * length * length * head_dim * bytes_per if axes(mixer)["value_network"] == "mlp" else 0
    return (4 * hidden + 6 * scores) / 2**30


# --- one case, in its own process --------------------------------------------------------------------


def run_case(case: dict) -> dict:
    """Peak memory of one forward+backward, then timed repeats. Saves / compares naive results."""
    torch.set_num_threads(case["threads"])
    device, dtype = torch.device(case["device"]), getattr(torch, case["dtype"])
    cuda = device.type == "cuda"
    implementation = case["implementation"]

    def step(inputs, grad_out):
        for t in inputs:
            t.grad = None
        out = attention(*inputs, **axes(case["mixer"]), implementation=implementation)
        out.backward(grad_out)
        if cuda:
            torch.cuda.synchronize()
        return out

    # A tiny run first, so one-time costs (library code paged in, thread pools, kernel caches:
    # ~40 MiB of resident set on CPU) are not counted as the case's memory.
    step(*make_inputs(1, 8, case["heads"], case["head_dim"], dtype, device))
    inputs, grad_out = make_inputs(case["batch"], case["length"], case["heads"], case["head_dim"], dtype, device)

    if cuda:
        torch.cuda.synchronize()
        torch.cuda.reset_peak_memory_stats()
        baseline, method = torch.cuda.memory_allocated(), "cuda max_memory_allocated"
    else:
        memory = CpuPeakMemory()
        memory.start()
        method = memory.method
    start = time.perf_counter()
    out = step(inputs, grad_out)
    first = time.perf_counter() - start
    peak = torch.cuda.max_memory_allocated() - baseline if cuda else memory.peak()

    result = {**case, "peak_bytes": peak, "memory_method": method, "first_s": first}
    # Same seeded inputs in both processes: naive leaves its results, streamed compares with them.
    saved = Path(case["compare_file"])
    results = [out.detach().cpu()] + [t.grad.cpu() for t in inputs]
    if implementation == "naive":
        torch.save(results, saved)
    elif saved.exists():
        expected = torch.load(saved)
        result["output_error"] = relative_error(results[0], expected[0])
        result["grad_error"] = max(relative_l2_error(a, e) for a, e in zip(results[1:], expected[1:]))

    times = []
    while len(times) < case["repeats"] and sum(times) < case["budget_s"]:
        start = time.perf_counter()
        step(inputs, grad_out)
        times.append(time.perf_counter() - start)
    result["times_s"] = times
    result["time_s"] = min(times)
    return result


def spawn_case(case: dict) -> dict:
    proc = subprocess.run(
        [sys.executable, __file__, "--case", json.dumps(case)], capture_output=True, text=True, check=False
    )
    if proc.returncode != 0:
        return {
            **case,
            "error": proc.stderr.strip().splitlines()[-1] if proc.stderr.strip() else f"exit {proc.returncode}",
        }
    return json.loads(proc.stdout.strip().splitlines()[-1])


# --- correctness gate ----------------------------------------------------------------------------------


def correctness_check(args) -> dict:
    """Streamed vs naive HYLA in float64 on outputs and q/k/v gradients, T=193, blocks of 37 keys."""
    report = {}
    for mixer in args.mixers:
        if axes(mixer)["value_network"] != "mlp":
            continue
        kw = {key: val for key, val in axes(mixer).items() if key != "value_network"}
        results = {}
        for name, fn in (
            ("naive", lambda q, k, v: attention_naive(q, k, v, value_network="mlp", **kw)[0]),
            ("streamed", lambda q, k, v: hyla_streamed(q, k, v, block=37, **kw)),
        ):
            inputs, grad_out = make_inputs(
                args.batch, 193, args.heads, args.head_dim, torch.float64, args.device, seed=1
            )
            out = fn(*inputs)
            results[name] = [out, *torch.autograd.grad(out, inputs, grad_out)]
        output_error = relative_error(results["streamed"][0], results["naive"][0])
        grad_error = max(relative_error(a, e) for a, e in zip(results["streamed"][1:], results["naive"][1:]))
        report[mixer] = dict(
            output_error=output_error,
            grad_error=grad_error,
            passed=output_error <= GATE_TOLERANCE and grad_error <= GATE_TOLERANCE,
        )
    return report


# --- driver ----------------------------------------------------------------------------------------------


def machine_info(args) -> dict:
    info = dict(
        platform=platform.platform(),
        processor=platform.processor() or platform.machine(),
        cpu_count=os.cpu_count(),
        torch=torch.__version__,
        threads=args.threads,
        device=args.device,
        load_average=os.getloadavg(),
    )
    if args.device.startswith("cuda"):
        info["gpu"] = torch.cuda.get_device_name(args.device)
    return info


def format_bytes(n) -> str:
    return "-" if n is None else f"{n / 2**20:,.0f} MiB"


def print_length_table(length: int, rows: list[dict], speedups_allowed: bool) -> None:
    print(f"\nT = {length}")
    print(f"  {'mixer':<26} {'impl':<9} {'time (s)':>9} {'peak':>11}   vs naive")
    naive = {r["mixer"]: r for r in rows if r["implementation"] == "naive" and "time_s" in r}
    for r in rows:
        if "skipped" in r or "error" in r:
            print(f"  {r['mixer']:<26} {r['implementation']:<9} {'':>9} {'':>11}   {r.get('skipped') or r['error']}")
            continue
        note = ""
        base = naive.get(r["mixer"])
        if r["implementation"] == "streamed":
            if not speedups_allowed:
                note = "(correctness check failed: no comparison reported)"
            elif base is not None:
                memory = (
                    f"memory /{base['peak_bytes'] / r['peak_bytes']:.1f}"
                    if r["peak_bytes"] >= 2**20
                    else "memory: < 1 MiB"
                )
                note = (
                    f"time x{r['time_s'] / base['time_s']:.2f}, {memory}, "
                    f"error out {r['output_error']:.0e} grads {r['grad_error']:.0e}"
                )
        peak = format_bytes(r["peak_bytes"])
        print(f"  {r['mixer']:<26} {r['implementation']:<9} {r['time_s']:>9.3f} {peak:>11}   {note}")


def target_report(results: list[dict], speedups_allowed: bool) -> dict | None:
    pick = {
        r["implementation"]: r
        for r in results
        if r["mixer"] == TARGET["mixer"] and r["length"] == TARGET["length"] and "time_s" in r
    }
    if set(pick) != {"naive", "streamed"} or not speedups_allowed:
        return None
    naive, streamed = pick["naive"], pick["streamed"]
    report = dict(
        memory_ratio=naive["peak_bytes"] / max(streamed["peak_bytes"], 1),
        time_ratio=streamed["time_s"] / naive["time_s"],
        output_error=streamed["output_error"],
        grad_error=streamed["grad_error"],
    )
    report["passed"] = (
        report["memory_ratio"] >= TARGET["memory_ratio"]
        and report["time_ratio"] <= TARGET["time_ratio"]
        and report["output_error"] <= TARGET["relative_error"]
    )
    return {**TARGET, **report}


def main(argv=None) -> None:
    args = parse_args(argv)
    if args.case:
        print(json.dumps(run_case(json.loads(args.case))))
        return
    torch.set_num_threads(args.threads)
    info = machine_info(args)
    print("machine:", ", ".join(f"{k}={v}" for k, v in info.items()))
    print(
        f"B={args.batch} H={args.heads} Dk=Dv={args.head_dim} {args.dtype}, forward+backward, "
        f"{args.threads} thread(s), time = min over up to {args.repeats} runs"
    )

    correctness = correctness_check(args)
    speedups_allowed = all(c["passed"] for c in correctness.values())
    print_correctness(correctness, speedups_allowed)
    results = run_all_cases(args, speedups_allowed)
    target = target_report(results, speedups_allowed)
    if target is not None:
        print_target(target)
    write_results(args, info, correctness, speedups_allowed, target, results)


def print_correctness(correctness: dict, speedups_allowed: bool) -> None:
    for mixer, c in correctness.items():
        print(
            f"correctness (float64) {mixer:<26} output {c['output_error']:.1e} grads {c['grad_error']:.1e} "
            f"{'ok' if c['passed'] else 'FAILED'}"
        )
    if not speedups_allowed:
        print("streamed and naive disagree: timings are listed, but no speedup is reported")


def run_all_cases(args, speedups_allowed: bool) -> list[dict]:
    """Every (length, mixer, implementation) case, each in its own process; a table per length."""
    bytes_per = torch.tensor([], dtype=getattr(torch, args.dtype)).element_size()
    results = []
    with tempfile.TemporaryDirectory() as scratch:
        for length in args.lengths:
            rows = []
            for mixer in args.mixers:
                implementations = ["naive", "streamed"] if axes(mixer)["value_network"] == "mlp" else ["naive"]
                for implementation in implementations:
                    row = run_or_skip(args, mixer, implementation, length, bytes_per, Path(scratch))
                    row.pop("compare_file")
                    rows.append(row)
            print_length_table(length, rows, speedups_allowed)
            results += rows
    return results


def run_or_skip(args, mixer: str, implementation: str, length: int, bytes_per: int, scratch: Path) -> dict:
    """One case's result, or the case marked skipped when naive would need more than --max-gib."""
    case = dict(
        mixer=mixer,
        implementation=implementation,
        length=length,
        batch=args.batch,
        heads=args.heads,
        head_dim=args.head_dim,
        dtype=args.dtype,
        device=args.device,
        threads=args.threads,
        repeats=args.repeats,
        budget_s=args.budget_s,
        compare_file=str(scratch / f"{mixer}-{length}.pt"),
    )
    estimate = naive_peak_estimate_gib(mixer, args.batch, length, args.heads, args.head_dim, bytes_per)
    if implementation == "naive" and estimate > args.max_gib:
        return {**case, "skipped": f"skipped: naive needs ~{estimate:.0f} GiB > --max-gib {args.max_gib:g}"}
    return spawn_case(case)


def print_target(target: dict) -> None:
    print(
        f"\ntarget (T={TARGET['length']}, {TARGET['mixer']}): "
        f"memory /{target['memory_ratio']:.1f} (>= {TARGET['memory_ratio']:g}), "
        f"time x{target['time_ratio']:.2f} (<= {TARGET['time_ratio']:g}), "
        f"output error {target['output_error']:.1e} (<= {TARGET['relative_error']:g}): "
        f"{'PASSED' if target['passed'] else 'MISSED'}"
    )


def write_results(args, info: dict, correctness: dict, speedups_allowed: bool, target, results: list[dict]) -> None:
    args.out.parent.mkdir(parents=True, exist_ok=True)
    settings = dict(
        batch=args.batch,
        heads=args.heads,
        head_dim=args.head_dim,
        dtype=args.dtype,
        lengths=list(args.lengths),
        mixers=args.mixers,
        repeats=args.repeats,
        max_gib=args.max_gib,
    )
    report = dict(
        machine=info,
        settings=settings,
        correctness=correctness,
        speedups_reported=speedups_allowed,
        target=target,
        results=results,
    )
    args.out.write_text(json.dumps(report, indent=1) + "\n")
    print(f"\nwrote {args.out}")


if __name__ == "__main__":
    main()
