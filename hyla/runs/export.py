"""Exported models: a run's trained weights as files that load without running code, with what they are.

`hyla export RUN --out DIR` (and a sweep's `results:` folder, for each run as it completes) writes

    DIR/model.safetensors   the weights, float32 (`Transformer.save_pretrained`)
    DIR/config.json         the ModelConfig
    DIR/manifest.json       {"format", "run": "<sweep folder>/<run name>", "step", "hyla_commit",
                             "files": {name: sha256}, "record": {"config", "env", "summary"}}

The manifest's record is the run's record (hyla.runs.records) without its metrics rows: the
resolved run config, the environment of every training session and the final summary.
`hyla_commit` is the commit of the run's last training session (env.json), or, for a run that did
not record one, the commit of the hyla doing the export. `hyla.Transformer.from_pretrained(DIR)`
loads the model and checks both files against their sha256; `hyla.load(DIR)` gives the model and its
task (hyla.nn.pretrained); `hyla analyze DIR` and `hyla interventions DIR` take the folder in place
of a run folder (`hyla.train.load_run_at_step`).
"""

from __future__ import annotations

import os
import shutil
from pathlib import Path

from hyla.nn.pretrained import is_export
from hyla.nn.transformer import PRETRAINED_CONFIG, PRETRAINED_MANIFEST, PRETRAINED_WEIGHTS, sha256_of
from hyla.runs import records
from hyla.utils import write_json

FORMAT = 1
"""the manifest's layout version (`format`)"""


def export_run(run_dir: str | Path, out: str | Path, replace: bool = False) -> dict:
    """Write the weights of the run's latest checkpoint, its config and manifest into `out`; returns
    the manifest. `replace`: an existing export in `out` is replaced (written beside it first, so a
    crash leaves the old one); otherwise a folder `out` that is not empty is refused."""
    from hyla.train import load_run_at_step
    from hyla.train.run_dir import RunError, git_commit

    if is_export(run_dir):
        raise RunError(f"{run_dir} is an export already, not a run folder")
    out = Path(out)
    if out.exists() and (not out.is_dir() or any(out.iterdir())) and not (replace and is_export(out)):
        raise FileExistsError(f"{out} exists (an earlier export?); remove it or choose another --out")
    _, model, _, step, _ = load_run_at_step(run_dir)
    record = records.from_folder(run_dir)
    staging = out.with_name(f".{out.name}.tmp-{os.getpid()}")
    shutil.rmtree(staging, ignore_errors=True)
    model.save_pretrained(staging)
    manifest = {
        "format": FORMAT,
        "run": record["run"],
        "step": step,
        "hyla_commit": record["env"].get("git_commit") or git_commit(),
        "files": {name: sha256_of(staging / name) for name in (PRETRAINED_CONFIG, PRETRAINED_WEIGHTS)},
        "record": {key: record[key] for key in ("config", "env", "summary")},
    }
    write_json(staging / PRETRAINED_MANIFEST, manifest)
    if out.exists():
        shutil.rmtree(out)
    os.replace(staging, out)
    return manifest
