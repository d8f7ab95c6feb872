"""experiments/sweeps/table_a1_raven_gpu.yaml: the softmax / linear / HYLA rows of the paper's SRAVEN
sweep, in its folder, planned as one pack per mixer."""

from pathlib import Path

import pytest

from hyla.cli import sweep as sweep_command
from hyla.runs import sweep
from hyla.train.configs import ConfigError

SWEEPS = Path(__file__).resolve().parents[2] / "experiments" / "sweeps"


def test_the_gpu_recipe_packs_the_paper_sweeps_rows(tmp_path, capsys):
    gpu, paper = (
        sweep.SweepSpec.load(SWEEPS / name) for name in ("table_a1_raven_gpu.yaml", "table_a1_raven_paper.yaml")
    )
    assert gpu.out_dir == paper.out_dir and gpu.preset == paper.preset
    paper_runs = {run.name: run for run in paper.runs()}
    for run in gpu.runs():  # the same runs: names, seeds and settings
        assert paper_runs[run.name] == run
    assert len(gpu.runs()) == 9
    assert (
        sweep_command.main(
            [str(SWEEPS / "table_a1_raven_gpu.yaml"), "--pack", "3", "--dry-run", "--out-dir", str(tmp_path)]
        )
        == 0
    )
    packs = [line for line in capsys.readouterr().out.splitlines() if line.startswith("pack: ")]
    assert packs == [f"pack: mixer-{m}__s0, mixer-{m}__s1, mixer-{m}__s2" for m in ("softmax", "linear", "hyla")]


def test_threads_option_sets_each_runs_threads(tmp_path, capsys):
    """--threads overrides cores / parallel, for a sweep that shares the machine with other work."""
    spec = [str(SWEEPS / "table_a1_raven_40k.yaml"), "--dry-run", "--out-dir", str(tmp_path), "--parallel", "1"]
    assert sweep_command.main(spec + ["--threads", "1"]) == 0
    out = capsys.readouterr().out
    commands = [line for line in out.splitlines() if " train " in line]
    assert "(1 at once, 1 threads each)" in out and len(commands) == 9
    assert all("--train.threads 1" in line for line in commands)
    assert sweep_command.main(spec + ["--threads", "3", "--pack", "3"]) == 0
    out = capsys.readouterr().out
    assert "in packs of at most 3, 1 at a time (3 threads each)" in out and out.count("\npack: ") == 3


@pytest.mark.parametrize("path", sorted(SWEEPS.glob("*.yaml")), ids=lambda p: p.name)
def test_every_sweep_file_builds_valid_run_configs(path):
    spec = sweep.SweepSpec.load(path)
    assert spec.runs()
    spec.seeds = spec.seeds[:1]  # every grid point once: the other seeds' arguments differ in `--seed N` alone
    assert sweep_command.run_configs(spec, threads=1)  # every run's `hyla train` arguments parse and validate


def test_only_selects_runs_by_name_and_a_pattern_matching_none_is_one_line(tmp_path, capsys):
    spec = [str(SWEEPS / "table_a1_raven_40k.yaml"), "--dry-run", "--out-dir", str(tmp_path), "--parallel", "1"]
    assert sweep_command.main(spec + ["--only", "mixer-hyla__s0", "mixer-softmax__*"]) == 0
    commands = [line for line in capsys.readouterr().out.splitlines() if " train " in line]
    names = [line.split("--name ")[1].split()[0] for line in commands]
    assert names == ["mixer-softmax__s0", "mixer-hyla__s0", "mixer-softmax__s1", "mixer-softmax__s2"]
    with pytest.raises(ConfigError, match=r"--only 'mixer-hyla__s3' matches no run; the runs: mixer-softmax__s0, "):
        sweep_command.main(spec + ["--only", "mixer-hyla__*", "mixer-hyla__s3"])
