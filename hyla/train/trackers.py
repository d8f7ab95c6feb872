"""Experiment trackers beside metrics.jsonl and TensorBoard: Weights & Biases (`--log.wandb PROJECT`).

A tracker receives every record the run folder's MetricsLog writes (`log(step, split, metrics)`)
and is closed with it. `WandbLogger` logs the numeric metrics under the same `split/metric` names
as TensorBoard, with the resolved run config attached; a resumed run continues the same W&B run
(its id is kept in `<run>/wandb_run_id`). `WANDB_MODE=offline` logs to `<run>/wandb/` only
(`wandb sync` uploads it later). Needs the wandb package: pip install 'hyla[wandb]'.
"""

from __future__ import annotations

import uuid
from typing import Protocol

from hyla.train.configs import ConfigError, ExperimentConfig, config_to_dict


class Tracker(Protocol):
    def log(self, step: int, split: str, metrics: dict) -> None: ...

    def close(self) -> None: ...


def scalar_metrics(split: str, metrics: dict) -> dict[str, float]:
    """{"split/name": value} for the numeric metrics (what TensorBoard gets too)."""
    return {f"{split}/{key}": value for key, value in metrics.items() if isinstance(value, (int, float))}


class WandbLogger:
    """Logs to a Weights & Biases run named after the run folder, in project `project`."""

    def __init__(self, run_path, cfg: ExperimentConfig, project: str):
        import wandb

        id_file = run_path / "wandb_run_id"
        run_id = id_file.read_text().strip() if id_file.exists() else uuid.uuid4().hex[:12]
        run_path.mkdir(parents=True, exist_ok=True)
        id_file.write_text(run_id + "\n")
        self.run = wandb.init(
            project=project,
            name=run_path.name,
            id=run_id,
            resume="allow",
            dir=str(run_path),
            config=config_to_dict(cfg),
        )

    def log(self, step: int, split: str, metrics: dict) -> None:
        scalars = scalar_metrics(split, metrics)
        if scalars:
            self.run.log(scalars, step=step)

    def close(self) -> None:
        self.run.finish()


def require_wandb() -> None:
    try:
        import wandb  # noqa: F401
    except ImportError:
        raise ConfigError(
            "--log.wandb needs the wandb package: pip install wandb (or pip install 'hyla[wandb]'); "
            "metrics.jsonl is always written"
        ) from None


def open_trackers(cfg: ExperimentConfig, run_path) -> list[Tracker]:
    """The trackers the config asks for (run on the main rank only)."""
    if not cfg.log.wandb:
        return []
    require_wandb()
    return [WandbLogger(run_path, cfg, cfg.log.wandb)]
