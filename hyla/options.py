"""Options of the `hyla` commands without torch: the error of an invalid option or config value,
the parsing of a command's options, and the usual check on counts. A command that imports only
this (and hyla.folders) refuses bad input within a second, before anything heavy loads."""

from __future__ import annotations


class ConfigError(ValueError):
    """An invalid configuration value; the message names the field and the valid choices."""


def parse_options(kind, argv: list[str], prog: str, description: str | None = None, default=None):
    """Options of a `hyla` subcommand: tyro builds typed options and --help from a dataclass (its
    field docstrings are the help); an invalid option is a ConfigError of one line."""
    import contextlib
    import io

    import tyro

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
        raise ConfigError(f"{' '.join(lines[1:])} (see {prog} --help)") from None  # lines[0]: the box's title


def check_positive(**values: int | None) -> None:
    """ConfigError unless every given value is None or >= 1 (for subcommand options)."""
    for name, value in values.items():
        if value is not None and value < 1:
            raise ConfigError(f"--{name.replace('_', '-')}={value} must be >= 1")
