"""README.md's Python blocks run as pasted, each on its own, from the repository's root. A block that
imports a package that is not installed (an extra, such as transformers) is skipped."""

from __future__ import annotations

import ast
import json
import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
BLOCK = re.compile(r"^```python\n(.*?)^```$", re.DOTALL | re.MULTILINE)
SHIPPED_TOLERANCE = 1e-6
"""|README's evaluation of the shipped model - the manifest's number|: 5e-10 measured on the CPU that
trained and evaluated it; the margin covers other CPUs' float rounding"""


def python_blocks() -> list[tuple[int, str]]:
    """(line of the opening fence, code) of every ```python block of README.md."""
    text = (ROOT / "README.md").read_text()
    return [(text.count("\n", 0, match.start()) + 1, match.group(1)) for match in BLOCK.finditer(text)]


def imported_packages(code: str) -> set[str]:
    """The top-level packages that `code` imports."""
    names = set()
    for node in ast.walk(ast.parse(code)):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.level == 0:
            names.add(node.module.split(".")[0])
    return names


def test_the_readme_has_its_blocks():
    blocks = [code for _, code in python_blocks()]
    assert len(blocks) >= 4 and sum("hyla.load(" in code for code in blocks) == 1


@pytest.mark.parametrize(("line", "code"), [pytest.param(*block, id=f"line{block[0]}") for block in python_blocks()])
def test_a_readme_block_runs_as_pasted(line, code, monkeypatch, capsys):
    for package in sorted(imported_packages(code) - {"hyla"}):
        pytest.importorskip(package, reason=f"README.md:{line} needs {package}")
    monkeypatch.chdir(ROOT)  # README's paths are the repository's
    namespace: dict = {}
    exec(compile(code, f"README.md:{line}", "exec"), namespace)
    if "hyla.load(" in code:  # the shipped model, evaluated as its run was: the number its manifest records
        manifest = json.loads((ROOT / namespace["folder"] / "manifest.json").read_text())
        recorded = manifest["record"]["summary"]["final"]["ood"]["r2"]
        assert abs(namespace["r2"] - recorded) < SHIPPED_TOLERANCE
        assert capsys.readouterr().out.split() == [repr(namespace["r2"]), repr(recorded)]


def anchors(markdown: str) -> set[str]:
    """The anchors GitHub gives the headings of `markdown`: lower case, punctuation dropped, spaces as
    hyphens, `-1`, `-2`, … after a repeated one."""
    seen: dict[str, int] = {}
    for heading in re.findall(
        r"^#+ (.+)$", re.sub(r"^```.*?^```$", "", markdown, flags=re.DOTALL | re.MULTILINE), re.MULTILINE
    ):
        slug = re.sub(r"[^\w\- ]", "", heading.strip().lower()).replace(" ", "-")
        seen[slug] = seen.get(slug, -1) + 1
        yield slug if seen[slug] == 0 else f"{slug}-{seen[slug]}"


def test_every_link_to_a_heading_of_the_docs_finds_it():
    """Links such as RESULTS.md#a-section, from any tracked Markdown file, name a heading there."""
    broken = []
    for source in sorted(ROOT.glob("*.md")) + sorted(ROOT.glob("[!.]*/**/*.md")):
        if ".venv" in source.parts or "results" in source.parts or source.name == "claims_tables.md":
            continue  # claims_tables.md's links are templates
        for target, anchor in re.findall(r"\]\(([^)#\s]*)#([^)\s]+)\)", source.read_text()):
            path = (source.parent / target).resolve() if target else source
            if path.suffix == ".md" and path.is_file() and anchor not in set(anchors(path.read_text())):
                broken.append(f"{source.relative_to(ROOT)} → {target}#{anchor}")
    assert not broken, broken
