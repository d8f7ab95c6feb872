"""The committed analysis folders name the models they were written from (inputs.json), and those are
the models their own summaries report, so a documented command rerun on the same models writes there
and one on other models is refused (hyla.cli.folders.claim_output_folder)."""

import json
from pathlib import Path

import pytest

RESULTS = Path(__file__).resolve().parents[2] / "experiments" / "results"
FOLDERS = sorted(p.parent for p in RESULTS.glob("*/inputs.json"))


def summarized_models(folder: Path) -> list[str]:
    """The model paths (relative to the repository) a `hyla analyze` or `hyla interventions` summary reports."""
    [summary] = [*folder.glob("latent_summary.json"), *folder.glob("interventions_*.json")]
    models = json.loads(summary.read_text())["models"]
    return sorted(m["path"] if "path" in m else m["model"]["path"] for m in models)


def test_the_latent_and_intervention_folders_of_committed_models_name_them():
    names = {p.name for p in FOLDERS}
    for prefix in ("latent_table_a1_raven_20m_cpu", "interventions_table_a1_raven_20m_cpu"):
        assert prefix in names


@pytest.mark.parametrize("folder", FOLDERS, ids=[p.name for p in FOLDERS])
def test_inputs_json_names_the_models_its_summary_reports(folder):
    from hyla.cli.folders import claim_output_folder

    recorded = json.loads((folder / "inputs.json").read_text())["inputs"]
    repository = RESULTS.parents[1]
    named = sorted(str((folder / path).resolve().relative_to(repository)) for path in recorded)
    assert named == summarized_models(folder)
    claim_output_folder(folder, [repository / path for path in named])  # the same models: not refused
