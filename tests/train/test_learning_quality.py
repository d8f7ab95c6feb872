"""The learning-quality gate: short HYLA runs of the paper's CPU presets, on the default path, land in
the bands measured over twelve seeds; regressions the measurement caught do not (helpers_quality.py
says how the bands are set, what they catch, and how to measure them again).

The gate runs in the default suite; rerunning the regressions on the gate's seeds is `slow` (two more
gates' worth of training): the measurement recorded that the bands catch them, and the gate runs as
measured (same steps and seeds), which the first test checks."""

import json

import pytest
from helpers_quality import BANDS_FILE, GATE_SEEDS, METRICS, STEPS, gate_metrics, outside, regression

MEASURED = json.loads(BANDS_FILE.read_text())


def bands(preset: str) -> dict[str, list[float]]:
    return MEASURED["presets"][preset]["bands"]


def test_the_bands_were_measured_for_the_gate_as_it_runs():
    assert MEASURED["steps"] == STEPS
    assert MEASURED["gate_seeds"] == {preset: list(seeds) for preset, seeds in GATE_SEEDS.items()}
    for preset, names in METRICS.items():
        assert sorted(bands(preset)) == sorted(names)
        assert set(GATE_SEEDS[preset]).isdisjoint(
            run["seed"] for run in MEASURED["presets"][preset]["values"]["healthy"]
        )


@pytest.mark.parametrize("preset, name", [("raven_cpu", "init+schedule"), ("logic_cpu", "lr/10")])
def test_the_measurement_caught_the_regressions_in_every_group(preset, name):
    """SRAVEN catches the initialization and schedule that 228f384 fixed, fuzzy logic a learning
    rate divided by 10, in every disjoint group of gate seeds (helpers_quality.py: what each preset catches)."""
    groups = len(MEASURED["presets"][preset]["values"]["healthy"]) // len(GATE_SEEDS[preset])
    assert MEASURED["presets"][preset]["groups_outside"][name] == f"{groups} of {groups}"
    assert MEASURED["presets"][preset]["groups_outside"]["healthy"] == f"0 of {groups}"


@pytest.mark.parametrize("preset", sorted(GATE_SEEDS))
def test_short_runs_land_in_the_measured_bands(preset, tmp_path):
    metrics = gate_metrics(preset, tmp_path)
    assert not outside(metrics, bands(preset)), f"{preset}: {outside(metrics, bands(preset))}"


@pytest.mark.slow  # two more gates' training; the record's test above says the measurement caught them
@pytest.mark.parametrize("preset, name", [("raven_cpu", "init+schedule"), ("logic_cpu", "lr/10")])
def test_regressions_the_measurement_caught_fall_outside(preset, name, tmp_path):
    """On the gate's own seeds, the regressions the measurement caught fall outside the bands."""
    with regression(name):
        metrics = gate_metrics(preset, tmp_path)
    assert outside(metrics, bands(preset))
