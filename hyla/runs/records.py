"""Run records: a compact, committable copy of a finished run, so that results outlive run folders.

A run folder holds checkpoints (megabytes) and lives on the machine that trained it. Its record is
the rest, in one JSON file of ~20 kB: the resolved config, the environment, the summary (exact), the
metrics (every evaluation, the training log thinned to at most `MAX_TRAIN_ROWS` rows; numbers to
`DIGITS` significant digits, plenty for a curve) and any cached latent-structure measurements.
`hyla results DIRS --out OUT` writes one per completed run it reads into
`OUT/records/<sweep folder>/<run name>.run.json`, and reads records wherever it reads run folders, so
a committed results folder can be regenerated, and extended with new runs, after the run folders
are gone:

    hyla results runs/table_a1_logic_50k_cpu experiments/results/table_a1_logic_50k_cpu \\
        --out experiments/results/table_a1_logic_50k_cpu

A run is known by `<sweep folder>/<run name>` (its folder's parent and name); where a run folder
and a record share that key, the folder is read. A sweep file's `results: OUT` has each of its runs
write its record there as it completes, and counts the runs recorded there as done
(`hyla.runs.sweep`).
"""

from __future__ import annotations

import json
from pathlib import Path

from hyla.utils import portable_path, write_json

SUFFIX = ".run.json"
MAX_TRAIN_ROWS = 100
"""training-log rows kept in a record (evenly spaced, the last included); evaluations are all kept"""
DIGITS = 6
"""significant digits of the numbers in a record's metrics rows"""
STRUCTURE_CACHE = "latent_structure-*.json"
"""the per-run latent-structure measurements `hyla results --latent-structure` caches in a run folder"""


def run_key(run_dir: str | Path) -> str:
    """`<sweep folder>/<run name>` of a run folder."""
    path = Path(run_dir).resolve()
    return f"{path.parent.name}/{path.name}"


def thin(rows: list[dict], keep: int = MAX_TRAIN_ROWS) -> list[dict]:
    """The metrics rows with the training rows thinned to at most `keep` evenly spaced ones, the last
    one kept, plus those logged at an evaluation's step (the training loss beside each evaluation),
    and their floats rounded to `DIGITS` significant digits; evaluation rows (any other split) all
    kept, in order."""
    train = [i for i, row in enumerate(rows) if row.get("split") == "train"]
    stride = max(1, -(-len(train) // keep))  # ceil: at most `keep` rows
    evaluated = {row["step"] for row in rows if row.get("split") != "train"}
    kept = set(train[::-1][::stride]) | {i for i in train if rows[i]["step"] in evaluated}
    return [_rounded(row) for i, row in enumerate(rows) if row.get("split") != "train" or i in kept]


def _rounded(row: dict) -> dict:
    return {k: float(f"{v:.{DIGITS}g}") if isinstance(v, float) else v for k, v in row.items()}


def from_folder(run_dir: str | Path) -> dict:
    """The record of a run folder (config.json and summary.json required); the config in the current
    layout (hyla.train.configs.upgrade_config), its out_dir made relative (`portable_path`): records
    are committed."""
    from hyla.train.run_dir import RunDir

    run = RunDir(run_dir)
    config = run.read_config_dict()
    return {
        "run": run_key(run.path),
        "config": {**config, "out_dir": portable_path(config["out_dir"])} if "out_dir" in config else config,
        "env": json.loads(run.env_file.read_text()) if run.env_file.exists() else {},
        "summary": run.read_summary(),
        "metrics": thin(run.read_metrics()),
        "latent_structure": {f.name: json.loads(f.read_text()) for f in sorted(run.path.glob(STRUCTURE_CACHE))},
    }


def path_of(out: str | Path, key: str) -> Path:
    """Where the record of run `key` goes in results folder `out`."""
    return Path(out) / "records" / f"{key}{SUFFIX}"


def write(record: dict, out: str | Path) -> Path:
    """Write a record into results folder `out`. Latent-structure measurements that the record it
    replaces holds for the same run (same config, same final step) and this one lacks are kept: a
    record rewritten from a run folder without those caches does not lose them."""
    path = path_of(out, record["run"])
    if path.exists():
        old = read(path)
        if old["config"] == record["config"] and old["summary"].get("step") == record["summary"].get("step"):
            measured = {**old.get("latent_structure", {}), **record.get("latent_structure", {})}
            record = {**record, "latent_structure": measured}
    write_json(path, record, indent=None)
    return path


def read(path: str | Path) -> dict:
    """A record file, its config in the current layout (hyla.train.configs.upgrade_config: a record
    written by an older version reads as a new one); RunError when it is not one."""
    from hyla.train.configs import upgrade_config
    from hyla.train.run_dir import RunError

    try:
        record = json.loads(Path(path).read_text())
    except ValueError as e:
        raise RunError(f"{path} is not a run record: {e}") from None
    missing = {"run", "config", "summary", "metrics"} - set(record)
    if missing:
        raise RunError(f"{path} is not a run record (no {', '.join(sorted(missing))})")
    return {**record, "config": upgrade_config(record["config"])}


def find(root: str | Path) -> list[Path]:
    """Every record file below root."""
    return sorted(Path(root).rglob(f"*{SUFFIX}"))


def recorded_as_completed(out: str | Path, key: str, seed: int, overrides: dict) -> bool:
    """Whether results folder `out` records run `key` as completed with this seed and these config
    values (dotted keys); a record of other settings does not count."""
    path = path_of(out, key)
    if not path.exists():
        return False
    record = read(path)
    if record["summary"].get("status") != "completed" or record["config"].get("seed") != seed:
        return False
    return all(_get(record["config"], key) == value for key, value in overrides.items())


def _get(config: dict, dotted: str):
    for part in dotted.split("."):
        config = config.get(part) if isinstance(config, dict) else None
    return config
