"""Markdown table of `hyla interventions` transfer scores, mean ± s.e. over intervention seeds.

    python experiments/interventions_table.py experiments/results/interventions_fuzzy_50k row
    python experiments/interventions_table.py experiments/results/interventions_raven_cpu probe

Reads DIR/<run>/interventions_tasks16_samples32_seed*.json (one file per `--seed`) and prints one
row per run and split: the unpatched score, then per layer setting the patched score and the two
controls (a random other task's codes; the donor's codes with the heads shuffled).
"""

import glob
import json
import statistics
import sys
from collections import defaultdict

LAYERS = ("layer 0", "layer 1", "all layers")
CONDITIONS = ("patched", "random_task", "shuffled_heads")


def scores(root: str, site: str) -> dict[tuple, list[float]]:
    """(run, split, what) -> transfer scores, one per seed."""
    values = defaultdict(list)
    for path in sorted(glob.glob(f"{root}/*/interventions_tasks16_samples32_seed*.json")):
        run, result = path.split("/")[-2], json.load(open(path))
        for split, scored in result["splits"].items():
            values[(run, split, "unpatched")].append(scored["reference"]["unpatched"]["transfer"])
            for layer, conditions in scored["sites"][site].items():
                for condition, value in conditions.items():
                    values[(run, split, layer, condition)].append(value["transfer"])
    return values


def cell(values: list[float]) -> str:
    if len(values) < 2:
        return f"{values[0]:.2f}"
    return f"{statistics.mean(values):.2f} ± {statistics.stdev(values) / len(values) ** 0.5:.2f}"


def main(root: str, site: str) -> None:
    values = scores(root, site)
    print(
        "| run | split | unpatched | "
        + " | ".join(f"{layer}: patched / random task / shuffled heads" for layer in LAYERS)
        + " |"
    )
    print("|---" * (3 + len(LAYERS)) + "|")
    for run in sorted({key[0] for key in values}):
        for split in ("valid", "ood"):
            cells = [" / ".join(cell(values[(run, split, layer, c)]) for c in CONDITIONS) for layer in LAYERS]
            print(f"| {run} | {split} | {cell(values[(run, split, 'unpatched')])} | " + " | ".join(cells) + " |")


if __name__ == "__main__":
    main(*sys.argv[1:3])
