"""hyla.runs.report.sraven_budget: curves from records, binomial errors and changes of order."""

import json
import math
import runpy
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def budget():
    from hyla.runs.report import sraven_budget

    return sraven_budget


def record(mixer: str, accuracies: list[float], completed: bool, seed: int = 0) -> dict:
    steps = 5000 * len(accuracies)
    metrics = [{"step": 5000 * (i + 1), "split": "ood", "acc": a} for i, a in enumerate(accuracies)]
    metrics += [{"step": 5000 * (i + 1), "split": "valid", "acc": a + 0.01} for i, a in enumerate(accuracies)]
    metrics += [{"step": 5000 * (i + 1), "split": "train", "loss": 1 - a} for i, a in enumerate(accuracies)]
    metrics.insert(0, {"step": 100, "split": "train", "loss": 2.0})
    train = {"steps": steps, "batch_size": 128}
    evaluation = {"samples": 5120, "final_samples": 51200}
    return {
        "run": f"sweep/mixer-{mixer}__s{seed}",
        "config": {"model": {"mixer": mixer}, "seed": seed, "train": train, "eval": evaluation},
        "summary": {"status": "completed"} if completed else {},
        "metrics": metrics,
    }


def test_a_curve_counts_the_final_evaluation_at_its_own_size(budget):
    done = budget.curve(record("hyla", [0.1, 0.5], completed=True))
    assert [n for _, _, n in done.points] == [5120, 51200]
    assert done.standard_error(1) == pytest.approx(math.sqrt(0.25 / 51200))
    under_way = budget.curve(record("hyla", [0.1, 0.5], completed=False))
    assert [n for _, _, n in under_way.points] == [5120, 5120]


def test_changes_of_order_are_found_and_judged_against_their_errors(budget):
    hyla = budget.curve(record("hyla", [0.10, 0.20, 0.60], completed=False))
    softmax = budget.curve(record("softmax", [0.30, 0.40, 0.50], completed=False))
    (line,) = budget.crossings(hyla, softmax)
    assert line.startswith("hyla takes the lead from softmax between steps 10,000 and 15,000")
    assert "beyond 2 s.e." in line
    close = budget.curve(record("linear", [0.199, 0.201, 0.2], completed=False))
    assert "within 2 s.e." in budget.crossings(hyla, close)[0]
    assert budget.crossings(softmax, budget.curve(record("linear", [0.2, 0.3, 0.4], completed=False))) == []
    catching_up = budget.curve(record("linear", [0.1, 0.2, 0.505], completed=False))  # 0.5 points: within
    (line,) = budget.crossings(catching_up, softmax)
    assert line.endswith("(beyond 2 s.e. before, within after)")


def test_a_run_moved_by_its_resume_copy_ends_as_the_uninterrupted_run(budget, tmp_path, monkeypatch):
    from dataclasses import replace

    from helpers_train import assert_same_weights, final_weights, tiny_config

    from hyla.train import train

    monkeypatch.setattr(budget, "RESUME", tmp_path / "committed" / "resume")
    reference = train(tiny_config(tmp_path / "reference", name="run"))
    stopped = tiny_config(tmp_path / "machine_a", name="run", stop_at=10)
    train(stopped)
    assert budget.save_resume_state(tmp_path / "machine_a") == ["run: resume copy at step 10"]

    new_machine = tmp_path / "machine_b"
    assert budget.restore_resume_state(new_machine) == ["run: restored at step 10"]
    assert budget.restore_resume_state(new_machine) == ["run: left alone (step 10 here, 10 saved)"]
    moved = replace(stopped, out_dir=str(new_machine), resume=True, train=replace(stopped.train, stop_at=0))
    finished = train(moved)
    assert_same_weights(final_weights(reference), final_weights(finished))
    untimed = [
        [{k: v for k, v in json.loads(line).items() if k not in ("steps_per_second", "wall_time_s")} for line in lines]
        for lines in ((r / "metrics.jsonl").read_text().splitlines() for r in (reference, finished))
    ]
    assert untimed[0] == untimed[1] and untimed[0][-1]["step"] == 20
    assert budget.save_resume_state(new_machine) == ["run: completed, resume copy dropped"]
    assert not (tmp_path / "committed" / "resume" / "run").exists()


def test_a_snapshot_records_the_runs_under_way_and_drops_those_completed(budget, tmp_path, monkeypatch):
    from hyla.runs import records

    monkeypatch.setattr(budget, "ROOT", tmp_path)
    monkeypatch.setattr(budget, "PROGRESS", tmp_path / "progress")
    monkeypatch.setattr(budget, "FULL", tmp_path / "full")
    for name in ("mixer-hyla__s0", "mixer-linear__s0"):
        run = tmp_path / "sweep" / name
        run.mkdir(parents=True)
        (run / "config.json").write_text(json.dumps({"seed": 0}))
        (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "split": "train", "loss": 1.0}) + "\n")
    assert budget.snapshot(tmp_path / "sweep") == [
        "wrote progress/records/sweep/mixer-hyla__s0.run.json",
        "wrote progress/records/sweep/mixer-linear__s0.run.json",
    ]
    records.write(records.from_folder(tmp_path / "sweep" / "mixer-hyla__s0"), tmp_path / "full")  # hyla completes
    assert budget.snapshot(tmp_path / "sweep") == [
        "mixer-hyla__s0: completed, progress record dropped",
        "wrote progress/records/sweep/mixer-linear__s0.run.json",
    ]
    assert [p.name for p in records.find(tmp_path / "progress" / "records")] == ["mixer-linear__s0.run.json"]
    assert budget.snapshot(tmp_path / "sweep")[0] == "wrote progress/records/sweep/mixer-linear__s0.run.json"


def test_a_snapshot_copies_what_a_completed_run_wrote_in_its_own_checkout(budget, tmp_path, monkeypatch):
    import subprocess

    from hyla.runs import records

    monkeypatch.setattr(budget, "ROOT", tmp_path / "main")
    monkeypatch.setattr(budget, "FULL", tmp_path / "main" / "results" / "full")
    checkout = tmp_path / "batch"
    subprocess.run(["git", "init", "-q", str(checkout)], check=True)
    theirs = checkout / "results" / "full"
    for name, status in (("mixer-hyla__s1", "completed"), ("mixer-linear__s1", "running")):
        run = checkout / "runs" / "sweep" / name
        run.mkdir(parents=True)
        (run / "config.json").write_text(json.dumps({"seed": 1}))
        (run / "summary.json").write_text(json.dumps({"status": status}))
        (run / "metrics.jsonl").write_text(json.dumps({"step": 1, "split": "train", "loss": 1.0}) + "\n")
    run_root = checkout / "runs" / "sweep"
    assert budget.collect_completed(run_root) == [
        f"mixer-hyla__s1: completed, but its record and weights are not in {theirs}"
    ]
    records.write(records.from_folder(run_root / "mixer-hyla__s1"), theirs)  # as hyla.runs.launch does
    (theirs / "models" / "mixer-hyla__s1").mkdir(parents=True)
    (theirs / "models" / "mixer-hyla__s1" / "manifest.json").write_text("{}")
    (theirs / "models" / "mixer-hyla__s1" / "model.safetensors").write_bytes(b"weights")
    assert budget.collect_completed(run_root) == [f"mixer-hyla__s1: completed, record and weights copied from {theirs}"]
    full = tmp_path / "main" / "results" / "full"
    assert (
        records.path_of(full, "sweep/mixer-hyla__s1").read_text()
        == records.path_of(theirs, "sweep/mixer-hyla__s1").read_text()
    )
    assert (full / "models" / "mixer-hyla__s1" / "model.safetensors").read_bytes() == b"weights"
    assert budget.collect_completed(run_root) == []  # main has it now; the run under way is not collected


def test_the_report_tables_how_each_run_fits_its_training_tasks(budget):
    curves = [budget.curve(record(m, a, completed=False)) for m, a in (("softmax", [0.3, 0.4]), ("hyla", [0.1]))]
    text = budget.report(curves)
    assert "| step | softmax s0 valid / loss | hyla s0 valid / loss |" in text
    assert "| 5,000 | 31.00 / 0.7000 | 11.00 / 0.9000 |" in text and "| 10,000 | 41.00 / 0.6000 |  |" in text


def test_each_session_of_a_run_is_a_stretch_with_its_pace_while_training_and_its_cpu(budget):
    run = record("hyla", [0.1, 0.2], completed=False)  # steps 5,000 and 10,000 of 10,000
    run["metrics"] = [
        {"step": step, "split": "train", "loss": 1.0, "steps_per_second": pace}
        for step, pace in [(1000, 3.0), (2000, 0.01), (4000, 4.0), (6000, 2.0), (8000, 2.0)]
    ]
    run["env"] = {
        "sessions": [
            {"time": "2026-11-28T14:27:13+0000", "git_commit": "e2d7e32ff650", "from_step": 0, "cpu": "Intel Xeon"},
            {"time": "2026-11-28T17:16:42+0000", "git_commit": "5486a871b258", "from_step": 4321, "cpu": "AMD EPYC"},
        ]
    }
    c = budget.curve(run)
    first, second = c.stretches
    assert (first.started, first.commit, first.from_step, first.to_step) == ("2026-11-28 14:27", "e2d7e32", 0, 4321)
    # the record at step 2,000 spans a pause (0.01 steps/s): the median leaves it out of the pace
    assert (first.steps_per_second, first.cpu) == (pytest.approx(3.0), "Intel Xeon")
    assert (second.from_step, second.to_step, second.steps_per_second, second.cpu) == (
        4321,
        8000,
        pytest.approx(2.0),
        "AMD EPYC",
    )
    assert budget.hours_left([c]) == [pytest.approx(2000 / 2.0 / 3600)]  # at the latest stretch's pace
    assert "| hyla s0 | 2026-11-28 17:16 | `5486a87` | AMD EPYC | 4,321 → 8,000 | 2.00 |" in budget.report([c])


def test_the_hours_left_count_the_runs_speeding_up_as_others_complete(budget):
    def run(mixer: str, last_step: int, pace: float | None, completed: bool = False):
        stretch = budget.Stretch("2026-11-28 14:27", "e2d7e32", 0, last_step, pace, "AMD EPYC")
        return budget.Curve(mixer, 0, 128, 30_000, completed, last_step, [], {}, {}, [stretch])

    # 3,600, 7,200 and 10,800 steps left, each at 1 step/s while three share the two cores (2/3 of a
    # core each): the first ends after 1 h; then two runs, a core each, 1.5 steps/s: the second's
    # 3,600 steps left take 40 min; then the last one's 3,600, alone on one thread, 40 min more
    curves = [run("softmax", 30_000 - n, 1.0) for n in (3_600, 7_200, 10_800)]
    assert budget.hours_left(curves) == pytest.approx([1.0, 1 + 2 / 3, 1 + 4 / 3])
    # the one run left with a pace, beside one that completed and one that logged none in the same
    # stretch: its pace was shared by three, so alone it trains at 1.5 steps/s, 3,600 steps in 40 min
    done, unlogged = run("linear", 30_000, 5.0, completed=True), run("hyla", 0, None)
    assert budget.hours_left([done, unlogged, curves[0]]) == [0.0, None, pytest.approx(2 / 3)]


def test_a_run_completing_within_the_latest_stretch_counts_as_sharing_its_pace(budget):
    def run(last_step: int, started: str, completed: bool = False):
        stretch = budget.Stretch(started, "e2d7e32", 0, last_step, 1.0, "AMD EPYC")
        return budget.Curve("softmax", 0, 128, 30_000, completed, last_step, [], {}, {}, [stretch])

    # the stretch's 1 step/s was logged while three runs shared two cores; with one of them done the
    # other two get a core each, 1.5 steps/s: 5,400 steps left take 1 h
    within = run(30_000, "2026-11-29 01:47", completed=True)
    assert budget.hours_left([run(24_600, "2026-11-29 01:46"), within, run(24_600, "2026-11-29 01:46")]) == [
        pytest.approx(1.0),
        0.0,
        pytest.approx(1.0),
    ]
    # one that completed in an earlier stretch did not share this one's pace: 1 step/s, 1.5 h
    before = run(30_000, "2026-11-28 23:12", completed=True)
    assert budget.hours_left([run(24_600, "2026-11-29 01:46"), before, run(24_600, "2026-11-29 01:46")]) == [
        pytest.approx(1.5),
        0.0,
        pytest.approx(1.5),
    ]


def test_the_seeds_table_gives_each_seed_and_the_mean_with_its_spread_over_seeds(budget):
    curves = [
        budget.curve(record("hyla", [0.3, 0.60], completed=True, seed=0)),
        budget.curve(record("hyla", [0.3, 0.70], completed=True, seed=1)),
        budget.curve(record("hyla", [0.3, 0.90], completed=False, seed=2)),  # under way: not in the table
        budget.curve(record("linear", [0.3, 0.64], completed=True, seed=0)),
    ]
    table = budget.seed_table(curves)
    se = 100 * math.sqrt(0.6 * 0.4 / 51200)
    assert f"| linear | s0 64.00 ± {100 * math.sqrt(0.64 * 0.36 / 51200):.2f} | 64.00 (1 seed) |" in table
    assert f"| HYLA | s0 60.00 ± {se:.2f}, s1 70.00 ± " in table
    assert "| 65.00 ± 5.00 (2 seeds) | 69.13 ± 1.90 |" in table  # s.d. 7.07 / √2; the paper's row
    assert "softmax" not in table


def test_paired_differences_over_seeds_carry_their_spread_and_a_paired_t_test(budget):
    from scipy.stats import ttest_rel

    hyla, linear = [0.60, 0.70, 0.66], [0.58, 0.65, 0.65]
    curves = [budget.curve(record("hyla", [0.1, a], completed=True, seed=s)) for s, a in enumerate(hyla)]
    curves += [budget.curve(record("linear", [0.1, a], completed=True, seed=s)) for s, a in enumerate(linear)]
    d = budget.paired(curves, "hyla", "linear")
    assert [round(v, 6) for v, _ in d.by_seed.values()] == [2.0, 5.0, 1.0]
    assert d.mean == pytest.approx(8 / 3) and d.se == pytest.approx(
        math.sqrt(((2 - 8 / 3) ** 2 + (5 - 8 / 3) ** 2 + (1 - 8 / 3) ** 2) / 2 / 3)
    )
    assert d.p_value == pytest.approx(ttest_rel(hyla, linear).pvalue)
    table = budget.paired_table(curves)
    low, high = d.interval  # t with 2 degrees of freedom: 4.303 s.e. either side
    assert (low, high) == (pytest.approx(8 / 3 - 4.302653 * d.se), pytest.approx(8 / 3 + 4.302653 * d.se))
    interval = f"[{low:+.2f}, {high:+.2f}]".replace("-", "−")
    assert "| HYLA − linear | s0 +2.00 ± " in table
    assert f"| +2.67 ± {d.se:.2f} | {interval} | p = {d.p_value:.3f} (3 seeds) | +12.83 ± 2.20 |" in table
    one_seed = budget.paired_table(curves[:1] + curves[3:4])
    assert "(1 seed: no spread over seeds) | – | – | +12.83 ± 2.20 | 1 seed: no interval |" in one_seed
    assert budget.paired(curves, "hyla", "hyla_identity").by_seed == {}  # no seed in common: no row


@pytest.mark.parametrize(
    "differences, words",
    [
        # the paper's HYLA − linear: +12.83 ± 2.20, its low end 12.83 − 4.40 = 8.43
        ([13, 14, 15], "a lead: the 95% CI lies above 0 and reaches the paper's low end"),  # [10.5, 16.5]
        ([2, 2.5, 3], "a lead smaller than the paper's: the 95% CI lies above 0, below the paper's low end"),
        ([2, 5, 1], "no lead shown, and smaller than the paper's: the 95% CI reaches 0, below the paper's low end"),
        ([0, 10], "no lead shown, the paper's not ruled out at 2 seeds: the 95% CI reaches 0 and its low end"),
        ([4], "1 seed: no interval"),
    ],
)
def test_the_paired_difference_is_read_against_the_papers_lead_from_its_interval(budget, differences, words):
    curves = [
        budget.curve(record(mixer, [0.1, (50 + (d if mixer == "hyla" else 0)) / 100], completed=True, seed=s))
        for s, d in enumerate(differences)
        for mixer in ("hyla", "linear")
    ]
    assert budget.against_paper(budget.paired(curves, "hyla", "linear")) == words


def test_the_band_is_the_mean_over_seeds_at_the_evaluations_all_reached(budget):
    runs = [
        budget.curve(record("hyla", [0.2, 0.4, 0.6], completed=False, seed=0)),
        budget.curve(record("hyla", [0.4, 0.6], completed=False, seed=1)),
    ]
    x, mean, se = budget.seed_band(runs)
    assert x == [5000 * 128 / 1e6, 10000 * 128 / 1e6]
    assert mean == pytest.approx([30.0, 50.0]) and se == pytest.approx([10.0, 10.0])
    x, mean, se = budget.seed_band(runs[:1])  # one seed: its binomial error
    assert se[0] == pytest.approx(100 * math.sqrt(0.2 * 0.8 / 5120))


def test_changes_of_order_are_looked_for_within_a_seed_only(budget):
    curves = [
        budget.curve(record("hyla", [0.1, 0.6], completed=False, seed=0)),
        budget.curve(record("linear", [0.3, 0.4], completed=False, seed=1)),
    ]
    assert "none so far" in budget.report(curves)
    curves.append(budget.curve(record("linear", [0.3, 0.4], completed=False, seed=0)))
    assert "- seed 0: hyla takes the lead from linear between steps 5,000 and 10,000" in budget.report(curves)


def test_the_command_restores_with_the_usage_of_results_md(budget, tmp_path, monkeypatch, capsys):
    """`python experiments/sraven_budget.py --restore DIR`, as experiments/README.md gives it, says where
    nothing was saved."""
    main = runpy.run_path(str(ROOT / "experiments" / "sraven_budget.py"))["main"]
    monkeypatch.setattr(budget, "ROOT", tmp_path)
    monkeypatch.setattr(budget, "RESUME", tmp_path / "progress" / "resume")
    assert main(["--restore", str(tmp_path / "runs")]) == 0
    assert capsys.readouterr().out == "nothing saved in progress/resume\n"
