r"""Markdown tables of `hyla interventions` results: the calibrated transfer (0 = unpatched, 1 = B's own
prediction) of the patch and its three controls per split, site and layer setting, beside the
references (constant, a perfect random task or rule, wrecked), as mean ± s.e. over the models of
each mixer and as the median with its bootstrap 95% interval, each task's tables after a legend
that defines their sites, conditions, references and columns (docs/interventions.md).

    hyla interventions experiments/results/weights_raven_cpu/models/* \
        --out experiments/results/interventions_weights_raven_cpu
    python experiments/interventions_table.py experiments/results/interventions_weights_raven_cpu

Reads FILE.json, or every interventions_*.json in a folder (each file's groups in turn), as
`hyla interventions` writes them; prints the same tables as the command does.
"""

import json
import sys
from pathlib import Path

from hyla.analysis.intervention_report import tables


def report_files(path: Path) -> list[Path]:
    files = sorted(path.glob("interventions_*.json")) if path.is_dir() else [path]
    if not files or not all(file.is_file() for file in files):
        sys.exit(f"interventions_table: no interventions_*.json at {path}")
    return files


def main(paths: list[str]) -> None:
    if not paths:
        sys.exit("usage: python experiments/interventions_table.py FILE.json|DIR [...]")
    for path in paths:
        for file in report_files(Path(path)):
            report = json.loads(file.read_text())
            groups = report.get("groups")
            if not groups or "seed" not in groups[0]:  # written before the calibrated score, or the medians
                sys.exit(f"interventions_table: {file} has an old layout (no medians); rerun hyla interventions")
            print(f"## {file}\n\n{tables(groups)}\n")


if __name__ == "__main__":
    main(sys.argv[1:])
