"""The `hyla` command end to end: train, eval, resume, list, demo (tiny settings)."""

import json
from pathlib import Path

from helpers_train import TINY_RUN

from hyla.cli import COMMANDS, main
from hyla.runs.sweep import override_flags
from hyla.train import progress

TINY_SETTINGS = {**TINY_RUN, "model.mlp_dim": 32, "eval.samples": 32, "eval.batch_size": 32}
TINY_SETTINGS |= {"log.every": 5, "checkpoint.every": 10, "eval.every": 10, "log.progress": False}
TINY = [flag for key, value in TINY_SETTINGS.items() for flag in override_flags(key, value)]  # `hyla train` flags


def test_dispatcher_lists_commands(capsys):
    assert main([]) == 0
    out = capsys.readouterr().out
    assert all(name in out for name in COMMANDS)
    assert main(["frobnicate"]) == 2


def test_list_shows_presets_and_both_mixer_names(capsys):
    assert main(["list"]) == 0
    out = capsys.readouterr().out
    for name in (
        "logic_4var_2term",
        "raven_3x3_4features",
        "logic_cpu",
        "raven_cpu",
        "linear_hypatt",
        "hyla",
        "softmax_attention",
        "rms_head",
    ):
        assert name in out


def test_a_run_resumed_by_a_relative_path_keeps_relative_paths(tmp_path, monkeypatch):
    # a run folder committed or moved to another machine names no path of this one
    monkeypatch.chdir(tmp_path)
    args = ["train", "--preset", "logic_cpu", "--train.steps", "20", "--out_dir", "runs", "--name", "r"] + TINY
    assert main(args + ["--train.stop_at", "10"]) == 0
    assert main(["resume", "runs/r", "--train.stop_at", "15"]) == 0
    assert json.loads(Path("runs/r/config.json").read_text())["out_dir"] == "runs"
    summary = json.loads(Path("runs/r/summary.json").read_text())
    assert summary["status"] == "stopped" and summary["message"].endswith("hyla resume runs/r")
    assert main(["resume", str(tmp_path / "runs" / "r")]) == 0  # an absolute path resumes the same run


def test_train_eval_resume(tmp_path, capsys):
    args = [
        "train",
        "--preset",
        "logic_cpu",
        "--train.steps",
        "20",
        "--model.mixer",
        "linear_hypatt",
        "--out_dir",
        str(tmp_path),
        "--name",
        "cli",
    ] + TINY
    assert main(args + ["--train.stop_at", "10"]) == 0
    run = tmp_path / "cli"
    assert json.loads((run / "summary.json").read_text())["status"] == "stopped"
    assert main(args) == 2  # the folder exists: refuses to overwrite
    assert "--resume" in capsys.readouterr().err
    assert main(["resume", str(run)]) == 0
    summary = json.loads((run / "summary.json").read_text())
    assert summary["status"] == "completed" and summary["step"] == 20 and summary["mixer"] == "hyla"

    capsys.readouterr()
    assert main(["eval", str(run), "--split", "ood", "valid_fixed_query", "--samples", "48"]) == 0
    out = capsys.readouterr().out
    assert "| ood |" in out and "| valid_fixed_query |" in out
    written = json.loads((run / "eval-step20-n48.json").read_text())
    assert written["samples"] == 48 and set(written["splits"]) == {"ood", "valid_fixed_query"}
    assert main(["eval", str(run), "--split", "nope"]) == 2


def test_train_says_what_runs_shows_lines_a_log_follows_and_ends_with_its_curves(tmp_path, capsys, monkeypatch):
    monkeypatch.setattr(progress, "PROGRESS_EVERY", 0.0)  # (a line after every step)
    tiny = [arg for arg in TINY if arg != "--log.no-progress"]
    args = ["train", "--preset", "logic_cpu", "--train.steps", "20", "--out_dir", str(tmp_path), "--name", "run"]
    assert main(args + tiny) == 0
    run = tmp_path / "run"
    out, err = capsys.readouterr()
    out = out.splitlines()
    assert out[0].startswith(f"run {run}: fuzzy_logic with softmax, ") and "parameters, from scratch (1 rank" in out[0]
    assert out[-2:] == [f"curves: {run / 'curves.png'}", str(run)]
    assert (run / "curves.png").stat().st_size > 10_000
    assert "\r" not in err  # (a bar redrawn in place would garble a log file)
    steps = [line for line in err.splitlines() if line.startswith("softmax: step ")]
    assert [line.split()[2] for line in steps] == [f"{step}/20" for step in range(1, 21)]
    assert ", ETA " not in steps[0]  # (the first step holds the warm-ups: the pace is measured after it)
    assert all(", ETA " in line and "; loss " in line for line in steps[4:])  # (after the first record, step 5)


def test_train_rejects_bad_values_with_a_message(tmp_path, capsys):
    assert main(["train", "--preset", "logic_cpu", "--model.mixer", "hypa", "--out_dir", str(tmp_path)]) == 2
    assert "linear_hypatt" in capsys.readouterr().err
    assert main(["train", "--preset", "logic_cpu", "--train.stepss", "3"]) == 2
    err = capsys.readouterr().err.strip()
    assert len(err.splitlines()) == 1 and "error: Unrecognized options: --train.stepss" in err
    assert "--train.steps INT" in err  # the suggestion


def test_print_config_is_resolved(capsys):
    assert main(["train", "--preset", "raven_3x3_4features", "--print-config"]) == 0
    cfg = json.loads(capsys.readouterr().out)
    assert cfg["task"] == "sraven" and cfg["model"]["seq_len"] == 36 and cfg["model"]["num_outputs"] == 4


def test_demo_end_to_end(tmp_path, capsys):
    out = tmp_path / "demo"
    code = main(
        [
            "demo",
            "--steps",
            "6",
            "--out",
            str(out),
            "--eval-samples",
            "32",
            "--final-eval-samples",
            "64",
            "--threads",
            "1",
            "--no-progress",
            "--preset",
            "logic_cpu",
        ]
    )
    assert code == 0
    text = capsys.readouterr().out
    assert "| softmax |" in text and "| linear |" in text and "| hyla |" in text and "ood r2" in text
    assert "novel_terms r2" in text and "\nnovel_terms: tasks of terms never seen in training" in text  # explained
    report = json.loads((out / "demo.json").read_text())
    assert [r["mixer"] for r in report["rows"]] == ["softmax", "linear", "hyla"]
    assert all(r["status"] == "completed" for r in report["rows"])
    assert (out / "demo.md").read_text().count("|") > 20 and "R² far below 0" in (out / "demo.md").read_text()
    assert (out / "curves.png").stat().st_size > 10_000


def test_tensorboard_without_the_package_is_a_clear_error(tmp_path, capsys, monkeypatch):
    import builtins

    real_import = builtins.__import__

    def no_tensorboard(name, *args, **kwargs):
        if name == "tensorboard" or name.startswith("tensorboard."):
            raise ImportError(name)
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", no_tensorboard)
    args = [
        "train",
        "--preset",
        "logic_cpu",
        "--train.steps",
        "2",
        "--log.tensorboard",
        "--out_dir",
        str(tmp_path),
    ] + TINY
    assert main(args) == 2
    assert "pip install tensorboard" in capsys.readouterr().err


def test_help_says_once_what_an_unset_option_means(capsys, monkeypatch):
    """Options whose unset value stands for something (the preset's steps, RUN/export, ...) say so,
    not beside tyro's own "(default: None)"."""
    monkeypatch.setenv("COLUMNS", "200")
    expected = {
        "demo": "(default: the preset's)",
        "eval": "(default: the task's evaluation splits)",
        "export": "(default: RUN/export)",
        "results": "(default: results/<name of the first of DIRS>)",
        "sweep": "(default: this machine's cores / parallel)",
        "sample": "(default: all tokens)",
        "analyze": "(default: all)",
        "interventions": "(default: RUN/interventions; ./interventions-NAME for an exported model)",
    }
    for command, hint in expected.items():
        assert main([command, "--help"]) == 0
        text = capsys.readouterr().out
        assert hint in text and "(default: None)" not in text, command
