"""The run folder: resolved config, environment, metrics (JSON lines), summary and checkpoints.

    <run>/config.json            the resolved ExperimentConfig
    <run>/env.json               torch version, CPU, threads, device, git commit of the session
                                 training now (or last); under "sessions", those of every session
    <run>/metrics.jsonl          one {"step", "split", ...metrics} object per line
    <run>/summary.json           final metrics per split, final training loss, speed, status
    <run>/checkpoints/latest.pt  model, optimizer, scheduler, step, loop progress, config (tensors and
    <run>/checkpoints/previous.pt   plain data only) and the sha256 of them; the one before, kept as a fallback

Every file is written atomically. Opening a run never executes anything from it: JSON files are
data, and checkpoints load with `torch.load(weights_only=True)` and are checked against their sha256
(see `hyla.train.checkpoint`).
"""

from __future__ import annotations

import json
import os
import platform
import subprocess
import time
from dataclasses import replace
from pathlib import Path
from typing import Any

import torch

from hyla.train.configs import ExperimentConfig, config_from_dict, config_to_dict, upgrade_config
from hyla.train.distributed import DistContext, barrier
from hyla.train.progress import say
from hyla.utils import dumps, read_jsonl, write_json, write_text_atomic


class RunDir:
    def __init__(self, path: str | Path):
        self.path = Path(path)

    config_file = property(lambda self: self.path / "config.json")
    env_file = property(lambda self: self.path / "env.json")
    metrics_file = property(lambda self: self.path / "metrics.jsonl")
    summary_file = property(lambda self: self.path / "summary.json")
    checkpoint_file = property(lambda self: self.path / "checkpoints" / "latest.pt")
    previous_checkpoint_file = property(lambda self: self.path / "checkpoints" / "previous.pt")

    @staticmethod
    def for_config(cfg: ExperimentConfig) -> RunDir:
        name = cfg.name or default_run_name(cfg)
        return RunDir(Path(cfg.out_dir) / name)

    def exists(self) -> bool:
        return self.path.exists() and any(self.path.iterdir())

    def has_checkpoint(self) -> bool:
        """Whether latest.pt or previous.pt exists (a crash between `checkpoint.save`'s renames leaves only
        previous.pt)."""
        return self.checkpoint_file.exists() or self.previous_checkpoint_file.exists()

    def check(self) -> RunDir:
        """This run folder, or RunError when `path` is not one."""
        if not self.path.is_dir():
            raise RunError(f"{self.path} does not exist or is not a folder")
        if not self.config_file.exists():
            raise RunError(f"{self.path} is not a run folder (no config.json)")
        return self

    def read_config(self) -> ExperimentConfig:
        self.check()
        try:
            return config_from_dict(self.read_config_dict())
        except (ValueError, TypeError) as e:  # JSONDecodeError and ConfigError are ValueErrors
            raise RunError(f"{self.config_file} is damaged or from another version: {e}") from None

    def read_config_dict(self) -> dict:
        """config.json as a dict in the current layout, whichever version wrote it (`upgrade_config`)."""
        return upgrade_config(json.loads(self.config_file.read_text()))

    def load_checkpoint(self, map_location="cpu") -> tuple[dict, Path, str]:
        """(state, file, note) of the latest readable checkpoint; see `checkpoint.load_latest`."""
        from hyla.train import checkpoint

        if not self.has_checkpoint():
            raise RunError(f"{self.path} has no checkpoint yet")
        return checkpoint.load_latest(self.checkpoint_file, self.previous_checkpoint_file, map_location)

    def save_checkpoint(self, state: dict) -> None:
        from hyla.train import checkpoint

        checkpoint.save(state, self.checkpoint_file, self.previous_checkpoint_file)

    def write_config(self, cfg: ExperimentConfig) -> None:
        write_json(self.config_file, config_to_dict(cfg))

    def write_env(self, env: dict[str, Any], from_step: int, same_session: bool = False) -> None:
        """env.json: `env` (`environment()`) of the session that trains from step `from_step`, and
        under "sessions" the environment of every session of the run in order, this one last, so
        that a resumed run keeps each machine and commit it trained on. A session that starts at
        step 0 starts the list; `same_session`: `env` replaces this session's entry (its numerics
        known after the first step)."""
        session = {**env, "from_step": from_step}
        earlier = self.read_sessions()[: -1 if same_session else None] if from_step else []
        write_json(self.env_file, {**session, "sessions": [*earlier, session]})

    def read_sessions(self) -> list[dict]:
        """The environments of the run's sessions (env.json), earliest first; an env.json without
        a "sessions" list counts as one session, an unreadable one as none (its history is
        lost, the training goes on)."""
        try:
            env = json.loads(self.env_file.read_text())
        except (OSError, ValueError):
            return []
        return env.get("sessions") or [env]

    def open_log(self, cfg: ExperimentConfig, env: dict[str, Any], step: int, rows: int, trackers: list) -> MetricsLog:
        """Begin a session of the run that trains from update `step`: write config.json and env.json
        (`env`: the session's environment), keep the first `rows` records of metrics.jsonl (those of
        the checkpoint a resumed run continues from), and open it for the session's records, with
        TensorBoard when `cfg` asks for it and `trackers`."""
        self.path.mkdir(parents=True, exist_ok=True)
        self.write_config(cfg)
        self.write_env(env, step)
        if cfg.resume:
            self.truncate_metrics(rows)
        return MetricsLog(self, rows, cfg.log.tensorboard, trackers)

    def read_summary(self) -> dict:
        return json.loads(self.summary_file.read_text()) if self.summary_file.exists() else {}

    def write_summary(self, summary: dict) -> None:
        write_json(self.summary_file, summary)

    def read_metrics(self) -> list[dict]:
        """The records of metrics.jsonl; a torn last line (a crash mid-write) is dropped with a warning."""
        try:
            return read_jsonl(self.metrics_file)
        except ValueError as e:
            raise RunError(str(e)) from None

    def truncate_metrics(self, rows: int) -> None:
        """Keep the first `rows` records: those written before the checkpoint a run resumes from."""
        kept = self.read_metrics()[:rows]
        write_text_atomic(self.metrics_file, "".join(dumps(r) + "\n" for r in kept))


class RunError(RuntimeError):
    """A run folder that cannot be used as asked (missing, not a run, wrong task, damaged)."""


class MetricsLog:
    """Appends records to metrics.jsonl (flushed per record) and optionally to TensorBoard and to
    `trackers` (hyla.train.trackers: Weights & Biases), which it closes with itself; `rows` counts
    the records in the file."""

    def __init__(self, run: RunDir, rows: int, tensorboard: bool = False, trackers: list | tuple = ()):
        run.path.mkdir(parents=True, exist_ok=True)
        self.rows = rows
        self.trackers = list(trackers)
        self.file = open(run.metrics_file, "a", encoding="utf-8")
        self.tensorboard = None
        if tensorboard:
            from torch.utils.tensorboard import SummaryWriter  # checked importable by `require_tensorboard`

            self.tensorboard = SummaryWriter(str(run.path / "tensorboard"))

    def write(self, step: int, split: str, metrics: dict[str, float]) -> None:
        self.file.write(dumps({"step": step, "split": split, **metrics}) + "\n")
        self.file.flush()
        self.rows += 1
        if self.tensorboard is not None:
            for key, value in metrics.items():
                if isinstance(value, (int, float)):
                    self.tensorboard.add_scalar(f"{split}/{key}", value, step)
        for tracker in self.trackers:
            tracker.log(step, split, metrics)

    def close(self) -> None:
        self.file.close()
        if self.tensorboard is not None:
            self.tensorboard.close()
        for tracker in self.trackers:
            tracker.close()


def open_run_dir(cfg: ExperimentConfig, ctx: DistContext) -> tuple[ExperimentConfig, RunDir, dict | None]:
    """The run folder of `cfg`: (the config with its run name, the folder, the checkpoint to continue
    from). Every rank names the run as rank 0 does (its timestamped default); the checkpoint is
    None for a new run, or a resumed run that has none yet. A new run's folder must not exist
    (FileExistsError); a damaged latest checkpoint warns and the previous one is taken."""
    if cfg.log.tensorboard:
        require_tensorboard()
    if not cfg.name:
        names = [RunDir.for_config(cfg).path.name]
        if ctx.distributed:
            torch.distributed.broadcast_object_list(names, src=0)
        cfg = replace(cfg, name=names[0])
    run, state = RunDir.for_config(cfg), None
    if cfg.resume and run.has_checkpoint():
        state, _, note = run.load_checkpoint()
        if note and ctx.is_main:
            say(f"warning: {note}")
    elif not cfg.resume and run.exists():
        raise FileExistsError(
            f"run folder {run.path} already exists; pass --resume to continue it "
            "(or `hyla resume RUN`), or choose another --name"
        )
    barrier(ctx)  # nobody creates the folder before every rank has checked it
    return cfg, run, state


def require_tensorboard() -> None:
    from hyla.train.configs import ConfigError

    try:
        import tensorboard  # noqa: F401
    except ImportError:
        raise ConfigError(
            "--log.tensorboard needs the tensorboard package: pip install tensorboard "
            "(or pip install 'hyla[tensorboard]'); metrics.jsonl is always written"
        ) from None


def default_run_name(cfg: ExperimentConfig) -> str:
    stamp = time.strftime("%Y%m%d-%H%M%S")
    return f"{cfg.preset or cfg.task}-{cfg.model.mixer}-s{cfg.seed}-{stamp}"


def environment(numerics: dict[str, Any]) -> dict[str, Any]:
    """The machine and software a session ran on, with the settings that change floating-point
    results (`numerics`: threads, device, compile mode, precision, deterministic mode, world size,
    torch version)."""
    env = {
        "time": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
        "python": platform.python_version(),
        "torch": torch.__version__,
        "platform": platform.platform(),
        "cpu": cpu_name(),
        "cpu_count": os.cpu_count(),
        "git_commit": git_commit(),
        "numerics": numerics,
    }
    device = torch.device(numerics["device"])
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
        commit = subprocess.run(
            ["git", "rev-parse", "HEAD"], cwd=root, capture_output=True, text=True, timeout=10
        ).stdout.strip()
        dirty = subprocess.run(
            ["git", "status", "--porcelain", "--untracked-files=no"],
            cwd=root,
            capture_output=True,
            text=True,
            timeout=10,
        ).stdout.strip()
    except (OSError, subprocess.SubprocessError):
        return None
    return (commit + ("-dirty" if dirty else "")) or None
