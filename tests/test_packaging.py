"""The package as users get it: `hyla --version`, the library installed without the workflow extra
(it imports none of the workflow's packages; the `hyla` command says which extra to install), and
(slow) a wheel built with `python -m build` that installs into a fresh virtual environment and runs
from outside the source tree."""

import os
import re
import subprocess
import sys
import textwrap
import zipfile
from pathlib import Path

import pytest
from packaging.requirements import Requirement

import hyla
from hyla.cli import WORKFLOW_EXTRA, WORKFLOW_PACKAGES, main

ROOT = Path(__file__).resolve().parents[1]
PYPROJECT = (ROOT / "pyproject.toml").read_text()
# distributions whose module has another name
MODULE_NAMES = {"pyyaml": "yaml", "scikit-learn": "sklearn"}


def test_version_flag_and_attribute_are_the_installed_version(capsys):
    from importlib.metadata import version

    assert main(["--version"]) == 0
    assert hyla.__version__ == version("hyla") == PYPROJECT.split('version = "')[1].split('"')[0]
    assert capsys.readouterr().out.strip() == f"hyla {hyla.__version__}"


def test_the_quick_start_installs_the_cpu_build_the_cpu_extra_pins():
    """README's main-job command takes torch from PyTorch's CPU index first, at the version the `cpu`
    extra pins, and that pin admits the CPU build's local version, so the extra adds no CUDA build."""
    readme = (ROOT / "README.md").read_text()
    [command] = [line for line in readme.splitlines() if line.endswith("hyla demo") and "pip install" in line]
    cpu_step = re.search(r"pip install torch==(\S+) --index-url https://download\.pytorch\.org/whl/cpu", command)
    assert cpu_step, command
    assert command.index(cpu_step.group(0)) < command.index("pip install -e '.[cpu,workflow]'")
    [extra] = re.findall(r'^cpu = \["([^"]+)"\]', (ROOT / "pyproject.toml").read_text(), re.MULTILINE)
    pin = Requirement(extra)
    assert pin.name == "torch"
    assert pin.specifier.contains(cpu_step.group(1))
    assert pin.specifier.contains(f"{cpu_step.group(1)}+cpu")


def test_the_library_needs_torch_numpy_and_safetensors_and_the_workflow_its_extra():
    """The library's dependencies are three; the workflow's packages come with the `workflow` extra,
    whose modules are hyla.cli.WORKFLOW_PACKAGES, and the `test` extra (CI's) includes it."""
    assert sorted(r.name for r in _requirements("dependencies")) == ["numpy", "safetensors", "torch"]
    assert {MODULE_NAMES.get(r.name, r.name) for r in _requirements("workflow")} == set(WORKFLOW_PACKAGES)
    assert any(r.name == "hyla" and "workflow" in r.extras for r in _requirements("test"))


def _requirements(key: str) -> list[Requirement]:
    """The requirements of a list in pyproject.toml (`dependencies` or an extra), read with a pattern
    (tomllib is Python 3.11 on)."""
    [listed] = re.findall(rf"^{key} = \[(.*?)\]\s*(?:#.*)?$", PYPROJECT, re.MULTILINE | re.DOTALL)
    return [Requirement(r) for r in re.findall(r'"([^"]+)"', listed)]


PRELUDE = "import importlib.abc, sys\nWORKFLOW = {packages!r}\n"
# the workflow's packages made unimportable: what `pip install hyla` without the extra gives
WITHOUT_THE_WORKFLOW = """
class Missing(importlib.abc.MetaPathFinder):
    def find_spec(self, name, path=None, target=None):
        if name.split(".")[0] in WORKFLOW:
            raise ModuleNotFoundError(f"No module named {name!r}", name=name)

sys.meta_path.insert(0, Missing())
"""


def _run(code: str, tmp_path: Path, without_the_workflow: bool) -> subprocess.CompletedProcess:
    script = PRELUDE.format(packages=WORKFLOW_PACKAGES)
    script += (WITHOUT_THE_WORKFLOW if without_the_workflow else "") + textwrap.dedent(code)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    return subprocess.run([sys.executable, "-c", script], cwd=tmp_path, capture_output=True, text=True, env=env)


@pytest.mark.parametrize("without_the_workflow", [True, False], ids=["without", "with"])
def test_the_library_imports_no_workflow_package(tmp_path, without_the_workflow):
    """Importing and using the library (ops, nn, the non-text tasks, the integrations, saving and
    loading a model) loads no workflow package and no workflow module of hyla, whether the workflow's
    packages are installed or not (what torch imports itself, e.g. tqdm for torch.hub, is not counted)."""
    code = """
        import numpy, safetensors.torch, torch
        before = set(sys.modules)
        import hyla, hyla.ops, hyla.nn, hyla.nn.generate, hyla.tasks, hyla.integrations.transformers, hyla.utils
        from hyla.tasks import FuzzyLogic, SRaven
        from hyla.nn.transformer import ModelConfig, Transformer
        FuzzyLogic(3, 2, 8, 0.5, 0.25, 0).batch("train", 2, 0)
        SRaven(3, 8, 3, True, 0.25, 0).batch("train", 2, 0)
        sizes = dict(num_layers=1, dim=8, num_heads=2, qk_dim=4, v_dim=4, mlp_dim=8, input_dim=3, seq_len=4)
        Transformer(ModelConfig(**sizes, mixer="hyla")).save_pretrained("model")
        Transformer.from_pretrained("model")(torch.randn(1, 4, 3)).sum().backward()
        print(sorted({name.split(".")[0] for name in set(sys.modules) - before} & set(WORKFLOW)))
        workflow = ("hyla.train", "hyla.cli", "hyla.analysis", "hyla.runs", "hyla.tasks.text")
        print(sorted(name for name in sys.modules if name.startswith(workflow)))
    """
    done = _run(code, tmp_path, without_the_workflow)
    assert done.returncode == 0, done.stderr
    assert done.stdout.splitlines() == ["[]", "[]"], done.stdout


def test_the_command_without_the_workflow_extra_says_which_to_install(tmp_path):
    done = _run("from hyla.cli import main; raise SystemExit(main(['list']))", tmp_path, without_the_workflow=True)
    assert done.returncode == 1
    assert done.stderr == f"hyla list: error: tyro is not installed; {WORKFLOW_EXTRA}\n"
    assert WORKFLOW_EXTRA.endswith("pip install 'hyla[workflow]'")
    done = _run("from hyla.cli import main; raise SystemExit(main(['--version']))", tmp_path, without_the_workflow=True)
    assert done.returncode == 0 and done.stdout.startswith("hyla ")


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
        "Provides-Extra: workflow",
    ):
        assert field in metadata, field

    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True)
    pip = [str(venv / "bin" / "python"), "-m", "pip", "install", "-q"]
    subprocess.run(pip + [f"{wheel}[cpu,workflow]"], check=True, capture_output=True)  # [cpu]: the local CPU torch
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
