"""The report's language-modeling numbers: the final valid NLL and perplexity of the `lm_cpu` runs."""

from __future__ import annotations

from hyla.runs.report.cells import pm, run_numbers
from hyla.runs.report.files import MIXERS, final, mixer_row, records_in, seed_values


def numbers() -> dict[str, str]:
    """Final valid NLL per mixer, mean ± s.e. over the seeds recorded in lm_cpu/records (`lm_*`), and
    RESULTS.md's table of them (`lmt_*`: each seed's NLL and the range of the perplexities)."""
    runs = records_in("lm_cpu")
    losses = seed_values(runs, mixer_row, final("valid", "nll", 1))
    perplexities = seed_values(runs, mixer_row, final("valid", "ppl", 1))
    n = {f"lm_{mixer}": pm(losses[mixer], 3) for mixer in MIXERS}
    n["lm_seeds"] = str(min(len(values) for values in losses.values()))
    n.update(run_numbers("lmt", runs, {"nll": (final("valid", "nll", 1), 3, False)}))
    for mixer in MIXERS:
        ppl = perplexities[mixer]
        n[f"lmt_{mixer}_ppl"] = f"{min(ppl):.0f}–{max(ppl):.0f}"
    return n
