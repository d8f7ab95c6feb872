"""The run folder: resolved config, environment, metrics (JSON lines), summary and checkpoints.

    <run>/config.json            the resolved ExperimentConfig
    <run>/env.json               torch version, CPU, threads, device, git commit
    <run>/metrics.jsonl          one {"step", "split", ...metrics} object per line
    <run>/summary.json           final metrics per split, final training loss, speed, status
    <run>/checkpoints/latest.pt  model, optimizer, scheduler, step, RNG states
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from pathlib import Path
from typing import Any

import torch

from hyla.configs import ExperimentConfig, config_from_dict, config_to_dict
from hyla.jsonio import to_jsonable, write_json, write_text_atomic


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    config_file = property(lambda self: self.path / "config.json")
    env_file = property(lambda self: self.path / "env.json")
    metrics_file = property(lambda self: self.path / "metrics.jsonl")
    summary_file = property(lambda self: self.path / "summary.json")
    checkpoint_file = property(lambda self: self.path / "checkpoints" / "latest.pt")

    @staticmethod
    def for_config(cfg: ExperimentConfig) -> "RunDir":
        name = cfg.name or default_run_name(cfg)
        return RunDir(Path(cfg.out_dir) / name)

    def exists(self) -> bool:
        return self.path.exists() and any(self.path.iterdir())

    def read_config(self) -> ExperimentConfig:
        if not self.config_file.exists():
            raise FileNotFoundError(f"{self.path} is not a run folder (no config.json)")
        return config_from_dict(json.loads(self.config_file.read_text()))

    def write_config(self, cfg: ExperimentConfig) -> None:
        write_json(self.config_file, config_to_dict(cfg))

    def read_summary(self) -> dict:
        return json.loads(self.summary_file.read_text()) if self.summary_file.exists() else {}

    def write_summary(self, summary: dict) -> None:
        write_json(self.summary_file, summary)

    def read_metrics(self) -> list[dict]:
        if not self.metrics_file.exists():
            return []
        return [json.loads(line) for line in self.metrics_file.read_text().splitlines() if line.strip()]

    def truncate_metrics(self, last_step: int) -> None:
        """Drop records written after `last_step` (by a session that died before its next checkpoint)."""
        kept = [r for r in self.read_metrics() if r["step"] <= last_step]
        write_text_atomic(self.metrics_file, "".join(json.dumps(r) + "\n" for r in kept))


class MetricsLog:
    """Appends records to metrics.jsonl (flushed per record) and optionally to TensorBoard."""

    def __init__(self, run: RunDir, tensorboard: bool = False):
        run.path.mkdir(parents=True, exist_ok=True)
        self.file = open(run.metrics_file, "a", encoding="utf-8")
        self.tensorboard = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # checked importable by `require_tensorboard`

            self.tensorboard = SummaryWriter(str(run.path / "tensorboard"))

    def write(self, step: int, split: str, metrics: dict[str, float]) -> None:
        record = {"step": step, "split": split, **{k: to_jsonable(v) for k, v in metrics.items()}}
        self.file.write(json.dumps(record) + "\n")
        self.file.flush()
        if self.tensorboard is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)):
                    self.tensorboard.add_scalar(f"{split}/{key}", value, step)

    def close(self) -> None:
        self.file.close()
        if self.tensorboard is not None:
            self.tensorboard.close()


def require_tensorboard() -> None:
    from hyla.configs import ConfigError

    try:
        import tensorboard  # noqa: F401
    except ImportError:
        raise ConfigError("--train.tensorboard needs the tensorboard package: pip install tensorboard "
                           "(or pip install 'hyla[tensorboard]'); metrics.jsonl is always written") from None


def default_run_name(cfg: ExperimentConfig) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{cfg.preset or cfg.task}-{cfg.model.mixer}-s{cfg.seed}-{stamp}"


def environment(device: torch.device, world_size: int) -> dict[str, Any]:
    env = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "threads": torch.get_num_threads(),
        "device": str(device),
        "world_size": world_size,
        "git_commit": git_commit(),
    }
    if device.type == "cuda":
        env["gpu"] = torch.cuda.get_device_name(device)
        env["cuda"] = torch.version.cuda
    return env


def cpu_name() -> str:
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                return line.split(":", 1)[1].strip()
    except OSError:
        pass
    return platform.processor() or platform.machine()


def git_commit() -> str | None:
    """HEAD of the repository hyla is imported from, with "-dirty" if it has uncommitted changes."""
    root = Path(__file__).resolve().parents[2]
    try:
        commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True,
                                timeout=10).stdout.strip()
        dirty = subprocess.run(["git", "status", "--porcelain", "--untracked-files=no"], cwd=root,
                               capture_output=True, text=True, timeout=10).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (commit + ("-dirty" if dirty else "")) or None
