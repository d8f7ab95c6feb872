"""Training: the loop, optimizer and schedule, checkpoints, run folders, data parallelism.

train(cfg) -> run folder                 train or resume a run
train_packed([cfg, ...]) -> run folders  train runs of one architecture together (one batched model)
load_run(run) -> (cfg, model, task)      a checkpointed run (or an exported model), model on CPU in eval mode
evaluate(model, task, split, num_samples, batch_size) -> {metric: mean}
"""

from __future__ import annotations

import sys
from pathlib import Path

from hyla.nn.pretrained import is_export
from hyla.nn.transformer import PRETRAINED_WEIGHTS, sha256_of
from hyla.train.checkpoint import CheckpointError
from hyla.train.evaluate import evaluate
from hyla.train.loop import train
from hyla.train.packed import pack_key, train_packed
from hyla.train.run_dir import RunDir, RunError
from hyla.train.session import NonFiniteLossError
from hyla.train.step import Trainer, build_model
from hyla.utils import path_from_cwd


def load_run(run_dir: str | Path, task: str | tuple[str, ...] | None = None):
    """(config, model, task) of a run folder: see `load_run_at_step`."""
    return load_run_at_step(run_dir, task)[:3]


def load_run_at_step(run_dir: str | Path, task: str | tuple[str, ...] | None = None):
    """(config, model, task, step, source) of a run folder: the model on the CPU, in eval mode, with the
    weights of its latest readable checkpoint (a one-line warning on stderr, naming the step, when it
    falls back to the previous one). An exported model (`hyla export`: a folder with manifest.json)
    serves as its run: the config of the run's record, the exported weights (checked against their
    sha256) and the exported step. `source`: what the weights were read from, for the outputs to
    record: {"path": the folder's full path, "file": the file in it, "sha256": the file's}. `task`:
    the task(s) the caller can use; RunError for a run of another task."""
    from hyla.train.configs import build_task

    if is_export(run_dir):
        cfg, model, step = _load_export(Path(run_dir))
        _check_task(run_dir, cfg, task)
        return cfg, model, build_task(cfg), step, _source(Path(run_dir) / PRETRAINED_WEIGHTS)
    run = RunDir(run_dir)
    cfg = run.read_config()
    _check_task(run.path, cfg, task)
    state, file, note = run.load_checkpoint()
    step = state["progress"]["step"]
    if note:
        print(f"warning: {note}, whose weights are older: of step {step}{_reached(run, step)}", file=sys.stderr)
    model = build_model(cfg)
    model.load_state_dict(state["model"])
    return cfg, model.eval(), build_task(cfg), step, _source(file, run.path)


def _source(file: Path, folder: Path | None = None) -> dict:
    """{"path", "file", "sha256"} of a model's weights `file` in `folder` (default: the file's own); the
    folder's path is relative to the working directory when it lies below it (`path_from_cwd`)."""
    folder = (folder or file.parent).resolve()
    return {"path": path_from_cwd(folder), "file": str(file.resolve().relative_to(folder)), "sha256": sha256_of(file)}


def _check_task(path, cfg, task: str | tuple[str, ...] | None) -> None:
    tasks = (task,) if isinstance(task, str) else task
    if tasks is not None and cfg.task not in tasks:
        raise RunError(f"{path} is a {cfg.task} run; this command needs a {' or '.join(tasks)} run")


def _load_export(folder: Path):
    """(config, model, step) of an exported model; RunError for a damaged or changed one."""
    from hyla.nn.pretrained import load_model
    from hyla.train.configs import config_from_dict

    try:
        model, manifest = load_model(folder)
        cfg, step = config_from_dict(manifest["record"]["config"]), manifest["step"]
    except (ValueError, KeyError, TypeError, OSError) as e:  # ConfigError is a ValueError
        raise RunError(f"{folder} is not a usable hyla export: {e}") from None
    return cfg, model, step


def _reached(run: RunDir, step: int) -> str:
    """ ", the run reached step N" when its summary says it got further than `step`."""
    try:
        reached = run.read_summary().get("step")
    except ValueError:  # a damaged summary
        return ""
    return f", the run reached step {reached}" if isinstance(reached, int) and reached > step else ""


__all__ = [
    "train",
    "train_packed",
    "pack_key",
    "load_run",
    "evaluate",
    "NonFiniteLossError",
    "Trainer",
    "RunDir",
    "RunError",
    "CheckpointError",
]
