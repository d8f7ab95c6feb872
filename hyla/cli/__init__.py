"""The `hyla` command: a small dispatcher.

Each subcommand is one entry of COMMANDS: its name -> ("module:function", one-line help). The
function takes the remaining arguments (a list of str) and returns an exit code (None = 0);
modules are imported only when their subcommand runs. Invalid input (a bad option value, a folder
that is not a run, a run of the wrong task, a damaged checkpoint) ends with one line
`hyla COMMAND: error: ...` and exit code 2; a stop by a signal with 128 + its number (SIGINT 130,
SIGTERM 143). The commands need the workflow extra (`WORKFLOW_PACKAGES`); without it a command ends
with one line saying to install it, and exit code 1.
"""

from __future__ import annotations

import importlib
import os
import re
import signal
import sys
import warnings

COMMANDS: dict[str, tuple[str, str]] = {
    "train": ("hyla.cli.commands:train_main", "train a model: hyla train --preset NAME [--section.field VALUE ...]"),
    "resume": ("hyla.cli.commands:resume_main", "continue a stopped or killed run: hyla resume RUN"),
    "eval": ("hyla.cli.commands:eval_main", "re-evaluate a run's checkpoint: hyla eval RUN [--split S] [--samples N]"),
    "export": (
        "hyla.cli.commands:export_main",
        "write a run's model as safetensors + config.json: hyla export RUN [--out DIR]",
    ),
    "list": ("hyla.cli.commands:list_main", "list presets, tasks and attention mixers"),
    "demo": ("hyla.cli.demo:main", "train softmax, linear and HYLA attention on a CPU preset and compare them"),
    "sample": (
        "hyla.cli.commands:sample_main",
        "continue a prompt with a language-model run: "
        "hyla sample RUN --prompt TEXT [--tokens N --temperature T --top-k K]",
    ),
    "sweep": (
        "hyla.cli.sweep:main",
        "train a grid of runs from a YAML file, skipping finished ones: hyla sweep FILE [--parallel N]",
    ),
    "results": (
        "hyla.cli.results:main",
        "aggregate run folders into mean ± s.e. tables, CSV and plots: hyla results DIR [DIR ...]",
    ),
    "analyze": (
        "hyla.cli.analyze:main",
        "latent-code analysis of a run (probes, embeddings, report): "
        "hyla analyze RUN [RUN ...] [--out DIR] [--split S] [--samples N] [--tsne]",
    ),
    "interventions": (
        "hyla.cli.interventions:main",
        "patch latent codes with another task's, score the transfer: "
        "hyla interventions RUN [RUN ...] [--out DIR] [--tasks N] [--seed S]",
    ),
}


WORKFLOW_PACKAGES = ("tyro", "tqdm", "yaml", "matplotlib", "sklearn", "tokenizers", "threadpoolctl")
"""The modules of the `workflow` extra (pyproject.toml): the library (ops, nn, tasks but text,
integrations, saving and loading models) imports none of them."""
WORKFLOW_EXTRA = "the hyla command needs the workflow extra: pip install 'hyla[workflow]'"


def usage() -> str:
    width = max(map(len, COMMANDS))
    lines = [f"  {name:<{width}}  {help_}" for name, (_, help_) in COMMANDS.items()]
    return "usage: hyla COMMAND [ARGS]  (hyla COMMAND --help for details; hyla --version)\n\ncommands:\n" + "\n".join(
        lines
    )


def main(argv: list[str] | None = None) -> int:
    argv = sys.argv[1:] if argv is None else list(argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    if argv[0] == "--version":
        from hyla import __version__

        print(f"hyla {__version__}")
        return 0
    name, rest = argv[0], argv[1:]
    if name not in COMMANDS:
        print(f"hyla: unknown command {name!r}\n\n{usage()}", file=sys.stderr)
        return 2
    bound_openmp_waiting()
    warnings.formatwarning = one_line_warning
    module, function = COMMANDS[name][0].split(":")
    try:
        code = getattr(importlib.import_module(module), function)(rest)
    except ModuleNotFoundError as e:
        if (e.name or "").split(".")[0] not in WORKFLOW_PACKAGES:
            raise
        print(f"hyla {name}: error: {e.name} is not installed; {WORKFLOW_EXTRA}", file=sys.stderr)
        return 1
    except KeyboardInterrupt as e:  # 128 + the signal's number, as a shell reports a process it ended
        return 128 + getattr(e, "signum", signal.SIGINT)
    except BrokenPipeError:  # its reader stopped reading (`hyla sweep F --status | head -3`): end quietly
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())  # nothing left to flush at exit
        return 128 + signal.SIGPIPE
    except SystemExit as e:  # argparse and tyro: --help, or a usage message ending in one error line
        return e.code if isinstance(e.code, int) else 2
    except user_errors() as e:
        message = " ".join(str(e).split())  # one line
        message = re.sub(r"^Error parsing [A-Z]\w*: ", "", message)  # tyro's name of the options' class
        print(f"hyla {name}: error: {message}", file=sys.stderr)
        return 2
    return 0 if code is None else int(code)


def one_line_warning(message, category, filename, lineno, line=None) -> str:
    """Python's warnings as the `hyla` command prints them: `warning: MESSAGE`, one line, without the
    source file and line that Python adds (they say where in hyla, not what to do)."""
    return f"warning: {' '.join(str(message).split())}\n"


OPENMP_SPIN_COUNT = "10000"
"""How many times libgomp's waiting threads spin before they sleep, where the `hyla` command sets it
(libgomp's own default, 300,000, spins so long that busy cores collapse the default thread count)."""


def bound_openmp_waiting() -> None:
    """Bound how long waiting OpenMP threads spin, unless the user chose (OMP_WAIT_POLICY or
    GOMP_SPINCOUNT set): on Linux, where PyTorch's wheels use GNU libgomp, GOMP_SPINCOUNT=10000;
    elsewhere OMP_WAIT_POLICY=PASSIVE (waiting threads sleep at once). Spinning threads compete for
    the cores with other processes (other runs of a sweep or the demo, other users), so with
    libgomp's default a busy machine trains far below one thread's speed; threads that never spin
    make every step wait for a wake-up, which on idle cores costs a short step much of its speed. The
    bounded spin keeps both near their best (measurements: docs/speed.md). OpenMP reads these once,
    when torch loads: set here, before any command imports torch (the sweeps' and the demo's runs
    inherit them)."""
    if "torch" in sys.modules or "OMP_WAIT_POLICY" in os.environ or "GOMP_SPINCOUNT" in os.environ:
        return
    if sys.platform.startswith("linux"):
        os.environ["GOMP_SPINCOUNT"] = OPENMP_SPIN_COUNT
    else:
        os.environ["OMP_WAIT_POLICY"] = "PASSIVE"


def user_errors() -> tuple[type[Exception], ...]:
    """The exceptions that mean bad input, not a bug: reported in one line, without a traceback. An
    error class whose module is not loaded cannot have been raised, and importing it would load
    torch: a refusal made before the heavy imports (a missing folder) stays fast."""
    from hyla.utils import ConfigError

    loaded = [getattr(sys.modules[module], name) for module, name in LOADED_ERRORS if module in sys.modules]
    return (ConfigError, FileExistsError, *loaded)


LOADED_ERRORS = (("hyla.train.run_dir", "RunError"), ("hyla.train.checkpoint", "CheckpointError"))
