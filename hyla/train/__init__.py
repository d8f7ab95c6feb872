"""Training: the loop, optimizer and schedule, checkpoints, run folders, data parallelism.

    train(cfg) -> run folder                 train or resume a run
    load_run(run) -> (cfg, model, task)      a finished (or checkpointed) run, model on CPU in eval mode
    evaluate(model, task, split, num_samples, batch_size) -> {metric: mean}
"""

from __future__ import annotations

from pathlib import Path

from hyla.train.evaluate import evaluate
from hyla.train.loop import NonFiniteLossError, Trainer, build_model, train
from hyla.train.run_dir import RunDir


def load_run(run_dir: str | Path):
    """(config, model, task) of a run folder: the model on the CPU, in eval mode, with the weights
    of `checkpoints/latest.pt`."""
    from hyla.configs import build_task
    from hyla.train import checkpoint

    run = RunDir(run_dir)
    cfg = run.read_config()
    if not run.checkpoint_file.exists():
        raise FileNotFoundError(f"{run.path} has no checkpoint yet ({run.checkpoint_file})")
    task = build_task(cfg)
    model = build_model(cfg)
    model.load_state_dict(checkpoint.load(run.checkpoint_file)["model"])
    return cfg, model.eval(), task


__all__ = ["train", "load_run", "evaluate", "NonFiniteLossError", "Trainer", "RunDir"]
