"""The report's numbers from benchmarks/results/ and the learning-quality gate: speed against the
authors' code on CPUs and GPUs, the speed ledger and the H100's Triton benchmark."""

from __future__ import annotations

import json
import re

from hyla.runs.report import files
from hyla.runs.report.files import read_json


def vs_authors(commit: str) -> dict[str, float]:
    """{preset: median ratio of hyla's compiled steps/s to the authors'} of the benchmark entry at `commit`."""
    runs = read_json("vs_authors_cpu.json", "benchmarks")["runs"]
    [run] = [r for r in runs if (r["machine"].get("hyla_git_commit") or "").startswith(commit)]
    return {row["preset"]: row["ratio_median"] for row in run["summary"] if row["variant"] == "compiled"}


def cpu_sections() -> dict[str, str]:
    """README's speed against the authors' code (`speed_*`), the learning-quality gate (`gate_*`), the
    latest CPU measurement against the authors' code per CPU (`vs_cpu_rows`) and the earlier ones
    (`vs_cpu_earlier_rows`, for the archive), and the speed ledger's (`ledger_*`)."""
    speed = vs_authors("a609782")
    n = {"speed_logic": f"{speed['logic_4var_2term']:.2f}", "speed_raven": f"{speed['raven_3x3_4features']:.2f}"}
    gate = json.loads((files.ROOT / "tests" / "fixtures" / "learning_quality.json").read_text())
    for preset, measured in gate["presets"].items():
        for regression, outside in measured["groups_outside"].items():
            n[f"gate_{preset}_" + re.sub(r"\W+", "_", regression)] = outside
    runs = read_json("vs_authors_cpu.json", "benchmarks")["runs"]
    latest = {run["machine"]["cpu"]: run for run in sorted(runs, key=lambda run: run["machine"]["time_start"])}
    n["vs_cpu_rows"] = "\n".join(vs_authors_cpu_row(run) for run in runs if run in latest.values())
    n["vs_cpu_earlier_rows"] = "\n".join(vs_authors_cpu_row(run) for run in runs if run not in latest.values())
    for row in read_json("ledger.json", "benchmarks")["rows"]:
        low, high = f"{row['ratio_min']:.2f}", f"{row['ratio_max']:.2f}"
        n[f"ledger_{row['mechanism']}_{row['preset']}_{row['mode']}"] = f"{low}x" if low == high else f"{low}–{high}x"
    return n


def vs_authors_cpu_row(run: dict) -> str:
    """One run of benchmarks/results/vs_authors_cpu.json: its commit, CPU and setting, then hyla's steps/s
    over the authors', min / median / max over its pairs, per preset, eager (hyla's default) and compiled."""
    setting = run["setting"]
    cells = {(row["preset"], row["variant"]): row for row in run["summary"]}
    ratios = [
        " / ".join(f"{r[k]:.2f}" for k in ("ratio_min", "ratio_median", "ratio_max"))
        if (r := cells.get((preset, variant)))
        else "–"
        for preset in ("logic_4var_2term", "raven_3x3_4features")
        for variant in ("eager", "compiled")
    ]
    wait = setting.get("omp_wait_policy") or "default"
    malloc = ", the malloc variables given to the authors' too" if setting.get("malloc_env") else ""
    commit = run["machine"].get("hyla_git_commit", "")
    tree = f"`{commit[:7]}`" + (" + uncommitted" if commit.endswith("-dirty") else "")
    return f"| {tree} | {run['machine']['cpu']} | OpenMP wait {wait}{malloc} | {' | '.join(ratios)} |"


def gpu_speed_sections() -> dict[str, str]:
    """The H100's Triton benchmark, `tri_{dtype}_{implementation}_{T}`: seconds (peak MiB), `tri_speedup` the
    range of the streamed form's seconds over Triton's, and its
    side-by-side benchmark with the authors' code, `gpu_vs_{preset}_{variant}`: steps/s (ratio)."""
    n, seconds = {}, {}
    for row in read_json("triton_attention_h100.json", "benchmarks")["rows"]:
        seconds[row["dtype"], row["implementation"], row["length"]] = row["seconds"]
        name = f"tri_{row['dtype']}_{row['implementation']}_{row['length']}"
        n[name] = f"{row['seconds']:.3f} ({row['peak_mib']:,.0f})"
        n[f"tri_batch_{row['length']}"] = str(row["batch"])
    speedups = [seconds[d, "streamed", t] / s for (d, i, t), s in seconds.items() if i == "triton"]
    n["tri_speedup"] = f"{min(speedups):.1f}–{max(speedups):.1f}x"
    for preset in ("logic_4var_2term", "raven_3x3_4features"):
        [run] = read_json(f"vs_authors_gpu_{preset}.json", "benchmarks")["runs"]
        for row in run["summary"]:
            [speed], [authors] = row["hyla_steps_per_second"], row["authors_steps_per_second"]
            n[f"gpu_vs_{preset}_{row['variant']}"] = f"{speed:.1f} ({row['ratio_median']:.2f}x)"
            n[f"gpu_vs_{preset}_authors"] = f"{authors:.1f}"
    return n


def numbers() -> dict[str, str]:
    """Every benchmark number of the report, by name."""
    return {**cpu_sections(), **gpu_speed_sections()}
