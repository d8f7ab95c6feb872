"""The model folders that `hyla analyze` and `hyla interventions` read, without torch: the checks made
before anything heavy loads, a short name per model, and where the outputs go.

A model is a run folder (`hyla train`: config.json and checkpoints/) or an exported model (`hyla
export`: manifest.json beside the weights). Outputs go into a run folder (RUN/analysis/, as its
checkpoints do), never into an exported model: that may be a folder of the repository (the shipped
models), which must stay as committed. An exported model's outputs go to `<command>-<model name>/`
in the working folder, or under --out.
"""

from __future__ import annotations

import os
from collections.abc import Sequence
from pathlib import Path

from hyla.utils import ConfigError

EXPORT_MANIFEST = "manifest.json"  # what marks an exported model (hyla.nn.transformer.PRETRAINED_MANIFEST)
RUN_CONFIG = "config.json"  # what marks a run folder (hyla.train.run_dir.RunDir.config_file)


def is_export(folder: Path) -> bool:
    return (Path(folder) / EXPORT_MANIFEST).is_file()


def check_model_folder(folder: Path) -> None:
    """ConfigError unless `folder` is a readable run folder or exported model."""
    folder = Path(folder)
    if not folder.is_dir():
        raise ConfigError(f"{folder} does not exist or is not a folder")
    if not os.access(folder, os.R_OK | os.X_OK):
        raise ConfigError(f"{folder} cannot be read (permissions)")
    if not (is_export(folder) or (folder / RUN_CONFIG).is_file()):
        raise ConfigError(
            f"{folder} is not a run folder (no {RUN_CONFIG}) nor an exported model (no {EXPORT_MANIFEST})"
        )
    marker = folder / (EXPORT_MANIFEST if is_export(folder) else RUN_CONFIG)
    if not os.access(marker, os.R_OK):
        raise ConfigError(f"{marker} cannot be read (permissions)")


def check_models(runs: Sequence[Path], out: Path | None) -> None:
    """One or more distinct, readable models; several need --out, where their summary is written."""
    if not runs:
        raise ConfigError("give a run folder or an exported model (or several)")
    for run in runs:
        check_model_folder(run)
    if len(runs) > 1 and out is None:
        raise ConfigError(f"--out is needed with {len(runs)} models (their summary is written there)")
    if len({path.resolve() for path in runs}) < len(runs):
        raise ConfigError("a model is named twice")


def model_labels(paths: Sequence[Path]) -> list[str]:
    """A short distinct name per model: its path below the models' common folder, '/' as '-'."""
    resolved = [Path(path).resolve() for path in paths]
    if len(resolved) == 1:
        return [resolved[0].name]
    parent = Path(os.path.commonpath(resolved))
    return [str(path.relative_to(parent)).replace(os.sep, "-") for path in resolved]


def default_output(model: Path, label: str, command: str) -> Path:
    """Where `command` ("analysis" or "interventions") writes for `model` without --out: RUN/<command>
    for a run folder, ./<command>-<label> in the working folder for an exported model."""
    return Path(f"{command}-{label}") if is_export(model) else Path(model) / command
