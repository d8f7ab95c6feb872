"""The package as users get it: `hyla --version`, and (slow) a wheel built with `python -m build` that
installs into a fresh virtual environment and runs from outside the source tree."""

import re
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

from hyla.cli import main, version

ROOT = Path(__file__).resolve().parents[1]


def test_version_flag(capsys):
    assert main(["--version"]) == 0
    assert capsys.readouterr().out.strip() == f"hyla {version()}"


def test_the_quick_start_installs_the_cpu_build_the_cpu_extra_pins():
    """README's main-job command takes torch from PyTorch's CPU index first, at the version the `cpu`
    extra pins, and that pin admits the CPU build's local version, so the extra adds no CUDA build."""
    readme = (ROOT / "README.md").read_text()
    [command] = [line for line in readme.splitlines() if line.endswith("hyla demo") and "pip install" in line]
    cpu_step = re.search(r"pip install torch==(\S+) --index-url https://download\.pytorch\.org/whl/cpu", command)
    assert cpu_step, command
    assert command.index(cpu_step.group(0)) < command.index("pip install -e '.[cpu]'")
    [extra] = re.findall(r'^cpu = \["([^"]+)"\]', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    pin = Requirement(extra)
    assert pin.name == "torch"
    assert pin.specifier.contains(cpu_step.group(1))
    assert pin.specifier.contains(f"{cpu_step.group(1)}+cpu")


def _source_modules() -> set[str]:
    return {
        str(p.relative_to(ROOT))
        for suffix in ("py", "cpp")
        for p in (ROOT / "hyla").rglob(f"*.{suffix}")
        if "__pycache__" not in p.parts
    }


@pytest.mark.slow
def test_wheel_installs_and_runs_outside_the_source_tree(tmp_path):
    pytest.importorskip("build")
    subprocess.run(
        [sys.executable, "-m", "build", "--wheel", "--outdir", str(tmp_path / "dist"), str(ROOT)],
        check=True,
        capture_output=True,
    )
    wheel = next((tmp_path / "dist").glob("hyla-*.whl"))
    with zipfile.ZipFile(wheel) as archive:
        names = set(archive.namelist())
        metadata = archive.read(next(n for n in names if n.endswith(".dist-info/METADATA"))).decode()
    assert _source_modules() <= names, f"modules missing from the wheel: {sorted(_source_modules() - names)}"
    for field in (
        "License-Expression: MIT",
        "Author: ",
        "Project-URL: ",
        "Classifier: ",
        "Keywords: ",
        "Requires-Dist: torch>=2.6",
        "Provides-Extra: cpu",
    ):
        assert field in metadata, field

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run(pip + [f"{wheel}[cpu]"], check=True, capture_output=True)  # [cpu]: the local CPU torch wheel
    outside = tmp_path / "elsewhere"
    outside.mkdir()
    out = subprocess.run(
        [str(venv / "bin" / "hyla"), "--version"], cwd=outside, check=True, capture_output=True, text=True
    ).stdout
    assert out.strip() == f"hyla {wheel.name.split('-')[1]}"
    imported = subprocess.run(
        [str(venv / "bin" / "python"), "-c", "import hyla; print(hyla.__file__)"],
        cwd=outside,
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    assert str(venv) in imported and str(ROOT) not in imported
    assert subprocess.run([str(venv / "bin" / "hyla"), "list"], cwd=outside, capture_output=True).returncode == 0
