"""Training: the loop, optimizer and schedule, checkpoints, run folders, data parallelism.

train(cfg) -> run folder                 train or resume a run
train_packed([cfg, ...]) -> run folders  train runs of one architecture together (one batched model)
load_run(run) -> (cfg, model, task)      a checkpointed run, model on CPU in eval mode
evaluate(model, task, split, num_samples, batch_size) -> {metric: mean}
"""

from __future__ import annotations

import sys
from pathlib import Path

from hyla.train.checkpoint import CheckpointError
from hyla.train.evaluate import evaluate
from hyla.train.loop import NonFiniteLossError, Trainer, build_model, train
from hyla.train.packed import pack_key, train_packed
from hyla.train.run_dir import RunDir, RunError


def load_run(run_dir: str | Path, task: str | tuple[str, ...] | None = None):
    """(config, model, task) of a run folder: see `load_run_at_step`."""
    return load_run_at_step(run_dir, task)[:3]


def load_run_at_step(run_dir: str | Path, task: str | tuple[str, ...] | None = None):
    """(config, model, task, step) of a run folder: the model on the CPU, in eval mode, with the
    weights of its latest readable checkpoint (a one-line warning on stderr, naming the step, when it
    falls back to the previous one). `task`: the task(s) the caller can use; RunError for a run of
    another task."""
    from hyla.train.configs import build_task

    run = RunDir(run_dir)
    cfg = run.read_config()
    tasks = (task,) if isinstance(task, str) else task
    if tasks is not None and cfg.task not in tasks:
        raise RunError(f"{run.path} is a {cfg.task} run; this command needs a {' or '.join(tasks)} run")
    state, _, note = run.load_checkpoint()
    step = state["progress"]["step"]
    if note:
        print(f"warning: {note}, whose weights are older: of step {step}{_reached(run, step)}", file=sys.stderr)
    model = build_model(cfg)
    model.load_state_dict(state["model"])
    return cfg, model.eval(), build_task(cfg), step


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
