"""README's results table is what experiments/claims.py rebuilds from the committed files."""

import importlib.util
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def claims():
    spec = importlib.util.spec_from_file_location("claims", ROOT / "experiments" / "claims.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("name", ["readme-results", "results-index"])
def test_the_committed_table_is_the_one_the_files_give(claims, name):
    path = claims.TABLES[name]
    text = path.read_text()
    start, end = claims.block(text, name)
    assert text[start:end] == claims.render(claims.templates()[name], claims.numbers()), (
        f"{path.name}'s table differs from the committed results: run python experiments/claims.py --write"
    )


def test_a_changed_number_is_caught_and_rewritten(claims, tmp_path, monkeypatch, capsys):
    for name, path in list(claims.TABLES.items()):  # copies: the test writes them
        (tmp_path / path.name).write_text(path.read_text())
        monkeypatch.setitem(claims.TABLES, name, tmp_path / path.name)
    readme = tmp_path / "README.md"
    text = readme.read_text()
    assert text.count("HYLA 0.46 ± 0.03") == 1
    readme.write_text(text.replace("HYLA 0.46 ± 0.03", "HYLA 0.64 ± 0.03"))
    assert claims.main(["--check"]) == 1
    assert "out of date: README.md" in capsys.readouterr().err
    assert claims.main(["--write"]) == 0 and claims.main(["--check"]) == 0
    assert readme.read_text() == text


def test_committed_results_hold_no_absolute_path_of_the_machine_that_made_them():
    machine_path = re.compile(r'"(/(?:home|root|tmp|work|Users|scratch|private)/[^"]*)"')
    files = [f for folder in ("experiments", "benchmarks") for f in (ROOT / folder).rglob("*.json*")]
    found = {str(f.relative_to(ROOT)): hit[0] for f in files if (hit := machine_path.findall(f.read_text()))}
    assert files and not found, f"absolute paths in committed results: {found}"
