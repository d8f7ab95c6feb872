"""docs/speed.md, the speed ledger, is complete: every implementation `auto` may take
(hyla.ops.dispatch.BACKENDS), every environment switch (hyla.utils.Switches) and every mechanism
that benchmarks/bench_ledger.py measures has a row, with its gain or reason and its off switch."""

import sys
from pathlib import Path

import pytest

from hyla.ops.dispatch import BACKENDS
from hyla.utils import SWITCHES, env_name

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT / "benchmarks"))
from bench_ledger import MECHANISMS  # noqa: E402

COLUMNS = ["name", "mechanism", "what it does", "gain", "off switch"]


def ledger_rows() -> dict[str, dict[str, str]]:
    """{name: {column: cell}} of the ledger's table; the name is the first column, in backticks."""
    lines = (ROOT / "docs" / "speed.md").read_text().splitlines()
    start = next(i for i, line in enumerate(lines) if line.startswith("| name |"))
    rows = {}
    for line in lines[start + 2 :]:
        if not line.startswith("|"):
            break
        cells = [cell.strip() for cell in line.strip().strip("|").split(" | ")]
        assert len(cells) == len(COLUMNS), f"a row of {len(cells)} cells: {line[:80]}"
        assert cells[0].startswith("`") and cells[0].endswith("`"), cells[0]
        rows[cells[0].strip("`")] = dict(zip(COLUMNS, cells))
    return rows


def test_every_row_has_a_gain_or_a_reason_and_a_switch():
    rows = ledger_rows()
    assert rows
    for name, row in rows.items():
        assert row["gain"] and row["off switch"] and row["what it does"], name


@pytest.mark.parametrize("backend", BACKENDS, ids=lambda b: b.name)
def test_every_implementation_has_a_row_with_its_switch(backend):
    rows = ledger_rows()
    assert backend.name in rows, f"docs/speed.md has no row `{backend.name}`"
    if backend.switch is not None:
        assert f"`{env_name(backend.switch)}=0`" in rows[backend.name]["off switch"]


@pytest.mark.parametrize("switch", SWITCHES)
def test_every_switch_turns_off_a_mechanism_with_a_row(switch):
    cells = [row["off switch"] for row in ledger_rows().values()]
    assert sum(f"`{env_name(switch)}=0`" in cell for cell in cells) == 1, f"no row, or several, for {env_name(switch)}"


def test_every_benchmarked_mechanism_has_a_row():
    """A mechanism of bench_ledger.py is its switch's row, or a row of its name."""
    rows = ledger_rows()
    switch_cells = " ".join(row["off switch"] for row in rows.values())
    for name, mechanism in MECHANISMS.items():
        named = [f"`{variable}={value}`" for variable, value in mechanism.off_env.items()]
        assert (named and all(n in switch_cells for n in named)) or name in rows, name


def test_the_whole_step_graphs_are_unmeasured_and_off():
    row = ledger_rows()["whole_step_graphs"]
    assert "unmeasured" in row["gain"] and row["off switch"].startswith("off by default")
