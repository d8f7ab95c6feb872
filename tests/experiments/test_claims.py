"""README's results table and RESULTS.md's tables are what experiments/claims.py rebuilds from the
committed files; a changed record or a hand-edited number fails the check."""

import json
import re
import shutil
import sys
from pathlib import Path

import pytest

from hyla.runs.paper import TABLE_A1
from hyla.runs.report import files, latent, sraven_20m, tables

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "experiments"))
import claims  # noqa: E402  (the command: experiments/claims.py)

RETRAINED_HYLA = "weights_sraven_40k_cpu/records/weights_sraven_40k_cpu/mixer-hyla__s0.run.json"


@pytest.fixture(scope="module")
def numbers():
    return tables.numbers()


@pytest.mark.parametrize("name", list(tables.templates()))
def test_the_committed_table_is_the_one_the_files_give(numbers, name):
    paths, rows = tables.templates()[name]
    for path in paths:
        text = path.read_text()
        start, end = tables.block(text, name)
        assert text[start:end] == tables.render(rows, numbers, path), (
            f"{path.name}'s table {name} differs from the committed results: run python experiments/claims.py --write"
        )


def copy_of_the_tables(tmp_path: Path, monkeypatch) -> Path:
    """README.md, RESULTS.md and its archive copied under tmp_path, where claims.py reads and writes them."""
    for name in ("README.md", "experiments/RESULTS.md", "experiments/RESULTS_ARCHIVE.md"):
        (tmp_path / name).parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(ROOT / name, tmp_path / name)
    monkeypatch.setattr(tables, "ROOT", tmp_path)
    return tmp_path


def results_with_one_record_copied(tmp_path: Path, monkeypatch, record: str) -> Path:
    """README.md and RESULTS.md under tmp_path, and experiments/results/ linked there but for the
    records folder of `record` (`FOLDER/records/…`), copied: the path of the copy of `record`."""
    copy_of_the_tables(tmp_path, monkeypatch)
    results = tmp_path / "results"
    folder = record.split("/")[0]
    (results / folder).mkdir(parents=True)
    for each in [*files.RESULTS.iterdir(), *(files.RESULTS / folder).iterdir()]:
        if each.name not in (folder, "records"):
            (results / each.relative_to(files.RESULTS)).symlink_to(each)
    shutil.copytree(files.RESULTS / folder / "records", results / folder / "records")
    monkeypatch.setattr(files, "RESULTS", results)
    return results / record


def test_a_changed_number_is_caught_and_rewritten(tmp_path, monkeypatch, capsys):
    readme = copy_of_the_tables(tmp_path, monkeypatch) / "README.md"
    text = readme.read_text()
    assert text.count("HYLA 91.8 ± 1.3") == 3  # the claims table: the Finding 3 rows and Table A1
    readme.write_text(text.replace("HYLA 91.8 ± 1.3", "HYLA 93.8 ± 1.3"))
    assert claims.main(["--check"]) == 1
    assert "out of date: paper-claims;" in capsys.readouterr().err
    assert claims.main(["--write"]) == 0 and claims.main(["--check"]) == 0
    assert readme.read_text() == text


def test_a_changed_record_fails_the_check(tmp_path, monkeypatch, capsys):
    """The retrained SRAVEN 40k HYLA model's record feeds only RESULTS.md's section tables."""
    record_file = results_with_one_record_copied(tmp_path, monkeypatch, RETRAINED_HYLA)
    record = json.loads(record_file.read_text())
    assert f"{record['summary']['final']['ood']['acc']:.3f}" == "0.403"
    record["summary"]["final"]["ood"]["acc"] += 0.1
    record_file.write_text(json.dumps(record))
    assert claims.main(["--check"]) == 1
    stale = capsys.readouterr().err
    assert "results-sraven-retrained" in stale and "results-latent-sraven-40k" in stale
    assert "paper-claims" not in stale


SRAVEN_20M_HYLA = "table_a1_raven_20m_cpu/records/table_a1_raven_20m_cpu/mixer-hyla__s0.run.json"
SRAVEN_40K_HYLA = "table_a1_raven_40k_cpu/records/table_a1_raven_40k/mixer-hyla__s0.run.json"
LM_HYLA = "lm_cpu/records/lm_cpu/mixer-hyla__s0.run.json"


def row(record: dict, step: int, split: str) -> dict:
    [found] = [m for m in record["metrics"] if (m["step"], m["split"]) == (step, split)]
    return found


@pytest.mark.parametrize(
    "record, change, stale",
    [
        # a final OOD accuracy that README's and RESULTS.md's tables give
        (SRAVEN_40K_HYLA, lambda r: r["summary"]["final"]["ood"].update(acc=0.5), "paper-claims"),
        # a final valid accuracy quoted in prose only
        (SRAVEN_20M_HYLA, lambda r: r["summary"]["final"]["valid"].update(acc=0.6), None),
        # the last training loss, quoted in prose and in a table
        (SRAVEN_20M_HYLA, lambda r: row(r, 156250, "train").update(loss=0.5), "results-sraven-20m"),
        # an evaluation row quoted in prose only: the 60,000-step lead over linear
        (SRAVEN_20M_HYLA, lambda r: row(r, 60000, "ood").update(acc=0.5), None),
        # every field the LM table reads
        (LM_HYLA, lambda r: r["summary"]["final"]["valid"].update(nll=5.3), "results-lm"),
        (LM_HYLA, lambda r: r["summary"]["final"]["valid"].update(ppl=300.0), "results-lm"),
    ],
    ids=["final ood", "final valid", "training loss", "evaluation row", "lm nll", "lm ppl"],
)
def test_a_changed_field_behind_a_cited_number_fails_the_check(tmp_path, monkeypatch, capsys, record, change, stale):
    path = results_with_one_record_copied(tmp_path, monkeypatch, record)
    assert claims.main(["--check"]) == 0
    record = json.loads(path.read_text())
    change(record)
    path.write_text(json.dumps(record))
    assert claims.main(["--check"]) == 1
    err = capsys.readouterr().err
    assert (stale in err) if stale else ("out of date" not in err)
    if "prose differs" not in err:  # a number only a table gives: --write brings it in line
        assert claims.main(["--write"]) == 0 and claims.main(["--check"]) == 0


def test_a_prose_phrase_names_its_file_and_source(tmp_path, monkeypatch, capsys):
    results = copy_of_the_tables(tmp_path, monkeypatch) / "experiments" / "RESULTS.md"
    phrases = [phrase for path, phrase in tables.prose() if path.name == "RESULTS.md"]
    assert phrases and all("{" in phrase for phrase in phrases)  # every phrase reads a number from a file
    text = results.read_text()
    assert "HYLA 63.98 ± 0.21, linear" in text
    results.write_text(text.replace("HYLA 63.98 ± 0.21, linear", "HYLA 64.98 ± 0.21, linear"))
    assert claims.main(["--check"]) == 1
    assert "prose differs from its source" in capsys.readouterr().err
    assert claims.main(["--write"]) == 0 and claims.main(["--check"]) == 1  # prose is edited by hand


def test_a_field_is_read_from_its_file_and_formatted():
    record = "table_a1_raven_20m_cpu/records/*/mixer-hyla__s0.run.json"
    assert tables.field(f"{record} summary.final.ood.acc x100.2f") == "63.98"
    assert tables.field(f"{record} metrics[step=60000,split=ood].acc x100.1f") == "54.2"
    assert tables.field(f"{record} metrics[-1].step ,") == "156,250"
    with pytest.raises(ValueError):  # a glob matching several files, or a pick matching several rows
        tables.field("table_a1_raven_20m_cpu/records/*/mixer-*__s0.run.json summary.final.ood.acc")


def test_every_results_table_is_generated_or_listed_with_why():
    listed = set(re.findall(r"^- \*\*(.+?)\*\*", tables.TEMPLATES.read_text(), re.MULTILINE))
    lines = (ROOT / "experiments" / "RESULTS.md").read_text().splitlines()
    heading, generated, unlisted = None, False, []
    for i, line in enumerate(lines):
        if line.startswith("#"):
            heading = line.lstrip("# ")
        elif line.startswith("<!-- claims:"):
            generated = " begin" in line
        elif line.startswith("|") and not lines[i - 1].startswith("|") and not generated and heading not in listed:
            unlisted.append(f"line {i + 1}, under {heading!r}")
    assert not unlisted, f"tables neither generated by claims.py nor listed in claims_tables.md: {unlisted}"


def test_committed_results_hold_no_absolute_path_of_the_machine_that_made_them():
    machine_path = re.compile(r"(?<![\w.])/(?:home|root|tmp|work|Users|scratch|private)/[^\s\"`)]*")
    folders = [ROOT / "experiments" / "results", ROOT / "benchmarks" / "results"]
    files = [f for folder in folders for pattern in ("*.json*", "*.md") for f in folder.rglob(pattern)]
    found = {str(f.relative_to(ROOT)): hit[0] for f in files if (hit := machine_path.findall(f.read_text()))}
    assert files and not found, f"absolute paths in committed results: {found}"


def test_the_paper_budget_rows_follow_the_runs_from_progress_to_completion(tmp_path, monkeypatch):
    from hyla.runs import records

    monkeypatch.setattr(files, "RESULTS", tmp_path)
    assert sraven_20m.sraven_20m_sections()["r20m"] == "not yet evaluated"
    train, evaluation = {"steps": 10000, "batch_size": 128}, {"samples": 5120, "final_samples": 51200}

    def write(folder: str, mixer: str, accuracies: list[float], status: str | None, seed: int = 0) -> None:
        steps = [5000 * (i + 1) for i in range(len(accuracies))]
        metrics = [
            row
            for step, a in zip(steps, accuracies)
            for row in (
                {"step": step, "split": "train", "loss": 1 - a},
                {"step": step, "split": "valid", "acc": a + 0.01},
                {"step": step, "split": "ood", "acc": a},
            )
        ]
        record = {
            "run": f"table_a1_raven_20m_cpu/mixer-{mixer}__s{seed}",
            "config": {"model": {"mixer": mixer}, "seed": seed, "train": train, "eval": evaluation},
            "summary": {"status": status} if status else {},
            "metrics": metrics,
        }
        records.write(record, tmp_path / folder)

    progress = "table_a1_raven_20m_cpu_progress"
    write(progress, "softmax", [0.5, 0.6], None)
    write(progress, "linear", [0.25], None)
    assert sraven_20m.sraven_20m_sections()["r20m_hyla_ood"] == "–"  # HYLA not evaluated yet
    write(progress, "hyla", [0.1, 0.2], None)
    under_way = sraven_20m.sraven_20m_sections()
    assert under_way["r20m"] == (
        "under way; at 0.64M examples (step 5,000), softmax 50.00 ± 0.70, linear 25.00 ± 0.61, "
        "HYLA 10.00 ± 0.42 (5,120 OOD tasks each)"
    )
    assert under_way["r20m_at"].startswith("under way; the latest evaluation all three reached: step 5,000 of 10,000")
    assert under_way["r20m_order"] == (  # s.e. of a difference: sqrt(0.70² + 0.61²) = 0.92
        "softmax > linear > HYLA; softmax − linear +25.00 ± 0.92 (beyond 2 s.e.), "
        "linear − HYLA +15.00 ± 0.74 (beyond 2 s.e.)"
    )
    assert (under_way["r20m_softmax_valid"], under_way["r20m_softmax_loss"]) == ("51.00", "0.5000")
    for mixer, accuracies in {"softmax": [0.5, 0.6], "linear": [0.25, 0.5], "hyla": [0.1, 0.7]}.items():
        write("table_a1_raven_20m_cpu", mixer, accuracies, "completed")
    done = sraven_20m.sraven_20m_sections()
    assert done["r20m"] == (
        "softmax 60.00 ± 0.22, linear 50.00 ± 0.22, HYLA 70.00 ± 0.20 (51,200 OOD tasks each, ± binomial s.e.): "
        + done["r20m_order"]
    )
    assert (done["r20m_hyla_ood"], done["r20m_hyla_valid"], done["r20m_hyla_loss"]) == (
        "70.00 ± 0.20",
        "71.00",
        "0.3000",
    )
    assert done["r20m_order"].startswith("HYLA > softmax > linear; HYLA − softmax +10.00 ± 0.30 (beyond 2 s.e.)")
    mean, se = TABLE_A1["sraven"][("hyla", False)]
    assert done["r20m_hyla_vs_paper"] == f"+{70 - mean:.1f} ({se * 3**0.5:.1f})"
    assert under_way["r20m_hyla_vs_paper"] == "–"
    write(progress, "hyla", [0.3], None, seed=1)  # more seeds under way leave seed 0's rows as they were
    write(progress, "hyla_identity", [0.2], None)
    assert sraven_20m.sraven_20m_sections() == done
    rows = sraven_20m.sraven_20m_progress_sections()["r20m_progress_rows"].splitlines()
    assert [row.split(" | ")[:3] for row in rows] == [
        ["| HYLA", "0", "10,000"],
        ["| HYLA", "1", "5,000"],
        ["| linear", "0", "10,000"],
        ["| softmax", "0", "10,000"],
        ["| HYLA − nonlinearity", "0", "5,000"],
    ]


def test_the_runs_under_way_are_summed_up_from_their_stretches():
    from hyla.runs.report.sraven_budget import Curve, Stretch

    def curve(mixer: str, last: int, paces: list[float], completed: bool, cpu: str = "AMD EPYC") -> Curve:
        stretches = [Stretch(f"2026-11-2{i} 10:00", "abc1234", 0, last, pace, cpu) for i, pace in enumerate(paces)]
        return Curve(mixer, 0, 128, 100_000, completed, last, [], {}, {}, stretches)

    assert sraven_20m.under_way([curve("softmax", 100_000, [2.0, 4.0, 9.0], True)]) == "no run under way"
    running = [curve("hyla", 28_000, [0.5], False), curve("linear", 28_000 - 2_000, [0.6], False)]
    latest = (
        "2 runs under way, at steps 26,000–28,000 of 100,000; their latest stretch (from 2026-11-20 10:00 UTC, "
        "commit `abc1234`, AMD EPYC) trained at 0.50–0.60 steps/s each, at which the 74,000 steps left take "
        "34.3–41.1 h"
    )
    # a completed run's last stretch, perhaps alone, is not a pace three at once
    same_cpu = curve("softmax", 100_000, [2.0, 4.0, 9.0], True)
    assert sraven_20m.under_way([same_cpu, *running]) == (
        f"{latest}; at the completed runs' paces three at once on this CPU (2.00–4.00 steps/s each), 5.1–10.3 h"
    )
    other_cpu = curve("softmax", 100_000, [2.0, 4.0, 9.0], True, cpu="Intel Xeon")
    assert sraven_20m.under_way([other_cpu, *running]) == (
        f"{latest}; the completed runs trained three at once at 2.00–4.00 steps/s each on another CPU (Intel Xeon)"
    )


def test_the_rule_probes_cover_the_models_analyzed_so_far(tmp_path, monkeypatch):
    """A mixer whose run is still training has no analysis yet: its numbers are absent, not an error."""
    from hyla.runs import records

    monkeypatch.setattr(files, "RESULTS", tmp_path)
    for mixer, accuracy in (("hyla", 0.64), ("softmax", 0.55)):
        record = {
            "run": f"runs/mixer-{mixer}__s0",
            "config": {"model": {"mixer": mixer}, "seed": 0},
            "summary": {"status": "completed", "final": {"ood": {"acc": accuracy}}},
            "metrics": [],
        }
        records.write(record, tmp_path / "runs")
    analysis = {
        "probes": {"valid_unpermuted->ood_unpermuted": {"layer 0": {"accuracy": 0.8, "chance_accuracy": 0.1}}},
        "topographic_similarity": {"ood_unpermuted": {"layer 0": {"spearman": 0.6}}},
    }
    folder = tmp_path / "latent" / "mixer-hyla__s0" / "step100"
    folder.mkdir(parents=True)
    (folder / "analysis.json").write_text(json.dumps(analysis))
    numbers = latent.sraven_rule_probes("latent", "runs", "p")
    assert numbers == {"p_hyla_acc": "64.0", "p_hyla_l0": "0.800", "p_hyla_l0_chance": "0.100", "p_hyla_ts_l0": "0.60"}
