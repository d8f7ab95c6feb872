"""The claims table's verdicts follow one rule (hyla.runs.report.claims_paper) and follow the records."""

import json
import shutil
import sys
from pathlib import Path

import pytest

from hyla.runs.report import claims_paper as cp
from hyla.runs.report import files

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))  # the command experiments/figures.py

HOLD, FAIL, ONE, NONE = cp.Check(cp.HOLDS), cp.Check(cp.FAILS), cp.Check(cp.UNDECIDED), cp.untested("no GPU")


@pytest.mark.parametrize(
    "checks, word",
    [
        ([HOLD, HOLD], "**reproduced** (2 of 2 checks hold)"),
        ([FAIL, FAIL], "**not reproduced** (0 of 2 checks hold)"),
        ([HOLD, FAIL], "**partly** (1 of 2 checks hold)"),
        ([FAIL, ONE], "**not decided at 1 seed** (0 of 2 checks hold; 1 at 1 seed)"),
        ([HOLD, ONE], "**partly** (1 of 2 checks hold; 1 at 1 seed)"),
        ([HOLD, NONE], "**partly** (1 of 1 checks hold; not run: no GPU)"),
        ([NONE], "**not tested**: no GPU"),
    ],
)
def test_the_verdict_rule(checks, word):
    assert cp.verdict(checks) == word


def test_a_difference_needs_two_seeds_a_side_and_twice_its_standard_error():
    assert cp.greater([3.0], [1.0, 1.2]).outcome == cp.UNDECIDED
    assert cp.greater([], [1.0, 1.2]).outcome == cp.UNTESTED
    assert cp.greater([3.0, 3.2], [1.0, 1.2]).outcome == cp.HOLDS  # 2 ± 0.14
    assert cp.greater([3.0, 5.0], [1.0, 3.0]).outcome == cp.FAILS  # 2 ± 1.41: within twice
    assert cp.within([80.0, 82.0], (81.0, 0.5)).outcome == cp.HOLDS
    assert cp.within([90.0, 92.0], (81.0, 0.5)).outcome == cp.FAILS
    assert cp.every_model("3 of 3").outcome == cp.HOLDS and cp.every_model("2 of 3").outcome == cp.FAILS


def test_seeds_that_land_decide_the_sraven_rows(tmp_path, monkeypatch):
    """A second seed of every SRAVEN 20M row turns 'not decided at 1 seed' into a decided verdict."""
    for folder in files.RESULTS.iterdir():
        (tmp_path / folder.name).symlink_to(folder)
    (tmp_path / cp.SRAVEN_20M).unlink()
    shutil.copytree(files.RESULTS / cp.SRAVEN_20M / "records", tmp_path / cp.SRAVEN_20M / "records")
    monkeypatch.setattr(files, "RESULTS", tmp_path)
    assert cp.claim_numbers()["pc_a1_sraven_verdict"].startswith("**not decided at 1 seed**")
    for record in list((tmp_path / cp.SRAVEN_20M / "records").rglob("*__s0.run.json")):
        text = record.read_text().replace('"seed": 0', '"seed": 1')
        record.with_name(record.name.replace("__s0", "__s1")).write_text(text)
    numbers = cp.claim_numbers()
    assert "1 seed" not in numbers["pc_a1_sraven_hyla"] and "seeds 0, 1" in numbers["pc_a1_sraven_budget"]
    assert not numbers["pc_a1_sraven_verdict"].startswith("**not decided")


def test_the_committed_figures_are_drawn_from_the_records_and_a_changed_one_fails(tmp_path, monkeypatch, capsys):
    import figures

    assert figures.main(["--check"]) == 0, "experiments/figures/ is out of date: run python experiments/figures.py"
    for folder in files.RESULTS.iterdir():
        (tmp_path / folder.name).symlink_to(folder)
    (tmp_path / cp.FUZZY).unlink()
    shutil.copytree(files.RESULTS / cp.FUZZY / "records", tmp_path / cp.FUZZY / "records")
    [record] = (tmp_path / cp.FUZZY / "records").rglob("mixer-hyla__s0.run.json")
    changed = json.loads(record.read_text())
    changed["summary"]["final"]["ood"]["r2"] += 0.01
    record.write_text(json.dumps(changed))
    monkeypatch.setattr(files, "RESULTS", tmp_path)
    assert figures.main(["--check"]) == 1 and "figures.json is out of date" in capsys.readouterr().err


def test_the_nonlinearity_is_tested_on_sraven_once_its_ablation_has_completed():
    """HYLA against HYLA − nonlinearity on SRAVEN: not tested before the ablation completes, undecided at
    one seed a side, then decided by twice the s.e.; fuzzy logic is shown, never checked."""
    fuzzy = {("hyla", False): [91.0, 92.0], ("hyla_identity", False): [93.0, 94.0]}  # ahead: not HYLA's claim
    row = cp.nonlinear_row(fuzzy, {("hyla", False): [64.0]})
    assert cp.verdict(row["checks"]) == "**not tested**: no completed HYLA − nonlinearity run at 20M examples"
    assert "fuzzy logic: HYLA 91.5 ± 0.5, HYLA − nonlinearity 93.5 ± 0.5" in row["hyla"]
    one = {("hyla", False): [64.0, 66.0], ("hyla_identity", False): [56.0]}
    assert cp.verdict(cp.nonlinear_row(fuzzy, one)["checks"]).startswith("**not decided at 1 seed**")
    ahead = {("hyla", False): [64.0, 66.0], ("hyla_identity", False): [56.0, 57.0]}
    assert cp.verdict(cp.nonlinear_row(fuzzy, ahead)["checks"]) == "**reproduced** (1 of 1 checks hold)"
    tied = {("hyla", False): [64.0, 66.0], ("hyla_identity", False): [64.0, 65.0]}
    assert cp.verdict(cp.nonlinear_row(fuzzy, tied)["checks"]) == "**not reproduced** (0 of 1 checks hold)"


def test_fig5e_keeps_every_seed_of_a_mixer(tmp_path, monkeypatch):
    """A second HYLA model in the stability file is a check and a name of its own, not a replacement."""
    for folder in files.RESULTS.iterdir():
        (tmp_path / folder.name).symlink_to(folder)
    (tmp_path / cp.FIG5E_STABILITY).unlink()
    stability = json.loads((files.RESULTS / cp.FIG5E_STABILITY / "fig5e_stability.json").read_text())
    hyla = next(m for m in stability["models"] if m["mixer"] == "hyla")
    unstable = {name: {**v, "stable": False} for name, v in hyla["code_sets"].items()}
    stability["models"].append({"mixer": "hyla", "seed": 1, "code_sets": unstable})
    (tmp_path / cp.FIG5E_STABILITY).mkdir()
    (tmp_path / cp.FIG5E_STABILITY / "fig5e_stability.json").write_text(json.dumps(stability))
    monkeypatch.setattr(files, "RESULTS", tmp_path)
    row = cp.fig5e()
    assert "HYLA s1 none" in row["hyla"] and "HYLA s0 " in row["hyla"]
    assert len(row["checks"]) == 3 + len(stability["models"])  # raven_cpu's three mixers, then each 20M model
    assert row["checks"][-1].outcome == cp.FAILS


def test_the_table_a1_figure_draws_the_mean_and_its_standard_error_from_two_seeds_on():
    """Each seed a dot, the mean a bar, and its s.e. over the seeds an error bar where there are 2 or more."""
    from hyla.runs.report.figures import table_a1_figure

    rows = [
        {"row": "HYLA", "paper": [69.13, 1.90], "hyla": [63.0, 65.0, 64.0]},
        {"row": "softmax", "paper": [56.56, 1.05], "hyla": [56.4]},
        {"row": "linear", "paper": [56.30, 1.11], "hyla": []},
    ]
    fig = table_a1_figure({"fuzzy_logic": rows, "sraven": rows})
    for ax in fig.axes:
        [bar] = [c for c in ax.containers if c.get_label() == "hyla, mean ± s.e. over seeds"]  # the 3-seed row's
        [segment] = bar.lines[2][0].get_segments()  # [[low, y], [high, y]]
        assert segment[:, 0] == pytest.approx([64.0 - 1 / 3**0.5, 64.0 + 1 / 3**0.5])  # s.e. = 1/√3
        assert segment[0, 1] == pytest.approx(0 - 0.15)  # beside the HYLA row's dots
