"""Text written one way for every report and progress line (demo, results, analysis, the paper's
report): Markdown tables, durations, and the mean ± standard error they print (true minus signs
where a report asks)."""

from __future__ import annotations

import math


def mean_se(values: list[float]) -> tuple[float, float | None]:
    """Mean and standard error (sample std / sqrt(n); None for a single value)."""
    n = len(values)
    mean = sum(values) / n
    if n < 2:
        return mean, None
    var = sum((v - mean) ** 2 for v in values) / (n - 1)
    return mean, math.sqrt(var / n)


def markdown_table(header: list[str], rows: list[list]) -> str:
    """A GitHub-flavoured Markdown table; cells are converted with `str`.

    >>> print(markdown_table(["a", "b"], [[1, "x"]]))
    | a | b |
    |---|---|
    | 1 | x |
    """
    for row in rows:
        if len(row) != len(header):
            raise ValueError(f"a row has {len(row)} cells, the header {len(header)}: {row}")
    lines = ["| " + " | ".join(map(str, header)) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(map(str, row)) + " |" for row in rows]
    return "\n".join(lines)


def mean_se_text(
    value: tuple[float, float | None] | None,
    scale: float = 1.0,
    digits: str = ".2f",
    se_digits: str | None = None,
    true_minus: bool = False,
) -> str:
    """'mean ± s.e.' of a (mean, s.e.) pair (`mean_se`'s), both × `scale`: the mean formatted by the
    spec `digits`, the s.e. by `se_digits` (default: `digits`); the mean alone where the s.e. is None
    (one value), '–' for no value. true_minus: a negative mean with a minus sign (−, `minus_sign`).

    >>> mean_se_text((-0.1234, 0.01), scale=100, digits=".1f", true_minus=True)
    '−12.3 ± 1.0'
    """
    if value is None:
        return "–"
    mean, se = value
    text = f"{scale * mean:{digits}}"
    text = minus_sign(text) if true_minus else text
    return text if se is None else f"{text} ± {scale * se:{se_digits or digits}}"


def minus_sign(text: str) -> str:
    """A formatted number with a true minus sign (−, U+2212) for the hyphen, as the reports print it."""
    return text.replace("-", "−")
