"""Parsing command lines, which hyla does in cli/ alone: tyro builds typed options and --help from
dataclasses (their field docstrings are the help). This module loads neither torch nor hyla's
workflow, so a command can refuse bad options within a second; `hyla train`'s config arguments:
hyla.cli.train_args."""

from __future__ import annotations

import contextlib
import io

import tyro

from hyla.utils import ConfigError


def parse_options(kind, argv: list[str], prog: str, description: str | None = None, default=None):
    """Options of a `hyla` subcommand: tyro builds typed options and --help from a dataclass (its
    field docstrings are the help); an invalid option is a ConfigError of one line."""
    messages = io.StringIO()
    try:
        with contextlib.redirect_stderr(messages):
            kwargs = {} if default is None else {"default": default}
            return tyro.cli(kind, args=argv, prog=prog, description=description, **kwargs)
    except SystemExit as e:
        if not e.code:
            raise  # --help
        lines = [line.strip(" │╭╮╰╯") for line in messages.getvalue().splitlines()]
        lines = [line for line in lines if line.strip("─-") and not line.startswith("For full helptext")]
        # lines[0]: the box's title
        lines = [_without_section_prefix(_unknown_options_only(line)) for line in lines[1:]]
        raise ConfigError(f"{' '.join(lines)} (see {prog} --help)") from None


def _unknown_options_only(line: str) -> str:
    """tyro's "Unrecognized options: --train.stepz, 100" lists the values after an unknown option
    too: keep the option names ("--train.stepz"); a line without options is kept as it is."""
    prefix, _, listed = line.partition(": ")
    if prefix not in ("Unrecognized options", "Unrecognized arguments"):
        return line
    names = [item.split("=")[0] for item in listed.split(", ") if item.startswith("--")]
    return f"{prefix}: {', '.join(names)}" if names else line


def _without_section_prefix(line: str) -> str:
    """A config section's own check (`optim.lr=-1.0 must be > 0`) comes from tyro as "Error parsing
    optim: optim.lr=-1.0 ...": drop the prefix where the message names the section itself; an
    option's ("Error parsing --train.steps: ...") is kept."""
    prefix, _, message = line.partition(": ")
    section = prefix.removeprefix("Error parsing ")
    return message if section != prefix and message.startswith(f"{section}.") else line


def check_positive(**values: int | None) -> None:
    """ConfigError unless every given value is None or >= 1 (for subcommand options)."""
    for name, value in values.items():
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')}={value} must be >= 1")
