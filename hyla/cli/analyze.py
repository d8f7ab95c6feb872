"""`hyla analyze RUN`: its options and their parsing (the analysis itself: hyla.analysis.pipeline)."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Annotated

from tyro.conf import Positional, UseAppendAction, arg

from hyla.analysis.pipeline import analyze_run
from hyla.train.configs import check_positive, parse_options


@dataclass
class AnalyzeOptions:
    """Latent-code analysis of a trained run (probes, embeddings, topographic similarity, report) into
    RUN/analysis/step<S>[-<options>]/: one folder per checkpoint step and set of non-default options."""

    run: Positional[Path]
    """run folder (written by `hyla train`)"""
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
        check_positive(
            samples=self.samples,
            batch_size=self.batch_size,
            permutations=self.permutations,
            plot_samples=self.plot_samples,
        )


def main(argv: list[str]) -> int:
    """`hyla analyze RUN [--split S ...] [--samples N] ...`"""
    args = parse_options(AnalyzeOptions, argv, "hyla analyze")
    results = analyze_run(
        args.run,
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
    return 0
