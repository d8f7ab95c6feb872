"""`hyla.utils`: the switch table (every HYLA_* variable read once, one sense each), JSON files
(one convention: non-finite numbers are null) and the durations of progress lines."""

import json
from pathlib import Path

import numpy as np
import pytest
import torch

from hyla.utils import (
    ENV_NAMES,
    SWITCHES,
    append_jsonl,
    duration,
    elapsed_and_eta,
    env_name,
    read_jsonl,
    switches,
    to_jsonable,
    write_json,
)


def test_switches_are_read_once_with_one_sense(set_switch, monkeypatch, tmp_path):
    """Unset: None (the default); 0: off; 1: forced on. Read once: a change shows only once the
    record is read again (what set_switch does)."""
    for name in ENV_NAMES:
        set_switch(name, None)
    assert all(getattr(switches(), s) is None for s in SWITCHES)
    assert switches().cache == Path.home() / ".cache" / "hyla"
    set_switch("HYLA_TRITON", "1")
    set_switch("HYLA_CPP_KERNEL", "0")
    set_switch("HYLA_CACHE", str(tmp_path))
    record = switches()
    assert record.forced("triton") and not record.off("triton")
    assert record.off("cpp_kernel") and not record.forced("cpp_kernel")
    assert record.cache == tmp_path
    monkeypatch.setenv("HYLA_CPP_KERNEL", "1")  # behind the record's back: not seen
    assert switches() is record and switches().off("cpp_kernel")


def test_a_switch_of_another_value_is_an_error(set_switch):
    set_switch("HYLA_GELU_SIGMOID", "off")
    with pytest.raises(ValueError, match=r"HYLA_GELU_SIGMOID='off': set it to 0 \(off\) or 1 \(on\), or unset it"):
        switches()


def test_an_unknown_hyla_variable_warns(set_switch, monkeypatch):
    monkeypatch.setenv("HYLA_PUBLIC_OPS", "1")  # removed: HYLA_ADAMW_KERNEL=0 turns the AdamW kernel off
    set_switch("HYLA_TRITON", None)  # (reads the record again)
    with pytest.warns(UserWarning, match="hyla reads no HYLA_PUBLIC_OPS; its switches are HYLA_CACHE, HYLA_CPP_KERNEL"):
        switches()


def test_each_switch_names_its_variable():
    assert env_name("cpp_kernel") == "HYLA_CPP_KERNEL"
    assert set(ENV_NAMES) == {env_name(s) for s in SWITCHES} | {"HYLA_CACHE"}


def test_non_finite_numbers_become_null_everywhere(tmp_path):
    value = {
        "nan": float("nan"),
        3: [float("inf"), np.float32(-np.inf), 1.5],
        "t": torch.tensor([1.0, float("nan")]),
        "np": np.array([[1, 2]]),
        "i": np.int64(7),
        "tuple": (1, "a"),
    }
    expected = {"nan": None, "3": [None, None, 1.5], "t": [1.0, None], "np": [[1, 2]], "i": 7, "tuple": [1, "a"]}
    assert to_jsonable(value) == expected
    write_json(tmp_path / "sub" / "a.json", value)
    text = (tmp_path / "sub" / "a.json").read_text()
    assert "NaN" not in text and "Infinity" not in text and json.loads(text) == expected
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["a.json"]  # the temporary file was renamed


def test_read_jsonl_drops_only_a_torn_last_line(tmp_path):
    path = tmp_path / "metrics.jsonl"
    assert read_jsonl(path) == []
    append_jsonl(path, {"step": 1, "loss": float("nan")})
    append_jsonl(path, {"step": 2, "loss": 0.5})
    assert read_jsonl(path) == [{"step": 1, "loss": None}, {"step": 2, "loss": 0.5}]
    with open(path, "a") as f:
        f.write('{"step": 3, "lo')  # a writer killed mid-line
    with pytest.warns(UserWarning, match="torn last line"):
        assert [r["step"] for r in read_jsonl(path)] == [1, 2]
    path.write_text('{"step": 1}\n{"ste\n{"step": 3}\n')
    with pytest.raises(ValueError, match="line 2"):
        read_jsonl(path)


def test_one_duration_format_for_every_progress_line():
    assert [duration(s) for s in (0.4, 42.9, 65, 3599, 3600, 97_380)] == [
        "0s",
        "42s",
        "1m05s",
        "59m59s",
        "1h00m",
        "27h03m",
    ]


def test_one_eta_for_every_progress_line():
    # 30 items in 60 s: 2 s each, 45 items left
    assert elapsed_and_eta(65, (60.0, 30), 45) == "1m05s elapsed, ETA 1m30s"
    assert elapsed_and_eta(65, (60.0, 0), 45) == "1m05s elapsed"  # nothing timed yet
    assert elapsed_and_eta(65, None, 45) == "1m05s elapsed"
