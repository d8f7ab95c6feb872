"""Bad input and damaged or hostile runs: every `hyla` subcommand ends with one line `error: ...`
and exit code 2, never a traceback, never runs code from a checkpoint, and never changes the run
folder it was pointed at."""

import json
import os
import pickle
import signal
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from helpers_cli import tiny_run

from hyla.cli import main

RUN_COMMANDS = (["eval"], ["analyze"], ["resume"], ["export"], ["sample"])


def snapshot(folder: Path) -> dict:
    return {p.relative_to(folder): p.read_bytes() for p in folder.rglob("*") if p.is_file()}


def fails_in_one_line(capsys, argv, *needles) -> str:
    code = main(argv)
    err = capsys.readouterr().err.strip()
    assert code == 2, err
    last = err.splitlines()[-1]
    assert "error:" in last and "Traceback" not in err, err
    for needle in needles:
        assert needle in last, last
    return last


@pytest.mark.parametrize("command", RUN_COMMANDS)
def test_a_missing_or_non_run_folder(tmp_path, capsys, command):
    fails_in_one_line(capsys, [*command, str(tmp_path / "nope")], "does not exist")
    (tmp_path / "empty").mkdir()
    fails_in_one_line(capsys, [*command, str(tmp_path / "empty")], "not a run folder")


def test_invalid_option_values(tmp_path, capsys):
    run = tiny_run(tmp_path)
    before = snapshot(run)
    fails_in_one_line(capsys, ["eval", str(run), "--samples", "-3"], "must be >= 1")
    fails_in_one_line(capsys, ["analyze", str(run), "--samples", "0"], "must be >= 1")
    fails_in_one_line(capsys, ["eval", str(run), "--split", "nope"], "nope")
    fails_in_one_line(capsys, ["resume", str(run), "--optim.lr", "0.5"], "optim.lr")
    fails_in_one_line(capsys, ["train", "--preset", "logic_cpu", "--train.steps", "-5"], "train.steps")
    fails_in_one_line(capsys, ["train", "--preset", "logic_cpu", "--eval.final_samples", "0"], "eval.final_samples")
    fails_in_one_line(capsys, ["train", "--config", str(tmp_path / "missing.json")], "missing.json")
    assert snapshot(run) == before


def test_a_section_check_reads_as_its_own_message(capsys):
    """A config section's check names its field, without tyro's "Error parsing optim:" before it;
    an option tyro cannot parse keeps the option's name."""
    last = fails_in_one_line(capsys, ["train", "--preset", "logic_cpu", "--optim.lr", "-1"])
    assert last.endswith("error: optim.lr=-1.0 must be > 0 (see hyla train --help)"), last
    bad_steps = ["train", "--preset", "logic_cpu", "--train.steps", "abc"]
    fails_in_one_line(capsys, bad_steps, "Error parsing --train.steps:")


def test_a_misspelled_option_is_named_without_the_values_after_it(tmp_path, capsys):
    last = fails_in_one_line(capsys, ["train", "--preset", "logic_cpu", "--train.stepz", "100", "--model.foo=3"])
    assert "Unrecognized options: --train.stepz, --model.foo " in last and "100" not in last, last
    last = fails_in_one_line(capsys, ["eval", str(tmp_path), "--sampels", "64"], "--samples")
    assert "Unrecognized options: --sampels " in last and "64" not in last, last
    assert not list(tmp_path.iterdir())


def test_an_option_or_sweep_entry_of_a_moved_field_names_the_new_one(tmp_path, capsys):
    """The fields that moved out of the train section (issue 80): `hyla train`, `hyla resume` and a
    sweep file naming the old path end with one line naming the new one, and run nothing."""
    run = tiny_run(tmp_path / "runs")
    before = snapshot(run)
    fails_in_one_line(capsys, ["train", "--preset", "logic_cpu", "--train.lr", "1e-3"], "train.lr moved to optim.lr")
    fails_in_one_line(capsys, ["resume", str(run), "--train.eval-every", "5"], "train.eval_every moved to eval.every")
    assert snapshot(run) == before
    sweep = tmp_path / "old.yaml"
    sweep.write_text(
        f"name: old\npreset: logic_cpu\nout_dir: {tmp_path}\nseeds: [0]\noverrides: {{train.eval_every: 100}}\n"
    )
    last = fails_in_one_line(capsys, ["sweep", str(sweep), "--dry-run"], "train.eval_every moved to eval.every")
    assert "overrides entry train.eval_every" in last and not (tmp_path / "old").exists()


def test_a_task_command_mismatch(tmp_path, capsys):
    run = tiny_run(tmp_path)
    before = snapshot(run)
    fails_in_one_line(capsys, ["sample", str(run)], "fuzzy_logic run", "needs a text run")
    config = json.loads((run / "config.json").read_text())
    (run / "config.json").write_text(json.dumps({**config, "task": "text"}))
    fails_in_one_line(capsys, ["analyze", str(run)], "text run", "fuzzy_logic or sraven")
    (run / "config.json").write_bytes(before[Path("config.json")])
    assert snapshot(run) == before


def test_damaged_checkpoints_fall_back_then_fail_cleanly(tmp_path, capsys):
    run = tiny_run(tmp_path)
    latest, previous = run / "checkpoints" / "latest.pt", run / "checkpoints" / "previous.pt"
    latest.write_bytes(latest.read_bytes()[:500])
    assert main(["eval", str(run), "--split", "ood", "--samples", "16"]) == 0
    assert "using the previous checkpoint" in capsys.readouterr().err
    previous.write_bytes(b"not a checkpoint")
    before = snapshot(run)
    for command in (["eval"], ["analyze"], ["resume"], ["export"]):
        fails_in_one_line(capsys, [*command, str(run)], "damaged")
    assert snapshot(run) == before


def test_random_bytes_are_damaged_and_a_fallback_names_its_step(tmp_path, capsys):
    run = tiny_run(tmp_path)  # checkpoints at 20 (latest) and 15 (previous)
    latest, previous = run / "checkpoints" / "latest.pt", run / "checkpoints" / "previous.pt"
    latest.write_bytes(os.urandom(4096))
    commands = (["eval", "--split", "ood", "--samples", "16"], ["export"], ["analyze", "--samples", "64"])
    for command in commands:
        assert main([command[0], str(run), *command[1:]]) == 0
        warning = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
        assert len(warning) == 1 and "is damaged" in warning[0] and "unsafe" not in warning[0], warning
        assert "of step 15, the run reached step 20" in warning[0], warning
    previous.write_bytes(os.urandom(4096))
    for command in (["eval"], ["analyze"], ["resume"], ["export", "--out", str(tmp_path / "out")]):
        last = fails_in_one_line(
            capsys, [command[0], str(run), *command[1:]], "latest.pt is damaged", "previous.pt is damaged"
        )
        assert "unsafe" not in last and "zip" not in last.lower() and len(last) < 250 + 2 * len(str(run)), last


def test_resume_of_a_complete_run_whose_latest_checkpoint_is_damaged_names_the_step_it_reached(tmp_path, capsys):
    run = tiny_run(tmp_path)  # checkpoints at 20 (latest) and 15 (previous)
    (run / "checkpoints" / "latest.pt").write_bytes(os.urandom(4096))
    assert main(["resume", str(run)]) == 0
    assert f"{run} is complete (step 20); nothing to do" in capsys.readouterr().out


@pytest.mark.parametrize(
    "argv", [["demo", "--preset", "nope"], ["demo", "--steps", "-1"], ["eval", "run", "--samples", "0"]]
)
def test_option_errors_name_the_command_not_a_class(capsys, argv):
    last = fails_in_one_line(capsys, argv)
    assert last.startswith(f"hyla {argv[0]}: error: --") and "Options" not in last, last


def test_outputs_are_named_by_their_options_or_refused(tmp_path, capsys):
    run = tiny_run(tmp_path)
    assert main(["eval", str(run), "--split", "ood", "--samples", "16"]) == 0
    assert main(["eval", str(run), "--split", "valid", "--samples", "16"]) == 0  # the same options: merged
    assert main(["eval", str(run), "--split", "ood", "--samples", "32"]) == 0
    assert set(json.loads((run / "eval-step20-n16.json").read_text())["splits"]) == {"ood", "valid"}
    assert set(json.loads((run / "eval-step20-n32.json").read_text())["splits"]) == {"ood"}
    assert main(["eval", str(run), "--split", "ood", "--samples", "16", "--batch-size", "8"]) == 0  # its own file
    assert json.loads((run / "eval-step20-n16-b8.json").read_text())["batch_size"] == 8
    assert json.loads((run / "eval-step20-n16.json").read_text())["batch_size"] == 32
    before = snapshot(run)
    (run / "eval-step20-n16-b4.json").write_text((run / "eval-step20-n16-b8.json").read_text())  # renamed by hand
    fails_in_one_line(
        capsys, ["eval", str(run), "--samples", "16", "--batch-size", "4"], "eval-step20-n16-b4.json", "--batch-size 8"
    )
    (run / "eval-step20-n16-b4.json").unlink()
    assert main(["eval", str(run), "--split", "ood", "--samples", "16", "--offset", "32"]) == 0  # other samples
    fresh = json.loads((run / "eval-step20-n16-o32.json").read_text())
    again = json.loads((run / "eval-step20-n16.json").read_text())["splits"]["ood"]
    assert fresh["offset"] == 32 and fresh["splits"]["ood"] != again
    fails_in_one_line(capsys, ["eval", str(run), "--samples", "16", "--offset", "40"], "not a multiple", "try 64")
    (run / "eval-step20-n16-o32.json").unlink()
    assert main(["export", str(run)]) == 0
    fails_in_one_line(capsys, ["export", str(run)], "export exists")
    assert {p: b for p, b in snapshot(run).items() if p.parts[0] != "export"} == before


def test_runs_from_the_earlier_random_stream_are_refused(tmp_path, capsys):
    run = tiny_run(tmp_path)
    for name in ("latest.pt", "previous.pt"):
        path = run / "checkpoints" / name
        if path.exists():
            state = torch.load(path, weights_only=True)
            torch.save({**state, "format": 2}, path)
    before = snapshot(run)
    for command in (["eval"], ["analyze"], ["resume"], ["export"]):
        fails_in_one_line(capsys, [*command, str(run)], "earlier random stream")
    assert snapshot(run) == before


class Payload:
    """Unpickling it creates a marker file: the visible side effect of running code from a file."""

    marker = ""

    def __reduce__(self):
        return (Path.touch, (Path(self.marker),))


def test_a_planted_payload_never_runs_and_the_good_run_still_resumes_exactly(tmp_path, capsys):
    from helpers_train import assert_same_weights

    run = tiny_run(tmp_path, stop_at=10)  # checkpoints at 10 (latest) and 5 (previous)
    reference = tiny_run(tmp_path, name="reference")
    stopped = torch.load(run / "checkpoints" / "latest.pt", weights_only=True)
    marker = tmp_path / "payload-ran"
    Payload.marker = str(marker)
    latest = run / "checkpoints" / "latest.pt"
    state = stopped
    torch.save({**state, "evil": Payload()}, latest)
    with pytest.raises(pickle.UnpicklingError):  # the payload is really there and would run unsafely
        torch.load(latest, weights_only=True)
    assert main(["resume", str(run)]) == 0  # refuses latest.pt, resumes from the previous (good) checkpoint
    out = capsys.readouterr().out
    assert "unsafe unpickling (Unsupported global: GLOBAL " in out, out
    reference_weights, resumed_weights = (
        torch.load(r / "checkpoints" / "latest.pt", weights_only=True)["model"] for r in (reference, run)
    )
    torch.save({**state, "evil": Payload()}, run / "checkpoints" / "previous.pt")
    torch.save({**state, "evil": Payload()}, latest)
    for command in (["eval"], ["analyze"], ["export"], ["resume"]):
        fails_in_one_line(capsys, [*command, str(run)], "unsafe unpickling")
    assert not marker.exists()
    assert_same_weights(reference_weights, resumed_weights)


def test_every_load_in_hyla_is_weights_only():
    sources = "\n".join(p.read_text() for p in Path("hyla").rglob("*.py"))
    assert "weights_only=False" not in sources and "pickle.load" not in sources
    assert sources.count("torch.load(") == sources.count("weights_only=True)")


def test_export_and_from_pretrained_round_trip(tmp_path, capsys):
    from hyla import Transformer
    from hyla.train import load_run

    run = tiny_run(tmp_path)
    assert main(["export", str(run), "--out", str(tmp_path / "shared")]) == 0
    assert sorted(os.listdir(tmp_path / "shared")) == ["config.json", "manifest.json", "model.safetensors"]
    _, model, task = load_run(run)
    loaded = Transformer.from_pretrained(tmp_path / "shared")
    x = task.batch("ood", 8, 0).x
    assert torch.equal(model(x), loaded(x)) and not loaded.training


def test_a_reader_that_stops_reading_ends_the_command_quietly():
    # `hyla sweep F --status | head -3`: the pipe closes while the command still prints
    script = (
        "import sys, types, hyla.cli as cli\n"
        "sys.modules['chatty'] = types.SimpleNamespace(main=lambda rest: [print(i) for i in range(10**6)])\n"
        "cli.COMMANDS['list'] = ('chatty:main', *cli.COMMANDS['list'][1:])\n"
        "sys.exit(cli.main(['list']))\n"
    )
    process = subprocess.Popen([sys.executable, "-c", script], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert process.stdout.readline() == b"0\n"
    process.stdout.close()
    assert process.wait(timeout=60) == 128 + signal.SIGPIPE
    assert process.stderr.read() == b""  # no traceback, no "Exception ignored" at exit
