"""The `hyla` command: a small dispatcher.

Each subcommand is one entry of COMMANDS: its name -> ("module:function", one-line help). The
function takes the remaining arguments (a list of str) and returns an exit code (None = 0);
modules are imported only when their subcommand runs. Invalid input (a bad option value, a folder
that is not a run, a run of the wrong task, a damaged checkpoint) ends with one line
`hyla COMMAND: error: ...` and exit code 2; an interrupt with 130.
"""

from __future__ import annotations

import importlib
import os
import sys

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("hyla.cli.commands:train_main", "train a model: hyla train --preset NAME [--section.field VALUE ...]"),
    "resume": ("hyla.cli.commands:resume_main", "continue a stopped or killed run: hyla resume RUN"),
    "eval": ("hyla.cli.commands:eval_main", "re-evaluate a run's checkpoint: hyla eval RUN [--split S] [--samples N]"),
    "export": (
        "hyla.cli.commands:export_main",
        "write a run's model as safetensors + config.json: hyla export RUN [--out DIR]",
    ),
    "list": ("hyla.cli.commands:list_main", "list presets, tasks and attention mixers"),
    "demo": ("hyla.experiments.demo:main", "train softmax, linear and HYLA attention on a CPU preset and compare them"),
    "sample": (
        "hyla.cli.commands:sample_main",
        "continue a prompt with a language-model run: "
        "hyla sample RUN --prompt TEXT [--tokens N --temperature T --top-k K]",
    ),
    "sweep": (
        "hyla.experiments.sweep:main",
        "train a grid of runs from a YAML file, skipping finished ones: hyla sweep FILE [--parallel N]",
    ),
    "results": (
        "hyla.experiments.results:main",
        "aggregate run folders into mean ± s.e. tables, CSV and plots: hyla results DIR",
    ),
    "analyze": (
        "hyla.analysis.pipeline:main",
        "latent-code analysis of a run (probes, embeddings, report): "
        "hyla analyze RUN [--split S] [--samples N] [--no-tsne]",
    ),
    "interventions": (
        "hyla.analysis.interventions:main",
        "patch latent codes with another task's, measure the transfer: "
        "hyla interventions RUN [--out DIR] [--tasks N] [--seed S]",
    ),
}


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "usage: hyla COMMAND [ARGS]  (hyla COMMAND --help for details; hyla --version)\n\ncommands:\n" + "\n".join(
        lines
    )


def version() -> str:
    """The installed distribution's version (from its metadata: one source, pyproject.toml)."""
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as distribution_version

    try:
        return distribution_version("hyla")
    except PackageNotFoundError:
        return "unknown (not installed; pip install -e .)"


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] == "--version":
        print(f"hyla {version()}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"hyla: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    prefer_passive_openmp()
    module, function = COMMANDS[name][0].split(":")
    command = getattr(importlib.import_module(module), function)
    try:
        code = command(rest)
    except KeyboardInterrupt:
        return 130
    except SystemExit as e:  # argparse and tyro: --help, or a usage message ending in one error line
        return e.code if isinstance(e.code, int) else 2
    except user_errors() as e:
        message = " ".join(str(e).split())  # one line
        print(f"hyla {name}: error: {message}", file=sys.stderr)
        return 2
    return 0 if code is None else int(code)


def prefer_passive_openmp() -> None:
    """OMP_WAIT_POLICY=PASSIVE unless the user chose a policy: waiting OpenMP threads then sleep
    instead of spinning. Spinning threads compete for the cores with the other processes on them
    (other runs of a sweep or the demo, other users), so on a busy machine the default thread count
    falls far below one thread's speed; passive, it does not (measurements: benchmarks/README.md,
    "Threads on a shared machine"; docs/speed.md). OpenMP reads the policy once, when torch loads:
    set here, before any command imports torch (the sweeps' and the demo's runs inherit it)."""
    if "torch" not in sys.modules:
        os.environ.setdefault("OMP_WAIT_POLICY", "PASSIVE")


def user_errors() -> tuple[type[Exception], ...]:
    """The exceptions that mean bad input, not a bug: reported in one line, without a traceback."""
    from hyla.train.checkpoint import CheckpointError
    from hyla.train.configs import ConfigError
    from hyla.train.run_dir import RunError

    return ConfigError, RunError, CheckpointError, FileExistsError
