"""The paper's Table A1, to set beside a table of runs (`hyla results --paper`).

OOD performance ×100, mean ± standard error over 3 seeds: R² on fuzzy logic (4 variables, 2 terms,
seq_len 32, 70% of the term combinations held out, 50k steps) and panel accuracy on SRAVEN (4
features, 4 layers, 20M examples). Rows: a mixer, or a mixer whose feedforward layers are mixtures of
experts.
"""

from __future__ import annotations

TABLE_A1: dict[str, dict[tuple[str, bool], tuple[float, float]]] = {
    # (mixer, mixture of experts): (mean, s.e.)
    "fuzzy_logic": {
        ("softmax", False): (63.28, 2.31),
        ("linear", False): (59.89, 5.22),
        ("hyla", False): (81.13, 7.77),
        ("linear_rms_head", False): (68.93, 5.10),
        ("hyla_no_rms_head", False): (81.27, 7.88),
        ("hyla_identity", False): (84.54, 5.32),
        ("hyla_identity_no_rms_head", False): (79.42, 7.43),
        ("softmax_hyla", False): (70.98, 7.08),
        ("softmax", True): (63.83, 6.07),
        ("linear", True): (60.09, 6.16),
        ("hyla", True): (82.37, 6.55),
    },
    "sraven": {
        ("softmax", False): (56.56, 1.05),
        ("linear", False): (56.30, 1.11),
        ("hyla", False): (69.13, 1.90),
        ("linear_rms_head", False): (59.01, 2.50),
        ("hyla_no_rms_head", False): (62.53, 5.73),
        ("hyla_identity", False): (56.54, 0.21),
        ("hyla_identity_no_rms_head", False): (56.33, 1.41),
        ("softmax_hyla", False): (38.21, 2.98),
        ("softmax", True): (57.68, 1.31),
        ("linear", True): (64.34, 4.30),
        ("hyla", True): (66.94, 3.94),
    },
}
TABLE_A1_METRIC = {"fuzzy_logic": "r2", "sraven": "acc"}
"""the metric Table A1 reports for each task (on the OOD split)"""


def table_a1(config: dict, metric: str) -> tuple[float, float] | None:
    """The paper's (mean, s.e.) ×100 for a run's flat config (task, model.mixer, model.num_experts) and
    metric on the OOD split; None where Table A1 has no such row."""
    task = config.get("task")
    if TABLE_A1_METRIC.get(task) != metric:
        return None
    return TABLE_A1[task].get((config.get("model.mixer"), bool(config.get("model.num_experts"))))
