"""Every decimal number a reader meets in README.md and experiments/RESULTS.md comes from a file:
it sits in a table that experiments/claims.py generates, or inside a phrase that claims_tables.md lists
under `<!-- prose: FILE -->` (checked by `claims.py --check` against the committed results). Settings
are written as code (`lr=1e-3`) or in words, which this scan skips."""

import re
from pathlib import Path

import pytest

from hyla.runs.report import tables

ROOT = Path(__file__).resolve().parents[2]

FILES = ("README.md", "experiments/RESULTS.md")
GENERATED = re.compile(r"<!-- claims:(\S+) begin.*?<!-- claims:\1 end -->", re.S)
NOT_PROSE = re.compile(r"```.*?```|`[^`\n]*`|\]\([^)\s]*\)|<!--.*?-->", re.S)  # code, link targets, comments
DECIMAL = re.compile(r"(?<![\w.])\d+\.\d+(?![\w.]*\d)")  # 0.54, 91.8; not 2.13.0 nor 1e-3


def prose_of(path: Path) -> str:
    """The file's text without its generated tables, code and link targets, spaces collapsed."""
    return " ".join(NOT_PROSE.sub(" ", GENERATED.sub(" ", path.read_text())).split())


def unchecked_numbers(path: Path, values: dict[str, str]) -> list[str]:
    """The decimals of `path`'s prose outside every phrase that claims_tables.md lists for it, each with
    its context."""
    text = prose_of(path)
    for file, phrase in tables.prose():
        if file == path:
            text = text.replace(" ".join(NOT_PROSE.sub(" ", tables.render_phrase(phrase, values)).split()), " ")
    return [text[max(0, m.start() - 40) : m.end() + 20] for m in DECIMAL.finditer(text)]


@pytest.mark.parametrize("name", FILES)
def test_every_number_in_prose_is_generated_or_checked(name):
    found = unchecked_numbers(ROOT / name, tables.numbers())
    assert not found, (
        f"{len(found)} numbers in {name}'s prose come from no file: list each phrase in "
        "experiments/claims_tables.md under <!-- prose: ... --> with its fields, or drop it:\n" + "\n".join(found)
    )


def test_a_number_outside_the_listed_phrases_is_found(tmp_path):
    page = tmp_path / "page.md"
    page.write_text("Gen\n<!-- claims:x begin -->\n| 1.5 |\n<!-- claims:x end -->\nHYLA got `0.5` and 63.98 here.\n")
    assert [m.strip() for m in unchecked_numbers(page, {})] == ["Gen HYLA got and 63.98 here."]
