"""The cells of the report's tables: numbers formatted one way (a true minus sign, 'mean ± s.e.'
through hyla.analysis.tables, as `hyla results` writes them) and the numbers of groups of runs
(`run_numbers`).

Names follow one scheme: `{prefix}_{row}_{column}` is a row's mean ± s.e. over its seeds,
`…_{column}_mean` the mean alone, `…_{column}_seeds` the seeds' values in order ("a / b / c"),
`{prefix}_{row}_s{seed}_{column}` one seed's value and `{prefix}_{row}_n` the number of seeds.
"""

from __future__ import annotations

from collections import defaultdict

from hyla.analysis.tables import mean_se, mean_se_text, minus_sign
from hyla.runs.paper import TABLE_A1
from hyla.runs.report.files import mixer_row


def number(x: float, digits: int = 2, sign: bool = False) -> str:
    """x to `digits` decimals, with a minus sign (and a plus with `sign`)."""
    return minus_sign(f"{x:{'+' if sign else ''}.{digits}f}")


def signed(x: float) -> str:
    """+1.20, −0.05: two decimals, the sign always, a true minus."""
    return number(x, 2, sign=True)


def pm(values, digits: int = 1, sign: bool = False) -> str:
    """'mean ± s.e.' of a list of values, a true minus sign."""
    spec = f"{'+' if sign else ''}.{digits}f"
    return mean_se_text(mean_se(list(values)), digits=spec, se_digits=f".{digits}f", true_minus=True)


def mean(values, digits: int = 1) -> str:
    return number(mean_se(list(values))[0], digits)


def over_seeds(values: list[float], digits: int = 1, count: bool = False) -> str:
    """'mean ± s.e.' over seeds ('–' for none; one seed: its value and '(1 seed)'), with `count` how
    many seeds after it ('(3 seeds)')."""
    if not values:
        return "–"
    text = mean_se_text(mean_se(values), digits=f".{digits}f")
    if len(values) == 1:
        return f"{text} (1 seed)"
    return f"{text} ({len(values)} seeds)" if count else text


def paper(row: tuple, digits: int = 1, error: bool = True) -> str:
    """The paper's Table A1 'mean ± s.e.' (or the mean alone) of a row (task, mixer, experts)."""
    value, se = TABLE_A1[row[0]][row[1:]]
    return mean_se_text((value, se if error else None), digits=f".{digits}f")


def pm_pair(value: list, scale: float, digits: int) -> str:
    """'mean ± s.e.' of a [mean, s.e.] pair that `hyla results` wrote."""
    return mean_se_text(tuple(value), scale, f".{digits}f", true_minus=True)


def over_models(row: dict, digits: int = 2) -> str:
    """A summary row's 'mean ± s.e.', and over how many models where some are undefined."""
    text = mean_se_text((row["mean"], row["se"]), digits=f".{digits}f", true_minus=True)
    defined = sum(model["value"] is not None for model in row["per_model"])
    return text if defined == len(row["per_model"]) else f"{text} over {defined} models"


def per_model(row: dict, digits: int = 3) -> str:
    """Each model's value, in the order of the seeds: 'a / b / undefined'."""
    models = sorted(row["per_model"], key=lambda model: model["seed"])
    return " / ".join("undefined" if m["value"] is None else number(m["value"], digits) for m in models)


def minutes(seconds: float) -> str:
    """'42 min', or '3 h 25 min' from an hour on."""
    total = round(seconds / 60)
    return f"{total} min" if total < 60 else f"{total // 60} h {total % 60:02d} min"


def run_numbers(prefix: str, runs: list[dict], columns: dict, row=mixer_row) -> dict[str, str]:
    """The numbers of the runs' groups (by `row`), per column: {name: (getter, digits, sign)}."""
    groups: dict[str, dict[int, dict]] = defaultdict(dict)
    for record in runs:
        groups[row(record)][record["config"]["seed"]] = record
    n = {}
    for name, seeds in groups.items():
        n[f"{prefix}_{name}_n"] = str(len(seeds))
        for column, (get, digits, sign) in columns.items():
            values = {seed: get(record) for seed, record in sorted(seeds.items())}
            for seed, value in values.items():
                n[f"{prefix}_{name}_s{seed}_{column}"] = number(value, digits, sign)
            n[f"{prefix}_{name}_{column}"] = pm(values.values(), digits, sign)
            n[f"{prefix}_{name}_{column}_mean"] = number(mean_se(list(values.values()))[0], digits, sign)
            n[f"{prefix}_{name}_{column}_seeds"] = " / ".join(number(v, digits, sign) for v in values.values())
    return n


# the paper's names of Table A1's rows, in its order
MIXER_NAMES = {
    "hyla": "HYLA",
    "linear": "linear",
    "softmax": "softmax",
    "linear_rms_head": "linear + RMS head",
    "hyla_no_rms_head": "HYLA − RMS head",
    "hyla_identity": "HYLA − nonlinearity",
    "hyla_identity_no_rms_head": "HYLA − nonlinearity − RMS head",
    "softmax_hyla": "softmax HYLA",
}

MIXER_COLORS = {"hyla": "tab:blue", "linear": "tab:orange", "softmax": "tab:green", "hyla_identity": "tab:red"}
"""One color per mixer in every figure of the report."""


def label(mixer: str) -> str:
    """A mixer's name in the report: the paper's ('HYLA', 'HYLA − nonlinearity', ...), else its own."""
    return MIXER_NAMES.get(mixer, mixer)


def seeds_text(seeds: list[int]) -> str:
    """'seed 0', 'seeds 0–2' (consecutive) or 'seeds 0, 2'."""
    if len(seeds) == 1:
        return f"seed {seeds[0]}"
    consecutive = seeds == list(range(seeds[0], seeds[-1] + 1))
    return f"seeds {seeds[0]}–{seeds[-1]}" if consecutive else "seeds " + ", ".join(map(str, seeds))
