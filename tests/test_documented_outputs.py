"""Every `hyla analyze` / `hyla interventions` command the documentation gives with `--out` into a committed
results folder names the models that folder was written from: the folder records them (inputs.json), and
each recorded model is one the command's patterns match, so that the command as written writes there
again rather than being refused (hyla.cli.folders.claim_output_folder)."""

from __future__ import annotations

import json
import re
import shlex
from fnmatch import fnmatch
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
DOCUMENTS = ("README.md", "docs/*.md", "experiments/README.md", "experiments/*.py", "experiments/results/*/README.md")
COMMAND = re.compile(r"^\s*(hyla (?:analyze|interventions) .*)$")


def documented_commands() -> list[tuple[str, str]]:
    """(file:line, command) of every `hyla analyze|interventions` line, with its `\\` continuations."""
    commands = []
    for path in sorted({p for pattern in DOCUMENTS for p in ROOT.glob(pattern)}):
        lines = path.read_text().splitlines()
        for i, line in enumerate(lines):
            if not (match := COMMAND.match(line)):
                continue
            command, j = match.group(1), i
            while command.rstrip().endswith("\\") and j + 1 < len(lines):
                j += 1
                command = command.rstrip()[:-1] + " " + lines[j].strip()
            commands.append((f"{path.relative_to(ROOT)}:{i + 1}", command))
    return commands


def models_and_output(command: str) -> tuple[list[str], str | None]:
    """The model patterns (the positional arguments) and --out of a command line."""
    words = shlex.split(command, comments=True)[2:]
    models, out, i = [], None, 0
    while i < len(words):
        if words[i] == "--out":
            out, i = words[i + 1], i + 2
        elif words[i].startswith("--"):
            i += 1 if i + 1 == len(words) or words[i + 1].startswith("--") else 2
        else:
            models, i = [*models, words[i]], i + 1
    return models, out


COMMITTED = [
    pytest.param(command, id=where)
    for where, command in documented_commands()
    if (out := models_and_output(command)[1]) and out.startswith("experiments/results/")
]


def test_the_documentation_gives_such_commands():
    assert len(COMMITTED) >= 6


@pytest.mark.parametrize("command", COMMITTED)
def test_a_documented_output_folder_was_written_from_the_models_the_command_names(command):
    patterns, out = models_and_output(command)
    record = ROOT / out / "inputs.json"
    assert record.is_file(), f"{out} names no models (no inputs.json): the command would be refused there"
    recorded = [(ROOT / out / path).resolve().relative_to(ROOT) for path in json.loads(record.read_text())["inputs"]]
    strays = [str(path) for path in recorded if not any(fnmatch(str(path), pattern) for pattern in patterns)]
    assert recorded and not strays, f"{out} was written from {strays}, which `{command}` does not name"
