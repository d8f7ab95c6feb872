"""`hyla interventions RUN [RUN ...]`: its options and their parsing (the experiments:
hyla.analysis.interventions; the summary of several models: hyla.analysis.intervention_report)."""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path
from typing import Annotated

from tyro.conf import Positional, arg

from hyla.cli.folders import check_models, claim_output_folder, default_output, model_labels, record_inputs
from hyla.cli.options import check_positive, parse_options
from hyla.utils import ConfigError, portable_path


@dataclass
class InterventionsOptions:
    """Latent-code interventions on trained models: patch a query's codes with another task's, score
    the transfer (0 = unpatched, 1 = B's own prediction) beside controls and references."""

    runs: Positional[Annotated[tuple[Path, ...], arg(metavar="RUN [RUN ...]", help_behavior_hint="(required)")]]
    """run folders (`hyla train`) or exported models (`hyla export`), fuzzy logic or SRAVEN; several
    (e.g. the training seeds of each mixer) are summarized per mixer: mean ± s.e. over models, and the
    median of all their queries with a bootstrap 95% interval"""
    out: Annotated[
        Path | None, arg(help_behavior_hint="(default: RUN/interventions; ./interventions-NAME for an exported model)")
    ] = None
    """output folder, needed with several models; file names carry --tasks, --samples and --seed"""
    tasks: int = 16
    """task pairs per split (fuzzy logic); SRAVEN: tasks x samples grids per split"""
    samples: int = 32
    """sequences per task pair"""
    seed: int = 0
    """seed of the task pairs, the controls and the bootstrap intervals"""
    batch_size: int = 512
    device: str = "cpu"
    """cpu | cuda | cuda:N | auto"""
    overwrite: bool = False
    """write into an output folder that holds the outputs of another model (its inputs.json names it),
    first moving those aside to FOLDER.replaced-N"""

    def __post_init__(self):
        check_positive(tasks=self.tasks, samples=self.samples, batch_size=self.batch_size)
        if self.seed < 0:
            raise ConfigError(f"--seed={self.seed} must be >= 0")


def main(argv: list[str]) -> int:
    """`hyla interventions RUN [RUN ...] [--out DIR] [--tasks N] [--samples M] [--seed S]`"""
    args = parse_options(InterventionsOptions, argv, "hyla interventions")
    check_models(args.runs, args.out)  # here, not in tyro: its error box would wrap a long path
    out = args.out or default_output(args.runs[0], model_labels(args.runs)[0], "interventions")
    claim_output_folder(out, args.runs, args.overwrite)
    stem = out / f"interventions_tasks{args.tasks}_samples{args.samples}_seed{args.seed}"
    print(
        f"interventions: {len(args.runs)} model(s), {args.tasks} task pairs x {args.samples} sequences per split, "
        f"seed {args.seed}, on {args.device}; writes {stem}.json and .png",
        file=sys.stderr,
        flush=True,
    )
    # torch and the analysis load after the first line (hyla.analysis imports scikit-learn)
    import torch

    from hyla.analysis.collect import FUZZY_LOGIC, SRAVEN
    from hyla.analysis.intervention_report import write_report
    from hyla.analysis.interventions import interventions
    from hyla.train import load_run_at_step  # train depends on the model; analysis only needs it here
    from hyla.train.progress import Stages

    device = ("cuda" if torch.cuda.is_available() else "cpu") if args.device == "auto" else args.device

    with Stages(True, prefix="interventions") as stage:
        stage(f"loading {len(args.runs)} model(s)")
        loaded = [load_run_at_step(path, task=(FUZZY_LOGIC, SRAVEN)) for path in args.runs]  # a bad one fails first
        record_inputs(out, args.runs)
        per_model = []
        for i, (path, label, (cfg, model, task, step, source)) in enumerate(
            zip(args.runs, model_labels(args.runs), loaded)
        ):
            about = f"{label} ({cfg.task}, {cfg.model.mixer}, seed {cfg.seed})"
            stage(f"model {i + 1}/{len(loaded)}: {about}", of=(i, len(loaded)))
            metadata = {
                "label": label,
                "path": portable_path(path),
                "source": source,
                "task": cfg.task,
                "mixer": cfg.model.mixer,
                "seed": cfg.seed,
                "checkpoint_step": step,
            }
            options = (args.tasks, args.samples, args.seed, args.batch_size)
            per_model.append(interventions(model.to(device), task, *options, stage=stage, metadata=metadata))
        stage("the summary over models (bootstrap intervals), tables and figure")
        table = write_report(per_model, stem)
    print(table)
    print(f"wrote {stem.with_suffix('.json')} and {stem.with_suffix('.png')}")
    return 0
