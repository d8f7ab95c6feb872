"""`hyla analyze RUN [RUN ...]`: its options and their parsing (the analysis itself:
hyla.analysis.pipeline; the summary of several models: hyla.analysis.latent_report)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from tyro.conf import Positional, UseAppendAction, arg

from hyla.analysis.latent_report import write_report
from hyla.analysis.pipeline import analyze_run
from hyla.cli.interventions import check_models, model_labels
from hyla.cli.options import check_positive, parse_options


@dataclass
class AnalyzeOptions:
    """Latent-code analysis of trained models (probes, embeddings, topographic similarity, report) into
    RUN/analysis/step<S>[-<options>]/ (one folder per checkpoint step and set of non-default options),
    or with --out into OUT/<model>/step<S>[-<options>]/ and a summary of the models per mixer."""

    runs: Positional[Annotated[tuple[Path, ...], arg(metavar="RUN [RUN ...]", help_behavior_hint="(required)")]]
    """run folders (`hyla train`) or exported models (`hyla export`), fuzzy logic or SRAVEN; several
    (e.g. the training seeds of each mixer) are summarized as mean ± s.e. over models per mixer"""
    out: Annotated[Path | None, arg(help_behavior_hint="(default: RUN/analysis)")] = None
    """output folder, needed with several models: OUT/latent_summary.{md,json,png} and each model's analysis"""
    split: UseAppendAction[list[str]] = field(default_factory=list)
    """split to analyze (repeatable; default: the task's analysis splits)"""
    samples: int = 4096
    """sequences per split"""
    batch_size: int = 512
    permutations: int = 1000
    """permutation-test size"""
    plot_samples: int = 1500
    """points per embedding plot"""
    tsne: bool = True
    """t-SNE embeddings besides PCA (--no-tsne: PCA only; t-SNE is the slow part)"""
    seed: int = 0
    device: str = "cpu"
    """cpu | cuda | cuda:N | auto (where the codes are collected)"""
    feature: Annotated[int | None, arg(help_behavior_hint="(default: all)")] = None
    """SRAVEN: probe only this underlying feature (the paper: the last)"""

    def __post_init__(self):
        check_models(self.runs, self.out)
        check_positive(
            samples=self.samples,
            batch_size=self.batch_size,
            permutations=self.permutations,
            plot_samples=self.plot_samples,
        )


def main(argv: list[str]) -> int:
    """`hyla analyze RUN [RUN ...] [--out DIR] [--split S ...] [--samples N] ...`"""
    args = parse_options(AnalyzeOptions, argv, "hyla analyze")
    analyses = []
    for run, label in zip(args.runs, model_labels(args.runs)):
        results = analyze_run(
            run,
            args.split or None,
            args.samples,
            device=args.device,
            out_root=args.out and args.out / label,
            batch_size=args.batch_size,
            tsne=args.tsne,
            plot_samples=args.plot_samples,
            num_permutations=args.permutations,
            seed=args.seed,
            probe_feature=args.feature,
        )
        print(f"wrote {Path(results['out_dir']) / 'report.md'} ({len(results['figures'])} figures)")
        analyses.append(results)
    if args.out:
        print(write_report(analyses, args.out / "latent_summary"))
        print(f"wrote {args.out / 'latent_summary.md'}, .json and .png")
    return 0
