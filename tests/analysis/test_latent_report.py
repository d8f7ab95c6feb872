"""hyla.analysis.latent_report: latent-code measures of several models as mean ± s.e. per mixer."""

import pytest

from hyla.analysis.latent_report import ADDITION_SUBTRACTION, summarize, table


def fuzzy_analysis(mixer: str, seed: int, spearman: float, p_value: float, f1: float) -> dict:
    f1_probe = {"mean_f1": f1, "mean_chance": 0.1, "mean_always_positive": 0.2}
    return {
        "task": "fuzzy_logic",
        "run": {"task": "fuzzy_logic", "mixer": mixer, "seed": seed, "path": f"{mixer}_s{seed}"},
        "topographic_similarity": {
            "ood": {
                "layer 0": {"spearman": float("nan"), "p_value": None},  # no variation: not a measurement
                "all layers": {"spearman": None, "p_value": None},  # the same, read back from JSON
                "layer 1": {"spearman": spearman, "p_value": p_value},
            }
        },
        "probes": {"valid->ood": {"layer 1": {"term_f1_held_out": f1_probe}}},
    }


def test_mean_se_and_passes_per_mixer():
    analyses = [
        fuzzy_analysis("hyla", 0, 0.30, 0.001, 0.25),
        fuzzy_analysis("hyla", 1, 0.10, 0.20, 0.15),
        fuzzy_analysis("softmax", 0, 0.05, 0.04, 0.30),
    ]
    rows = {(r["mixer"], r["measure"]): r for r in summarize(analyses)}
    assert len(rows) == 4  # layer 0 and all layers: undefined for every model, left out
    topo = rows[("hyla", "topographic similarity")]
    assert topo["mean"] == pytest.approx(0.20) and topo["se"] == pytest.approx(0.10)  # sd 0.1·√2 over √2 models
    assert topo["passes"] == "1 of 2" and [m["seed"] for m in topo["per_model"]] == [0, 1]
    probe = rows[("hyla", "held-out probe (mean_f1)")]
    assert probe["mean"] == pytest.approx(0.20) and probe["passes"] == "1 of 2"  # above both baselines once
    one = rows[("softmax", "topographic similarity")]
    assert one["se"] is None and one["passes"] == "1 of 1"
    assert probe["baselines"] == pytest.approx({"chance": 0.1, "always 'present'": 0.2})
    line = "| topographic similarity | ood | layer 1 | hyla | 0.200 ± 0.100 | no relation (ρ = 0) 0.000 | 1 of 2 |"
    assert line + " 0: 0.300, 1: 0.100 |" in table(summarize(analyses))
    probe_line = "| hyla | 0.200 ± 0.050 | chance 0.100, always 'present' 0.200 | 1 of 2 | 0: 0.250, 1: 0.150 |"
    assert probe_line in table(summarize(analyses))


def test_a_model_whose_codes_do_not_vary_counts_as_undefined():
    analyses = [fuzzy_analysis("hyla", 0, 0.30, 0.001, 0.25), fuzzy_analysis("hyla", 1, float("nan"), 1.0, 0.25)]
    [topo] = [r for r in summarize(analyses) if r["measure"] == "topographic similarity"]
    assert topo["mean"] == 0.30 and topo["se"] is None and topo["passes"] == "1 of 2" and topo["undefined"] == 1
    assert "| 0.300 | no relation (ρ = 0) 0.000 | 1 of 2 (1 undefined) | 0: 0.300, 1: – |" in table([topo])


def sraven_analysis(seed: int, centered: float, p_value: float) -> dict:
    test = {"centered_cosine": centered, "p_value": p_value, "mean_of_pairs": -0.14, "most_similar_other_pair": 0.6}
    return {
        "task": "sraven",
        "run": {"task": "sraven", "mixer": "hyla", "seed": seed, "path": f"hyla_s{seed}"},
        "topographic_similarity": {},
        "probes": {},
        "label_similarity": {
            "ood": {"layer 0": {"constant_codes": True}, "all layers": {"addition_subtraction": test}}
        },
    }


def test_addition_subtraction_passes_on_its_permutation_test_against_the_mean_of_all_pairs():
    [row] = summarize([sraven_analysis(0, 0.9, 1 / 28), sraven_analysis(1, 0.5, 3 / 28)])  # layer 0: undefined
    assert (row["measure"], row["code_set"], row["passes"]) == (ADDITION_SUBTRACTION, "all layers", "1 of 2")
    assert row["mean"] == pytest.approx(0.7) and row["baselines"] == pytest.approx(
        {"mean of all rule pairs": -0.14, "most similar other pair": 0.6}
    )


def test_every_column_of_the_summary_is_explained_beside_it(tmp_path):
    from hyla.analysis.latent_report import write_report

    analyses = [fuzzy_analysis("hyla", 0, 0.30, 0.001, 0.25), sraven_analysis(0, 0.9, 1 / 28)]
    text = write_report(analyses, tmp_path / "latent_summary")
    header = text.splitlines()[0].strip("| ").split(" | ")
    explained = text.split("Columns: ", 1)[1]
    assert [name for name in header if f"*{name.split(' (')[0]}*" not in explained] == []
    assert (tmp_path / "latent_summary.md").read_text() == text + "\n"
