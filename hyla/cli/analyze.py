"""`hyla analyze RUN [RUN ...]`: its options and their parsing (the analysis itself:
hyla.analysis.pipeline; the summary of several models: hyla.analysis.latent_report). The options
and the model folders are checked, and the first progress line printed, before the analysis and
its libraries (torch, scikit-learn, matplotlib) are imported."""

from __future__ import annotations

import sys
from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from tyro.conf import Positional, UseAppendAction, arg

from hyla.cli.folders import check_models, claim_output_folder, default_output, model_labels, record_inputs
from hyla.cli.options import check_positive, parse_options


@dataclass
class AnalyzeOptions:
    """Latent-code analysis of trained models (probes, embeddings, topographic similarity, rule
    similarity, report) into OUT/<model>/step<S>[-<options>]/ with --out (and a summary of the models
    per mixer), else RUN/analysis/step<S>[-<options>]/ for a run folder and
    ./analysis-<model>/step<S>[-<options>]/ for an exported model (never into the model's folder):
    one folder per checkpoint step and set of non-default options."""

    runs: Positional[Annotated[tuple[Path, ...], arg(metavar="RUN [RUN ...]", help_behavior_hint="(required)")]]
    """run folders (`hyla train`) or exported models (`hyla export`), fuzzy logic or SRAVEN; several
    (e.g. the training seeds of each mixer) are summarized as mean ± s.e. over models per mixer"""
    out: Annotated[
        Path | None, arg(help_behavior_hint="(default: RUN/analysis; ./analysis-NAME for an exported model)")
    ] = None
    """output folder, needed with several models: OUT/latent_summary.{md,json,png} and each model's analysis"""
    split: UseAppendAction[list[str]] = field(default_factory=list)
    """split to analyze (repeatable; default: the task's analysis splits)"""
    samples: int = 2048
    """sequences per split"""
    batch_size: int = 512
    permutations: int = 1000
    """permutation-test size (topographic similarity)"""
    plot_samples: int = 1500
    """points per embedding plot"""
    tsne: bool = False
    """t-SNE embeddings besides PCA (slow: minutes per model on a CPU, the rest well under one)"""
    seed: int = 0
    device: str = "cpu"
    """cpu | cuda | cuda:N | auto (where the codes are collected)"""
    feature: Annotated[int | None, arg(help_behavior_hint="(default: all)")] = None
    """SRAVEN: probe only this underlying feature (the paper: the last)"""
    overwrite: bool = False
    """write into an output folder that holds the outputs of another model (its inputs.json names it),
    first moving those aside to FOLDER.replaced-N"""

    def __post_init__(self):
        check_positive(
            samples=self.samples,
            batch_size=self.batch_size,
            permutations=self.permutations,
            plot_samples=self.plot_samples,
        )


def main(argv: list[str]) -> int:
    """`hyla analyze RUN [RUN ...] [--out DIR] [--split S ...] [--samples N] ...`"""
    args = parse_options(AnalyzeOptions, argv, "hyla analyze")
    check_models(args.runs, args.out)  # here, not in tyro: its error box would wrap a long path
    labels = model_labels(args.runs)
    roots = [
        args.out / label if args.out else default_output(run, label, "analysis")
        for run, label in zip(args.runs, labels)
    ]
    claim_output_folder(args.out or roots[0], args.runs, args.overwrite)  # several models need --out
    print(first_line(args, roots), file=sys.stderr, flush=True)
    from hyla.analysis.latent_report import write_report
    from hyla.analysis.pipeline import analyze_run

    analyses = []
    for run, root in zip(args.runs, roots):
        results = analyze_run(
            run,
            root,
            args.split or None,
            args.samples,
            device=args.device,
            batch_size=args.batch_size,
            tsne=args.tsne,
            plot_samples=args.plot_samples,
            num_permutations=args.permutations,
            seed=args.seed,
            probe_feature=args.feature,
        )
        print(f"wrote {Path(results['out_dir']) / 'report.md'} ({len(results['figures'])} figures)")
        analyses.append(results)
    record_inputs(args.out or roots[0], args.runs)
    if args.out:
        print(write_report(analyses, args.out / "latent_summary"))
        print(f"wrote {args.out / 'latent_summary.md'}, .json and .png")
    return 0


def first_line(args: AnalyzeOptions, roots: list[Path]) -> str:
    """What runs and where it writes, e.g. `analyze: 1 model (2048 sequences per split, PCA
    embeddings; --tsne adds t-SNE) into analysis-m/`."""
    what = f"{len(roots)} model{'s' if len(roots) > 1 else ''} ({args.samples} sequences per split, "
    what += "PCA and t-SNE embeddings)" if args.tsne else "PCA embeddings; --tsne adds t-SNE)"
    where = f"{args.out}/<model>/ and {args.out}/latent_summary.*" if args.out else f"{roots[0]}/"
    return f"analyze: {what} into {where}"
