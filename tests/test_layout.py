"""The package's layout: the library (ops, nn, tasks, integrations) imports nothing from the
workflow (train, analysis, runs, cli) nor any of the workflow's packages (text aside), the
subpackages import each other without a cycle, the one loose module (hyla/utils.py) needs only the
standard library, only it reads HYLA_* variables, only cli/ parses command lines, and no function of
the package or of the scripts in experiments/ is longer than 60 lines. Every import counts, lazy ones
inside functions too."""

from __future__ import annotations

import ast
import sys
from graphlib import CycleError, TopologicalSorter
from pathlib import Path

import pytest

from hyla.cli import WORKFLOW_PACKAGES

PACKAGE = Path(__file__).resolve().parents[1] / "hyla"
LIBRARY = {"ops", "nn", "tasks", "integrations"}
WORKFLOW = {"train", "analysis", "runs", "cli"}
UTILS = PACKAGE / "utils.py"  # the generic helpers: switches, the cache folder, JSON files
TEXT_TASK = {PACKAGE / "tasks" / "text.py", PACKAGE / "tasks" / "tokenizer.py"}  # need tokenizers (workflow)
MAX_FUNCTION_LINES = 60
EXPERIMENTS = PACKAGE.parent / "experiments"  # its scripts: the report's entry points and tools


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


def imported_packages(path: Path) -> set[str]:
    """The top-level names of every module `path` imports (absolute imports), e.g. {"torch", "hyla"}."""
    names = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            names.update(alias.name.split(".")[0] for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and not node.level:
            names.add(node.module.split(".")[0])
    return names


def modules() -> list[Path]:
    return sorted(PACKAGE.rglob("*.py"))


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


def test_no_loose_modules_but_the_utilities():
    loose = sorted(p.name for p in PACKAGE.glob("*.py") if p.name != "__init__.py")
    assert loose == [UTILS.name], f"modules outside a subpackage: {loose}"
    assert {p.name for p in PACKAGE.iterdir() if (p / "__init__.py").exists()} == LIBRARY | WORKFLOW


def test_the_utilities_need_only_the_standard_library():
    outside = imported_packages(UTILS) - set(sys.stdlib_module_names) - {"__future__"}
    assert not outside, f"hyla/utils.py imports {sorted(outside)}"


def test_the_library_imports_no_workflow_package():
    """The library installs without the workflow extra (pyproject.toml): none of its modules imports
    a workflow package (tests/test_packaging.py imports it with them missing)."""
    library = [p for p in modules() if p.relative_to(PACKAGE).parts[0] in LIBRARY and p not in TEXT_TASK]
    offending = {
        str(p.relative_to(PACKAGE)): sorted(imported_packages(p) & set(WORKFLOW_PACKAGES))
        for p in [*library, UTILS]
        if imported_packages(p) & set(WORKFLOW_PACKAGES)
    }
    assert not offending, f"library modules importing workflow packages: {offending}"


def test_only_cli_parses_command_lines():
    parsers = {"tyro", "argparse"}
    offending = sorted(
        str(p.relative_to(PACKAGE))
        for p in modules()
        if imported_packages(p) & parsers and p.relative_to(PACKAGE).parts[0] != "cli"
    )
    assert not offending, f"modules parsing command lines outside hyla/cli: {offending}"


def hyla_strings(path: Path) -> list[str]:
    """The string constants of `path` that name a HYLA_* variable, docstrings (of modules, classes,
    functions and fields: strings that are statements) aside."""
    tree = ast.parse(path.read_text())
    docstrings = {id(node.value) for node in ast.walk(tree) if isinstance(node, ast.Expr)}
    return [
        node.value
        for node in ast.walk(tree)
        if isinstance(node, ast.Constant) and isinstance(node.value, str) and "HYLA_" in node.value
        if id(node) not in docstrings
    ]


def test_only_the_switch_table_reads_hyla_variables():
    """hyla.utils.switches() reads every HYLA_* variable once; no other module names one in code (a
    message names it through hyla.utils.env_name)."""
    offending = {str(p.relative_to(PACKAGE)): hyla_strings(p) for p in modules() if p != UTILS and hyla_strings(p)}
    assert not offending, f"HYLA_* variables named outside hyla/utils.py: {offending}"
    assert hyla_strings(UTILS)  # the check sees them where they are


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
    """In the package and in the scripts of experiments/ (entry points over hyla.runs.report, and tools)."""
    long = [
        f"{path.relative_to(PACKAGE.parent)}:{node.lineno} {node.name} ({node.end_lineno - node.lineno + 1} lines)"
        for path in [*PACKAGE.rglob("*.py"), *EXPERIMENTS.rglob("*.py")]
        for node in ast.walk(ast.parse(path.read_text()))
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef))
        and node.end_lineno - node.lineno + 1 > MAX_FUNCTION_LINES
    ]
    assert not long, "functions over 60 lines: " + "; ".join(long)
