"""Fig. 5E's rank, and whether it holds: the rank of (addition, subtraction) among the 28 rule pairs
by the centered cosine of their mean codes (`hyla.analysis.measures.addition_subtraction`), on
held-out tasks, per model and code set, at growing sample sizes and under a bootstrap over the grids.

    python experiments/fig5e_stability.py MODEL [MODEL ...] --out DIR

Writes DIR/fig5e_stability.json: per model (mixer, seed) and code set (each layer, all layers) the
rank at each of SIZES samples (the first n grids of one draw of `ood_unpermuted`), and over
BOOTSTRAP draws of the largest sample's grids with replacement the share of draws where the pair
ranks first and the median rank. A rank of 1 of 28 is the best a permutation of the rule names can
give (p = 1/28), not a measure of strength; what the claims table reports as holding is a rank of 1
that stays 1 at every sample size and in most bootstrap draws (`stable`).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path

import numpy as np

SIZES = (512, 1024, 2048, 4096)
BOOTSTRAP = 200
STABLE_SHARE = 0.9
"""a rank 1 counts as stable where it is 1 at every size and in at least this share of the draws"""


def ranks(data: dict) -> dict[str, int]:
    """{code set: rank of (addition, subtraction) among the rule pairs} of SRAVEN codes."""
    from hyla.analysis.measures import label_similarity

    return {name: e["addition_subtraction"]["rank_among_pairs"] for name, e in label_similarity(data).items()}


def rows(data: dict, index: np.ndarray) -> dict:
    """The samples `index` of collected SRAVEN data (arrays over samples indexed, the rest kept)."""
    n = len(data["codes"])
    return {k: v[index] if isinstance(v, np.ndarray) and v.ndim and len(v) == n else v for k, v in data.items()}


def stability(data: dict, seed: int = 0) -> dict[str, dict]:
    """Per code set: the rank at each of SIZES, the share of bootstrap draws ranking first, their
    median rank, and `stable` (rank 1 at every size and in at least STABLE_SHARE of the draws)."""
    by_size = {n: ranks(rows(data, np.arange(n))) for n in SIZES}
    generator = np.random.default_rng(seed)
    draws = [ranks(rows(data, generator.integers(0, SIZES[-1], SIZES[-1]))) for _ in range(BOOTSTRAP)]
    result = {}
    for name in by_size[SIZES[-1]]:
        drawn = np.array([d[name] for d in draws])
        at_sizes = {str(n): by_size[n][name] for n in SIZES}
        first = float(np.mean(drawn == 1))
        result[name] = {
            "rank_by_samples": at_sizes,
            "bootstrap_first": first,
            "bootstrap_median_rank": float(np.median(drawn)),
            "stable": all(r == 1 for r in at_sizes.values()) and first >= STABLE_SHARE,
        }
    return result


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", type=Path)
    parser.add_argument("--out", type=Path, required=True)
    args = parser.parse_args(argv)
    import torch

    import hyla
    from hyla.analysis.collect import collect_latents
    from hyla.train.configs import upgrade_config

    torch.manual_seed(0)
    out = []
    for folder in args.models:
        model, task = hyla.load(folder)
        data = collect_latents(model, task, "ood_unpermuted", SIZES[-1], progress=False)
        config = upgrade_config(json.loads((folder / "manifest.json").read_text())["record"]["config"])
        out.append({"mixer": config["model"]["mixer"], "seed": config["seed"], "code_sets": stability(data)})
        print(folder.name, {k: v["rank_by_samples"] for k, v in out[-1]["code_sets"].items()}, flush=True)
    args.out.mkdir(parents=True, exist_ok=True)
    options = {"split": "ood_unpermuted", "sizes": SIZES, "bootstrap": BOOTSTRAP, "stable_share": STABLE_SHARE}
    (args.out / "fig5e_stability.json").write_text(json.dumps({"options": options, "models": out}, indent=1) + "\n")


if __name__ == "__main__":
    main()
