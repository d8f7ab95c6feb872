"""Exported models: a trained model and the task it learned, from files that load without running code.

An export (`hyla export`, or a sweep's `results:` folder) holds model.safetensors and config.json
(`Transformer.save_pretrained`) beside manifest.json: their sha256, the step, the commit and the
run's record (`record`: its config, environment and summary; hyla.runs.export writes it).
"""

from __future__ import annotations

import json
from pathlib import Path

from hyla.nn.transformer import PRETRAINED_CONFIG, PRETRAINED_MANIFEST, ModelConfig, Transformer
from hyla.tasks import Task, task_from_config


def is_export(folder: str | Path) -> bool:
    """Whether `folder` holds an export with its manifest."""
    return (Path(folder) / PRETRAINED_MANIFEST).is_file()


def load_model(folder: str | Path) -> tuple[Transformer, dict]:
    """(model, manifest) of an export: the model on the CPU, in eval mode, both files checked
    against their sha256. ValueError for a damaged or changed export."""
    folder = Path(folder)
    try:
        manifest = json.loads((folder / PRETRAINED_MANIFEST).read_text())
        recorded = ModelConfig(**manifest["record"]["config"]["model"])
    except (ValueError, KeyError, TypeError) as e:
        raise ValueError(f"{folder / PRETRAINED_MANIFEST} is not a readable hyla manifest ({e})") from None
    model = Transformer.from_pretrained(folder)
    if model.cfg != recorded:
        raise ValueError(f"{folder}: {PRETRAINED_CONFIG} and the model config in {PRETRAINED_MANIFEST} differ")
    return model, manifest


def load_export(folder: str | Path) -> tuple[Transformer, Task]:
    """(model, task) of an export: the model as `load_model` gives it, and the task of the run's
    config, with the run's seed (so `hyla.tasks.evaluate` with the run's sample count and batch
    size sees the run's evaluation samples)."""
    model, manifest = load_model(folder)
    return model, task_from_config(manifest["record"]["config"])
