"""Checkpoints prove their contents: a sha256 stored with them catches damage anywhere, on every
path that loads a checkpoint; checkpoints written before it still load, unverified."""

import zipfile

import pytest
import torch
from helpers_cli import tiny_run

import hyla
from hyla.cli import main
from hyla.train import checkpoint as ckpt


def small_checkpoint(folder):
    model = torch.nn.Linear(32, 32)
    optimizer = torch.optim.AdamW(model.parameters())
    model(torch.randn(4, 32)).square().sum().backward()
    optimizer.step()
    state = {"model": model.state_dict(), "optimizer": optimizer.state_dict(), "progress": {"step": 3}}
    latest, previous = folder / "latest.pt", folder / "previous.pt"
    ckpt.save(state, latest, previous)
    return latest, previous


def record_bytes(path, name: str) -> range:
    """Where the (stored, uncompressed) bytes of record `name` of torch's zip file lie in the file."""
    data = path.read_bytes()
    info = zipfile.ZipFile(path).getinfo(name)
    header = data[info.header_offset : info.header_offset + 30]
    start = info.header_offset + 30 + int.from_bytes(header[26:28], "little") + int.from_bytes(header[28:30], "little")
    return range(start, start + info.compress_size)


def damaged_at(path, position: int) -> None:
    data = bytearray(path.read_bytes())
    data[position] ^= 0xFF
    path.write_bytes(bytes(data))


def largest_tensor_record(path) -> str:
    records = [info for info in zipfile.ZipFile(path).infolist() if "/data/" in info.filename]
    return max(records, key=lambda info: info.compress_size).filename


@pytest.mark.parametrize("where", ["start", "middle", "end"])
@pytest.mark.parametrize("part", ["tensor data", "metadata"])
def test_a_damaged_byte_anywhere_is_caught(tmp_path, part, where):
    latest, _ = small_checkpoint(tmp_path)
    assert ckpt.load(latest)["progress"] == {"step": 3}
    name = largest_tensor_record(latest) if part == "tensor data" else "archive/data.pkl"
    span = record_bytes(latest, name)
    damaged_at(latest, {"start": span[0], "middle": span[len(span) // 2], "end": span[-1]}[where])
    with pytest.raises(ckpt.CheckpointError, match="is damaged") as error:
        ckpt.load(latest)
    if part == "tensor data":  # torch's reader loads these bytes as they are: only the sha256 notices
        assert "do not match the sha256" in str(error.value)


def test_changed_contents_in_a_well_formed_file_are_caught(tmp_path):
    latest, _ = small_checkpoint(tmp_path)
    state = torch.load(latest, weights_only=True)
    state["progress"]["step"] = 4
    torch.save(state, latest)
    with pytest.raises(ckpt.CheckpointError, match="do not match the sha256"):
        ckpt.load(latest)


def test_a_damaged_latest_falls_back_to_the_previous_and_neither_intact_is_refused(tmp_path):
    latest, previous = small_checkpoint(tmp_path)
    small_checkpoint(tmp_path)  # the first one becomes previous.pt
    damaged_at(latest, record_bytes(latest, largest_tensor_record(latest))[100])
    state, used, note = ckpt.load_latest(latest, previous)
    assert used == previous and "do not match the sha256" in note and "\n" not in note
    damaged_at(previous, record_bytes(previous, largest_tensor_record(previous))[100])
    with pytest.raises(ckpt.CheckpointError, match="previous checkpoint is unusable too"):
        ckpt.load_latest(latest, previous)


def test_a_checkpoint_without_a_sha256_loads_with_a_warning(tmp_path):
    latest, _ = small_checkpoint(tmp_path)
    state = torch.load(latest, weights_only=True)
    del state[ckpt.CHECKSUM]
    torch.save(state, latest)
    with pytest.warns(UserWarning, match="cannot be verified"):
        assert ckpt.load(latest)["progress"] == {"step": 3}


def zero_the_middle(path, size: int = 4096) -> None:
    """The trial of issue 78: 4 KiB of zeros in the middle of the file."""
    data = bytearray(path.read_bytes())
    middle = len(data) // 2
    data[middle : middle + size] = bytes(size)
    path.write_bytes(bytes(data))


def test_every_command_that_loads_falls_back_from_a_checkpoint_zeroed_inside(tmp_path, capsys):
    run = tiny_run(tmp_path)  # checkpoints at 20 (latest) and 15 (previous)
    zero_the_middle(run / "checkpoints" / "latest.pt")
    commands = (
        ["eval", "--split", "ood", "--samples", "16"],
        ["export", "--out", str(tmp_path / "export")],
        ["analyze", "--samples", "64", "--permutations", "10"],
        ["interventions", "--tasks", "2", "--samples", "4"],
    )
    for command in commands:
        assert main([command[0], str(run), *command[1:]]) == 0, command
        warnings = [line for line in capsys.readouterr().err.splitlines() if line.startswith("warning:")]
        assert len(warnings) == 1 and "latest.pt is damaged" in warnings[0], (command, warnings)
        assert "using the previous checkpoint" in warnings[0] and "of step 15" in warnings[0], warnings
    model, _ = hyla.load(run)
    assert "latest.pt is damaged" in capsys.readouterr().err
    zero_the_middle(run / "checkpoints" / "previous.pt")
    for command in (["eval"], ["export", "--out", str(tmp_path / "refused")], ["analyze"], ["interventions"]):
        assert main([command[0], str(run), *command[1:]]) == 2, command
        last = capsys.readouterr().err.strip().splitlines()[-1]
        assert "latest.pt is damaged" in last and "previous.pt is damaged" in last, last


def test_resume_falls_back_from_a_checkpoint_zeroed_inside(tmp_path, capsys):
    run = tiny_run(tmp_path, stop_at=10)  # checkpoints at 10 (latest) and 5 (previous)
    zero_the_middle(run / "checkpoints" / "latest.pt")
    assert main(["resume", str(run)]) == 0
    assert "latest.pt is damaged" in capsys.readouterr().out
    assert ckpt.load(run / "checkpoints" / "latest.pt")["progress"]["step"] == 20
