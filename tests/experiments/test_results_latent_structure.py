"""`hyla results DIR --latent-structure`: topographic similarity of each run's latent codes against
its held-out metric, Spearman across runs with a seeded bootstrap interval."""

import json
import shutil
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest
from helpers_train import tiny_config

from hyla.analysis.structure import bootstrap_spearman
from hyla.cli import main
from hyla.train import train

OPTIONS = ["--latent-samples", "64", "--latent-permutations", "10", "--bootstrap", "300"]


def reference_spearman(x, y) -> float:
    """Spearman from numpy ranks (no ties in these numbers)."""
    rank = lambda v: np.argsort(np.argsort(v)).astype(float)  # noqa: E731
    return float(np.corrcoef(rank(np.asarray(x)), rank(np.asarray(y)))[0, 1])


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> Path:
    """Four tiny completed runs (2 mixers × 2 seeds) and one that never finished."""
    root = tmp_path_factory.mktemp("runs")
    for mixer in ("hyla", "softmax"):
        for seed in (0, 1):
            train(
                replace(tiny_config(root, name=f"{mixer}_s{seed}", mixer=mixer, steps=6, eval={"every": 0}), seed=seed)
            )
    unfinished = root / "unfinished"
    unfinished.mkdir()
    (unfinished / "config.json").write_text((root / "hyla_s0" / "config.json").read_text())
    (unfinished / "metrics.jsonl").write_text("")
    return root


def test_latent_structure_json_png_and_cache(runs, tmp_path, capsys):
    assert main(["results", str(runs), "--latent-structure", "--out", str(tmp_path / "a"), *OPTIONS]) == 0
    captured = capsys.readouterr()
    assert "rho =" in captured.out and "unfinished: not completed" in captured.out
    assert sum(line.startswith("latent structure: run ") for line in captured.err.splitlines()) == 4  # a line per run
    result = json.loads((tmp_path / "a" / "latent_structure.json").read_text())
    assert (tmp_path / "a" / "latent_structure.png").stat().st_size > 0
    points = result["runs"]
    assert len(points) == 4 and {p["mixer"] for p in points} == {"hyla", "softmax"}
    assert all({"name", "mixer", "seed", "metric", "topographic_similarity"} <= p.keys() for p in points)
    assert result["metric_name"] == "r2" and result["codes"] == "last layer" and points[0]["codes"] == "layer 1"
    overall = result["overall"]
    x, y = [p["topographic_similarity"] for p in points], [p["metric"] for p in points]
    assert overall["n"] == 4 and overall["rho"] == pytest.approx(reference_spearman(x, y), abs=1e-12)
    assert overall["ci_low"] <= overall["rho"] <= overall["ci_high"]
    assert result["per_mixer"]["hyla"] == {**result["per_mixer"]["hyla"], "n": 2, "rho": None}  # < 3 runs
    caches = sorted(p.name for p in (runs / "hyla_s0").glob("latent_structure-*.json"))
    assert caches == ["latent_structure-step6-ood-layer-last-samples64-permutations10-seed0.json"]

    # the same seed: the same numbers, every run read from its cache; another layer: a new cache file
    assert main(["results", str(runs), "--latent-structure", "--out", str(tmp_path / "b"), *OPTIONS]) == 0
    again = json.loads((tmp_path / "b" / "latent_structure.json").read_text())
    assert again["overall"] == overall and all(p["cached"] for p in again["runs"])
    assert (
        main(
            ["results", str(runs), "--latent-structure", "--out", str(tmp_path / "c"), *OPTIONS, "--latent-layer", "0"]
        )
        == 0
    )
    assert len(list((runs / "hyla_s0").glob("latent_structure-*.json"))) == 2


def test_bootstrap_interval_is_seeded_and_contains_rho():
    rng = np.random.default_rng(1)
    x = rng.normal(size=12)
    y = x + rng.normal(size=12)
    first, same, other = (bootstrap_spearman(x, y, 500, seed=s) for s in (0, 0, 1))
    assert first == same and (first["ci_low"], first["ci_high"]) != (other["ci_low"], other["ci_high"])
    assert first["rho"] == pytest.approx(reference_spearman(x, y), abs=1e-12)
    assert first["ci_low"] <= first["rho"] <= first["ci_high"] and first["resamples_used"] == 500
    assert bootstrap_spearman(x[:2], y[:2])["rho"] is None  # too few runs


def test_no_runs_is_a_one_line_error(tmp_path, capsys):
    assert main(["results", str(tmp_path), "--latent-structure"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error: no completed" in err and "Traceback" not in err
    assert main(["results", str(tmp_path), "--latent-structure", "--latent-layer", "first"]) == 2
    assert "--latent-layer='first' is not valid" in capsys.readouterr().err


def test_latent_structure_from_run_records_alone(runs, tmp_path, capsys, monkeypatch):
    """--out keeps each run's record with its measurement: the correlation comes back from the
    records alone (written, without --out, into results/again); other options need the checkpoints,
    and the runs are skipped, saying why."""
    monkeypatch.chdir(tmp_path)
    out = tmp_path / "kept"
    assert main(["results", str(runs), "--latent-structure", "--out", str(out), *OPTIONS]) == 0
    assert "Kept the record of each completed run (4)" in capsys.readouterr().out
    measured = json.loads((out / "latent_structure.json").read_text())
    again = tmp_path / "again"
    shutil.copytree(out / "records", again / "records")
    assert main(["results", str(again), "--latent-structure", *OPTIONS]) == 0
    result = json.loads((tmp_path / "results" / "again" / "latent_structure.json").read_text())
    assert result["overall"] == measured["overall"] and all(p["cached"] for p in result["runs"])
    assert main(["results", str(again), "--latent-structure", *OPTIONS, "--only", "hyla_s*"]) == 0
    result = json.loads((tmp_path / "results" / "again" / "latent_structure.json").read_text())
    assert sorted(p["name"].rsplit("/", 1)[-1] for p in result["runs"]) == ["hyla_s0", "hyla_s1"]
    assert main(["results", str(again), "--latent-structure", *OPTIONS, "--seed", "7"]) == 0
    result = json.loads((tmp_path / "results" / "again" / "latent_structure.json").read_text())
    assert result["runs"] == [] and len(result["skipped"]) == 4
    assert all("not measured with these options" in note for note in result["skipped"])


def test_mixture_of_experts_runs_are_a_group_of_their_own(runs, tmp_path):
    """A HYLA run with experts in place of the feed-forward layer is correlated within "hyla + MoE",
    not pooled with the HYLA runs."""
    cfg = tiny_config(tmp_path / "moe", name="hyla_moe_s0", steps=6, eval={"every": 0})
    train(replace(cfg, model=replace(cfg.model, num_experts=3, experts_top_k=2)))
    assert (
        main(
            ["results", str(runs), str(tmp_path / "moe"), "--latent-structure", "--out", str(tmp_path / "a"), *OPTIONS]
        )
        == 0
    )
    result = json.loads((tmp_path / "a" / "latent_structure.json").read_text())
    assert {p["name"]: p["mixer"] for p in result["runs"]}["hyla_moe_s0"] == "hyla + MoE"
    assert {m: s["n"] for m, s in result["per_mixer"].items()} == {"hyla": 2, "hyla + MoE": 1, "softmax": 2}
    assert result["overall"]["n"] == 5


def test_scatter_tells_more_than_ten_mixers_apart():
    """Eleven groups (Table A1's rows) outnumber the ten colours: no two share colour and marker."""
    from hyla.analysis.structure import structure_figure

    mixers = [f"mixer{i}" for i in range(11)]
    points = [{"mixer": m, "topographic_similarity": 0.1 * i, "metric": 0.5} for i, m in enumerate(mixers)]
    stats = {"n": 1, "rho": None, "ci_low": None, "ci_high": None}
    result = {
        "per_mixer": {m: stats for m in mixers},
        "overall": {**stats, "n": 11},
        "confidence": 0.95,
        "options": {"split": "ood"},
        "codes": "last layer",
        "metric_name": "r2",
    }
    groups = structure_figure(points, result).axes[0].collections
    looks = {(tuple(g.get_facecolor()[0]), g.get_paths()[0].vertices.tobytes()) for g in groups}
    assert len(groups) == 11 and len(looks) == 11
