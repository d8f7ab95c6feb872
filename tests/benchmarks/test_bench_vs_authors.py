"""benchmarks/bench_vs_authors.py, the GPU benchmark's entry point: its processes x packs variant
is a real `hyla sweep --pack N --parallel P` (checked here with --dry-run), and the whole benchmark
runs end to end at toy sizes (slow)."""

import json
import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))
import bench_vs_authors as bench  # noqa: E402

from hyla.cli import sweep as sweep_command  # noqa: E402
from hyla.runs import sweep  # noqa: E402


@pytest.mark.parametrize("text, expected", [("4x8", (4, 8)), ("1X16", (1, 16))])
def test_processes_by_pack_parses(text, expected):
    assert bench.processes_by_pack(text) == expected


@pytest.mark.parametrize(
    "argv", [["--parallel-packs", "4"], ["--parallel-packs", "0x8"], ["--parallel-packs", "2x8x1"]]
)
def test_bad_processes_by_pack_are_refused(argv, capsys):
    with pytest.raises(SystemExit):
        bench.parse_args(argv)
    assert "expected PxN" in capsys.readouterr().err


def test_processes_by_packs_is_a_packed_sweep(tmp_path, capsys):
    args = bench.parse_args(["--smoke", "--parallel-packs", "2x3"])
    command = bench.hyla_command(args, "logic_4var_2term", "2x3", 5, tmp_path / "measure")
    assert command[1:4] == ["-m", "hyla.cli", "sweep"] and command[-4:] == ["--pack", "3", "--parallel", "2"]
    spec = sweep.SweepSpec.load(command[4])
    assert spec.seeds == list(range(6)) and spec.out_dir == str(tmp_path / "measure")
    assert spec.overrides["train.steps"] == 5 and spec.overrides["train.batch_size"] == 16
    assert sweep_command.main([*command[4:], "--dry-run"]) == 0
    packs = [line for line in capsys.readouterr().out.splitlines() if line.startswith("pack: ")]
    assert packs == ["pack: base__s0, base__s1, base__s2", "pack: base__s3, base__s4, base__s5"]


def test_graphed_runs_and_packs_ask_for_cuda_graphs_and_the_others_do_not(tmp_path):
    args = bench.parse_args(["--smoke", "--modes", "eager", "graphed", "--packs", "3", "--packs-cuda-graph"])
    assert bench.hyla_command(args, "logic_4var_2term", "graphed", 5, tmp_path / "g")[-2:] == [
        "--train.step",
        "graphed",
    ]
    assert "graphed" not in bench.hyla_command(args, "logic_4var_2term", "eager", 5, tmp_path / "e")
    pack = bench.hyla_command(args, "logic_4var_2term", "pack3", 5, tmp_path / "p")
    assert pack[pack.index("--train.step") + 1] == "graphed"
    spec = sweep.SweepSpec.load(bench.hyla_command(args, "logic_4var_2term", "2x3", 5, tmp_path / "s")[4])
    assert spec.overrides["train.step"] == "graphed"
    plain = bench.parse_args(["--smoke", "--packs", "3"])
    assert "--train.step" not in bench.hyla_command(plain, "logic_4var_2term", "pack3", 5, tmp_path / "q")


@pytest.mark.slow
def test_the_benchmark_runs_end_to_end_at_toy_sizes(tmp_path):
    out = tmp_path / "bench.json"
    assert (
        bench.main(
            [
                "--smoke",
                "--presets",
                "logic_4var_2term",
                "--modes",
                "eager",
                "--packs",
                "2",
                "--parallel-packs",
                "2x2",
                "--threads",
                "1",
                "--out",
                str(out),
            ]
        )
        == 0
    )
    measured = {m["variant"]: m for m in json.loads(out.read_text())["runs"][0]["measurements"]}
    assert {variant: m["members"] for variant, m in measured.items()} == {"eager": 1, "pack2": 2, "2x2": 4}
    assert all(m["steps_per_second"] > 0 and m["batch_size"] == 16 for m in measured.values())
    assert measured["2x2"]["numerics"]["packed"] and not measured["eager"]["numerics"]["compile"]
