"""`hyla results DIR [DIR ...]`: aggregate run folders into tables (mean ± standard error over seeds),
CSV/JSON exports and plots.

The output folder names the full paths of the DIRs it was written from in inputs.json, with the
sha256 of the runs read (their names, configs, summaries and metrics); results of other DIRs are
refused there unless `--overwrite`, which moves them aside first (hyla.cli.folders.claim_output_folder).

Runs are grouped by every config field that varies among them and changes what a run computes
(model, task, optimization, steps, ...): seeds are aggregated, and bookkeeping fields (name,
folders, progress bars, threads, logging, evaluation schedule, stop_at, ...) never split a group.
A group of one seed shows no error bar. Writes, into `--out` (default: `results/<name of the first
DIR>` in the working directory, not the runs folder; the command prints where), `results.md` (a
table per main metric, and per-feature accuracy where the task reports it; then the main metric
along training, a table per split),
`results.csv`, `results.json`, `results_<metric>.png` (final metric per split), `curves_<metric>.png`
(training loss and evaluation curves against steps and training examples seen) and, for each numeric
setting the groups vary (a held-out fraction, say), `<metric>_vs_<setting>.png`: the final metric
against it, a line per group of the other settings (on a log axis where the values span a factor of 10
or more, as 1 and 16 heads).
Several folders are read as one. Run records (hyla.runs.records) count as run folders, and
`--out DIR` keeps the record of every completed run read in `DIR/records/`, so that DIR, committed,
regenerates its tables without the run folders.
`--paper` sets the paper's Table A1 value (hyla.runs.paper) beside each row it has.
`--only PATTERN ...` reads only the runs whose names match one of the glob patterns (the names `hyla
sweep --status` lists), e.g. the softmax, linear and HYLA runs of a folder that holds more mixers.

`hyla results DIR [DIR ...] --latent-structure` instead relates latent structure to generalization across
the completed runs (`hyla.analysis.structure`): per run, the topographic similarity of its latent
codes on the held-out split (cached in the run folder) against its final metric there; Spearman
across runs with a bootstrap interval, overall and per mixer. Writes `latent_structure.json` and
`latent_structure.png`.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from tyro.conf import Positional, arg

from hyla.cli.folders import claim_output_folder, record_inputs
from hyla.cli.options import check_positive, parse_options
from hyla.runs.result_tables import find_runs, runs_sha256
from hyla.runs.results import default_out, latent_structure, summarize
from hyla.train.configs import ConfigError


@dataclass
class ResultsOptions:
    """Aggregate the run folders below DIRS into mean ± s.e. tables (Markdown, CSV, JSON) and plots
    (with a figure of each metric against every numeric setting the runs vary); with
    --latent-structure, relate each run's latent-code structure to its generalization instead."""

    dirs: Positional[tuple[Path, ...]]
    """folders containing run folders or run records (searched recursively)"""
    out: Annotated[Path | None, arg(help_behavior_hint="(default: results/<name of the first of DIRS>)")] = None
    """where to write the tables and plots (the default is beside the runs folders, not in them); given,
    it also keeps the record of every completed run read in OUT/records/"""
    latent_structure: bool = False
    """instead of the tables: topographic similarity of each completed run's latent codes on
    --latent-split against its final metric there, Spearman across runs with a bootstrap CI, overall
    and per mixer (latent_structure.json, latent_structure.png; per-run numbers cached in each run
    folder as latent_structure-step<S>-<options>.json)"""
    latent_split: str = "ood"
    """held-out split whose codes and final metric are compared"""
    latent_layer: str = "last"
    """code set: last | all (layers concatenated) | a layer index"""
    latent_samples: int = 512
    """sequences whose codes are collected per run"""
    latent_permutations: int = 1000
    """permutation-test size of each run's topographic p-value"""
    bootstrap: int = 2000
    """bootstrap resamples of runs for the confidence interval (95%, percentile)"""
    only: tuple[str, ...] = ()
    """read only the runs whose names match one of these glob patterns, e.g. 'mixer-hyla__s*' (hyla sweep --status)"""
    paper: bool = False
    """beside each row of the tables, the paper's Table A1 value for its task and mixer (OOD R² on fuzzy
    logic, OOD panel accuracy on SRAVEN; mean ± s.e. over 3 seeds, at the paper's budget)"""
    seed: int = 0
    """seed of the task subset and permutations of each run's topographic similarity, and of the
    bootstrap (the samples are those `hyla analyze` uses: the run's task seed, batch of step 0)"""
    overwrite: bool = False
    """write into an output folder that holds the results of other folders (its inputs.json names them),
    first moving those aside to FOLDER.replaced-N"""

    def __post_init__(self):
        if not self.dirs:
            raise ConfigError("hyla results needs at least one folder of run folders")
        check_positive(
            latent_samples=self.latent_samples, latent_permutations=self.latent_permutations, bootstrap=self.bootstrap
        )
        if self.latent_layer not in ("last", "all") and not self.latent_layer.lstrip("-").isdigit():
            raise ConfigError(f"--latent-layer={self.latent_layer!r} is not valid: last, all or a layer index")


def main(argv: list[str]) -> int:
    """`hyla results DIR [DIR ...] [--out DIR] [--paper] [--only PATTERN ...] [--latent-structure ...]`"""
    args = parse_options(ResultsOptions, argv, "hyla results", __doc__)
    out = args.out or default_out(args.dirs)
    claim_output_folder(out, args.dirs, args.overwrite)
    if args.latent_structure:
        text = latent_structure(
            args.dirs,
            args.out,
            args.latent_split,
            args.latent_layer,
            args.latent_samples,
            args.latent_permutations,
            args.bootstrap,
            args.only,
            args.seed,
        )
        record_inputs(out, args.dirs)
    else:
        runs = find_runs(list(args.dirs), args.only)  # read once: for the tables and their sha256
        text = summarize(args.dirs, out, args.paper, args.only, keep_records=args.out is not None, runs=runs)
        record_inputs(out, args.dirs, read={"runs": len(runs), "sha256": runs_sha256(runs)})
    print(text)
    return 0
