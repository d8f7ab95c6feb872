"""The model folders that `hyla analyze` and `hyla interventions` read, without torch: the checks made
before anything heavy loads, a short name per model, and where the outputs go.

A model is a run folder (`hyla train`: config.json and checkpoints/) or an exported model (`hyla
export`: manifest.json beside the weights). Outputs go into a run folder (RUN/analysis/, as its
checkpoints do), never into an exported model: that may be a folder of the repository (the shipped
models), which must stay as committed. An exported model's outputs go to `<command>-<model name>/`
in the working folder, or under --out.

An output folder outside its model (and the folder of `hyla eval --out` or `hyla results`) names the
paths of what it was written from in inputs.json, relative to itself (so that a committed output holds no
path of the machine that wrote it, and a moved repository still matches); a command asked to write there from other
inputs, or into a folder of files that name no inputs, refuses, naming the folder, unless given --overwrite, which
first moves the earlier outputs aside to `<folder>.replaced-<n>`: two models whose folders share a name never write
into one output folder unnoticed, and the new outputs never lie beside the earlier ones.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path

from hyla.utils import ConfigError, write_json

EXPORT_MANIFEST = "manifest.json"  # what marks an exported model (hyla.nn.transformer.PRETRAINED_MANIFEST)
RUN_CONFIG = "config.json"  # what marks a run folder (hyla.train.run_dir.RunDir.config_file)
INPUTS_RECORD = "inputs.json"  # the paths an output folder was written from, relative to it


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


def claim_output_folder(folder: Path, inputs: Sequence[Path], overwrite: bool = False) -> None:
    """Make `folder` ready for the outputs of `inputs`. Nothing to do when it does not exist, is empty,
    lies inside the one input, or was written from the same inputs (its inputs.json names them), or is
    itself an input that names none (`hyla results A T --out T`: the table T grows from its own records).
    Otherwise it holds the outputs of other inputs, or of inputs it does not name (written before hyla
    recorded them, or by hand): ConfigError, or with `overwrite` the folder moved aside (`move_aside`).
    Reads only, unless it moves (`record_inputs` writes, once the inputs are read)."""
    folder = Path(folder)
    record = _inputs_record(folder, inputs)
    if record is None or not folder.is_dir() or not any(folder.iterdir()):
        return
    wanted = _full_paths(inputs)
    if not record.exists():
        if str(folder.resolve()) in wanted:
            return
        problem = f"{folder} holds outputs whose inputs it does not name (no {INPUTS_RECORD})"
    elif (earlier := _recorded_inputs(record)) == wanted:
        return
    elif earlier is None:
        problem = f"{record} is damaged"
    else:
        problem = f"{folder} holds outputs of {', '.join(earlier)}, not of {', '.join(wanted)}"
    if not overwrite:
        raise ConfigError(f"{problem}: choose another --out, or pass --overwrite to move them aside and write there")
    move_aside(folder, inputs)


def move_aside(folder: Path, inputs: Sequence[Path]) -> None:
    """Rename `folder` to the first free `<folder>.replaced-<n>` (n = 1, 2, ...) and say so; refused
    (ConfigError) for a model folder and for a folder that holds the working folder or an input."""
    full = folder.resolve()
    held = [str(p) for p in (Path.cwd(), *map(Path, inputs)) if p.resolve().is_relative_to(full)]
    if held or is_export(folder) or (folder / RUN_CONFIG).is_file():
        what = f"it holds {held[0]}" if held else "it is a model"
        raise ConfigError(f"--overwrite cannot move {folder} aside ({what}): choose another --out")
    n = 1
    while (aside := folder.with_name(f"{folder.name}.replaced-{n}")).exists():
        n += 1
    folder.rename(aside)
    print(f"moved the earlier outputs in {folder} to {aside}", file=sys.stderr, flush=True)


def record_inputs(folder: Path, inputs: Sequence[Path], read: dict | None = None) -> None:
    """Name the paths of `inputs`, relative to `folder`, in `folder`/inputs.json (and `read`, what was
    read from them, e.g. its sha256), unless `folder` lies inside the one input (RUN/analysis: that
    input's own)."""
    record = _inputs_record(folder, inputs)
    if record is not None:
        relative = sorted(os.path.relpath(path, Path(folder).resolve()) for path in _full_paths(inputs))
        write_json(record, {"inputs": relative, **({"read": read} if read else {})})


def _inputs_record(folder: Path, inputs: Sequence[Path]) -> Path | None:
    """`folder`/inputs.json, or None for a folder inside the one input."""
    paths = _full_paths(inputs)
    inside = len(paths) == 1 and Path(folder).resolve().is_relative_to(paths[0])
    return None if inside else Path(folder) / INPUTS_RECORD


def _recorded_inputs(record: Path) -> list[str] | None:
    """The full paths `record` (an inputs.json) names; None when it is damaged."""
    try:
        return sorted(str((record.parent / path).resolve()) for path in json.loads(record.read_text())["inputs"])
    except (ValueError, KeyError, TypeError, OSError):
        return None


def _full_paths(inputs: Sequence[Path]) -> list[str]:
    return sorted(str(Path(path).resolve()) for path in inputs)
