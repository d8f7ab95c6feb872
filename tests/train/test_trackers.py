"""Weights & Biases logging in offline mode: the metrics of metrics.jsonl under TensorBoard's names,
the run config attached, and a resumed run continuing the same W&B run."""

import json
from dataclasses import replace

import pytest
from helpers_train import tiny_config

from hyla.train import train
from hyla.train.trackers import scalar_metrics

wandb = pytest.importorskip("wandb")


@pytest.fixture
def offline_wandb(monkeypatch):
    monkeypatch.setenv("WANDB_MODE", "offline")
    monkeypatch.setenv("WANDB_SILENT", "true")
    logged = []
    original = wandb.sdk.wandb_run.Run.log

    def recording_log(run, data, step=None, **kwargs):
        logged.append((step, dict(data)))
        return original(run, data, step=step, **kwargs)

    monkeypatch.setattr(wandb.sdk.wandb_run.Run, "log", recording_log)
    return logged


def test_wandb_gets_the_run_metrics_and_config_offline(tmp_path, offline_wandb):
    cfg = tiny_config(tmp_path, steps=10, stop_at=5, log={"wandb": "hyla-test"})
    run = train(cfg)
    run_id = (run / "wandb_run_id").read_text().strip()
    train(replace(cfg, train=replace(cfg.train, stop_at=0), resume=True))
    assert (run / "wandb_run_id").read_text().strip() == run_id  # the resumed session continues the W&B run

    records = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines()]
    expected = [
        (r["step"], scalar_metrics(r["split"], {k: v for k, v in r.items() if k not in ("step", "split")}))
        for r in records
    ]
    assert offline_wandb == expected
    assert {"train/loss", "train/lr", "valid/r2", "ood/r2"} <= {key for _, data in offline_wandb for key in data}

    sessions = sorted((run / "wandb").glob("offline-run-*/run-*.wandb"))
    assert sessions and all(s.name == f"run-{run_id}.wandb" for s in sessions)  # every session: the same W&B run
    stored = b"".join(s.read_bytes() for s in sessions)
    assert b"train/loss" in stored and b"fuzzy_logic" in stored and b"hyla-test" in stored  # metrics, config, project


def test_missing_wandb_is_a_clear_config_error(tmp_path, monkeypatch):
    import builtins

    from hyla.train.configs import ConfigError

    real_import = builtins.__import__
    monkeypatch.setattr(
        builtins,
        "__import__",
        lambda name, *a, **k: (
            (_ for _ in ()).throw(ImportError(name)) if name == "wandb" else real_import(name, *a, **k)
        ),
    )
    cfg = tiny_config(tmp_path, steps=2, log={"wandb": "hyla-test"})
    with pytest.raises(ConfigError, match="pip install"):
        train(cfg)
