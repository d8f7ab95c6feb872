"""env.json keeps the environment of every training session of a run (machine, commit, numerics),
and a run's record and export carry them: a resumed run says where each part of it trained."""

import json
from dataclasses import replace

from helpers_train import final_weights, tiny_config

from hyla.runs import records
from hyla.train import train
from hyla.train.run_dir import RunDir


def sessions(run) -> list[dict]:
    return json.loads((run / "env.json").read_text())["sessions"]


def test_a_resumed_run_lists_each_session_and_trains_the_same(tmp_path, monkeypatch):
    whole = train(tiny_config(tmp_path, "whole"))
    assert [s["from_step"] for s in sessions(whole)] == [0]
    cfg = tiny_config(tmp_path, "split", stop_at=10)
    run = train(cfg)
    monkeypatch.setattr("hyla.train.run_dir.git_commit", lambda: "resumed-at-this-commit")
    train(replace(cfg, resume=True, train=replace(cfg.train, stop_at=0)))
    first, second = sessions(run)
    assert (first["from_step"], second["from_step"]) == (0, 10)
    assert first["git_commit"] != "resumed-at-this-commit" == second["git_commit"]
    env = json.loads((run / "env.json").read_text())
    assert {k: v for k, v in env.items() if k != "sessions"} == second  # readers of env.json see the last
    assert "numerics" in second and second["numerics"]["attention"]  # completed after the first step
    assert records.from_folder(run)["env"]["sessions"] == [first, second]
    for name, weights in final_weights(whole).items():  # bookkeeping only: the weights are the same
        assert weights.equal(final_weights(run)[name]), name


def test_an_env_json_from_before_sessions_counts_as_one(tmp_path):
    run = RunDir(tmp_path / "run")
    run.path.mkdir()
    run.env_file.write_text(json.dumps({"git_commit": "old", "cpu": "x"}))
    assert run.read_sessions() == [{"git_commit": "old", "cpu": "x"}]
    run.write_env({"git_commit": "new"}, from_step=5)
    assert [s["git_commit"] for s in run.read_sessions()] == ["old", "new"]
    run.write_env({"git_commit": "fresh"}, from_step=0)  # a run started again from scratch
    assert [s["git_commit"] for s in run.read_sessions()] == ["fresh"]
    run.env_file.write_text("{damaged")
    run.write_env({"git_commit": "after"}, from_step=7)
    assert [s["git_commit"] for s in run.read_sessions()] == ["after"]
