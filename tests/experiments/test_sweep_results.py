"""Sweeps (`hyla sweep`) and aggregation (`hyla results`)."""

import json
import math
import shutil
from pathlib import Path

import matplotlib.colors
import pytest

from hyla.runs.launch import run_sweep
from hyla.runs.result_figures import against_figure, fit_figure, fitted_runs
from hyla.runs.result_tables import aggregate, find_runs, mean_se
from hyla.runs.results import summarize
from hyla.runs.sweep import SweepSpec, override_flags, run_command, run_status, sweep_status
from hyla.train import load_run_at_step
from hyla.train.run_dir import RunError


def write_spec(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "sweep.yaml"
    path.write_text(text)
    return path


def test_spec_grid_union_seeds_and_names(tmp_path):
    spec = SweepSpec.load(
        write_spec(
            tmp_path,
            """
name: s
preset: logic_cpu
seeds: [0, 1]
overrides: {train.steps: 10}
grid:
  - {model.mixer: [softmax, hyla]}
  - {model.mixer: [softmax], model.num_experts: [5]}
""",
        )
    )
    runs = spec.runs()
    assert [r.name for r in runs] == [
        "mixer-softmax__s0",
        "mixer-hyla__s0",
        "mixer-softmax__num_experts-5__s0",
        "mixer-softmax__s1",
        "mixer-hyla__s1",
        "mixer-softmax__num_experts-5__s1",
    ]
    assert runs[-1].overrides == {"train.steps": 10, "model.mixer": "softmax", "model.num_experts": 5}
    assert spec.out_dir == "runs/s"


@pytest.mark.parametrize(
    "text, message",
    [
        ("name: s\npreset: p\ngird: {}\n", "unknown keys"),
        ("name: s\n", "missing required key 'preset'"),
        ("name: s\npreset: p\ngrid: {model.mixer: hyla}\n", "non-empty list"),
    ],
)
def test_spec_errors(tmp_path, text, message):
    with pytest.raises(ValueError, match=message):
        SweepSpec.load(write_spec(tmp_path, text))


def test_override_flags_and_resume_command(tmp_path):
    assert override_flags("model.mixer", "hyla") == ["--model.mixer", "hyla"]
    assert override_flags("model.paper_init", False) == ["--model.no-paper_init"]
    assert override_flags("train.compile", True) == ["--train.compile"]
    spec = SweepSpec(name="s", preset="logic_cpu", out_dir=str(tmp_path))
    run = spec.runs()[0]
    assert "train" in run_command(spec, run, 1)
    (tmp_path / run.name / "checkpoints").mkdir(parents=True)
    (tmp_path / run.name / "checkpoints" / "latest.pt").write_bytes(b"")
    assert run_status(tmp_path / run.name) == "partial"
    assert run_command(spec, run, 1)[3:5] == ["resume", str(tmp_path / run.name)]


def fake_run(
    root: Path,
    name: str,
    mixer: str,
    seed: int,
    r2: float,
    status: str = "completed",
    threads: int = 1,
    stop_at: int = 0,
    train_loss: float = 0.1,
) -> None:
    run = root / name
    run.mkdir(parents=True)
    (run / "config.json").write_text(
        json.dumps(
            {
                "seed": seed,
                "name": name,
                "model": {"mixer": mixer, "dim": 8},
                "train": {"threads": threads, "stop_at": stop_at},
                "log": {"progress": True},
            }
        )
    )
    (run / "summary.json").write_text(
        json.dumps(
            {
                "status": status,
                "metric_name": "r2",
                "final": {"ood": {"r2": r2}},
                "train_loss": train_loss,
                "steps_per_second": 10.0,
            }
        )
    )
    (run / "metrics.jsonl").write_text(json.dumps({"step": 5, "split": "ood", "r2": r2}) + "\n")


def test_mean_se():
    assert mean_se([1.0]) == (1.0, None)
    mean, se = mean_se([1.0, 2.0, 3.0])
    assert mean == 2.0 and math.isclose(se, 1.0 / math.sqrt(3))


def test_aggregate_groups_by_varying_fields_and_skips_unfinished(tmp_path):
    fake_run(tmp_path, "a0", "hyla", 0, 0.8)
    fake_run(tmp_path, "a1", "hyla", 1, 0.6)
    fake_run(tmp_path, "b0", "softmax", 0, 0.5)
    fake_run(tmp_path, "b1", "softmax", 1, 0.0, status="interrupted")
    fields, rows = aggregate(find_runs([tmp_path]))
    assert fields == ["model.mixer"]
    by_mixer = {row["group"]["model.mixer"]: row for row in rows}
    assert by_mixer["hyla"]["n"] == 2 and by_mixer["softmax"]["n"] == 1
    mean, se = by_mixer["hyla"]["values"]["ood/r2"]
    assert math.isclose(mean, 0.7) and math.isclose(se, 0.1)
    text = summarize(tmp_path)
    assert "| hyla | 2 | 70.00 ± 10.00 |" in text and "| softmax | 1 (+1 unfinished) | 50.00 |" in text
    for name in ("results.md", "results.csv", "results.json", "results_r2.png", "curves_r2.png"):
        assert (tmp_path / name).exists(), name


def test_bookkeeping_never_splits_a_group_and_one_seed_has_no_error_bar(tmp_path):
    fake_run(tmp_path, "a0", "hyla", 0, 0.8, threads=1, stop_at=0)
    fake_run(tmp_path, "a1", "hyla", 1, 0.6, threads=2, stop_at=5)
    fake_run(tmp_path, "b0", "softmax", 0, 0.5, threads=2)
    fields, rows = aggregate(find_runs([tmp_path]))
    assert fields == ["model.mixer"] and [row["n"] for row in rows] == [2, 1]
    text = summarize(tmp_path)
    assert "| hyla | 2 | 70.00 ± 10.00 |" in text and "| softmax | 1 | 50.00 |" in text


def test_a_table_of_one_mixer_names_it(tmp_path):
    fake_run(tmp_path, "a0", "softmax", 0, 0.5)
    fake_run(tmp_path, "a1", "softmax", 1, 0.3)
    assert "| mixer | n |" in summarize(tmp_path) and "| softmax | 2 | 40.00 ± 10.00 |" in summarize(tmp_path)


def fake_held_out_run(root: Path, name: str, mixer: str, seed: int, fraction: float, r2: float) -> None:
    fake_run(root, name, mixer, seed, r2)
    config = json.loads((root / name / "config.json").read_text())
    (root / name / "config.json").write_text(json.dumps({**config, "fuzzy_logic": {"frac_held_out": fraction}}))


def test_several_folders_read_as_one_and_a_metric_against_a_numeric_setting(tmp_path):
    """Table A1 runs (fraction 0.7) in one folder and a held-out-fraction sweep in another: one table,
    and OOD R² against the fraction, a line per mixer with its seeds' mean and standard error."""
    table_a1, held_out, out = tmp_path / "table_a1", tmp_path / "held_out", tmp_path / "out"
    for seed, r2 in enumerate((0.8, 0.6)):
        fake_held_out_run(table_a1, f"h{seed}", "hyla", seed, 0.7, r2)
        fake_held_out_run(table_a1, f"s{seed}", "softmax", seed, 0.7, r2 - 0.3)
        fake_held_out_run(held_out, f"h3_{seed}", "hyla", seed, 0.3, r2 + 0.1)
    fake_held_out_run(held_out, "s3", "softmax", 0, 0.3, 0.9)
    text = summarize([table_a1, held_out], out)
    assert "| 0.7 | hyla | 2 | 70.00 ± 10.00 |" in text and "| 0.3 | softmax | 1 | 90.00 |" in text
    assert (out / "r2_vs_frac_held_out.png").exists() and not (table_a1 / "results.md").exists()
    header = (out / "results.md").read_text().splitlines()[0]  # no absolute path of this machine
    assert header == f"# Results for {tmp_path.name}/table_a1, {tmp_path.name}/held_out"
    _, rows = aggregate(find_runs([table_a1, held_out]))
    ax = against_figure(rows, "r2", "fuzzy_logic.frac_held_out").axes[0]
    lines = {
        label: container.lines[0].get_xydata().tolist() for container, label in zip(*ax.get_legend_handles_labels())
    }
    assert lines == {"mixer=hyla": [[0.3, 0.8], [0.7, 0.7]], "mixer=softmax": [[0.3, 0.9], [0.7, 0.4]]}
    assert ax.get_xscale() == "linear"  # fractions within a factor of 10


def test_a_setting_that_spans_a_factor_of_ten_is_drawn_on_a_log_axis_and_sorted(tmp_path):
    """Fig. 5C: 1 head against 16 on a log axis, ticked at the values swept; the table's rows in the
    numbers' order, whatever the order of the run names."""
    for name, heads, r2 in (("a", 16, 0.6), ("b", 1, 0.2)):
        fake_run(tmp_path, name, "hyla", 0, r2)
        config = json.loads((tmp_path / name / "config.json").read_text())
        config["model"]["num_heads"] = heads
        (tmp_path / name / "config.json").write_text(json.dumps(config))
    _, rows = aggregate(find_runs([tmp_path]))
    assert [row["group"]["model.num_heads"] for row in rows] == [1, 16]
    ax = against_figure(rows, "r2", "model.num_heads").axes[0]
    assert ax.get_xscale() == "log" and list(ax.get_xticks()) == [1, 16]
    assert [t.get_text() for t in ax.get_xticklabels()] == ["1", "16"]


def test_only_reads_the_runs_whose_names_match_from_folders_and_records(tmp_path):
    """--only: Fig. 2C's softmax and HYLA rows from a folder that holds other mixers too; a
    pattern that matches no run is a one-line error."""
    runs, out = tmp_path / "runs" / "table_a1", tmp_path / "out"
    for name, mixer, r2 in (("mixer-hyla__s0", "hyla", 0.9), ("mixer-hyla_identity__s0", "hyla_identity", 0.8)):
        fake_run(runs, name, mixer, 0, r2)
    fake_run(runs, "mixer-softmax__s0", "softmax", 0, 0.6)
    only = ("mixer-hyla__s*", "mixer-softmax__s*")
    text = summarize(runs, out, only=only)
    assert "| hyla | 1 | 90.00 |" in text and "| softmax | 1 | 60.00 |" in text and "hyla_identity" not in text
    assert sorted(p.name for p in (out / "records").rglob("*.run.json")) == [
        "mixer-hyla__s0.run.json",
        "mixer-softmax__s0.run.json",
    ]
    shutil.rmtree(runs)
    text = summarize(out, tmp_path / "again", only=("mixer-softmax__s*",))
    assert "| softmax | 1 | 60.00 |" in text and "| hyla |" not in text
    with pytest.raises(RunError, match=r"--only 'mixer-linear__s\*' matches none of the runs read below"):
        summarize(out, only=("mixer-softmax__s*", "mixer-linear__s*"))


def test_each_completed_run_is_a_point_of_its_metric_against_its_training_loss(tmp_path):
    """Generalization or fit: one point a completed run, coloured as its group's curves."""
    fake_run(tmp_path, "h0", "hyla", 0, 0.8, train_loss=0.02)
    fake_run(tmp_path, "h1", "hyla", 1, 0.6, train_loss=0.03)
    fake_run(tmp_path, "l0", "linear", 0, 0.3, status="interrupted")
    fake_run(tmp_path, "s0", "softmax", 0, 0.5, train_loss=0.01)
    summarize(tmp_path)
    assert (tmp_path / "r2_vs_train_loss.png").exists()
    fig = fit_figure(fitted_runs(find_runs([tmp_path]), ["model.mixer"]), "r2")
    [ax], [legend] = fig.axes, fig.legends
    assert ax.get_ylabel() == "ood r2" and ax.get_xscale() == "linear"  # losses within a decade
    points = {
        text.get_text(): (c.get_offsets().tolist(), c.get_facecolor()[0].tolist())
        for c, text in zip(ax.collections, legend.get_texts(), strict=True)
    }
    assert points["mixer=hyla"][0] == [[0.02, 0.8], [0.03, 0.6]] and points["mixer=softmax"][0] == [[0.01, 0.5]]
    assert "mixer=linear" not in points
    # the colours of the curves: each mixer's own (plots.series_colors), softmax's C0
    assert points["mixer=softmax"][1] == list(matplotlib.colors.to_rgba("C0"))
    fake_run(tmp_path, "s1", "softmax", 1, 0.1, train_loss=0.5)  # a run that did not fit: losses span decades
    [ax] = fit_figure(fitted_runs(find_runs([tmp_path]), ["model.mixer"]), "r2").axes
    assert ax.get_xscale() == "log"


def test_one_completed_run_draws_no_fit_figure(tmp_path):
    fake_run(tmp_path, "h0", "hyla", 0, 0.8)
    fake_run(tmp_path, "s0", "softmax", 0, 0.5, status="interrupted")
    summarize(tmp_path)
    assert not (tmp_path / "r2_vs_train_loss.png").exists()


def test_a_tasks_feature_accuracy_gets_its_own_table(tmp_path):
    """SRAVEN reports panel accuracy (its main metric) and per-feature accuracy: both are tabled."""
    for seed, (acc, feature_acc) in enumerate([(0.3, 0.6), (0.5, 0.8)]):
        run = tmp_path / f"s{seed}"
        run.mkdir()
        (run / "config.json").write_text(json.dumps({"seed": seed, "task": "sraven", "model": {"mixer": "hyla"}}))
        final = {split: {"acc": acc, "feature_acc": feature_acc, "loss": 1.0} for split in ("valid", "ood")}
        (run / "summary.json").write_text(json.dumps({"status": "completed", "metric_name": "acc", "final": final}))
    text = summarize(tmp_path, paper=True)
    acc_table, feature_table = text.split("### feature_acc")
    assert "### acc" in acc_table and "| 40.00 ± 10.00 | 40.00 ± 10.00 | 69.13 ± 1.90 |" in acc_table
    assert "ood feature_acc ×100" in feature_table and "| 70.00 ± 10.00 | 70.00 ± 10.00 |" in feature_table
    assert not (tmp_path / "results_feature_acc.png").exists()  # plots stay with the main metric
    assert "Table A1" not in feature_table  # the paper reports panel accuracy only


def test_paper_option_sets_table_a1_beside_the_rows_it_has(tmp_path):
    fake_run(tmp_path, "a0", "hyla", 0, 0.8)
    fake_run(tmp_path, "b0", "hyla_identity", 0, 0.7)
    fake_run(tmp_path, "c0", "softmax", 0, 0.6)
    for run in ("a0", "b0"):  # a fuzzy-logic run; c0 names no task: no paper value
        config = json.loads((tmp_path / run / "config.json").read_text())
        (tmp_path / run / "config.json").write_text(json.dumps({**config, "task": "fuzzy_logic"}))
    rows = {line.split(" | ")[0]: line for line in summarize(tmp_path, paper=True).splitlines()}
    assert "| paper ood ×100 (Table A1) |" in rows["| mixer"]
    assert "| 80.00 | 81.13 ± 7.77 |" in rows["| hyla"]
    assert "| 70.00 | 84.54 ± 5.32 |" in rows["| hyla_identity"]
    assert "| 60.00 | – |" in rows["| softmax"]


def test_the_main_metric_along_training_is_tabled_per_split_at_most_ten_steps(tmp_path):
    """Mean ± s.e. over the completed runs at each evaluated step (the runs of the table above), the
    last step always shown; a group of one run has no error bar, and a step it did not reach is a dash."""
    curves = {"a0": ("hyla", 0, 0.1), "a1": ("hyla", 1, 0.3), "b0": ("softmax", 0, 0.5), "b1": ("softmax", 1, 0.9)}
    for name, (mixer, seed, start) in curves.items():
        fake_run(tmp_path, name, mixer, seed, r2=start + 0.12, status="interrupted" if name == "b1" else "completed")
        last = 12 if mixer == "hyla" else 10
        records = [{"step": step, "split": "ood", "r2": start + step / 100} for step in range(1, last + 1)]
        (tmp_path / name / "metrics.jsonl").write_text("".join(json.dumps(r) + "\n" for r in records))
    text = summarize(tmp_path)
    table = text.split("### ood r2 ×100 along training")[1]
    assert "| group | 2 | 4 | 6 | 8 | 10 | 12 |" in table  # 12 steps: every second, back from the last
    assert "| mixer=hyla | 22.0 ± 10.0 | 24.0 ± 10.0 | 26.0 ± 10.0 | 28.0 ± 10.0 | 30.0 ± 10.0 | 32.0 ± 10.0 |" in table
    assert "| mixer=softmax | 52.0 | 54.0 | 56.0 | 58.0 | 60.0 | – |" in table
    assert "along training" in (tmp_path / "results.md").read_text()


def test_summarize_without_runs_raises(tmp_path):
    from hyla.train import RunError

    with pytest.raises(RunError, match="no run folders"):
        summarize(tmp_path)


def test_sweep_end_to_end_skips_completed_runs(tmp_path):
    spec = SweepSpec.load(
        write_spec(
            tmp_path,
            f"""
name: tiny
preset: logic_cpu
out_dir: {tmp_path / "runs"}
results: {tmp_path / "results"}
seeds: [0]
overrides: {{train.steps: 4, optim.warmup_steps: 1, eval.every: 0, eval.samples: 64,
             eval.final_samples: 64, log.every: 2, model.num_layers: 1, model.dim: 16, model.mlp_dim: 16}}
grid: {{model.mixer: [softmax, hyla]}}
parallel: 2
""",
        )
    )
    codes = run_sweep(spec)
    assert codes == {"mixer-softmax__s0": 0, "mixer-hyla__s0": 0}
    assert all(run_status(tmp_path / "runs" / name) == "completed" for name in codes)
    assert run_sweep(spec) == {}  # nothing left to run
    fields, rows = aggregate(find_runs([tmp_path / "runs"]))
    assert {row["group"]["model.mixer"] for row in rows} == {"softmax", "hyla"}
    # each completed run left its record in the results folder: gone folders are not trained again
    assert sorted(p.name for p in (tmp_path / "results" / "records" / "runs").iterdir()) == [
        "mixer-hyla__s0.run.json",
        "mixer-softmax__s0.run.json",
    ]
    shutil.rmtree(tmp_path / "runs")
    assert set(sweep_status(spec).values()) == {"recorded"} and run_sweep(spec) == {}
    # and its exported weights, which load without the run folder
    for name in codes:
        model = tmp_path / "results" / "models" / name
        assert load_run_at_step(model)[3] == 4
        assert json.loads((model / "manifest.json").read_text())["run"] == f"runs/{name}"


def test_hyla_results_writes_beside_the_runs_folder_and_says_where(tmp_path, capsys, monkeypatch):
    from hyla.cli import main

    runs = tmp_path / "runs" / "grid"
    fake_run(runs, "a0", "hyla", 0, 0.8)
    fake_run(runs, "b0", "softmax", 0, 0.5)
    before = sorted(runs.rglob("*"))
    monkeypatch.chdir(tmp_path)
    assert main(["results", "runs/grid"]) == 0
    last = capsys.readouterr().out.strip().splitlines()[-1]
    assert last == "Wrote results.md, results.csv, results.json and the figures (*.png) to results/grid"
    assert (tmp_path / "results" / "grid" / "results.md").exists()
    assert sorted(runs.rglob("*")) == before and not (tmp_path / "results" / "grid" / "records").exists()


def test_a_mixer_has_one_colour_in_the_demo_and_results_figures(tmp_path):
    from hyla.analysis.plots import curves_figure

    to_hex = matplotlib.colors.to_hex
    records = [{"step": 1, "split": "train", "loss": 1.0}, {"step": 2, "split": "train", "loss": 0.5}]
    demo = curves_figure({mixer: [records] for mixer in ("softmax", "linear", "hyla")}, "r2")
    demo_colors = {line.get_label(): to_hex(line.get_color()) for line in demo.axes[0].get_lines()}
    for name, mixer in (("a", "hyla"), ("b", "softmax"), ("c", "linear")):
        fake_run(tmp_path, name, mixer, 0, 0.5)
    runs = find_runs([tmp_path])
    points = fitted_runs(runs, aggregate(runs)[0])  # labels mixer=hyla, mixer=linear, mixer=softmax
    fit = fit_figure(points, "r2")
    fit_colors = {
        label.removeprefix("mixer="): to_hex(dots.get_facecolor()[0])
        for label, dots in zip(points, fit.axes[0].collections)
    }
    assert fit_colors == demo_colors and len(set(demo_colors.values())) == 3


def test_a_torn_metrics_line_is_one_warning_line_and_figures_warn_of_nothing(tmp_path):
    """A run killed while appending to metrics.jsonl, and a run with no final metric (no bars: no
    legend): `hyla results` says one line about the first, and nothing in Python's or matplotlib's words."""
    import subprocess
    import sys

    fake_run(tmp_path / "runs", "a", "hyla", 0, 0.5, status="interrupted")
    summary = tmp_path / "runs" / "a" / "summary.json"
    summary.write_text(json.dumps({**json.loads(summary.read_text()), "final": {}}))
    with open(tmp_path / "runs" / "a" / "metrics.jsonl", "a") as metrics:
        metrics.write('{"step": 6, "spl')
    done = subprocess.run(
        [sys.executable, "-m", "hyla.cli", "results", "runs"], cwd=tmp_path, capture_output=True, text=True
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr == "warning: runs/a/metrics.jsonl: dropped a torn last line (a writer was interrupted)\n"
