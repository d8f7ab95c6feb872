"""The package's layout: the library (ops, nn, tasks, integrations) imports nothing from the
workflow (train, analysis, experiments, cli), the subpackages import each other without a cycle,
and no function is longer than 60 lines. Every import counts, lazy ones inside functions too."""

from __future__ import annotations

import ast
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

PACKAGE = Path(__file__).resolve().parents[1] / "hyla"
LIBRARY = {"ops", "nn", "tasks", "integrations"}
WORKFLOW = {"train", "analysis", "experiments", "cli"}
MAX_FUNCTION_LINES = 60


def imported_modules(path: Path, root: Path = PACKAGE) -> set[str]:
    """Every `hyla...` module that `path` (a file of the package at `root`) imports, at the top or
    inside a function."""
    package = ".".join(path.relative_to(root.parent).with_suffix("").parts[:-1])  # e.g. hyla.ops.kernels
    modules = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            modules.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = package.rsplit(".", node.level - 1)[0] if node.level else ""
            module = ".".join(part for part in (base, node.module) if part)
            modules.update(f"{module}.{alias.name}" for alias in node.names)  # `from hyla import ops` names a module
            modules.add(module)
    return {m for m in modules if m.startswith("hyla.")}


def subpackage(module: str) -> str:
    return module.split(".")[1]


def subpackage_imports() -> dict[str, set[str]]:
    """subpackage -> the other subpackages it imports (names that are not subpackages are dropped)."""
    graph: dict[str, set[str]] = {name: set() for name in LIBRARY | WORKFLOW}
    for path in PACKAGE.rglob("*.py"):
        if path.parent == PACKAGE:
            continue
        source = path.relative_to(PACKAGE).parts[0]
        graph[source] |= {subpackage(m) for m in imported_modules(path)} & graph.keys() - {source}
    return graph


def test_no_loose_modules():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules outside a subpackage: {loose}"
    assert {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()} == LIBRARY | WORKFLOW


def test_library_imports_nothing_from_the_workflow():
    graph = subpackage_imports()
    offending = {name: sorted(graph[name] & WORKFLOW) for name in LIBRARY if graph[name] & WORKFLOW}
    assert not offending, f"library subpackages importing the workflow: {offending}"


def test_subpackages_import_each_other_without_a_cycle():
    try:
        order = list(TopologicalSorter(subpackage_imports()).static_order())
    except CycleError as e:
        pytest.fail(f"import cycle between subpackages: {e.args[1]}")
    assert order.index("ops") < order.index("nn") < order.index("train") < order.index("cli")


def test_the_import_walk_sees_lazy_imports(tmp_path):
    module = tmp_path / "hyla" / "ops" / "m.py"
    module.parent.mkdir(parents=True)
    module.write_text("def f():\n    from hyla.train.loop import train\n    from ..nn import x\n")
    found = imported_modules(module, root=tmp_path / "hyla")
    assert found == {"hyla.train.loop", "hyla.train.loop.train", "hyla.nn", "hyla.nn.x"}


def test_no_function_longer_than_60_lines():
    long = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in PACKAGE.rglob("*.py")
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, "functions over 60 lines: " + "; ".join(long)
